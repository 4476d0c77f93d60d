"""Stage collect_shard: one contiguous range of demonstration episodes to an HDF5 shard."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl.demos import collect, dataset
from demo2rl.specs.collect_shard import CollectJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def collect_shard(job: CollectJob, run: Run) -> None:
    """Collect one shard of expert episodes and write it.

    ``job.envs`` (envs stepped as one batch) changes speed, never the episodes: each episode's
    seed is fixed by its index. ``job.codec`` compresses image observations (size and speed,
    never the data or its content hash).
    """
    demos = collect.collect_shard(
        task=job.task,
        base_seed=job.seed,
        episodes=collect.shard_episodes(job.collect.n_episodes, job.collect.n_shards, job.shard),
        n_envs=job.envs,
    )
    digest = dataset.write(job.out, demos, codec=job.codec)
    run.log_metrics(collect.dataset_metrics(demos))
    run.log_dataset(job.out, digest, context="collected")
