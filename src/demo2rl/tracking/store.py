"""Where runs go, what the store's answers mean, and the experiment they go to.

The default store is a SQLite file under ``results/``, with the artifacts beside it in
``results/mlartifacts`` (``MLFLOW_TRACKING_URI`` points everything at a tracking server
instead). The experiment is tagged as a model-training one (:data:`EXPERIMENT_KIND_TAG`); one
deleted in the UI (MLflow's trash) is restored with a warning that says how to delete it for
good, and one that cannot be restored is an error naming it.

Creating a SQLite store (MLflow's migrations) from two processes at once corrupts it, so whoever
opens the workflow's store first holds a file lock beside it (:func:`lock_store`): two
invocations of the workflow (two experiments) sharing one ``results/`` take turns.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from mlflow.entities import Experiment, LifecycleStage
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import BAD_REQUEST
from mlflow.tracking import MlflowClient

from demo2rl import locks
from demo2rl.config import TrackingConfig

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

log = logging.getLogger(__package__)  # one logger for the package: job logs say demo2rl.tracking

HTTP_TIMEOUT_S = 10
"""Per-request timeout of MLflow's HTTP client in jobs (MLflow's default is 120 s)."""
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""The experiment tag that picks the MLflow UI's view of an experiment (MLflow 3.x)."""
MODEL_TRAINING_KIND = "custom_model_development"
"""Its value for model training (as opposed to GenAI development)."""
STORE_LOCK_WAIT_S = 300.0
"""How long a workflow's start waits for another one to finish creating or opening the SQLite
store (a fresh store's migrations take seconds; on a loaded machine, tens of seconds)."""


def default_tracking_uri(results_dir: str | os.PathLike[str] = "results") -> str:
    """``sqlite:///<absolute path>/mlflow.db`` under ``results_dir``."""
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def tracking_uri(results_dir: str | os.PathLike[str] = "results") -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the default store under ``results_dir``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(results_dir)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI; None for any other store."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


class StoreBusy(RuntimeError):
    """Another process has held the SQLite store's lock for longer than the wait."""


@contextlib.contextmanager
def lock_store(uri: str, purpose: str, wait: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the SQLite store of ``uri`` (the file ``<db>.lock`` beside it)
    while creating or opening it: MLflow creates a missing store's tables, and upgrades none
    concurrently safely, in whichever process opens it first. Nothing to lock for a server.

    :func:`demo2rl.locks.exclusive`: it goes with its process, however that ends; the lock file
    names its holder (``purpose``, pid, host, since); a process that waits longer than ``wait``
    seconds (default :data:`STORE_LOCK_WAIT_S`) fails with :class:`StoreBusy` naming it.
    """
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    wait = STORE_LOCK_WAIT_S if wait is None else wait
    lock_path = db.with_name(f"{db.name}.lock")

    def busy(holder: str) -> StoreBusy:
        return StoreBusy(
            f"MLflow store {db} is being created or opened by another process ({holder}), "
            f"still after {wait:.0f} s (lock file {lock_path}). It holds the lock only while it "
            "creates or opens the store, seconds normally: if it is hung, end it (its lock goes "
            "with it), then start this workflow again"
        )

    def waiting(holder: str) -> None:
        log.info("MLflow store %s is locked by %s: waiting for it", db, holder)

    with locks.exclusive(lock_path, wait, busy, purpose=purpose, waiting=waiting):
        yield


def configure_http(settings: TrackingConfig) -> None:
    """Bound MLflow's HTTP client, whose defaults retry a dead server for minutes.

    Buffered mode (``fail_on_error`` off) makes one attempt per call and retries itself, without
    blocking training; fatal mode lets MLflow retry a few times (about 7 s) before failing the job.
    Environment variables that are already set win.
    """
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3" if settings.fail_on_error else "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


def is_permanent(err: BaseException) -> bool:
    """A request the store answered with a client error (4xx but 429): a retry cannot cure it."""
    if not isinstance(err, MlflowException):
        return False
    status = err.get_http_status_code()
    return 400 <= status < 500 and status != 429


def one_line(err: BaseException, limit: int = 300) -> str:
    """The error on one line for the log; a long one keeps its start (the call) and end (the
    cause), the parts that say what failed and why."""
    text = " ".join(str(err).split())
    half = (limit - 5) // 2
    return text if len(text) <= limit else f"{text[:half]} ... {text[-half:]}"


class ExperimentDeleted(MlflowException):
    """The workflow's experiment is deleted (in MLflow's trash) and could not be restored."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_code=BAD_REQUEST)  # 400: a retry cannot cure it


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The id of the experiment ``name``: created if missing (another process may win that
    race), restored if deleted (see :func:`ensure_active`), and marked as a model-training
    experiment (see :func:`mark_model_training`)."""
    found = client.get_experiment_by_name(name)
    if found is None:
        tags = {EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND}
        try:
            return client.create_experiment(name, artifact_location=artifact_location, tags=tags)
        except MlflowException:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    ensure_active(client, found.experiment_id)
    mark_model_training(client, found)
    return found.experiment_id


def ensure_active(client: MlflowClient, experiment_id: str) -> None:
    """Restore the experiment if it is deleted (MLflow's trash: deleted in the UI, say), with a
    warning that says how to delete it for good instead; restoring it restores its runs too.

    Raises :class:`ExperimentDeleted`, naming the experiment and what to do, when it cannot be
    restored (no permission on a tracking server, say).
    """
    experiment = client.get_experiment(experiment_id)
    if experiment.lifecycle_stage != LifecycleStage.DELETED:
        return
    try:
        client.restore_experiment(experiment_id)
    except MlflowException as err:
        if client.get_experiment(experiment_id).lifecycle_stage == LifecycleStage.ACTIVE:
            return  # another job restored it meanwhile
        raise ExperimentDeleted(
            f"MLflow experiment {experiment.name!r} (id {experiment_id}) in {client.tracking_uri}"
            f" is deleted and could not be restored ({one_line(err)}). Restore it (as its owner "
            f"or an admin: `MLFLOW_TRACKING_URI={client.tracking_uri} mlflow experiments restore "
            f"--experiment-id {experiment_id}`), or purge it for good "
            f"({_purge_hint(client.tracking_uri, experiment_id)}) so that the next workflow run "
            "creates it afresh, or set another `experiment` in the config."
        ) from err
    log.warning(
        "MLflow experiment %r (id %s) in %s was deleted; restored it, with its runs, so that "
        "this workflow's tracking is not lost. To delete it for good instead: once the "
        "workflow has finished, delete it again in the UI and purge it (%s), or set another "
        "`experiment` in the config.",
        experiment.name,
        experiment_id,
        client.tracking_uri,
        _purge_hint(client.tracking_uri, experiment_id),
    )


def _purge_hint(uri: str, experiment_id: str) -> str:
    """The ``mlflow gc`` command that permanently deletes a deleted experiment of store ``uri``."""
    if uri.startswith(("http://", "https://")):
        store = "<the server's --backend-store-uri>"
        where = " on the server's host"
    else:
        store, where = uri, ""
    return (
        f"`mlflow gc --backend-store-uri {store} --tracking-uri {uri} "
        f"--experiment-ids {experiment_id}`{where}"
    )


def mark_model_training(client: MlflowClient, experiment: Experiment) -> None:
    """Tag the experiment as model training (:data:`EXPERIMENT_KIND_TAG`), unless it has a kind
    set by hand. (MLflow 3.17's UI picks its view by a browser switch even so.)"""
    kind = experiment.tags.get(EXPERIMENT_KIND_TAG)
    if kind == MODEL_TRAINING_KIND:
        return
    if kind and not kind.endswith("_inferred") and kind != "no_inferred_type":
        log.warning(
            "MLflow experiment %r is tagged %s=%s (chosen in the UI?): kept as it is; %s "
            "marks a model-training experiment",
            experiment.name,
            EXPERIMENT_KIND_TAG,
            kind,
            MODEL_TRAINING_KIND,
        )
        return
    client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
