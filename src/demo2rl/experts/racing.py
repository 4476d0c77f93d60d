"""Scripted Racing-v0 expert: pure-pursuit steering and curvature-limited speed planning.

A pure function of the observation (batched, deterministic). ``margin`` is the fraction of the grip
limit it uses in corners and of the brakes it plans with: the default is deliberately conservative
so that a learned policy can beat it.
"""

from __future__ import annotations

import numpy as np

from demo2rl.envs.racing import (
    CURVATURE_SCALE,
    DEFAULTS,
    LOOKAHEAD_RANGE,
    LOOKAHEAD_SPACING,
    MAX_STEER,
    N_LOOKAHEAD,
    WHEELBASE,
)
from demo2rl.envs.tracks import MIN_RADIUS_FACTOR

K = N_LOOKAHEAD
_AHEAD = np.arange(K, dtype=np.float64) * LOOKAHEAD_SPACING  # arc distance of each point


def pure_pursuit(
    obs: np.ndarray,
    *,
    margin: float = 0.65,
    grip: float = DEFAULTS.grip,
    max_speed: float = DEFAULTS.max_speed,
    max_brake: float = DEFAULTS.max_brake,
    half_width: float = DEFAULTS.half_width,
    lookahead_min: float = 6.0,
    lookahead_time: float = 0.6,
    speed_gain: float = 0.5,
) -> np.ndarray:
    """Actions (B, 2) float32 in [-1, 1] for observations (B, obs_dim); a 1-D obs gives (2,).

    Steering: pure pursuit toward the centreline point ``lookahead_min + lookahead_time * v``
    metres ahead (interpolated from the observed lookahead points). Speed: the target is
    ``min_j sqrt(v_corner_j**2 + 2 * b * d_j)`` with
    ``v_corner_j = sqrt(margin * grip / |kappa_j|)`` and ``b = margin * max_brake``; beyond the
    horizon the tightest legal corner is assumed.
    Throttle/brake is ``speed_gain * (v_target - v)``, clipped.
    """
    obs = np.asarray(obs, dtype=np.float64)
    single = obs.ndim == 1
    obs = np.atleast_2d(obs)
    v = obs[:, 0] * max_speed
    px = obs[:, 3 : 3 + K] * LOOKAHEAD_RANGE
    py = obs[:, 3 + K : 3 + 2 * K] * LOOKAHEAD_RANGE
    kappa = np.abs(obs[:, 3 + 2 * K : 3 + 3 * K]) / CURVATURE_SCALE

    # pure pursuit: circle through the car and the target point, converted to a steering angle
    u = np.clip((lookahead_min + lookahead_time * v) / LOOKAHEAD_SPACING, 0.0, K - 1.0)
    j0 = np.minimum(np.floor(u).astype(np.int64), K - 2)[:, None]
    frac = u - j0[:, 0]

    def at_u(points: np.ndarray) -> np.ndarray:
        p0 = np.take_along_axis(points, j0, axis=1)[:, 0]
        return p0 + frac * (np.take_along_axis(points, j0 + 1, axis=1)[:, 0] - p0)

    tx, ty = at_u(px), at_u(py)
    curv = 2.0 * ty / np.maximum(tx * tx + ty * ty, 1e-6)
    steer = np.arctan(WHEELBASE * curv) / MAX_STEER

    # speed: fastest speed from which every upcoming corner can still be taken at margin * grip
    brake = margin * max_brake
    v_corner = np.sqrt(margin * grip / np.maximum(kappa, 1e-6))
    reach = np.sqrt(v_corner**2 + 2.0 * brake * _AHEAD[None, :])
    kappa_max = 1.0 / (MIN_RADIUS_FACTOR * half_width)
    v_far = np.sqrt(margin * grip / kappa_max + 2.0 * brake * K * LOOKAHEAD_SPACING)
    v_target = np.minimum(reach.min(axis=1), v_far)
    pedal = speed_gain * (v_target - v)

    act = np.clip(np.stack([steer, pedal], axis=1), -1.0, 1.0).astype(np.float32)
    return act[0] if single else act
