"""Server mode: the workflow logs to a real `mlflow server` (checked through its REST API), and a
tracking outage in the middle of an RL job costs no training."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from conftest import BIN, REPO, TEST_CONFIG, isolated_tracking_env, snakemake, unavailable
from mlflow.exceptions import MlflowException

from demo2rl import tracking
from demo2rl.config import TrackingConfig
from demo2rl.demos import dataset
from demo2rl.tracking import lineage, store

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("mlflow-server")]
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
RESULTS = f"results/{EXP}"
# through BC, its loss plot and one RL run: every kind of training job and every lineage link,
# in a couple of minutes
TARGET = f"{RESULTS}/rl/bc/seed-0/policy.pt"
LOSS_PLOT = f"{RESULTS}/bc/loss.png"
JOBS = {
    "collect-shard0",
    "collect-shard1",
    "collect-shard2",
    "merge-demos",
    "bc",
    "plot-bc",
    "rl-bc-seed0",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """A real ``mlflow server`` on a loopback port with a SQLite store under ``root``.

    It runs in its own session (setsid), and stopping it signals that whole process group: the
    server's workers outlive a plain kill of the server process.
    """

    def __init__(
        self,
        root: Path,
        port: int | None = None,
        *,
        app_name: str | None = None,
        env: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.root = root
        self.port = port or free_port()
        self.store = f"sqlite:///{root / 'mlflow.db'}"
        self.app_name = app_name
        self.env = env or {}
        self.auth = auth
        """Credentials (user, password) of the REST calls below, for a server with a login."""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 600.0) -> None:
        """Start the server and wait until it answers /health."""
        cmd = [
            str(BIN / "mlflow"),
            "server",
            "--host=127.0.0.1",
            f"--port={self.port}",
            "--workers=1",
            f"--backend-store-uri={self.store}",
            f"--artifacts-destination={self.root / 'artifacts'}",
            *([f"--app-name={self.app_name}"] if self.app_name else []),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # GenAI job runners: not needed
        env |= self.env
        with open(self.root / "server.log", "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not up after {timeout} s:\n{self.log_tail()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signal the server's process group and wait until every process in it is gone."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # the session leader: its pid is the group id
        deadline = time.monotonic() + timeout
        with_signal = sig
        while True:
            try:
                os.killpg(pgid, with_signal)
            except ProcessLookupError:
                break
            self.proc.poll()  # reap the leader, or it stays in the group as a zombie
            time.sleep(0.3)
            with_signal = 0  # afterwards only probe whether the group still exists
            if time.monotonic() > deadline:
                with_signal, deadline = signal.SIGKILL, time.monotonic() + timeout
        self.proc.wait(timeout=timeout)
        self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        return (self.root / "server.log").read_text(errors="replace")[-chars:]

    def get(self, endpoint: str, **query: Any) -> dict[str, Any]:
        return self.call("GET", f"{endpoint}?{urllib.parse.urlencode(query)}")

    def post(self, endpoint: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", endpoint, payload)

    def call(
        self,
        method: str,
        endpoint: str,
        payload: dict[str, Any] | None = None,
        auth: tuple[str, str] | None = None,
    ) -> dict[str, Any]:
        """One REST call to ``/api/2.0/mlflow/<endpoint>`` (or to ``endpoint`` if it is a path),
        with ``auth`` (default :attr:`auth`) as HTTP basic credentials when there are any."""
        headers = {"Content-Type": "application/json"}
        user_password = auth or self.auth
        if user_password:
            token = base64.b64encode(":".join(user_password).encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        path = endpoint if endpoint.startswith("/") else f"/api/2.0/mlflow/{endpoint}"
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=None if payload is None else json.dumps(payload).encode(),
            headers=headers,
            method=method,
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        """Every run of the experiment, through REST, with tags/params/metrics as dicts."""
        experiment_id = self.get("experiments/get-by-name", experiment_name=experiment)
        payload = {"experiment_ids": [experiment_id["experiment"]["experiment_id"]]}
        runs = self.post("runs/search", payload | {"max_results": 1000}).get("runs", [])
        for run in runs:
            for part in ("tags", "params", "metrics"):
                run["data"][part] = {x["key"]: x["value"] for x in run["data"].get(part, [])}
        return runs


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served(server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test config through BC (and its loss plot) and one RL run, every job logging to the
    server."""
    workdir = tmp_path_factory.mktemp("served")
    snakemake(
        workdir,
        TARGET,
        LOSS_PLOT,
        "--cores=2",
        "--configfile",
        str(TEST_CONFIG),
        env={"MLFLOW_TRACKING_URI": server.url},
    )
    return workdir


def by_name(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {run["info"]["run_name"]: run for run in runs}


def config_file(path: Path, **sections: dict[str, Any]) -> Path:
    """The test config with some sections updated, keys in their original order."""
    config = yaml.safe_load(TEST_CONFIG.read_text())
    for name, values in sections.items():
        config[name] = config.get(name, {}) | values
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_every_job_logs_to_the_server(server: MlflowServer, served: Path):
    runs = server.runs(EXP)
    parents = [r for r in runs if r["data"]["tags"].get("demo2rl.stage") == "workflow"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent["info"]["status"] == "FINISHED"
    assert parent["data"]["params"]["collect.n_episodes"] == str(CONFIG["collect"]["n_episodes"])
    assert parent["data"]["params"]["tracking.fail_on_error"] == "False"
    children = by_name(r for r in runs if r is not parent)
    assert set(children) == JOBS
    for name, run in children.items():
        tags, params, metrics = (run["data"][k] for k in ("tags", "params", "metrics"))
        assert run["info"]["status"] == "FINISHED", name
        assert tags["mlflow.parentRunId"] == parent["info"]["run_id"], name
        assert tags["demo2rl.code_revision"] and tags["demo2rl.rule"], name
        assert float(metrics["job_seconds"]) > 0, name
        assert "tracking" not in {key.split(".")[0] for key in params}, name
    shard = children["collect-shard1"]
    assert shard["data"]["tags"]["demo2rl.stage"] == "collect"
    assert shard["data"]["tags"]["demo2rl.wildcard.shard"] == "1"
    assert shard["data"]["params"]["task.env_id"] == "Racing-v0"
    bc = children["bc"]
    assert bc["data"]["params"]["bc.max_epochs"] == str(CONFIG["bc"]["max_epochs"])
    # the server holds the job's own comparison of the clone with the expert on the same
    # held-out episodes (bc/metrics.json). The clone's quality is test_workflow's to check, on
    # the evaluate stage's 8 episodes: on BC's 4 short ones the test config's clone scores 0.11
    # of the expert after 8 epochs, 0.007 after 20 (0.27 on the 8), random actions 0.034
    written = json.loads((served / RESULTS / "bc" / "metrics.json").read_text())
    logged = {k: float(v) for k, v in bc["data"]["metrics"].items()}
    for key in ("bc_return_mean", "expert_return_mean", "bc_vs_expert", "best_valid_nll"):
        assert logged[f"final.{key}"] == pytest.approx(written[key]), key
    assert logged["final.heldout_episodes"] == CONFIG["evaluate"]["during_training"]
    rl = children["rl-bc-seed0"]
    assert rl["data"]["tags"]["demo2rl.wildcard.arm"] == "bc"
    assert rl["data"]["params"]["rl.total_timesteps"] == str(CONFIG["rl"]["total_timesteps"])
    assert "train/approx_kl" in rl["data"]["metrics"]
    # the job outputs live in the workflow's results, the tracking data on the server only
    assert not (served / "results" / "mlflow.db").exists()
    assert not (served / "mlruns").exists() and not (served / "results" / "mlartifacts").exists()
    listed = server.get("artifacts/list", run_id=bc["info"]["run_id"])
    assert "policy.pt" in {f["path"] for f in listed["files"]}
    # the loss plot is drawn from BC's metrics.json by a job of its own (rule plot_bc)
    plot = children["plot-bc"]
    assert plot["data"]["tags"]["demo2rl.rule"] == "plot_bc"
    listed = server.get("artifacts/list", run_id=plot["info"]["run_id"])
    assert "loss.png" in {f["path"] for f in listed["files"]}


def test_one_rl_rollout_is_one_row_of_metrics(server: MlflowServer, served: Path):
    rl = by_name(server.runs(EXP))["rl-bc-seed0"]
    history = server.get(
        "metrics/get-history", run_id=rl["info"]["run_id"], metric_key="time/total_timesteps"
    )["metrics"]
    progress = pd.read_csv(served / RESULTS / "rl/bc/seed-0/progress.csv")
    assert [m["step"] for m in history] == progress["time/total_timesteps"].tolist()


def test_runs_record_their_dataset_and_the_runs_they_consumed(server: MlflowServer, served: Path):
    runs = by_name(server.runs(EXP))
    ids = {name: run["info"]["run_id"] for name, run in runs.items()}
    tags = {name: run["data"]["tags"] for name, run in runs.items()}
    shards = ",".join(ids[f"collect-shard{k}"] for k in range(3))
    assert tags["merge-demos"]["demo2rl.upstream.collect"] == shards
    assert tags["bc"]["demo2rl.upstream.merge"] == ids["merge-demos"]
    assert tags["rl-bc-seed0"]["demo2rl.upstream.merge"] == ids["merge-demos"]
    assert tags["rl-bc-seed0"]["demo2rl.upstream.bc"] == ids["bc"]
    assert tags["plot-bc"]["demo2rl.upstream.bc"] == ids["bc"]
    demos = served / RESULTS / "demos" / "demos.h5"
    digest = dataset.read(demos).attrs["content_hash"]
    for name in ("merge-demos", "bc", "rl-bc-seed0"):
        (entry,) = runs[name]["inputs"]["dataset_inputs"]
        assert entry["dataset"]["digest"] == digest[:36], name
        assert json.loads(entry["dataset"]["source"])["uri"] == str(demos.resolve()), name
        assert tags[name]["demo2rl.dataset_hash"] == digest, name
    (shard_input,) = runs["collect-shard0"]["inputs"]["dataset_inputs"]
    assert shard_input["dataset"]["name"] == "shard-0.h5"


def test_tracking_settings_rerun_nothing(served: Path, tmp_path: Path):
    """Switching fail_on_error changes no result, so it must rerun no job (compared with the
    same dry run without the switch: library edits elsewhere may rerun jobs meanwhile)."""
    strict = config_file(tmp_path / "strict.yaml", tracking={"fail_on_error": True})

    def would_run(config: Path) -> list[str]:
        out = snakemake(served, TARGET, "-n", "--configfile", str(config)).stdout
        return sorted(line.strip() for line in out.splitlines() if "reason:" in line)

    assert would_run(strict) == would_run(TEST_CONFIG)


def test_fail_on_error_stops_the_workflow_when_the_server_is_down(served: Path, tmp_path: Path):
    strict = config_file(tmp_path / "strict.yaml", tracking={"fail_on_error": True})
    demos = served / RESULTS / "demos" / "demos.h5"
    before = demos.stat().st_mtime_ns
    proc = snakemake(
        served,
        str(demos.relative_to(served)),
        "--cores=1",
        "--forcerun=merge_demos",
        "--configfile",
        str(strict),
        env={"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"},
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Connection refused" in output or "Max retries exceeded" in output, output
    assert demos.stat().st_mtime_ns == before, "no job may run"


def test_server_outage_mid_run_loses_no_training(
    server: MlflowServer, served: Path, tmp_path: Path
):
    """Kill the server while an RL job trains, start it again: the job trains on, buffers its
    metrics, says so in its log, and the server ends up with every rollout's row.

    The workflow is held (SIGSTOP) while the server restarts, so that the restart, however slow
    on a loaded machine, never outlasts the job's wait for its store at the end."""
    longer = config_file(
        tmp_path / "longer.yaml",
        rl={"total_timesteps": 32768, "checkpoint_every": 16384, "eval_every": 16384},
    )
    target = f"{RESULTS}/rl/scratch/seed-0/policy.pt"
    log_path = served / RESULTS / "logs/train_rl/scratch-seed0.log"
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(served), target]
    cmd += ["--cores=1", "--configfile", str(longer)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    env["MLFLOW_TRACKING_URI"] = server.url
    with open(tmp_path / "snakemake.out", "w") as out:
        workflow = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        wait_for(lambda: len(progress_lines(log_path)) >= 1, 600, "training to start")
        server.stop(signal.SIGKILL)  # a crash, not a shutdown
        wait_for(lambda: trained_after_failure(log_path) >= 2, 600, "training during the outage")
        os.killpg(workflow.pid, signal.SIGSTOP)
        try:
            server.start()
        finally:
            os.killpg(workflow.pid, signal.SIGCONT)
        assert workflow.wait(timeout=1200) == 0, (tmp_path / "snakemake.out").read_text()
    finally:
        if workflow.poll() is None:
            os.killpg(workflow.pid, signal.SIGKILL)
            workflow.wait()
    text = log_path.read_text()
    assert "training continues, tracking calls are buffered" in text
    assert "reachable again" in text
    out_dir = served / RESULTS / "rl/scratch/seed-0"
    assert all((out_dir / name).is_file() for name in ("policy.pt", "progress.csv"))
    assert (out_dir / "evaluations.csv").is_file()
    rl = [r for r in server.runs(EXP) if r["info"]["run_name"] == "rl-scratch-seed0"]
    assert len(rl) == 1 and rl[0]["info"]["status"] == "FINISHED"
    history = server.get(
        "metrics/get-history", run_id=rl[0]["info"]["run_id"], metric_key="time/total_timesteps"
    )["metrics"]
    progress = pd.read_csv(out_dir / "progress.csv")
    assert [m["step"] for m in history] == progress["time/total_timesteps"].tolist()
    assert progress["time/total_timesteps"].iloc[-1] == 32768
    assert lineage.sidecar_path(out_dir / "policy.pt").is_file()


STEP_LINE = re.compile(r"^\d\d:\d\d:\d\d INFO demo2rl\.rl: step \d+/", re.MULTILINE)


def progress_lines(log_path: Path) -> list[int]:
    """The offset in the log of each training progress line."""
    if not log_path.is_file():
        return []
    return [match.start() for match in STEP_LINE.finditer(log_path.read_text())]


def trained_after_failure(log_path: Path) -> int:
    """Progress lines after the job logged its first tracking failure."""
    failed = log_path.read_text().find("MLflow tracking failed") if log_path.is_file() else -1
    return 0 if failed < 0 else sum(offset > failed for offset in progress_lines(log_path))


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# a server with a login: MLflow's basic-auth app

ADMIN = ("admin", "first-admin-password")
ADMIN_CHANGED = ("admin", "changed-admin-password")
ALICE = ("alice", "alice-password-123")
AUTH_CONFIG = """\
[mlflow]
default_permission = NO_PERMISSIONS
database_uri = sqlite:///{root}/basic_auth.db
admin_username = admin
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = 60
"""


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real ``mlflow server --app-name basic-auth`` (as in docs/mlflow.md): the admin's first
    password from MLFLOW_AUTH_ADMIN_PASSWORD, then changed; a user ``alice`` created by the
    admin. Nobody but the admin and the experiments' creators may read anything."""
    root = tmp_path_factory.mktemp("mlflow-auth")
    config = root / "basic_auth.ini"
    config.write_text(AUTH_CONFIG.format(root=root))
    env = {
        "MLFLOW_AUTH_CONFIG_PATH": str(config),
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "a-static-secret-for-the-test",
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN[1],
    }
    server = MlflowServer(root, app_name="basic-auth", env=env, auth=ADMIN)
    try:
        server.start()
    except RuntimeError as err:
        unavailable(f"mlflow server --app-name basic-auth did not start: {err}")
    try:
        password = {"username": "admin", "password": ADMIN_CHANGED[1]}
        server.call("PATCH", "users/update-password", password | {"current_password": ADMIN[1]})
        server.auth = ADMIN_CHANGED
        server.post("users/create", {"username": ALICE[0], "password": ALICE[1]})
        yield server
    finally:
        server.stop()


def status_of(server: MlflowServer, endpoint: str, auth: tuple[str, str] | None) -> int:
    """The HTTP status of a plain GET to the REST API with ``auth`` (None: no credentials)."""
    url = f"{server.url}/api/2.0/mlflow/{endpoint}"
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30):
            return 200
    except urllib.error.HTTPError as err:
        return err.code


def test_a_server_with_a_login_refuses_requests_without_credentials(auth_server: MlflowServer):
    search = "experiments/search?max_results=10"
    assert status_of(auth_server, search, None) == 401
    assert status_of(auth_server, search, ADMIN) == 401, "the admin's first password is gone"
    assert status_of(auth_server, search, ("alice", "a-wrong-password")) == 401
    assert status_of(auth_server, search, ADMIN_CHANGED) == 200
    assert status_of(auth_server, search, ALICE) == 200


def test_the_workflow_logs_to_a_server_with_a_login(auth_server: MlflowServer, tmp_path: Path):
    """A real (tiny) workflow run whose jobs get the user's credentials from the environment,
    as SLURM passes it: the parent run and the job's run arrive, made by that user."""
    workdir = tmp_path / "work"
    shard = f"{RESULTS}/demos/shard-0.h5"
    credentials = {"MLFLOW_TRACKING_USERNAME": ALICE[0], "MLFLOW_TRACKING_PASSWORD": ALICE[1]}
    env = {"MLFLOW_TRACKING_URI": auth_server.url, **credentials}
    snakemake(workdir, shard, "--cores=1", "--configfile", str(TEST_CONFIG), env=env)
    runs = by_name(auth_server.runs(EXP))
    shard_name, parent_name = sorted(runs)
    assert parent_name.startswith("workflow-") and shard_name == "collect-shard0"
    parent, shard_run = runs[parent_name], runs[shard_name]
    assert parent["info"]["status"] == shard_run["info"]["status"] == "FINISHED"
    assert shard_run["data"]["tags"]["mlflow.parentRunId"] == parent["info"]["run_id"]
    assert float(shard_run["data"]["metrics"]["job_seconds"]) > 0
    experiment = auth_server.get("experiments/get-by-name", experiment_name=EXP)["experiment"]
    tags = {t["key"]: t["value"] for t in experiment["tags"]}
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    # created with alice's login: hers to manage (and to restore if it is deleted)
    query = {"username": ALICE[0], "resource_type": "experiment"}
    query["resource_id"] = experiment["experiment_id"]
    endpoint = f"/api/3.0/mlflow/users/permissions/get?{urllib.parse.urlencode(query)}"
    assert auth_server.call("GET", endpoint)["permission"] == "MANAGE"


def test_missing_credentials_stop_the_workflow_at_its_start(
    auth_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
):
    """Every job's tracking would be refused: the workflow stops before any job, saying why."""
    isolated_tracking_env(monkeypatch, MLFLOW_TRACKING_URI=auth_server.url)
    monkeypatch.setenv("HOME", str(auth_server.root))  # no ~/.mlflow/credentials either
    with pytest.raises(MlflowException, match="401") as caught:
        tracking.start_workflow(
            "no-login",
            {"experiment": "no-login"},
            TrackingConfig(enabled=True, fail_on_error=False),
        )
    message = str(caught.value)
    assert "rejected the workflow's tracking at its start" in message
    assert "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in message
    assert tracking.PARENT_ENV not in os.environ


def test_a_deleted_experiment_the_user_cannot_restore_is_an_error_naming_it(
    auth_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
):
    """The admin's experiment, shared with alice for editing, deleted by the admin: alice's
    workflow may not restore it and stops with an error that names it and says what to do."""
    experiment_id = auth_server.post("experiments/create", {"name": "admins"})["experiment_id"]
    grant = {"username": ALICE[0], "resource_type": "experiment", "resource_id": experiment_id}
    auth_server.call(
        "POST", "/api/3.0/mlflow/users/permissions/grant", grant | {"permission": "EDIT"}
    )
    auth_server.post("experiments/delete", {"experiment_id": experiment_id})
    isolated_tracking_env(
        monkeypatch,
        MLFLOW_TRACKING_URI=auth_server.url,
        MLFLOW_TRACKING_USERNAME=ALICE[0],
        MLFLOW_TRACKING_PASSWORD=ALICE[1],
    )
    with pytest.raises(store.ExperimentDeleted) as caught:
        tracking.start_workflow(
            "admins", {"experiment": "admins"}, TrackingConfig(enabled=True, fail_on_error=False)
        )
    message = str(caught.value)
    assert f"MLflow experiment 'admins' (id {experiment_id})" in message
    assert "is deleted and could not be restored" in message and "403" in message
    assert f"mlflow experiments restore --experiment-id {experiment_id}" in message
    assert (
        auth_server.get("experiments/get", experiment_id=experiment_id)["experiment"][
            "lifecycle_stage"
        ]
        == "deleted"
    )
