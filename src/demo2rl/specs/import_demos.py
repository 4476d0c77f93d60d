"""A dataset imported instead of collected: the import_demos job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.config import TaskConfig
from demo2rl.demos.sources import Source
from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportJob:
    """An existing dataset (``collect.source``: a Minari dataset or a demo2rl HDF5 file) written
    as the experiment's dataset, with its split, statistics and content hash (rule
    import_demos).

    :param source: ``collect.source`` as the config gives it.
    :param env: the task's env, without its expert and time limit (its id and kwargs are the
        dataset's task; its spaces are checked against the dataset's).
    :param valid_fraction: ``collect.valid_fraction``.
    :param seed: the workflow's base seed (the split of a dataset without one of its own).
    :param data: the source as the plan resolved it: its kind (``minari`` or ``hdf5``) and its
        file, or a Minari dataset's directory (``minari:<id>`` in the local store of the
        planning machine).
    :param files: the files the source holds: the rule's inputs, so that a change to any of
        them reruns the import.
    :param out: the dataset.
    :param codec: HDF5 compression of image observations.
    """

    STAGE: ClassVar[str] = "import"
    TASK_CODE: ClassVar[bool] = True
    source: str = result("collect.source")
    env: TaskConfig = result(*common.ENV, of=common.typed(TaskConfig))
    valid_fraction: float = result("collect.valid_fraction")
    seed: int = common.seed()
    data: Source = path(derive="import_source", source="params", of=common.typed(Source))
    files: list[str] = path()
    out: str = path(source="output")
    codec: str = speed("collect.codec")

    def run_name(self) -> str:
        return "import-demos"
