"""One shard of expert episodes: the collect_shard job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.config import TaskConfig
from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common


@dataclasses.dataclass(frozen=True)
class Shards:
    """The dataset's episodes and the shard jobs they are split into (``collect``)."""

    n_episodes: int
    n_shards: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollectJob:
    """One shard of expert episodes (rule collect_shard).

    :param shard: the shard's index (its episodes are a contiguous range of indices).
    :param task: the env and its expert.
    :param collect: ``collect.n_episodes`` and ``collect.n_shards``.
    :param seed: the workflow's base seed (each episode's seed derives from it and its index).
    :param out: the shard's HDF5 file.
    :param envs: envs stepped as one batch (every episode's seed is fixed by its index).
    :param codec: HDF5 compression of image observations (size and speed; the hash covers the
        data).
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "collect"
    TASK_CODE: ClassVar[bool] = True
    shard: int = result(source="wildcards", of=common.integer)
    task: TaskConfig = common.task()
    collect: Shards = result("collect.n_episodes", "collect.n_shards", of=common.typed(Shards))
    seed: int = common.seed()
    out: str = path(source="output")
    envs: int = speed("collect.n_envs")
    codec: str = speed("collect.codec")
    timeout_ms: int = common.timeout_ms()

    def run_name(self) -> str:
        return f"collect-shard{self.shard}"
