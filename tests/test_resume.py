"""A train_rl job of the real workflow killed hard while it trains, then rerun: it resumes from
its checkpoint and ends bit for bit where the uninterrupted session run ended."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

import pandas as pd
import pytest
import torch
import yaml
from conftest import BIN, TEST_CONFIG, checkpointed_step, copy_run, snakemake, snakemake_call
from test_rl import same_progress

pytestmark = pytest.mark.integration
EXP = yaml.safe_load(TEST_CONFIG.read_text())["experiment"]
RUN = f"results/{EXP}/rl/bc/seed-0"
"""The run killed here: the warm start's (a clone, a critic warm-up: most of the arm's state)."""


def test_a_training_job_killed_hard_resumes_to_the_uninterrupted_result(test_workflow, tmp_path):
    """SIGKILL of the whole invocation (Snakemake and its job, as an OOM kill or a lost node
    would) once the job has checkpointed mid-training; the rerun resumes that checkpoint (the log
    says so) and writes the session run's policy weights, evaluations and progress rows."""
    work = copy_run(test_workflow, tmp_path / "run")
    for name in ("policy.pt", "progress.csv", "evaluations.csv"):
        (work / RUN / name).unlink()
    shutil.rmtree(work / RUN / "state")
    total = yaml.safe_load(TEST_CONFIG.read_text())["rl"]["total_timesteps"]
    run = ("--configfile", str(TEST_CONFIG), "--cores", "1", f"{RUN}/policy.pt")
    # checkpoints every 256 steps (a speed setting: a resource, it changes no result)
    args, env = snakemake_call(work, *run, "--set-resources", "train_rl:checkpoint_every=256")
    with open(tmp_path / "killed.log", "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "snakemake"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    state = work / RUN / "state"
    deadline = time.monotonic() + 900  # a bound on a hang, not a speed
    while checkpointed_step(state) < 512 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    stopped = checkpointed_step(state)
    assert 512 <= stopped < total, f"killed at checkpoint {stopped} of {total}"
    assert not (work / RUN / "policy.pt").exists()

    # as a user would after a hard kill: Snakemake's lock stayed behind, and says to do this
    snakemake(work, "--configfile", str(TEST_CONFIG), "--unlock")
    snakemake(work, *run)
    log = (work / f"results/{EXP}/logs/train_rl/bc-seed0.log").read_text()
    # from the last checkpoint: the one state.json showed, or a later one if the kill came
    # between the checkpoint's rename and its readable copy's
    resumed_from = re.search(r"resuming from step (\d+) \(resume #1\)", log)
    assert resumed_from, log[-3000:]
    assert stopped <= int(resumed_from[1]) < total, (stopped, resumed_from[0])
    fresh = torch.load(test_workflow / RUN / "policy.pt", weights_only=True)
    resumed = torch.load(work / RUN / "policy.pt", weights_only=True)
    assert fresh["state_dict"].keys() == resumed["state_dict"].keys()
    for name, value in fresh["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][name]), name
    for table in ("evaluations.csv", "progress.csv"):
        same_progress(*(pd.read_csv(d / RUN / table) for d in (test_workflow, work)))
    steps = pd.read_csv(work / RUN / "progress.csv")["time/total_timesteps"]
    assert steps.is_unique and steps.is_monotonic_increasing
