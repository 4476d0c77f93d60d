"""DAgger rounds as workflow jobs, through the real workflow: two tiny rounds on the racing task
with few demonstrations, where the plain clone drifts off the track on states the expert never
visited (compounding errors) and the rounds' clones, trained on the expert's labels of their own
states, do better; raising the rounds from 2 to 3 plans round 3 and what starts from the last
clone, nothing else; a round killed while it writes resumes to the same clone, bit for bit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import TEST_CONFIG, copy_run, snakemake, untracked
from test_faults import WRITTEN, kill_while_writing, temp_files, unlock

from demo2rl import names, tasks
from demo2rl.demos import dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("dagger-workflow")]

EXPERIMENT = "test-dagger"
DEMO_EPISODES = 4
ROUND_EPISODES = 8
TEST_TASK = yaml.safe_load(TEST_CONFIG.read_text())["task"]
EXPERT, EXPERT_KWARGS = TEST_TASK["expert"]["entry_point"], TEST_TASK["expert"]["kwargs"]
TASK_KWARGS = TEST_TASK["env_kwargs"]


def dagger_config(workdir: Path, rounds: int) -> Path:
    """The test config, untracked, with few demonstrations and ``rounds`` DAgger rounds in which
    the clone alone drives (beta_decay 0: classic DAgger), one seed of the warm-started arm (it
    starts from the last clone), no variants, and 16 held-out tracks."""
    spec = untracked(yaml.safe_load(TEST_CONFIG.read_text()))
    spec |= {"experiment": EXPERIMENT, "variants": {}}
    spec["collect"] |= {"n_episodes": DEMO_EPISODES, "n_shards": 2}
    spec["bc"] |= {
        "dagger": {"rounds": rounds, "episodes": ROUND_EPISODES, "n_shards": 2, "beta_decay": 0.0}
    }
    spec["rl"] |= {"arms": ["bc"], "seeds": [0], "total_timesteps": 1024}
    spec["evaluate"] |= {"episodes": 16}
    path = workdir / f"dagger-{rounds}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def dagger_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two DAgger rounds, run end to end once for the module; its working directory."""
    workdir = tmp_path_factory.mktemp("dagger-run")
    snakemake(workdir, "--cores", "2", "--configfile", str(dagger_config(workdir, 2)))
    return workdir


def results(workdir: Path) -> Path:
    return workdir / "results" / EXPERIMENT


def round_dir(workdir: Path, r: int) -> Path:
    return results(workdir) / names.DAGGER_DIR.format(round=r)


def test_dagger_rounds_label_the_clones_states_and_beat_the_plain_clone(dagger_run):
    out = results(dagger_run)
    demos = dataset.read_tables(out / "demos" / "demos.h5")
    demo_steps = int(demos.episodes["length"].sum())
    summary = json.loads((out / "report" / "summary.json").read_text())
    for r in (1, 2):
        aggregate = dataset.read_tables(round_dir(dagger_run, r) / "demos.h5")
        # the aggregate: the dataset's episodes, then each round's, numbered on
        assert aggregate.n_episodes == DEMO_EPISODES + r * ROUND_EPISODES
        assert list(aggregate.episodes["index"]) == list(range(aggregate.n_episodes))
        metrics = json.loads((round_dir(dagger_run, r) / "metrics.json").read_text())
        labelled = int(aggregate.episodes["length"][DEMO_EPISODES:].sum())
        assert metrics["expert_calls_total"] == labelled == aggregate.n_steps - demo_steps
        assert metrics["demo_steps"] == demo_steps and metrics["dagger_round"] == r
        # every state of the round's episodes is labelled with the expert's action on it (the
        # clone drove them: beta_decay 0), not with the action the clone took
        rows = aggregate.step_rows(
            np.arange(DEMO_EPISODES + (r - 1) * ROUND_EPISODES, aggregate.n_episodes)
        )
        with h5py.File(round_dir(dagger_run, r) / "demos.h5", "r") as f:
            obs, actions = f["steps/observations"][()][rows], f["steps/actions"][()][rows]
        expert = tasks.load_expert(EXPERT, EXPERT_KWARGS)
        labels = tasks.checked_actions(expert, obs, tasks.spaces("Racing-v0", TASK_KWARGS)[1])
        np.testing.assert_array_equal(actions, labels)
        # the clone belongs to the experiment's dataset (the arms and evaluations check it)
        ckpt = torch.load(round_dir(dagger_run, r) / "policy.pt", weights_only=True)
        assert ckpt["meta"]["demos_hash"] == demos.attrs["content_hash"]
        row = summary["dagger"][r]
        assert row["round"] == r and row["expert_calls"] == metrics["expert_calls"]
        assert row["expert_calls_total"] == demo_steps + labelled
    # the last round's clone, on the held-out tracks, above the plain clone that compounds
    # its errors (the test task: 4 demonstrations; docs/dagger.md has the full-size figures)
    groups, improvement = summary["groups"], summary["probability_of_improvement"]
    last = names.dagger_policy(2)
    assert groups[last]["iqm"] > groups[names.BC]["iqm"] + 5.0, (groups[last], groups["bc"])
    assert groups[last]["iqm"] >= 0.8 * groups[names.EXPERT]["iqm"], groups
    assert improvement[f"{last}_vs_{names.BC}"]["probability"] >= 0.75
    md = (out / "report" / "summary.md").read_text()
    assert "DAgger clone, round 2" in md and "| round | expert calls (round) |" in md


def planned_jobs(workdir: Path, config: Path) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run of ``config`` plans in ``workdir``."""
    proc = snakemake(workdir, "-n", "--configfile", str(config), "--nolock")
    jobs = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout + proc.stderr):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        if rule and rule[1] != "all":
            found = re.search(r"^\s+wildcards: (.*)$", block, re.MULTILINE)
            jobs.add((rule[1], found[1] if found else ""))
    return jobs


def test_raising_the_rounds_plans_only_the_new_round_and_what_starts_from_it(dagger_run):
    """From 2 rounds to 3: round 3's jobs, its clone's evaluation, the arm that starts from the
    last clone and the report; not the dataset, the plain clone or rounds 1 and 2."""
    root = f"root={results(dagger_run).relative_to(dagger_run)}"
    jobs = planned_jobs(dagger_run, dagger_config(dagger_run, 3))
    rules = {rule for rule, _ in jobs}
    assert {
        ("dagger_shard", f"{root}, round=3, shard=0"),
        ("dagger_shard", f"{root}, round=3, shard=1"),
        ("aggregate_dagger", f"{root}, round=3"),
        ("train_dagger", f"{root}, round=3"),
        ("evaluate", f"{root}, policy=dagger3"),
        ("train_rl", f"{root}, arm=bc, seed=0"),
    } <= jobs
    assert not any("round=1" in w or "round=2" in w for _, w in jobs), jobs
    assert not rules & {"collect_shard", "merge_demos", "train_bc", "plot_bc"}, rules
    evaluated = {w.rpartition("policy=")[2] for rule, w in jobs if rule == "evaluate"}
    assert evaluated == {"dagger3", "rl-bc-seed0"}, evaluated
    # and back to 2 rounds: nothing to do
    assert planned_jobs(dagger_run, dagger_config(dagger_run, 2)) == set()


def test_a_round_killed_while_it_writes_resumes_to_the_same_clone(dagger_run, tmp_path):
    """SIGKILL the workflow while round 2's clone is written: the half-written file is left
    under a temporary name and the output is missing; going on with `--rerun-incomplete` gives
    the uninterrupted run's clone, bit for bit, and removes the temporary files. (The
    aggregate is written by the merge, whose kill test_faults has.)"""
    workdir = copy_run(dagger_run, tmp_path / "run")
    config = dagger_config(workdir, 2)
    here = round_dir(workdir, 2)
    target = str((here / "policy.pt").relative_to(workdir))
    for outputs, rule in ((["policy.pt", "metrics.json"], "train_dagger"),):
        paths = [str((here / o).relative_to(workdir)) for o in outputs]
        killed = kill_while_writing(
            workdir, config, paths, rule, target, "--forcerun", paths[0], "--rerun-incomplete"
        )
        assert killed.at_kill > WRITTEN and killed.tmp.is_file()
        # the file caught mid-write (the clone, or its metrics when the clone's write was
        # over before it was seen) does not exist
        assert killed.output.name in outputs and not killed.output.exists()
        unlock(workdir)
    snakemake(workdir, target, "--cores", "2", "--configfile", str(config), "--rerun-incomplete")
    reference = round_dir(dagger_run, 2)
    assert dataset.verify(here / "demos.h5") == dataset.verify(reference / "demos.h5")
    a, b = (torch.load(d / "policy.pt", weights_only=True)["state_dict"] for d in (here, reference))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not temp_files(here)
