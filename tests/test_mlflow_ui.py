"""The MLflow UI for real: `make ui` serves the test workflow's store, headless Chromium renders
the experiment's runs page, every run is listed; the link `make ui` prints for the experiment
opens its arm runs with their IQM; and Ctrl-C stops the server and its workers.

The screenshots are kept in the test's temporary directory (pytest keeps the last three
sessions': the test prints where); docs/mlflow-arms.png, the picture docs/mlflow.md shows, is a
copy of mlflow-arms.png (copied by hand: a test run leaves the repository's files as they are).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TEST_CONFIG, unavailable
from mlflow.tracking import MlflowClient

from demo2rl.tracking.arms import ARM_FILTER

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EXP = yaml.safe_load(TEST_CONFIG.read_text())["experiment"]
VARIANT_DIRS = {"base": "."} | {
    name: f"variants/{name}" for name in yaml.safe_load(TEST_CONFIG.read_text())["variants"]
}
"""The test config's variants (the base config first) and their results under the experiment's."""
STOP_WAIT = 120
"""How long `make ui` may take to stop after Ctrl-C: a bound on a hang, not a speed."""
# without the virtual-time flags headless Chromium captures only the page's loading skeleton
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--virtual-time-budget=20000",
    "--run-all-compositor-stages-before-draw",
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


def render(browser: str, page: str, profile: Path, screenshot: Path, size: str) -> str:
    """The DOM of ``page`` in headless Chromium (a fresh ``profile``: no view remembered from
    another page), and its screenshot at ``size`` (``width,height``)."""
    flags = [*CHROMIUM_FLAGS, f"--window-size={size}", f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=600
    ).stdout
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [browser, *flags, f"--screenshot={screenshot}", page],
        capture_output=True,
        timeout=600,
        check=True,
    )
    print(f"MLflow UI screenshot: {screenshot}")
    return dom


class GridCells(HTMLParser):
    """The text of each cell of the UI's runs table: (row id, which is the run id, column id)
    -> text; and each row's place in the table (``rows``: row id -> index). A run's row is split
    over the table's pinned and scrolled parts, with one id."""

    def __init__(self, dom: str) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str], str] = {}
        self.rows: dict[str, int] = {}
        self._row: str | None = None
        self._cell: tuple[str, str] | None = None
        self._depth = 0
        self.feed(dom)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("role") == "row" and a.get("row-id"):
            self._row = a["row-id"]
            self.rows[self._row] = int(a.get("row-index") or -1)
        if self._cell is not None:
            self._depth += tag == "div"
        elif a.get("role") == "gridcell" and self._row and a.get("col-id"):
            self._cell, self._depth = (self._row, a["col-id"]), 0
            self.cells[self._cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if self._cell is not None and tag == "div":
            if self._depth == 0:
                self._cell = None
            else:
                self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self.cells[self._cell] += data


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = 600.0) -> None:
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


def test_make_ui_lists_the_runs_links_the_arms_and_stops_on_ctrl_c(
    test_workflow: Path, tmp_path: Path
):
    browser = chromium()
    results = test_workflow / "results"
    store = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    experiment = store.get_experiment_by_name(EXP)
    names = {r.info.run_name for r in store.search_runs([experiment.experiment_id])}
    assert len(names) > 5
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    arm_runs = store.search_runs([experiment.experiment_id], ARM_FILTER)
    # one arm run per arm of each variant (the base and the test config's own), with its figures
    summaries = {
        variant: json.loads((results / EXP / sub / "report" / "summary.json").read_text())
        for variant, sub in VARIANT_DIRS.items()
    }
    arms = {g.removeprefix("rl_") for g in summaries["base"]["groups"] if g.startswith("rl_")}
    tagged = [(r.data.tags["demo2rl.variant"], r.data.tags["demo2rl.arm"]) for r in arm_runs]
    assert sorted(tagged) == sorted((v, a) for v in VARIANT_DIRS for a in arms)

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
        # the experiment's line of what `make ui` printed before the server started
        printed = (tmp_path / "make-ui.log").read_text()
        lines = [line for line in printed.splitlines() if line.startswith(f"  {EXP}: ")]
        assert len(lines) == 1, f"no link for {EXP} among what make ui printed:\n{printed}"
        arms_page = lines[0].removeprefix(f"  {EXP}: ")
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
        shot, arms_shot = tmp_path / "mlflow-ui.png", tmp_path / "mlflow-arms.png"
        dom = render(browser, page, tmp_path / "chromium", shot, "1400,900")
        arms_dom = render(browser, arms_page, tmp_path / "chromium-arms", arms_shot, "1900,560")
    finally:
        os.killpg(ui.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        deadline = time.monotonic() + STOP_WAIT
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
    assert shot.stat().st_size > 20_000
    # the printed link: the model-training view, the arm runs alone, each with its IQM shown
    assert arms_page.startswith(f"{url}/#/experiments/{experiment.experiment_id}/runs?")
    assert ">Runs<" in arms_dom and not {label for label in GENAI_NAV if f">{label}<" in arms_dom}
    assert 'data-testid="sort-header-iqm"' in arms_dom, f"no iqm column on {arms_page}"
    grid = GridCells(arms_dom)
    cells = grid.cells
    assert set(grid.rows) == {r.info.run_id for r in arm_runs}, f"not the arm runs: {arms_page}"
    best_first = sorted(arm_runs, key=lambda r: -r.data.metrics["iqm"])
    assert sorted(grid.rows, key=grid.rows.get) == [r.info.run_id for r in best_first]
    for run in arm_runs:
        arm, variant = run.data.tags["demo2rl.arm"], run.data.tags["demo2rl.variant"]
        assert f"arm-{arm}" in cells[run.info.run_id, "attributes.`Run Name`"]
        shown = cells[run.info.run_id, "metrics.`iqm`"]
        assert float(shown) == summaries[variant]["groups"][f"rl_{arm}"]["iqm"], (arm, shown)
    assert arms_shot.stat().st_size > 20_000
    assert stopped, f"`make ui` still running {STOP_WAIT} s after Ctrl-C:\n{printed[-2000:]}"
