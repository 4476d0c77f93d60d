"""demo2rl.tracking against real MLflow stores: batching, lineage, datasets, tracking outages."""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
import re
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from conftest import isolated_tracking_env, tracking_env_keys
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from stable_baselines3 import PPO
from stable_baselines3.common.logger import Logger

from demo2rl import config, provenance, rl, stages, tracking
from demo2rl.config import TrackingConfig
from demo2rl.tracking import lineage, outbox
from demo2rl.tracking import store as tracking_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One SQLite store for the module (a fresh store costs seconds of migrations)."""
    root = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        isolated_tracking_env(mp)
        parent = tracking.start_workflow("unit", {"experiment": "unit"}, LENIENT, results_dir=root)
        assert parent is not None
        yield root


@pytest.fixture
def env(store: Path) -> Iterator[Path]:
    """The module store's workflow environment, restored after each test."""
    saved = {k: os.environ.get(k) for k in tracking_env_keys()}
    yield store
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def client() -> MlflowClient:
    return MlflowClient(tracking.tracking_uri())


LENIENT = TrackingConfig(enabled=True, fail_on_error=False)
"""The default ``tracking`` config: failures are buffered and retried, training goes on."""


def job(name: str, stage: str = "test", settings: TrackingConfig = LENIENT, **kwargs):
    return tracking.child_run(
        name, stage=stage, rule=stage, wildcards={}, params={}, settings=settings, **kwargs
    )


def wait_for(condition, timeout: float = 300.0) -> None:
    """Until ``condition()``; ``timeout`` bounds a hang, it is no expectation of speed."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Attempts:
    """Every tracking call the job's outbox attempts, with the thread it ran in; the first one
    is held in flight until :meth:`release` (or 600 s), so a job that waited for the store's
    answer would be seen waiting, whatever the machine's load."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[str] = []
        self.first_in_flight = False
        self._release = threading.Event()
        send = outbox.Outbox.send

        def recording_send(box: outbox.Outbox, name: str, call) -> None:
            def attempt():
                self.threads.append(threading.current_thread().name)
                if len(self.threads) == 1:
                    self.first_in_flight = True
                    self._release.wait(600)
                    self.first_in_flight = False
                return call()

            send(box, name, attempt)

        monkeypatch.setattr(outbox.Outbox, "send", recording_send)

    def release(self) -> None:
        self._release.set()


def test_store_and_artifacts_live_under_results(env: Path):
    assert tracking.tracking_uri() == f"sqlite:///{env.resolve() / 'mlflow.db'}"
    experiment = client().get_experiment_by_name("unit")
    assert experiment.artifact_location == (env.resolve() / "mlartifacts").as_uri()


def test_sb3_logger_sends_one_log_batch_per_rollout(env: Path):
    n_steps, rollouts = 64, 4
    model = PPO("MlpPolicy", gym.make("Pendulum-v1"), n_steps=n_steps, batch_size=64, n_epochs=1)
    with job("sb3", stage="rl") as run:
        sink = rl.progress.MetricsSink(run.log_metrics)
        model.set_logger(Logger(folder=None, output_formats=[sink]))
        model.learn(total_timesteps=rollouts * n_steps)
    assert run.calls["log_batch"] == rollouts  # the run has no params: nothing else is a batch
    history = client().get_metric_history(run.run_id, "time/total_timesteps")
    assert [m.step for m in history] == [n_steps * (k + 1) for k in range(rollouts)]
    # the store agrees: each rollout's metrics arrived together (one call, one timestamp)
    stamps: dict[int, set[int]] = defaultdict(set)
    keys = client().get_run(run.run_id).data.metrics
    assert {"train/value_loss", "train/approx_kl", "time/fps"} <= set(keys)
    for key in keys:
        for m in client().get_metric_history(run.run_id, key):
            stamps[m.step].add(m.timestamp)
    assert sorted(stamps) == [n_steps * (k + 1) for k in range(rollouts)]
    assert all(len(s) == 1 for s in stamps.values()), stamps


def test_large_batches_are_split_at_mlflow_limits(env: Path):
    with job("many") as run:
        run.log_metrics({f"m{i}": i for i in range(1500)}, step=3)
        run.log_params({f"p{i}": i for i in range(250)})
    assert run.calls["log_batch"] == 2 + 3
    data = client().get_run(run.run_id).data
    assert len(data.metrics) == 1500 and data.metrics["m1499"] == 1499
    assert len(data.params) == 250


def test_child_run_has_parent_tags_params_and_status(env: Path):
    with tracking.child_run(
        "bc",
        stage="bc",
        rule="train_bc",
        wildcards={"seed": "2"},
        params={"bc": {"batch_size": 256, "lr": 0.001}},
        settings=LENIENT,
    ) as run:
        run.log_metrics({"loss": 0.5}, step=1)
    got = client().get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.info.run_name == "bc"
    assert got.data.tags["mlflow.parentRunId"] == os.environ[tracking.PARENT_ENV]
    assert got.data.tags["demo2rl.stage"] == "bc"
    assert got.data.tags["demo2rl.rule"] == "train_bc"
    assert got.data.tags["demo2rl.wildcard.seed"] == "2"
    assert got.data.tags["demo2rl.code_revision"]
    assert got.data.params == {"bc.batch_size": "256", "bc.lr": "0.001"}


def test_dataset_input_records_content_hash_and_source(env: Path, tmp_path: Path):
    path = tmp_path / "demos.h5"
    path.write_bytes(b"demonstrations")
    digest = "0123456789abcdef" * 4
    with job("bc", stage="bc") as run:
        run.log_dataset(path, digest, context="training")
    got = client().get_run(run.run_id)
    (dataset_input,) = got.inputs.dataset_inputs
    assert dataset_input.dataset.name == "demos.h5"
    assert dataset_input.dataset.digest == digest[:36]
    assert json.loads(dataset_input.dataset.source)["uri"] == str(path.resolve())
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "training"
    assert got.data.tags["demo2rl.dataset_hash"] == digest


def test_consumers_tag_the_runs_that_produced_their_inputs(env: Path, tmp_path: Path):
    shards = [tmp_path / f"shard-{k}.h5" for k in range(3)]
    producers = []
    for k, shard in enumerate(shards):
        with job(f"collect-shard{k}", stage="collect", outputs=[shard]) as run:
            shard.write_bytes(b"shard")
        producers.append(run.run_id)
    merged = tmp_path / "demos.h5"
    with job("merge-demos", stage="merge", inputs=shards, outputs=[merged]) as merge:
        merged.write_bytes(b"merged")
    with job("bc", stage="bc", inputs=[merged]) as bc:
        pass
    assert client().get_run(merge.run_id).data.tags["demo2rl.upstream.collect"] == ",".join(
        producers
    )
    assert client().get_run(bc.run_id).data.tags["demo2rl.upstream.merge"] == merge.run_id
    # the record lies beside the output, never in it
    record = json.loads(lineage.sidecar_path(merged).read_text())
    assert record == {
        "run_id": merge.run_id,
        "stage": "merge",
        "run_name": "merge-demos",
        "tracking_uri": tracking.tracking_uri(),
    }
    assert merged.read_bytes() == b"merged"
    # a rerun that fails removes the old record: nothing downstream links a stale run
    with pytest.raises(RuntimeError), job("merge-demos", stage="merge", outputs=[merged]) as bad:
        raise RuntimeError("job failed")
    assert client().get_run(bad.run_id).info.status == "FAILED"
    assert not lineage.sidecar_path(merged).exists()


def test_unusable_store_is_retried_and_nothing_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """The store cannot be opened when the job starts and comes back later: the job works on,
    and the run is created late with everything logged in order."""
    isolated_tracking_env(monkeypatch)
    blocker = tmp_path / "store"
    blocker.write_text("a file where the store's directory should be")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{blocker / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "late")
    caplog.set_level(logging.INFO, logger="demo2rl.tracking")
    attempts = Attempts(monkeypatch)
    with job("rl", stage="rl") as run:
        for step in range(5):
            run.log_metrics({"x": step}, step=step)
        # the job logged on while its first call (create_run) was still held in flight: it
        # waits for no answer of the store, and no call is ever made in its own thread
        wait_for(lambda: attempts.first_in_flight)
        assert attempts.threads == ["mlflow-outbox"] and len(run.outbox.pending) == 6
        attempts.release()
        wait_for(lambda: "training continues" in caplog.text)
        assert run.run_id is None and len(run.outbox.pending) == 6  # create_run + 5 rows
        blocker.unlink()
        assert run.outbox.flush(grace=300), "sent at the next retry"
        assert run.run_id is not None
        for step in range(5, 8):
            run.log_metrics({"x": step}, step=step)
    assert "training continues" in caplog.text and "reachable again" in caplog.text
    history = client().get_metric_history(run.run_id, "x")
    assert [(m.step, m.value) for m in history] == [(s, float(s)) for s in range(8)]
    assert client().get_run(run.run_id).info.status == "FINISHED"


def test_unreachable_server_never_stops_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    isolated_tracking_env(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(outbox, "FLUSH_GRACE_S", 2.0)
    caplog.set_level(logging.INFO, logger="demo2rl.tracking")
    out = tmp_path / "policy.pt"
    attempts = Attempts(monkeypatch)
    with job("rl", stage="rl", outputs=[out]) as run:
        for step in range(20):
            run.log_metrics({"x": step}, step=step)
        out.write_bytes(b"trained")
        # all of it while the first call was held in flight: nothing waited for the server
        wait_for(lambda: attempts.first_in_flight)
        assert attempts.threads == ["mlflow-outbox"] and len(run.outbox.pending) == 21
        attempts.release()
    # the job's end waited FLUSH_GRACE_S for the calls, then gave up on them (below): MLflow
    # does not retry a call itself (its default: 7 times with doubling waits, minutes)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert set(attempts.threads) == {"mlflow-outbox"}
    assert out.read_bytes() == b"trained"
    assert "training continues" in caplog.text and "giving up on" in caplog.text
    assert run.run_id is None and run.outbox.dropped == 22  # create, 20 metric rows, terminate
    assert not lineage.sidecar_path(out).exists()


def test_fail_on_error_makes_an_unreachable_server_fatal(monkeypatch: pytest.MonkeyPatch):
    isolated_tracking_env(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    strict = TrackingConfig(enabled=True, fail_on_error=True)
    with pytest.raises(MlflowException), job("rl", settings=strict):
        pytest.fail("the job must not start when its tracking fails")
    # MLflow's own retries are bounded (its default, 7 with doubling waits, takes minutes)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"


def test_settings_come_from_the_config():
    assert TrackingConfig.of(config.load(None)["tracking"]) == LENIENT  # the schema's default
    assert TrackingConfig.of({"enabled": True, "fail_on_error": True}).fail_on_error


def test_no_tracking_module_is_fingerprinted():
    """Tracking cannot change a result: an edit to any module of the package reruns no job
    (each declares itself ``RESULT_NEUTRAL``)."""
    package = [tracking.__name__]
    package += [f"{tracking.__name__}.{m.name}" for m in pkgutil.iter_modules(tracking.__path__)]
    assert [m for m in package if provenance.code_modules(m)] == []
    for stage in pkgutil.iter_modules(stages.__path__):
        modules = provenance.code_modules(f"{stages.__name__}.{stage.name}")
        assert not [m for m in modules if m.startswith(tracking.__name__)], stage.name


def test_every_name_of_the_interface_is_its_modules_own():
    """The package imports its modules on first use: each name it lists resolves to the object
    of the module that defines it, and it resolves no name it does not list."""
    assert sorted(tracking._HOME) == sorted(tracking.__all__)
    for name, module in tracking._HOME.items():
        home = importlib.import_module(f"{tracking.__name__}.{module}")
        assert getattr(tracking, name) is getattr(home, name), name
    with pytest.raises(AttributeError, match="no attribute 'parent_run'"):
        tracking.parent_run  # noqa: B018


def test_a_job_without_tracking_never_imports_mlflow(tmp_path):
    """``tracking.enabled: false``: the job glue, every stage and the untracked run import no
    MLflow (its import and SQLite store are about 3 s of a job's start), and the run removes
    the lineage record of the outputs' previous producer all the same."""
    out = tmp_path / "out.h5"
    out.write_bytes(b"")
    lineage.sidecar_path(out).write_text("{}")
    code = (
        "import pkgutil, sys, demo2rl.workflow.runner, demo2rl.stages as s\n"
        "for m in pkgutil.iter_modules(s.__path__): __import__(f'{s.__name__}.{m.name}')\n"
        "from demo2rl import tracking\n"
        f"with tracking.untracked_run([{str(out)!r}]) as run:\n"
        "    run.log_metrics({'a': 1.0}); run.log_figures([]); run.set_tags({'b': 2})\n"
        "    run.log_arm('bc', variant='base', metrics={'iqm': 1.0}, curve={}, inputs={})\n"
        "    with run.parent() as parent: assert parent is None\n"
        "print('mlflow' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert not lineage.sidecar_path(out).exists()


def test_settings_are_importable_without_mlflow():
    """Every Snakemake process builds the tracking config while parsing the workflow: no MLflow
    import."""
    code = "import sys, demo2rl.config; print('mlflow' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


# --------------------------------------------------------------------------------------------
# the experiment: model-training kind, and deleted in the UI


def start(experiment: str, store: Path) -> str:
    """A workflow start against the module's store, for ``experiment``; the parent run id."""
    parent = tracking.start_workflow(
        experiment, {"experiment": experiment}, LENIENT, results_dir=store
    )
    assert parent is not None
    return parent


def kind(experiment: str) -> str | None:
    return client().get_experiment_by_name(experiment).tags.get(tracking_store.EXPERIMENT_KIND_TAG)


def test_experiments_are_marked_as_model_training(env: Path):
    """MLflow 3's UI opens an experiment without this tag in its GenAI (traces) view."""
    assert tracking_store.EXPERIMENT_KIND_TAG == "mlflow.experimentKind"
    assert tracking_store.MODEL_TRAINING_KIND == "custom_model_development"
    assert kind("unit") == "custom_model_development"  # created by the workflow
    # one that exists without the tag (an older workflow's), or with the UI's guess, gets it
    client().create_experiment("untagged")
    guessed = client().create_experiment("guessed")
    client().set_experiment_tag(guessed, "mlflow.experimentKind", "genai_development_inferred")
    for name in ("untagged", "guessed"):
        start(name, env)
        assert kind(name) == "custom_model_development", name
    # a job's top-level run (no workflow) marks the experiment it creates
    os.environ.pop("MLFLOW_EXPERIMENT_ID")
    os.environ["MLFLOW_EXPERIMENT_NAME"] = "job-made"
    os.environ.pop(tracking.PARENT_ENV)
    with job("alone"):
        pass
    assert kind("job-made") == "custom_model_development"


def test_a_kind_chosen_by_hand_is_kept(env: Path, caplog: pytest.LogCaptureFixture):
    chosen = client().create_experiment("chosen")
    client().set_experiment_tag(chosen, "mlflow.experimentKind", "genai_development")
    start("chosen", env)
    assert kind("chosen") == "genai_development"
    assert "tagged mlflow.experimentKind=genai_development" in caplog.text


def test_deleted_experiment_is_restored_when_the_workflow_starts(
    env: Path, caplog: pytest.LogCaptureFixture
):
    """Deleted in the UI (MLflow's trash): the next workflow restores it and says so, instead of
    running without tracking."""
    first = start("trashed", env)
    experiment = client().get_experiment_by_name("trashed")
    client().delete_experiment(experiment.experiment_id)
    caplog.set_level(logging.WARNING, logger="demo2rl.tracking")
    second = start("trashed", env)
    restored = client().get_experiment(experiment.experiment_id)
    assert restored.lifecycle_stage == "active" and restored.name == "trashed"
    assert client().get_run(first).info.lifecycle_stage == "active"  # its runs came back too
    assert client().get_run(second).info.experiment_id == experiment.experiment_id
    assert os.environ["MLFLOW_EXPERIMENT_ID"] == experiment.experiment_id
    assert f"MLflow experiment 'trashed' (id {experiment.experiment_id})" in caplog.text
    assert "was deleted; restored it" in caplog.text
    assert f"mlflow gc --backend-store-uri {tracking.tracking_uri()}" in caplog.text
    assert f"--experiment-ids {experiment.experiment_id}" in caplog.text


def test_experiment_deleted_while_jobs_run_is_restored_and_nothing_is_lost(
    env: Path, caplog: pytest.LogCaptureFixture
):
    """Deleted while a job logs (its calls would be rejected), before a job starts (its run
    could not be created), and a job's run deleted alone: all restored, every value arrives."""
    start("busy", env)
    experiment_id = os.environ["MLFLOW_EXPERIMENT_ID"]
    caplog.set_level(logging.WARNING, logger="demo2rl.tracking")
    with job("running") as running:
        running.log_metrics({"x": 0}, step=0)
        running.outbox.flush()
        client().delete_experiment(experiment_id)
        running.log_metrics({"x": 1}, step=1)
        running.outbox.flush()
        assert client().get_experiment(experiment_id).lifecycle_stage == "active"
        client().delete_run(running.run_id)
        running.log_metrics({"x": 2}, step=2)
    client().delete_experiment(experiment_id)
    with job("late") as late:
        late.log_metrics({"x": 0}, step=0)
    for run in (running, late):
        assert run.outbox.dropped == 0
        got = client().get_run(run.run_id)
        assert got.info.lifecycle_stage == "active" and got.info.status == "FINISHED"
    steps = [m.step for m in client().get_metric_history(running.run_id, "x")]
    assert sorted(steps) == [0, 1, 2]
    assert [m.step for m in client().get_metric_history(late.run_id, "x")] == [0]
    assert caplog.text.count("was deleted; restored it") == 2
    assert f"MLflow run {running.run_id} (running) was deleted while its job ran" in caplog.text
    tracking.end_workflow(True, LENIENT)
    assert client().get_run(os.environ[tracking.PARENT_ENV]).info.status == "FINISHED"


def test_an_untracked_run_takes_every_call_a_stage_makes_of_a_run_and_does_nothing():
    """Its calls are declared once, with their signatures, on Run: the untracked run takes the
    ones the stages and the runner around them make (their source, read here) and no other."""
    from demo2rl.tracking.run import Run
    from demo2rl.tracking.untracked import STAGE_CALLS, Untracked
    from demo2rl.workflow import runner

    made = set()
    for path in [*Path(stages.__file__).parent.glob("*.py"), Path(runner.__file__)]:
        made |= set(re.findall(r"\brun\.(\w+)\(", path.read_text()))
    assert made - {"parent"} == STAGE_CALLS
    assert all(callable(getattr(Run, name, None)) for name in STAGE_CALLS)
    run = tracking.Untracked()
    assert isinstance(run, Untracked) and run.run_id is None
    for name in STAGE_CALLS:
        assert getattr(run, name)("anything", key=1) is None
    with run.parent() as parent:
        assert parent is None
    with pytest.raises(AttributeError, match="an untracked run has no 'terminate'"):
        run.terminate("FINISHED")
