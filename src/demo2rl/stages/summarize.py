"""Stage summarize: the held-out comparison across policies and RL seeds, its tables and numbers.

The figures are drawn from its ``summary.json`` by the rules plot_summary and plot_racing, so no
plotting code is part of this stage's code fingerprint.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from demo2rl import arms, io, names, provenance
from demo2rl.demos import dataset
from demo2rl.report import summary
from demo2rl.specs.summarize import SummarizeJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow

log = logging.getLogger(__name__)

LEVELS = (names.EXPERT, names.BC)
"""Groups drawn as reference levels beside the RL learning curves."""


def summarize(job: SummarizeJob, run: Run) -> dict[str, Any]:
    """Aggregate the evaluation records; write the summary, its tables and the curve bands.

    ``job.curves`` are the RL runs' ``evaluations.csv`` (learning curves, evaluated on the first
    ``job.curve_tracks`` held-out tracks); their bootstrap bands and the expert's and clone's
    levels on the same tracks go into ``summary.json`` for the rule that draws them, with the
    tables ``policies``, ``improvement``, ``runs`` and ``episodes`` as CSV; ``summary.md`` links
    to ``job.figures``.

    ``job.progress`` are the same runs' SB3 ``progress.csv``: each run's training seconds (wall
    and CPU) and its learning curve against its training CPU seconds (``learning_curves_cpu``);
    ``job.budgets`` maps each arm to its env steps per run (:meth:`demo2rl.arms.Arm.budget`).
    Per RL arm its budget, its cost and how soon it reaches scratch PPO's final return and the
    expert's, in env steps and in CPU seconds, go into ``arms``
    (:func:`demo2rl.report.summary.arm_costs`); a figure without its input (no progress table, no
    budget) is None there.

    Metrics and files also go to the workflow's parent run, so the MLflow UI compares whole
    invocations; and each RL arm gets a run of its own (:func:`arm_metrics`, its curve and its
    seed runs), tagged with ``variant`` (the config variant's name, ``base`` for the base
    config), so the UI's runs table compares the arms row by row.
    """
    evaluations, variant, budgets = job.evaluations, job.variant, job.budgets
    curves = dict(zip(job.curve_runs, job.curves, strict=True))
    progress = dict(zip(job.curve_runs, job.progress, strict=True))
    bootstrap_reps, confidence, seed = job.bootstrap_reps, job.confidence, job.seed
    curve_tracks, summary_json, summary_md = job.curve_tracks, job.summary_json, job.summary_md
    tables = {k: getattr(job, k) for k in ("policies", "improvement", "runs", "episodes")}
    plot_links = {
        "Learning curves": job.figures["curves_png"],
        "Final returns": job.figures["returns_png"],
    }
    records = [json.loads(Path(p).read_text()) for p in evaluations]
    result = summary.summarize(
        records, reps=bootstrap_reps, confidence=confidence, seed=seed, labels=job.metric_labels
    )
    for name, rows in summary.tables(result).items():
        _write_csv(tables[name], rows)
    _write_csv(tables["episodes"], _episode_rows(records))

    by_group = {
        g: [r for r in records if summary.policy_group(r["policy"]) == g] for g in result["groups"]
    }
    levels = {g: summary.level(rs[0], curve_tracks) for g, rs in by_group.items() if g in LEVELS}
    curve_tables = {name: pd.read_csv(path) for name, path in curves.items()}
    progress_tables = {name: pd.read_csv(path) for name, path in (progress or {}).items()}
    bands = _curve_bands(curve_tables, confidence, seed)
    result["learning_curves"] = {g: {k: v.tolist() for k, v in b.items()} for g, b in bands.items()}
    cpu_runs = _cpu_runs(curve_tables, progress_tables)
    result["learning_curves_cpu"] = {
        g: {"seconds" if k == "step" else k: v.tolist() for k, v in b.items()}
        for g, b in _bands(cpu_runs, confidence, seed).items()
    }
    result["curve_levels"] = levels
    result |= summary.arm_costs(
        bands,
        budgets=budgets or {},
        wall_seconds=summary.mean_seconds(progress_tables, summary.ELAPSED),
        cpu_seconds=summary.mean_seconds(progress_tables, summary.CPU),
        compile_seconds=summary.mean_seconds(progress_tables, summary.COMPILE),
        expert_level=levels.get(names.EXPERT),
        cpu_runs={
            g: [(steps, seconds) for steps, seconds, _ in runs] for g, runs in cpu_runs.items()
        },
    )
    if names.EXPERT in levels:
        result["steps_to_expert"] = {g: a["steps_to_expert"] for g, a in result["arms"].items()}
    rounds = [json.loads(Path(p).read_text()) for p in job.rounds]
    result["dagger"] = summary.dagger_rounds(result, rounds)
    if job.reference:  # no expert: the dataset's own episodes are the reference
        returns = dataset.read_tables(job.reference[0]).episodes["return"]
        result["reference"] = summary.dataset_reference(
            returns, reps=bootstrap_reps, confidence=confidence, seed=seed
        )
    result["versions"] = provenance.versions()
    result["code_revision"] = provenance.code_revision()
    io.write_json(summary_json, io.strict_json(result))
    md_dir = Path(summary_md).parent
    links = {title: os.path.relpath(path, md_dir) for title, path in plot_links.items()}
    with io.atomic_path(summary_md) as tmp:
        tmp.write_text(summary.markdown(result, links))

    files = [summary_json, summary_md, *tables.values()]
    metrics = summary_metrics(result)
    run.log_metrics(metrics)
    _log_to_parent(metrics, files, {"demo2rl.best_rl": result["best_rl"] or "none"}, run)
    _log_arms(result, dict(zip(evaluations, records, strict=True)), curves, variant, run)
    log.info("summary:\n%s", summary.markdown(result))
    return result


CPU_COSTS = ("cpu_to_scratch_final", "cpu_to_expert", "cpu_vs_scratch", "cpu_to_expert_vs_scratch")
"""An arm's figures on the compute axis (:func:`demo2rl.report.summary.arm_costs`), as MLflow
metrics."""


def summary_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics of a summary: ``<group>.return_iqm`` (and ``_low``/``_high``),
    ``<group>.return_mean``, ``<group>.<metric>``, ``p_improvement.<x>_vs_<y>`` (and bounds), and
    per RL arm ``<group>.steps_to_expert``, ``.steps_to_scratch_final``, ``.budget``,
    ``.wall_seconds``, ``.cpu_seconds`` and the compute axis's ``.cpu_to_scratch_final``,
    ``.cpu_to_expert``, ``.cpu_vs_scratch``, ``.cpu_to_expert_vs_scratch`` (where known)."""
    out: dict[str, float] = {}
    for g, st in result["groups"].items():
        out[f"{g}.return_mean"] = st["mean"]
        out[f"{g}.return_iqm"] = st["iqm"]
        out[f"{g}.return_iqm_low"], out[f"{g}.return_iqm_high"] = st["iqm_ci"]
        out |= {f"{g}.{m}": v for m, v in st["metrics"].items() if m != "return"}
    for g, step in result.get("steps_to_expert", {}).items():
        out[f"{g}.steps_to_expert"] = step
    for g, costs in result.get("arms", {}).items():
        out[f"{g}.budget"] = costs["budget"]
        out[f"{g}.steps_to_scratch_final"] = costs["steps_to_scratch_final"]
        out[f"{g}.wall_seconds"] = costs["wall_seconds"]
        out[f"{g}.cpu_seconds"] = costs["cpu_seconds"]
        out |= {f"{g}.{k}": costs.get(k) for k in CPU_COSTS}
    for key, c in result["probability_of_improvement"].items():
        out[f"p_improvement.{key}"] = c["probability"]
        out[f"p_improvement.{key}_low"], out[f"p_improvement.{key}_high"] = c["ci"]
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def arm_metrics(result: Mapping[str, Any], group: str) -> dict[str, float]:
    """The figures of one RL arm's run: ``iqm``, ``mean`` (each with ``_low``/``_high``),
    ``p_vs_scratch`` (and bounds; none for scratch itself), ``p_vs_control`` (and bounds: against
    its own algorithm's control where that is not scratch PPO, e.g. SAC's), ``steps_to_expert``
    and ``steps_to_scratch_final`` (none where its mean curve never gets there), ``budget`` (env
    steps per run), ``wall_s`` and ``cpu_s`` (mean training seconds per run), and the CPU seconds
    to scratch PPO's final return and to the expert's with their ratios to scratch PPO's
    (:data:`CPU_COSTS`); a figure the summary does not have is left out."""
    st = result["groups"][group]
    out = {"iqm": st["iqm"], "mean": st["mean"]}
    out["iqm_low"], out["iqm_high"] = st["iqm_ci"]
    out["mean_low"], out["mean_high"] = st["mean_ci"]
    scratch = arms.get(arms.CONTROL).group
    own = arms.get(names.group_arm(group) or group).control
    controls = {"p_vs_scratch": scratch}
    if own is not None and arms.get(own).group != scratch:
        controls["p_vs_control"] = arms.get(own).group
    for key, control in controls.items():
        versus = result["probability_of_improvement"].get(summary.comparison_key(group, control))
        if versus is not None:
            out[key] = versus["probability"]
            out[f"{key}_low"], out[f"{key}_high"] = versus["ci"]
    out["steps_to_expert"] = result.get("steps_to_expert", {}).get(group)
    costs = result.get("arms", {}).get(group, {})
    out["steps_to_scratch_final"] = costs.get("steps_to_scratch_final")
    out["budget"] = costs.get("budget")
    out["wall_s"], out["cpu_s"] = costs.get("wall_seconds"), costs.get("cpu_seconds")
    out |= {k: costs.get(k) for k in CPU_COSTS}
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _log_arms(
    result: Mapping[str, Any],
    evaluations: Mapping[str, Mapping[str, Any]],
    curves: Mapping[str, str],
    variant: str,
    run: Run,
) -> None:
    """An arm-level run per RL arm: its figures, its learning curve, and its seeds' files
    (``evaluations`` maps each evaluation's path to its record) by the rule that wrote them."""
    for group in result["groups"]:
        arm = names.group_arm(group)
        if arm is None:  # the expert and the clone: reference levels, not arms
            continue
        inputs = {
            "train_rl": [p for name, p in curves.items() if summary.policy_group(name) == group],
            "evaluate": [
                p for p, rec in evaluations.items() if summary.policy_group(rec["policy"]) == group
            ],
        }
        run.log_arm(
            arm,
            variant=variant,
            metrics=arm_metrics(result, group),
            curve=result["learning_curves"].get(group, {}),
            inputs=inputs,
        )


def _log_to_parent(
    metrics: Mapping[str, float], files: Sequence[str], tags: Mapping[str, str], run: Run
) -> None:
    """Metrics, tags and files on the workflow's parent run (the job's own run without one)."""
    with run.parent() as parent:
        target = parent or run
        target.log_metrics({f"summary.{k}": v for k, v in metrics.items()})
        target.set_tags(tags)
        for path in files:
            target.log_artifact(path, "summary")


def _curve_bands(
    curves: Mapping[str, pd.DataFrame], confidence: float, seed: int
) -> dict[str, Any]:
    """The learning-curve band of each RL arm from its runs' evaluations tables."""
    runs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for name, table in curves.items():
        group = summary.policy_group(name)
        runs.setdefault(group, []).append(
            (table["step"].to_numpy(), table["return_mean"].to_numpy())
        )
    return _bands(runs, confidence, seed)


def _cpu_runs(
    curves: Mapping[str, pd.DataFrame], progress: Mapping[str, pd.DataFrame]
) -> dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Each RL group's runs as (evaluation steps, the run's training CPU seconds there
    (:func:`demo2rl.report.summary.seconds_at`), the returns there): the learning curves on the
    compute axis. A run without a progress table (or without the columns) is left out."""
    runs: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for name, table in curves.items():
        if name not in progress:
            continue
        steps = table["step"].to_numpy(dtype=np.float64)
        seconds = summary.seconds_at(progress[name], steps, summary.CPU)
        if seconds is not None:
            runs.setdefault(summary.policy_group(name), []).append(
                (steps, seconds, table["return_mean"].to_numpy())
            )
    return runs


def _bands(
    runs: Mapping[str, Sequence[tuple[np.ndarray, ...]]], confidence: float, seed: int
) -> dict[str, Any]:
    """Each group's learning-curve band over its runs' (x, return) pairs, the last two members of
    each run's tuple (:func:`demo2rl.report.summary.curve_band`)."""
    return {
        g: summary.curve_band([r[-2:] for r in runs[g]], confidence=confidence, seed=seed)
        for g in summary.all_groups()
        if g in runs
    }


def _episode_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rec in records:
        episodes = rec["episodes"]
        for i, track in enumerate(episodes["seed"]):
            group = summary.policy_group(rec["policy"])
            row = {"policy": rec["policy"], "group": group, "track_seed": track}
            rows.append(row | {k: v[i] for k, v in episodes.items() if k != "seed"})
    return rows


def _write_csv(path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with io.atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
