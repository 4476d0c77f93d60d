"""Stage collect_shard: one contiguous range of demonstration episodes to an HDF5 shard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl import collect, dataset
from demo2rl.config import TaskConfig

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def collect_shard(
    *,
    shard: int,
    out: str,
    task: TaskConfig,
    n_episodes: int,
    n_shards: int,
    seed: int,
    n_envs: int,
    codec: str,
    run: Run,
) -> None:
    """Collect one shard of expert episodes and write it.

    ``n_envs`` (envs stepped as one batch) changes speed, never the episodes: each episode's seed
    is fixed by its index. ``codec`` compresses image observations (size and speed, never the
    data or its content hash). Both are rule resources, not params, as is ``task.timeout_s``
    (each env or expert call's time limit: robustness only).
    """
    assert task.expert is not None, "collection needs the task's expert"
    demos = collect.collect_shard(
        env_id=task.env_id,
        env_kwargs=task.env_kwargs,
        expert_entry_point=task.expert.entry_point,
        expert_kwargs=task.expert.kwargs,
        base_seed=seed,
        episodes=collect.shard_episodes(n_episodes, n_shards, shard),
        n_envs=n_envs,
        frame_stack=task.frame_stack,
        expert_input=task.expert.input,
        max_episode_steps=task.max_episode_steps,
        timeout_s=task.timeout_s,
    )
    digest = dataset.write(out, demos, codec=codec)
    run.log_metrics(collect.dataset_metrics(demos))
    run.log_dataset(out, digest, context="collected")
