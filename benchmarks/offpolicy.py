"""Off-policy update speed: SB3's SAC.train against demo2rl's FastSAC.train and its limit.

Gradient steps per second of ways of doing SB3 2.9's SAC update, on one CPU thread, with the
same networks (actor and critics alike), batch size, and a replay buffer of random transitions
of Racing-v0's observation and action spaces:

(a)  sb3         ``stable_baselines3.SAC.train`` (``MlpPolicy``: two ``ContinuousCritic`` MLPs);
(b)  ours        ``demo2rl.rl.sac.FastSAC.train`` as shipped (the step compiled);
(b') ours_eager  the same with ``compile_update=False``;
(c)  limit       (b)'s compiled step alone, in a bare loop over batches sampled (and their
                 noises drawn) beforehand: no replay buffer, no SB3 call, no logging.

Each is timed as SAC runs by default (one ``train(1)`` call per env step; ``--gradient-steps``
changes it) for ``--seconds`` in ``--rounds`` rounds alternating between them, after a warm-up;
the best round counts (another process on the machine slows some rounds, never speeds one up).
Figures: ``grad_steps_vs_sb3`` = (b) / (a), ``grad_steps_vs_limit`` = (b) / (c),
``eager_vs_sb3`` = (b') / (a), ``first_call_s`` (compiling; torch's on-disk cache may have
held it), for ``--net`` ([64, 64]; figures without a suffix) and ``--net-large`` ([256, 256];
suffixed ``_large``).

Then, for ``--net``: ``demo_mix_cost``, (b)'s gradient steps per second with rlpd's replay (half
of every batch from 50,000 demonstration transitions, 3-step returns) over the same with no
demonstrations (the sac control's replay); ``replay_mb_per_100k``, the peak resident memory a
replay of 100,000 Racing-v0 transitions adds once filled; and ``ppo_guard_cost``, a PPO run's
seconds with demo2rl's guards (the finite checks on env values and weights, the time limit on
every env call, the resume snapshot at every rollout start) over the same run of SB3's plain PPO
on the same native env without them, minus 1 (one run each, ``--ppo-steps`` env steps).

Writes ``results/bench/offpolicy.json``. Run: .venv/bin/python benchmarks/offpolicy.py
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from _common import machine, report
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecNormalize

import demo2rl.envs  # noqa: F401  (registers Racing-v0)
from demo2rl import arms, config
from demo2rl.learning import policy, vec
from demo2rl.rl import recipe, replay, resume_point, trainer
from demo2rl.rl.sac import FastSAC

ENV_ID = "Racing-v0"


def filled_model(
    cls: type[SAC], net: list[int], buffer_size: int, seed: int = 0, **kwargs: Any
) -> SAC:
    """A ``cls`` model on ``ENV_ID`` with ``net`` for actor and critics and a full replay buffer
    of random transitions (1% terminal)."""
    model = cls(
        "MlpPolicy",
        gym.make(ENV_ID),
        buffer_size=buffer_size,
        learning_starts=0,
        policy_kwargs={"net_arch": net},
        seed=seed,
        device="cpu",
        **kwargs,
    )
    model.set_logger(configure(None, []))
    rng = np.random.default_rng(seed)
    buffer = model.replay_buffer
    assert buffer is not None
    space = model.observation_space
    assert isinstance(space, gym.spaces.Box)
    low, high = np.broadcast_arrays(space.low, space.high)
    for key in ("observations", "next_observations"):
        getattr(buffer, key)[:] = rng.uniform(low, high, size=getattr(buffer, key).shape)
    buffer.actions[:] = rng.uniform(-1, 1, size=buffer.actions.shape)
    buffer.rewards[:] = rng.normal(size=buffer.rewards.shape)
    buffer.dones[:] = rng.random(buffer.dones.shape) < 0.01
    buffer.full = True
    return model


def timed(step: Callable[[], None], seconds: float) -> float:
    """Calls of ``step`` per second, over at least ``seconds``."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(10):
            step()
        calls += 10
    return calls / elapsed


def limit_step(model: FastSAC, batch_size: int, n_batches: int = 64) -> Callable[[], None]:
    """(c): ``model``'s gradient step (compiled as FastSAC compiles it) on batches sampled and
    preprocessed beforehand, with their Gaussian noises, cycled."""
    step, runs = model.step_function()
    tensors, states, lrs = step.tensors(), step.states(), step.learning_rates()
    tau = step.scalar(model.tau)
    ent_coef = model.ent_coef_tensor if model.log_ent_coef is None else None
    batches = []
    for _ in range(n_batches):
        batch = model.replay_buffer.sample(batch_size)
        discounts = torch.full_like(batch.rewards, model.gamma)
        noises = [torch.empty_like(batch.actions).normal_() for _ in range(2)]
        batches.append(((*batch[:5], discounts), *noises))
    cycle = itertools.cycle(batches)

    def call() -> None:
        data, noise, next_noise = next(cycle)
        runs["update_critics"](tensors, states, lrs, data, next_noise, tau, ent_coef)
        runs["update_actor"](tensors, states, lrs, data[0], noise, ent_coef)

    return call


def demo_mix_cost(net: list[int], args: argparse.Namespace) -> dict[str, float]:
    """(b) with rlpd's replay against (b) with the sac control's: best-of-rounds gradient steps
    per second, and their ratio ``demo_mix_cost``."""
    models = {}
    for name, fraction in (("plain", 0.0), ("mixed", 0.5)):
        kwargs = {"demo_fraction": fraction, "n_steps": 3, "gamma": 0.99}
        model = filled_model(
            FastSAC,
            net,
            args.buffer_size,
            replay_buffer_class=replay.DemoReplayBuffer,
            replay_buffer_kwargs=kwargs,
        )
        model.replay_buffer.set_demos(random_demos(model, 50_000))
        model.train(1, args.batch_size)  # compiled once (both share torch's cache)
        models[name] = model
    best = dict.fromkeys(models, 0.0)
    for model in models.values():
        timed(lambda m=model: m.train(1, args.batch_size), args.warmup)
    for _ in range(args.rounds):
        for name, model in models.items():
            rate = timed(lambda m=model: m.train(1, args.batch_size), args.seconds)
            best[name] = max(best[name], rate)
    return {
        "demo_mixed_grad_steps_per_s": best["mixed"],
        "demo_plain_grad_steps_per_s": best["plain"],
        "demo_mix_cost": best["mixed"] / best["plain"],
    }


def random_demos(model: SAC, n: int) -> replay.DemoTransitions:
    """``n`` demonstration steps of random observations in 100-step episodes (truncated)."""
    rng = np.random.default_rng(1)
    shape = model.observation_space.shape
    obs = rng.normal(size=(n, *shape)).astype(np.float32)
    lengths = np.full(n // 100, 100)
    return replay.demo_transitions(
        obs,
        rng.normal(size=(len(lengths), *shape)).astype(np.float32),
        rng.uniform(-1, 1, size=(n, model.action_space.shape[0])).astype(np.float32),
        rng.normal(size=n),
        np.zeros(n, dtype=bool),
        lengths,
        n_steps=3,
        gamma=0.99,
    )


def replay_memory(n: int = 100_000) -> dict[str, float]:
    """Resident memory (MB) that a filled replay of ``n`` Racing-v0 transitions adds (the
    process's resident set before and after; the benchmark's peak is already higher)."""
    env = gym.make(ENV_ID)
    before = resident_mb()
    buffer = replay.DemoReplayBuffer(n, env.observation_space, env.action_space, device="cpu")
    for name in replay.BUFFER_ARRAYS:
        getattr(buffer, name).fill(1)  # touch every page
    return {"replay_mb_per_100k": (resident_mb() - before) * 100_000 / n}


def resident_mb() -> float:
    """This process's resident set now, in MB (Linux's /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


class Snapshots(BaseCallback):
    """What demo2rl's trainer does at every rollout start, without evaluating or saving: check
    the update's losses, take the resume snapshot."""

    def _on_rollout_start(self) -> None:
        trainer.check_update(self.model)
        resume_point.capture(self.model)

    def _on_step(self) -> bool:
        return True


def ppo_guard_cost(steps: int) -> dict[str, float]:
    """One PPO run with demo2rl's guards and one of SB3's plain PPO without them (same native
    env, normalisation, hyperparameters and seed): seconds each, and the cost of the guards."""
    defaults = config.load(None)
    task = config.TaskConfig.of(
        {"env_id": ENV_ID, "env_kwargs": {}, "frame_stack": 1, "max_episode_steps": 10000}
        | {"timeout_s": defaults["task"]["timeout_s"]}
    )
    rl_section = arms.get("scratch").rl_slice(defaults["rl"])
    rl_cfg = config.RLConfig.of(rl_section | {"vec_env": "native", "device": "cpu"})
    space = gym.make(ENV_ID).observation_space
    stats = {"obs_mean": np.zeros(space.shape), "obs_std": np.ones(space.shape)}
    seconds = {}
    for guarded in (True, False):
        normalizer = policy.obs_transform(space, stats, 10.0)
        if guarded:
            env = recipe.make_training_env(
                task, rl_cfg, normalizer, gym.make(ENV_ID).action_space, 1
            )
        else:
            bare = vec.make_vec_env(ENV_ID, {}, rl_cfg.n_envs, "native")
            env = VecNormalize(bare, training=False, norm_reward=False, clip_obs=10.0)
            normalizer.apply_to(env)
        cls = recipe.GuidedPPO if guarded else PPO
        model = cls("MlpPolicy", env, seed=0, device="cpu", **rl_cfg.ppo.to_dict())
        start = time.perf_counter()
        model.learn(steps, callback=Snapshots() if guarded else None)
        seconds["guarded" if guarded else "bare"] = time.perf_counter() - start
        env.close()
    return {
        "ppo_guarded_s": seconds["guarded"],
        "ppo_bare_s": seconds["bare"],
        "ppo_guard_cost": seconds["guarded"] / seconds["bare"] - 1,
    }


def measure(net: list[int], args: argparse.Namespace) -> dict[str, float]:
    """Best-of-rounds gradient steps per second of (a), (b), (b') and (c) for ``net``, and the
    seconds of (b)'s first call (compiling included)."""
    sb3 = filled_model(SAC, net, args.buffer_size)
    ours = filled_model(FastSAC, net, args.buffer_size)
    eager = filled_model(FastSAC, net, args.buffer_size, compile_update=False)
    assert isinstance(ours, FastSAC) and isinstance(eager, FastSAC)
    start = time.perf_counter()
    ours.train(1, args.batch_size)
    first_call = time.perf_counter() - start
    g, b = args.gradient_steps, args.batch_size
    steps: dict[str, tuple[Callable[[], None], int]] = {
        "sb3": (lambda: sb3.train(g, b), g),
        "ours": (lambda: ours.train(g, b), g),
        "ours_eager": (lambda: eager.train(g, b), g),
        "limit": (limit_step(ours, b), 1),
    }
    for step, _ in steps.values():
        timed(step, args.warmup)
    best = dict.fromkeys(steps, 0.0)
    for _ in range(args.rounds):
        for name, (step, per_call) in steps.items():
            best[name] = max(best[name], per_call * timed(step, args.seconds))
    return {
        "sb3_grad_steps_per_s": best["sb3"],
        "ours_grad_steps_per_s": best["ours"],
        "grad_steps_vs_sb3": best["ours"] / best["sb3"],
        "limit_grad_steps_per_s": best["limit"],
        "grad_steps_vs_limit": best["ours"] / best["limit"],
        "ours_eager_grad_steps_per_s": best["ours_eager"],
        "eager_vs_sb3": best["ours_eager"] / best["sb3"],
        "first_call_s": first_call,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--net-large", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--buffer-size", type=int, default=50_000)
    parser.add_argument("--gradient-steps", type=int, default=1, help="per train() call")
    parser.add_argument("--seconds", type=float, default=1.0, help="per contender and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds per contender")
    parser.add_argument("--ppo-steps", type=int, default=300_000, help="env steps per PPO run")
    args = parser.parse_args()
    torch.set_num_threads(1)

    figures: dict[str, Any] = replay_memory()  # first: memory freed by later steps would hide it
    figures |= measure(args.net, args)
    large = measure(args.net_large, args)
    figures |= {f"{key}_large": value for key, value in large.items()}
    figures |= demo_mix_cost(args.net, args) | ppo_guard_cost(args.ppo_steps)
    figures |= {
        "ppo_steps": args.ppo_steps,
        "net": args.net,
        "net_large": args.net_large,
        "machine": machine(),
        "what": (
            f"SAC updates on {ENV_ID}'s spaces, nets {args.net} and {args.net_large} (actor and "
            f"critics), batch {args.batch_size}, buffer of {args.buffer_size} random "
            f"transitions, train({args.gradient_steps}) calls, 1 torch thread; best of "
            f"{args.rounds} rounds of {args.seconds} s each"
        ),
    }
    report("offpolicy", figures)


if __name__ == "__main__":
    main()
