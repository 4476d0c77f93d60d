"""Arm-level runs against a real MLflow store: the summarize stage logs one run per RL arm that
holds summary.json's figures and learning curve and names its seed runs, and a rerun of the
summary replaces them (the older ones soft-deleted), one live run per (variant, arm)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import isolated_tracking_env
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from demo2rl import arms, names, tracking
from demo2rl.config import TrackingConfig
from demo2rl.report import summary
from demo2rl.specs.summarize import SummarizeJob
from demo2rl.stages import summarize
from demo2rl.tracking import lineage, ui
from demo2rl.tracking.arms import ARM_FILTER, VIEW_TAG

LENIENT = TrackingConfig(enabled=True, fail_on_error=False)
SEEDS = (0, 1)
TRACKS = 8
EXPERT_RETURN = 90.0
STEPS = [0, 1000, 2000, 3000]
CURVES = {  # each arm's mean learning curve; the seeds lie 1 above and below it
    "bc": [70.0, 85.0, 92.0, 95.0],
    "residual": [80.0, 91.0, 94.0, 97.0],
    "kickstart": [60.0, 70.0, 75.0, 80.0],  # never reaches the expert's return
    "scratch": [50.0, 70.0, 85.0, 96.0],
    "rlpd": [85.0, 94.0, 97.0, 99.0],  # reaches scratch's final return at step 2000
    "sac": [40.0, 60.0, 80.0, 90.0],
}
FIGURES = ["iqm", "iqm_low", "iqm_high", "mean", "mean_low", "mean_high"]
VERSUS_SCRATCH = ["p_vs_scratch", "p_vs_scratch_low", "p_vs_scratch_high"]
VERSUS_CONTROL = ["p_vs_control", "p_vs_control_low", "p_vs_control_high"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A workflow's store and parent run, and the files of its seed runs: per RL run its
    learning curve (written by a train_rl job) and per policy its held-out evaluation (an
    evaluate job), each with its lineage sidecar."""
    root = tmp_path_factory.mktemp("arms")
    assert sorted(CURVES) == sorted(arms.names()), "a curve for every registered arm"
    with pytest.MonkeyPatch.context() as mp:
        isolated_tracking_env(mp)
        assert tracking.start_workflow("arms", {"experiment": "arms"}, LENIENT, results_dir=root)
        rng = np.random.default_rng(0)
        for name, level in [("expert", EXPERT_RETURN), ("bc", 80.0)] + [
            (run.name, CURVES[run.arm][-1]) for run in names.rl_runs(CURVES, SEEDS)
        ]:
            run = names.RLRun.parse(name)
            if run is not None:
                curve = curve_path(root, run)
                curve.parent.mkdir(parents=True)
                with job(name, "rl", "train_rl", outputs=[curve]):
                    sign = 1 if run.seed == 0 else -1
                    rows = [f"{s},{v + sign}" for s, v in zip(STEPS, CURVES[run.arm], strict=True)]
                    curve.write_text("\n".join(["step,return_mean", *rows, ""]))
            returns = [EXPERT_RETURN] * TRACKS if name == "expert" else rng.normal(level, 3, TRACKS)
            evaluation = eval_path(root, name)
            evaluation.parent.mkdir(parents=True, exist_ok=True)
            with job(f"eval-{name}", "evaluate", "evaluate", outputs=[evaluation]):
                record = {"seed": list(range(TRACKS)), "return": [float(r) for r in returns]}
                evaluation.write_text(json.dumps({"policy": name, "episodes": record}))
        yield root


def job(name: str, stage: str, rule: str, **kwargs):
    return tracking.child_run(
        name, stage=stage, rule=rule, wildcards={}, params={}, settings=LENIENT, **kwargs
    )


def curve_path(root: Path, run: names.RLRun) -> Path:
    return Path(run.dir(str(root / "results"))) / "evaluations.csv"


def eval_path(root: Path, policy: str) -> Path:
    return root / "results" / "eval" / f"{policy}.json"


def summarize_job(root: Path, variant: str = "base") -> tuple[str, dict]:
    """The summarize stage in a job of the store's workflow: its run id and summary.json."""
    policies = ["expert", "bc", *(run.name for run in rl_runs())]
    evaluations = [str(eval_path(root, policy)) for policy in policies]
    curves = {run.name: str(curve_path(root, run)) for run in rl_runs()}
    progress = [no_seconds(curve_path(root, run).with_name("progress.csv")) for run in rl_runs()]
    report = root / "results" / "report"
    spec = SummarizeJob(
        variant=variant,
        bootstrap_reps=200,
        confidence=0.95,
        seed=0,
        curve_tracks=TRACKS,
        curve_runs=list(curves),
        budgets={},
        arm_looks={},
        metric_labels={},
        evaluations=evaluations,
        curves=list(curves.values()),
        progress=progress,
        figures={
            "curves_png": str(report / "plots" / "learning_curves.png"),
            "returns_png": str(report / "plots" / "final_returns.png"),
        },
        summary_json=str(report / "summary.json"),
        summary_md=str(report / "summary.md"),
        **{k: str(report / f"{k}.csv") for k in ("policies", "improvement", "runs", "episodes")},
    )
    with job("summarize", "summarize", "summarize", inputs=[*evaluations, *curves.values()]) as run:
        summarize.summarize(spec, run)
    return run.run_id, json.loads((report / "summary.json").read_text())


def no_seconds(path: Path) -> str:
    """Write a progress table without the seconds columns at ``path``: the summary leaves its
    run out of the wall and CPU figures (none here), as if the run had no progress table."""
    pd.DataFrame({summary.STEPS: []}).to_csv(path, index=False)
    return str(path)


def rl_runs() -> list[names.RLRun]:
    return names.rl_runs(CURVES, SEEDS)


def arm_runs(root: Path, view: ViewType = ViewType.ACTIVE_ONLY) -> list:
    client = MlflowClient(tracking.tracking_uri(root))
    experiment = client.get_experiment_by_name("arms").experiment_id
    return client.search_runs([experiment], ARM_FILTER, run_view_type=view)


def producers(paths: list[Path]) -> list[str]:
    """The run ids recorded beside ``paths`` (their lineage sidecars)."""
    return [json.loads(lineage.sidecar_path(p).read_text())["run_id"] for p in paths]


def test_arm_runs_hold_the_summary_figures_curve_and_seed_runs(store: Path):
    _, saved = summarize_job(store)
    runs = {r.data.tags["demo2rl.arm"]: r for r in arm_runs(store)}
    assert sorted(runs) == sorted(CURVES)  # the RL arms: not the expert, not the clone
    client = MlflowClient(tracking.tracking_uri(store))
    parent = client.get_run(next(iter(runs.values())).data.tags["mlflow.parentRunId"])
    assert parent.data.tags["demo2rl.stage"] == "workflow"
    control = f"rl_{arms.CONTROL}"
    for arm, run in runs.items():
        group = names.rl_group(arm)
        assert run.info.run_name == f"arm-{arm}" and run.info.status == "FINISHED"
        assert run.data.tags["demo2rl.variant"] == "base"
        assert run.data.tags["demo2rl.stage"] == "arm"
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        stats = saved["groups"][group]
        versus = saved["probability_of_improvement"].get(f"{group}_vs_{control}")
        expected = dict(
            zip(
                FIGURES,
                [stats["iqm"], *stats["iqm_ci"], stats["mean"], *stats["mean_ci"]],
                strict=True,
            )
        )
        if versus is not None:
            expected |= dict(
                zip(VERSUS_SCRATCH, [versus["probability"], *versus["ci"]], strict=True)
            )
        own = arms.get(arm).control
        versus_own = saved["probability_of_improvement"].get(f"{group}_vs_rl_{own}")
        if own != arms.CONTROL and versus_own is not None:
            expected |= dict(
                zip(VERSUS_CONTROL, [versus_own["probability"], *versus_own["ci"]], strict=True)
            )
        reached = saved["steps_to_expert"][group]
        if reached is not None:
            expected["steps_to_expert"] = reached
        soon = saved["arms"][group]["steps_to_scratch_final"]
        if soon is not None:
            expected["steps_to_scratch_final"] = soon
        curve = {k: v for k, v in run.data.metrics.items() if k.startswith("curve_")}
        assert {k: v for k, v in run.data.metrics.items() if k not in curve} == expected
        band = saved["learning_curves"][group]
        assert band["mean"] == pytest.approx(CURVES[arm])
        for series in ("mean", "low", "high"):
            history = client.get_metric_history(run.info.run_id, f"curve_{series}")
            points = sorted((m.step, m.value) for m in history)
            assert points == list(zip(band["step"], band[series], strict=True))
        seeds = [r for r in rl_runs() if r.arm == arm]
        train_rl = run.data.tags["demo2rl.seed_runs.train_rl"].split(",")
        assert train_rl == producers([curve_path(store, r) for r in seeds])
        evaluate = run.data.tags["demo2rl.seed_runs.evaluate"].split(",")
        assert sorted(evaluate) == sorted(producers([eval_path(store, r.name) for r in seeds]))
    # what the data were made for: scratch has no P(scratch > scratch), kickstart never gets there
    assert not set(VERSUS_SCRATCH) & set(runs[arms.CONTROL].data.metrics)
    assert "steps_to_expert" not in runs["kickstart"].data.metrics
    assert runs["residual"].data.metrics["steps_to_expert"] == 1000
    assert runs["rlpd"].data.metrics["steps_to_scratch_final"] == 2000
    assert set(VERSUS_CONTROL) <= set(runs["rlpd"].data.metrics)  # rlpd against sac
    assert not set(VERSUS_CONTROL) & set(runs["bc"].data.metrics)  # a PPO arm's is scratch
    # the runs table's view of them, for the link `make ui` prints
    assert json.loads(client.get_experiment_by_name("arms").tags[VIEW_TAG])["searchFilter"] == (
        ARM_FILTER
    )


def test_a_rerun_replaces_the_arm_runs_of_its_variant(store: Path):
    first, _ = summarize_job(store)
    other, _ = summarize_job(store, variant="lr-high")
    second, _ = summarize_job(store)
    live = arm_runs(store)
    by_key = {(r.data.tags["demo2rl.variant"], r.data.tags["demo2rl.arm"]): r for r in live}
    assert len(by_key) == len(live) == 2 * len(CURVES), "one live run per (variant, arm)"
    assert by_key["lr-high", "bc"].info.run_name == "arm-bc-lr-high"
    everything = arm_runs(store, ViewType.ALL)
    deleted = [r for r in everything if r.info.lifecycle_stage == "deleted"]
    assert deleted and all(r.data.tags["demo2rl.variant"] == "base" for r in deleted)
    # the live ones are the last summary's of each variant: logged by a job that started later
    client = MlflowClient(tracking.tracking_uri(store))
    started = {job: client.get_run(job).info.start_time for job in (first, other, second)}
    for (variant, _), run in by_key.items():
        after = started[second] if variant == "base" else started[other]
        assert run.info.start_time >= after
    for run in deleted:
        assert run.info.start_time < started[second]


def test_make_ui_links_each_experiment_to_its_arm_runs(store: Path, tmp_path: Path):
    """What `make ui` prints (tests/test_mlflow_ui.py opens it in a browser): the experiment's
    shared view of its arm runs once it has them; what to run without a store."""
    url = "http://127.0.0.1:5000"
    summarize_job(store)
    experiment = MlflowClient(tracking.tracking_uri(store)).get_experiment_by_name("arms")
    link = f"{url}/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey=demo2rl-arms"
    assert f"  arms: {link}&workflowType=machine_learning" in ui.experiment_lines(store, url)
    (missing,) = ui.experiment_lines(tmp_path, url)
    assert "no MLflow store" in missing and "make run" in missing
    assert not (tmp_path / "mlflow.db").exists()
