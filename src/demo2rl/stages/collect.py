"""Stages collect_shard and merge_demos."""

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
    run: Run,
) -> None:
    """Collect one shard of expert episodes and write it."""
    demos = collect.collect_shard(
        env_id=task["env_id"],
        env_kwargs=task["env_kwargs"],
        expert_entry_point=task["expert"]["entry_point"],
        expert_kwargs=task["expert"]["kwargs"],
        base_seed=seed,
        episodes=collect.shard_episodes(collect_cfg["n_episodes"], collect_cfg["n_shards"], shard),
        n_envs=collect_cfg["n_envs"],
    )
    digest = dataset.write(out, demos)
    run.log_metrics(collect.summary(demos))
    run.log_dataset(out, digest, context="collected")


def merge_demos(*, shards: list[str], out: str, collect_cfg: Mapping[str, Any], run: Run) -> None:
    """Verify and merge the shards into the dataset with its split and statistics."""
    merged = dataset.merge(
        [dataset.read(path, verify=True) for path in shards],
        shards,
        n_episodes=collect_cfg["n_episodes"],
        valid_fraction=collect_cfg["valid_fraction"],
    )
    digest = dataset.write(out, merged)
    run.log_metrics(collect.summary(merged))
    run.log_dataset(out, digest, context="merged")
