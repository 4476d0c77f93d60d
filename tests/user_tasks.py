"""A user's own task module, as a config names it: ``env_id: "user_tasks:NanObs-v0"``.

Importing it registers the tasks; the tests put this directory on PYTHONPATH.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from demo2rl.envs import capabilities


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


def nan_reward_step(seed: int) -> int:
    """The step at which NanRewardEnv's reward turns NaN in the episode reset with ``seed``."""
    return 3 + seed % 7


class NanRewardEnv(gym.Env):
    """A broken user task: finite observations, but the reward turns NaN mid-episode, at step
    :func:`nan_reward_step` (of the episode's seed; 1 is the first step)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.nan_at = nan_reward_step(seed) if seed is not None else -1
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float("nan") if self.t == self.nan_at else 1.0
        return np.zeros(2, np.float32), reward, False, self.t >= 20, {}


gym.register(id="NanReward-v0", entry_point=NanRewardEnv)


class SparseGoalEnv(gym.Env):
    """A sparse-reward task: a point on a line (position, velocity) gets reward 1 only when it
    reaches ``goal``. Its speed stays below 1, so the goal is out of reach within ``max_steps``:
    every return, the expert's, the clone's and any RL policy's, is 0."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, goal: float = 50.0, max_steps: int = 25):
        self.goal, self.max_steps = goal, max_steps

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.state = self.np_random.uniform(-0.5, 0.5, 2)
        return self.state.astype(np.float32), {}

    def step(self, action):
        self.t += 1
        x, v = self.state
        v = 0.9 * v + 0.1 * float(np.clip(action[0], -1.0, 1.0))
        self.state = np.array([x + v, v])
        reached = bool(x + v >= self.goal)
        return self.state.astype(np.float32), float(reached), reached, self.t >= self.max_steps, {}


gym.register(id="SparseGoal-v0", entry_point=SparseGoalEnv)


class RegisteredMetricsEnv(SparseGoalEnv):
    """SparseGoal reaching a near goal, reporting in its info how far it is from the goal and,
    once reached, when; its package registers both as per-episode metrics."""

    def step(self, action):
        obs, reward, reached, truncated, _ = super().step(action)
        info = {"distance": self.goal - float(self.state[0])}
        if reached:
            info["reached_at"] = float(self.t)
        return obs, reward, reached, truncated, info


gym.register(id="RegisteredMetrics-v0", entry_point=RegisteredMetricsEnv, kwargs={"goal": 0.2})
capabilities.register(
    "RegisteredMetrics-v0",
    metrics={
        "distance": capabilities.Metric("info.distance", label="distance left"),
        "reached": capabilities.Metric("info.reached_at", label="episodes reached", finite=True),
    },
)


def hold_expert(obs: np.ndarray) -> np.ndarray:
    """SparseGoal's expert: holds the point at 0 (a PD controller), so it never sees a reward."""
    return np.clip(-obs[:, :1] - 2.0 * obs[:, 1:], -1.0, 1.0).astype(np.float32)


def zero_expert(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 1), np.float32)


def wrong_shape_expert(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 3), np.float32)


def raising_expert(obs: np.ndarray) -> np.ndarray:
    raise RuntimeError("this expert is broken")


NOT_CALLABLE = 42


class LateNanRewardEnv(gym.Env):
    """A task whose reward turns to ``value`` (NaN by default; a huge finite one overflows the
    returns) once this env has taken ``nan_after`` steps in its life (None: never): its
    demonstrations are clean, its RL run is not."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, nan_after: int | None = None, value: float = float("nan")):
        self.nan_after, self.value, self.lifetime = nan_after, value, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        self.lifetime += 1
        late = self.nan_after is not None and self.lifetime > self.nan_after
        reward = self.value if late else float(-abs(action[0]))
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, reward, False, self.t >= 20, {}


gym.register(id="LateNanReward-v0", entry_point=LateNanRewardEnv)


class MemoryHungryEnv(gym.Env):
    """A task that needs ``alloc_mb`` MB of memory once it runs: its ``alloc_at``-th step
    allocates (and writes) that much and holds it. Checks that step an env only a few times (the
    workflow's probe) allocate nothing. On a cluster that limits a job's memory below that, the
    job that collects its episodes is killed."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, alloc_mb: int = 0, alloc_at: int = 10, max_steps: int = 20):
        self.alloc_mb, self.alloc_at, self.max_steps = alloc_mb, alloc_at, max_steps
        self.steps = 0  # in the env's life
        self.ballast: np.ndarray | None = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        self.steps += 1
        if self.steps == self.alloc_at:
            self.ballast = np.ones(self.alloc_mb * 2**20, np.uint8)  # every page written
        return np.zeros(2, np.float32), 0.0, False, self.t >= self.max_steps, {}


gym.register(id="MemoryHungry-v0", entry_point=MemoryHungryEnv)
