"""Stage merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from demo2rl import collect, dataset
from demo2rl.tracking import Run


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
