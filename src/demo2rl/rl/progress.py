"""What a run reports: a progress line per rollout in the job's log, every rollout's metrics to
one sink (MLflow), and the tables of a run's progress and held-out evaluations."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
from stable_baselines3.common.logger import KVWriter

log = logging.getLogger(__package__)  # "demo2rl.rl", as in every job log before the split


class LogLines(KVWriter):
    """One line per progress row in the job's log: step, fps, return and the losses."""

    KEYS = (
        *("rollout/ep_rew_mean", "time/fps", "train/loss", "train/approx_kl"),
        *("train/critic_loss", "train/actor_loss", "train/ent_coef", "eval/return_mean"),
    )

    def __init__(self, total_timesteps: int) -> None:
        self.total = total_timesteps

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        shown = " ".join(
            f"{k.split('/')[1]}={key_values[k]:.4g}" for k in self.KEYS if k in key_values
        )
        log.info("step %d/%d (%.0f%%) %s", step, self.total, 100 * step / self.total, shown)

    def close(self) -> None:
        pass


class MetricsSink(KVWriter):
    """Sends every rollout's numeric metrics in ONE call of ``log_fn(metrics, step)``."""

    def __init__(self, log_fn: Callable[[dict[str, float], int], None]) -> None:
        self.log_fn = log_fn

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        numeric = {
            k: float(v)
            for k, v in key_values.items()
            if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
        }
        if numeric:
            self.log_fn(numeric, step)

    def close(self) -> None:
        pass


def progress_table(state_dir: str | Path) -> pd.DataFrame:
    """The SB3 progress rows of every segment of the run (resumes included), in step order, with
    the columns in a fixed order (env steps first, then by name).

    A segment's rows past the step the next segment resumed from belong to work lost in a hard
    kill (after the last checkpoint) and are left out, so no step appears twice."""
    segments = sorted(Path(state_dir).glob("progress-*.csv"))
    starts = [int(p.stem.partition("-")[2]) for p in segments]
    parts = []
    for path, end in zip(segments, [*starts[1:], None], strict=True):
        if not path.stat().st_size:
            continue
        part = pd.read_csv(path)
        if end is not None:  # rows past the checkpoint the next segment resumed from were lost
            part = part[part["time/total_timesteps"] <= end]
        parts.append(part)
    if not parts:
        return pd.DataFrame()
    table = pd.concat(parts, ignore_index=True)
    table = table.sort_values("time/total_timesteps", kind="stable").reset_index(drop=True)
    # SB3 orders new columns by set difference, which differs from process to process
    return _in_column_order(table, "time/total_timesteps")


def evaluations_table(evaluations: list[dict[str, float]]) -> pd.DataFrame:
    """The held-out evaluations of a run, one row per evaluation point, ``step`` first and the
    rest by name (the rows of a resumed run come back from state.json with sorted keys)."""
    return _in_column_order(pd.DataFrame(evaluations), "step")


def _in_column_order(table: pd.DataFrame, first: str) -> pd.DataFrame:
    return table[[first, *sorted(c for c in table.columns if c != first)]]


def training_cpu_seconds() -> float:
    """CPU seconds (user and system) of this process and of its child processes, live (a subproc
    VecEnv's workers, which step the envs for it) or ended: what a run costs the machine, the
    compute axis of the summary. (It scans the process table: read it per progress row, not per
    env step.)"""
    me = psutil.Process()
    times = me.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child_times = child.cpu_times()
            total += child_times.user + child_times.system
    return total
