"""The merged dataset: the merge_demos job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.spec_fields import path, result, speed


@dataclasses.dataclass(frozen=True, kw_only=True)
class MergeJob:
    """The shards merged into the dataset with its split, statistics and content hash (rule
    merge_demos).

    :param n_episodes: ``collect.n_episodes``, the dataset's episodes.
    :param valid_fraction: ``collect.valid_fraction``, the share of them held out for validation.
    :param shards: the shards, in order.
    :param out: the merged dataset.
    :param codec: HDF5 compression of image observations.
    """

    STAGE: ClassVar[str] = "merge"
    TASK_CODE: ClassVar[bool] = False
    n_episodes: int = result("collect.n_episodes")
    valid_fraction: float = result("collect.valid_fraction")
    shards: list[str] = path()
    out: str = path(source="output")
    codec: str = speed("collect.codec")

    def run_name(self) -> str:
        return "merge-demos"
