"""DAgger against plain behaviour cloning over several base seeds: return against expert calls.

Reads finished runs of ``config/dagger-pixels.yaml`` (one per base seed: ``seed: s`` and
``experiment: dagger-pixels-s<s>``, or the config as it is for seed 0) and pools them, one
"run" per base seed: a policy's scores are a ``(seeds, held-out episodes)`` matrix, row ``s``
the held-out tracks of seed ``s`` (every policy of one seed ran the same tracks), so that the
bootstrap resamples whole seeds (which demonstrations, which DAgger episodes) and episodes
(:func:`demo2rl.report.summary.compare`). It reports, per policy, the expert calls it cost (steps
the expert acted or labelled: the dataset's steps, and each DAgger round's) and its IQM return with
its interval, against the expert's IQM; P(DAgger's last round > the plain clone of the same
demonstrations); and draws the classic comparison, return against expert calls, to
``--figure``. Figures to ``results/bench/dagger.json``. Usage::

    python benchmarks/dagger.py results/dagger-pixels results/dagger-pixels-s1 ... \\
        [--figure docs/dagger_curve.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine, report

from demo2rl import names
from demo2rl.demos import dataset
from demo2rl.report import summary


def policies(run: Path) -> dict[str, tuple[int, np.ndarray]]:
    """A finished run's clones, by name: the expert calls each cost and its held-out returns
    (the plain clones of the variants as ``bc-<n demos>``, DAgger's rounds as ``dagger<r>``)."""
    out: dict[str, tuple[int, np.ndarray]] = {}
    roots = [run, *sorted((run / names.VARIANTS_DIR).glob("*"))]
    for root in roots:
        demos = dataset.read_tables(root / "demos" / "demos.h5")
        steps = int(demos.episodes["length"].sum())

        def returns(policy: str, root: Path = root) -> np.ndarray:
            record = json.loads((root / "eval" / f"{policy}.json").read_text())
            return np.array(record["episodes"]["return"], dtype=np.float64)

        out[f"bc-{demos.n_episodes}"] = (steps, returns(names.BC))
        if root == run:
            out[names.EXPERT] = (0, returns(names.EXPERT))
            for metrics in sorted((run / "bc" / "dagger").glob("round-*/metrics.json")):
                r = int(metrics.parent.name.removeprefix("round-"))
                calls = steps + json.loads(metrics.read_text())["expert_calls_total"]
                out[names.dagger_policy(r)] = (calls, returns(names.dagger_policy(r)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="results/<experiment> of each seed")
    parser.add_argument("--figure", type=Path, help="where to draw return against expert calls")
    parser.add_argument("--reps", type=int, default=20000, help="bootstrap replicates")
    args = parser.parse_args()
    per_seed = [policies(run) for run in args.runs]
    shared = [p for p in per_seed[0] if all(p in seed for seed in per_seed)]
    scores = {p: np.stack([seed[p][1] for seed in per_seed]) for p in shared}
    calls = {p: float(np.mean([seed[p][0] for seed in per_seed])) for p in shared}
    base = min((p for p in shared if p.startswith("bc-")), key=calls.get)
    last = max((p for p in shared if names.dagger_round(p)), key=names.dagger_round)
    pairs = [(p, base) for p in shared if p != base] + [(last, p) for p in shared if p != last]
    stats = summary.compare(scores, pairs, reps=args.reps, confidence=0.95, seed=0)
    expert = stats["groups"][names.EXPERT]["iqm"]
    figures: dict[str, Any] = {"machine": machine(), "runs": [str(r) for r in args.runs]}
    for p in sorted(shared, key=lambda p: (calls[p] == 0, calls[p])):
        st = stats["groups"][p]
        figures[f"{p}.expert_calls"] = calls[p]
        figures[f"{p}.iqm"] = st["iqm"]
        figures[f"{p}.mean"] = st["mean"]
        figures[f"{p}.iqm_ci"] = json.dumps([round(v, 2) for v in st["iqm_ci"]])
        figures[f"{p}.vs_expert"] = st["iqm"] / expert
    for key, c in stats["improvement"].items():
        figures[f"p.{key}"] = c["probability"]
        figures[f"p.{key}_ci"] = json.dumps([round(v, 2) for v in c["ci"]])
    report("dagger", figures)
    if args.figure:
        draw(args.figure, stats, calls, expert)


def draw(path: Path, stats: dict[str, Any], calls: dict[str, float], expert: float) -> None:
    """Return against expert calls, IQM (left) and mean (right: it counts the episodes a clone
    fails, which the IQM trims), each with its interval: the plain clones (more demonstrations)
    and DAgger's rounds (more labels on the clone's own states), the expert's level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.0))
    start = min((p for p in calls if p.startswith("bc-")), key=calls.get)
    lines = (
        (
            sorted((p for p in calls if p.startswith("bc-")), key=calls.get),
            "plain clone, more demonstrations",
            "tab:orange",
        ),
        (
            [start, *sorted((p for p in calls if names.dagger_round(p)), key=calls.get)],
            "DAgger rounds (from the fewest demonstrations)",
            "goldenrod",
        ),
    )
    for ax, stat in zip(axes, ("iqm", "mean"), strict=True):
        for policies_, label, color in lines:
            groups = [stats["groups"][p] for p in policies_]
            x = [calls[p] for p in policies_]
            y = [g[stat] for g in groups]
            err = [
                [g[stat] - g[f"{stat}_ci"][0] for g in groups],
                [g[f"{stat}_ci"][1] - g[stat] for g in groups],
            ]
            ax.errorbar(x, y, yerr=err, marker="o", color=color, label=label, capsize=3)
        ax.axhline(
            stats["groups"][names.EXPERT][stat], color="black", lw=1, ls="--", label="expert"
        )
        ax.set_xlabel("expert calls (steps the expert acted or labelled)")
        ax.set_ylabel(f"held-out {stat.upper() if stat == 'iqm' else stat} return (95% CI)")
    axes[1].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
