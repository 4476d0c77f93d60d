"""Lineage: which run produced a file, recorded in a small hidden sidecar beside it.

A job writes its run id beside each output (``.<name>.mlflow.json``, never part of an output's
content); a job consuming those files tags its run ``demo2rl.upstream.<stage>`` with the
producers' run ids.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from demo2rl import io

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

log = logging.getLogger(__package__)

MAX_TAG_LENGTH = 8000
"""MLflow's limit on a tag value."""


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """Where the producing run of ``path`` is recorded: ``.<name>.mlflow.json`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.mlflow.json")


def record_producer(
    outputs: Sequence[str | os.PathLike[str]], run_id: str, *, stage: str, run_name: str
) -> None:
    """Write the producing run beside each output (atomically)."""
    from demo2rl.tracking.store import tracking_uri  # MLflow: only jobs that track import it

    record = {
        "run_id": run_id,
        "stage": stage,
        "run_name": run_name,
        "tracking_uri": tracking_uri(),
    }
    for out in outputs:
        io.write_json(sidecar_path(out), record)


def forget_producer(outputs: Sequence[str | os.PathLike[str]]) -> None:
    """Remove the records of a previous producer of ``outputs`` (a rerun replaces them)."""
    for out in outputs:
        sidecar_path(out).unlink(missing_ok=True)


def upstream_runs(inputs: Sequence[str | os.PathLike[str]]) -> dict[str, list[str]]:
    """The runs that produced ``inputs``, by stage (inputs without a record are skipped)."""
    found: dict[str, list[str]] = {}
    for path in inputs:
        try:
            record = json.loads(sidecar_path(path).read_text())
        except (OSError, ValueError):
            log.info("no MLflow run recorded for input %s", path)
            continue
        ids = found.setdefault(record["stage"], [])
        if record["run_id"] not in ids:
            ids.append(record["run_id"])
    return found


def upstream_tags(inputs: Sequence[str | os.PathLike[str]]) -> dict[str, str]:
    """The run tags ``demo2rl.upstream.<stage>`` naming the runs that produced ``inputs``
    (:func:`ids_tag`)."""
    found = upstream_runs(inputs)
    return {f"demo2rl.upstream.{stage}": ids_tag(ids) for stage, ids in found.items()}


def ids_tag(ids: Sequence[str]) -> str:
    """Run ids as one tag value: comma-separated, cut short (with the count of runs) where
    MLflow's tag limit requires."""
    text = ",".join(ids)
    if len(text) > MAX_TAG_LENGTH:
        text = f"{text[: MAX_TAG_LENGTH - 40]},... ({len(ids)} runs)"
    return text
