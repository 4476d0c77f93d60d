"""Stage plot_variants: the config variants' IQM per policy group, drawn from variants.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demo2rl.report import groups, plots

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def plot_variants(*, variants_json: str, variants_png: str, run: Run) -> None:
    """Draw each group's IQM with its interval per variant, base first and P(variant > base)
    above each bar; log the figure on the job's and the workflow's run."""
    result = json.loads(Path(variants_json).read_text())
    base = result["base"]
    panels: dict[str, list[dict[str, Any]]] = {}
    for g in result["groups"]:  # a list: the order of every table, which sorted keys would lose
        panels[g["label"]] = [
            {
                "variant": row["variant"],
                "iqm": row["iqm"],
                "iqm_ci": row["iqm_ci"],
                "note": _note(row["vs_base"]),
                "same_runs": bool(row["vs_base"] and row["vs_base"]["same_runs"]),
            }
            for row in result["rows"]
            if row["group"] == g["group"]
        ]
    colors = {g["label"]: groups.color(g["group"]) for g in result["groups"]}
    plots.variants(panels, variants_png, colors=colors, confidence=result["confidence"], base=base)
    run.log_figures([variants_png])


def _note(vs_base: dict[str, Any] | None) -> str | None:
    """P(variant > base) above a bar: ``P=0.93`` (``same`` for the base's own runs)."""
    if vs_base is None:
        return None
    return "same" if vs_base["same_runs"] else f"P={vs_base['probability']:.2f}"
