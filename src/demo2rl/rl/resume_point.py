"""Where a run stands at a rollout start, besides its weights: what the next rollout and update
draw from, so that a resumed run continues exactly as an uninterrupted one would.

stable-baselines3 saves a model's weights and optimizer, but not the rest of what the next
rollout depends on. A :class:`ResumePoint` holds it:

* the random streams: torch's (the policy's action sampling, the guide's minibatches; CUDA's
  too on a GPU), numpy's global one (PPO shuffles its minibatches with it, SB3's replay samples
  its batches with it), Python's, and the action space's (SAC's random warm-up actions);
* the algorithm's place in the env: the last observation (an off-policy run's unnormalised one
  too, what its replay stores) and which envs start an episode, and the finished episodes'
  statistics SB3 logs;
* what the logger holds for the next progress row (the last update's losses, an evaluation);
* the env's own state, when its VecEnv can give it: ``state_dict()`` returning a flat mapping
  of names to numpy arrays or JSON-able values, and ``load_state_dict(state)`` putting it back
  (the built-in task's :class:`demo2rl.envs.sb3.RacingVecEnv` does). Any other env cannot be
  saved: a resume then resets every env (new episodes, seeded anew), so the run continues from
  the checkpoint's weights and random streams but not from the episodes it was in; its results
  differ from an uninterrupted run's from that step on, and the log says so.

Everything is stored as tensors, numbers and strings (a checkpoint is loaded with
``weights_only=True``, never unpickled).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import deque
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import VecEnv

STATEFUL = ("state_dict", "load_state_dict")
"""The methods a task's VecEnv implements to be resumed in the middle of its episodes."""


@dataclasses.dataclass
class ResumePoint:
    """A run's position at a rollout start (see the module doc); :func:`capture` takes one,
    :func:`restore` puts it back, :func:`to_tensors`/:func:`from_tensors` store it."""

    timesteps: int
    n_updates: int
    rng: dict[str, Any]
    last_obs: Any
    episode_starts: np.ndarray
    episode_infos: list[dict[str, float]]
    successes: list[Any]
    env: dict[str, Any] | None
    pending_log: str = "{}"
    last_original_obs: Any = None

    @property
    def env_saved(self) -> bool:
        return self.env is not None


def env_is_stateful(env: VecEnv) -> bool:
    """Whether the innermost VecEnv can save and restore its state (:data:`STATEFUL`)."""
    inner = env.unwrapped
    return all(callable(getattr(inner, name, None)) for name in STATEFUL)


def capture(model: BaseAlgorithm) -> ResumePoint:
    """The model's position now (copies: later steps do not change it)."""
    env = model.get_env()
    assert env is not None
    rng: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": _numpy_state(),
        "python": json.dumps(random.getstate()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    space_rng = model.action_space._np_random
    if space_rng is not None:
        rng["action_space"] = json.dumps(space_rng.bit_generator.state)
    return ResumePoint(
        timesteps=int(model.num_timesteps),
        n_updates=int(model._n_updates),
        rng=rng,
        last_obs=_copy(model._last_obs),
        episode_starts=np.array(model._last_episode_starts, dtype=bool),
        episode_infos=[dict(i) for i in (model.ep_info_buffer or [])],
        successes=list(model.ep_success_buffer or []),
        env=_copy(env.unwrapped.state_dict()) if env_is_stateful(env) else None,
        pending_log=json.dumps(
            {
                "values": {k: _number(v) for k, v in model.logger.name_to_value.items()},
                "excluded": model.logger.name_to_excluded,
            }
        ),
        last_original_obs=_copy(getattr(model, "_last_original_obs", None)),
    )


def restore_log(logger: Logger, position: ResumePoint) -> None:
    """Put back what the logger held for its next row (after ``model.set_logger``)."""
    pending = json.loads(position.pending_log)
    for key, value in pending.get("values", {}).items():
        logger.record(key, value, exclude=tuple(pending["excluded"].get(key, ())) or None)


def restore(model: BaseAlgorithm, position: ResumePoint) -> None:
    """Put ``position`` back into ``model`` (built afresh, weights already loaded): its env's
    state if saved, else a reset of every env (already seeded by the caller); its counters,
    last observation and random streams. ``model.learn(..., reset_num_timesteps=False)`` then
    continues from there without resetting the env."""
    env = model.get_env()
    assert env is not None
    model.num_timesteps, model._n_updates = position.timesteps, position.n_updates
    window = model._stats_window_size
    model.ep_info_buffer = deque(position.episode_infos, maxlen=window)
    model.ep_success_buffer = deque(position.successes, maxlen=window)
    if position.env is not None and env_is_stateful(env):
        env.unwrapped.load_state_dict(position.env)
        env.unwrapped._reset_seeds()  # the seeds of the build's seeding: no reset will use them
        model._last_obs = _copy(position.last_obs)
        model._last_episode_starts = position.episode_starts.copy()
        if position.last_original_obs is not None:
            model._last_original_obs = _copy(position.last_original_obs)
    else:
        model._last_obs = env.reset()
        model._last_episode_starts = np.ones(env.num_envs, dtype=bool)
        normalizing = getattr(model, "_vec_normalize_env", None)
        if normalizing is not None:  # what SB3 does at a reset: what a replay stores
            model._last_original_obs = normalizing.get_original_obs()
    torch.set_rng_state(position.rng["torch"])
    if "cuda" in position.rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(position.rng["cuda"])
    np.random.set_state(_numpy_from(position.rng["numpy"]))  # noqa: NPY002 (what SB3 draws from)
    random.setstate(_python_from(position.rng["python"]))
    if "action_space" in position.rng:
        model.action_space.np_random.bit_generator.state = json.loads(position.rng["action_space"])


def to_tensors(position: ResumePoint) -> dict[str, Any]:
    """``position`` as tensors, numbers and strings (for ``torch.save``)."""
    return {
        "timesteps": position.timesteps,
        "n_updates": position.n_updates,
        "rng": position.rng,
        "last_obs": _tensors(position.last_obs),
        "episode_starts": torch.from_numpy(position.episode_starts.copy()),
        "episode_infos": json.dumps(position.episode_infos, default=_number),  # numpy scalars
        "successes": json.dumps([bool(s) for s in position.successes]),
        "env": None if position.env is None else _tensors(position.env),
        "pending_log": position.pending_log,
        "last_original_obs": _tensors(position.last_original_obs),
    }


def from_tensors(saved: dict[str, Any]) -> ResumePoint:
    """The inverse of :func:`to_tensors`."""
    return ResumePoint(
        timesteps=int(saved["timesteps"]),
        n_updates=int(saved["n_updates"]),
        rng=saved["rng"],
        last_obs=_arrays(saved["last_obs"]),
        episode_starts=saved["episode_starts"].numpy().astype(bool),
        episode_infos=json.loads(saved["episode_infos"]),
        successes=json.loads(saved["successes"]),
        env=None if saved["env"] is None else _arrays(saved["env"]),
        pending_log=saved["pending_log"],
        last_original_obs=_arrays(saved["last_original_obs"]),
    )


def _number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    return {
        "name": name,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _numpy_from(state: dict[str, Any]) -> tuple[Any, ...]:
    keys = state["keys"].numpy().astype(np.uint32)
    return (state["name"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"])


def _python_from(text: str) -> tuple[Any, ...]:
    version, internal, gauss = json.loads(text)
    return version, tuple(internal), gauss


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _tensors(value: Any) -> Any:
    """numpy arrays (in dicts) as tensors; unsigned ints other than uint8 widened to int64."""
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "u" and value.dtype != np.uint8:
            return {"uint": torch.from_numpy(value.astype(np.int64)), "dtype": value.dtype.str}
        return torch.from_numpy(np.ascontiguousarray(value).copy())
    return value


def _arrays(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"uint", "dtype"}:
            return value["uint"].numpy().astype(np.dtype(value["dtype"]))
        return {k: _arrays(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return value.numpy()
    return value
