"""Comparing the policies on the held-out evaluation: rliable's aggregates with bootstrap intervals.

(About 830 lines: the statistics and the tables built from them, for one config and across
config variants, and each RL arm's budget and training cost; the figures are plots.py.)

Every policy drove the same held-out tracks (one episode per evaluation seed), so each policy
group has a score matrix ``(runs, tracks)`` in rliable's ``(num_runs, num_tasks)`` layout: one run
for the expert and for the clone, one run per seed for each RL arm. On it:

* **mean** and **IQM** (interquartile mean: the mean of the middle 50% of all run x track scores,
  robust to a few crashed episodes): ``rliable.metrics.aggregate_mean`` / ``aggregate_iqm``;
* **probability of improvement** P(X > Y): on each track, the fraction of (run of X, run of Y)
  pairs where X scores higher (ties count half), averaged over tracks:
  ``rliable.metrics.probability_of_improvement``;
* **confidence intervals**: percentile intervals of a stratified bootstrap. Each replicate draws
  the runs of every group with replacement (a run is resampled whole: it is one policy on every
  track), and draws the tracks with replacement (rliable's task bootstrap), the same tracks for
  every group because every policy drove the same ones. The intervals thus cover both the spread
  between training seeds and the luck of the held-out tracks; for a single policy (expert, clone)
  only the latter.

rliable's own bootstrap (``rliable.library``) is not used: it resamples a run independently per
task, which would treat one policy's scores on different tracks as independent runs, and it cannot
be imported with the pinned pandas 3 (its dependency ``arch`` 7 fails). The bootstrap here is
vectorised numpy, seeded, and its point estimates are rliable's.

Across config variants (:func:`compare_variants`) the same bootstrap runs once over every variant's
groups: the variants were evaluated on the same held-out tracks (their seeds derive from the
top-level ``seed``), so each group of a variant is compared with the same group of the base by
P(variant > base), with the tracks drawn alike for both.

Each RL arm's budget (env steps per run, its algorithm's) and cost (training seconds, wall and
CPU, from its runs' progress tables) sit beside how soon its mean learning curve reaches scratch
PPO's final return and the expert's, on both axes a user pays in: env steps, and the training's
CPU seconds (:func:`arm_costs`): what the demonstrations buy per env step and per second.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.stats
from rliable import metrics as rly

from demo2rl import arms
from demo2rl.names import BC, EXPERT, RLRun, dagger_policy, group_arm
from demo2rl.report.groups import (
    all_groups,
    arm_groups,
    best_rl_run,
    comparison_key,
    comparisons,
    label,
    policy_group,
)

__all__ = ["all_groups", "comparison_key", "label", "policy_group"]  # re-exported: what is compared
METRICS = {"return": "return", "length": "episode length (steps)"}
"""The per-episode metrics of every task, with their labels; a task's own follow them
(:mod:`demo2rl.envs.capabilities`)."""
CURVE_REPS = 2000
"""Bootstrap replicates of a learning-curve band: a picture's shading, not a reported interval
(those use ``evaluate.bootstrap_reps``)."""
STEPS = "time/total_timesteps"
"""SB3's progress column of the run's env steps so far (counted from step 0 across resumes)."""
ELAPSED = "time/time_elapsed"
"""SB3's progress column of the wall seconds since the run's ``learn()`` call began: it restarts
at every resume."""
CPU = "time/cpu_s"
"""The trainer's progress column of the training's CPU seconds since the run or its resume began
(its process's and its subproc vec env's workers', evaluations during training included:
:func:`demo2rl.rl.progress.training_cpu_seconds`): it restarts at a resume as :data:`ELAPSED`
does."""
COMPILE = "time/compile_cpu_s"
"""The trainer's progress column of the CPU seconds an off-policy run's process spent compiling
its update (:attr:`demo2rl.rl.sac.FastSAC.compile_cpu_s`, part of :data:`CPU`); it restarts at a
resume, whose process compiles again."""


# --------------------------------------------------------------------------------------------
# point estimates (rliable) and their batched forms (bootstrap replicates)


def mean(scores: np.ndarray) -> float:
    """Mean over all runs and tracks (``rliable.metrics.aggregate_mean``)."""
    return float(rly.aggregate_mean(np.asarray(scores, dtype=np.float64)))


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean over all runs and tracks (``rliable.metrics.aggregate_iqm``)."""
    return float(rly.aggregate_iqm(np.asarray(scores, dtype=np.float64)))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) of two ``(runs, tracks)`` matrices on the same tracks (rliable's definition)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"different numbers of tracks: {x.shape[1]} vs {y.shape[1]}")
    return float(rly.probability_of_improvement(x, y))


def batched_iqm(samples: np.ndarray) -> np.ndarray:
    """IQM of each replicate ``samples[b]`` (any trailing shape): ``aggregate_iqm`` batched."""
    return scipy.stats.trim_mean(samples.reshape(len(samples), -1), 0.25, axis=1)


def batched_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) of each replicate: ``x`` ``(B, runs_x, tracks)``, ``y`` ``(B, runs_y, tracks)``.

    Per track the Mann-Whitney U statistic over run pairs divided by the number of pairs (ties
    count half), averaged over tracks: ``rliable.metrics.probability_of_improvement`` batched.
    """
    xs, ys = x[:, :, None, :], y[:, None, :, :]
    wins = (xs > ys).mean(axis=(1, 2)) + 0.5 * (xs == ys).mean(axis=(1, 2))
    return wins.mean(axis=1)


# --------------------------------------------------------------------------------------------
# the bootstrap


def compare(
    scores: Mapping[str, np.ndarray],
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    reps: int,
    confidence: float,
    seed: int,
    chunk: int = 1000,
) -> dict[str, Any]:
    """Mean, IQM and P(X > Y) with bootstrap confidence intervals (see the module docstring).

    ``scores`` maps a group to its ``(runs, tracks)`` matrix; all have the same tracks, in the same
    order. ``pairs`` (X, Y) default to :func:`demo2rl.report.groups.comparisons` of the groups
    (every demo-guided arm against scratch and the clone); pairs whose groups are missing are
    skipped. Returns ``{"groups": {group:
    {n_runs, n_tracks, mean, mean_ci, iqm, iqm_ci}}, "improvement": {"x_vs_y": {x, y,
    probability, ci}}}``; the same ``seed`` gives the same intervals.
    """
    mats = {g: np.asarray(s, dtype=np.float64) for g, s in scores.items()}
    tracks = {m.shape[1] for m in mats.values()}
    if len(tracks) != 1 or any(m.ndim != 2 or m.shape[0] < 1 for m in mats.values()):
        raise ValueError(f"expected (runs, tracks) matrices on the same tracks: {_shapes(mats)}")
    n_tracks = tracks.pop()
    pairs = comparisons(list(mats)) if pairs is None else pairs
    pairs = [(x, y) for x, y in pairs if x in mats and y in mats]
    rng = np.random.default_rng(seed)
    stats: dict[str, list[np.ndarray]] = {f"{g}.{s}": [] for g in mats for s in ("mean", "iqm")}
    stats |= {comparison_key(x, y): [] for x, y in pairs}
    for start in range(0, reps, chunk):
        b = min(chunk, reps - start)
        cols = rng.integers(n_tracks, size=(b, 1, n_tracks))  # shared by every group
        draws = {}
        for g, m in mats.items():
            rows = rng.integers(len(m), size=(b, len(m), 1))  # whole runs
            draws[g] = m[rows, cols]
            stats[f"{g}.mean"].append(draws[g].mean(axis=(1, 2)))
            stats[f"{g}.iqm"].append(batched_iqm(draws[g]))
        for x, y in pairs:
            stats[comparison_key(x, y)].append(batched_improvement(draws[x], draws[y]))
    tail = 100 * (1 - confidence) / 2

    def interval(key: str) -> list[float]:
        lo, hi = np.percentile(np.concatenate(stats[key]), [tail, 100 - tail])
        return [float(lo), float(hi)]

    groups = {
        g: {
            "n_runs": int(m.shape[0]),
            "n_tracks": int(n_tracks),
            "mean": mean(m),
            "mean_ci": interval(f"{g}.mean"),
            "iqm": iqm(m),
            "iqm_ci": interval(f"{g}.iqm"),
        }
        for g, m in mats.items()
    }
    improvement = {
        comparison_key(x, y): {
            "x": x,
            "y": y,
            "probability": probability_of_improvement(mats[x], mats[y]),
            "ci": interval(comparison_key(x, y)),
        }
        for x, y in pairs
    }
    return {"groups": groups, "improvement": improvement}


def curve_band(
    runs: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    confidence: float,
    seed: int,
    reps: int = CURVE_REPS,
) -> dict[str, np.ndarray]:
    """Mean learning curve over runs and a bootstrap interval of that mean (runs resampled).

    ``runs`` holds each run's (steps, values). Runs are interpolated onto the union of their
    steps, within the range every run covers. Returns ``step``, ``mean``, ``low``, ``high``.
    """
    if not runs:
        raise ValueError("no runs")
    lo = max(float(np.min(s)) for s, _ in runs)
    hi = min(float(np.max(s)) for s, _ in runs)
    grid = np.unique(np.concatenate([np.asarray(s, dtype=np.float64) for s, _ in runs]))
    grid = grid[(grid >= lo) & (grid <= hi)]
    curves = np.stack([np.interp(grid, *_sorted(s, v)) for s, v in runs])  # (runs, steps)
    rng = np.random.default_rng(seed)
    boot = curves[rng.integers(len(curves), size=(reps, len(curves)))].mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(boot, [tail, 100 - tail], axis=0)
    return {"step": grid, "mean": curves.mean(axis=0), "low": low, "high": high}


def steps_to_reach(band: Mapping[str, Sequence[float]], level: float) -> float | None:
    """The first env step at which a learning curve's mean (a :func:`curve_band`) is at or above
    ``level``, or None if it never gets there."""
    for step, value in zip(band["step"], band["mean"], strict=True):
        if value >= level:
            return float(step)
    return None


RunSeconds = Sequence[tuple[np.ndarray, np.ndarray]]
"""Each run of a group: (its evaluation steps, its training seconds at them: :func:`seconds_at`)."""


def seconds_to_reach(
    band: Mapping[str, Sequence[float]], level: float, runs: RunSeconds
) -> float | None:
    """The training seconds an arm takes to reach ``level``: at the first evaluation step where
    its mean curve (``band``) is at or above it (:func:`steps_to_reach`), the mean over its runs
    of each run's seconds at that step (``runs``); None where it never gets there, or no run
    has its seconds."""
    step = steps_to_reach(band, level)
    if step is None or not runs:
        return None
    return float(np.mean([np.interp(step, steps, secs) for steps, secs in runs]))


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, None where either is unknown or the reference is not positive."""
    if value is None or reference is None or reference <= 0:
        return None
    return float(value) / float(reference)


# --------------------------------------------------------------------------------------------
# training time (from the runs' progress tables) and what each arm's budget buys


def cumulative_seconds(seconds: Sequence[float]) -> np.ndarray:
    """A run's seconds since it started, at each row of its progress table, from a column that
    restarts at every resume (:data:`ELAPSED`, :data:`CPU`) in step order (the segments joined,
    :func:`demo2rl.rl.progress.progress_table`).

    Where the column drops, a new segment began: each row adds the last values of the segments
    before it, so the last row holds the sum of the segments' ends. (A segment whose first row
    is not below the previous one's last, a resume killed within its first seconds, is not seen
    as one: those seconds go uncounted. Work a kill lost after the last checkpoint is not in
    the table, so it is not counted either.)
    """
    values = np.asarray(seconds, dtype=np.float64)
    offsets = np.zeros_like(values)
    for end in np.flatnonzero(np.diff(values) < 0):  # the last row of each earlier segment
        offsets[end + 1 :] += values[end]
    return values + offsets


def run_seconds(table: pd.DataFrame, column: str = ELAPSED) -> float | None:
    """A run's training seconds in ``column`` of its progress table (the sum of its segments'
    ends, :func:`cumulative_seconds`); None where the table lacks the column."""
    if column not in table:
        return None
    values = table[column].dropna().to_numpy(dtype=np.float64)
    return float(cumulative_seconds(values)[-1]) if len(values) else None


def seconds_at(
    table: pd.DataFrame, steps: Sequence[float], column: str = ELAPSED
) -> np.ndarray | None:
    """A run's training seconds at each of ``steps`` (env steps, e.g. its evaluation points):
    its cumulative ``column`` (:func:`cumulative_seconds`) interpolated linearly against
    :data:`STEPS`, from 0 s at step 0; steps past its last row get that row's seconds. None
    where the table lacks either column."""
    if column not in table or STEPS not in table:
        return None
    rows = table[[STEPS, column]].dropna()
    if rows.empty:
        return None
    x = rows[STEPS].to_numpy(dtype=np.float64)
    y = cumulative_seconds(rows[column].to_numpy(dtype=np.float64))
    if x[0] > 0:  # no row at step 0: training began there, at 0 s
        x, y = np.concatenate([[0.0], x]), np.concatenate([[0.0], y])
    return np.interp(np.asarray(steps, dtype=np.float64), x, y)


def mean_seconds(progress: Mapping[str, pd.DataFrame], column: str = ELAPSED) -> dict[str, float]:
    """Mean training seconds per run of each RL group, in ``column`` (:func:`run_seconds`).

    ``progress`` maps each run's policy name to its progress table (its ``progress.csv``); a run
    whose table lacks the column is left out (runs trained before :data:`CPU` was recorded have
    none), and a group none of whose runs has it is absent."""
    runs: dict[str, list[float]] = {}
    for name, table in progress.items():
        seconds = run_seconds(table, column)
        if seconds is not None:
            runs.setdefault(policy_group(name), []).append(seconds)
    return {g: float(np.mean(s)) for g, s in runs.items()}


def speedup(scratch_steps: float | None, steps: float | None) -> float | None:
    """How many times sooner than scratch PPO an arm reaches scratch PPO's final return: the
    env steps scratch PPO's curve took (``scratch_steps``) over the arm's (``steps``). None
    where either never gets there, or where the arm is there before training (at step 0)."""
    return ratio(scratch_steps, steps)


def arm_costs(
    bands: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    budgets: Mapping[str, int],
    wall_seconds: Mapping[str, float],
    cpu_seconds: Mapping[str, float],
    expert_level: float | None,
    cpu_runs: Mapping[str, RunSeconds] | None = None,
    compile_seconds: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Per RL arm what its budget buys: what ``summary.json`` holds as ``arms`` and
    ``scratch_final_return``.

    ``bands`` maps each RL group to its learning-curve band (:func:`curve_band`); ``budgets``
    maps an arm's name to its env steps per run (:meth:`demo2rl.arms.Arm.budget`);
    ``wall_seconds`` and ``cpu_seconds`` map a group to its runs' mean training seconds
    (:func:`mean_seconds`); ``expert_level`` is the expert's return on the curves' tracks;
    ``cpu_runs`` maps a group to its runs' CPU seconds at their evaluation steps;
    ``compile_seconds`` a group to its runs' mean CPU seconds of compiling (part of their CPU
    seconds; off-policy arms with a compiled update only). Scratch PPO's
    final return is its mean curve's value at its last step (None without scratch PPO).

    Returns ``{"scratch_final_return": float | None, "arms": {group: {budget,
    steps_to_scratch_final, speedup_vs_scratch, steps_to_expert, wall_seconds, cpu_seconds,
    compile_seconds, cpu_to_scratch_final, cpu_to_expert, cpu_vs_scratch,
    cpu_to_expert_vs_scratch}}}``: the CPU
    seconds to each return (:func:`seconds_to_reach`) and their ratio to scratch PPO's own
    (below 1: the arm is there in less compute). A missing figure is None; ``*_to_*`` are None
    where the curve never gets there.
    """
    scratch_group = arms.get(arms.CONTROL).group
    scratch = bands.get(scratch_group)
    final = float(scratch["mean"][-1]) if scratch is not None and len(scratch["mean"]) else None
    scratch_steps = None if final is None else steps_to_reach(scratch, final)
    cpu_runs = cpu_runs or {}

    def cpu_to(g: str, level: float | None) -> float | None:
        return None if level is None else seconds_to_reach(bands[g], level, cpu_runs.get(g, []))

    reference = {
        "final": cpu_to(scratch_group, final) if scratch is not None else None,
        "expert": cpu_to(scratch_group, expert_level) if scratch is not None else None,
    }
    table = {}
    for g in (g for g in arm_groups() if g in bands):
        steps = None if final is None else steps_to_reach(bands[g], final)
        to_final, to_expert = cpu_to(g, final), cpu_to(g, expert_level)
        table[g] = {
            "budget": budgets.get(group_arm(g) or g),
            "steps_to_scratch_final": steps,
            "speedup_vs_scratch": speedup(scratch_steps, steps),
            "steps_to_expert": None
            if expert_level is None
            else steps_to_reach(bands[g], expert_level),
            "wall_seconds": wall_seconds.get(g),
            "cpu_seconds": cpu_seconds.get(g),
            "compile_seconds": (compile_seconds or {}).get(g),
            "cpu_to_scratch_final": to_final,
            "cpu_to_expert": to_expert,
            "cpu_vs_scratch": ratio(to_final, reference["final"]),
            "cpu_to_expert_vs_scratch": ratio(to_expert, reference["expert"]),
        }
    return {"scratch_final_return": final, "arms": table}


# --------------------------------------------------------------------------------------------
# from evaluation records (the evaluate rule's JSON files) to the summary


def summarize(
    records: Sequence[Mapping[str, Any]],
    *,
    reps: int,
    confidence: float,
    seed: int,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The comparison of evaluated policies: what ``summary.json`` holds.

    ``records`` are evaluation records (``policy`` name and per-episode ``episodes`` arrays, one
    episode per held-out track, the same tracks for all). Per group: runs, mean and IQM of the
    return with intervals, and the means of the other metrics (:data:`METRICS` and the task's,
    ``labels``: name -> label, those that every record has); P(X > Y) for
    :func:`demo2rl.report.groups.comparisons`; per run its mean return and metrics; and the best RL
    run.
    """
    if not records:
        raise ValueError("no evaluation records")
    tracks = [int(s) for s in records[0]["episodes"]["seed"]]
    for rec in records:
        if [int(s) for s in rec["episodes"]["seed"]] != tracks:
            raise ValueError(
                f"{rec['policy']} was evaluated on other tracks than {records[0]['policy']}"
            )
    groups: dict[str, list[Mapping[str, Any]]] = {}
    order = all_groups()
    for rec in sorted(records, key=lambda r: (order.index(policy_group(r["policy"])), _seed(r))):
        groups.setdefault(policy_group(rec["policy"]), []).append(rec)
    labels = METRICS | dict(labels or {})
    names = [m for m in labels if all(m in rec["episodes"] for rec in records)]
    scores = {g: np.stack([_column(r, "return") for r in recs]) for g, recs in groups.items()}
    stats = compare(scores, reps=reps, confidence=confidence, seed=seed)
    for g, recs in groups.items():
        pooled = {m: np.concatenate([_column(r, m) for r in recs]) for m in names}
        stats["groups"][g] |= {
            "label": label(g),
            "policies": [r["policy"] for r in recs],
            "metrics": {m: _nanmean(v) for m, v in pooled.items()},
        }
    runs = [
        {"policy": r["policy"], "group": g, "seed": _seed(r) if group_arm(g) else None}
        | {f"{m}_mean": _nanmean(_column(r, m)) for m in names}
        | {"return_iqm": iqm(_column(r, "return")[None, :])}
        for g, recs in groups.items()
        for r in recs
    ]
    return {
        "tracks": tracks,
        "n_tracks": len(tracks),
        "confidence": confidence,
        "bootstrap_reps": reps,
        "metrics": {m: labels[m] for m in names},
        "groups": {g: stats["groups"][g] for g in groups},
        "probability_of_improvement": stats["improvement"],
        "runs": runs,
        "best_rl": best_rl_run([r for recs in groups.values() for r in recs]),
    }


def dagger_rounds(
    summary: Mapping[str, Any], rounds: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """DAgger's cost and return, round by round: for the plain clone (round 0) and each round's
    clone (``rounds``: their ``metrics.json``, in round order), the expert calls (steps the
    expert labelled: the dataset's for round 0, plus each round's) and the clone's held-out IQM
    return with its interval (``summary``'s groups)."""
    if not rounds:
        return []
    demo_steps = int(rounds[0]["demo_steps"])
    rows = [{"round": 0, "group": BC, "expert_calls": 0, "expert_calls_total": demo_steps}]
    for r, metrics in enumerate(rounds, start=1):
        total = demo_steps + int(metrics["expert_calls_total"])
        rows.append(
            {"round": r, "group": dagger_policy(r), "expert_calls": int(metrics["expert_calls"])}
            | {"expert_calls_total": total}
        )
    for row in rows:
        st = summary["groups"].get(row["group"])
        row |= {"return_iqm": st["iqm"], "return_iqm_ci": st["iqm_ci"]} if st else {}
    return rows


def dataset_reference(
    returns: np.ndarray, *, reps: int, confidence: float, seed: int
) -> dict[str, Any]:
    """The reference row of a task without an expert: the dataset's own episodes' returns (not
    held-out episodes: the policies' tracks are others), their mean and IQM with bootstrap
    intervals over the episodes."""
    stats = compare(
        {"dataset": np.asarray(returns, dtype=np.float64)[None, :]},
        [],
        reps=reps,
        confidence=confidence,
        seed=seed,
    )["groups"]["dataset"]
    return {"label": "demonstrations (the dataset's own episodes, not held-out)"} | stats


def tables(summary: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The summary as flat tables (rows of dicts): ``policies``, ``improvement`` and ``runs``."""
    policies = []
    for g, st in summary["groups"].items():
        row = {"group": g, "label": st["label"], "runs": st["n_runs"], "tracks": st["n_tracks"]}
        row |= {"return_mean": st["mean"], "return_mean_low": st["mean_ci"][0]}
        row |= {"return_mean_high": st["mean_ci"][1], "return_iqm": st["iqm"]}
        row |= {"return_iqm_low": st["iqm_ci"][0], "return_iqm_high": st["iqm_ci"][1]}
        row |= {f"{m}_mean": v for m, v in st["metrics"].items() if m != "return"}
        policies.append(row)
    improvement = [
        {"comparison": key, "x": c["x"], "y": c["y"], "probability": c["probability"]}
        | {"low": c["ci"][0], "high": c["ci"][1]}
        for key, c in summary["probability_of_improvement"].items()
    ]
    return {"policies": policies, "improvement": improvement, "runs": list(summary["runs"])}


def markdown(summary: Mapping[str, Any], plots: Mapping[str, str] | None = None) -> str:
    """``summary.md``: the comparison table, the probabilities of improvement, the method, and
    links to ``plots`` (title -> path relative to the markdown file)."""
    pct = round(100 * summary["confidence"])
    extra = [m for m in summary["metrics"] if m not in ("return", "length")]
    head = ["policy", "runs", "mean return", f"IQM return [{pct}% CI]"]
    head += [summary["metrics"][m] for m in extra]
    lines = [
        "# Held-out evaluation",
        "",
        f"Every policy ran the same {summary['n_tracks']} held-out episodes (for the racing task: "
        "tracks), whose seeds no stage trained on.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for st in summary["groups"].values():
        cells = [st["label"], str(st["n_runs"]), _ci(st["mean"], st["mean_ci"])]
        cells += [_ci(st["iqm"], st["iqm_ci"])]
        cells += [_fmt(st["metrics"].get(m)) for m in extra]
        lines.append("| " + " | ".join(cells) + " |")
    reference = summary.get("reference")
    if reference:
        lines += [
            "",
            f"No expert: the reference is the dataset's own {reference['n_tracks']} episodes, "
            f"**not held-out** (other episodes than the policies'): mean return "
            f"{_ci(reference['mean'], reference['mean_ci'])}, IQM "
            f"{_ci(reference['iqm'], reference['iqm_ci'])}.",
        ]
    lines += _dagger_lines(summary.get("dagger") or [], pct)
    lines += _improvement_lines(summary, pct)
    lines += _arm_cost_lines(summary)
    if summary.get("best_rl"):
        lines += ["", f"Best RL run (highest mean return): `{summary['best_rl']}`."]
    lines += [
        "",
        "IQM: interquartile mean of all run x episode returns (rliable). P(X > Y): in an "
        "episode, the chance that a run of X scores higher than a run of Y (ties count half), "
        f"averaged over the episodes. Intervals: {summary['bootstrap_reps']} stratified "
        "bootstrap replicates resampling whole runs (seeds) within each policy and the "
        "episodes (shared by all policies), percentile method; for the expert and the clone "
        "(one run each) they reflect the episodes only.",
    ]
    for title, path in (plots or {}).items():
        lines += ["", f"![{title}]({path})"]
    return "\n".join(lines) + "\n"


def _dagger_lines(rounds: Sequence[Mapping[str, Any]], pct: int) -> list[str]:
    """The DAgger rounds' table: each round's clone, its expert calls and held-out return."""
    if not rounds:
        return []
    lines = [
        "",
        "DAgger: each round's clone on the held-out episodes, and the expert calls (steps the "
        "expert labelled; round 0 is the plain clone, its calls the dataset's steps):",
        "",
        f"| round | expert calls (round) | expert calls (total) | IQM return [{pct}% CI] |",
        "|---|---|---|---|",
    ]
    for row in rounds:
        iqm_text = _ci(row["return_iqm"], row["return_iqm_ci"]) if "return_iqm" in row else "n/a"
        lines.append(
            f"| {row['round']} | {row['expert_calls']:,} | {row['expert_calls_total']:,} | "
            f"{iqm_text} |"
        )
    return lines


def _improvement_lines(summary: Mapping[str, Any], pct: int) -> list[str]:
    """The probabilities of improvement of ``summary.md``, under the arm X of each: first
    against its own algorithm's control (what the demonstrations add), then against scratch
    PPO, then against the clone."""
    scratch = arms.get(arms.CONTROL).group
    by_x: dict[str, list[tuple[int, str]]] = {}
    for c in summary["probability_of_improvement"].values():
        x, y = c["x"], c["y"]
        arm = arms.REGISTRY.get(group_arm(x) or "")
        own = arms.get(arm.control).group if arm and arm.control else None
        if y == own:
            rank, said = 0, "vs its own control"
            said += ", scratch PPO" if own == scratch else ""
            said += " (what the demonstrations add)"
        elif y == scratch:
            rank, said = 1, "vs scratch PPO"
        else:
            rank, said = 2, f"vs the {label(y)}" if y in (BC, EXPERT) else f"vs {label(y)}"
        p = _ci(c["probability"], c["ci"], digits=2)
        by_x.setdefault(x, []).append((rank, f"{said}: P({label(x)} > {label(y)}) = {p}"))
    if not by_x:
        return []
    order = all_groups()
    lines = ["", f"Probability of improvement, P(X > Y) [{pct}% CI], for each X:", ""]
    for x in sorted(by_x, key=lambda g: order.index(g) if g in order else len(order)):
        arm = arms.REGISTRY.get(group_arm(x) or "")
        role = " (a control: no demonstrations)" if arm and arm.control is None else ""
        lines.append(f"- **{label(x)}**{role}")
        lines += [f"  - {line}" for _, line in sorted(by_x[x], key=lambda e: e[0])]
    return lines


def _arm_cost_lines(summary: Mapping[str, Any]) -> list[str]:
    """The table of ``summary.md`` of each RL arm's budget, how soon it reaches scratch PPO's
    final return and the expert's, and its training time (:func:`arm_costs`)."""
    table = summary.get("arms") or {}
    if not table:
        return []
    final = summary.get("scratch_final_return")
    reach = "scratch PPO's final return" + ("" if final is None else f" ({final:.1f})")
    head = ["RL arm", "env steps per run", f"env steps to {reach}", "x sooner than scratch PPO"]
    head += ["env steps to the expert's return", f"CPU s to {reach} (x scratch PPO's)"]
    head += ["CPU s to the expert's return (x scratch PPO's)"]
    head += ["wall time per run (s)", "CPU time per run (s)", "of it compiling (s)"]
    lines = [
        "",
        "Budget and cost per RL arm:",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for g, a in table.items():
        cells = [label(g), "n/a" if a["budget"] is None else f"{a['budget']:,}"]
        cells += [_steps(a["steps_to_scratch_final"], final is not None)]
        cells += [_speedup(a["speedup_vs_scratch"], a["steps_to_scratch_final"])]
        cells += [_steps(a["steps_to_expert"], "steps_to_expert" in summary)]
        cells += [_cpu_to(a, "scratch_final", "cpu_vs_scratch", final is not None)]
        cells += [_cpu_to(a, "expert", "cpu_to_expert_vs_scratch", "steps_to_expert" in summary)]
        cells += [_seconds(a["wall_seconds"]), _seconds(a["cpu_seconds"])]
        cells += [_seconds(a.get("compile_seconds"))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Env steps to a return: the first evaluation step at which the arm's mean learning curve "
        "(over seeds, on the held-out episodes the curves were evaluated on) is at or above it. "
        "Scratch PPO's final return: its mean curve at its last evaluation. x sooner: the env "
        "steps scratch PPO's curve took to first reach that return, divided by the arm's. CPU s "
        "to a return: the mean over seeds of each run's training CPU seconds at that evaluation "
        "step; x scratch PPO's: over scratch PPO's own CPU seconds to the same return (below "
        "1x: there in less compute). "
        "Off-policy arms have a budget of their own (an off-policy env step costs more), so "
        "compare their time as well as their steps. Time per run: the mean over seeds of the "
        "run's training seconds in its SB3 progress table (the segments of a resumed run added "
        "up; work a kill lost after the last checkpoint not counted), including the evaluations "
        "during training; CPU time is the training process's and its subproc vec env's "
        "workers'. Of it compiling: what a run's process spent compiling the SAC update (the "
        "first job on a machine compiles it from scratch; later ones find torch's cache on disk "
        "and take a few seconds).",
    ]
    return lines


def _steps(step: float | None, known: bool) -> str:
    if not known:
        return "n/a"
    return "not reached" if step is None else f"{step:,.0f}"


def _speedup(ratio: float | None, steps: float | None) -> str:
    if ratio is not None:
        return f"{ratio:.1f}x"
    return "at the start" if steps is not None and steps <= 0 else "n/a"


def _cpu_to(costs: Mapping[str, Any], level: str, ratio_key: str, known: bool) -> str:
    """A cell of the CPU seconds to a return (``level``: ``scratch_final`` or ``expert``) with
    their ratio to scratch PPO's, ``46 (0.81x)``; "at the start" where the arm is there before
    training, "not reached" where the curve never gets there, n/a where the return or the runs'
    CPU seconds are unknown."""
    if not known:
        return "n/a"
    steps = costs.get(f"steps_to_{level}")
    if steps is None:
        return "not reached"
    if steps <= 0:
        return "at the start"
    seconds, times = costs.get(f"cpu_to_{level}"), costs.get(ratio_key)
    if seconds is None:
        return "n/a"
    return f"{seconds:,.0f}" + ("" if times is None else f" ({times:.2f}x)")


def _seconds(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:,.0f}"


# --------------------------------------------------------------------------------------------
# across config variants


SAME_RUNS = {"probability": 0.5, "ci": [0.5, 0.5], "same_runs": True}
"""P(variant > base) of a group whose runs are the base's own (identical scores): no difference,
exactly, rather than the noise of resampling one set of runs twice."""


def compare_variants(
    scores: Mapping[str, Mapping[str, np.ndarray]],
    *,
    reps: int,
    confidence: float,
    seed: int,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Mean and IQM of every group of every variant, and P(variant > base) per group, with
    intervals from one bootstrap (:func:`compare`).

    ``scores`` maps a variant (the base first) to its groups' ``(runs, tracks)`` matrices, all on
    the same tracks in the same order. A group whose matrix equals the base's is the base's own
    runs (a variant that changes nothing they read shares them): it takes the base's estimates
    and :data:`SAME_RUNS`. Returns ``{variant: {group: {n_runs, n_tracks, mean, mean_ci, iqm,
    iqm_ci, vs_base}}}``; ``vs_base`` is ``{probability, ci, same_runs}``, or None for the base
    and for a group the base does not have.
    """
    if not scores:
        raise ValueError("no variants")
    base = next(iter(scores))
    mats = {
        v: {g: np.asarray(m, dtype=np.float64) for g, m in gs.items()} for v, gs in scores.items()
    }
    shared = {
        (v, g)
        for v, gs in mats.items()
        if v != base
        for g, m in gs.items()
        if g in mats[base] and np.array_equal(m, mats[base][g])
    }
    keyed = {
        _variant_key(v, g): m
        for v, gs in mats.items()
        for g, m in gs.items()
        if (v, g) not in shared
    }
    pairs = [
        (_variant_key(v, g), _variant_key(base, g))
        for v, gs in mats.items()
        if v != base
        for g in gs
        if g in mats[base] and (v, g) not in shared
    ]
    stats = compare(keyed, pairs, reps=reps, confidence=confidence, seed=seed)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for v, gs in mats.items():
        out[v] = {}
        for g in gs:
            if (v, g) in shared:
                out[v][g] = stats["groups"][_variant_key(base, g)] | {"vs_base": dict(SAME_RUNS)}
                continue
            vs_base = None
            if v != base and g in mats[base]:
                c = stats["improvement"][comparison_key(_variant_key(v, g), _variant_key(base, g))]
                vs_base = {"probability": c["probability"], "ci": c["ci"], "same_runs": False}
            out[v][g] = stats["groups"][_variant_key(v, g)] | {"vs_base": vs_base}
    return out


def best_variants(compared: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The variant with the highest IQM per RL arm, and the (variant, arm) with the highest IQM
    among all RL arms, from :func:`compare_variants`; a tie goes to the earlier variant (the base
    first), then to the earlier arm. Returns ``{"per_arm": [{group, variant, iqm}], "overall":
    {group, variant, iqm, vs_base} or None}`` (None without RL arms)."""
    per_arm = []
    for g in arm_groups():
        entries = [(v, gs[g]["iqm"]) for v, gs in compared.items() if g in gs]
        if entries:
            v, value = max(entries, key=lambda e: e[1])  # max keeps the first of equal ones
            per_arm.append({"group": g, "variant": v, "iqm": value})
    if not per_arm:
        return {"per_arm": [], "overall": None}
    top = max(per_arm, key=lambda e: e["iqm"])
    return {
        "per_arm": per_arm,
        "overall": top | {"vs_base": compared[top["variant"]][top["group"]]["vs_base"]},
    }


def variants_markdown(result: Mapping[str, Any], figure: str | None = None) -> str:
    """``variants.md`` from what ``variants.json`` holds: each variant's overrides, the best
    variant, one table per group with the variants as rows, the method, and a link to ``figure``
    (a path relative to the markdown file)."""
    pct = round(100 * result["confidence"])
    base = result["base"]
    labels = {g["group"]: g["label"] for g in result["groups"]}
    lines = [
        "# Config variants compared",
        "",
        f"Every variant ran the same {result['n_tracks']} held-out episodes (for the racing task: "
        f"tracks). `{base}` is the config as given; each other variant overrides it as listed.",
        "",
        "## Variants",
        "",
    ]
    for v in result["variants"]:
        said = ", ".join(f"`{k} = {_value(x)}`" for k, x in _dotted(v["overrides"]).items())
        lines.append(f"- `{v['name']}`: {said or 'no overrides'}")
    lines += ["", "## Best variant", ""]
    overall = result["best"]["overall"]
    if overall is None:
        lines.append("No RL arm ran: nothing to pick.")
    else:
        lines.append(
            f"- **Overall** (highest IQM of all RL arms): `{overall['variant']}`, "
            f"{labels[overall['group']]}: IQM "
            + _ci(overall["iqm"], _row(result, overall["variant"], overall["group"])["iqm_ci"])
            + _versus(overall["variant"], base, overall["vs_base"])
            + f". {_verdict(overall, base)}"
        )
        for e in result["best"]["per_arm"]:
            row = _row(result, e["variant"], e["group"])
            lines.append(
                f"- {labels[e['group']]}: `{e['variant']}`, IQM {_ci(row['iqm'], row['iqm_ci'])}"
                + _versus(e["variant"], base, row["vs_base"])
            )
        lines += [
            "",
            "The highest IQM names a variant even when it leads by a hair: where the IQM "
            "intervals overlap, or the interval of P(best > base) includes 0.5, there is no clear "
            "winner.",
        ]
    lines += ["", "## Returns per policy"]
    best_of = {e["group"]: e["variant"] for e in result["best"]["per_arm"]}
    for g in labels:
        rl = group_arm(g) is not None
        head = ["variant", "runs", f"IQM return [{pct}% CI]", "mean return"]
        head += [f"P(variant > {base}) [{pct}% CI]"]
        head += ["env steps to the expert's return", "wall time per run (s)"] if rl else []
        lines += [
            "",
            f"### {labels[g]}",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for row in (r for r in result["rows"] if r["group"] == g):
            name = f"`{row['variant']}`"
            cells = [f"**{name}**" if best_of.get(g) == row["variant"] else name]
            cells += [str(row["n_runs"]), _ci(row["iqm"], row["iqm_ci"]), f"{row['mean']:.1f}"]
            cells += [_probability(row, base)]
            if rl:
                step, wall = row["steps_to_expert"], row["wall_seconds"]
                cells += ["not reached" if step is None else f"{step:,.0f}"]
                cells += ["n/a" if wall is None else f"{wall:,.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Method",
        "",
        "IQM: the interquartile mean of all run x episode returns of a variant's policy group "
        f"(rliable), with {pct}% percentile intervals from {result['bootstrap_reps']} stratified "
        "bootstrap replicates that resample whole runs (seeds) within each variant's group and "
        "the episodes, drawn alike for every variant. "
        f"P(variant > {base}): in an episode, the chance that a run of the variant scores higher "
        f"than a run of `{base}` in the same group (ties count half), averaged over the episodes; "
        "0.5 means no difference, and it is exactly 0.5 where a group scores exactly as the base's "
        "(same scores: as a rule, the base's own runs, which a variant that changes nothing they "
        "read shares). Env steps to the expert's return "
        "come from each variant's summary; wall time is the mean over seeds of a run's training "
        "time in its SB3 progress table.",
    ]
    if figure:
        lines += ["", f"![IQM return per policy group and variant]({figure})"]
    return "\n".join(lines) + "\n"


def _row(result: Mapping[str, Any], variant: str, group: str) -> Mapping[str, Any]:
    return next(r for r in result["rows"] if r["variant"] == variant and r["group"] == group)


def _versus(variant: str, base: str, vs_base: Mapping[str, Any] | None) -> str:
    """``, P(variant > base) = ...`` for the best-variant lines (nothing for the base itself)."""
    if vs_base is None:
        return "" if variant == base else f" (`{base}` did not run this arm)"
    if vs_base["same_runs"]:
        return f", the same scores as `{base}`"
    return f", P(`{variant}` > `{base}`) = {_ci(vs_base['probability'], vs_base['ci'], 2)}"


def _verdict(best: Mapping[str, Any], base: str) -> str:
    """Whether the best (variant, arm) is clearly better than the base's runs of that arm."""
    vs_base = best["vs_base"]
    if best["variant"] == base or (vs_base is not None and vs_base["same_runs"]):
        return f"That is `{base}`'s own result: no variant improves on it."
    if vs_base is None:
        return "Nothing to compare it with."
    low, high = vs_base["ci"]
    if low > 0.5:
        return f"The interval lies above 0.5: better than `{base}` on these held-out episodes."
    if high < 0.5:
        return f"The interval lies below 0.5: a higher IQM, yet no win over `{base}`."
    return f"The interval includes 0.5: no clear winner over `{base}`."


def _probability(row: Mapping[str, Any], base: str) -> str:
    """The P(variant > base) cell of a variants table."""
    vs_base = row["vs_base"]
    if row["variant"] == base:
        return ""
    if vs_base is None:
        return f"n/a (not in `{base}`)"
    if vs_base["same_runs"]:
        return "0.50 (same scores)"
    return _ci(vs_base["probability"], vs_base["ci"], digits=2)


def _dotted(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested overrides as dotted keys (``{"rl": {"seeds": [0]}}`` -> ``{"rl.seeds": [0]}``); an
    empty mapping stays a value, as declared."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, Mapping) and value:
            flat |= _dotted(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _value(value: Any) -> str:
    """An override's value as written in YAML flow style: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _variant_key(variant: str, group: str) -> str:
    """A variant's group as one group of :func:`compare` (a variant is a results directory's
    name, so it holds no slash)."""
    return f"{variant}/{group}"


def _ci(value: float, ci: Sequence[float], digits: int = 1) -> str:
    return f"{value:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


def level(record: Mapping[str, Any], n_tracks: int) -> float:
    """Mean return of an evaluation record on its first ``n_tracks`` tracks (those the RL runs'
    learning curves were evaluated on)."""
    return float(np.mean(_column(record, "return")[:n_tracks]))


def _column(record: Mapping[str, Any], key: str) -> np.ndarray:
    """A per-episode array of a record (JSON null -> NaN)."""
    values = record["episodes"][key]
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _nanmean(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else None


def _seed(record: Mapping[str, Any]) -> int:
    run = RLRun.parse(record["policy"])
    return run.seed if run else -1


def _sorted(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(np.asarray(steps, dtype=np.float64), kind="stable")
    return np.asarray(steps, dtype=np.float64)[order], np.asarray(values, dtype=np.float64)[order]


def _shapes(mats: Mapping[str, np.ndarray]) -> str:
    return ", ".join(f"{g} {m.shape}" for g, m in mats.items())
