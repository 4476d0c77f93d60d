"""Stages evaluate and summarize: the held-out comparison, its tables and figures."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from demo2rl import evaluation, io, plots, policy, provenance, summary, tasks, tracking
from demo2rl.envs import racing
from demo2rl.tracking import Run

log = logging.getLogger(__name__)

COLORS = {
    "expert": "black",
    "bc": "tab:orange",
    "rl_bc": "tab:blue",
    "rl_scratch": "tab:green",
}
GIF_FRAME_EVERY = 2
"""Render every second step of the best lap (5 frames per simulated second, played in real
time)."""


def evaluate_policy(
    *,
    name: str,
    checkpoint: str | None,
    out: str,
    task: Mapping[str, Any],
    policy_cfg: Mapping[str, Any] | None,
    eval_cfg: Mapping[str, Any],
    seed: int,
    run: Run,
) -> dict[str, Any]:
    """Evaluate one policy (``expert``, ``bc`` or ``rl-<init>-seed<s>``) on the held-out tracks.

    Writes the evaluation record (per-episode metrics, the raw info values, the first episode's
    actions for replays) to ``out`` and logs its means on the job's run, tagged with the policy.
    """
    torch.set_num_threads(1)  # small MLPs, batch of a few envs: one thread is fastest
    group = summary.policy_group(name)
    env_id, env_kwargs = task["env_id"], task["env_kwargs"]
    obs_space, act_space = tasks.spaces(env_id, env_kwargs)
    source: dict[str, Any]
    if name == "expert":
        actor = tasks.load_expert(task["expert"]["entry_point"], task["expert"]["kwargs"])
        source = {"expert": dict(task["expert"])}
    else:
        if checkpoint is None or policy_cfg is None:
            raise ValueError(f"policy {name!r} needs a checkpoint and the policy config")
        net, normalizer, ckpt = policy.load_checkpoint(checkpoint, obs_space, act_space, policy_cfg)
        actor = policy.make_actor(net, normalizer, act_space)
        meta = ckpt.get("meta", {})
        source = {
            "checkpoint": str(checkpoint),
            "dataset_hash": meta.get("dataset_hash"),
            "timesteps": meta.get("timesteps"),
        }
    track_seeds = evaluation.heldout_seeds(seed, eval_cfg["episodes"])
    start = time.perf_counter()
    result = evaluation.final_evaluation(
        env_id, env_kwargs, actor, track_seeds, n_envs=eval_cfg["n_envs"]
    )
    seconds = time.perf_counter() - start
    means = evaluation.summary(result.episodes)
    record = {
        "policy": name,
        "group": group,
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs),
        "base_seed": seed,
        "source": source,
        "summary": means,
        "episodes": {k: _jsonable(v) for k, v in result.episodes.items()},
        "info": {k: _jsonable(v) for k, v in result.info.items()},
        "first_episode": {
            "seed": int(track_seeds[0]),
            "actions": _jsonable(result.first_actions),
        },
        "seconds": seconds,
        "versions": provenance.versions(),
        "code_revision": provenance.code_revision(),
    }
    io.write_json(out, _strict(record))
    run.set_tags({"demo2rl.policy": name, "demo2rl.policy_group": group})
    if "checkpoint" in source:
        run.set_tags({"demo2rl.checkpoint": str(Path(checkpoint).resolve())})
    finite = {f"eval.{k}": v for k, v in means.items() if math.isfinite(v)}
    run.log_metrics(finite | {"eval.episodes": len(track_seeds), "eval.seconds": seconds})
    log.info(
        "%s: return %.2f +- %.2f over %d held-out episodes in %.1f s",
        name,
        means["return_mean"],
        means["return_std"],
        len(track_seeds),
        seconds,
    )
    return record


def summarize(
    *,
    evaluations: Sequence[str],
    curves: Sequence[str],
    summary_json: str,
    summary_md: str,
    tables: Mapping[str, str],
    curves_png: str,
    returns_png: str,
    cfg: Mapping[str, Any],
    seed: int,
    curve_tracks: int,
    run: Run,
    track_png: str | None = None,
    lap_gif: str | None = None,
) -> dict[str, Any]:
    """Aggregate the evaluation records, write the summary, its tables and plots, and log them.

    ``curves`` are the RL runs' ``evaluations.csv`` files (learning curves, evaluated on the first
    ``curve_tracks`` held-out tracks); ``tables`` maps ``policies``, ``improvement``, ``runs`` and
    ``episodes`` to CSV paths. For Racing-v0, ``track_png`` and ``lap_gif`` ask for
    :func:`racing_figures`. Metrics and files go to the workflow's parent run as well, so the
    MLflow UI compares whole invocations.
    """
    records = [json.loads(Path(p).read_text()) for p in evaluations]
    result = summary.summarize(
        records, reps=cfg["bootstrap_reps"], confidence=cfg["confidence"], seed=seed
    )
    for name, rows in summary.tables(result).items():
        _write_csv(tables[name], rows)
    _write_csv(tables["episodes"], _episode_rows(records))

    by_group = {
        g: [r for r in records if summary.policy_group(r["policy"]) == g] for g in result["groups"]
    }
    levels = {
        summary.LABELS[g]: summary.level(recs[0], curve_tracks)
        for g, recs in by_group.items()
        if g in ("expert", "bc")
    }
    bands = _curve_bands(curves, cfg["confidence"], seed)
    colors = {summary.LABELS[g]: c for g, c in COLORS.items()}
    plots.learning_curves(
        {summary.LABELS[g]: band for g, band in bands.items()},
        levels,
        curves_png,
        colors=colors,
        confidence=cfg["confidence"],
    )
    estimates = {
        st["label"]: st | {"runs": [r["return_mean"] for r in result["runs"] if r["group"] == g]}
        for g, st in result["groups"].items()
    }
    improvement = {
        f"{summary.LABELS[c['x']]} > {summary.LABELS[c['y']]}": c
        | {"x_label": summary.LABELS[c["x"]]}
        for c in result["probability_of_improvement"].values()
    }
    plots.final_returns(
        estimates, improvement, returns_png, colors=colors, confidence=cfg["confidence"]
    )
    result["learning_curves"] = {g: {k: v.tolist() for k, v in b.items()} for g, b in bands.items()}
    result["versions"] = provenance.versions()
    result["code_revision"] = provenance.code_revision()
    io.write_json(summary_json, _strict(result))
    md_dir = Path(summary_md).parent
    links = {
        "Learning curves": os.path.relpath(curves_png, md_dir),
        "Final returns": os.path.relpath(returns_png, md_dir),
    }
    with io.atomic_path(summary_md) as tmp:
        tmp.write_text(summary.markdown(result, links))

    files = [summary_json, summary_md, *tables.values(), curves_png, returns_png]
    if track_png and lap_gif:
        racing_figures(result, records, track_png, lap_gif)
        files += [track_png, lap_gif]
    metrics = summary_metrics(result)
    run.log_metrics(metrics)
    _log_to_parent(metrics, files, {"demo2rl.best_rl": result["best_rl"] or "none"}, run)
    log.info("summary:\n%s", summary.markdown(result))
    return result


def racing_figures(
    result: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    track_png: str,
    lap_gif: str,
) -> None:
    """Racing-v0 figures: the first held-out track with the lines the expert, the clone and the
    best RL run drove (coloured by speed), and an animation of the best run's first lap."""
    by_name = {r["policy"]: r for r in records}
    shown = [p for p in ("expert", "bc", result["best_rl"]) if p in by_name]
    animated = result["best_rl"] or shown[-1]  # without RL runs: the clone
    drives = {p: _replay(by_name[p], frames=p == animated) for p in shown}
    track = drives[shown[0]].track
    label = {p: _policy_label(p) for p in drives}
    plots.track_lines(
        track.centreline,
        track.half_width,
        {label[p]: {"x": d.x, "y": d.y, "speed": d.speed} for p, d in drives.items()},
        track_png,
        notes={label[p]: _drive_note(d) for p, d in drives.items()},
    )
    lap = drives[animated]
    captions = [
        f"{label[animated]}   t {t * racing.DT:4.1f} s   {lap.speed[t]:4.1f} m/s"
        for t in lap.frame_steps
    ]
    plots.animation(lap.frames, lap_gif, fps=1.0 / (racing.DT * GIF_FRAME_EVERY), captions=captions)


def _replay(record: Mapping[str, Any], frames: bool) -> evaluation.Drive:
    """Drive an evaluation record's first episode again; check it is the evaluated one."""
    episode = record["first_episode"]
    drive = evaluation.replay_racing(
        record["env_kwargs"],
        episode["seed"],
        np.asarray(episode["actions"], dtype=np.float32),
        frame_every=GIF_FRAME_EVERY if frames else 0,
    )
    recorded = record["episodes"]["return"][0]
    if not math.isclose(drive.episode_return, recorded, rel_tol=1e-12, abs_tol=1e-9):
        raise RuntimeError(
            f"replaying {record['policy']} gave return {drive.episode_return}, the evaluation "
            f"{recorded}: the task is not deterministic, so its drawn line would be wrong"
        )
    return drive


def summary_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics of a summary: ``<group>.return_iqm`` (and ``_low``/``_high``),
    ``<group>.return_mean``, ``<group>.<metric>``, ``p_improvement.<x>_vs_<y>`` (and bounds)."""
    out: dict[str, float] = {}
    for g, st in result["groups"].items():
        out[f"{g}.return_mean"] = st["mean"]
        out[f"{g}.return_iqm"] = st["iqm"]
        out[f"{g}.return_iqm_low"], out[f"{g}.return_iqm_high"] = st["iqm_ci"]
        out |= {f"{g}.{m}": v for m, v in st["metrics"].items() if m != "return"}
    for key, c in result["probability_of_improvement"].items():
        out[f"p_improvement.{key}"] = c["probability"]
        out[f"p_improvement.{key}_low"], out[f"p_improvement.{key}_high"] = c["ci"]
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def _log_to_parent(
    metrics: Mapping[str, float], files: Sequence[str], tags: Mapping[str, str], run: Run
) -> None:
    """Metrics, tags and files on the workflow's parent run (the job's own run without one)."""
    with tracking.parent_run(run) as parent:
        target = parent or run
        target.log_metrics({f"summary.{k}": v for k, v in metrics.items()})
        target.set_tags(tags)
        for path in files:
            target.log_artifact(path, "summary")


def _curve_bands(curves: Sequence[str], confidence: float, seed: int) -> dict[str, Any]:
    """The learning-curve band of each RL arm from its runs' evaluations.csv files."""
    runs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for path in curves:
        table = pd.read_csv(path)
        group = f"rl_{Path(path).parent.parent.name}"  # rl/<init>/seed-<s>/evaluations.csv
        runs.setdefault(group, []).append(
            (table["step"].to_numpy(), table["return_mean"].to_numpy())
        )
    return {
        g: summary.curve_band(runs[g], confidence=confidence, seed=seed)
        for g in summary.GROUPS
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


def _policy_label(name: str) -> str:
    group = summary.policy_group(name)
    if group.startswith("rl_"):
        return f"best RL run: {summary.LABELS[group]}, seed {name.rpartition('seed')[2]}"
    return summary.LABELS[group]


def _drive_note(drive: evaluation.Drive) -> str:
    lap = f"lap {drive.lap_time:.1f} s" if math.isfinite(drive.lap_time) else "no full lap"
    return f"{lap}, return {drive.episode_return:.1f}"


def _jsonable(values: np.ndarray) -> list[Any]:
    """An array as nested lists of Python numbers."""
    return np.asarray(values).tolist()


def _strict(obj: Any) -> Any:
    """Replace NaN and infinities by None (null): strict JSON that any reader accepts."""
    if isinstance(obj, Mapping):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
