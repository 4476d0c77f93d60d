"""Shared fixtures: the repository paths, a runner for the real Snakemake workflow, the one
finished run of the test config that every worker shares, and the order of the tests for
pytest-xdist (``make test`` runs them on several workers)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
import warm_snakemake
import yaml
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TEST_CONFIG = REPO / "config" / "test.yaml"
ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
"""CI sets CI=true: there a real component that cannot start is a failure, never a skip."""

if os.environ.get("PYTEST_XDIST_WORKER"):
    # workers share the cores: one OpenMP/BLAS thread each by default (in the jobs they start
    # too), else idle threads spin on cores the other workers need. Results never depend on it:
    # the code sets torch's threads itself wherever they could matter.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def untracked(spec: dict) -> dict:
    """A config ``spec`` with ``tracking.enabled: false``: its jobs skip MLflow (its import and
    store take about 3 of a test job's 7 CPU-seconds). For the workflow runs of tests that check
    no tracking: results are the same either way (test_reruns compares such reruns with the
    session's tracked run bit for bit), and the session's run, the SLURM run and
    test_mlflow_server keep tracking every job."""
    return spec | {"tracking": {**spec.get("tracking", {}), "enabled": False}}


@pytest.fixture(scope="session")
def untracked_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test config without tracking (:func:`untracked`), as a file."""
    path = tmp_path_factory.mktemp("untracked") / "test-untracked.yaml"
    path.write_text(yaml.safe_dump(untracked(yaml.safe_load(TEST_CONFIG.read_text()))))
    return path


def checkpointed_step(state_dir: Path) -> int:
    """The step of an RL run's last checkpoint (its readable copy, state.json), -1 before the
    first (or while the copy is being replaced)."""
    try:
        return json.loads((state_dir / "state.json").read_text())["timesteps"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return -1


def tracking_env_keys() -> tuple[str, ...]:
    """The environment variables demo2rl.tracking reads or sets: MLflow's URI, credential,
    experiment and HTTP settings, and demo2rl's parent run."""
    from demo2rl import tracking  # imports MLflow: only for the tests that ask

    http = ("TIMEOUT", "MAX_RETRIES", "BACKOFF_FACTOR")
    return (
        *(f"MLFLOW_TRACKING_{k}" for k in ("URI", "USERNAME", "PASSWORD")),
        *("MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", tracking.PARENT_ENV),
        *(f"MLFLOW_HTTP_REQUEST_{k}" for k in http),
    )


def isolated_tracking_env(mp: pytest.MonkeyPatch, **env: str) -> None:
    """Only ``env`` of :func:`tracking_env_keys`: each is recorded by ``mp``, so whatever the
    code under test sets is undone after the test."""
    for key in tracking_env_keys():
        mp.setenv(key, "")
        mp.delenv(key)
    for key, value in env.items():
        mp.setenv(key, value)


def unavailable(reason: str) -> NoReturn:
    """A real component this test needs (SLURM, Chromium, a tmpfs mount) cannot start: skip
    the test with ``reason`` on a developer's machine, fail it with ``reason`` when CI=true, so
    that a CI machine missing a component never passes by skipping what it was meant to run."""
    if ON_CI:
        pytest.fail(f"CI=true and a real component is unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def snakemake_call(
    workdir: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """The arguments (after ``snakemake``) and the environment of a call of the repository's
    workflow in ``workdir``: this environment without MLflow's and demo2rl's settings, plus
    ``env``."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    return ["-s", str(REPO / "Snakefile"), "-d", str(workdir), *args], run_env | (env or {})


def checked(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """``proc``, or an AssertionError with its output if it failed."""
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(proc.args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def run_call(
    call: tuple[list[str], dict[str, str]], check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a :func:`snakemake_call` as ``snakemake`` would, in a fork of a process that has
    imported Snakemake (:func:`warm_snakemake.call`: the workflow, its jobs and their
    environment as in a fresh process)."""
    call_args, run_env = call
    proc = warm_snakemake.call(call_args, run_env, timeout=1500)
    return checked(proc) if check else proc


def snakemake(
    workdir: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the repository's workflow in ``workdir`` (a fresh results/ tree)."""
    return run_call(snakemake_call(workdir, *args, env=env), check)


# --------------------------------------------------------------------------------------------
# the finished run of the test config, made once per session (by one worker of several)


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that every pytest-xdist worker sees: the parent of the
    workers' own temporary directories (basetemp/gw0, ...), or basetemp without workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def test_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test config run once, end to end, with 2 cores; returns its working directory.

    One run serves the whole session: the first worker to ask makes it while the others wait
    (a file lock), and a run that failed fails every test that asks for it, with its output,
    without being tried again. Tests only read it, or run dry runs in it (Snakemake locks
    nothing for those); a test that reruns jobs works on a copy (:func:`copy_run`)."""
    root = session_dir(tmp_path_factory)
    workdir = root / "workflow"
    outcome = root / "workflow.json"
    with FileLock(root / "workflow.lock"):
        if not outcome.exists():
            try:
                workdir.mkdir()
                snakemake(workdir, "--cores", "2", "--configfile", str(TEST_CONFIG))
            except BaseException as err:
                outcome.write_text(json.dumps({"error": f"{type(err).__name__}: {err}"}))
                raise
            outcome.write_text(json.dumps({"error": None}))
    error = json.loads(outcome.read_text())["error"]
    if error:
        pytest.fail(f"the session's run of the test config failed:\n{error}", pytrace=False)
    return workdir


SNAKEMAKE_SCRATCH = (".snakemake/iocache", ".snakemake/log")
"""What Snakemake writes and deletes in a finished run's directory even during dry runs and
summaries, which other workers may be running in the shared run while it is copied."""


def copy_run(workdir: Path, dest: Path, *ignore: str) -> Path:
    """Copy the finished run in ``workdir`` (outputs with their modification times, and
    Snakemake's records) to ``dest``, leaving out the names matching ``ignore`` and Snakemake's
    scratch files; ``dest`` is then a run of its own that jobs may rerun in."""
    skip = shutil.ignore_patterns(*ignore)

    def ignored(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(workdir)
        scratch = {n for n in names if (rel / n).as_posix() in SNAKEMAKE_SCRATCH}
        return scratch | set(skip(directory, names))

    shutil.copytree(workdir, dest, ignore=ignored)
    return dest


# --------------------------------------------------------------------------------------------
# order for pytest-xdist (`make test`: -n N --dist loadgroup --no-loadscope-reorder)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests (marked slow: a minute or more) first, then the other integration tests,
    then the unit tests, each in the files' order: the workers start the minutes-long ones
    while the short ones are left to fill the gaps at the end. The modules whose tests share a
    cluster or servers keep to one worker through xdist's own ``xdist_group`` marks."""

    def rank(item: pytest.Item) -> int:
        return (
            0
            if item.get_closest_marker("slow")
            else 1
            if item.get_closest_marker("integration")
            else 2
        )

    items.sort(key=rank)  # stable: within a rank, the files' own order
