"""Stage collect_shard: one contiguous range of demonstration episodes to an HDF5 shard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from demo2rl import collect, dataset
from demo2rl.tracking import Run


def collect_shard(
    *,
    shard: int,
    out: str,
    task: Mapping[str, Any],
    collect_cfg: Mapping[str, Any],
    seed: int,
    n_envs: int,
    run: Run,
) -> None:
    """Collect one shard of expert episodes and write it.

    ``n_envs`` (envs stepped as one batch) changes speed, never the episodes: each episode's seed
    is fixed by its index, so it is a rule resource, not part of ``collect_cfg``.
    """
    demos = collect.collect_shard(
        env_id=task["env_id"],
        env_kwargs=task["env_kwargs"],
        expert_entry_point=task["expert"]["entry_point"],
        expert_kwargs=task["expert"]["kwargs"],
        base_seed=seed,
        episodes=collect.shard_episodes(collect_cfg["n_episodes"], collect_cfg["n_shards"], shard),
        n_envs=n_envs,
    )
    digest = dataset.write(out, demos)
    run.log_metrics(collect.summary(demos))
    run.log_dataset(out, digest, context="collected")
