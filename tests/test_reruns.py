"""Reruns touch exactly what a change touches, and the workflow reproduces itself (real runs).

A copy of the workflow (Snakefile, rules, scripts, config, library source) runs the test config
once in a fresh directory; each case then changes one thing and asks `snakemake -n` which jobs
would run. The same run, compared with the session's `test_workflow` run in another directory,
checks that the whole workflow is reproducible.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO, TEST_CONFIG, snakemake

from demo2rl import dataset

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
TREE = ("Snakefile", "rules", "scripts", "config", "report", "envs", "src", "profiles")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the workflow and library, run once on the test config in tree/work."""
    root = tmp_path_factory.mktemp("tree")
    for name in TREE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, root / name)
    (root / "work").mkdir()
    run(root, "--cores", "2")
    return root


def run(root: Path, *args: str, config: Path | None = None, check: bool = True):
    """Snakemake of the copied workflow (its own library first on the path) in root/work."""
    env = {"PYTHONPATH": str(root / "src")}
    cmd = ["-s", str(root / "Snakefile"), "--configfile", str(config or TEST_CONFIG), *args]
    return snakemake(root / "work", *cmd, env=env, check=check)


def planned(root: Path, *args: str, config: dict | None = None) -> dict[str, int]:
    """Rule -> number of jobs `snakemake -n` would run."""
    path = None
    if config is not None:
        path = root / "changed.yaml"
        path.write_text(yaml.safe_dump(config))
    proc = run(root, "-n", *args, config=path)
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return {}
    table = text.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.MULTILINE)}


def changed(path: str, value) -> dict:
    config = copy.deepcopy(CONFIG)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return config


UPSTREAM = {"collect_shard", "merge_demos", "train_bc"}


def test_no_change_means_nothing_to_do(tree):
    assert planned(tree) == {}


def test_rl_budget_reruns_only_rl_and_what_follows(tree):
    jobs = planned(tree, config=changed("rl.total_timesteps", 2 * CONFIG["rl"]["total_timesteps"]))
    assert jobs.get("train_rl") == 2 * len(CONFIG["rl"]["seeds"])
    assert not UPSTREAM & set(jobs), jobs
    if "evaluate" in jobs:  # evaluations of the RL runs only, not of the expert or the clone
        assert jobs["evaluate"] == jobs["train_rl"]


def test_bc_hyperparameter_reruns_bc_and_the_warm_started_runs(tree):
    jobs = planned(tree, config=changed("bc.learning_rate", 0.0005))
    assert jobs.get("train_bc") == 1
    assert jobs.get("train_rl") == len(CONFIG["rl"]["seeds"]), "only the bc arm uses the clone"
    assert not {"collect_shard", "merge_demos"} & set(jobs), jobs


def test_warm_start_switch_reruns_only_the_bc_arm(tree):
    jobs = planned(tree, config=changed("rl.warm_start.critic_warmup_steps", 0))
    assert jobs.get("train_rl") == len(CONFIG["rl"]["seeds"])
    assert not UPSTREAM & set(jobs), jobs


def test_number_of_episodes_reruns_from_collection(tree):
    jobs = planned(tree, config=changed("collect.n_episodes", CONFIG["collect"]["n_episodes"] + 3))
    assert jobs.get("collect_shard") == CONFIG["collect"]["n_shards"]
    assert jobs.get("merge_demos") == 1 and jobs.get("train_bc") == 1
    assert jobs.get("train_rl") == 2 * len(CONFIG["rl"]["seeds"])


def test_an_added_seed_runs_only_that_seed(tree):
    seeds = CONFIG["rl"]["seeds"]
    jobs = planned(tree, config=changed("rl.seeds", [*seeds, max(seeds) + 1]))
    assert jobs.get("train_rl") == 2, jobs
    assert not UPSTREAM & set(jobs), jobs


def test_threads_resources_and_profile_change_nothing(tree, tmp_path):
    assert planned(tree, "--set-threads", "train_bc=1", "--cores", "1") == {}
    assert planned(tree, "--set-resources", "train_rl:mem_mb=1234", "train_bc:runtime=5") == {}
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text("latency-wait: 30\nprintshellcmds: false\n")
    assert planned(tree, "--profile", str(profile)) == {}


def edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
    return text


def test_library_edit_reruns_the_stage_that_imports_it(tree):
    bc_py = tree / "src" / "demo2rl" / "bc.py"
    original = edit(
        bc_py, "nll = -dist.log_prob(actions).mean()", "nll = -1.0 * dist.log_prob(actions).mean()"
    )
    try:
        jobs = planned(tree)
    finally:
        bc_py.write_text(original)
    assert jobs.get("train_bc") == 1
    assert "collect_shard" not in jobs and "merge_demos" not in jobs


def test_comment_only_library_edit_changes_nothing(tree):
    bc_py = tree / "src" / "demo2rl" / "bc.py"
    original = edit(
        bc_py, "\ndef bc_loss(", "\n# a comment that changes no behaviour\ndef bc_loss("
    )
    try:
        assert planned(tree) == {}
    finally:
        bc_py.write_text(original)


def test_comment_only_script_edit_reruns_that_rule(tree):
    """Documented behaviour: Snakemake's `code` trigger hashes the script's text, comments
    included, so a comment in scripts/train_bc.py reruns train_bc and what follows it."""
    script = tree / "scripts" / "train_bc.py"
    original = edit(script, "from demo2rl", "# a comment\nfrom demo2rl")
    try:
        jobs = planned(tree)
    finally:
        script.write_text(original)
    assert jobs.get("train_bc") == 1
    assert "collect_shard" not in jobs


def test_two_fresh_runs_give_identical_results(tree, test_workflow):
    a = test_workflow / "results" / EXP
    b = tree / "work" / "results" / EXP
    hashes = [dataset.read(p / "demos" / "demos.h5").attrs["content_hash"] for p in (a, b)]
    assert hashes[0] == hashes[1]
    for rel in ["bc/policy.pt"] + [
        f"rl/{init}/seed-{s}/policy.pt" for init in ("bc", "scratch") for s in CONFIG["rl"]["seeds"]
    ]:
        sa, sb = (torch.load(p / rel, weights_only=True)["state_dict"] for p in (a, b))
        for key in sa:
            assert torch.equal(sa[key], sb[key]), f"{rel}: {key} differs"
    for s in CONFIG["rl"]["seeds"]:
        rel = f"rl/bc/seed-{s}/evaluations.csv"
        assert pd.read_csv(a / rel).equals(pd.read_csv(b / rel)), rel


def test_dataset_hash_does_not_depend_on_the_number_of_shards(tree, test_workflow):
    jobs_config = changed("collect.n_shards", 1)
    jobs_config["collect"]["n_envs"] = 7
    path = tree / "one-shard.yaml"
    path.write_text(yaml.safe_dump(jobs_config))
    work = tree / "one-shard"
    work.mkdir()
    env = {"PYTHONPATH": str(tree / "src")}
    snakemake(
        work,
        "-s",
        str(tree / "Snakefile"),
        "--configfile",
        str(path),
        "--cores",
        "2",
        f"results/{EXP}/demos/demos.h5",
        env=env,
    )
    one = dataset.read(work / "results" / EXP / "demos" / "demos.h5")
    ref = dataset.read(test_workflow / "results" / EXP / "demos" / "demos.h5")
    assert one.attrs["content_hash"] == ref.attrs["content_hash"]
    assert (
        len(one.attrs["shards"]) == 1 and len(ref.attrs["shards"]) == CONFIG["collect"]["n_shards"]
    )
    assert os.path.getsize(work / "results" / EXP / "demos" / "demos.h5") > 0
