"""Stage merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl.demos import collect, dataset
from demo2rl.specs.merge_demos import MergeJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def merge_demos(job: MergeJob, run: Run) -> None:
    """Verify and merge the shards into the dataset with its split and statistics.

    The shards stream into ``out`` block by block (:func:`demo2rl.demos.dataset.merge_files`):
    memory stays at a few blocks of frames whatever the dataset's size. ``job.codec`` compresses
    image
    observations; it changes size and speed, never the data or its content hash.
    """
    digest = dataset.merge_files(
        job.shards,
        job.out,
        n_episodes=job.collect.n_episodes,
        valid_fraction=job.collect.valid_fraction,
        codec=job.codec,
    )
    run.log_metrics(collect.dataset_metrics(dataset.read_tables(job.out)))
    run.log_dataset(job.out, digest, context="merged")
