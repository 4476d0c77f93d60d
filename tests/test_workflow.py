"""The real workflow, end to end, on the test config: outputs, logs and MLflow runs."""

from __future__ import annotations

import json
from pathlib import Path

import configs
import h5py
import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO, TEST_CONFIG, snakemake, untracked

from demo2rl import arms, names, seeds, tasks
from demo2rl.arms import BUILTIN as ARMS
from demo2rl.demos import dataset
from demo2rl.learning import evaluation

pytestmark = pytest.mark.integration
CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]


def results(workdir: Path) -> Path:
    return workdir / "results" / EXP


def runs(workdir: Path):
    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'results' / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=[EXP], output_format="list")


def test_dataset_is_merged_from_the_shards(test_workflow: Path):
    demos = dataset.read(results(test_workflow) / "demos" / "demos.h5", verify=True)
    n = CONFIG["collect"]["n_episodes"]
    assert demos.n_episodes == n
    assert demos.episodes["seed"].tolist() == [seeds.demo_seed(CONFIG["seed"], e) for e in range(n)]
    assert len(demos.attrs["shards"]) == CONFIG["collect"]["n_shards"]
    assert demos.attrs["env_id"] == "Racing-v0"
    assert demos.attrs["env_kwargs"] == CONFIG["task"]["env_kwargs"]
    assert demos.attrs["expert"]["entry_point"] == CONFIG["task"]["expert"]["entry_point"]
    assert {"numpy", "gymnasium", "h5py"} <= set(demos.attrs["versions"])
    assert len(demos.attrs["code_revision"]["commit"]) == 40
    assert len(demos.split["valid"]) == round(CONFIG["collect"]["valid_fraction"] * n)
    # the statistics BC and RL normalise with: those of the training split's steps alone
    train = demos.steps["observations"][demos.step_rows(demos.split["train"])].astype(np.float64)
    np.testing.assert_allclose(demos.stats["obs_mean"], train.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(demos.stats["obs_std"], train.std(axis=0), rtol=1e-9, atol=1e-12)
    assert np.isfinite(demos.episodes["return"]).all()


def test_every_job_logged_progress(test_workflow: Path):
    logs = results(test_workflow) / "logs"
    for shard in range(CONFIG["collect"]["n_shards"]):
        text = (logs / "collect_shard" / f"{shard}.log").read_text()
        assert "episodes" in text and "100%" in text
    assert "done in" in (logs / "merge_demos.log").read_text()
    assert (results(test_workflow) / "benchmarks" / "merge_demos.tsv").is_file()


def test_mlflow_has_a_parent_run_and_a_child_per_job(test_workflow: Path):
    all_runs = runs(test_workflow)
    parents = [r for r in all_runs if r.data.tags.get("demo2rl.stage") == "workflow"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.params["collect.n_episodes"] == str(CONFIG["collect"]["n_episodes"])
    # the base config's jobs (the variant's: test_variants; arm runs: test_arm_runs and
    # test_mlflow_ui)
    jobs = [
        r
        for r in all_runs
        if r.data.tags.get("demo2rl.variant") == "base" and r.data.tags["demo2rl.stage"] != "arm"
    ]
    children = {r.info.run_name: r for r in jobs}
    shards = [f"collect-shard{k}" for k in range(CONFIG["collect"]["n_shards"])]
    rl_runs = [run.name for run in names.rl_runs(ARMS, CONFIG["rl"]["seeds"])]
    evals = [f"eval-{name}" for name in ("expert", "bc", *rl_runs)]
    plots = ["plot-bc", "plot-summary", "plot-racing"]  # the figures: jobs of their own
    assert {*shards, "merge-demos", "bc", *rl_runs, *evals, "summarize", *plots} == set(children)
    merged_hash = dataset.read(results(test_workflow) / "demos" / "demos.h5").attrs["content_hash"]
    for run in children.values():
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.status == "FINISHED"
        assert run.data.tags["demo2rl.code_revision"]
    collect = CONFIG["collect"]
    demos = results(test_workflow) / "demos"
    datasets = {f"collect-shard{k}": demos / f"shard-{k}.h5" for k in range(collect["n_shards"])}
    for name, path in (datasets | {"merge-demos": demos / "demos.h5"}).items():
        run = children[name]
        # the expert's mean return over the episodes the job wrote (18 here; random actions
        # score 0.6 an episode on this task, standing still 0)
        returns = dataset.read(path).episodes["return"]
        assert run.data.metrics["expert_return_mean"] == pytest.approx(returns.mean())
        assert returns.min() > 10, (name, returns)
        assert run.data.params["collect.n_episodes"] == str(collect["n_episodes"])
        assert len(run.inputs.dataset_inputs) == 1
    # each job's params are the config it reads: the shards' split, the merge's validation
    # fraction; never a speed-only setting (envs stepped together: a resource)
    for name in shards:
        assert children[name].data.params["collect.n_shards"] == str(collect["n_shards"])
        assert "collect.n_envs" not in children[name].data.params
    merge_params = children["merge-demos"].data.params
    assert merge_params["collect.valid_fraction"] == str(collect["valid_fraction"])
    assert "collect.n_shards" not in merge_params
    for name in rl_runs:
        assert "rl.checkpoint_every" not in children[name].data.params
        assert children[name].data.params["eval_episodes"] == str(
            CONFIG["evaluate"]["during_training"]
        )
    for name in ["bc", *rl_runs]:  # the dataset is an input of BC and of both RL arms
        assert children[name].data.tags["demo2rl.dataset_hash"] == merged_hash
        assert len(children[name].inputs.dataset_inputs) == 1
    # BC's comparison logged is bc/metrics.json's: the clone's return over the expert's on the
    # same held-out episodes (the clone's quality: test_the_clone_beats_broken_clones_...)
    bc_metrics = json.loads((results(test_workflow) / "bc" / "metrics.json").read_text())
    for key in ("bc_return_mean", "expert_return_mean", "bc_vs_expert"):
        assert children["bc"].data.metrics[f"final.{key}"] == pytest.approx(bc_metrics[key])
    assert bc_metrics["bc_vs_expert"] == pytest.approx(
        bc_metrics["bc_return_mean"] / bc_metrics["expert_return_mean"]
    )
    assert "train/value_loss" in children["rl-bc-seed0"].data.metrics
    assert "eval/return_mean" in children["rl-scratch-seed0"].data.metrics
    shard0 = children["collect-shard0"]
    assert shard0.data.tags["demo2rl.stage"] == "collect"
    assert shard0.data.tags["demo2rl.wildcard.shard"] == "0"
    assert shard0.data.params["task.env_id"] == "Racing-v0"
    assert shard0.data.metrics["steps_per_s"] > 0
    assert children["merge-demos"].data.tags["demo2rl.dataset_hash"] == merged_hash
    # each figure's run names the run whose output it drew
    ids = {name: run.info.run_id for name, run in children.items()}
    assert children["plot-bc"].data.tags["demo2rl.upstream.bc"] == ids["bc"]
    assert children["plot-summary"].data.tags["demo2rl.upstream.summarize"] == ids["summarize"]
    for name in plots:
        assert children[name].data.tags["demo2rl.stage"] == "plot"


BC_VS_EXPERT_MIN = 0.15
"""The least fraction of the expert's mean return the test config's clone scores on the final
evaluation's held-out episodes. Measured on those 8 episodes (max_steps 150): the expert 16.4,
the clone 4.8 (0.29 of it, after 8 epochs on 12 episodes; 0.27 after 20 epochs, 0.43 after
40), a policy of uniformly random actions 0.6 (0.04), the clone's network untrained -1.4,
standing still 0: a clone that did not learn (or a broken checkpoint, normaliser or actor)
fails. (BC's own check on 4 of these episodes is too few to tell: 0.11, 0.007, 0.11.)"""


def test_the_clone_beats_broken_clones_on_the_heldout_episodes(test_workflow: Path):
    evals = {
        name: json.loads((results(test_workflow) / "eval" / f"{name}.json").read_text())
        for name in ("expert", "bc")
    }
    expert, clone = (evals[n]["episodes"] for n in ("expert", "bc"))
    assert clone["seed"] == expert["seed"]  # the same held-out episodes
    assert len(clone["seed"]) == CONFIG["evaluate"]["episodes"]
    expert_mean, clone_mean = np.mean(expert["return"]), np.mean(clone["return"])
    assert expert_mean > 10, expert["return"]
    assert clone_mean >= BC_VS_EXPERT_MIN * expert_mean, (clone_mean, expert_mean)


def test_nothing_to_do_on_a_second_run(test_workflow: Path):
    proc = snakemake(test_workflow, "-n", "--configfile", str(TEST_CONFIG))
    assert "Nothing to be done" in proc.stdout + proc.stderr


def tiny(example: str, tmp_path: Path) -> tuple[dict, Path]:
    """An example config with test-sized budgets (its task, arms and vec_env as they are), without
    MLflow tracking."""
    spec = yaml.safe_load((REPO / "config" / example).read_text())
    spec["collect"] |= {"n_episodes": 8, "n_shards": 2}
    spec["bc"] = {"max_epochs": 5}
    spec["rl"] |= {"seeds": [0], "total_timesteps": 2048, "eval_every": 1024}
    spec["rl"]["ppo"] = {"n_steps": 128, "batch_size": 256, "n_epochs": 2}
    spec["rl"]["warm_start"] = {"critic_warmup_steps": 1024}
    spec["evaluate"] = {"episodes": 4, "during_training": 2, "n_envs": 4, "bootstrap_reps": 200}
    spec = untracked(spec)  # the session's run checks the tracking of every stage
    config = tmp_path / f"tiny-{example}"
    config.write_text(yaml.safe_dump(spec))
    return spec, config


@pytest.mark.slow
def test_classic_control_example_config_runs(tmp_path: Path):
    """The example config on MountainCarContinuous-v0, end to end, with the default vec_env
    (auto: SB3's DummyVecEnv, the task has no batched VecEnv of its own). Two arms: the residual
    (the clone as its base) and the control; the other arms are the same code on every Box task
    (the session's run) and on Discrete actions (the CartPole case)."""
    spec, config = tiny("mountaincar.yaml", tmp_path)
    assert "vec_env" not in spec["rl"]
    spec["rl"]["arms"] = ["residual", "scratch"]
    config.write_text(yaml.safe_dump(spec))
    snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    out = tmp_path / "results" / spec["experiment"]
    demos = dataset.read(out / "demos" / "demos.h5")
    assert demos.n_episodes == 8
    assert demos.attrs["env_id"] == "MountainCarContinuous-v0"
    assert demos.episodes["return"].mean() > 80
    assert (out / "rl" / "residual" / "seed-0" / "policy.pt").is_file()
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert set(summary["groups"]) == {"expert", "bc", "rl_residual", "rl_scratch"}
    assert not (out / "report" / "plots" / "track_lines.png").exists()  # racing-only figure
    # untracked (conftest.untracked): no MLflow store, no lineage records
    assert not (tmp_path / "results" / "mlflow.db").exists()
    assert not list(out.rglob("*.mlflow.json"))


@pytest.mark.slow
def test_discrete_action_example_config_runs(tmp_path: Path):
    """CartPole-v1 (Discrete(2)) end to end with the arms its example config lists (every PPO
    arm; the SAC arms are Box-only): integer demonstrations, a categorical clone, every PPO arm
    (the residual on the clone's logits), evaluation and the summary."""
    spec, config = tiny("cartpole.yaml", tmp_path)
    assert "vec_env" not in spec["rl"]
    snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    out = tmp_path / "results" / spec["experiment"]
    demos = dataset.read(out / "demos" / "demos.h5", verify=True)
    assert demos.attrs["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert demos.steps["actions"].dtype == np.int64 and demos.steps["actions"].ndim == 1
    assert set(np.unique(demos.steps["actions"])) == {0, 1}
    assert (demos.episodes["return"] == 500).all()  # the heuristic expert balances to the end
    checkpoint = torch.load(out / "bc" / "policy.pt", weights_only=True)
    assert "log_std" not in checkpoint["state_dict"]  # categorical: logits, no Gaussian
    summary = json.loads((out / "report" / "summary.json").read_text())
    discrete = [a for a in ARMS if not arms.get(a).off_policy]
    assert set(summary["groups"]) == {"expert", "bc", *(f"rl_{a}" for a in discrete)}
    assert summary["groups"]["bc"]["iqm"] == 500  # the clone balances too
    assert "rl_residual_vs_rl_scratch" in summary["probability_of_improvement"]
    # the residual arm starts at the clone: its step-0 evaluation is the clone's on the same
    # held-out episodes (train_bc's comparison uses evaluate.during_training of them too)
    bc_metrics = json.loads((out / "bc" / "metrics.json").read_text())
    curve = pd.read_csv(out / "rl" / "residual" / "seed-0" / "evaluations.csv")
    assert curve["step"].iloc[0] == 0
    assert curve["return_mean"].iloc[0] == bc_metrics["bc_return_mean"]
    for init in discrete:
        evaluation = json.loads((out / "eval" / f"rl-{init}-seed0.json").read_text())
        assert len(evaluation["episodes"]["return"]) == 4


def test_camera_config_runs_end_to_end_on_compressed_frames(tmp_path: Path):
    """config/test-pixels.yaml end to end: the racing task through a 16x16 camera, 2 frames
    stacked, the privileged expert reading the state. The dataset holds uint8 frames, gzip
    compressed and chunked along time; the clone is a CNN; the residual arm (on the clone's
    checkpoint) and scratch train and are evaluated and summarised; the racing figures are
    drawn; the expert scores on the camera task exactly what it scores on the state task."""
    spec = untracked(yaml.safe_load((REPO / "config" / "test-pixels.yaml").read_text()))
    # the arm that reads the clone's CNN through its checkpoint, and the control (every arm on
    # frames: tests/test_pixels.py)
    spec["rl"]["arms"] = ["residual", "scratch"]
    config = tmp_path / "pixels.yaml"
    config.write_text(yaml.safe_dump(spec))
    snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    out = tmp_path / "results" / spec["experiment"]
    demos_path = out / "demos" / "demos.h5"
    demos = dataset.read(demos_path, verify=True)
    frames = demos.steps["observations"]
    assert frames.dtype == np.uint8 and frames.shape[1:] == (16, 16, 2)
    assert "obs_mean" not in demos.stats  # frames are scaled by the network, never normalised
    with h5py.File(demos_path) as f:
        column = f["steps/observations"]
        assert column.compression == "gzip" and column.chunks[1:] == (16, 16, 2)
        assert f.id.get_filesize() < frames.nbytes  # smaller than its frames alone
    checkpoint = torch.load(out / "bc" / "policy.pt", weights_only=True)
    assert checkpoint["normalizer"] == {"kind": "image", "channels_last": True}
    assert any(k.startswith("features_extractor.cnn.") for k in checkpoint["state_dict"])
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert set(summary["groups"]) == {"expert", "bc", "rl_residual", "rl_scratch"}
    expert = json.loads((out / "eval" / "expert.json").read_text())
    heldout = evaluation.heldout_seeds(spec["seed"], spec["evaluate"]["episodes"])
    state_task = evaluation.evaluate(
        configs.task("Racing-v0", {"max_steps": 40}),
        tasks.load_expert(spec["task"]["expert"]["entry_point"]),
        heldout,
        n_envs=4,
    )
    assert expert["episodes"]["return"] == state_task.episodes["return"].tolist()
    assert (out / "report" / "plots" / "track_lines.png").is_file()
