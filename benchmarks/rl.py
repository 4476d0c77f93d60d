"""RL speed: the native batched VecEnv against SB3's DummyVecEnv and SubprocVecEnv.

Raw stepping with random actions at n_envs=16 for (a) demo2rl's native RacingVecEnv, (b) SB3's
DummyVecEnv of single RacingEnv, (c) SB3's SubprocVecEnv (one process per env); then PPO training
throughput (env steps/s, rollouts and updates included) with native vs DummyVecEnv.
Figures go to results/bench/rl.json. Run: .venv/bin/python benchmarks/rl.py
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from _common import machine, report
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

import demo2rl.envs  # noqa: F401  (registers Racing-v0)
from demo2rl.envs.sb3 import RacingVecEnv

ENV_ID = "Racing-v0"


def make(kind: str, n_envs: int) -> VecEnv:
    if kind == "native":
        return RacingVecEnv(n_envs)
    fns = [lambda: gym.make(ENV_ID) for _ in range(n_envs)]
    return DummyVecEnv(fns) if kind == "dummy" else SubprocVecEnv(fns, start_method="fork")


def raw_steps_per_s(kind: str, n_envs: int, seconds: float) -> float:
    env = make(kind, n_envs)
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(256, n_envs, 2)).astype(np.float32)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a in actions[:32]:
            env.step(a)
        steps += 32 * n_envs
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def ppo_fps(kind: str, n_envs: int, timesteps: int) -> float:
    torch.set_num_threads(1)
    env = make(kind, n_envs)
    model = PPO("MlpPolicy", env, n_steps=256, batch_size=512, n_epochs=10, seed=0, device="cpu")
    model.learn(2 * 256 * n_envs)  # warm-up: first-call costs
    start = time.perf_counter()
    model.learn(timesteps, reset_num_timesteps=False)
    rate = timesteps / (time.perf_counter() - start)
    env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-envs", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0, help="per raw-stepping measurement")
    parser.add_argument("--ppo-steps", type=int, default=65536)
    args = parser.parse_args()
    n = args.n_envs
    native, dummy, subproc = (
        raw_steps_per_s(k, n, args.seconds) for k in ("native", "dummy", "subproc")
    )
    ppo_native, ppo_dummy = (ppo_fps(k, n, args.ppo_steps) for k in ("native", "dummy"))
    report(
        "rl",
        {
            "native_raw_steps_per_s": native,
            "dummy_raw_steps_per_s": dummy,
            "subproc_raw_steps_per_s": subproc,
            "native_vs_dummy": native / dummy,
            "native_vs_subproc": native / subproc,
            "ppo_fps_native": ppo_native,
            "ppo_fps_dummy": ppo_dummy,
            "ppo_native_vs_dummy": ppo_native / ppo_dummy,
            "machine": machine(),
            "what": (
                f"{ENV_ID}, n_envs={n}, random actions for {args.seconds:.0f} s per VecEnv; PPO "
                f"(n_steps=256, batch 512, 10 epochs, 1 torch thread) for {args.ppo_steps} steps"
            ),
        },
    )


if __name__ == "__main__":
    main()
