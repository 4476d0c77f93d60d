"""A DAgger round's aggregate: the aggregate_dagger job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregateJob:
    """Every label so far: the last aggregate (round 1: the dataset) and the round's shards,
    merged with a split and statistics of their own (rule aggregate_dagger).

    :param round: the round, the rule's ``round`` wildcard.
    :param valid_fraction: ``collect.valid_fraction`` (the aggregate's split).
    :param data: the dataset or the last round's aggregate.
    :param shards: the round's shards, in order.
    :param out: the aggregate.
    :param codec: HDF5 compression of image observations.
    """

    STAGE: ClassVar[str] = "aggregate"
    TASK_CODE: ClassVar[bool] = False
    round: int = result(source="wildcards", of=common.integer)
    valid_fraction: float = result("collect.valid_fraction")
    data: str = path()
    shards: list[str] = path()
    out: str = path(source="output")
    codec: str = speed("collect.codec")

    def run_name(self) -> str:
        return f"dagger-round{self.round}-aggregate"
