"""The cross-variant report: every config variant's policy groups against the base's, from what
each variant's summarize stage wrote (built here by that stage itself, on synthetic evaluations).

Three variants on the same tracks: ``base``; ``better``, whose RL warm start beats the base's on
every track in every run pair; ``shared``, whose runs are all the base's own. And ``moved``, on
other tracks, which must fail by name."""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_plots import assert_png

from demo2rl import tracking
from demo2rl.report import groups, summary
from demo2rl.specs.compare_variants import CompareJob
from demo2rl.specs.summarize import SummarizeJob
from demo2rl.stages import compare_variants as compare_stage
from demo2rl.stages import plot_variants as plot_stage
from demo2rl.stages import summarize as summarize_stage

BOOTSTRAP = {"bootstrap_reps": 1000, "confidence": 0.95, "seed": 0}
TRACKS = list(range(300_000_000, 300_000_020))
OVERRIDES = {
    "base": {},
    "better": {"rl": {"ppo": {"learning_rate": 0.0001}, "arms": ["bc", "scratch"]}},
    "shared": {"bc": {"epochs": 7}},
}
ELAPSED = {"rl-bc-seed0": [1, 3, 5], "rl-bc-seed1": [2, 4, 1, 3]}
"""SB3's elapsed seconds per progress row; seed 1 resumed after 4 s (the column restarts)."""
RL_BC_WALL = (5 + (4 + 3)) / 2
"""Its arm's mean wall time: each segment's last value summed, averaged over the seeds."""


def evaluations(rng: np.random.Generator, rl_bc: tuple[float, float]) -> dict[str, np.ndarray]:
    """Per-track returns of the expert, the clone and two seeds of the bc and scratch arms; the
    bc arm's drawn from the interval ``rl_bc``."""
    expert = np.round(rng.normal(50, 3, len(TRACKS)), 3)
    return {
        "expert": expert,
        "bc": expert - 0.5,
        **{f"rl-bc-seed{s}": rng.uniform(*rl_bc, len(TRACKS)) for s in (0, 1)},
        **{f"rl-scratch-seed{s}": rng.uniform(20, 35, len(TRACKS)) for s in (0, 1)},
    }


BASE = evaluations(np.random.default_rng(0), (40, 60))
RETRAINED = evaluations(np.random.default_rng(1), (70, 90))
"""The better variant's RL runs: every run of its bc arm above every base run of that arm, on
every track (60 < 70); its expert and clone are the base's."""
RUNS = {
    "base": BASE,
    "better": BASE | {k: v for k, v in RETRAINED.items() if k.startswith("rl-")},
    "shared": BASE,
}


def write_variant(root: Path, returns: Mapping[str, np.ndarray], tracks: list[int]) -> dict:
    """A variant's results as the workflow leaves them: evaluation records, learning curves and
    progress tables, summarised by the summarize stage; the paths compare_variants reads."""
    paths: dict[str, Any] = {"evaluations": [], "curves": {}, "progress": {}}
    for policy, values in returns.items():
        rec = {"policy": policy, "episodes": {"seed": tracks, "return": values.tolist()}}
        path = root / "eval" / f"{policy}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
        paths["evaluations"].append(str(path))
        if policy.startswith("rl-"):
            run_dir = root / "rl" / policy
            run_dir.mkdir(parents=True)
            curve = run_dir / "evaluations.csv"
            curve.write_text(f"step,return_mean\n0,10\n1000,{values[:5].mean()}\n")
            paths["curves"][policy] = str(curve)
            progress = run_dir / "progress.csv"
            with open(progress, "w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(["time/total_timesteps", "time/time_elapsed"])
                for i, t in enumerate(ELAPSED.get(policy, [10])):
                    writer.writerow([1024 * (i + 1), t])
            paths["progress"][policy] = str(progress)
    report = root / "report"
    tables = {t: str(report / f"{t}.csv") for t in ("policies", "improvement", "runs", "episodes")}
    paths |= {"summary_json": str(report / "summary.json"), "episodes": tables["episodes"]}
    job = SummarizeJob(
        variant=root.name,
        curve_tracks=5,
        curve_runs=list(paths["curves"]),
        budgets={},
        arm_looks={},
        metric_labels={},
        evaluations=paths["evaluations"],
        curves=list(paths["curves"].values()),
        progress=[paths["progress"][policy] for policy in paths["curves"]],
        figures={
            "curves_png": str(report / "plots" / "learning_curves.png"),
            "returns_png": str(report / "plots" / "final_returns.png"),
        },
        summary_json=paths["summary_json"],
        summary_md=str(report / "summary.md"),
        **tables,
        **BOOTSTRAP,
    )
    with tracking.untracked_run() as run:
        summarize_stage.summarize(job, run)
    return paths


@dataclass
class Recorder:
    """A run that remembers what was logged on it and on its parent (also a Recorder)."""

    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[tuple[str, str | None]] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    above: Recorder | None = None

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        self.metrics |= metrics

    def set_tags(self, tags: Mapping[str, str]) -> None:
        self.tags |= tags

    def log_artifact(self, path: str, artifact_path: str | None = None) -> None:
        self.artifacts.append((Path(path).name, artifact_path))

    def log_figures(self, paths: list[str]) -> None:
        self.figures += [Path(p).name for p in paths]

    @contextlib.contextmanager
    def parent(self) -> Iterator[Recorder | None]:
        yield self.above


def compare(root: Path, runs: Mapping[str, Mapping[str, np.ndarray]], tracks=None, run=None):
    """Every variant of ``runs`` written and summarised, then compared (``tracks`` per variant
    where they differ from :data:`TRACKS`)."""
    written = {
        v: write_variant(root / v, r, (tracks or {}).get(v, TRACKS)) for v, r in runs.items()
    }
    report = root / "report"
    progress = [([v, p], path) for v, w in written.items() for p, path in w["progress"].items()]
    job = CompareJob(
        overrides={v: OVERRIDES.get(v, {}) for v in runs},
        progress_runs=[run for run, _ in progress],
        arm_looks={},
        summaries=[w["summary_json"] for w in written.values()],
        episodes=[w["episodes"] for w in written.values()],
        progress=[path for _, path in progress],
        figure=str(report / "plots" / "variants.png"),
        variants_json=str(report / "variants.json"),
        variants_md=str(report / "variants.md"),
        **BOOTSTRAP,
    )
    with contextlib.ExitStack() as stack:
        run = run or stack.enter_context(tracking.untracked_run())
        return compare_stage.compare_variants(job, run)


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Recorder]:
    root = tmp_path_factory.mktemp("variants")
    run = Recorder(above=Recorder())
    return root, compare(root, RUNS, run=run), run


def row(result: Mapping[str, Any], variant: str, group: str) -> Mapping[str, Any]:
    return next(r for r in result["rows"] if (r["variant"], r["group"]) == (variant, group))


def test_a_strictly_better_arm_has_probability_one(compared):
    _, result, _ = compared
    better = row(result, "better", "rl_bc")
    assert better["vs_base"] == {"probability": 1.0, "ci": [1.0, 1.0], "same_runs": False}
    assert better["iqm_ci"][0] > row(result, "base", "rl_bc")["iqm_ci"][1]
    assert row(result, "base", "rl_bc")["vs_base"] is None  # the base is not compared with itself


def test_the_base_own_runs_are_the_same_runs(compared):
    _, result, _ = compared
    for g in ("expert", "bc", "rl_bc", "rl_scratch"):
        shared, base = row(result, "shared", g), row(result, "base", g)
        assert shared["vs_base"] == summary.SAME_RUNS
        assert (shared["iqm"], shared["iqm_ci"]) == (base["iqm"], base["iqm_ci"])
    # the better variant's expert and clone are the base's too; its scratch runs are not
    assert row(result, "better", "expert")["vs_base"]["same_runs"]
    assert not row(result, "better", "rl_scratch")["vs_base"]["same_runs"]


def test_the_best_variant_is_named(compared):
    _, result, run = compared
    assert result["best"]["overall"]["variant"] == "better"
    assert result["best"]["overall"]["group"] == "rl_bc"
    per_arm = {e["group"]: e["variant"] for e in result["best"]["per_arm"]}
    assert per_arm == {"rl_bc": "better", "rl_scratch": "base"}  # base first: it wins the tie
    assert run.above.tags == {"demo2rl.best_variant": "better:rl_bc"}


def test_steps_and_wall_time_come_from_each_variant(compared):
    root, result, _ = compared
    reach = json.loads((root / "better" / "report" / "summary.json").read_text())
    assert row(result, "better", "rl_bc")["steps_to_expert"] == reach["steps_to_expert"]["rl_bc"]
    assert row(result, "base", "rl_bc")["wall_seconds"] == RL_BC_WALL
    assert row(result, "base", "rl_scratch")["wall_seconds"] == 10
    assert row(result, "base", "expert")["wall_seconds"] is None


def test_the_markdown_names_every_variant_and_arm(compared):
    root, _, _ = compared
    md = (root / "report" / "variants.md").read_text()
    for v in RUNS:
        assert f"`{v}`" in md
    for g in ("expert", "bc", "rl_bc", "rl_scratch"):
        assert f"### {groups.label(g)}" in md
    assert '`rl.ppo.learning_rate = 0.0001`, `rl.arms = ["bc", "scratch"]`' in md
    assert "- `base`: no overrides" in md
    assert "| `shared` | 1 |" in md and "0.50 (same scores)" in md
    assert "1.00 [1.00, 1.00]" in md
    assert "**Overall** (highest IQM of all RL arms): `better`" in md
    assert "](plots/variants.png)" in md


def test_metrics_and_files_go_to_the_job_and_the_parent_run(compared):
    _, _, run = compared
    assert run.metrics["better.rl_bc.p_vs_base"] == 1.0
    assert run.metrics["shared.rl_bc.p_vs_base"] == 0.5
    assert run.metrics["base.rl_bc.wall_seconds"] == RL_BC_WALL
    assert "base.rl_bc.p_vs_base" not in run.metrics
    assert run.above.metrics == {f"variants.{k}": v for k, v in run.metrics.items()}
    assert run.above.artifacts == [("variants.json", "summary"), ("variants.md", "summary")]


def test_the_figure_is_drawn_from_variants_json(compared):
    root, _, _ = compared
    png = root / "report" / "plots" / "variants.png"
    run = Recorder()
    plot_stage.plot_variants(
        variants_json=str(root / "report" / "variants.json"), variants_png=str(png), run=run
    )
    assert_png(png)
    assert run.figures == ["variants.png"]


def test_other_tracks_fail_naming_the_variant(tmp_path: Path):
    runs = {"base": BASE, "moved": BASE}
    moved = [t + 1000 for t in TRACKS]
    with pytest.raises(ValueError, match="variant 'moved' was evaluated on other tracks"):
        compare(tmp_path, runs, tracks={"moved": moved})
