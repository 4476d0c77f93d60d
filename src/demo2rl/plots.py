"""Figures of the workflow's results: plain functions, each writing one PNG atomically.

Figures are built with ``matplotlib.figure.Figure`` and rendered by the Agg backend, without
pyplot: no global state, no display needed, safe in worker processes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

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
