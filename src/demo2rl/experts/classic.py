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


def pendulum(
    obs: np.ndarray, *, pump: float = 0.5, kp: float = 10.0, kd: float = 2.0, catch: float = 0.8
) -> np.ndarray:
    """Pendulum-v1: energy-pumping swing-up, then a PD controller that holds it upright.

    Observations are ``(cos theta, sin theta, theta_dot)`` with theta 0 upright; the torque is
    clipped to the task's +-2. Far from upright (``cos theta < catch``) it pushes along the
    motion in proportion to the energy still missing (gymnasium's dynamics: theta'' =
    3g/(2l) sin theta + 3u/(ml^2), so the energy 0.5 theta'^2 + 3g/(2l) (cos theta - 1) is 0 at
    rest upright and grows at the rate 3 u theta'); near upright ``-kp theta - kd theta'``.
    Deliberately simple: its torque is bang-bang far from the top, so RL has room to improve.
    """
    cos, sin, speed = obs[:, 0], obs[:, 1], obs[:, 2]
    theta = np.arctan2(sin, cos)
    energy = 0.5 * speed**2 + 15.0 * (cos - 1.0)  # 3g/(2l) = 15 with g=10, l=1
    swing = pump * -energy * np.where(speed >= 0.0, 1.0, -1.0)
    swing = np.where(np.abs(speed) < 1e-3, 2.0, swing)  # at rest at the bottom: start a swing
    hold = -kp * theta - kd * speed
    return np.clip(np.where(cos >= catch, hold, swing), -2.0, 2.0).astype(np.float32)[:, None]


def cart_pole(obs: np.ndarray, *, angle: float = 1.0, spin: float = 0.5) -> np.ndarray:
    """CartPole-v1 (Discrete(2): 0 pushes left, 1 right): push towards where the pole is falling.

    Observations are ``(x, x_dot, theta, theta_dot)``; the cart is pushed right when
    ``angle * theta + spin * theta_dot > 0``. Balances for the full 500 steps from gymnasium's
    start states; it ignores the cart's position, so the cart drifts.
    """
    falling = angle * obs[:, 2] + spin * obs[:, 3]
    return (falling > 0.0).astype(np.int64)
