"""The held-out comparison: rliable's statistics, the bootstrap, and the summary the workflow
writes (recomputed from its evaluation JSONs), with evaluation seeds disjoint from all others."""

from __future__ import annotations

import contextlib
import copy
import csv
import json
import re
from pathlib import Path

import configs
import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, TEST_CONFIG, isolated_tracking_env, snakemake
from PIL import Image
from rliable import metrics as rly

from demo2rl import arms as arms_lib
from demo2rl import config, names, seeds, tasks
from demo2rl.config import TrackingConfig
from demo2rl.demos import dataset, rollout
from demo2rl.learning import evaluation
from demo2rl.report import groups, summary
from demo2rl.report import racing_replay as replay
from demo2rl.specs.summarize import SummarizeJob
from demo2rl.workflow.plan import Plan

CONFIG = yaml.safe_load(TEST_CONFIG.read_text())
EXP = CONFIG["experiment"]
RACING_KW = {"max_steps": 60}
TABLES = ("policies", "improvement", "runs", "episodes")

BOOTSTRAP = {"reps": 2000, "confidence": 0.95, "seed": 0}
"""Bootstrap settings of the tests that do not vary them."""


def record(policy: str, returns, tracks=None, **metrics) -> dict:
    """An evaluation record as the evaluate rule writes it (the parts the summary reads)."""
    returns = list(map(float, returns))
    episodes = {"seed": tracks or list(range(len(returns))), "return": returns}
    episodes |= {"length": [100] * len(returns)} | {k: list(v) for k, v in metrics.items()}
    return {"policy": policy, "episodes": episodes}


# --------------------------------------------------------------------------------------------
# statistics


def test_point_estimates_are_rliables():
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(3, 20)), 1)  # rounding makes ties
    y = np.round(rng.normal(size=(5, 20)), 1)
    assert summary.iqm(x) == pytest.approx(rly.aggregate_iqm(x))
    assert summary.mean(x) == pytest.approx(rly.aggregate_mean(x))
    assert summary.probability_of_improvement(x, y) == pytest.approx(
        rly.probability_of_improvement(x, y)
    )
    # the batched forms used for the bootstrap replicates agree with rliable too
    assert summary.batched_iqm(x[None])[0] == pytest.approx(rly.aggregate_iqm(x))
    assert summary.batched_improvement(x[None], y[None])[0] == pytest.approx(
        rly.probability_of_improvement(x, y)
    )
    assert summary.probability_of_improvement(x, x) == 0.5


def test_intervals_contain_the_estimates_and_are_reproducible():
    rng = np.random.default_rng(1)
    scores = {
        "expert": rng.normal(50, 5, size=(1, 30)),
        "rl_bc": rng.normal(55, 5, size=(3, 30)),
        "rl_scratch": rng.normal(30, 5, size=(3, 30)),
    }
    a = summary.compare(scores, reps=2000, seed=3, confidence=0.95)
    assert a == summary.compare(scores, reps=2000, seed=3, confidence=0.95)
    assert a != summary.compare(scores, reps=2000, seed=4, confidence=0.95)
    for g, st in a["groups"].items():
        assert st["n_runs"] == len(scores[g]) and st["n_tracks"] == 30
        assert st["iqm_ci"][0] <= st["iqm"] <= st["iqm_ci"][1]
        assert st["mean_ci"][0] <= st["mean"] <= st["mean_ci"][1]
    # only the comparisons whose groups exist; rl_bc clearly beats rl_scratch
    assert set(a["improvement"]) == {"rl_bc_vs_rl_scratch"}
    headline = a["improvement"]["rl_bc_vs_rl_scratch"]
    assert headline["probability"] > 0.95 and headline["ci"][0] > 0.5


def test_bootstrap_resamples_whole_runs_and_the_tracks():
    tracks = np.linspace(10, 20, 40)
    # three seeds that differ by a constant on every track: the spread is between runs only
    runs = tracks[None, :] + np.array([[-5.0], [0.0], [5.0]])
    one = summary.compare({"rl_bc": runs[1:2]}, **BOOTSTRAP)["groups"]["rl_bc"]
    three = summary.compare({"rl_bc": runs}, **BOOTSTRAP)["groups"]["rl_bc"]
    # one run: only the tracks' spread; three: the seeds' spread widens the interval a lot (a
    # bootstrap that resampled runs per track independently would average it away)
    width = lambda st: st["mean_ci"][1] - st["mean_ci"][0]  # noqa: E731
    assert width(three) > 2.5 * width(one)
    assert three["mean_ci"][0] < 12 and three["mean_ci"][1] > 18
    flat = summary.compare({"bc": np.full((1, 10), 7.0)}, **BOOTSTRAP)["groups"]["bc"]
    assert flat["iqm_ci"] == [7.0, 7.0]


def test_compare_rejects_matrices_on_different_tracks():
    with pytest.raises(ValueError, match="same tracks"):
        summary.compare({"a": np.zeros((1, 5)), "b": np.zeros((2, 6))}, **BOOTSTRAP)


def test_curve_band_averages_runs_on_a_common_step_grid():
    band = summary.curve_band(
        [
            (np.array([0, 10, 20]), np.array([0.0, 1.0, 2.0])),
            (np.array([0, 20]), np.array([2.0, 4.0])),
        ],
        reps=500,
        confidence=0.95,
        seed=0,
    )
    assert band["step"].tolist() == [0, 10, 20]
    assert band["mean"].tolist() == pytest.approx([1.0, 2.0, 3.0])
    assert np.all(band["low"] <= band["mean"]) and np.all(band["mean"] <= band["high"])
    single = summary.curve_band([(np.array([0, 5]), np.array([1.0, 3.0]))], confidence=0.95, seed=0)
    assert single["low"].tolist() == single["mean"].tolist() == single["high"].tolist()


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("expert", "expert"),
        ("bc", "bc"),
        ("rl-bc-seed0", "rl_bc"),
        ("rl-residual-seed3", "rl_residual"),
        ("rl-kickstart-seed1", "rl_kickstart"),
        ("rl-scratch-seed12", "rl_scratch"),
    ],
)
def test_policy_groups(name, group):
    assert summary.policy_group(name) == groups.policy_group(name) == group


def test_summary_reexports_the_groups():
    assert summary.all_groups is groups.all_groups and summary.label is groups.label
    assert summary.policy_group is groups.policy_group


def test_every_demo_arm_is_compared_with_its_control_scratch_and_the_clone():
    everything = list(groups.all_groups())
    assert groups.comparisons(everything) == [
        ("rl_bc", "rl_scratch"),
        ("rl_residual", "rl_scratch"),
        ("rl_kickstart", "rl_scratch"),
        ("rl_rlpd", "rl_sac"),  # SAC with demonstrations against SAC without them
        ("rl_rlpd", "rl_scratch"),
        ("rl_sac", "rl_scratch"),  # the off-policy control against the default
        ("rl_bc", "bc"),
        ("rl_residual", "bc"),
        ("rl_kickstart", "bc"),
        ("rl_rlpd", "bc"),
        ("rl_sac", "bc"),
        ("rl_scratch", "bc"),
        *((f"dagger{r}", "bc") for r in range(1, 21)),  # what each DAgger round adds
    ]
    # any set of arms: only the pairs whose groups exist
    assert groups.comparisons(["expert", "bc", "rl_residual", "rl_scratch"]) == [
        ("rl_residual", "rl_scratch"),
        ("rl_residual", "bc"),
        ("rl_scratch", "bc"),
    ]
    assert groups.comparisons(["expert", "bc", "rl_kickstart"]) == [("rl_kickstart", "bc")]
    assert groups.comparisons(["rl_rlpd", "rl_scratch"]) == [("rl_rlpd", "rl_scratch")]


def test_steps_to_reach_a_level():
    band = {"step": [0, 10, 20, 30], "mean": [1.0, 4.0, 3.0, 6.0]}
    assert summary.steps_to_reach(band, 4.0) == 10
    assert summary.steps_to_reach(band, 5.0) == 30
    assert summary.steps_to_reach(band, 0.5) == 0
    assert summary.steps_to_reach(band, 7.0) is None


def test_unknown_policy_name_is_an_error():
    with pytest.raises(ValueError, match="unknown policy"):
        groups.policy_group("rl-nonesuch-seed0")


def test_summary_of_records_without_task_metrics():
    """A generic task (no lap times): return and length only; the best RL run is named."""
    records = [
        record("expert", [90, 91, 92, 93]),
        record("bc", [80, 85, 70, 88]),
        record("rl-bc-seed0", [95, 96, 90, 97]),
        record("rl-bc-seed1", [99, 98, 97, 96]),
        record("rl-scratch-seed0", [-10, 0, -5, 3]),
        record("rl-scratch-seed1", [20, 10, 15, 5]),
    ]
    out = summary.summarize(records, reps=300, confidence=0.95, seed=0)
    assert list(out["groups"]) == ["expert", "bc", "rl_bc", "rl_scratch"]
    assert set(out["metrics"]) == {"return", "length"}
    assert out["groups"]["rl_bc"]["policies"] == ["rl-bc-seed0", "rl-bc-seed1"]
    assert out["groups"]["rl_bc"]["mean"] == pytest.approx(96.0)
    assert out["best_rl"] == "rl-bc-seed1"
    assert out["probability_of_improvement"]["rl_bc_vs_rl_scratch"]["probability"] == 1.0
    md = summary.markdown(out, {"Learning curves": "plots/learning_curves.png"})
    assert "| RL warm-started from BC | 2 | 96.0 [" in md
    assert "P(RL warm-started from BC > RL from scratch) = 1.00" in md
    assert "![Learning curves](plots/learning_curves.png)" in md
    tables = summary.tables(out)
    assert [r["group"] for r in tables["policies"]] == list(out["groups"])
    assert len(tables["runs"]) == 6 and len(tables["improvement"]) == 3


# --------------------------------------------------------------------------------------------
# training time from progress tables, and what each arm's budget buys

RL_CFG = config.load(TEST_CONFIG)["rl"]
RL_CFG = RL_CFG | {"total_timesteps": 300_000, "sac": RL_CFG["sac"] | {"total_timesteps": 100_000}}
"""The test config's rl section with these budgets: PPO arms 300k env steps per run, SAC arms
100k."""


def progress_table(steps, elapsed, cpu=None) -> pd.DataFrame:
    """A run's progress table as :func:`demo2rl.rl.progress.progress_table` joins it."""
    columns = {summary.STEPS: steps, summary.ELAPSED: elapsed}
    return pd.DataFrame(columns | ({summary.CPU: cpu} if cpu is not None else {}))


def no_seconds(path: Path) -> str:
    """Write a progress table without the seconds columns at ``path``: the summary leaves its
    run out of the wall and CPU figures, as if the run had no progress table."""
    pd.DataFrame({summary.STEPS: []}).to_csv(path, index=False)
    return str(path)


def test_training_seconds_add_up_the_segments_of_a_resumed_run():
    # resumed at step 3000: SB3's elapsed time and the trainer's CPU seconds restart there
    resumed = progress_table(
        [1000, 2000, 3000, 4000, 5000], [10.0, 20.0, 30.0, 5.0, 15.0], [8.0, 16.0, 24.0, 4.0, 12.0]
    )
    cumulative = summary.cumulative_seconds(resumed[summary.ELAPSED])
    assert cumulative.tolist() == [10, 20, 30, 35, 45]
    assert summary.run_seconds(resumed) == 45
    assert summary.run_seconds(resumed, summary.CPU) == 36
    # resumed twice: every segment's end counts
    assert summary.cumulative_seconds([10, 20, 3, 6, 2]).tolist() == [10, 20, 23, 26, 28]
    # never resumed: the last row
    assert summary.run_seconds(progress_table([1000, 2000], [4.0, 9.0])) == 9
    # a run trained before the CPU seconds were recorded has none
    assert summary.run_seconds(progress_table([1000], [4.0]), summary.CPU) is None
    # the seconds at evaluation steps: 0 at step 0, interpolated in between (across the
    # restart too), the last row's past it
    at = summary.seconds_at(resumed, [0, 1500, 3000, 3500, 5000, 6000])
    assert at.tolist() == pytest.approx([0, 15, 30, 32.5, 45, 45])
    assert summary.seconds_at(resumed, [2500], summary.CPU).tolist() == pytest.approx([20])
    assert summary.seconds_at(progress_table([1000], [4.0]), [0], summary.CPU) is None


def test_mean_seconds_per_group_from_progress_tables():
    tables = {
        "rl-scratch-seed0": progress_table([1000, 2000, 3000], [10.0, 20.0, 6.0], [9, 18, 5]),
        "rl-scratch-seed1": progress_table([1000, 2000, 3000], [10.0, 20.0, 30.0], [9, 18, 27]),
        "rl-sac-seed0": progress_table([2000, 4000], [50.0, 100.0]),  # no CPU seconds
    }
    assert summary.mean_seconds(tables) == {"rl_scratch": 28.0, "rl_sac": 100.0}
    assert summary.mean_seconds(tables, summary.CPU) == {"rl_scratch": 25.0}


def cost_bands() -> dict[str, dict[str, list[float]]]:
    """Mean learning curves of four arms (the parts :func:`summary.arm_costs` reads)."""
    return {
        # scratch PPO ends at 75, which its curve first reached at step 2000
        "rl_scratch": {"step": [0, 1000, 2000, 3000, 4000], "mean": [0, 40, 80, 70, 75]},
        # warm-started from the clone: above scratch's final return before any training
        "rl_bc": {"step": [0, 1000, 2000, 3000, 4000], "mean": [76, 80, 85, 90, 95]},
        # SAC with demonstrations: there at step 500, four times sooner than scratch
        "rl_rlpd": {"step": [0, 250, 500, 750, 1000], "mean": [10, 50, 75, 88, 92]},
        # SAC without them never gets there within its (smaller) budget
        "rl_sac": {"step": [0, 250, 500, 750, 1000], "mean": [0, 10, 20, 30, 40]},
    }


def cost_cpu_runs() -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Runs' CPU seconds at their evaluation steps (the curves of :func:`cost_bands`): scratch
    PPO's two runs 10 and 12 ms a step, rlpd's two 0.4 and 0.6 s a step; none for the others."""
    steps, sac_steps = np.array([0, 1000, 2000, 3000, 4000.0]), np.array([0, 250, 500, 750, 1000.0])
    return {
        "rl_scratch": [(steps, steps * 0.010), (steps, steps * 0.012)],
        "rl_rlpd": [(sac_steps, sac_steps * 0.4), (sac_steps, sac_steps * 0.6)],
    }


def test_arm_costs_steps_to_scratch_final_speedup_and_budgets():
    budgets = {arm: arms_lib.get(arm).budget(RL_CFG) for arm in ("scratch", "bc", "rlpd", "sac")}
    out = summary.arm_costs(
        cost_bands(),
        budgets=budgets,
        wall_seconds={"rl_scratch": 400.0, "rl_rlpd": 900.0},
        cpu_seconds={"rl_rlpd": 850.0},
        expert_level=90.0,
        cpu_runs=cost_cpu_runs(),
        compile_seconds={"rl_rlpd": 31.0},
    )
    assert out["scratch_final_return"] == 75
    arms = out["arms"]
    assert list(arms) == ["rl_bc", "rl_scratch", "rl_rlpd", "rl_sac"]  # the registry's order
    assert arms["rl_rlpd"] == {
        "budget": 100_000,
        "steps_to_scratch_final": 500,
        "speedup_vs_scratch": 4.0,
        "steps_to_expert": 1000,
        "wall_seconds": 900.0,
        "cpu_seconds": 850.0,
        "compile_seconds": 31.0,
        # at step 500 its runs had used 200 and 300 CPU s; scratch PPO's at its step 2000, 20
        # and 24: 250 s against 22 s, 11.4 times scratch PPO's compute to the same return
        "cpu_to_scratch_final": 250.0,
        "cpu_to_expert": 500.0,  # at step 1000, where scratch PPO never gets
        "cpu_vs_scratch": pytest.approx(250 / 22),
        "cpu_to_expert_vs_scratch": None,
    }
    assert arms["rl_scratch"]["cpu_to_scratch_final"] == 22.0
    assert arms["rl_scratch"]["compile_seconds"] is None  # PPO compiles nothing
    assert arms["rl_scratch"]["cpu_vs_scratch"] == 1.0
    # no runs with CPU seconds: no CPU figures, though the steps are known
    assert arms["rl_bc"]["steps_to_expert"] == 3000 and arms["rl_bc"]["cpu_to_expert"] is None
    assert arms["rl_sac"]["cpu_to_scratch_final"] is None  # never reached
    assert arms["rl_scratch"]["budget"] == arms["rl_bc"]["budget"] == 300_000
    assert arms["rl_sac"]["budget"] == 100_000
    # scratch against itself: its own first step at its final return, one time as soon
    assert arms["rl_scratch"]["steps_to_scratch_final"] == 2000
    assert arms["rl_scratch"]["speedup_vs_scratch"] == 1.0
    # never reached: no steps, no ratio
    assert arms["rl_sac"]["steps_to_scratch_final"] is None
    assert arms["rl_sac"]["speedup_vs_scratch"] is None
    assert arms["rl_sac"]["steps_to_expert"] is None
    # there before training: step 0, and no finite ratio
    assert arms["rl_bc"]["steps_to_scratch_final"] == 0
    assert arms["rl_bc"]["speedup_vs_scratch"] is None
    assert arms["rl_bc"]["steps_to_expert"] == 3000
    # a figure without its input is None
    assert arms["rl_sac"]["wall_seconds"] is None and arms["rl_scratch"]["cpu_seconds"] is None
    # without scratch PPO there is no final return to reach; without an expert, no level
    no_scratch = summary.arm_costs(
        {g: b for g, b in cost_bands().items() if g != "rl_scratch"},
        budgets=budgets,
        wall_seconds={},
        cpu_seconds={},
        expert_level=None,
    )
    assert no_scratch["scratch_final_return"] is None
    for costs in no_scratch["arms"].values():
        assert costs["steps_to_scratch_final"] is costs["speedup_vs_scratch"] is None
        assert costs["steps_to_expert"] is None


def test_markdown_groups_the_comparisons_by_arm_and_tabulates_budgets_and_costs():
    rng = np.random.default_rng(0)
    levels = {"expert": 95, "bc": 60, "scratch": 75, "bc-arm": 90, "rlpd": 92, "sac": 40}
    records = [record(name, levels[name] + rng.normal(0, 1, 8)) for name in ("expert", "bc")]
    for arm in ("bc", "scratch", "rlpd", "sac"):
        key = "bc-arm" if arm == "bc" else arm
        records += [record(f"rl-{arm}-seed{s}", levels[key] + rng.normal(0, 1, 8)) for s in (0, 1)]
    out = summary.summarize(records, reps=300, confidence=0.95, seed=0)
    out |= summary.arm_costs(
        cost_bands(),
        budgets={arm: arms_lib.get(arm).budget(RL_CFG) for arm in ("scratch", "bc", "rlpd", "sac")},
        wall_seconds={"rl_bc": 410.0, "rl_scratch": 400.0, "rl_rlpd": 1234.0, "rl_sac": 1100.0},
        cpu_seconds={"rl_bc": 380.0, "rl_scratch": 390.0, "rl_rlpd": 1200.0},
        compile_seconds={"rl_rlpd": 31.0},
        expert_level=90.0,
        cpu_runs=cost_cpu_runs(),
    )
    out["steps_to_expert"] = {g: a["steps_to_expert"] for g, a in out["arms"].items()}
    md = summary.markdown(out)
    lines = md.splitlines()

    def under(arm_label: str) -> list[str]:
        """The comparison lines under an arm's bullet."""
        start = lines.index(next(line for line in lines if line.startswith(f"- **{arm_label}**")))
        block = []
        for line in lines[start + 1 :]:
            if not line.startswith("  - "):
                break
            block.append(line)
        return block

    rlpd = under("SAC on demos + replay")
    assert rlpd[0].startswith(
        "  - vs its own control (what the demonstrations add): "
        "P(SAC on demos + replay > SAC from scratch) = "
    )
    assert rlpd[1].startswith(
        "  - vs scratch PPO: P(SAC on demos + replay > RL from scratch) = 1.00"
    )
    assert rlpd[2].startswith("  - vs the behaviour clone: P(SAC on demos + replay > behaviour")
    assert re.search(r"= 1\.00 \[1\.00, 1\.00\]$", rlpd[0])  # with its interval
    bc_arm = under("RL warm-started from BC")
    assert bc_arm[0].startswith(
        "  - vs its own control, scratch PPO (what the demonstrations add): "
        "P(RL warm-started from BC > RL from scratch) = 1.00 ["
    )
    assert len(bc_arm) == 2  # its control is scratch PPO: not listed twice
    assert "- **SAC from scratch** (a control: no demonstrations)" in lines
    assert under("SAC from scratch")[0].startswith("  - vs scratch PPO: P(SAC from scratch > RL")
    # the table of budgets and costs, one row per RL arm
    assert (
        "| RL arm | env steps per run | env steps to scratch PPO's final return (75.0) "
        "| x sooner than scratch PPO | env steps to the expert's return "
        "| CPU s to scratch PPO's final return (75.0) (x scratch PPO's) "
        "| CPU s to the expert's return (x scratch PPO's) "
        "| wall time per run (s) | CPU time per run (s) | of it compiling (s) |"
    ) in lines
    assert (
        "| SAC on demos + replay | 100,000 | 500 | 4.0x | 1,000 | 250 (11.36x) | 500 | 1,234 "
        "| 1,200 | 31 |"
    ) in lines
    assert (
        "| SAC from scratch | 100,000 | not reached | n/a | not reached | not reached "
        "| not reached | 1,100 | n/a | n/a |"
    ) in lines
    assert (
        "| RL from scratch | 300,000 | 2,000 | 1.0x | not reached | 22 (1.00x) | not reached "
        "| 400 | 390 | n/a |"
    ) in lines
    # there at the start; reached later, but its runs recorded no CPU seconds: unknown, not "not
    # reached"
    assert (
        "| RL warm-started from BC | 300,000 | 0 | at the start | 3,000 | at the start | n/a | 410 "
        "| 380 | n/a |"
    ) in lines


def test_summary_refuses_records_on_different_tracks():
    with pytest.raises(ValueError, match="other tracks"):
        summary.summarize(
            [record("expert", [1, 2], [0, 1]), record("bc", [1, 2], [0, 2])],
            confidence=0.95,
            seed=0,
            reps=2000,
        )


def test_lap_times_average_completed_laps_only():
    recs = [record("expert", [1, 2, 3], lap_time=[30.0, None, 32.0], lap_completed=[1, 0, 1])]
    labels = {"lap_time": "lap time (s)", "lap_completed": "episodes with a lap"}
    out = summary.summarize(recs, reps=100, confidence=0.95, seed=0, labels=labels)
    assert out["groups"]["expert"]["metrics"]["lap_time"] == pytest.approx(31.0)
    assert out["groups"]["expert"]["metrics"]["lap_completed"] == pytest.approx(2 / 3)


# --------------------------------------------------------------------------------------------
# per-step means in the rollout (average speed, off-track rate)


def test_step_means_are_means_over_each_episode_and_batch_independent():
    expert = tasks.load_expert("demo2rl.experts.racing:pure_pursuit", {"margin": 1.4})
    eval_seeds = evaluation.heldout_seeds(0, 5)
    task = configs.task("Racing-v0", RACING_KW)
    _, episodes, info = rollout.run_episodes(task, expert, eval_seeds, n_envs=2, step_means=True)
    _, _, info_batched = rollout.run_episodes(task, expert, eval_seeds, n_envs=5, step_means=True)
    _, _, plain = rollout.run_episodes(task, expert, eval_seeds, n_envs=2)
    assert set(plain) == {k for k in info if not k.endswith(".mean")}  # old callers unchanged
    for key in info:
        np.testing.assert_array_equal(info[key], info_batched[key])
    # episode 0 stepped alone in a single env: the same per-step means
    env = tasks.make_env("Racing-v0", RACING_KW)
    obs, _ = env.reset(seed=eval_seeds[0])
    speeds, off, done = [], [], False
    while not done:
        action = expert(obs[None])[0].astype(np.float32)  # as the rollout casts it
        obs, _, term, trunc, step_info = env.step(action)
        speeds.append(step_info["speed"])
        off.append(step_info["off_track"])
        done = term or trunc
    assert len(speeds) == episodes["length"][0]
    assert info["speed.mean"][0] == pytest.approx(np.mean(speeds))
    assert info["off_track.mean"][0] == pytest.approx(np.mean(off))
    assert 0 <= info["off_track.mean"].min() and info["off_track.mean"].max() <= 1


def test_final_evaluation_names_the_racing_metrics_and_replays_exactly():
    expert = tasks.load_expert("demo2rl.experts.racing:pure_pursuit", {"margin": 0.65})
    eval_seeds = evaluation.heldout_seeds(3, 4)
    task = configs.task("Racing-v0", RACING_KW)
    ev = evaluation.evaluate(task, expert, eval_seeds, n_envs=3, final=True)
    assert {"seed", "return", "length", "lap_time", "avg_speed", "off_track_rate"} <= set(
        ev.episodes
    )
    assert ev.episodes["seed"].tolist() == eval_seeds
    assert ev.episodes["avg_speed"].tolist() == ev.info["speed.mean"].tolist()
    assert len(ev.first_actions) == ev.episodes["length"][0]
    drive = replay.replay_racing(RACING_KW, eval_seeds[0], ev.first_actions, frame_every=7)
    assert drive.episode_return == ev.episodes["return"][0]  # bit for bit
    assert len(drive.x) == len(drive.speed) == ev.episodes["length"][0] + 1
    assert drive.frame_steps[:3] == [0, 7, 14] and len(drive.frames) == len(drive.frame_steps)
    assert drive.frames[0].shape[2] == 3


def test_generic_tasks_have_no_racing_metrics():
    expert = tasks.load_expert("demo2rl.experts.classic:mountain_car")
    task = configs.task("MountainCarContinuous-v0")
    ev = evaluation.evaluate(task, expert, evaluation.heldout_seeds(0, 2), n_envs=2, final=True)
    assert set(ev.episodes) == {"seed", "return", "length"}


# --------------------------------------------------------------------------------------------
# the workflow's summary, recomputed from its evaluation JSONs


def results(workdir: Path) -> Path:
    return workdir / "results" / EXP


def load_evals(workdir: Path, variant: str = "base") -> dict[str, dict]:
    """Policy -> its evaluation of ``variant`` (a variant's own evaluations only)."""
    root = results(workdir) if variant == "base" else results(workdir) / "variants" / variant
    files = (root / "eval").glob("[!.]*.json")  # not the hidden MLflow sidecars
    return {p.stem: json.loads(p.read_text()) for p in files}


def returns_matrix(evals: dict[str, dict], group: str) -> np.ndarray:
    names = sorted(n for n in evals if summary.policy_group(n) == group)
    return np.array([evals[n]["episodes"]["return"] for n in names], dtype=np.float64)


@pytest.mark.integration
def test_every_policy_is_evaluated_on_the_heldout_tracks(test_workflow: Path):
    evals = load_evals(test_workflow)
    expected = {"expert", "bc"} | {
        run.name for run in names.rl_runs(arms_lib.BUILTIN, CONFIG["rl"]["seeds"])
    }
    assert set(evals) == expected
    heldout = evaluation.heldout_seeds(CONFIG["seed"], CONFIG["evaluate"]["episodes"])
    for name, rec in evals.items():
        assert rec["policy"] == name and rec["group"] == summary.policy_group(name)
        eps = rec["episodes"]
        assert eps["seed"] == heldout
        assert len(eps["return"]) == len(eps["length"]) == len(heldout)
        for key in ("lap_time", "avg_speed", "off_track_rate", "lap_completed"):
            assert len(eps[key]) == len(heldout)
        assert all(0 <= r <= 1 for r in eps["off_track_rate"])
        assert rec["summary"]["return_mean"] == pytest.approx(np.mean(eps["return"]))
        assert rec["first_episode"]["seed"] == heldout[0]
        assert len(rec["first_episode"]["actions"]) == eps["length"][0]
    assert evals["bc"]["source"]["checkpoint"].endswith("bc/policy.pt")
    # speeds are measured, not left at 0 (racing.py clamps them at 0): the expert drives on
    assert all(s > 0 for s in evals["expert"]["episodes"]["avg_speed"])


@pytest.mark.integration
def test_evaluation_seeds_never_overlap_demonstration_or_training_seeds(test_workflow: Path):
    evals = load_evals(test_workflow)
    eval_seeds = {s for rec in evals.values() for s in rec["episodes"]["seed"]}
    demos = dataset.read(results(test_workflow) / "demos" / "demos.h5")
    assert not eval_seeds & set(demos.episodes["seed"].tolist())
    base = CONFIG["seed"]
    for s in CONFIG["rl"]["seeds"]:  # an RL run's envs reset from rl_seed + i, i < stride
        start = seeds.rl_seed(base, s)
        assert not any(start <= e < start + seeds.RL_SEED_STRIDE for e in eval_seeds)
    # unseeded (auto)resets of the racing task draw track seeds in [2**30, 2**31)
    assert max(eval_seeds) < 2**30
    # and for any base seed: the blocks are disjoint
    for b in (0, 7, 12345):
        ev = set(evaluation.heldout_seeds(b, 1000))
        assert not ev & {seeds.demo_seed(b, e) for e in range(1000)}
        assert not ev & {seeds.rl_seed(b, s) + i for s in range(5) for i in range(64)}


@pytest.mark.integration
def test_summary_numbers_recomputed_from_the_evaluation_jsons(test_workflow: Path):
    evals = load_evals(test_workflow)
    report = results(test_workflow) / "report"
    out = json.loads((report / "summary.json").read_text())
    present = [g for g in summary.all_groups() if g not in groups.DAGGER_GROUPS]  # (no DAgger)
    assert set(out["groups"]) == set(present)
    for group in present:
        scores = returns_matrix(evals, group)
        st = out["groups"][group]
        assert st["n_runs"] == len(scores) and st["n_tracks"] == scores.shape[1]
        assert st["mean"] == pytest.approx(float(np.mean(scores)))
        assert st["iqm"] == pytest.approx(float(rly.aggregate_iqm(scores)))
        assert st["iqm_ci"][0] <= st["iqm"] <= st["iqm_ci"][1]
        assert st["mean_ci"][0] <= st["mean"] <= st["mean_ci"][1]
    for key, c in out["probability_of_improvement"].items():
        assert key == f"{c['x']}_vs_{c['y']}"
        x, y = returns_matrix(evals, c["x"]), returns_matrix(evals, c["y"])
        assert c["probability"] == pytest.approx(float(rly.probability_of_improvement(x, y)))
        assert 0 <= c["ci"][0] <= c["probability"] <= c["ci"][1] <= 1
    improvement = [(c["x"], c["y"]) for c in out["probability_of_improvement"].values()]
    assert sorted(improvement) == sorted(groups.comparisons(present))
    # steps to the expert's return: the first point of each arm's mean curve at its level
    expert_level = out["curve_levels"]["expert"]
    for group, band in out["learning_curves"].items():
        reached = [s for s, v in zip(band["step"], band["mean"], strict=True) if v >= expert_level]
        assert out["steps_to_expert"][group] == (reached[0] if reached else None)
    rl_means = {n: np.mean(r["episodes"]["return"]) for n, r in evals.items() if "-seed" in n}
    assert out["best_rl"] == max(rl_means, key=rl_means.get)
    # the CSV tables hold the same numbers
    with open(report / "policies.csv") as fh:
        rows = {r["group"]: r for r in csv.DictReader(fh)}
    for group, st in out["groups"].items():
        assert float(rows[group]["return_iqm"]) == pytest.approx(st["iqm"])
        assert float(rows[group]["return_iqm_low"]) == pytest.approx(st["iqm_ci"][0])
    with open(report / "episodes.csv") as fh:
        episodes = list(csv.DictReader(fh))
    assert len(episodes) == sum(len(r["episodes"]["seed"]) for r in evals.values())
    md = (report / "summary.md").read_text()
    for arm in arms_lib.REGISTRY.values():
        assert f"| {arm.label} |" in md
    assert "P(residual RL on BC > RL from scratch)" in md
    assert "| RL arm | env steps per run | env steps to scratch PPO's final return" in md


@pytest.mark.integration
def test_mlflow_has_the_evaluations_and_the_summary_on_the_parent(test_workflow: Path):
    mlflow.set_tracking_uri(f"sqlite:///{test_workflow / 'results' / 'mlflow.db'}")
    all_runs = mlflow.search_runs(experiment_names=[EXP], output_format="list")
    parents = [r for r in all_runs if r.data.tags.get("demo2rl.stage") == "workflow"]
    parent = max(parents, key=lambda r: r.info.start_time)  # the invocation that evaluated
    # (variant, policy) -> its evaluation's run: a variant's own evaluations (the warm-start
    # arm's, for the test config's variant) have the base's policy names
    evals = {
        (r.data.tags["demo2rl.variant"], r.data.tags["demo2rl.learning.policy"]): r
        for r in all_runs
        if "demo2rl.learning.policy" in r.data.tags
        and r.data.tags["mlflow.parentRunId"] == parent.info.run_id
    }
    saved = {
        (variant, name): data
        for variant in ("base", *CONFIG["variants"])
        for name, data in load_evals(test_workflow, variant).items()
    }
    assert set(evals) == set(saved) and len(saved) > len(load_evals(test_workflow))
    for key, run in evals.items():
        assert run.data.tags["demo2rl.stage"] == "evaluate"
        assert run.info.status == "FINISHED"
        assert run.data.metrics["eval.return_mean"] == pytest.approx(
            saved[key]["summary"]["return_mean"]
        ), key
    metrics = parent.data.metrics
    assert "summary.rl_bc.return_iqm" in metrics
    assert "summary.p_improvement.rl_bc_vs_rl_scratch" in metrics
    client = mlflow.MlflowClient()
    files = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "summary")}
    assert {"summary.md", "summary.json", "learning_curves.png", "best_lap.gif"} <= files


@pytest.mark.integration
def test_more_seeds_add_only_their_runs_and_evaluations(test_workflow: Path, tmp_path: Path):
    more = tmp_path / "more-seeds.yaml"
    seeds_now = CONFIG["rl"]["seeds"]
    new = max(seeds_now) + 1
    more.write_text(yaml.safe_dump({"rl": {"seeds": [*seeds_now, new]}}))
    proc = snakemake(test_workflow, "-n", "--configfile", str(TEST_CONFIG), str(more))
    text = proc.stdout + proc.stderr
    # the figures drawn from the summary and the new evaluations are redrawn too; nothing else.
    # The test config's variant runs the new seed too: its own arm's (the warm start's) run, the
    # rest the base's, and its report; and the comparison of the variants
    arms = arms_lib.BUILTIN  # the test config runs every arm
    reports = 1 + len(CONFIG["variants"])
    assert job_counts(text) == {
        "train_rl": len(arms) + 1,
        "evaluate": len(arms) + 1,
        "summarize": reports,
        "plot_summary": reports,
        "plot_racing": reports,
        "compare_variants": 1,
        "plot_variants": 1,
        "all": 1,
    }, text
    assert set(re.findall(r"wildcards: root=\S+, policy=(\S+)", text)) == {
        f"rl-{arm}-seed{new}" for arm in arms
    }
    assert set(re.findall(r"wildcards: root=\S+, arm=(\w+), seed=(\d+)", text)) == {
        (arm, str(new)) for arm in arms
    }


@pytest.mark.integration
def test_racing_figures_are_only_made_for_the_racing_task(test_workflow: Path, tmp_path: Path):
    plots = results(test_workflow) / "report" / "plots"
    assert (plots / "track_lines.png").is_file() and (plots / "best_lap.gif").is_file()
    config = REPO / "config" / "mountaincar.yaml"
    text = "".join(snakemake(tmp_path, "-n", "--configfile", str(config)).stdout)
    assert "report/plots/learning_curves.png" in text and "summary.md" in text
    assert "track_lines.png" not in text and "best_lap.gif" not in text


def job_counts(text: str) -> dict[str, int]:
    """The ``Job stats`` table of a dry run: rule -> number of jobs."""
    lines = text[text.index("Job stats:") :].splitlines()[3:]
    counts = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


@pytest.mark.parametrize(
    "arms", [("bc", "scratch"), ("residual", "kickstart", "scratch"), ("kickstart",)]
)
def test_summarize_stage_for_a_generic_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arms: tuple[str, ...]
):
    """The summarize and plot_summary stages without racing figures (a classic-control task),
    logging to a real MLflow store: tables, the curve bands and levels in summary.json, the
    figures drawn from it, and the summary metrics and files on the workflow's parent run; for
    any set of arms (``rl.arms``), the first of them the best here."""
    from demo2rl import tracking
    from demo2rl.stages import plot_summary, summarize

    # every variable start_workflow sets, recorded so that it is undone (delenv of a variable
    # that is not set records nothing: it leaked to the later tests of this worker)
    isolated_tracking_env(monkeypatch)
    rng = np.random.default_rng(0)
    evals, curves, progress = [], {}, {}
    for name, level in [("expert", 90), ("bc", 80)] + [
        (run.name, 85 + 10 * (run.arm == arms[0])) for run in names.rl_runs(arms, (0, 1))
    ]:
        path = tmp_path / "eval" / f"{name}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(record(name, level + rng.normal(0, 3, 6))))
        evals.append(str(path))
        run = names.RLRun.parse(name)
        if run is not None:
            csv_path = Path(run.dir(str(tmp_path))) / "evaluations.csv"
            csv_path.parent.mkdir(parents=True)
            csv_path.write_text("step,return_mean\n0,70\n1000,80\n2000,90\n")
            curves[name] = str(csv_path)
            progress[name] = no_seconds(csv_path.parent / "progress.csv")
    out = tmp_path / "report"
    figures = {
        "curves_png": str(out / "plots" / "learning_curves.png"),
        "returns_png": str(out / "plots" / "final_returns.png"),
    }
    parent = tracking.start_workflow(
        "generic-summary",
        {"seed": 0},
        TrackingConfig(enabled=True, fail_on_error=False),
        results_dir=tmp_path,
    )
    with tracking.child_run(
        "summarize",
        stage="summarize",
        rule="summarize",
        wildcards={},
        params={},
        settings=TrackingConfig(enabled=True, fail_on_error=False),
    ) as run:
        job = summarize_job(out, evals, curves, progress, figures, budgets={})
        result = summarize.summarize(job, run)
    best = f"rl_{arms[0]}"
    assert result["best_rl"].startswith(f"rl-{arms[0]}-")
    assert not (out / "plots").exists()  # the numbers only: the figures are another rule's
    saved = json.loads((out / "summary.json").read_text())
    assert saved["groups"][best]["n_runs"] == 2 and saved["confidence"] == 0.9
    assert saved["learning_curves"][best]["step"] == [0, 1000, 2000]
    assert saved["learning_curves"][best]["mean"] == pytest.approx([70.0, 80.0, 90.0])
    assert set(saved["learning_curves"]) == {f"rl_{arm}" for arm in arms}
    improvement = [(c["x"], c["y"]) for c in saved["probability_of_improvement"].values()]
    assert sorted(improvement) == sorted(groups.comparisons(list(saved["groups"])))
    assert all(c[1] in ("bc", "rl_scratch") for c in improvement)
    assert set(saved["curve_levels"]) == {"expert", "bc"}  # on the first curve_tracks tracks
    for name in ("expert", "bc"):
        first = json.loads((tmp_path / "eval" / f"{name}.json").read_text())["episodes"]
        assert saved["curve_levels"][name] == pytest.approx(np.mean(first["return"][:3]))
    md = (out / "summary.md").read_text()
    assert "![Learning curves](plots/learning_curves.png)" in md
    assert "![Final returns](plots/final_returns.png)" in md

    with tracking.child_run(
        "plot-summary",
        stage="plot",
        rule="plot_summary",
        wildcards={},
        params={},
        settings=TrackingConfig(enabled=True, fail_on_error=False),
    ) as run:
        plot_summary.plot_summary(summary_json=str(out / "summary.json"), run=run, **figures)
    tracking.end_workflow(success=True, settings=TrackingConfig(enabled=True, fail_on_error=False))
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "final_returns.png",
        "learning_curves.png",
    ]
    for png in figures.values():
        assert Path(png).read_bytes()[:4] == b"\x89PNG"
    client = mlflow.MlflowClient(tracking.tracking_uri(tmp_path))
    metrics = client.get_run(parent).data.metrics
    assert metrics[f"summary.{best}.return_iqm"] == pytest.approx(saved["groups"][best]["iqm"])
    artifacts = {Path(a.path).name for a in client.list_artifacts(parent, "summary")}
    assert {"summary.md", "policies.csv", "final_returns.png", "learning_curves.png"} <= artifacts


class ArmRecorder:
    """A run that keeps the arm-level metrics the summarize stage logs (the rest it drops)."""

    def __init__(self) -> None:
        self.arms: dict[str, dict[str, float]] = {}
        self.figures: list[str] = []

    def log_metrics(self, metrics, step=None) -> None:
        pass

    def set_tags(self, tags) -> None:
        pass

    def log_artifact(self, path, artifact_path=None) -> None:
        pass

    def log_figures(self, paths) -> None:
        self.figures += [Path(p).name for p in paths]

    def log_arm(self, arm, *, variant, metrics, curve, inputs) -> None:
        self.arms[arm] = dict(metrics)

    @contextlib.contextmanager
    def parent(self):
        yield None


def test_summarize_stage_reports_budgets_costs_and_curves_by_cpu_seconds(tmp_path: Path):
    """scratch PPO, SAC with demonstrations and SAC without them, two seeds each, one scratch run
    resumed (its progress segments' seconds restart): the summary's per-arm budgets, steps and
    CPU seconds to scratch PPO's final return, training seconds, the learning curves against CPU
    seconds, the arm-level metrics and summary.md; and the learning-curve figure with its
    compute panel and its cost panel."""
    from demo2rl.stages import plot_summary, summarize

    curve_steps = {"scratch": [0, 1000, 2000, 3000, 4000], "rlpd": [0, 500, 1000]}
    curve_steps["sac"] = curve_steps["rlpd"]
    curves_of = {"scratch": [0, 20, 40, 60, 80], "rlpd": [20, 85, 95], "sac": [0, 20, 40]}
    progress_of = {  # (steps, elapsed, cpu) of each run's progress table
        "rl-scratch-seed0": ([1000, 2000, 3000, 4000], [10, 20, 5, 15], [9, 18, 4, 13]),  # resumed
        "rl-scratch-seed1": ([1000, 2000, 3000, 4000], [10, 20, 30, 40], [8, 16, 24, 32]),
        "rl-rlpd-seed0": ([500, 1000], [30, 60], [25, 50]),
        "rl-rlpd-seed1": ([500, 1000], [40, 80], [35, 70]),
        "rl-sac-seed0": ([500, 1000], [20, 40], [18, 36]),
        "rl-sac-seed1": ([500, 1000], [20, 40], [18, 36]),
    }
    rng = np.random.default_rng(0)
    evals, curves, progress = [], {}, {}
    finals = {"expert": 90, "bc": 60, "scratch": 80, "rlpd": 95, "sac": 40}
    for name in ["expert", "bc", *progress_of]:
        run = names.RLRun.parse(name)
        path = tmp_path / "eval" / f"{name}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            json.dumps(record(name, finals[run.arm if run else name] + rng.normal(0, 1, 6)))
        )
        evals.append(str(path))
        if run is not None:
            run_dir = Path(run.dir(str(tmp_path)))
            run_dir.mkdir(parents=True)
            curve = pd.DataFrame({"step": curve_steps[run.arm], "return_mean": curves_of[run.arm]})
            curve.to_csv(run_dir / "evaluations.csv", index=False)
            progress_table(*progress_of[name]).to_csv(run_dir / "progress.csv", index=False)
            curves[name] = str(run_dir / "evaluations.csv")
            progress[name] = str(run_dir / "progress.csv")
    out = tmp_path / "report"
    figures = {"curves_png": str(out / "curves.png"), "returns_png": str(out / "returns.png")}
    recorder = ArmRecorder()
    budgets = {arm: arms_lib.get(arm).budget(RL_CFG) for arm in ("scratch", "rlpd", "sac")}
    job = summarize_job(out, evals, curves, progress, figures, budgets)
    summarize.summarize(job, recorder)
    saved = json.loads((out / "summary.json").read_text())
    assert saved["scratch_final_return"] == 80
    arms = saved["arms"]
    budgets = [arms[g]["budget"] for g in ("rl_scratch", "rl_rlpd", "rl_sac")]
    assert budgets == [300_000, 100_000, 100_000]
    assert arms["rl_rlpd"]["steps_to_scratch_final"] == 500  # 85 >= 80 at step 500
    assert arms["rl_rlpd"]["speedup_vs_scratch"] == 8.0  # scratch took 4000 steps
    assert arms["rl_sac"]["steps_to_scratch_final"] is None
    assert arms["rl_sac"]["speedup_vs_scratch"] is None
    # the resumed run's seconds: 20 + 15 (wall), 18 + 13 (CPU); the other seed's 40 and 32
    assert arms["rl_scratch"]["wall_seconds"] == pytest.approx((35 + 40) / 2)
    assert arms["rl_scratch"]["cpu_seconds"] == pytest.approx((31 + 32) / 2)
    assert arms["rl_rlpd"]["wall_seconds"] == pytest.approx(70)
    assert arms["rl_rlpd"]["cpu_seconds"] == pytest.approx(60)
    # the expert's return (about 90): only SAC with demonstrations gets there (95 at 1000)
    assert saved["steps_to_expert"] == {"rl_scratch": None, "rl_rlpd": 1000.0, "rl_sac": None}
    # learning curves by CPU seconds: the resumed seed's evaluations at 0, 9, 18, 22, 31 s, the
    # other's at 0, 8, 16, 24, 32 s; averaged up to where the cheaper seed ended
    cpu = saved["learning_curves_cpu"]["rl_scratch"]
    assert cpu["seconds"] == [0, 8, 9, 16, 18, 22, 24, 31]
    # at 22 s: the resumed seed at 60 (its step 3000), the other 3/4 of the way from 40 to 60
    assert cpu["mean"][5] == pytest.approx((60 + 55) / 2)
    # SAC with demonstrations: its seeds ended at 50 s and 70 s
    assert saved["learning_curves_cpu"]["rl_rlpd"]["seconds"] == [0, 25, 35, 50]
    assert set(saved["learning_curves_cpu"]) == set(saved["learning_curves"])
    # the compute axis: rlpd at scratch's final return (step 500) after 25 and 35 CPU s; scratch
    # PPO at its own (step 4000) after 31 and 32
    assert arms["rl_rlpd"]["cpu_to_scratch_final"] == pytest.approx(30)
    assert arms["rl_scratch"]["cpu_to_scratch_final"] == pytest.approx(31.5)
    assert arms["rl_rlpd"]["cpu_vs_scratch"] == pytest.approx(30 / 31.5)
    assert arms["rl_rlpd"]["cpu_to_expert"] == pytest.approx(60)
    assert arms["rl_scratch"]["cpu_to_expert"] is None
    # the arm-level runs: against the own control where that is not scratch PPO
    rlpd, sac, scratch = recorder.arms["rlpd"], recorder.arms["sac"], recorder.arms["scratch"]
    versus = saved["probability_of_improvement"]
    assert rlpd["p_vs_control"] == versus["rl_rlpd_vs_rl_sac"]["probability"] == 1.0
    assert [rlpd["p_vs_control_low"], rlpd["p_vs_control_high"]] == versus["rl_rlpd_vs_rl_sac"][
        "ci"
    ]
    assert rlpd["p_vs_scratch"] == versus["rl_rlpd_vs_rl_scratch"]["probability"]
    assert rlpd["budget"] == 100_000 and rlpd["steps_to_scratch_final"] == 500
    assert rlpd["cpu_s"] == pytest.approx(60) and rlpd["wall_s"] == pytest.approx(70)
    assert "p_vs_control" not in sac and "steps_to_scratch_final" not in sac  # never reached
    assert "p_vs_scratch" in sac and sac["budget"] == 100_000
    assert "p_vs_control" not in scratch and "p_vs_scratch" not in scratch
    assert scratch["steps_to_scratch_final"] == 4000 and scratch["cpu_s"] == pytest.approx(31.5)
    md = (out / "summary.md").read_text()
    assert (
        "| SAC on demos + replay | 100,000 | 500 | 8.0x | 1,000 | 30 (0.95x) | 60 | 70 | 60 |" in md
    )
    assert rlpd["cpu_vs_scratch"] == pytest.approx(30 / 31.5)
    assert "vs its own control (what the demonstrations add): P(SAC on demos + replay > SAC" in md

    # the figure: by env steps, beside it by CPU seconds, and the costs (three panels wide)
    plot_summary.plot_summary(summary_json=str(out / "summary.json"), run=recorder, **figures)
    assert recorder.figures == ["curves.png", "returns.png"]
    with Image.open(figures["curves_png"]) as image:
        width, height = image.size
    assert width > 3.5 * height


def summarize_job(out, evals, curves, progress, figures, budgets):
    """The summarize stage's job over the given evaluation records and RL curves (each run's
    curve and progress table by policy name), its outputs under ``out``: 300 bootstrap
    resamples, 90% intervals, seed 0, curves on 3 tracks."""
    return SummarizeJob(
        variant="base",
        bootstrap_reps=300,
        confidence=0.9,
        seed=0,
        curve_tracks=3,
        curve_runs=list(curves),
        budgets=budgets,
        arm_looks={},
        metric_labels={},
        evaluations=evals,
        curves=list(curves.values()),
        progress=[progress[name] for name in curves],
        figures=figures,
        summary_json=str(out / "summary.json"),
        summary_md=str(out / "summary.md"),
        **{k: str(out / f"{k}.csv") for k in TABLES},
    )


def test_a_tasks_registered_metrics_reach_its_evaluations_plan_and_summary():
    """A user's package registers per-episode metrics of its task (tests/user_tasks.py): the
    evaluations record them, the plan gives their labels to the summary, which tabulates them."""
    task = configs.task("user_tasks:RegisteredMetrics-v0")
    ev = evaluation.evaluate(
        task, lambda obs: np.zeros((len(obs), 1), np.float32), range(8), n_envs=2
    )
    assert list(ev.episodes) == ["seed", "return", "length", "distance", "reached"]
    assert set(ev.episodes["reached"]) == {0.0, 1.0}  # reward 1: exactly when it got there
    np.testing.assert_array_equal(ev.episodes["reached"], ev.episodes["return"])
    assert np.all(ev.episodes["distance"][ev.episodes["reached"] == 1] <= 0)

    cfg = copy.deepcopy(CONFIG)
    cfg["task"] |= {"env_id": "user_tasks:RegisteredMetrics-v0", "env_kwargs": {}}
    cfg["task"]["expert"] |= {"entry_point": "user_tasks:zero_expert", "kwargs": {}}
    labels = Plan(config.load(cfg)).base.metric_labels
    assert labels == {"distance": "distance left", "reached": "episodes reached"}

    episodes = {k: v.tolist() for k, v in ev.episodes.items()}
    records = [{"policy": p, "episodes": episodes} for p in (names.EXPERT, names.BC)]
    result = summary.summarize(records, labels=labels, **BOOTSTRAP)
    assert result["metrics"] == summary.METRICS | labels
    assert result["groups"][names.BC]["metrics"]["reached"] == np.mean(episodes["reached"])
