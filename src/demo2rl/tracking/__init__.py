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

The names below are the package's interface; callers import them from ``demo2rl.tracking``.
Each is imported from its module on first use (PEP 562): importing MLflow and opening its
SQLite store take about 3 s, which a job without tracking, or a process that only needs
``lineage``, never pays.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from demo2rl.tracking.lineage import (
        forget_producer,
        record_producer,
        sidecar_path,
        upstream_runs,
    )
    from demo2rl.tracking.outbox import Outbox, RunMissing
    from demo2rl.tracking.run import PARENT_ENV, Run, flatten
    from demo2rl.tracking.store import (
        EXPERIMENT_KIND_TAG,
        MODEL_TRAINING_KIND,
        ExperimentDeleted,
        StoreBusy,
        configure_http,
        default_tracking_uri,
        ensure_active,
        ensure_experiment,
        is_permanent,
        lock_store,
        mark_model_training,
        tracking_uri,
    )
    from demo2rl.tracking.untracked import Untracked, untracked_run
    from demo2rl.tracking.workflow import (
        child_run,
        end_workflow,
        provenance_tags,
        start_workflow,
    )

__all__ = [
    "EXPERIMENT_KIND_TAG",
    "MODEL_TRAINING_KIND",
    "PARENT_ENV",
    "ExperimentDeleted",
    "Outbox",
    "Run",
    "RunMissing",
    "StoreBusy",
    "Untracked",
    "child_run",
    "configure_http",
    "default_tracking_uri",
    "end_workflow",
    "ensure_active",
    "ensure_experiment",
    "flatten",
    "forget_producer",
    "is_permanent",
    "lock_store",
    "mark_model_training",
    "provenance_tags",
    "record_producer",
    "sidecar_path",
    "start_workflow",
    "tracking_uri",
    "untracked_run",
    "upstream_runs",
]

_HOME = {
    "EXPERIMENT_KIND_TAG": "store",
    "ExperimentDeleted": "store",
    "MODEL_TRAINING_KIND": "store",
    "Outbox": "outbox",
    "PARENT_ENV": "run",
    "Run": "run",
    "RunMissing": "outbox",
    "StoreBusy": "store",
    "Untracked": "untracked",
    "child_run": "workflow",
    "configure_http": "store",
    "default_tracking_uri": "store",
    "end_workflow": "workflow",
    "ensure_active": "store",
    "ensure_experiment": "store",
    "flatten": "run",
    "forget_producer": "lineage",
    "is_permanent": "store",
    "lock_store": "store",
    "mark_model_training": "store",
    "provenance_tags": "workflow",
    "record_producer": "lineage",
    "sidecar_path": "lineage",
    "start_workflow": "workflow",
    "tracking_uri": "store",
    "untracked_run": "untracked",
    "upstream_runs": "lineage",
}
"""Each name of the interface -> the module that defines it."""


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
