"""The task probe: before any job runs, build the task from config and try it once.

One batch of :data:`BATCH` envs is made with ``task.env_kwargs``, reset once, and the expert is
called once on the reset observations. Everything a job would otherwise find out late fails
here, as a :class:`demo2rl.config.ConfigError` that names the config key and what was found:
an ``env_kwargs`` or expert ``kwargs`` key the callable does not take, a space the workflow does
not support, an expert that raises or returns actions of the wrong shape, dtype or range, an arm
or vec env the task cannot use. It takes well under a second for the shipped tasks.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from demo2rl import arms, tasks, vec_kinds
from demo2rl.config import ConfigError

log = logging.getLogger(__name__)

BATCH = 2
"""Envs in the probe's batch: the expert must handle a batch, not one observation."""
ALL_ARMS = "all"
"""``rl.inits: all`` (the default): every registered arm that applies to the task."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """What the probe found: the task's spaces, the arms that run, how long the probe took."""

    observation_space: gym.Space
    action_space: gym.Space
    arms: tuple[str, ...]
    seconds: float


def probe_task(config: Mapping[str, Any]) -> Probe:
    """Check the task of a (schema-validated) workflow config; raise ConfigError naming the key.

    Assumes ``task.env_id`` and the expert's entry point resolve (:func:`demo2rl.config.check`
    checks those first).
    """
    start = time.perf_counter()
    task = config["task"]
    env_id, env_kwargs = task["env_id"], task["env_kwargs"]
    expert_cfg = task["expert"]
    _check_kwargs("task.env_kwargs", _env_factory(env_id), env_kwargs, f"env {env_id!r}")
    expert_fn = tasks.resolve_entry_point(expert_cfg["entry_point"])
    _check_kwargs(
        "task.expert.kwargs",
        expert_fn,
        expert_cfg.get("kwargs") or {},
        f"expert {expert_cfg['entry_point']!r}",
    )
    try:
        env = tasks.make_vector_env(env_id, env_kwargs, BATCH, AutoresetMode.DISABLED)
    except Exception as err:  # a user's env: anything can go wrong in its constructor
        raise ConfigError("task.env_kwargs", f"making {env_id!r} failed: {_describe(err)}") from err
    try:
        obs_space, act_space = env.single_observation_space, env.single_action_space
        check_observation_space(obs_space, env_id)
        check_action_space(act_space, env_id)
        obs, _ = env.reset(seed=list(range(BATCH)))
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError("task.env_id", f"resetting {env_id!r} failed: {_describe(err)}") from err
    finally:
        env.close()
    expert = tasks.load_expert(expert_cfg["entry_point"], expert_cfg.get("kwargs"))
    try:
        actions = expert(obs)
    except Exception as err:
        raise ConfigError(
            "task.expert.entry_point",
            f"the expert raised on a batch of {BATCH} reset observations of shape "
            f"{obs.shape}: {_describe(err)}",
        ) from err
    check_expert_actions(actions, act_space, batch=BATCH)
    check_vec_env(config["rl"], env_id)
    chosen = resolve_arms(config["rl"]["inits"], act_space, env_id)
    return Probe(obs_space, act_space, chosen, time.perf_counter() - start)


def check_observation_space(space: gym.Space, env_id: str) -> None:
    """Only flat or shaped numeric ``Box`` observations are supported (for now)."""
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(
            "task.env_id",
            f"{env_id!r} has observation space {space}: not supported (demo2rl supports Box "
            "observations; flatten a Dict or Tuple space with "
            "gymnasium.wrappers.FlattenObservation in your env's registration)",
        )
    if not np.issubdtype(space.dtype, np.number) or space.shape == () or 0 in space.shape:
        raise ConfigError(
            "task.env_id", f"{env_id!r} has observation space {space}: not supported (empty)"
        )


def check_action_space(space: gym.Space, env_id: str) -> None:
    """Continuous ``Box`` actions (float) or ``Discrete`` actions starting at 0 are supported."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise ConfigError(
                "task.env_id",
                f"{env_id!r} has action space {space}: not supported (Discrete actions must "
                "start at 0, as stable-baselines3 expects)",
            )
        return
    raise ConfigError(
        "task.env_id",
        f"{env_id!r} has action space {space}: not supported (demo2rl supports float Box and "
        "Discrete actions)",
    )


def check_expert_actions(actions: Any, space: gym.Space, *, batch: int) -> None:
    """The expert's answer to a batch of ``batch`` observations: an array of ``batch`` actions
    of the action space's shape, of a fitting dtype, finite and within the space's bounds."""
    key = "task.expert.entry_point"
    try:
        arr = np.asarray(actions)
    except Exception as err:
        raise ConfigError(key, f"the expert returned {type(actions).__name__}: {err}") from err
    want = (batch, *space.shape)
    if arr.shape != want:
        raise ConfigError(
            key,
            f"the expert returned actions of shape {arr.shape} for a batch of {batch} "
            f"observations; expected {want} for action space {space}",
        )
    if isinstance(space, gym.spaces.Discrete):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ConfigError(
                key,
                f"the expert returned {arr.dtype} actions for action space {space}; "
                "return integer action indices",
            )
        bad = (arr < space.start) | (arr >= space.start + space.n)
        if bad.any():
            raise ConfigError(
                key, f"the expert returned action {arr[bad][0]}, outside action space {space}"
            )
        return
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ConfigError(key, f"the expert returned {arr.dtype} actions; expected real numbers")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(key, f"the expert returned non-finite actions: {arr.tolist()}")
    low, high = np.broadcast_to(space.low, want), np.broadcast_to(space.high, want)
    outside = (arr < low) | (arr > high)
    if outside.any():
        raise ConfigError(
            key,
            f"the expert returned action value {arr[outside][0]} outside the action space's "
            f"bounds [{low[outside][0]}, {high[outside][0]}] ({space}); clip its actions",
        )


def resolve_arms(
    inits: str | Sequence[str], action_space: gym.Space, env_id: str
) -> tuple[str, ...]:
    """The arms that run: ``rl.inits`` as the task allows.

    ``all`` is every registered arm (:mod:`demo2rl.arms`) that supports the task's action space;
    one that does not is left out with a note in the log. An arm named in an explicit list must
    exist and apply to the task, else a ConfigError names it. The control arm must be among them
    for the comparison to have one; that is the user's choice, not checked here.
    """
    if inits == ALL_ARMS:
        chosen = []
        for arm in arms.REGISTRY.values():
            if arm.supports(action_space):
                chosen.append(arm.name)
            else:
                log.warning(
                    "rl.inits: all leaves out the %s arm: it supports %s actions, %r has %s",
                    arm.name,
                    " or ".join(arm.action_spaces),
                    env_id,
                    action_space,
                )
        if not chosen:
            raise ConfigError("rl.inits", f"no registered arm supports {action_space}")
        return tuple(chosen)
    for name in inits:
        try:
            arm = arms.get(name)
        except ValueError as err:  # names the known arms
            raise ConfigError("rl.inits", str(err)) from None
        if not arm.supports(action_space):
            raise ConfigError(
                "rl.inits",
                f"the {name} arm supports {' or '.join(arm.action_spaces)} actions; {env_id!r} "
                f"has {action_space}: leave {name!r} out of rl.inits (or use rl.inits: all)",
            )
    return tuple(inits)


def check_vec_env(rl_cfg: Mapping[str, Any], env_id: str) -> None:
    """The vec env kind ``rl.vec_env`` names exists for this task."""
    if rl_cfg["vec_env"] == "native" and vec_kinds.native_vec_env(env_id) is None:
        raise ConfigError(
            "rl.vec_env",
            f"'native': {env_id!r} registers no batched VecEnv of its own; use auto (picks "
            "dummy here), dummy or subproc",
        )


def _env_factory(env_id: str) -> Any:
    """The callable ``gymnasium.make`` passes ``env_kwargs`` to (None if it cannot be read)."""
    try:
        return tasks.resolve_entry_point(tasks.env_spec(env_id).entry_point)
    except tasks.TaskError:
        return None


def _check_kwargs(key: str, fn: Any, kwargs: Mapping[str, Any], what: str) -> None:
    """Each of ``kwargs`` is a parameter ``fn`` takes (nothing to check if it takes ``**``)."""
    params = tasks.parameters(fn) if fn is not None and kwargs else None
    if params is None:  # nothing to check, or no signature to read: the call itself will tell
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    if key == "task.env_kwargs":  # gymnasium.make's own keywords (max_episode_steps, ...)
        takes += [n for n in inspect.signature(gym.make).parameters if n not in ("id", "kwargs")]
    for name in kwargs:
        if name not in takes:
            raise ConfigError(
                f"{key}.{name}", f"{what} takes no argument {name!r} (it takes: {', '.join(takes)})"
            )


def _describe(err: BaseException) -> str:
    """``Type: message`` and where it was raised (the innermost frame), for one error line."""
    frames = traceback.extract_tb(err.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"
