"""Every MLflow call of demo2rl lives in this package.

One experiment per config (named by ``experiment``), one parent run per workflow invocation, one
child run per job. The modules, each with one job:

``store``     where runs go (the SQLite store under ``results/`` or ``MLFLOW_TRACKING_URI``),
              what the store's answers mean, and the experiment (created, restored if deleted,
              tagged as model training);
``workflow``  the workflow's parent run and each job's child run;
``run``       a job's run: params, metrics, tags, dataset inputs, artifacts, figures;
``outbox``    the background sender: calls in order, buffered and retried while the store is
              unreachable, so that tracking trouble never loses training;
``lineage``   sidecars beside outputs recording which run produced which file;
``arms``      the arm-level runs of a summary (one per RL arm, replacing the previous one) and
              the experiment's view of them in the UI;
``ui``        the links to that view that ``make ui`` prints;
``untracked`` the run of a job with ``tracking.enabled: false``, which does nothing.

The names below are the package's interface to the workflow (the stages, scripts and rules
import them from ``demo2rl.tracking``); everything else is reached through its module
(``demo2rl.tracking.store``, ``.lineage``, ...).
Each is imported from its module on first use (PEP 562): importing MLflow and opening its
SQLite store take about 3 s, which a job without tracking, or a process that only needs
``lineage``, never pays.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from demo2rl.tracking.outbox import Outbox
    from demo2rl.tracking.run import PARENT_ENV, Run
    from demo2rl.tracking.store import default_tracking_uri, tracking_uri
    from demo2rl.tracking.untracked import Untracked, untracked_run
    from demo2rl.tracking.workflow import child_run, end_workflow, start_workflow

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

__all__ = [
    "PARENT_ENV",
    "Outbox",
    "Run",
    "Untracked",
    "child_run",
    "default_tracking_uri",
    "end_workflow",
    "start_workflow",
    "tracking_uri",
    "untracked_run",
]

_HOME = {
    "Outbox": "outbox",
    "PARENT_ENV": "run",
    "Run": "run",
    "Untracked": "untracked",
    "child_run": "workflow",
    "default_tracking_uri": "store",
    "end_workflow": "workflow",
    "start_workflow": "workflow",
    "tracking_uri": "store",
    "untracked_run": "untracked",
}
"""Each name of the interface -> the module that defines it."""


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
