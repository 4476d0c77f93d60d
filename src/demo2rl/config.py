"""Checks of a workflow config beyond its JSON schema, each naming the offending key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from demo2rl import seeds, tasks


class ConfigError(ValueError):
    """A config value that cannot work; the message starts with the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config key {key!r}: {problem}")
        self.key = key


def canonical(value: Any) -> Any:
    """``value`` with the keys of every mapping in sorted order.

    Snakemake compares params by their text, so without this, reordering keys in a config file
    (or writing it with another tool) would rerun every job.
    """
    if isinstance(value, Mapping):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def check(config: Mapping[str, Any]) -> None:
    """Raise ConfigError for the first value the workflow cannot use (after schema validation)."""
    task = config["task"]
    try:
        tasks.env_spec(task["env_id"])
    except tasks.TaskError as err:
        raise ConfigError("task.env_id", str(err)) from None
    try:
        tasks.load_expert(task["expert"]["entry_point"], task["expert"].get("kwargs"))
    except tasks.TaskError as err:
        raise ConfigError("task.expert.entry_point", str(err)) from None
    collect = config["collect"]
    if collect["n_shards"] > collect["n_episodes"]:
        raise ConfigError(
            "collect.n_shards",
            f"{collect['n_shards']} shards for {collect['n_episodes']} episodes leave some empty",
        )
    if collect["n_episodes"] > seeds.BLOCK:
        raise ConfigError("collect.n_episodes", f"at most {seeds.BLOCK} episodes")
