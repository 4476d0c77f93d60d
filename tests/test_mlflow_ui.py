"""The MLflow UI for real: `make ui` serves the test workflow's store, headless Chromium renders
the experiment's runs page, every run is listed, and Ctrl-C stops the server and its workers.

The screenshot is kept at results/test-artifacts/mlflow-ui.png.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TEST_CONFIG, unavailable
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EXP = yaml.safe_load(TEST_CONFIG.read_text())["experiment"]
SCREENSHOT = REPO / "results" / "test-artifacts" / "mlflow-ui.png"
# without the virtual-time flags headless Chromium captures only the page's loading skeleton
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--virtual-time-budget=20000",
    "--run-all-compositor-stages-before-draw",
    "--window-size=1400,900",
]

GENAI_NAV = ("Training runs", "Evaluation runs", "Judges", "Agent versions")
"""Side-bar entries of the UI's GenAI view of an experiment (the model-training view has none)."""


def chromium() -> str:
    """Debian's headless-capable Chromium, installed with apt-get when missing (as root)."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        unavailable("needs Chromium: `apt-get install chromium` (Debian package), as root")
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            unavailable(f"could not install Chromium ({' '.join(cmd)}): {proc.stderr[-500:]}")
    found = shutil.which("chromium")
    if not found:
        unavailable("apt-get installed chromium but it is not on PATH")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"make ui exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the MLflow UI did not come up within {timeout} s")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_make_ui_lists_the_runs_and_stops_on_ctrl_c(test_workflow: Path, tmp_path: Path):
    browser = chromium()
    results = test_workflow / "results"
    store = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    experiment = store.get_experiment_by_name(EXP)
    names = {r.info.run_name for r in store.search_runs([experiment.experiment_id])}
    assert len(names) > 5
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # -o: use the venv as it is (never reinstall it from a test)
    cmd = ["make", "-C", str(REPO), "-o", ".venv/.installed", "ui", f"PORT={port}"]
    cmd.append(f"RESULTS_DIR={results}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    with open(tmp_path / "make-ui.log", "w") as log:
        ui = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, text=True, start_new_session=True
        )
    try:
        wait_healthy(url, ui)
        # sorted by name, the runs table lists child runs flat instead of folding them into
        # their workflow's parent run. 3.17.2's UI opens the GenAI view unless asked for the
        # model-training one, by its switch at the top left (kept in the browser) or by
        # workflowType in the address; it does not go by the experiment's kind tag
        query = urllib.parse.urlencode(
            {
                "orderByKey": "tags.`mlflow.runName`",
                "orderByAsc": "true",
                "workflowType": "machine_learning",
            }
        )
        page = f"{url}/#/experiments/{experiment.experiment_id}/runs?{query}"
        profile = ["--user-data-dir=" + str(tmp_path / "chromium")]
        dom = subprocess.run(
            [browser, *CHROMIUM_FLAGS, *profile, "--dump-dom", page],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [browser, *CHROMIUM_FLAGS, *profile, f"--screenshot={SCREENSHOT}", page],
            capture_output=True,
            timeout=120,
            check=True,
        )
        print(f"MLflow UI screenshot: {SCREENSHOT}")
    finally:
        os.killpg(ui.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        deadline = time.monotonic() + 30
        while group_alive(ui.pid) and time.monotonic() < deadline:
            ui.poll()
            time.sleep(0.3)
        stopped = not group_alive(ui.pid)
        if not stopped:
            os.killpg(ui.pid, signal.SIGKILL)
        ui.wait(timeout=30)
    printed = (tmp_path / "make-ui.log").read_text()
    assert f"MLflow UI: {url}" in printed
    assert EXP in dom
    # the model-training view: its side bar (Runs, Models), none of the GenAI view's entries
    assert ">Runs<" in dom and ">Models<" in dom, f"not the model-training view: {page}"
    genai = {label for label in GENAI_NAV if f">{label}<" in dom}
    assert not genai, f"GenAI view entries on {page}: {genai}"
    missing = {name for name in names if f">{name}<" not in dom}
    assert not missing, f"runs not listed on {page}: {missing}"
    assert SCREENSHOT.stat().st_size > 20_000
    assert stopped, f"processes of `make ui` still running 30 s after Ctrl-C:\n{printed[-2000:]}"
