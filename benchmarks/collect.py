"""Collection speed: our batched path against its limit and against the design it replaces.

(a) limit: the batched env stepped by the batched expert, nothing recorded;
(b) ours: demo2rl.demos.collect.collect_shard + dataset.write (HDF5), the rule's code path;
(c) naive: a multiprocessing.Pool with one task per episode, each stepping a single
    gymnasium.Env with the expert called per step, appending to lists, then saving to HDF5;
(d) scaling: 2 shards in 2 processes against 1 shard in 1 process, same episodes.
ours_vs_naive compares like for like: our 2 shards on 2 processes against the naive 2-worker pool.
Figures go to results/bench/collect.json. Run: .venv/bin/python benchmarks/collect.py
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
from _common import machine, report
from gymnasium.vector import AutoresetMode

from demo2rl import seeds, tasks
from demo2rl.config import TaskConfig
from demo2rl.demos import collect, dataset

ENV_ID = "Racing-v0"
EXPERT = "demo2rl.experts.racing:pure_pursuit"
TASK = TaskConfig.of(
    {
        "env_id": ENV_ID,
        "env_kwargs": {},
        "frame_stack": 1,
        "expert": {"entry_point": EXPERT, "kwargs": {}, "input": "observation"},
    }
)
"""The racing task and its expert, without an episode cap (the env's own) or a time limit."""


def limit(n_episodes: int, n_envs: int) -> float:
    """Steps/s of env + expert alone: rounds of n_envs episodes to the step limit, nothing kept."""
    expert = tasks.load_expert(EXPERT)
    env = tasks.make_vector_env(ENV_ID, {}, n_envs, AutoresetMode.DISABLED)
    steps, start = 0, time.perf_counter()
    for r in range(n_episodes // n_envs):
        obs, _ = env.reset(seed=[seeds.demo_seed(0, r * n_envs + i) for i in range(n_envs)])
        done = np.zeros(n_envs, bool)
        while not done.all():  # every car runs one whole episode (they all hit the step limit)
            obs, _, term, trunc, _ = env.step(expert(obs))
            done |= term | trunc
            steps += n_envs
    return steps / (time.perf_counter() - start)


def _collect(episodes: range, n_envs: int) -> dataset.Demos:
    """Our collection path, as the collect_shard rule runs it."""
    return collect.collect_shard(task=TASK, base_seed=0, episodes=episodes, n_envs=n_envs)


def ours(n_episodes: int, n_envs: int, out: Path) -> float:
    start = time.perf_counter()
    demos = _collect(range(n_episodes), n_envs)
    dataset.write(out, demos)
    return demos.n_steps / (time.perf_counter() - start)


def _naive_episode(episode: int) -> tuple[list, list, list]:
    env = gym.make(ENV_ID)
    expert = tasks.load_expert(EXPERT)
    obs, _ = env.reset(seed=seeds.demo_seed(0, episode))
    observations, actions, rewards = [], [], []
    done = False
    while not done:
        action = expert(obs[None])[0]
        observations.append(obs)
        actions.append(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        rewards.append(reward)
        done = terminated or truncated
    return observations, actions, rewards


def naive(n_episodes: int, workers: int, out: Path) -> float:
    start = time.perf_counter()
    with mp.get_context("fork").Pool(workers) as pool:
        episodes = pool.map(_naive_episode, range(n_episodes), chunksize=1)
    with h5py.File(out, "w") as f:
        for key, i in (("observations", 0), ("actions", 1), ("rewards", 2)):
            f[key] = np.concatenate([np.asarray(ep[i]) for ep in episodes])
    n_steps = sum(len(ep[2]) for ep in episodes)
    return n_steps / (time.perf_counter() - start)


def _shard(args: tuple[int, int, int]) -> int:
    n_episodes, n_shards, shard = args
    demos = _collect(collect.shard_episodes(n_episodes, n_shards, shard), 16)
    return demos.n_steps


def shards_speed(n_episodes: int, n_shards: int, pool: ProcessPoolExecutor) -> float:
    start = time.perf_counter()
    steps = sum(pool.map(_shard, [(n_episodes, n_shards, k) for k in range(n_shards)]))
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--n-envs", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ours(args.n_envs, args.n_envs, tmp / "warmup.h5")  # imports, first-call costs
        a = limit(args.episodes, args.n_envs)
        b = ours(args.episodes, args.n_envs, tmp / "ours.h5")
        c = naive(args.episodes, args.workers, tmp / "naive.h5")
    with ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as pool:
        list(pool.map(_shard, [(4, 2, 0), (4, 2, 1)]))  # warm both workers
        one = shards_speed(args.episodes, 1, pool)
        two = shards_speed(args.episodes, 2, pool)
    report(
        "collect",
        {
            "limit_steps_per_s": a,
            "ours_steps_per_s": b,
            "naive_steps_per_s": c,
            "ours_vs_limit": b / a,
            # like for like: our shards on as many worker processes as the naive pool has
            "ours_vs_naive": two / c,
            "ours_one_process_vs_naive": b / c,
            "scaling_2_vs_1": two / one,
            "one_shard_steps_per_s": one,
            "two_shards_steps_per_s": two,
            "machine": machine(),
            "what": (
                f"{ENV_ID} with {EXPERT}, {args.episodes} episodes; (a)/(b) one process, batch of "
                f"{args.n_envs} envs; (c) multiprocessing.Pool({args.workers}), one task per "
                "episode, single env + per-step expert; scaling: ProcessPoolExecutor(2)"
            ),
        },
    )


if __name__ == "__main__":
    main()
