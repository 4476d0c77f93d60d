"""Stage plot_racing (Racing-v0 only): the lines the policies drove, and the best run's lap.

The episodes are driven again from the actions the evaluation recorded (the task is
deterministic); a replay that does not give the recorded return is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from demo2rl import names
from demo2rl.envs import racing
from demo2rl.report import groups, plots
from demo2rl.report import racing_replay as replay

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow

GIF_FRAME_EVERY = 2
"""Render every second step of the best lap (5 frames per simulated second, played in real
time)."""


def plot_racing(*, evaluations: Sequence[str], track_png: str, lap_gif: str, run: Run) -> None:
    """Racing-v0 figures: the first held-out track with the lines the expert, the clone and the
    best RL run drove (coloured by speed), and an animation of the best run's first lap."""
    records = [json.loads(Path(p).read_text()) for p in evaluations]
    by_name = {r["policy"]: r for r in records}
    best_rl = groups.best_rl_run(records)
    shown = [p for p in (names.EXPERT, names.BC, best_rl) if p in by_name]
    animated = best_rl or shown[-1]  # without RL runs: the clone
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
    run.log_figures([track_png, lap_gif])


def _replay(record: Mapping[str, Any], frames: bool) -> replay.Drive:
    """Drive an evaluation record's first episode again; check it is the evaluated one."""
    episode = record["first_episode"]
    drive = replay.replay_racing(
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


def _policy_label(name: str) -> str:
    run = names.RLRun.parse(name)
    if run is not None:
        return f"best RL run: {groups.label(run.group)}, seed {run.seed}"
    return groups.label(groups.policy_group(name))


def _drive_note(drive: replay.Drive) -> str:
    lap = f"lap {drive.lap_time:.1f} s" if math.isfinite(drive.lap_time) else "no full lap"
    return f"{lap}, return {drive.episode_return:.1f}"
