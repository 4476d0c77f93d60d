"""Every MLflow call of demo2rl lives here.

One experiment per config (named by ``experiment``), one parent run per workflow invocation, one
child run per job. The default store is a SQLite file under ``results/``, created once by the
Snakemake process before any job starts (parallel jobs racing to create it corrupt it).
``MLFLOW_TRACKING_URI`` points everything at a tracking server instead. The parent run reaches the
jobs through the environment: ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_ID`` (both MLflow's own)
and ``DEMO2RL_PARENT_RUN_ID``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import DatasetInput, Metric, Param, RunStatus, RunTag
from mlflow.tracking import MlflowClient

from demo2rl import provenance

log = logging.getLogger(__name__)

PARENT_ENV = "DEMO2RL_PARENT_RUN_ID"
MAX_PARAM_LENGTH = 6000
METRICS_PER_BATCH = 1000  # MLflow's limits for one log_batch call
PARAMS_PER_BATCH = 100  # (params and tags alike)


def default_tracking_uri(results_dir: str | os.PathLike[str] = "results") -> str:
    """``sqlite:///<absolute path>/mlflow.db`` under ``results_dir``."""
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def tracking_uri(results_dir: str | os.PathLike[str] = "results") -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the default store under ``results_dir``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(results_dir)


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config slice to MLflow params: ``{"a": {"b": 1}} -> {"a.b": "1"}``."""
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out |= flatten(value, f"{name}.")
        else:
            out[name] = str(value)[:MAX_PARAM_LENGTH]
    return out


def provenance_tags() -> dict[str, str]:
    """Code revision, dirty flag and package versions, as run tags."""
    rev = provenance.code_revision()
    tags = {"demo2rl.code_revision": str(rev["commit"]), "demo2rl.code_dirty": str(rev["dirty"])}
    tags |= {f"demo2rl.version.{k}": v for k, v in provenance.versions().items()}
    return tags


def start_workflow(
    experiment: str, config: Mapping[str, Any], results_dir: str | os.PathLike[str] = "results"
) -> str:
    """Create the store (once), the experiment and the parent run; export them to the jobs."""
    uri = tracking_uri(results_dir)
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = uri
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(
        experiment_id,
        run_name=f"workflow-{time.strftime('%Y%m%d-%H%M%S')}",
        tags={"demo2rl.stage": "workflow", **provenance_tags()},
    )
    _log_batch(client, run.info.run_id, params=flatten(config))
    os.environ["MLFLOW_EXPERIMENT_ID"] = experiment_id
    os.environ[PARENT_ENV] = run.info.run_id
    log.info("MLflow: experiment %r, parent run %s, store %s", experiment, run.info.run_id, uri)
    return run.info.run_id


def end_workflow(success: bool) -> None:
    """Mark the parent run of this invocation finished or failed."""
    run_id = os.environ.get(PARENT_ENV)
    if run_id:
        status = RunStatus.FINISHED if success else RunStatus.FAILED
        MlflowClient(tracking_uri()).set_terminated(run_id, RunStatus.to_string(status))


class Run:
    """The job's MLflow run: batched metric logging, params, artifacts and lineage."""

    def __init__(self, client: MlflowClient, run_id: str) -> None:
        self.client = client
        self.run_id = run_id

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log several metrics in one call (one row of a curve when ``step`` is given)."""
        ts = int(time.time() * 1000)
        batch = [Metric(k, float(v), ts, step or 0) for k, v in metrics.items()]
        _log_batch(self.client, self.run_id, metrics=batch)

    def log_params(self, params: Mapping[str, Any]) -> None:
        _log_batch(self.client, self.run_id, params=flatten(params))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        _log_batch(self.client, self.run_id, tags={k: str(v) for k, v in tags.items()})

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_dataset(self, path: str | os.PathLike[str], digest: str, context: str) -> None:
        """Record a demonstration dataset as an MLflow dataset input, with its content hash."""
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import InputTag

        with warnings.catch_warnings():  # "can be interpreted in multiple ways": all local files
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(Path(path).resolve()))
        entity = MetaDataset(source, name=Path(path).name, digest=digest[:36])._to_mlflow_entity()
        tags = [InputTag(key="mlflow.data.context", value=context)]
        self.client.log_inputs(self.run_id, [DatasetInput(entity, tags)])
        self.set_tags({"demo2rl.dataset_hash": digest})


@contextlib.contextmanager
def child_run(
    run_name: str,
    *,
    stage: str,
    rule: str,
    wildcards: Mapping[str, str],
    params: Mapping[str, Any],
) -> Iterator[Run]:
    """A run for one job: a child of the workflow's parent run when there is one."""
    uri = tracking_uri()
    client = MlflowClient(uri)
    parent = os.environ.get(PARENT_ENV)
    experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID")
    if experiment_id is None:
        log.warning("no workflow parent run (run outside Snakemake?): logging to a top-level run")
        experiment_id = client.get_experiment_by_name("Default").experiment_id
    tags = {
        "demo2rl.stage": stage,
        "demo2rl.rule": rule,
        **{f"demo2rl.wildcard.{k}": v for k, v in wildcards.items()},
        **provenance_tags(),
    }
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    handle = Run(client, run.info.run_id)
    handle.log_params(params)
    log.info("MLflow run %s (%s) in experiment %s", run.info.run_id, run_name, experiment_id)
    status = RunStatus.FAILED
    try:
        yield handle
        status = RunStatus.FINISHED
    finally:
        client.set_terminated(run.info.run_id, RunStatus.to_string(status))


def _log_batch(
    client: MlflowClient,
    run_id: str,
    *,
    metrics: list[Metric] | None = None,
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> None:
    metrics = metrics or []
    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in (tags or {}).items()]
    limits = (METRICS_PER_BATCH, PARAMS_PER_BATCH, PARAMS_PER_BATCH)
    lists = (metrics, param_list, tag_list)
    calls = max(1, *(math.ceil(len(x) / n) for x, n in zip(lists, limits, strict=True)))
    for i in range(calls):
        m, p, t = (x[i * n : (i + 1) * n] for x, n in zip(lists, limits, strict=True))
        client.log_batch(run_id, metrics=m, params=p, tags=t)
