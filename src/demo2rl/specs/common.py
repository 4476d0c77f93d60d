"""What the specs share: the task a job gets, and the fields every variant-level job has."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from demo2rl.config import TaskConfig
from demo2rl.spec_fields import Converter, result, speed


def task_config(value: Mapping[str, Any], raw: Mapping[str, Any]) -> TaskConfig:
    """The job's task: its param (the config's task less ``timeout_s``) with the time limit on
    the task's code from the ``timeout_ms`` resource (robustness only, so it reruns nothing)."""
    return dataclasses.replace(TaskConfig.of(value), timeout_s=raw["timeout_ms"] / 1000)


def typed(section: type) -> Converter:
    """A converter of a config section's mapping (or a slice of one) to its typed record: the
    record's ``of`` where it has one (a config section's), else its constructor."""

    def convert(value: Any, raw: Mapping[str, Any]) -> Any:
        return section.of(value) if hasattr(section, "of") else section(**value)

    return convert


def integer(value: Any, raw: Mapping[str, Any]) -> int:
    """A wildcard's value as the integer it names."""
    return int(value)


ENV = ("task.env_id", "task.env_kwargs", "task.frame_stack", "task.max_episode_steps")
"""The task without its expert: what a job that only steps the env reads."""


def seed() -> Any:
    """The workflow's base seed (every job's seeds derive from it)."""
    return result("seed")


def task() -> Any:
    """The task, its expert included, less ``timeout_s`` (the ``timeout_ms`` resource)."""
    return result("task", omit=("timeout_s",), of=task_config)


def timeout_ms(**kwargs: Any) -> Any:
    """The time limit on each call of the task's code, in milliseconds (robustness only): a
    resource, an integer (Snakemake would round a float one to whole seconds)."""
    return speed("task.timeout_s", derive="timeout_ms", **kwargs)
