"""Stage merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl import collect, dataset

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def merge_demos(
    *, shards: list[str], out: str, n_episodes: int, valid_fraction: float, run: Run
) -> None:
    """Verify and merge the shards into the dataset with its split and statistics."""
    merged = dataset.merge(
        [dataset.read(path, verify=True) for path in shards],
        shards,
        n_episodes=n_episodes,
        valid_fraction=valid_fraction,
    )
    digest = dataset.write(out, merged)
    run.log_metrics(collect.dataset_metrics(merged))
    run.log_dataset(out, digest, context="merged")
