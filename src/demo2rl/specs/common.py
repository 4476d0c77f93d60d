"""What the specs share: the task a job gets, and the fields every variant-level job has."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from demo2rl.config import TaskConfig
from demo2rl.spec_fields import result, speed


def task(value: Mapping[str, Any], raw: Mapping[str, Any]) -> TaskConfig:
    """The job's task: its param (the config's task less ``timeout_s``) with the time limit on
    the task's code from the ``timeout_ms`` resource (robustness only, so it reruns nothing)."""
    return dataclasses.replace(TaskConfig.of(value), timeout_s=raw["timeout_ms"] / 1000)


def integer(value: Any, raw: Mapping[str, Any]) -> int:
    """A wildcard's value as the integer it names."""
    return int(value)


def seed() -> Any:
    """The workflow's base seed (every job's seeds derive from it)."""
    return result(lambda v, wc: v.config["seed"])


def timeout_ms(**kwargs: Any) -> Any:
    """The time limit on each call of the task's code, in milliseconds (robustness only)."""
    return speed(lambda v, wc: v.timeout_ms, **kwargs)


def bc_training(variant: Any) -> dict[str, Any]:
    """The ``bc`` section a clone's training reads: all but ``dagger`` (the rounds' own settings,
    which never rerun a clone)."""
    return {k: v for k, v in variant.config["bc"].items() if k != "dagger"}
