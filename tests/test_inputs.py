"""Consumers verify their inputs: BC and RL recompute the dataset's content hash before training,
and the RL and evaluation jobs refuse a checkpoint trained on another dataset, naming both files
(real workflow jobs on a copy of the session's finished test run)."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import TEST_CONFIG, copy_run, snakemake

from demo2rl.demos import dataset

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]


@pytest.fixture
def work(test_workflow: Path, tmp_path: Path, untracked_config: Path) -> Path:
    """A copy of the finished test run (without its MLflow store and RL state), with the test
    config its jobs rerun under, untracked (conftest.untracked), as ``config.yaml``."""
    copy = copy_run(test_workflow, tmp_path / "work", "mlflow.db", "mlartifacts", "state")
    shutil.copy(untracked_config, copy / "config.yaml")
    return copy


def run_job(work: Path, rule: str, target: str) -> tuple[int, str]:
    """Force the job of ``rule`` that writes ``target``; its return code and its log. The
    target from the finished run is removed first: a refused job must write nothing."""
    (work / target).unlink()
    proc = snakemake(
        work,
        "--configfile",
        str(work / "config.yaml"),
        "--cores",
        "1",
        "--forcerun",
        rule,
        target,
        check=False,
    )
    logs = sorted((work / "results" / EXP / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)
    return proc.returncode, logs[-1].read_text() + proc.stdout + proc.stderr


def alter_one_value(path: Path) -> None:
    """Change one observation in place: the file stays a valid HDF5 dataset."""
    with h5py.File(path, "r+") as f:
        obs = f["steps/observations"]
        obs[5, 0] = obs[5, 0] + np.float32(0.5)


def test_verify_recomputes_the_hash_of_the_file_in_blocks(work: Path):
    path = work / "results" / EXP / "demos" / "demos.h5"
    recorded = dataset.read_attrs(path)["content_hash"]
    assert dataset.verify(path) == recorded == dataset.content_hash(dataset.read(path))
    alter_one_value(path)
    with pytest.raises(dataset.DatasetError, match="content hash mismatch") as caught:
        dataset.verify(path)
    assert str(path) in str(caught.value)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(dataset.DatasetError, match="unreadable"):
        dataset.verify(path)


@pytest.mark.parametrize(
    ("rule", "target"),
    [("train_bc", "bc/policy.pt"), ("train_rl", "rl/scratch/seed-0/policy.pt")],
)
def test_training_refuses_an_altered_dataset(work: Path, rule: str, target: str):
    demos = work / "results" / EXP / "demos" / "demos.h5"
    alter_one_value(demos)
    rc, log = run_job(work, rule, f"results/{EXP}/{target}")
    assert rc != 0
    assert f"results/{EXP}/demos/demos.h5: content hash mismatch" in log
    assert not (work / "results" / EXP / target).exists()


def foreign_clone(work: Path) -> Path:
    """The clone, as if trained on another dataset (its recorded dataset hash differs)."""
    path = work / "results" / EXP / "bc" / "policy.pt"
    ckpt = torch.load(path, weights_only=True)
    ckpt["meta"]["dataset_hash"] = "0" * 64
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize(
    ("rule", "target"),
    [("train_rl", "rl/residual/seed-0/policy.pt"), ("evaluate", "eval/bc.json")],
)
def test_a_clone_of_another_dataset_is_refused_naming_both_files(
    work: Path, rule: str, target: str
):
    foreign_clone(work)
    rc, log = run_job(work, rule, f"results/{EXP}/{target}")
    assert rc != 0
    assert f"results/{EXP}/bc/policy.pt: trained on the dataset with content hash 0000" in log
    assert f"this run's dataset results/{EXP}/demos/demos.h5 has content hash" in log
    assert not (work / "results" / EXP / target).exists()
