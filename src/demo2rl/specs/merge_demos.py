"""The merged dataset: the merge_demos job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common


@dataclasses.dataclass(frozen=True)
class Split:
    """The dataset's episodes, and the fraction of them held out for validation
    (``collect``)."""

    n_episodes: int
    valid_fraction: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class MergeJob:
    """The shards merged into the dataset with its split, statistics and content hash (rule
    merge_demos).

    :param collect: ``collect.n_episodes`` and ``collect.valid_fraction``.
    :param shards: the shards, in order.
    :param out: the merged dataset.
    :param codec: HDF5 compression of image observations.
    """

    STAGE: ClassVar[str] = "merge"
    TASK_CODE: ClassVar[bool] = False
    collect: Split = result("collect.n_episodes", "collect.valid_fraction", of=common.typed(Split))
    shards: list[str] = path()
    out: str = path(source="output")
    codec: str = speed("collect.codec")

    def run_name(self) -> str:
        return "merge-demos"
