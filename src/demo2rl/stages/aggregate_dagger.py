"""Stage aggregate_dagger: every label so far, one dataset for a DAgger round's clone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl.demos import collect, dataset
from demo2rl.specs.aggregate_dagger import AggregateJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def aggregate_dagger(job: AggregateJob, run: Run) -> None:
    """Merge the last aggregate (round 1: the dataset) and the round's shards into the round's
    aggregate, with a split and statistics of its own, in bounded memory
    (:func:`demo2rl.demos.dataset.merge_files`: each input's content hash is checked as it is
    copied). The shards continue the episode numbering of the data they extend, so the merge's
    own checks (contiguous episodes, the same task, expert and seeds) hold."""
    inputs = [job.data, *job.shards]
    n_episodes = sum(int(dataset.read_attrs(p)["n_episodes"]) for p in inputs)
    digest = dataset.merge_files(
        inputs,
        job.out,
        n_episodes=n_episodes,
        valid_fraction=job.valid_fraction,
        codec=job.codec,
    )
    run.log_metrics(collect.dataset_metrics(dataset.read_tables(job.out)))
    run.log_dataset(job.out, digest, context=f"dagger-round{job.round}")
