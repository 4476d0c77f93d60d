"""Figures of the workflow's results: plain functions, each writing one PNG atomically.

Figures are built with ``matplotlib.figure.Figure`` and rendered by the Agg backend, without
pyplot: no global state, no display needed, safe in worker processes.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from PIL import Image, ImageDraw

from demo2rl.io import atomic_path


def loss_curves(history: Sequence[Mapping[str, float]], path: str | os.PathLike[str]) -> None:
    """Training and validation NLL per epoch (BC ``history`` records), best epoch marked."""
    epochs = [int(r["epoch"]) for r in history]
    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for key, label in (("train_nll", "train"), ("valid_nll", "validation")):
        values = [float(r.get(key, math.nan)) for r in history]
        if any(math.isfinite(v) for v in values):
            ax.plot(epochs, values, marker=".", label=label)
    valid = [(float(r.get("valid_nll", math.nan)), int(r["epoch"])) for r in history]
    valid = [v for v in valid if math.isfinite(v[0])]
    if valid:
        best_nll, best_epoch = min(valid)
        ax.axvline(best_epoch, color="grey", linestyle=":", label=f"best (epoch {best_epoch})")
        ax.plot([best_epoch], [best_nll], "k*")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("negative log-likelihood of expert actions")
    ax.set_title("Behaviour cloning")
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")


def learning_curves(
    curves: Mapping[str, Mapping[str, np.ndarray]],
    levels: Mapping[str, float],
    path: str | os.PathLike[str],
    *,
    colors: Mapping[str, str] | None = None,
    confidence: float,
    title: str = "Learning curves on held-out episodes",
    by_cpu: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    costs: Mapping[str, tuple[float, float]] | None = None,
    target: str = "scratch PPO's final return",
) -> None:
    """Mean return against env steps with a confidence band per curve, reference levels as lines;
    with ``by_cpu``, a panel beside it of the same against the training's CPU seconds; with
    ``costs``, a last panel of what reaching ``target`` cost each curve on both axes.

    ``curves`` maps a label to ``step``, ``mean``, ``low``, ``high`` arrays (one band over seeds,
    see :func:`demo2rl.report.summary.curve_band`); ``by_cpu`` maps a label to ``seconds``,
    ``mean``, ``low``, ``high`` (the same over each run's training CPU seconds at its evaluation
    steps);
    ``levels`` maps a label to a constant return (e.g. the expert's and the clone's), drawn as
    horizontal lines on each curve panel; ``costs`` maps a label to its (CPU seconds, env steps)
    to ``target`` (:func:`cost_panel`). The curve panels share the return axis.
    """
    colors = colors or {}
    panels = [(curves, "step", "environment steps")]
    if by_cpu:
        panels.append((by_cpu, "seconds", "training CPU seconds per run (workers included)"))
    n = len(panels) + bool(costs)
    fig = Figure(figsize=(6.5 * n, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, n))
    for ax, (bands, x, xlabel) in zip(axes, panels, strict=False):
        for label, c in bands.items():
            (line,) = ax.plot(c[x], c["mean"], label=label, color=colors.get(label), lw=2)
            ax.fill_between(
                c[x], c["low"], c["high"], color=line.get_color(), alpha=0.2, linewidth=0
            )
        for (label, value), style in zip(
            levels.items(), itertools.cycle(("--", ":", "-.")), strict=False
        ):
            ax.axhline(value, color=colors.get(label, "grey"), linestyle=style, lw=1.5, label=label)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    if len(panels) > 1:
        axes[1].sharey(axes[0])
    axes[0].set_ylabel("mean return")
    many = len(curves) + len(levels) > LEGEND_INSIDE
    if axes[0].has_data() and not many:
        axes[0].legend(loc="best", fontsize="small")
    elif axes[0].has_data():  # below the panels, where it hides no curve
        fig.legend(
            *axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize="small"
        )
    band = f"(mean over seeds, {round(100 * confidence)}% bootstrap band)"
    if n == 1:
        axes[0].set_title(f"{title}\n{band}")
    else:
        axes[0].set_title("by env steps")
        if len(panels) > 1:
            axes[1].set_title("by compute (each run's CPU seconds at its evaluation steps)")
        fig.suptitle(f"{title} {band}")
    if costs:
        cost_panel(axes[-1], costs, colors=colors, target=target)
    if many:  # room for the legend below (a row a pair of entries)
        rows = math.ceil((len(curves) + len(levels)) / 2)
        fig.set_size_inches(fig.get_size_inches()[0], 4.5 + 0.25 * rows)
        fig.tight_layout(rect=(0, 0.25 * rows / (4.5 + 0.25 * rows) + 0.02, 1, 1))
        _save(fig, path, tight=False)
        return
    _save(fig, path)


LEGEND_INSIDE = 6
"""Legend entries a learning-curve panel holds inside it; more go below the panels."""


def cost_panel(
    ax: Any,
    costs: Mapping[str, tuple[float, float]],
    *,
    colors: Mapping[str, str] | None = None,
    target: str,
) -> None:
    """What reaching ``target`` cost: one point per label at (its CPU seconds, its env steps) to
    get there (an axis logarithmic where the points span decades), so that the arm nearest the
    lower left is cheapest on both; the labels that never reached the target are named in the
    panel's corner instead (counted, where there are many)."""
    colors = colors or {}
    reached = {k: v for k, v in costs.items() if v[0] is not None and v[1] is not None}
    for label, (seconds, steps) in reached.items():
        ax.scatter(max(seconds, 1e-3), max(steps, 1.0), s=60, color=colors.get(label), label=label)
        ax.annotate(
            label,
            (max(seconds, 1e-3), max(steps, 1.0)),
            fontsize="x-small",
            xytext=(4, 4),
            textcoords="offset points",
        )
    missed = [k for k in costs if k not in reached]
    if len(", ".join(missed)) > 60:  # too many to name in a corner
        missed = [f"{len(missed)} of {len(costs)}"]
    if missed:
        ax.text(
            0.98,
            0.98,
            "not reached: " + ", ".join(missed),
            transform=ax.transAxes,
            fontsize="x-small",
            ha="right",
            va="top",
        )
    for axis, values in (
        ("x", [v[0] for v in reached.values()]),
        ("y", [v[1] for v in reached.values()]),
    ):
        if values and max(values) > 20 * max(min(values), 1e-9):  # log where they span decades
            getattr(ax, f"set_{axis}scale")("log")
    ax.margins(0.15)
    ax.set_xlabel(f"training CPU seconds to {target}")
    ax.set_ylabel(f"env steps to {target}")
    ax.set_title(f"cost to {target}\n(mean curve over seeds; lower left: cheaper)")
    ax.grid(alpha=0.3, which="both")


def costs_figure(
    costs: Mapping[str, tuple[float, float]],
    path: str | os.PathLike[str],
    *,
    colors: Mapping[str, str] | None = None,
    target: str,
) -> None:
    """:func:`cost_panel` alone, as a figure (the diagnosis' settings, one point each)."""
    fig = Figure(figsize=(7.5, 5.5), dpi=100)
    FigureCanvasAgg(fig)
    cost_panel(fig.subplots(), costs, colors=colors, target=target)
    _save(fig, path)


def final_returns(
    estimates: Mapping[str, Mapping[str, Any]],
    improvement: Mapping[str, Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    colors: Mapping[str, str] | None = None,
    confidence: float,
) -> None:
    """rliable-style interval estimates: IQM with its interval per policy, and P(X > Y).

    ``estimates`` maps a label to ``iqm``, ``iqm_ci`` (low, high), ``mean`` and ``runs`` (each
    run's mean return, drawn as dots); ``improvement`` maps a label ("X > Y") to
    ``probability`` and ``ci``, drawn in the colour of ``colors[x]`` when it has an ``x`` label.
    """
    colors = colors or {}
    pct = round(100 * confidence)
    rows = max(len(estimates), len(improvement), 2)
    fig = Figure(figsize=(11, 1.2 + 0.55 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    labels = list(estimates)
    for i, label in enumerate(labels):
        est = estimates[label]
        y = len(labels) - 1 - i
        color = colors.get(label, f"C{i}")
        lo, hi = est["iqm_ci"]
        left.barh(y, hi - lo, left=lo, height=0.6, color=color, alpha=0.35)
        left.plot([est["iqm"]] * 2, [y - 0.3, y + 0.3], color=color, lw=2.5)
        left.plot(est["mean"], y, marker="D", color="k", ms=5, mfc="none")
        runs = np.asarray(est.get("runs", []), dtype=np.float64)
        if len(runs) > 1:
            left.plot(runs, np.full(len(runs), y), "o", color=color, ms=4, mec="k", mew=0.5)
    left.set_yticks(range(len(labels)), labels[::-1])
    left.set_xlabel(f"return: IQM (bar) with {pct}% CI, mean (diamond), runs (dots)")
    left.set_title("Final held-out return")
    left.grid(axis="x", alpha=0.3)
    names = list(improvement)
    for i, name in enumerate(names):
        imp = improvement[name]
        y = len(names) - 1 - i
        lo, hi = imp["ci"]
        color = colors.get(imp.get("x_label", ""), "tab:purple")
        right.barh(y, max(hi - lo, 0.005), left=lo, height=0.6, color=color, alpha=0.35)
        right.plot([imp["probability"]] * 2, [y - 0.3, y + 0.3], color=color, lw=2.5)
    right.axvline(0.5, color="grey", linestyle="--", lw=1)
    right.set_xlim(-0.02, 1.02)
    right.set_yticks(range(len(names)), names[::-1])
    right.set_xlabel(f"probability of improvement with {pct}% CI")
    right.set_title("P(X > Y)")
    right.grid(axis="x", alpha=0.3)
    _save(fig, path, tight=False)


def variants(
    panels: Mapping[str, Sequence[Mapping[str, Any]]],
    path: str | os.PathLike[str],
    *,
    colors: Mapping[str, str] | None = None,
    confidence: float,
    base: str,
    columns: int = 3,
) -> None:
    """IQM with its interval per config variant: one panel per policy group, the variants side
    by side (``base`` first), the base's interval shaded across the panel to read them against.

    ``panels`` maps a group's label to its variants' estimates, in order: ``variant``, ``iqm``,
    ``iqm_ci`` (low, high) and ``note`` (P(variant > base) as text, or None), written above the
    bar; a variant marked ``same_runs`` (the base's own runs) is drawn hollow. Each panel has its
    own return axis: the differences between variants, not between groups, are what it shows.
    """
    colors = colors or {}
    pct = round(100 * confidence)
    cols = min(columns, len(panels))
    rows = math.ceil(len(panels) / cols)
    widest = max(len(entries) for entries in panels.values())
    fig = Figure(figsize=(cols * (1.6 + 0.6 * widest), 3.4 * rows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for i, (ax, (label, entries)) in enumerate(zip(axes, panels.items(), strict=False)):
        color = colors.get(label, f"C{i}")
        for entry in entries:
            if entry["variant"] == base:
                ax.axhspan(*entry["iqm_ci"], color=color, alpha=0.12, linewidth=0)
                ax.axhline(entry["iqm"], color=color, linestyle="--", lw=1)
        for x, entry in enumerate(entries):
            lo, hi = entry["iqm_ci"]
            ax.errorbar(
                x,
                entry["iqm"],
                yerr=[[entry["iqm"] - lo], [hi - entry["iqm"]]],
                fmt="o",
                color=color,
                mfc="white" if entry.get("same_runs") else color,
                ms=7,
                capsize=4,
                lw=2,
            )
            if entry.get("note"):
                ax.annotate(
                    entry["note"],
                    (x, hi),
                    xytext=(0, 4),
                    textcoords="offset points",
                    ha="center",
                    fontsize="x-small",
                )
        ax.set_xticks(range(len(entries)), [e["variant"] for e in entries], rotation=30, ha="right")
        ax.set_xlim(-0.6, len(entries) - 0.4)
        ax.margins(y=0.15)
        ax.set_title(label, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel(f"IQM return, {pct}% CI")
    fig.suptitle(
        f"Held-out return per config variant (shaded: {base}'s interval; "
        f"above the bars: P(variant > {base}); hollow: {base}'s own runs)",
        fontsize="medium",
    )
    _save(fig, path, tight=False)


def track_lines(
    centreline: np.ndarray,
    half_width: float,
    drives: Mapping[str, Mapping[str, np.ndarray]],
    path: str | os.PathLike[str],
    *,
    notes: Mapping[str, str] | None = None,
) -> None:
    """One panel per policy: the track from above and the line the car drove, coloured by speed.

    ``centreline`` is the closed track's (M, 2) centre line (m), counter-clockwise; ``drives``
    maps a label to ``x``, ``y`` and ``speed`` arrays of equal length (positions in time order).
    All panels share one colour scale; ``notes`` adds a line under a panel's title.
    """
    pts = np.asarray(centreline, dtype=np.float64)
    tangent = np.gradient(pts, axis=0)
    tangent /= np.linalg.norm(tangent, axis=1, keepdims=True)
    normal = np.stack([-tangent[:, 1], tangent[:, 0]], axis=1)  # left of the driving direction
    inner, outer = pts + half_width * normal, pts - half_width * normal
    vmax = max([float(np.max(d["speed"])) for d in drives.values()] + [1e-6])
    norm = Normalize(0.0, vmax)
    fig = Figure(figsize=(4.2 * len(drives) + 1.0, 4.6), dpi=100)
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(drives)))
    lines = None
    for ax, (label, drive) in zip(axes, drives.items(), strict=True):
        ax.set_facecolor((0.24, 0.55, 0.24))
        ax.fill(outer[:, 0], outer[:, 1], color=(0.45, 0.45, 0.45), zorder=1)
        ax.fill(inner[:, 0], inner[:, 1], color=(0.24, 0.55, 0.24), zorder=2)
        ax.plot(*np.vstack([pts, pts[:1]]).T, color="white", lw=0.6, ls=(0, (4, 4)), zorder=3)
        ax.plot(*np.stack([inner[0], outer[0]]).T, color="white", lw=3, zorder=3)
        xy = np.column_stack([drive["x"], drive["y"]])
        segments = np.stack([xy[:-1], xy[1:]], axis=1)
        lines = LineCollection(segments, cmap="plasma", norm=norm, linewidths=2.2, zorder=4)
        lines.set_array(np.asarray(drive["speed"], dtype=np.float64)[1:])
        ax.add_collection(lines)
        note = (notes or {}).get(label)
        ax.set_title(f"{label}\n{note}" if note else label, fontsize="medium")
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.margins(0.03)
    if lines is not None:
        fig.colorbar(lines, ax=list(axes), label="speed (m/s)", fraction=0.03, pad=0.02)
    _save(fig, path, tight=False)


def animation(
    frames: Sequence[np.ndarray],
    path: str | os.PathLike[str],
    *,
    fps: float = 10.0,
    captions: Sequence[str] | None = None,
) -> None:
    """An animated GIF (looping) of rgb frames ``(H, W, 3)`` uint8, written atomically;
    ``captions`` (one per frame) are written into the frames' top-left corner."""
    if not frames:
        raise ValueError("no frames to animate")
    if captions is not None and len(captions) != len(frames):
        raise ValueError(f"{len(captions)} captions for {len(frames)} frames")
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames]
    for image, text in zip(images, captions or [], strict=False):
        draw = ImageDraw.Draw(image)
        draw.rectangle((4, 4, 10 + 6 * len(text), 20), fill=(0, 0, 0))
        draw.text((7, 6), text, fill=(255, 255, 255))
    with atomic_path(path) as tmp:
        images[0].save(
            tmp,
            format="GIF",
            save_all=True,
            append_images=images[1:],
            duration=round(1000 / fps),
            loop=0,
            optimize=False,
        )


def _save(fig: Figure, path: str | os.PathLike[str], tight: bool = True) -> None:
    """Write the figure as PNG (laid out by ``tight_layout``, or else cropped to its content)."""
    if tight:
        fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches=None if tight else "tight", pad_inches=0.15)
