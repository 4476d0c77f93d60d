"""Faults: a hard-killed workflow resumes to identical results; bad files are named; full disks
give a clear error. Every case runs the real workflow."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import BIN, REPO, TEST_CONFIG, snakemake

from demo2rl import dataset

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
BC_TARGET = f"results/{EXP}/bc/policy.pt"


def start(workdir: Path, *args: str) -> subprocess.Popen:
    """Snakemake in its own process group (so SIGKILL takes it and its jobs down at once)."""
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(TEST_CONFIG),
        "--cores",
        "2",
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DEMO2RL_"))}
    out = open(workdir / "snakemake-output.log", "a")
    return subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )


def kill_when(proc: subprocess.Popen, started: Path, timeout: float = 300) -> None:
    """SIGKILL the whole workflow as soon as ``started`` (a job's log file) exists."""
    deadline = time.time() + timeout
    while not started.exists():
        if proc.poll() is not None:
            output = Path(proc.args[4], "snakemake-output.log").read_text()[-4000:]
            pytest.fail(f"workflow ended (rc {proc.returncode}) before {started.name}:\n{output}")
        if time.time() > deadline:
            pytest.fail(f"{started} never appeared")
        time.sleep(0.05)
    time.sleep(0.3)  # let the job get going
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    while True:  # until every process of the group (the jobs too) is gone
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)


def test_sigkill_during_collection_merging_and_bc_then_rerun_incomplete(tmp_path, test_workflow):
    logs = tmp_path / "results" / EXP / "logs"
    for started in (
        logs / "collect_shard" / "0.log",
        logs / "merge_demos.log",
        logs / "train_bc.log",
    ):
        kill_when(start(tmp_path, BC_TARGET, "--rerun-incomplete"), started)
        # a hard-killed Snakemake leaves its lock behind
        snakemake(tmp_path, "--configfile", str(TEST_CONFIG), "--unlock")
    snakemake(
        tmp_path, "--configfile", str(TEST_CONFIG), "--cores", "2", "--rerun-incomplete", BC_TARGET
    )
    ours, ref = (p / "results" / EXP for p in (tmp_path, test_workflow))
    assert (
        dataset.read(ours / "demos" / "demos.h5", verify=True).attrs["content_hash"]
        == dataset.read(ref / "demos" / "demos.h5").attrs["content_hash"]
    )
    a, b = (
        torch.load(p / "bc" / "policy.pt", weights_only=True)["state_dict"] for p in (ours, ref)
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not list((ours / "demos").glob(".*tmp*")), "no temporary files left behind"


def test_a_truncated_shard_is_named_by_the_merge(tmp_path):
    target = f"results/{EXP}/demos/shard-1.h5"
    snakemake(
        tmp_path, "--configfile", str(TEST_CONFIG), "--cores", "2", f"results/{EXP}/demos/demos.h5"
    )
    shard = tmp_path / target
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 3])
    proc = snakemake(
        tmp_path,
        "--configfile",
        str(TEST_CONFIG),
        "--cores",
        "1",
        f"results/{EXP}/demos/demos.h5",
        "--forcerun",
        "merge_demos",
        check=False,
    )
    assert proc.returncode != 0
    log = (tmp_path / "results" / EXP / "logs" / "merge_demos.log").read_text()
    assert f"{target}: unreadable or incomplete HDF5 dataset" in log


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs needs root")
def test_a_full_disk_gives_a_clear_error(tmp_path):
    demos = tmp_path / "results" / EXP / "demos"
    demos.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(demos)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        proc = snakemake(
            tmp_path,
            "--configfile",
            str(TEST_CONFIG),
            "--cores",
            "1",
            f"results/{EXP}/demos/shard-0.h5",
            check=False,
        )
    finally:
        subprocess.run(["umount", str(demos)], check=False)
    assert proc.returncode != 0
    log = (tmp_path / "results" / EXP / "logs" / "collect_shard" / "0.log").read_text()
    assert f"results/{EXP}/demos/shard-0.h5: not enough disk space" in log
    assert not (demos / "shard-0.h5").exists()
