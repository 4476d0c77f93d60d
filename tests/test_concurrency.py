"""Two invocations of the workflow at once on one ``results/``: with two experiments both finish
and share one intact MLflow store (its creation is serialised by a file lock); the same
experiment twice is refused by Snakemake's own lock, and the refused invocation tracks nothing.
Each invocation runs the test config up to one collection shard: the store is created in the
start hook, before the first job, so that is where two invocations meet."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import BIN, TEST_CONFIG, isolated_tracking_env, snakemake_call

from demo2rl import tracking
from demo2rl.config import TrackingConfig
from demo2rl.tracking import store

pytestmark = pytest.mark.integration


def config_file(workdir: Path, experiment: str) -> Path:
    """The test config as ``experiment``, with tracking failures fatal: a store that cannot be
    created or opened fails the invocation instead of being logged and retried."""
    spec = yaml.safe_load(TEST_CONFIG.read_text()) | {"experiment": experiment}
    spec["tracking"] = {"fail_on_error": True}
    path = workdir / f"{experiment}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def shard(experiment: str) -> str:
    return f"results/{experiment}/demos/shard-0.h5"


@contextlib.contextmanager
def started(workdir: Path, experiment: str, log: Path) -> Iterator[subprocess.Popen]:
    """Snakemake for ``experiment``'s first shard, in its own process group, output to ``log``;
    killed with its jobs if the test leaves it running."""
    args, env = snakemake_call(
        workdir,
        shard(experiment),
        "--cores",
        "1",
        "--configfile",
        str(config_file(log.parent, experiment)),
    )
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "snakemake"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def finished(proc: subprocess.Popen, log: Path, timeout: float = 300) -> str:
    """The invocation's output once it has ended, which it must have done successfully."""
    rc = proc.wait(timeout=timeout)
    text = log.read_text()
    assert rc == 0, f"{' '.join(map(str, proc.args))} failed ({rc}):\n{text}"
    return text


def store_runs(workdir: Path) -> dict[str, list[tuple[str, str, str | None]]]:
    """Per experiment in the workflow's store: (run name, status, stage tag) of each run,
    read with sqlite3 after checking the file's integrity."""
    db = workdir / "results" / "mlflow.db"
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = con.execute(
            "SELECT e.name, r.name, r.status, t.value FROM runs r"
            " JOIN experiments e ON e.experiment_id = r.experiment_id"
            " LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'demo2rl.stage'"
        ).fetchall()
    runs: dict[str, list[tuple[str, str, str | None]]] = {}
    for experiment, *run in rows:
        runs.setdefault(experiment, []).append(tuple(run))
    return {k: sorted(v, key=str) for k, v in runs.items()}


def test_two_experiments_started_together_share_one_intact_store(tmp_path: Path):
    """Both start hooks create or open results/mlflow.db at the same moment: they take turns
    (the store's lock), both invocations finish, and the store holds both experiments' runs."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    logs = {exp: tmp_path / f"{exp}.log" for exp in ("left", "right")}
    with started(workdir, "left", logs["left"]) as left:
        with started(workdir, "right", logs["right"]) as right:
            procs = {"left": left, "right": right}
            outputs = {exp: finished(proc, logs[exp]) for exp, proc in procs.items()}
    for exp in logs:
        assert (workdir / shard(exp)).is_file()
        assert "MLflow: parent run" in outputs[exp]
    runs = store_runs(workdir)
    for exp in logs:
        job, parent = runs[exp]
        assert parent[1:] == ("FINISHED", "workflow") and parent[0].startswith("workflow-")
        assert job == ("collect-shard0", "FINISHED", "collect")
    assert set(runs) == {"left", "right"}  # no Default experiment either: nothing logged outside


def test_store_lock_names_its_holder_and_a_waiting_start_goes_on_when_it_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A workflow's start waits for the store's lock; past the wait it fails (even with
    tracking failures not fatal: this is no outage) naming the holder, and creates nothing."""
    isolated_tracking_env(monkeypatch)  # what start_workflow sets is undone after the test
    results = tmp_path / "results"
    uri = tracking.default_tracking_uri(results)
    lenient = TrackingConfig(enabled=True, fail_on_error=False)
    holder = subprocess.Popen(
        [
            str(BIN / "python"),
            "-c",
            "import sys, time\n"
            "from demo2rl.tracking import store\n"
            "with store.lock_store(sys.argv[1], 'a test holding the store'):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(3600)\n",  # until killed below
            uri,
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr("demo2rl.tracking.store.STORE_LOCK_WAIT_S", 0.5)
        with pytest.raises(store.StoreBusy) as caught:
            tracking.start_workflow("waiting", {"experiment": "waiting"}, lenient, results)
        message = str(caught.value)
        assert f"MLflow store {results.resolve() / 'mlflow.db'}" in message
        assert '"a test holding the store"' in message and f'"pid": {holder.pid}' in message
        assert "still after" in message
        assert not (results / "mlflow.db").exists()  # nothing was created meanwhile
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the kernel releases its lock
        holder.wait()
    parent = tracking.start_workflow("waiting", {"experiment": "waiting"}, lenient, results)
    assert parent is not None
    assert (results / "mlflow.db.lock").read_text() == ""  # held by nobody, naming nobody


def test_the_same_experiment_twice_is_refused_by_snakemakes_lock(tmp_path: Path):
    """While one invocation runs (held still with SIGSTOP, past its start hook, so it cannot end
    first), a second one of the same experiment is refused by Snakemake's lock, with its advice
    (make sure no other Snakemake runs there; --unlock only for a lock left by a kill); it never
    reaches the start hook, so it leaves no run in the store. The first then finishes."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with started(workdir, "twice", first_log) as first:
        deadline = time.monotonic() + 120
        while "MLflow: parent run" not in first_log.read_text():
            assert first.poll() is None, first_log.read_text()
            assert time.monotonic() < deadline, first_log.read_text()
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGSTOP)  # still running, as far as anyone can tell
        try:
            with started(workdir, "twice", second_log) as second:
                rc = second.wait(timeout=120)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        refusal = second_log.read_text()
        assert rc != 0, refusal
        assert "Directory cannot be locked" in refusal
        assert "make sure that no other Snakemake process is trying to create the same files" in (
            " ".join(refusal.split())
        )
        assert "If you are sure that no other instances of snakemake are running" in refusal
        assert "MLflow" not in refusal  # refused before the start hook
        finished(first, first_log)
    runs = store_runs(workdir)
    assert [run[1:] for run in runs["twice"]] == [("FINISHED", "collect"), ("FINISHED", "workflow")]
