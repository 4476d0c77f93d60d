"""Heuristic experts for gymnasium's classic-control tasks (batched, deterministic)."""

from __future__ import annotations

import numpy as np


def mountain_car(obs: np.ndarray, *, power: float = 1.0) -> np.ndarray:
    """MountainCarContinuous-v0: push in the direction of motion to pump energy into the swing.

    Observations are ``(position, velocity)``; a stationary car pushes right. Reaches the flag from
    every start in about 100-150 steps for a return of about 90.
    """
    velocity = obs[:, 1]
    return np.where(velocity >= 0.0, power, -power).astype(np.float32)[:, None]
