"""Every MLflow call of demo2rl lives here.

One experiment per config (named by ``experiment``), one parent run per workflow invocation, one
child run per job. The default store is a SQLite file under ``results/`` (artifacts beside it in
``results/mlartifacts``), created once by the Snakemake process before any job starts (parallel
jobs racing to create it corrupt it). ``MLFLOW_TRACKING_URI`` points everything at a tracking
server instead. The parent run reaches the jobs through the environment: ``MLFLOW_TRACKING_URI``,
``MLFLOW_EXPERIMENT_ID``, ``MLFLOW_EXPERIMENT_NAME`` (all MLflow's own) and
``DEMO2RL_PARENT_RUN_ID``.

The experiment is tagged as a model-training one (``mlflow.experimentKind`` =
``custom_model_development``, MLflow 3's record of the experiment's kind; MLflow 3.17's UI still
picks its view by a switch in the browser, see the README). An
experiment deleted in the UI (MLflow's trash) is restored, with a warning in the log that says how
to delete it for good, when the workflow starts and whenever a job's call is rejected because it
(or the job's run) was deleted meanwhile; one that cannot be restored is an error naming it.

Lineage: a job writes its run id to a small hidden sidecar beside each output
(``.<name>.mlflow.json``, never part of an output's content); a job consuming those files tags its
run ``demo2rl.upstream.<stage>`` with the producers' run ids.

A job never waits on the store: its tracking calls go, in order, through one background sender
thread (:class:`Outbox`). Tracking trouble never loses training: unless ``tracking.fail_on_error``
is set, a call that fails for a reason a retry can cure (server unreachable or timing out, 5xx, a
locked store) stays queued with every later call and is retried with exponential backoff; the
job says so in its log. At its end a job waits up to :data:`FLUSH_GRACE_S` for the store, then
finishes without the unsent tracking data.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import math
import os
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import (
    DatasetInput,
    Experiment,
    LifecycleStage,
    Metric,
    Param,
    RunStatus,
    RunTag,
)
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import BAD_REQUEST
from mlflow.tracking import MlflowClient

from demo2rl import io, provenance
from demo2rl.tracking_settings import Settings, settings

__all__ = ["Settings", "settings"]  # re-exported: defined without MLflow imports

log = logging.getLogger(__name__)

PARENT_ENV = "DEMO2RL_PARENT_RUN_ID"
MAX_PARAM_LENGTH = 6000
METRICS_PER_BATCH = 1000  # MLflow's limits for one log_batch call
PARAMS_PER_BATCH = 100  # (params and tags alike)
RETRY_MIN_S = 1.0
"""First delay before a failed tracking call is retried; it doubles per failure up to..."""
RETRY_MAX_S = 60.0
FLUSH_GRACE_S = 30.0
"""How long a finishing job keeps retrying unsent tracking calls before it gives up on them."""
FLUSH_RETRY_S = 2.0
"""The longest delay between retries while a job waits for its tracking calls to go out."""
HTTP_TIMEOUT_S = 10
"""Per-request timeout of MLflow's HTTP client in jobs (MLflow's default is 120 s)."""
MAX_TAG_LENGTH = 8000
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
"""The experiment tag that picks the MLflow UI's view of an experiment (MLflow 3.x)."""
MODEL_TRAINING_KIND = "custom_model_development"
"""Its value for model training (as opposed to GenAI development)."""
_jitter = random.Random()  # not the global generator: tracking must never touch results


# --------------------------------------------------------------------------------------------
# where runs go


def default_tracking_uri(results_dir: str | os.PathLike[str] = "results") -> str:
    """``sqlite:///<absolute path>/mlflow.db`` under ``results_dir``."""
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def tracking_uri(results_dir: str | os.PathLike[str] = "results") -> str:
    """``MLFLOW_TRACKING_URI`` if set, else the default store under ``results_dir``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(results_dir)


def configure_http(settings: Settings) -> None:
    """Bound MLflow's HTTP client, whose defaults retry a dead server for minutes.

    Buffered mode (``fail_on_error`` off) makes one attempt per call and retries itself, without
    blocking training; fatal mode lets MLflow retry a few times (about 7 s) before failing the job.
    Environment variables that are already set win.
    """
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3" if settings.fail_on_error else "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")


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


# --------------------------------------------------------------------------------------------
# sending calls: in order, buffered and retried with backoff when the store is unreachable


def is_permanent(err: BaseException) -> bool:
    """A request the store answered with a client error (4xx but 429): a retry cannot cure it."""
    if not isinstance(err, MlflowException):
        return False
    status = err.get_http_status_code()
    return 400 <= status < 500 and status != 429


class RunMissing(Exception):
    """A call for a run whose creation the store rejected: dropped, counted, not logged again."""


class Outbox:
    """Sends tracking calls in order from one background thread: the job never waits on the store.

    MLflow's own asynchronous logging (``synchronous=False``) sends batches from a pool of
    threads and drops one that fails. Here a single sender keeps the calls in order, and a call
    that fails for a reason a retry can cure stays at the head of the queue, with everything
    after it, and is retried with exponential backoff (1 s doubling to 60 s; at most 2 s while
    the job waits for them at its end); the job's log says so. A call the store rejects (4xx)
    is logged and dropped. With ``fail_on_error`` the first failure is raised in the job's
    thread, at its next tracking call or :meth:`flush`.
    """

    def __init__(self, fail_on_error: bool = False) -> None:
        self.fail_on_error = fail_on_error
        self.pending: collections.deque[tuple[str, Callable[[], object]]] = collections.deque()
        self.calls: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0
        """Time the job's own thread spent in tracking (queueing, waiting in :meth:`flush`)."""
        self.sender_seconds = 0.0
        """Wall time of the calls in the sender: what sending them inline would have cost."""
        self.sender_cpu_seconds = 0.0
        """CPU time of the sender thread (it competes with the job for the job's cores)."""
        self.dropped = 0
        self.error: Exception | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failures = 0
        self._retry_at = 0.0
        self._down_since: float | None = None
        self._flushing = False
        self._depth = 0

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the block's wall time as the job's tracking time (nested blocks count once)."""
        self._depth += 1
        start = time.perf_counter()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - start

    def send(self, name: str, call: Callable[[], object]) -> None:
        """Queue ``call`` for the sender (raises the first failure when ``fail_on_error``)."""
        with self.timed(), self._cond:
            self._raise_error()
            self.pending.append((name, call))
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_loop, name="mlflow-outbox")
                self._thread.daemon = True
                self._thread.start()
            self._cond.notify_all()

    def flush(self, grace: float | None = None) -> bool:
        """Wait until every queued call is sent, for at most ``grace`` s (default
        :data:`FLUSH_GRACE_S`), then give up on the rest; True if nothing was given up."""
        with self.timed(), self._cond:
            deadline = time.monotonic() + (FLUSH_GRACE_S if grace is None else grace)
            self._flushing = True  # the job waits now: retry sooner than the backoff would
            self._retry_at = min(self._retry_at, time.monotonic() + FLUSH_RETRY_S)
            self._cond.notify_all()
            while self.pending and self.error is None and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            self._flushing = False
            self._raise_error()
            if not self.pending:
                return True
            log.error(
                "MLflow tracking unreachable for %.0f s: giving up on %d tracking calls "
                "(this job's outputs are not affected)",
                time.monotonic() - (self._down_since or time.monotonic()),
                len(self.pending),
            )
            self.dropped += len(self.pending)
            self.pending.clear()
            return False

    def close(self, grace: float | None = None) -> bool:
        """:meth:`flush`, then let the sender thread end."""
        try:
            return self.flush(grace)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while not self.pending or time.monotonic() < self._retry_at:
                    if self._closed and not self.pending:
                        return
                    wait = self._retry_at - time.monotonic() if self.pending else None
                    self._cond.wait(wait)
                item = self.pending[0]
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                item[1]()
                error = None
            except Exception as err:
                error = err
            self.sender_seconds += time.perf_counter() - start
            self.sender_cpu_seconds += time.thread_time() - cpu
            with self._cond:
                self._settle(item, error)
                self._cond.notify_all()

    def _settle(self, item: tuple[str, Callable[[], object]], error: Exception | None) -> None:
        """The outcome of sending the head call ``item`` (gone if a flush gave up on it)."""
        name = item[0]
        at_head = bool(self.pending) and self.pending[0] is item
        if error is None:
            if at_head:
                self.pending.popleft()
            self.calls[name] += 1
            if self._down_since is not None:
                log.warning(
                    "MLflow tracking reachable again after %.0f s; sending %d buffered calls",
                    time.monotonic() - self._down_since,
                    len(self.pending),
                )
                self._down_since, self._failures, self._retry_at = None, 0, 0.0
        elif isinstance(error, RunMissing):  # the rejection of its run was logged already
            if at_head:
                self.pending.popleft()
            self.dropped += 1
        elif self.fail_on_error:
            self.error = error
            self.dropped += len(self.pending)
            self.pending.clear()
        elif is_permanent(error):
            if at_head:
                self.pending.popleft()
            self.dropped += 1
            log.error("MLflow rejected %s, dropped it: %s", name, _short(error))
        else:
            self._backoff(name, error)

    def _backoff(self, name: str, error: Exception) -> None:
        now = time.monotonic()
        longest = FLUSH_RETRY_S if self._flushing else RETRY_MAX_S
        delay = min(longest, RETRY_MIN_S * 2**self._failures) * _jitter.uniform(1.0, 1.1)
        self._failures += 1
        self._retry_at = now + delay
        if self._down_since is None:
            self._down_since = now
            log.warning(
                "MLflow tracking failed (%s: %s); training continues, tracking calls are "
                "buffered and retried with backoff (next try in %.0f s)",
                name,
                _short(error),
                delay,
            )
        else:
            log.warning(
                "MLflow tracking still unreachable after %.0f s; %d calls buffered, "
                "next try in %.0f s",
                now - self._down_since,
                len(self.pending),
                delay,
            )


def _short(err: BaseException, limit: int = 300) -> str:
    """The error on one line; a long one keeps its start (the call) and end (the cause)."""
    text = " ".join(str(err).split())
    half = (limit - 5) // 2
    return text if len(text) <= limit else f"{text[:half]} ... {text[-half:]}"


# --------------------------------------------------------------------------------------------
# the workflow's parent run (in the Snakemake process)


def start_workflow(
    experiment: str,
    config: Mapping[str, Any],
    results_dir: str | os.PathLike[str] = "results",
) -> str | None:
    """Create the store (once), the experiment and the parent run; export them to the jobs.

    Returns the parent run id, or None when the store cannot be reached and the config's
    ``tracking.fail_on_error`` is off (the jobs then log to top-level runs when it is back).
    A store that rejects the calls (a 4xx answer: no or wrong credentials, no permission, a
    deleted experiment that cannot be restored) stops the workflow with an error that says so.
    """
    options = settings(config)
    configure_http(options)
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
        client = MlflowClient(uri)  # opens a SQLite store, creating it: once, here
        experiment_id = ensure_experiment(client, experiment, artifacts)
        run = client.create_run(
            experiment_id,
            run_name=f"workflow-{time.strftime('%Y%m%d-%H%M%S')}",
            tags={"demo2rl.stage": "workflow", **provenance_tags()},
        )
        for metrics, params, tags in _batches(params=flatten(config)):
            client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
    except Exception as err:
        if is_permanent(err):  # rejected, not unreachable: every job's tracking would be too
            raise _rejected_at_start(uri, err) from err
        if options.fail_on_error:
            raise
        log.warning(
            "MLflow store %s unreachable (%s): the workflow runs without a parent run",
            uri,
            _short(err),
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
        f"MLflow store {uri} rejected the workflow's tracking at its start ({_short(err)}); no "
        f"job has run.{hint}",
        error_code=err.error_code,
    )


def end_workflow(success: bool, settings: Settings | None = None) -> None:
    """Mark the parent run of this invocation finished or failed."""
    run_id = os.environ.get(PARENT_ENV)
    if not run_id:
        return
    run = Run(run_id=run_id, fail_on_error=(settings or Settings()).fail_on_error)
    run._terminate(RunStatus.to_string(RunStatus.FINISHED if success else RunStatus.FAILED))
    run.outbox.close(grace=10.0)


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
            f" is deleted and could not be restored ({_short(err)}). Restore it (as its owner "
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


# --------------------------------------------------------------------------------------------
# a job's run


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
    ) -> None:
        self._client = client
        self.run_id = run_id
        self.outbox = Outbox(fail_on_error)

    @property
    def client(self) -> MlflowClient:
        """The client of the tracking store, made on first use (a SQLite store opens then)."""
        if self._client is None:
            self._client = MlflowClient(tracking_uri())
        return self._client

    @property
    def seconds(self) -> float:
        """Time the job's thread has spent in tracking (set-up, queueing, the final flush)."""
        return self.outbox.seconds

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

    def log_dataset(self, path: str | os.PathLike[str], digest: str, context: str) -> None:
        """Record a demonstration dataset as an MLflow dataset input: its path and content hash."""
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import InputTag

        with self.outbox.timed():
            with warnings.catch_warnings():  # "can be interpreted in multiple ways": local files
                warnings.simplefilter("ignore", UserWarning)
                source = resolve_dataset_source(str(Path(path).resolve()))
            entity = MetaDataset(
                source, name=Path(path).name, digest=digest[:36]
            )._to_mlflow_entity()
            inputs = [DatasetInput(entity, [InputTag(key="mlflow.data.context", value=context)])]
            self._send("log_inputs", lambda: self.client.log_inputs(self.run_id, inputs))
            self.set_tags({"demo2rl.dataset_hash": digest})

    def _log_batch(
        self,
        metrics: Sequence[Metric] = (),
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        for m, p, t in _batches(metrics, params, tags):
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

    def _create(self, run_name: str, tags: Mapping[str, str]) -> None:
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

    def _terminate(self, status: str) -> None:
        end_time = int(time.time() * 1000)
        self._send(
            "set_terminated",
            lambda: self.client.set_terminated(self.run_id, status, end_time=end_time),
        )


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
    settings: Settings | None = None,
) -> Iterator[Run]:
    """A run for one job: a child of the workflow's parent run when there is one.

    The run is tagged with the runs that produced ``inputs`` (``demo2rl.upstream.<stage>``) and,
    when the job succeeds, recorded beside each of ``outputs`` for the jobs downstream.
    """
    options = settings or Settings()
    configure_http(options)
    run = Run(fail_on_error=options.fail_on_error)
    start = time.perf_counter()
    with run.outbox.timed():
        forget_producer(outputs)
        parent = os.environ.get(PARENT_ENV)
        if parent is None:
            log.warning("no workflow parent run (run outside Snakemake?): logging a top-level run")
        tags = {
            "demo2rl.stage": stage,
            "demo2rl.rule": rule,
            **{f"demo2rl.wildcard.{k}": v for k, v in wildcards.items()},
            **{f"demo2rl.upstream.{s}": _join(ids) for s, ids in upstream_runs(inputs).items()},
            **provenance_tags(),
        }
        if parent:
            tags["mlflow.parentRunId"] = parent
        run._create(run_name, tags)
        run.log_params(params)
        if options.fail_on_error:
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
            with run.outbox.timed():
                run._terminate(RunStatus.to_string(status))
                run.outbox.close()
                if not failed and run.run_id is not None:
                    record_producer(outputs, run.run_id, stage=stage, run_name=run_name)
        except Exception:
            if not failed:
                raise
            log.exception("MLflow: could not mark the run failed")  # keep the job's own error
        total = max(time.perf_counter() - start, 1e-9)
        log.info(
            "MLflow: %d calls; the job waited %.2f s for tracking (%.1f%% of %.1f s), the "
            "sender spent %.2f s sending them (%.2f s CPU)%s",
            sum(run.calls.values()),
            run.seconds,
            100 * run.seconds / total,
            total,
            run.outbox.sender_seconds,
            run.outbox.sender_cpu_seconds,
            f"; {run.outbox.dropped} calls lost" if run.outbox.dropped else "",
        )


# --------------------------------------------------------------------------------------------
# lineage: which run produced a file


def sidecar_path(path: str | os.PathLike[str]) -> Path:
    """Where the producing run of ``path`` is recorded: ``.<name>.mlflow.json`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.mlflow.json")


def record_producer(
    outputs: Sequence[str | os.PathLike[str]], run_id: str, *, stage: str, run_name: str
) -> None:
    """Write the producing run beside each output (atomically)."""
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


def _join(ids: Sequence[str]) -> str:
    text = ",".join(ids)
    return (
        text
        if len(text) <= MAX_TAG_LENGTH
        else f"{text[: MAX_TAG_LENGTH - 40]},... ({len(ids)} runs)"
    )


def _batches(
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


@contextlib.contextmanager
def parent_run(job_run: Run | None = None) -> Iterator[Run | None]:
    """The workflow invocation's parent run (``DEMO2RL_PARENT_RUN_ID``), for results about the
    whole invocation (the summary); None outside a workflow. Tracking failures are treated as
    for ``job_run`` (the job's own run); what waits is sent on leaving the block."""
    run_id = os.environ.get(PARENT_ENV)
    if not run_id:
        yield None
        return
    fail_on_error = job_run.outbox.fail_on_error if job_run is not None else False
    run = Run(MlflowClient(tracking_uri()), run_id, fail_on_error=fail_on_error)
    try:
        yield run
    finally:
        run.outbox.flush()
        if job_run is not None:
            job_run.outbox.seconds += run.outbox.seconds


def log_figures(paths: Sequence[str | os.PathLike[str]], run: Run) -> None:
    """Figures as artifacts of the job's run and, under ``summary/``, of the workflow's parent
    run (where the MLflow UI compares whole invocations)."""
    for path in paths:
        run.log_artifact(path)
    with parent_run(run) as parent:
        for path in paths if parent is not None else ():
            parent.log_artifact(path, "summary")
