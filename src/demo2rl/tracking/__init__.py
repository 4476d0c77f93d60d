"""Every MLflow call of demo2rl lives in this package.

One experiment per config (named by ``experiment``), one parent run per workflow invocation, one
child run per job. The modules, each with one job:

``store``     where runs go (the SQLite store under ``results/`` or ``MLFLOW_TRACKING_URI``),
              what the store's answers mean, and the experiment (created, restored if deleted,
              tagged as model training);
``workflow``  the workflow's parent run and each job's child run;
``run``       a job's run: params, metrics, tags, dataset inputs, artifacts;
``outbox``    the background sender: calls in order, buffered and retried while the store is
              unreachable, so that tracking trouble never loses training;
``lineage``   sidecars beside outputs recording which run produced which file.

The names below are the package's interface; callers import them from ``demo2rl.tracking``.
"""

from demo2rl.tracking.lineage import (
    forget_producer,
    record_producer,
    sidecar_path,
    upstream_runs,
)
from demo2rl.tracking.outbox import Outbox, RunMissing
from demo2rl.tracking.run import Run, flatten
from demo2rl.tracking.store import (
    EXPERIMENT_KIND_TAG,
    MODEL_TRAINING_KIND,
    ExperimentDeleted,
    configure_http,
    default_tracking_uri,
    ensure_active,
    ensure_experiment,
    is_permanent,
    mark_model_training,
    tracking_uri,
)
from demo2rl.tracking.workflow import (
    PARENT_ENV,
    child_run,
    end_workflow,
    log_figures,
    parent_run,
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
    "child_run",
    "configure_http",
    "default_tracking_uri",
    "end_workflow",
    "ensure_active",
    "ensure_experiment",
    "flatten",
    "forget_producer",
    "is_permanent",
    "log_figures",
    "mark_model_training",
    "parent_run",
    "provenance_tags",
    "record_producer",
    "sidecar_path",
    "start_workflow",
    "tracking_uri",
    "upstream_runs",
]
