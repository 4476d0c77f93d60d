"""The runs' lifecycle: the workflow's parent run (in the Snakemake process) and a child run per
job, with lineage tags, provenance tags and the job's params.

The parent run reaches the jobs through the environment: ``MLFLOW_TRACKING_URI``,
``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_EXPERIMENT_NAME`` (all MLflow's own) and
:data:`PARENT_ENV`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from mlflow.entities import RunStatus
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from demo2rl import provenance
from demo2rl.config import SCHEMA, ConfigError, TrackingConfig
from demo2rl.tracking.lineage import forget_producer, record_producer, upstream_tags
from demo2rl.tracking.run import PARENT_ENV, Run, batches, flatten
from demo2rl.tracking.store import (
    ExperimentDeleted,
    StoreBusy,
    configure_http,
    ensure_experiment,
    is_permanent,
    lock_store,
    one_line,
    tracking_uri,
)

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

log = logging.getLogger(__package__)


def provenance_tags() -> dict[str, str]:
    """Code revision, dirty flag and package versions, as run tags."""
    rev = provenance.code_revision()
    tags = {"demo2rl.code_revision": str(rev["commit"]), "demo2rl.code_dirty": str(rev["dirty"])}
    tags |= {f"demo2rl.version.{k}": v for k, v in provenance.versions().items()}
    return tags


@functools.cache
def _experiment_rule() -> tuple[str, str]:
    """The config schema's pattern of an ``experiment`` name and its description (their one
    definition)."""
    entry = yaml.safe_load(SCHEMA.read_text())["properties"]["experiment"]
    return entry["pattern"], entry["description"]


def check_experiment_name(experiment: str) -> None:
    """Refuse a name that the config schema refuses (:class:`~demo2rl.config.ConfigError`
    naming the ``experiment`` key): the name becomes a directory under ``results/`` and an
    MLflow experiment, so a caller of the library is held to the workflow config's rule."""
    pattern, description = _experiment_rule()
    if not isinstance(experiment, str) or not re.search(pattern, experiment):
        raise ConfigError("experiment", f"{experiment!r} does not match {pattern!r}. {description}")


def start_workflow(
    experiment: str,
    config: Mapping[str, Any],
    settings: TrackingConfig,
    results_dir: str | os.PathLike[str] = "results",
) -> str | None:
    """Create the store (once), the experiment and the parent run; export them to the jobs.

    ``experiment`` must be a name the config schema accepts (:func:`check_experiment_name`).

    The Snakemake process does this before any job starts: parallel jobs racing to create a
    SQLite store corrupt it. Two workflows started together on one ``results/`` (two
    experiments) take turns at it: a SQLite store is created and opened under its lock
    (:func:`~demo2rl.tracking.store.lock_store`); a lock held too long by another process is an
    error naming that process (:class:`~demo2rl.tracking.store.StoreBusy`), whatever
    ``settings.fail_on_error`` says. Returns the parent run id, or None when the store cannot be
    reached and ``settings.fail_on_error`` is off (the jobs then log to top-level runs when it is
    back). A store that rejects the calls (a 4xx answer: no or wrong credentials, no permission, a
    deleted experiment that cannot be restored) stops the workflow with an error that says so.
    """
    check_experiment_name(experiment)
    configure_http(settings)
    uri = tracking_uri(results_dir)
    artifacts = None
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        artifacts = (Path(results_dir).resolve() / "mlartifacts").as_uri()
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["MLFLOW_EXPERIMENT_NAME"] = experiment
    for stale in ("MLFLOW_EXPERIMENT_ID", PARENT_ENV):
        os.environ.pop(stale, None)
    try:
        with lock_store(uri, f"start of the workflow of experiment {experiment!r}"):
            client = MlflowClient(uri)  # opens a SQLite store, creating it: once, here
            experiment_id = ensure_experiment(client, experiment, artifacts)
        run = client.create_run(
            experiment_id,
            run_name=f"workflow-{time.strftime('%Y%m%d-%H%M%S')}",
            tags={"demo2rl.stage": "workflow", **provenance_tags()},
        )
        for metrics, params, tags in batches(params=flatten(config)):
            client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
    except StoreBusy:
        raise  # not an outage: another workflow is (or is stuck) creating the store
    except Exception as err:
        if is_permanent(err):  # rejected, not unreachable: every job's tracking would be too
            raise _rejected_at_start(uri, err) from err
        if settings.fail_on_error:
            raise
        log.warning(
            "MLflow store %s unreachable (%s): the workflow runs without a parent run",
            uri,
            one_line(err),
        )
        return None
    os.environ["MLFLOW_EXPERIMENT_ID"] = experiment_id
    os.environ[PARENT_ENV] = run.info.run_id
    log.info("MLflow: experiment %r, parent run %s, store %s", experiment, run.info.run_id, uri)
    return run.info.run_id


def _rejected_at_start(uri: str, err: MlflowException) -> MlflowException:
    """The error that stops a workflow whose first tracking calls the store rejected (4xx): a
    retry cannot cure that, and every job's tracking would be rejected too."""
    if isinstance(err, ExperimentDeleted):
        return err
    hint = ""
    if err.get_http_status_code() in (401, 403):
        hint = (
            " The server requires a login (`mlflow server --app-name basic-auth`): export "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD of a user who may create runs"
            " in the experiment, or write them to ~/.mlflow/credentials."
        )
    return MlflowException(
        f"MLflow store {uri} rejected the workflow's tracking at its start ({one_line(err)}); no "
        f"job has run.{hint}",
        error_code=err.error_code,
    )


def end_workflow(success: bool, settings: TrackingConfig) -> None:
    """Mark the parent run of this invocation finished or failed."""
    run_id = os.environ.get(PARENT_ENV)
    if not run_id:
        return
    run = Run(run_id=run_id, fail_on_error=settings.fail_on_error)
    run.terminate(RunStatus.to_string(RunStatus.FINISHED if success else RunStatus.FAILED))
    run.outbox.close(grace=10.0)


@contextlib.contextmanager
def child_run(
    run_name: str,
    *,
    stage: str,
    rule: str,
    wildcards: Mapping[str, str],
    params: Mapping[str, Any],
    inputs: Sequence[str | os.PathLike[str]] = (),
    outputs: Sequence[str | os.PathLike[str]] = (),
    settings: TrackingConfig,
) -> Iterator[Run]:
    """A run for one job: a child of the workflow's parent run when there is one.

    The run is tagged with the runs that produced ``inputs`` (``demo2rl.upstream.<stage>``) and,
    when the job succeeds, recorded beside each of ``outputs`` for the jobs downstream.
    """
    configure_http(settings)
    run = Run(fail_on_error=settings.fail_on_error)
    forget_producer(outputs)
    parent = os.environ.get(PARENT_ENV)
    if parent is None:
        log.warning("no workflow parent run (run outside Snakemake?): logging a top-level run")
    tags = {
        "demo2rl.stage": stage,
        "demo2rl.rule": rule,
        **{f"demo2rl.wildcard.{k}": v for k, v in wildcards.items()},
        **upstream_tags(inputs),
        **provenance_tags(),
    }
    if parent:
        tags["mlflow.parentRunId"] = parent
    run.create(run_name, tags)
    run.log_params(params)
    if settings.fail_on_error:
        run.outbox.flush()  # fail before the job's work, not at its first metrics
    status = RunStatus.FAILED
    try:
        yield run
        status = RunStatus.FINISHED
    except KeyboardInterrupt:
        status = RunStatus.KILLED
        raise
    finally:
        failed = status != RunStatus.FINISHED
        try:
            run.terminate(RunStatus.to_string(status))
            run.outbox.close()
            if not failed and run.run_id is not None:
                record_producer(outputs, run.run_id, stage=stage, run_name=run_name)
        except Exception:
            if not failed:
                raise
            log.exception("MLflow: could not mark the run failed")  # keep the job's own error
