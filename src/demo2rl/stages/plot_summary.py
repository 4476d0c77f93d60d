"""Stage plot_summary: the learning curves and the final held-out returns, from summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from demo2rl.report import groups, plots

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def plot_summary(*, summary_json: str, curves_png: str, returns_png: str, run: Run) -> None:
    """Draw the RL learning curves (bands over seeds, expert and clone as levels; by env steps,
    by training CPU seconds where the summary has those curves, and each arm's cost to scratch
    PPO's final return on both axes) and the final returns (IQM with intervals, P(X > Y)); log
    both on the job's and the workflow's run."""
    result = json.loads(Path(summary_json).read_text())  # (its keys are sorted: reorder)
    order = groups.all_groups()
    result["groups"] = {g: result["groups"][g] for g in order if g in result["groups"]}
    pairs = [groups.comparison_key(x, y) for x, y in groups.comparisons(list(result["groups"]))]
    improvement_of = result["probability_of_improvement"]
    result["probability_of_improvement"] = {
        k: improvement_of[k] for k in pairs if k in improvement_of
    }
    label = {g: st["label"] for g, st in result["groups"].items()}
    colors = {label[g]: groups.color(g) for g in label}
    confidence = result["confidence"]

    def bands(curves: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
        return {
            label.get(g, g): {k: _floats(v) for k, v in curves[g].items()}
            for g in order
            if g in curves
        }

    levels = {label[g]: value for g, value in result["curve_levels"].items()}
    final = result.get("scratch_final_return")
    costs = {
        label.get(g, g): (a.get("cpu_to_scratch_final"), a.get("steps_to_scratch_final"))
        for g, a in result.get("arms", {}).items()
    }
    plots.learning_curves(
        bands(result["learning_curves"]),
        levels,
        curves_png,
        colors=colors,
        confidence=confidence,
        by_cpu=bands(result.get("learning_curves_cpu", {})),
        costs=costs if final is not None else None,
        target=f"scratch PPO's final return ({final:.1f})" if final is not None else "",
    )
    estimates = {
        st["label"]: st | {"runs": [r["return_mean"] for r in result["runs"] if r["group"] == g]}
        for g, st in result["groups"].items()
    }
    improvement = {
        f"{label[c['x']]} > {label[c['y']]}": c | {"x_label": label[c["x"]]}
        for c in result["probability_of_improvement"].values()
    }
    plots.final_returns(estimates, improvement, returns_png, colors=colors, confidence=confidence)
    run.log_figures([curves_png, returns_png])


def _floats(values: Any) -> np.ndarray:
    """A JSON list (null for NaN) as a float array."""
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
