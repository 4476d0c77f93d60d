"""The run a job gets with ``tracking.enabled: false``: every call does nothing, and nothing
here imports MLflow (about 3 s of a job's start: its import and its SQLite store)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from demo2rl.tracking.lineage import forget_producer

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""


class Untracked:
    """Stands in for :class:`~demo2rl.tracking.run.Run`, with the methods the stages call."""

    run_id = None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        pass

    def log_figures(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        pass

    def log_arm(
        self,
        arm: str,
        *,
        variant: str,
        metrics: Mapping[str, float],
        curve: Mapping[str, Sequence[float]],
        inputs: Mapping[str, Sequence[str | os.PathLike[str]]],
    ) -> None:
        pass

    def log_dataset(self, path: str | os.PathLike[str], digest: str, context: str) -> None:
        pass

    @contextlib.contextmanager
    def parent(self) -> Iterator[None]:
        yield None


@contextlib.contextmanager
def untracked_run(outputs: Sequence[str | os.PathLike[str]] = ()) -> Iterator[Untracked]:
    """A job without tracking. The lineage records of a previous producer of ``outputs`` are
    removed all the same: they would name a run that did not write the new files."""
    forget_producer(outputs)
    yield Untracked()
