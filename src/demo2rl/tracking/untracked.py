"""The run a job gets with ``tracking.enabled: false``: every call does nothing, and nothing
here imports MLflow (about 3 s of a job's start: its import and its SQLite store)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from demo2rl.tracking.lineage import forget_producer

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

STAGE_CALLS = frozenset(
    {"log_metrics", "set_tags", "log_artifact", "log_figures", "log_arm", "log_dataset"}
)
"""The calls of :class:`~demo2rl.tracking.run.Run` that a job's stage and the runner around it
make, with Run's signatures (declared there, once): an untracked run takes each and does
nothing. (tests/test_tracking.py holds this set to Run's methods and to the calls made.)"""


class Untracked:
    """Stands in for :class:`~demo2rl.tracking.run.Run`: each of :data:`STAGE_CALLS` does
    nothing, and :meth:`parent` has no parent run."""

    run_id = None

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name in STAGE_CALLS:
            return _nothing
        raise AttributeError(
            f"an untracked run has no {name!r}: it takes {', '.join(sorted(STAGE_CALLS))} and "
            "parent() (demo2rl.tracking.untracked.STAGE_CALLS)"
        )

    @contextlib.contextmanager
    def parent(self) -> Iterator[None]:
        yield None


def _nothing(*args: Any, **kwargs: Any) -> None:
    """A tracked call, untracked."""


@contextlib.contextmanager
def untracked_run(outputs: Sequence[str | os.PathLike[str]] = ()) -> Iterator[Untracked]:
    """A job without tracking. The lineage records of a previous producer of ``outputs`` are
    removed all the same: they would name a run that did not write the new files."""
    forget_producer(outputs)
    yield Untracked()
