"""Diagnosis of the demo-guided arms: PPO runs of variants of an arm, several seeds each.

Not a speed benchmark: it measures what a setting does to learning (why the warm start climbs
slowly, which arm settings work). Each variant is an arm plus overrides of the rl
config; every run uses the dataset and clone of a finished workflow run (``--results``), the
same budget, and is evaluated like the workflow's runs (``evaluate.during_training`` episodes
during training, ``evaluate.episodes`` at the end), but on **tuning** tracks
(:func:`demo2rl.learning.evaluation.tuning_seeds`, a seed block of their own): settings are chosen
here, so the held-out tracks, on which the workflow reports, stay unseen by the choice. ``--episodes
heldout`` evaluates on the held-out tracks instead, as the workflow does (a
variant without overrides then reuses the workflow's own run of that arm and seed).

    python benchmarks/arms.py --results results/racing --variants bc:log_std=-1.0 ...
    python benchmarks/arms.py --variants rlpd:sac.ent_coef=auto_0.1 rlpd ...

A variant is ``arm`` or ``arm:key=value,key=value`` with keys of ``rl`` (dotted for nested
ones, e.g. ``warm_start.log_std=-0.5`` or ``ppo.learning_rate=1e-4``). Writes
results/bench/arms-<name>.json (per run: the curve with the run's training CPU seconds at each
evaluation, the final returns per track, the final log-std) and prints a table with IQM [95% CI]
over seeds and tracks, P(variant > its arm's control), and the cost to the first ``scratch``
variant's final return (its mean curve's last point) in env steps and in training CPU seconds,
each with its ratio to that scratch's own (the summary's definitions:
:func:`demo2rl.report.summary.arm_costs`); and results/bench/arms-<name>-costs.png, a point per
variant at those two costs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import multiprocessing
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import yaml

from demo2rl import arms, names, provenance, rl
from demo2rl import config as config_lib
from demo2rl.demos.dataset import read_attrs
from demo2rl.io import write_json
from demo2rl.learning import acting, evaluation
from demo2rl.report import plots, summary
from demo2rl.specs.train_rl import RLJob

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BENCH_DIR, machine


def parse_variant(text: str) -> tuple[str, str, dict[str, Any]]:
    arm, _, overrides = text.partition(":")
    values = {}
    for item in filter(None, re.split(r",(?![^\[]*\])", overrides)):  # not inside [..]
        key, _, value = item.partition("=")
        values[key] = yaml.safe_load(value)
    return text, arm, values


EPISODES = {"tuning": evaluation.tuning_seeds, "heldout": evaluation.heldout_seeds}
"""Which tracks the variants are evaluated on (``--episodes``)."""

CACHE = BENCH_DIR / "arms"
"""One JSON per finished run, reused while the config, the inputs and the RL code are the same."""


def run_one(
    args: tuple[str, str, dict[str, Any], int, dict[str, Any], str, str],
) -> dict[str, Any]:
    name, arm, overrides, run_seed, config, results, episodes = args

    inputs = {
        "variant": name,
        "seed": run_seed,
        "episodes": episodes,
        "config": config,
        "demos": read_attrs(f"{results}/{names.DEMOS}")["content_hash"],
        "bc": hashlib.sha256(Path(f"{results}/{names.CLONE}").read_bytes()).hexdigest(),
        "code": provenance.code_fingerprint(
            "demo2rl.stages.train_rl", "demo2rl.learning.evaluation"
        ),
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    cached = CACHE / f"{digest}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    out = None
    if not overrides and episodes == "heldout":
        out = _from_workflow(name, arm, run_seed, config, results)
    if out is None:
        out = _train_and_evaluate(name, arm, overrides, run_seed, config, results, episodes)

    write_json(cached, out)
    return out


def _from_workflow(
    name: str, arm: str, run_seed: int, config: dict[str, Any], results: str
) -> dict[str, Any] | None:
    """A variant without overrides is the workflow's own run of that arm and seed: its outputs
    (the same code and seeds give the same numbers) if they are there and of this rl config."""

    rl_run = names.RLRun(arm, run_seed)
    run = Path(rl_run.dir(results))
    record = Path(results) / "eval" / f"{rl_run.name}.json"
    if not (run / "policy.pt").is_file() or not record.is_file():
        return None
    ckpt = torch.load(run / "policy.pt", weights_only=True)
    wanted = arms.get(arm).rl_slice(config["rl"])  # what the workflow gave the run
    if ckpt["meta"]["config"]["rl"] != config_lib.RLConfig.of(wanted).to_dict():
        return None

    curve = _with_cpu(
        pd.read_csv(run / "evaluations.csv").to_dict("records"), pd.read_csv(run / "progress.csv")
    )
    episodes = json.loads(record.read_text())["episodes"]
    log_std = ckpt["state_dict"].get("log_std")
    return {
        "variant": name,
        "seed": run_seed,
        "curve": curve,
        "final_returns": [float(r) for r in episodes["return"]],
        "final_log_std": None if log_std is None else float(log_std.mean()),
        "source": str(run),
    }


def _train_and_evaluate(
    name: str,
    arm: str,
    overrides: dict[str, Any],
    run_seed: int,
    config: dict[str, Any],
    results: str,
    episodes: str,
) -> dict[str, Any]:
    rl_cfg = copy.deepcopy(arms.get(arm).rl_slice(config["rl"]))
    for dotted, value in overrides.items():
        node = rl_cfg
        *path, last = dotted.split(".")
        for part in path:
            node = node.get(part, {})
        if last not in node:
            raise KeyError(f"{name}: the {arm} arm reads no rl key {dotted!r}")
        node[last] = value
    task = config_lib.TaskConfig.of(
        {k: config["task"][k] for k in ("env_id", "env_kwargs", "frame_stack")}
    )
    evaluate = config_lib.EvaluateConfig.of(config["evaluate"])
    seeds = EPISODES[episodes]
    with tempfile.TemporaryDirectory() as state_dir:
        spec = RLJob(
            arm=arm,
            run_seed=run_seed,
            seed=config["seed"],
            task=task,
            policy=config_lib.PolicyConfig.of(config["policy"]),
            rl=config_lib.RLConfig.of(rl_cfg),
            clip_obs=config["bc"]["clip_obs"],
            eval_episodes=evaluate.during_training,
            demos=f"{results}/{names.DEMOS}",
            clone=f"{results}/{names.CLONE}" if arms.get(arm).uses_clone(rl_cfg) else None,
            state_dir=state_dir,
            threads=1,
            eval_envs=evaluate.n_envs,
            checkpoint_every=config["rl"]["checkpoint_every"],
        )
        result = rl.train_rl(
            spec,
            key=rl.run_key({"variant": name, "seed": run_seed}),
            eval_seeds=seeds(config["seed"], evaluate.during_training),
        )
        curve = _with_cpu(result.evaluations, rl.progress_table(state_dir))
    actor = acting.make_actor(result.model.policy, result.normalizer, result.action_space)
    final = evaluation.evaluate(
        task, actor, seeds(config["seed"], evaluate.episodes), n_envs=evaluate.n_envs
    )
    log_std = getattr(result.model.policy, "log_std", None)
    return {
        "variant": name,
        "seed": run_seed,
        "curve": curve,
        "final_returns": [float(r) for r in final.episodes["return"]],
        "final_log_std": (
            None if log_std is None else float(torch.as_tensor(log_std).mean().item())
        ),
    }


def _with_cpu(curve: list[dict[str, Any]], progress: pd.DataFrame) -> list[dict[str, Any]]:
    """The curve's points, each with the run's training CPU seconds at its step (``cpu_s``:
    :func:`demo2rl.report.summary.seconds_at` of the progress table)."""
    seconds = summary.seconds_at(progress, [p["step"] for p in curve], summary.CPU)
    if seconds is None:
        return curve
    return [p | {"cpu_s": float(c)} for p, c in zip(curve, seconds, strict=True)]


def costs(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, dict[str, Any]]:
    """Per variant, what reaching the first scratch variant's final return cost: env steps and
    CPU seconds (its mean curve over seeds, :func:`demo2rl.report.summary.steps_to_reach` and
    :func:`demo2rl.report.summary.seconds_to_reach`) and their ratios to that scratch's own; the
    same to ``level`` (the expert's return on the curve tracks) where given. Empty without a scratch
    variant."""
    scratch = next((v for v in variants if v.partition(":")[0] == arms.CONTROL), None)
    if scratch is None:
        return {}

    def band_and_cpu(name: str) -> tuple[dict[str, np.ndarray], list[Any]]:
        curves, cpu = _curves(runs, name)
        band = summary.curve_band(curves, confidence=0.95, seed=0)
        return band, [(steps, seconds) for steps, seconds, _ in cpu]

    ref_band, ref_cpu = band_and_cpu(scratch)
    target = float(ref_band["mean"][-1])
    ref_steps = summary.steps_to_reach(ref_band, target)
    ref_seconds = summary.seconds_to_reach(ref_band, target, ref_cpu)
    out = {}
    for name in variants:
        band, cpu = band_and_cpu(name)
        steps = summary.steps_to_reach(band, target)
        seconds = summary.seconds_to_reach(band, target, cpu)
        out[name] = {
            "target": target,
            "steps_to_target": steps,
            "cpu_to_target": seconds,
            "steps_vs_scratch": summary.ratio(steps, ref_steps),
            "cpu_vs_scratch": summary.ratio(seconds, ref_seconds),
            "cpu_per_run": float(np.mean([c[-1] for _, c in cpu])) if cpu else None,
        }
    return out


def _curves(runs: list[dict[str, Any]], name: str) -> tuple[list[Any], list[Any]]:
    """A variant's runs as learning curves: (steps, returns) of each, and (steps, CPU seconds,
    returns) of each run that recorded its CPU seconds."""
    mine = [r["curve"] for r in runs if r["variant"] == name]

    def column(curve: list[dict[str, Any]], key: str) -> np.ndarray:
        return np.array([p[key] for p in curve], dtype=np.float64)

    curves = [(column(c, "step"), column(c, "return_mean")) for c in mine]
    cpu = [
        (column(c, "step"), column(c, "cpu_s"), column(c, "return_mean"))
        for c in mine
        if all("cpu_s" in p for p in c)
    ]
    return curves, cpu


def control_of(variant: str, variants: list[str]) -> str | None:
    """The first variant of ``variant``'s control arm (scratch for a PPO arm, sac for rlpd), if
    the set has one (a control's own variants are compared with nothing)."""
    control = arms.get(variant.partition(":")[0]).control
    return next((v for v in variants if v.partition(":")[0] == control), None)


def table(runs: list[dict[str, Any]], variants: list[str]) -> list[dict[str, Any]]:
    """One row per variant: IQM, P(variant > its arm's control), start, lowest and final
    points."""
    scores = {
        n: np.array([r["final_returns"] for r in runs if r["variant"] == n]) for n in variants
    }
    controls = {n: control_of(n, variants) for n in variants}
    pairs = [(n, c) for n, c in controls.items() if c is not None]
    stats = summary.compare(scores, pairs, reps=20_000, confidence=0.95, seed=0)
    rows = []
    for n in variants:
        mine = [r for r in runs if r["variant"] == n]
        curve_min = min(min(p["return_mean"] for p in r["curve"]) for r in mine)
        start = float(np.mean([r["curve"][0]["return_mean"] for r in mine]))
        g = stats["groups"][n]
        imp = stats["improvement"].get(summary.comparison_key(n, str(controls[n])))
        log_stds = [r["final_log_std"] for r in mine if r["final_log_std"] is not None]
        rows.append(
            {
                "variant": n,
                "seeds": len(mine),
                "iqm": g["iqm"],
                "iqm_ci": g["iqm_ci"],
                "control": controls[n],
                "p_vs_control": None if imp is None else imp["probability"],
                "start": start,
                "lowest": curve_min,
                "final_log_std": float(np.mean(log_stds)) if log_stds else math.nan,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results/racing")
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--name", default="diagnosis")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variants", nargs="+", required=True)
    parser.add_argument("--episodes", choices=sorted(EPISODES), default="tuning")
    args = parser.parse_args()
    config = config_lib.load(args.config)
    variants = [parse_variant(v) for v in args.variants]
    jobs = [
        (n, i, o, s, config, args.results, args.episodes)
        for n, i, o in variants
        for s in args.seeds
    ]
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        runs = []
        for run in pool.map(run_one, jobs):
            runs.append(run)
            print(
                f"{run['variant']} seed {run['seed']}: final {np.mean(run['final_returns']):.2f}",
                flush=True,
            )
    rows = table(runs, [n for n, _, _ in variants])
    cost = costs(runs, [n for n, _, _ in variants])
    for r in rows:
        r |= cost.get(r["variant"], {})
    target = next(iter(cost.values()))["target"] if cost else None
    print(
        "| variant | seeds | IQM [95% CI] | P(> control) | at step 0 | lowest | log-std "
        "| env steps to scratch's final (x scratch's) | CPU s to it (x scratch's) "
        "| CPU s per run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p = "" if r["p_vs_control"] is None else f"{r['p_vs_control']:.2f} ({r['control']})"
        print(
            f"| {r['variant']} | {r['seeds']} | {r['iqm']:.1f} "
            f"[{r['iqm_ci'][0]:.1f}, {r['iqm_ci'][1]:.1f}] | {p} | {r['start']:.1f} "
            f"| {r['lowest']:.1f} | {r['final_log_std']:.2f} "
            f"| {_cost(r.get('steps_to_target'), r.get('steps_vs_scratch'), ',.0f')} "
            f"| {_cost(r.get('cpu_to_target'), r.get('cpu_vs_scratch'), ',.1f')} "
            f"| {_cost(r.get('cpu_per_run'), None, ',.0f')} |"
        )
    if cost:
        print(f"(scratch's final return, the target: {target:.2f})")
        figure(runs, variants, cost, target, BENCH_DIR / f"arms-{args.name}-costs.png")

    write_json(
        BENCH_DIR / f"arms-{args.name}.json",
        {
            "machine": machine(),
            "config": args.config,
            "episodes": args.episodes,
            "total_timesteps": config["rl"]["total_timesteps"],
            "rows": rows,
            "runs": runs,
        },
    )


def short_label(name: str, arm: str, overrides: dict[str, Any]) -> str:
    """A variant as a legend shows it: its arm and its overrides' last key parts
    (``rlpd: updates_per_step=0.125, batch_size=128``), ``eval_every`` left out."""
    shown = ", ".join(
        f"{k.rpartition('.')[2]}={v}" for k, v in overrides.items() if k != "eval_every"
    )
    return f"{arm}: {shown}" if shown else arm


def figure(
    runs: list[dict[str, Any]],
    variants: list[tuple[str, str, dict[str, Any]]],
    cost: dict[str, dict[str, Any]],
    target: float,
    path: Path,
) -> None:
    """The variants' mean learning curves by env steps and by training CPU seconds, with
    scratch's final return as a level, and the cost panel
    (:func:`demo2rl.report.plots.learning_curves`)."""
    by_steps, by_cpu, labels = {}, {}, {}
    for name, arm, overrides in variants:
        label = labels[name] = short_label(name, arm, overrides)
        curves, cpu = _curves(runs, name)
        by_steps[label] = summary.curve_band(curves, confidence=0.95, seed=0)
        if cpu:
            band = summary.curve_band([c[1:] for c in cpu], confidence=0.95, seed=0)
            by_cpu[label] = {"seconds" if k == "step" else k: v for k, v in band.items()}
    plots.learning_curves(
        by_steps,
        {"scratch's final return": target},
        path,
        confidence=0.95,
        title="Diagnosis on tuning tracks",
        by_cpu=by_cpu,
        costs={labels[n]: (c["cpu_to_target"], c["steps_to_target"]) for n, c in cost.items()},
        target=f"scratch's final return ({target:.1f})",
        colors={label: f"C{i}" for i, label in enumerate(labels.values())},  # points as curves
    )


def _cost(value: float | None, times: float | None, spec: str) -> str:
    if value is None:
        return "not reached"
    return format(value, spec) + ("" if times is None else f" ({times:.2f}x)")


if __name__ == "__main__":
    main()
