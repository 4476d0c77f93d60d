"""Stage compare_variants: the config variants side by side, each policy group against the base's.

It reads what each variant's summarize stage wrote (``summary.json``, ``episodes.csv``) and its RL
runs' SB3 progress tables, so a variant's numbers are recomputed from its own records, never from
another stage's rounded ones. The figure is drawn from its ``variants.json`` by the rule
plot_variants, so no plotting code is part of this stage's code fingerprint.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from demo2rl import io
from demo2rl.report import groups, summary
from demo2rl.specs.compare_variants import CompareJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow

log = logging.getLogger(__name__)


def compare_variants(job: CompareJob, run: Run) -> dict[str, Any]:
    """Compare every variant's policy groups with the base's; write ``variants.json`` and
    ``variants.md`` (which links to ``job.figure``).

    ``job.summaries`` and ``job.episodes`` are each variant's ``summary.json`` and
    ``episodes.csv``, in the order of ``job.overrides`` (each variant, the base first, with its
    overrides of the base config, as declared); ``job.progress`` are the RL runs'
    ``progress.csv`` of each ``[variant, policy]`` of ``job.progress_runs`` (a run the variant
    shares with the base appears under both). Every variant must have been
    evaluated on the base's tracks: P(variant > base) compares the two on each track. Metrics and
    files also go to the workflow's parent run, beside the summary's.
    """
    overrides = job.overrides
    variants = list(overrides)  # the base first
    if not variants or not len(job.summaries) == len(job.episodes) == len(variants):
        raise ValueError(
            f"{len(variants)} variants {variants}, but {len(job.summaries)} summaries and "
            f"{len(job.episodes)} episode tables"
        )
    summaries = dict(zip(variants, job.summaries, strict=True))
    episodes = dict(zip(variants, job.episodes, strict=True))
    progress: dict[str, dict[str, str]] = {v: {} for v in variants}
    for (variant, policy), path in zip(job.progress_runs, job.progress, strict=True):
        progress[variant][policy] = path
    variants_json, variants_md, figure = job.variants_json, job.variants_md, job.figure
    bootstrap_reps, confidence, seed = job.bootstrap_reps, job.confidence, job.seed
    base = variants[0]
    loaded = {v: json.loads(Path(summaries[v]).read_text()) for v in variants}
    tracks = [int(t) for t in loaded[base]["tracks"]]
    scores = {v: _scores(v, base, loaded[v], episodes[v], tracks) for v in variants}
    compared = summary.compare_variants(
        scores, reps=bootstrap_reps, confidence=confidence, seed=seed
    )
    walls = {
        v: summary.mean_seconds({n: pd.read_csv(p) for n, p in progress.get(v, {}).items()})
        for v in variants
    }
    present = [g for g in groups.all_groups() if any(g in scores[v] for v in variants)]
    rows = [
        {"variant": v, "group": g}
        | {k: compared[v][g][k] for k in ("n_runs", "n_tracks", "mean", "mean_ci", "iqm")}
        | {"iqm_ci": compared[v][g]["iqm_ci"], "vs_base": compared[v][g]["vs_base"]}
        | {"steps_to_expert": (loaded[v].get("steps_to_expert") or {}).get(g)}
        | {"wall_seconds": walls[v].get(g)}
        for g in present
        for v in variants
        if g in scores[v]
    ]
    result = {
        "base": base,
        "variants": [{"name": v, "overrides": dict(overrides[v])} for v in variants],
        "groups": [{"group": g, "label": groups.label(g)} for g in present],
        "tracks": tracks,
        "n_tracks": len(tracks),
        "confidence": confidence,
        "bootstrap_reps": bootstrap_reps,
        "rows": rows,
        "best": summary.best_variants(compared),
    }
    io.write_json(variants_json, io.strict_json(result))
    link = os.path.relpath(figure, Path(variants_md).parent)
    with io.atomic_path(variants_md) as tmp:
        tmp.write_text(summary.variants_markdown(result, link))

    metrics = variant_metrics(result)
    run.log_metrics(metrics)
    overall = result["best"]["overall"]
    best = f"{overall['variant']}:{overall['group']}" if overall else "none"
    with run.parent() as parent:
        target = parent or run
        target.log_metrics({f"variants.{k}": v for k, v in metrics.items()})
        target.set_tags({"demo2rl.best_variant": best})
        for path in (variants_json, variants_md):
            target.log_artifact(path, "summary")
    log.info("variants:\n%s", summary.variants_markdown(result))
    return result


def variant_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics of a comparison: ``<variant>.<group>.iqm`` (and ``_low``/``_high``),
    ``.mean``, ``.p_vs_base`` (and bounds), ``.steps_to_expert``, ``.wall_seconds``."""
    out: dict[str, float | None] = {}
    for row in result["rows"]:
        key = f"{row['variant']}.{row['group']}"
        out[f"{key}.iqm"] = row["iqm"]
        out[f"{key}.iqm_low"], out[f"{key}.iqm_high"] = row["iqm_ci"]
        out[f"{key}.mean"] = row["mean"]
        if row["vs_base"] is not None:
            out[f"{key}.p_vs_base"] = row["vs_base"]["probability"]
            out[f"{key}.p_vs_base_low"], out[f"{key}.p_vs_base_high"] = row["vs_base"]["ci"]
        out[f"{key}.steps_to_expert"] = row["steps_to_expert"]
        out[f"{key}.wall_seconds"] = row["wall_seconds"]
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _scores(
    variant: str, base: str, loaded: Mapping[str, Any], episodes_csv: str, tracks: Sequence[int]
) -> dict[str, np.ndarray]:
    """A variant's ``(runs, tracks)`` return matrix per group, its runs in the summary's order
    (by seed) and its tracks in the base's order; other tracks than the base's fail."""
    if [int(t) for t in loaded["tracks"]] != list(tracks):
        raise ValueError(
            f"variant {variant!r} was evaluated on other tracks than {base!r}: the evaluation "
            "seeds derive from the top-level seed and evaluate.episodes, which a variant must "
            "leave as they are"
        )
    table = pd.read_csv(episodes_csv)
    out: dict[str, list[np.ndarray]] = {}
    for entry in loaded["runs"]:
        rows = table[table["policy"] == entry["policy"]]
        if rows["track_seed"].astype(int).tolist() != list(tracks):
            raise ValueError(
                f"variant {variant!r}: {entry['policy']} in {episodes_csv} was evaluated on "
                f"other tracks than {base!r}"
            )
        out.setdefault(entry["group"], []).append(rows["return"].to_numpy(dtype=np.float64))
    return {g: np.stack(rs) for g, rs in out.items()}
