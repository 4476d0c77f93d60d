"""`make report` (snakemake --report) builds the HTML report of a finished run, with captions."""

from __future__ import annotations

import base64
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import BIN, REPO, TEST_CONFIG, copy_run

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())


def make_report_command(workdir: Path) -> list[str]:
    """The command `make report` runs, pointed at ``workdir`` and the test config.

    ``make -n`` only prints it (nothing is built or installed); the test runs it itself.
    """
    smk = f"{BIN / 'snakemake'} -s {REPO / 'Snakefile'} -d {workdir} --configfile {TEST_CONFIG}"
    proc = subprocess.run(
        ["make", "-n", "-s", "-o", ".venv/.installed", "report", f"SNAKEMAKE={smk}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in proc.stdout.splitlines() if "--report" in line]
    assert len(lines) == 1, proc.stdout
    return shlex.split(lines[0])


def test_make_report_builds_the_html_report(test_workflow: Path, tmp_path: Path):
    """On a copy of the session's run (which other tests read while this one writes)."""
    workdir = copy_run(test_workflow, tmp_path / "run", "mlflow.db", "mlartifacts", "state")
    cmd = make_report_command(workdir)
    assert cmd[-2:] == ["--report", "results/report.html"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    html = (workdir / "results" / "report.html").read_text()
    # every output marked with report(), under its category, with its rendered caption
    for name in (
        "learning_curves.png",
        "final_returns.png",
        "track_lines.png",
        "best_lap.gif",
        "policies.csv",
        "improvement.csv",
        "loss.png",
        "variants.png",
    ):
        assert name in html, name
    for category in ("Evaluation", "Racing", "Behaviour cloning", "Variants"):
        assert category in html
    # the test config's variant's figures and tables beside the base's
    for variant in CONFIG["variants"]:
        for name in ("plots/learning_curves.png", "plots/final_returns.png", "policies.csv"):
            assert f"variants/{variant}/report/{name}" in html, (variant, name)
    assert "Learning curves of every RL arm" in html
    # captions are templates: the config's values are filled in
    episodes = CONFIG["evaluate"]["episodes"]
    assert f"Final comparison on {episodes} held-out episodes" in html
    assert f">{CONFIG['experiment']}</span>" in html  # the workflow description's template
    assert "bc, residual, kickstart, scratch" in html  # the arms of rl.arms
    # the figures are embedded (data URIs), the PNGs among them
    embedded = re.findall(r"data:image/png;[^,]*base64,([A-Za-z0-9+/=]{100,})", html)
    assert embedded and all(base64.b64decode(d[:64])[:8] == b"\x89PNG\r\n\x1a\n" for d in embedded)
