"""Stage dagger_shard: one shard of a DAgger round, driven by the last clone and the expert,
every state labelled by the expert."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl.demos import collect, dataset
from demo2rl.learning import dagger
from demo2rl.specs.dagger_shard import DaggerShardJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def dagger_shard(job: DaggerShardJob, run: Run) -> None:
    """Run the shard's share of round ``job.round``'s episodes and write them as a dataset
    shard (:func:`demo2rl.learning.dagger.relabel_shard`). The round's episodes are numbered after
    the dataset's and the earlier rounds' (the same number each round), so that the round's
    aggregate is a plain merge. ``job.envs`` and ``job.codec`` change speed, never the data."""
    episodes, n_shards = job.dagger.episodes, job.dagger.n_shards
    n_demos = int(dataset.read_attrs(job.demos)["n_episodes"])
    demos = dagger.relabel_shard(
        task=job.task,
        learner=job.clone,
        round=job.round,
        episodes=collect.shard_episodes(episodes, n_shards, job.shard),
        base_seed=job.seed,
        first_index=n_demos + (job.round - 1) * episodes,
        beta=dagger.beta(job.round, job.beta_decay),
        n_envs=job.envs,
        demos=job.demos,
    )
    digest = dataset.write(job.out, demos, codec=job.codec)
    metrics = collect.dataset_metrics(demos)
    run.log_metrics(metrics | {"expert_calls": float(demos.attrs["expert_calls"])})
    run.log_dataset(job.out, digest, context=f"dagger-round{job.round}")
