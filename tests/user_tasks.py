"""A user's own task module, as a config names it: ``env_id: "user_tasks:NanObs-v0"``.

Importing it registers the tasks; the tests put this directory on PYTHONPATH.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class NanObsEnv(gym.Env):
    """A broken user task: its observation turns NaN after a few steps."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.full(2, np.nan if self.t >= 3 else 0.0, np.float32)
        return obs, 0.0, False, self.t >= 10, {}


gym.register(id="NanObs-v0", entry_point=NanObsEnv)


def zero_expert(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 1), np.float32)


def wrong_shape_expert(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 3), np.float32)


def raising_expert(obs: np.ndarray) -> np.ndarray:
    raise RuntimeError("this expert is broken")


NOT_CALLABLE = 42
