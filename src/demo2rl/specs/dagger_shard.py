"""One shard of a DAgger round's relabelled episodes: the dagger_shard job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.config import TaskConfig
from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common


@dataclasses.dataclass(frozen=True)
class RoundShards:
    """A DAgger round's episodes and the shard jobs they are split into (``bc.dagger``)."""

    episodes: int
    n_shards: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaggerShardJob:
    """One shard of DAgger round ``round``: the last round's clone and the expert drive (the
    expert with probability ``beta_decay ** round`` each step), the expert labels every state
    (rule dagger_shard).

    :param round: the round (1, 2, ...), the rule's ``round`` wildcard.
    :param shard: the shard's index among the round's.
    :param task: the env and its expert.
    :param dagger: ``bc.dagger.episodes`` and ``bc.dagger.n_shards``.
    :param beta_decay: ``bc.dagger.beta_decay``.
    :param seed: the workflow's base seed (the rounds' episode seeds derive from it).
    :param clone: the last round's clone (round 1: the plain clone).
    :param demos: the dataset (its episode count: the rounds' episodes are numbered after it).
    :param out: the shard.
    :param envs: envs stepped as one batch.
    :param codec: HDF5 compression of image observations.
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "dagger"
    TASK_CODE: ClassVar[bool] = True
    round: int = result(source="wildcards", of=common.integer)
    shard: int = result(source="wildcards", of=common.integer)
    task: TaskConfig = common.task()
    dagger: RoundShards = result(
        "bc.dagger.episodes", "bc.dagger.n_shards", of=common.typed(RoundShards)
    )
    beta_decay: float = result("bc.dagger.beta_decay")
    seed: int = common.seed()
    clone: str = path()
    demos: str = path()
    out: str = path(source="output")
    envs: int = speed("collect.n_envs")
    codec: str = speed("collect.codec")
    timeout_ms: int = common.timeout_ms()

    def run_name(self) -> str:
        return f"dagger-round{self.round}-shard{self.shard}"
