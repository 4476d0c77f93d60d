"""The dataset as a Minari dataset: the export_minari job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl.spec_fields import path, result


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportJob:
    """A variant's dataset written as a Minari dataset with Minari's own API (rule
    export_minari).

    :param dataset_id: the Minari id it is exported under.
    :param demos: the dataset.
    :param out: the Minari store directory it goes into (the dataset lies under it by its id).
    """

    STAGE: ClassVar[str] = "export"
    TASK_CODE: ClassVar[bool] = False
    dataset_id: str = result(derive="minari_dataset_id")
    demos: str = path()
    out: str = path(source="output")

    def run_name(self) -> str:
        return "export-minari"
