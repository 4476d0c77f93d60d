"""Stage merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl import collect, dataset

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def merge_demos(
    *,
    shards: list[str],
    out: str,
    n_episodes: int,
    valid_fraction: float,
    codec: str,
    run: Run,
) -> None:
    """Verify and merge the shards into the dataset with its split and statistics.

    The shards stream into ``out`` block by block (:func:`demo2rl.dataset.merge_files`): memory
    stays at a few blocks of frames whatever the dataset's size. ``codec`` compresses image
    observations; it changes size and speed, never the data or its content hash, so it is a rule
    resource, not a param.
    """
    digest = dataset.merge_files(
        shards, out, n_episodes=n_episodes, valid_fraction=valid_fraction, codec=codec
    )
    run.log_metrics(collect.dataset_metrics(dataset.read_tables(out)))
    run.log_dataset(out, digest, context="merged")
