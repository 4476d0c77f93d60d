"""Typed config sections for the tests that call the library directly, as a job would get them:
the schema's defaults (or the test config's values) with the given changes."""

from __future__ import annotations

from typing import Any

from conftest import TEST_CONFIG

from demo2rl import arms, config

DEFAULTS = config.load(None)
"""The schema's defaults: what config/config.yaml holds."""
TEST = config.load(TEST_CONFIG)
"""config/test.yaml, with the defaults it leaves out."""


def policy(**changes: Any) -> config.PolicyConfig:
    return config.PolicyConfig.of(DEFAULTS["policy"] | changes)


def bc(**changes: Any) -> config.BCConfig:
    return config.BCConfig.of(DEFAULTS["bc"] | changes)


def rl(init: str, base: dict[str, Any] = TEST, **changes: Any) -> config.RLConfig:
    """The ``rl`` section a run of arm ``init`` gets (its own arm section only), from ``base``
    with top-level ``changes`` (a nested section replaced whole)."""
    return config.RLConfig.of(arms.get(init).rl_slice(base["rl"] | changes))


def task(env_id: str, env_kwargs: dict[str, Any] | None = None, **expert: Any) -> config.TaskConfig:
    """A task; with ``expert`` (entry_point, kwargs) the expert too, else without (as the stages
    that only step the env get it)."""
    spec = {"env_id": env_id, "env_kwargs": env_kwargs or {}, "frame_stack": 1}
    if expert:
        spec["expert"] = {"kwargs": {}, "input": "observation"} | expert
    return config.TaskConfig.of(spec)
