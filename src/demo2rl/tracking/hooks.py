"""The workflow's start and end hooks (rules/common.smk's ``onstart``, ``onsuccess``,
``onerror``): the MLflow store created and the parent run started once, before any job (jobs
racing to create a SQLite store corrupt it; the jobs find both through the environment), and
the parent run ended. With ``tracking.enabled: false`` nothing here imports MLflow (its import
takes seconds, and every dry run parses the workflow)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from demo2rl.config import TrackingConfig

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""


def on_start(
    experiment: str, config: Mapping[str, Any], settings: TrackingConfig, log: logging.Logger
) -> None:
    """Create the store, the experiment and this invocation's parent run (tracking on)."""
    if not settings.enabled:
        log.info("MLflow tracking off (tracking.enabled: false)")
        return
    from demo2rl.tracking.store import tracking_uri
    from demo2rl.tracking.workflow import start_workflow

    parent = start_workflow(experiment, config, settings)
    if parent:
        log.info(f"MLflow: parent run {parent} in {tracking_uri()}")


def on_end(success: bool, settings: TrackingConfig) -> None:
    """Mark the parent run finished or failed (tracking on)."""
    if settings.enabled:
        from demo2rl.tracking.workflow import end_workflow

        end_workflow(success=success, settings=settings)
