"""Collecting expert demonstrations: one process steps a batch of envs, episodes by global index.

Episode ``e`` always gets seed ``demo_seed(base, e)`` and a shard takes a contiguous range of
episodes, so the merged dataset does not depend on the number of shards or on the batch size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from demo2rl import provenance, seeds, tasks
from demo2rl.demos import dataset, rollout

log = logging.getLogger(__name__)


def shard_episodes(n_episodes: int, n_shards: int, shard: int) -> range:
    """The contiguous range of global episode indices that shard ``shard`` collects."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} is outside [0, {n_shards})")
    size, extra = divmod(n_episodes, n_shards)
    start = shard * size + min(shard, extra)
    return range(start, start + size + (shard < extra))


def collect_shard(
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    expert_entry_point: str,
    expert_kwargs: Mapping[str, Any],
    base_seed: int,
    episodes: range,
    n_envs: int,
    frame_stack: int = 1,
    expert_input: str = rollout.OBSERVATION,
    max_episode_steps: int | None = None,
    timeout_s: float | None = None,
    progress_every_s: float = 10.0,
) -> dataset.Demos:
    """Collect the demonstration episodes ``episodes`` (global indices) as a shard dataset:
    the observations ``frame_stack`` stacked, the expert reading ``expert_input`` (the
    observations, or privileged ``info.<key>``), each episode cut at ``max_episode_steps``
    unless the task ends it sooner, and each env or expert call limited to ``timeout_s``
    (:func:`demo2rl.demos.rollout.run_episodes`)."""
    expert = tasks.load_expert(expert_entry_point, expert_kwargs)
    episode_seeds = [seeds.demo_seed(base_seed, e) for e in episodes]
    start = time.perf_counter()
    progress = progress_log(start, progress_every_s)

    steps, table, info = rollout.run_episodes(
        env_id,
        env_kwargs,
        expert,
        episode_seeds,
        n_envs=n_envs,
        on_progress=progress,
        episode_ids=episodes,  # errors name episodes by their global index
        frame_stack=frame_stack,
        policy_input=expert_input,
        max_episode_steps=max_episode_steps,
        timeout_s=timeout_s,
    )
    table["index"] = np.asarray(episodes, dtype=np.int64)
    probe = tasks.make_env(env_id, env_kwargs, frame_stack=frame_stack)
    attrs = dataset.episode_attrs(
        env_id=env_id,
        env_kwargs=dict(env_kwargs),
        env_spec=spec_json(probe),
        observation_space=probe.observation_space,
        action_space=probe.action_space,
        expert=expert_record(expert_entry_point, expert_kwargs, expert_input),
        base_seed=base_seed,
        first_episode=episodes.start,
        n_episodes=len(episodes),
        versions=provenance.versions(),
        code_revision=provenance.code_revision(),
    )
    probe.close()
    attrs["frame_stack"] = frame_stack  # (the stacked observation space is in the content hash)
    attrs["collect_seconds"] = time.perf_counter() - start
    return dataset.Demos(steps, table, info, attrs)


def progress_log(start: float, every_s: float) -> Callable[[int, int], None]:
    """``on_progress(done, total)`` of a rollout (:func:`demo2rl.demos.rollout.run_episodes`) that
    logs the episodes done every ``every_s`` seconds and at the end, timed from ``start``
    (``time.perf_counter``)."""
    last = start

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= every_s or done == total:
            last = now
            log.info(
                "episodes %d/%d (%.0f%%), %.1f s", done, total, 100 * done / total, now - start
            )

    return progress


def expert_record(entry_point: str, kwargs: Mapping[str, Any], expert_input: str) -> dict:
    """The dataset's ``expert`` attribute: the callable, its kwargs and (unless it reads the
    observations, as before privileged experts existed) what it reads."""
    record = {"entry_point": entry_point, "kwargs": dict(kwargs)}
    return record if expert_input == rollout.OBSERVATION else record | {"input": expert_input}


def dataset_metrics(demos: dataset.Demos) -> dict[str, float]:
    """Headline numbers of a dataset, logged by the collect and merge jobs: its size, the
    expert's return, and the collection speed (when the dataset records its collection time)."""
    returns = demos.episodes["return"]
    out = {
        "episodes": float(demos.n_episodes),
        "steps": float(demos.n_steps),
        "expert_return_mean": float(returns.mean()),
        "expert_return_std": float(returns.std()),
    }
    if demos.attrs.get("collect_seconds"):
        out["steps_per_s"] = demos.n_steps / demos.attrs["collect_seconds"]
    return out


def spec_json(env: Any) -> str:
    try:
        return env.spec.to_json()
    except (AttributeError, ValueError, TypeError):  # kwargs that are not JSON-serialisable
        return repr(env.spec)
