"""Stage plot_bc: the behaviour clone's training and validation loss curves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from demo2rl.report import plots

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def plot_bc(*, metrics: str, out: str, run: Run) -> None:
    """Draw the per-epoch losses recorded in BC's ``metrics.json`` to ``out``."""
    history = json.loads(Path(metrics).read_text())["history"]
    plots.loss_curves(history, out)
    run.log_artifact(out)
