"""Shared fixtures: the repository paths and a runner for the real Snakemake workflow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TEST_CONFIG = REPO / "config" / "test.yaml"
ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
"""CI sets CI=true: there a real component that cannot start is a failure, never a skip."""


def unavailable(reason: str) -> NoReturn:
    """A real component this test needs (SLURM, Chromium, a tmpfs mount) cannot start: skip
    the test with ``reason`` on a developer's machine, fail it with ``reason`` when CI=true, so
    that a CI machine missing a component never passes by skipping what it was meant to run."""
    if ON_CI:
        pytest.fail(f"CI=true and a real component is unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def snakemake(
    workdir: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the repository's workflow in ``workdir`` (a fresh results/ tree)."""
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    run_env |= env or {}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=1500)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@pytest.fixture(scope="session")
def test_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test config run once, end to end, with 2 cores; returns its working directory."""
    workdir = tmp_path_factory.mktemp("workflow")
    snakemake(workdir, "--cores", "2", "--configfile", str(TEST_CONFIG))
    return workdir
