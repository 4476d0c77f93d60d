"""Speed-only settings change speed, never results, and two fresh runs agree: the test workflow
run a second time, in an empty directory, with other envs per shard, evaluation batch sizes,
checkpoint spacing and threads, gives outputs identical to the session's run, bit for bit.

These settings reach the jobs as Snakemake resources and threads, so changing them reruns
nothing (tests/test_rerun_matrix.py); this test shows that running anyway would not change a
bit of what the first run produced. (tests/test_reruns.py compares its reruns with the
session's run: this is what makes that run a fair reference.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import TEST_CONFIG, snakemake

from demo2rl import dataset
from demo2rl.groups import ARMS

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
WALL_CLOCK = ("time/fps", "time/time_elapsed")
SEEDS = CONFIG["rl"]["seeds"]


@pytest.fixture(scope="module")
def run_with_other_speed_settings(tmp_path_factory) -> Path:
    """A fresh run of the test config with other speed settings, through the outputs the tests
    compare (every job but the summary and the figures, which take no speed setting)."""
    work = tmp_path_factory.mktemp("speed")
    assert CONFIG["collect"]["n_envs"] != 3 and CONFIG["evaluate"]["n_envs"] != 3
    policies = ["expert", "bc", *(f"rl-{init}-seed{seed}" for init in ARMS for seed in SEEDS)]
    snakemake(
        work,
        "--configfile",
        str(TEST_CONFIG),
        "--cores",
        "2",
        *(f"results/{EXP}/eval/{policy}.json" for policy in policies),  # before the lists below
        "--set-resources",
        "collect_shard:envs=3",
        "train_bc:eval_envs=3",
        "train_rl:eval_envs=3",
        "train_rl:checkpoint_every=3000",
        "evaluate:envs=3",
        "--set-threads",
        "train_bc=2",
    )
    return work


def test_the_second_run_really_used_the_other_settings(
    test_workflow: Path, run_with_other_speed_settings: Path
):
    before, after = (
        p / "results" / EXP / "logs" for p in (test_workflow, run_with_other_speed_settings)
    )
    assert "threads=2" in (after / "train_bc.log").read_text()
    checkpoints = [
        (p / "train_rl" / "scratch-seed0.log").read_text().count("checkpoint at step")
        for p in (before, after)
    ]
    assert checkpoints[1] < checkpoints[0], checkpoints


def test_outputs_are_identical(test_workflow: Path, run_with_other_speed_settings: Path):
    a = test_workflow / "results" / EXP
    b = run_with_other_speed_settings / "results" / EXP
    hashes = {p: dataset.read_attrs(p / "demos" / "demos.h5")["content_hash"] for p in (a, b)}
    assert hashes[a] == hashes[b]
    checkpoints = ["bc/policy.pt"]
    checkpoints += [f"rl/{i}/seed-{s}/policy.pt" for i in ARMS for s in SEEDS]
    for rel in checkpoints:
        sa, sb = (torch.load(p / rel, weights_only=True)["state_dict"] for p in (a, b))
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(sa[key], sb[key]), f"{rel}: {key} differs"
    for rel in [f"rl/{i}/seed-0/{f}" for i in ARMS for f in ("evaluations.csv",)]:
        pd.testing.assert_frame_equal(pd.read_csv(a / rel), pd.read_csv(b / rel))
    for init in ARMS:
        rel = f"rl/{init}/seed-0/progress.csv"
        ta, tb = (pd.read_csv(p / rel).drop(columns=list(WALL_CLOCK)) for p in (a, b))
        pd.testing.assert_frame_equal(ta, tb)
    bc_a, bc_b = (json.loads((p / "bc" / "metrics.json").read_text()) for p in (a, b))
    for key in ("bc_return_mean", "expert_return_mean", "best_valid_nll", "best_epoch"):
        assert bc_a[key] == bc_b[key], key
    for path in sorted((a / "eval").glob("[!.]*.json")):  # not the hidden MLflow sidecars
        ea, eb = (json.loads((p / "eval" / path.name).read_text()) for p in (a, b))
        assert ea["episodes"] == eb["episodes"], path.name
        assert ea["first_episode"] == eb["first_episode"], path.name
