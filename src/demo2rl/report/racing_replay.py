"""Replaying a recorded Racing-v0 episode for the report's racing figures (the plot_racing
stage): the line a policy drove, and frames of it. No stage that produces a result imports it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from demo2rl import tasks

# the frames are the env's renderer's, which the env leaves out of its own fingerprint (racing.py:
# UNFINGERPRINTED_IMPORTS): imported here, it is in plot_racing's fingerprint
from demo2rl.envs import render as _drawing  # noqa: F401
from demo2rl.envs.tracks import Track


@dataclasses.dataclass
class Drive:
    """A replayed Racing-v0 episode: the track and where the car went."""

    track: Track
    x: np.ndarray
    """Car positions (m): at the start, then after every step."""
    y: np.ndarray
    speed: np.ndarray
    """Speed (m/s) at the same instants as ``x`` and ``y``."""
    episode_return: float
    lap_time: float
    """Time (s) of the first lap; NaN when none was completed."""
    frames: list[np.ndarray]
    """rgb_array frames (when asked for): the start, then every ``frame_every``-th step."""
    frame_steps: list[int]
    """The step after which each frame was taken (0: the start); indexes ``x``, ``speed``..."""


def replay_racing(
    env_kwargs: Mapping[str, Any],
    seed: int,
    actions: np.ndarray,
    *,
    frame_every: int = 0,
    frames_until_lap: bool = True,
) -> Drive:
    """Drive a recorded Racing-v0 episode again: same track seed, same actions.

    Racing-v0 is deterministic and its results do not depend on the batch it ran in, so this
    reproduces the evaluated episode exactly. ``frame_every`` > 0 renders frames (the env's
    ``rgb_array`` view: with a camera, what the policy saw beside the overview), stopping after
    the first lap when ``frames_until_lap``.
    """
    render = frame_every > 0
    env = tasks.make_env("Racing-v0", env_kwargs)
    core = env.unwrapped.core

    def frame() -> np.ndarray:  # the overview, and beside it the camera's view when it has one
        return core.render(0)

    env.reset(seed=int(seed))
    xs, ys, speeds = [float(core.x[0])], [float(core.y[0])], [float(core.speed[0])]
    frames = [frame()] if render else []
    frame_steps = [0] if render else []
    rewards: list[float] = []
    frames_done = False
    for t, action in enumerate(np.asarray(actions), start=1):
        _, reward, terminated, truncated, _ = env.step(action)
        rewards.append(float(reward))
        xs.append(float(core.x[0]))
        ys.append(float(core.y[0]))
        speeds.append(float(core.speed[0]))
        if render and not frames_done:
            lap_done = frames_until_lap and int(core.laps[0]) >= 1
            if t % frame_every == 0 or lap_done:
                frames.append(frame())
                frame_steps.append(t)
            frames_done = lap_done
        if terminated or truncated:
            break
    track = core.tracks[0]
    lap_time = float(core.lap_time[0])
    env.close()
    return Drive(
        track=track,
        x=np.asarray(xs),
        y=np.asarray(ys),
        speed=np.asarray(speeds),
        episode_return=math.fsum(rewards),
        lap_time=lap_time,
        frames=frames,
        frame_steps=frame_steps,
    )
