"""Stable-Baselines3 VecEnv over the batched Racing-v0 core (no per-env Python loop)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from demo2rl.envs.racing import ACTION_SPACE, CarSeeds, RacingCore, RacingParams

_PER_CAR = ("speed", "progress", "laps", "lap_time", "off_track", "track_seed")


class RacingVecEnv(VecEnv):
    """SB3 VecEnv for Racing-v0 with same-step autoreset, like ``DummyVecEnv`` of ``RacingEnv``.

    Finished cars are reset inside ``step_wait``; their last observation is in
    ``infos[i]["terminal_observation"]`` and ``infos[i]["TimeLimit.truncated"]`` tells truncation
    from termination. ``seed(s)`` gives car i the seed ``s + i`` at the next ``reset()``.
    Rewards are float64 (bitwise equal to the gymnasium adapters').

    With the ``camera`` kwarg, observations are uint8 images. Every info dict (step infos and
    ``reset_infos``) holds ``"state"``, the car's state vector (float32 (OBS_DIM,)).

    There are no sub-env objects: ``get_attr`` returns per-car values for the info keys
    (speed, progress, laps, lap_time, off_track, track_seed; and state) and
    otherwise the shared attribute of this env for every index; ``set_attr`` sets a shared
    attribute (all indices only); ``env_method("render")`` renders each indexed car, other
    methods are called once on this env and their result repeated per index.
    """

    def __init__(self, num_envs: int = 1, *, render_mode: str | None = None, **kwargs: Any):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.render_mode = render_mode  # read by VecEnv.__init__ through get_attr
        self.params = RacingParams(**kwargs)
        self.core = RacingCore(num_envs, self.params)
        self._car_seeds = CarSeeds(num_envs)
        self._actions = np.zeros((num_envs, 2))
        super().__init__(num_envs, self.core.obs_space, ACTION_SPACE)
        self.metadata["render_fps"] = 10

    def reset(self) -> np.ndarray:
        """Reset every car, using the seeds from ``seed()`` once (then unseeded draws)."""
        idx = np.arange(self.num_envs)
        self.core.reset_cars(idx, self._car_seeds.track_seeds(idx, self._seeds))
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [self.core.info(i) for i in idx]
        return self.core.observe()

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions for ``step_wait``."""
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step all cars, autoresetting the finished ones in the same step."""
        core = self.core
        reward, terminated, truncated = core.step(self._actions)
        obs = core.observe()
        done = terminated | truncated
        arrays = core.info_arrays()
        columns = [arrays[key].tolist() for key in _PER_CAR]
        infos = [dict(zip(_PER_CAR, values, strict=True)) for values in zip(*columns, strict=True)]
        time_limit = (truncated & ~terminated).tolist()
        state = arrays["state"]
        for i, info in enumerate(infos):
            info["TimeLimit.truncated"] = time_limit[i]
            if info["lap_time"] != info["lap_time"]:  # NaN: no lap yet, as in RacingEnv
                del info["lap_time"]
            info["state"] = state[i]
        if done.any():
            idx = np.flatnonzero(done)
            for i in idx:
                infos[i]["terminal_observation"] = obs[i].copy()
            core.reset_cars(idx, self._car_seeds.track_seeds(idx, [None] * idx.size))
            obs = core.observe()
            for i in idx:
                self.reset_infos[i] = core.info(i)
        return obs, reward, done, infos

    def state_dict(self) -> dict[str, Any]:
        """Every car's state and track generator: what :meth:`load_state_dict` needs to go on
        exactly where this env stands (a resumed RL run continues its episodes bit for bit)."""
        return {**self.core.state_dict(), "car_rngs": self._car_seeds.state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back a :meth:`state_dict` of an env with the same number of cars and kwargs."""
        self.core.load_state_dict({k: v for k, v in state.items() if k != "car_rngs"})
        self._car_seeds.load_state(state["car_rngs"])
        self.reset_infos = [self.core.info(i) for i in range(self.num_envs)]

    def close(self) -> None:
        """Nothing to release."""

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One rgb_array frame per car (None each when render_mode is not rgb_array)."""
        if self.render_mode != "rgb_array":
            warnings.warn(f"render_mode is {self.render_mode!r}, not 'rgb_array'", stacklevel=2)
            return [None] * self.num_envs
        return [self.core.render(i) for i in range(self.num_envs)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """Per-car info values, or this env's shared attribute repeated per index."""
        idx = list(self._get_indices(indices))
        if attr_name in _PER_CAR:
            values = self.core.info_arrays()[attr_name]
            return [values[i].item() for i in idx]
        if attr_name == "state":
            values = self.core.observe_state()
            return [values[i] for i in idx]
        value = getattr(self, attr_name)
        return [value for _ in idx]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set a shared attribute (the cars share one core, so only for all indices at once)."""
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError("RacingVecEnv attributes are shared: set them for all indices")
        setattr(self, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs
    ) -> list[Any]:
        """``render`` per car; any other method once on this env, its result repeated per index."""
        idx = list(self._get_indices(indices))
        if method_name == "render":
            return [self.core.render(i) if self.render_mode else None for i in idx]
        result = getattr(self, method_name)(*method_args, **method_kwargs)
        return [result for _ in idx]

    def env_is_wrapped(
        self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
    ) -> list[bool]:
        """The cars are never wrapped in gymnasium wrappers."""
        return [False for _ in self._get_indices(indices)]
