"""Tasks and experts a new user might bring that the workflow cannot use, as a config names them
(``env_id: "probe_tasks:DictObs-v0"``, ``entry_point: probe_tasks:nan_actions``). The task probe
must reject each before any job runs. The tests put this directory on PYTHONPATH."""

from __future__ import annotations

import multiprocessing
import time

import gymnasium as gym
import numpy as np


class _Tiny(gym.Env):
    """A one-step task; subclasses change its spaces."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


class DictObsEnv(_Tiny):
    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,)), "goal": gym.spaces.Box(-1.0, 1.0, (2,))}
    )


class MultiDiscreteEnv(_Tiny):
    action_space = gym.spaces.MultiDiscrete([3, 3])


def _frames(shape, dtype=np.uint8, high=255):
    """A camera-like observation space: frames of ``shape`` in [0, high]."""
    return gym.spaces.Box(0, high, shape, dtype)


class FloatImageEnv(_Tiny):
    observation_space = _frames((32, 32, 3), np.float32, 1.0)  # scaled how? it does not say


class StackedFramesEnv(_Tiny):
    observation_space = _frames((4, 32, 32, 3))  # frames stacked by the env itself


class ImageBoundsEnv(_Tiny):
    observation_space = _frames((32, 32, 3), high=1)  # uint8, but 0/1 bounds


class MiddleChannelEnv(_Tiny):
    observation_space = _frames((32, 3, 32))  # channels neither first nor last


class ImageAndVectorEnv(_Tiny):
    observation_space = gym.spaces.Dict(
        {"pixels": _frames((32, 32, 3)), "speed": gym.spaces.Box(0.0, 1.0, (1,))}
    )


class SmallFramesEnv(_Tiny):
    """Good 16x16 grayscale frames: too small for NatureCNN, fine for the small encoder."""

    observation_space = _frames((16, 16, 1))


class KeyedError(Exception):
    """An error of a user's code that carries a ``key`` of its own (as omegaconf's do)."""

    key = "model.depth"


class KeyedFailureEnv(_Tiny):
    def __init__(self):
        raise KeyedError("no such node")


gym.register(id="DictObs-v0", entry_point=DictObsEnv)
gym.register(id="KeyedFailure-v0", entry_point=KeyedFailureEnv)
gym.register(id="MultiDiscrete-v0", entry_point=MultiDiscreteEnv)
for _name, _env in [
    ("FloatImage", FloatImageEnv),
    ("StackedFrames", StackedFramesEnv),
    ("ImageBounds", ImageBoundsEnv),
    ("MiddleChannel", MiddleChannelEnv),
    ("ImageAndVector", ImageAndVectorEnv),
    ("SmallFrames", SmallFramesEnv),
]:
    gym.register(id=f"{_name}-v0", entry_point=_env)


def one_action(obs: np.ndarray) -> np.ndarray:
    """Ignores the batch: one action for every observation."""
    return np.zeros(1, np.float32)


def nan_actions(obs: np.ndarray) -> np.ndarray:
    return np.full((len(obs), 1), np.nan, np.float32)


def too_strong(obs: np.ndarray) -> np.ndarray:
    """Pendulum-v1's torque is bounded by 2."""
    return np.full((len(obs), 1), 5.0, np.float32)


def float_indices(obs: np.ndarray) -> np.ndarray:
    """For CartPole-v1: right answers, wrong dtype."""
    return (obs[:, 2] > 0).astype(np.float64)


def broken(obs: np.ndarray) -> np.ndarray:
    return obs["position"]  # written for a Dict observation


# --------------------------------------------------------------------------------------------
# hung user code (tests/test_timeouts.py): calls that never return, which task.timeout_s must end

FOREVER = 3600.0
"""How long a hung call sleeps: far beyond any test's limit (time.sleep is interruptible)."""


class HangingEnv(gym.Env):
    """A tiny task that hangs: in its ``hang_at_step``-th step of an episode (None: never) or in
    its ``hang_at_reset``-th reset in its life (None: never); episodes last ``length`` steps
    (None: they never end, and the spec sets no limit, so only task.max_episode_steps cuts them).
    Built in a worker process, it takes ``start_s`` seconds first, as a simulator that loads
    its assets would."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, hang_at_step=None, hang_at_reset=None, length=None, start_s=0.0):
        self.hang_at_step, self.hang_at_reset, self.length = hang_at_step, hang_at_reset, length
        self.resets = 0
        if multiprocessing.parent_process() is not None:
            time.sleep(start_s)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        if self.resets == self.hang_at_reset:
            time.sleep(FOREVER)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.hang_at_step:
            time.sleep(FOREVER)
        end = self.length is not None and self.t >= self.length
        return np.zeros(2, np.float32), 1.0, False, end, {}


gym.register(id="Hanging-v0", entry_point=HangingEnv)


def hanging_expert(obs: np.ndarray) -> np.ndarray:
    """An expert that never returns."""
    time.sleep(FOREVER)
    return np.zeros((len(obs), 1), np.float32)


STALLS_ON_CALL = 3
"""stalling_expert hangs on this call (per process): the task probe, which calls the expert
once, passes; a collection job, which calls it every step, hangs mid-episode."""
_stalling_calls = 0


def stalling_expert(obs: np.ndarray) -> np.ndarray:
    """A zero-action expert that hangs on its STALLS_ON_CALL-th call in a process."""
    global _stalling_calls
    _stalling_calls += 1
    if _stalling_calls >= STALLS_ON_CALL:
        time.sleep(FOREVER)
    return np.zeros((len(obs), 1), np.float32)
