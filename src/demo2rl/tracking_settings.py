"""How a job treats tracking failures: the config's ``tracking`` slice as a rule param.

Its own module, free of MLflow imports, because every Snakemake process (each job, each dry run)
builds it while parsing the workflow, and importing MLflow takes seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Settings:
    """How tracking failures are treated: the config's ``tracking`` slice."""

    fail_on_error: bool = False

    @classmethod
    def of(cls, value: Settings | Mapping[str, Any] | None) -> Settings:
        """Settings from a rule's ``params.tracking`` (a Settings, a mapping, or nothing)."""
        if isinstance(value, Settings):
            return value
        return cls(**(value or {}))


def settings(config: Mapping[str, Any]) -> Settings:
    """The ``tracking`` slice of a workflow config, as a rule's ``params.tracking``.

    A dataclass rather than the plain dict on purpose: Snakemake leaves param values of other
    types out of its params rerun trigger, and switching ``fail_on_error`` cannot change a
    result, so it must rerun nothing (tests/test_rerun_matrix.py checks that it does not).
    """
    return Settings.of(config.get("tracking"))
