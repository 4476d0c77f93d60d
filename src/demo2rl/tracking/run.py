"""A job's MLflow run: params, metrics, tags, dataset inputs and artifacts, sent through an
:class:`~demo2rl.tracking.outbox.Outbox` so that the job never waits on the store; and the
workflow's parent run, for results about the whole invocation."""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import DatasetInput, LifecycleStage, Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from demo2rl.tracking import arms
from demo2rl.tracking.outbox import Outbox, RunMissing
from demo2rl.tracking.store import ensure_active, ensure_experiment, is_permanent, tracking_uri

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

log = logging.getLogger(__package__)

MAX_PARAM_LENGTH = 6000
METRICS_PER_BATCH = 1000  # MLflow's limits for one log_batch call
PARAMS_PER_BATCH = 100  # (params and tags alike)
PARENT_ENV = "DEMO2RL_PARENT_RUN_ID"
"""The environment variable that hands the workflow's parent run id to the jobs."""


class Run:
    """The job's MLflow run: batched metric logging, params, artifacts and lineage.

    Every call goes through an :class:`Outbox`: it returns at once, and a job keeps working while
    the store is unreachable. ``run_id`` is None until the run exists in the store (a job that
    starts while the server is down gets its run once the server is back, with its original start
    time); it is set for good once the job's run has been closed.
    """

    def __init__(
        self,
        client: MlflowClient | None = None,
        run_id: str | None = None,
        *,
        fail_on_error: bool = False,
        outbox: Outbox | None = None,
    ) -> None:
        self._client = client
        self.run_id = run_id
        self.outbox = Outbox(fail_on_error) if outbox is None else outbox

    @property
    def client(self) -> MlflowClient:
        """The client of the tracking store, made on first use (a SQLite store opens then)."""
        if self._client is None:
            self._client = MlflowClient(tracking_uri())
        return self._client

    @property
    def calls(self) -> collections.Counter[str]:
        """Calls that reached the store, by MLflow client method (``log_batch``, ...)."""
        return self.outbox.calls

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log several metrics in one call (one row of a curve when ``step`` is given)."""
        ts = int(time.time() * 1000)
        self._log_batch(metrics=[Metric(k, float(v), ts, step or 0) for k, v in metrics.items()])

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log a (nested) config slice as flat params."""
        self._log_batch(params=flatten(params))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set run tags (values as strings)."""
        self._log_batch(tags={k: str(v) for k, v in tags.items()})

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Copy a file into the run's artifacts."""
        self._send(
            "log_artifact", lambda: self.client.log_artifact(self.run_id, str(path), artifact_path)
        )

    def log_figures(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        """Figures as artifacts of this run and, under ``summary/``, of the workflow's parent
        run (where the MLflow UI compares whole invocations)."""
        for path in paths:
            self.log_artifact(path)
        with self.parent() as parent:
            for path in paths if parent is not None else ():
                parent.log_artifact(path, "summary")

    @contextlib.contextmanager
    def parent(self) -> Iterator[Run | None]:
        """The workflow invocation's parent run (:data:`PARENT_ENV`), for results about the
        whole invocation (the summary); None outside a workflow. Tracking failures are treated
        as for this run; what waits is sent on leaving the block."""
        run_id = os.environ.get(PARENT_ENV)
        if not run_id:
            yield None
            return
        run = Run(MlflowClient(tracking_uri()), run_id, fail_on_error=self.outbox.fail_on_error)
        try:
            yield run
        finally:
            run.outbox.flush()

    def log_arm(
        self,
        arm: str,
        *,
        variant: str,
        metrics: Mapping[str, float],
        curve: Mapping[str, Sequence[float]],
        inputs: Mapping[str, Sequence[str | os.PathLike[str]]],
    ) -> None:
        """An arm-level run of ``arm`` in ``variant`` (:mod:`demo2rl.tracking.arms`), a child of
        the workflow's parent run: its metrics, its mean learning curve (``step``, ``mean``,
        ``low``, ``high``; empty for none) and the seed runs that wrote ``inputs`` (by rule). It
        replaces the arm's previous run of the variant, and the experiment gets the runs table's
        view of its arm runs. Its calls go through this run's outbox: sent in order after this
        run's own, retried while the store is unreachable, waited for when the job ends."""
        run = Run(outbox=self.outbox)
        run.create(
            arms.run_name(arm, variant),
            arms.tags(arm, variant, inputs, parent=os.environ.get(PARENT_ENV)),
        )
        run.log_metrics(metrics)
        run._log_batch(metrics=arms.curve_metrics(curve))
        run.terminate(RunStatus.to_string(RunStatus.FINISHED))
        run._send("delete_runs", lambda: arms.delete_replaced(run.client, run.run_id, arm, variant))
        run._send("set_experiment_tag", lambda: arms.set_view(run.client, run.run_id))

    def log_dataset(self, path: str | os.PathLike[str], digest: str, context: str) -> None:
        """Record a demonstration dataset as an MLflow dataset input: its path and content hash."""
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import InputTag

        with warnings.catch_warnings():  # "can be interpreted in multiple ways": local files
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(Path(path).resolve()))
        entity = MetaDataset(source, name=Path(path).name, digest=digest[:36])._to_mlflow_entity()
        inputs = [DatasetInput(entity, [InputTag(key="mlflow.data.context", value=context)])]
        self._send("log_inputs", lambda: self.client.log_inputs(self.run_id, inputs))
        self.set_tags({"demo2rl.dataset_hash": digest})

    def create(self, run_name: str, tags: Mapping[str, str]) -> None:
        """Queue the creation of this run (stamped now) in the experiment of the environment's
        ``MLFLOW_EXPERIMENT_ID``, else ``MLFLOW_EXPERIMENT_NAME`` (created if missing); one
        deleted since the workflow began is restored. The calls queued after it log to it."""
        start_time = int(time.time() * 1000)

        def create_in(experiment_id: str) -> Any:
            return self.client.create_run(
                experiment_id, start_time=start_time, tags=dict(tags), run_name=run_name
            )

        def create() -> None:
            experiment_id = os.environ.get("MLFLOW_EXPERIMENT_ID") or ensure_experiment(
                self.client, os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
            )
            try:
                run = create_in(experiment_id)
            except MlflowException as err:
                if not is_permanent(err):
                    raise
                ensure_active(self.client, experiment_id)  # deleted since the workflow began?
                run = create_in(experiment_id)
            self.run_id = run.info.run_id
            log.info("MLflow run %s (%s) in experiment %s", self.run_id, run_name, experiment_id)

        self.outbox.send("create_run", create)

    def terminate(self, status: str) -> None:
        """Queue the end of this run with ``status`` (a ``RunStatus`` name), stamped now."""
        end_time = int(time.time() * 1000)
        self._send(
            "set_terminated",
            lambda: self.client.set_terminated(self.run_id, status, end_time=end_time),
        )

    def _log_batch(
        self,
        metrics: Sequence[Metric] = (),
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """Queue metrics, params and tags in as few ``log_batch`` calls as MLflow allows."""
        for m, p, t in batches(metrics, params, tags):
            if not (m or p or t):
                continue
            self._send(
                "log_batch",
                lambda m=m, p=p, t=t: self.client.log_batch(
                    self.run_id, metrics=m, params=p, tags=t
                ),
            )

    def _send(self, name: str, call: Callable[[], object]) -> None:
        """Queue a call on this run; one the store rejects is retried once after
        :meth:`_ensure_active` (the run or its experiment may have been deleted meanwhile)."""

        def guarded() -> object:
            if self.run_id is None:  # its creation was rejected: nothing to log to
                raise RunMissing(name)
            try:
                return call()
            except MlflowException as err:
                if not is_permanent(err):
                    raise
                self._ensure_active()
                return call()

        self.outbox.send(name, guarded)

    def _ensure_active(self) -> None:
        """Restore this run's experiment (:func:`ensure_active`), or the run itself, if either
        was deleted while the job ran: its tracking must never be dropped silently."""
        info = self.client.get_run(self.run_id).info
        ensure_active(self.client, info.experiment_id)
        if info.lifecycle_stage != LifecycleStage.DELETED:
            return
        if self.client.get_run(self.run_id).info.lifecycle_stage == LifecycleStage.DELETED:
            self.client.restore_run(self.run_id)  # deleted by itself, not with the experiment
            log.warning(
                "MLflow run %s (%s) was deleted while its job ran; restored it, so that the "
                "job's tracking is not lost (delete it again once the job has finished)",
                self.run_id,
                info.run_name,
            )


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


def batches(
    metrics: Sequence[Metric] = (),
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> Iterator[tuple[list[Metric], list[Param], list[RunTag]]]:
    """Metrics, params and tags split into as few log_batch calls as MLflow's limits allow."""
    lists = (
        list(metrics),
        [Param(k, v) for k, v in (params or {}).items()],
        [RunTag(k, v) for k, v in (tags or {}).items()],
    )
    limits = (METRICS_PER_BATCH, PARAMS_PER_BATCH, PARAMS_PER_BATCH)
    calls = max(1, *(math.ceil(len(x) / n) for x, n in zip(lists, limits, strict=True)))
    for i in range(calls):
        m, p, t = (x[i * n : (i + 1) * n] for x, n in zip(lists, limits, strict=True))
        yield m, p, t
