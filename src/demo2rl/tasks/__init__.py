"""A task is a gymnasium id plus kwargs; an expert is a ``module:callable`` entry point.

Environment ids may use gymnasium's ``"package.module:EnvName-v0"`` form, which imports the module
(and so registers the environment) before looking the id up. The built-in ``Racing-v0`` is
registered by importing :mod:`demo2rl.envs`, which this module does.

:mod:`~demo2rl.tasks.checks` holds what demo2rl needs of a task (its spaces, its expert's
actions), checked before any job runs; :mod:`~demo2rl.tasks.deadline` bounds each call of a
task's code in time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import demo2rl.envs  # noqa: F401  (registers Racing-v0)
from demo2rl.observations import Layout, ObservationKind

PolicyFn = Callable[[np.ndarray], np.ndarray]
"""Any batched policy as a function, observations ``(B, *obs_shape)`` in, actions
``(B, *act_shape)`` out: an expert (:func:`load_expert`) or a network's actor
(:func:`demo2rl.learning.acting.make_actor`). The rollouts step envs with it, whichever it is."""


class TaskError(ValueError):
    """A task or expert specification that cannot be used; ``key``, where known, is the config
    key that sets it (:mod:`demo2rl.tasks.checks`)."""

    def __init__(self, problem: str, key: str | None = None) -> None:
        super().__init__(problem)
        self.key = key


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registered spec of ``env_id``, or a TaskError saying why there is none.

    ``"package.module:Env-v0"`` imports ``package.module`` first, as ``gymnasium.make`` does.
    """
    module, sep, name = env_id.rpartition(":")
    try:
        if sep:
            importlib.import_module(module)
        return gym.spec(name)
    except (gym.error.Error, ModuleNotFoundError, ImportError) as err:
        raise TaskError(f"unknown gymnasium env id {env_id!r}: {err}") from err


def own_episode_limit(env_id: str, env_kwargs: Mapping[str, Any]) -> int | None:
    """The step limit the task sets itself: ``env_kwargs``' ``max_episode_steps`` (a keyword of
    ``gymnasium.make``), else its spec's; None when it sets none (-1 in the kwargs: none)."""
    limit = env_kwargs.get("max_episode_steps", env_spec(env_id).max_episode_steps)
    return None if limit is None or limit < 0 else int(limit)


def episode_cap(
    env_id: str, env_kwargs: Mapping[str, Any], max_episode_steps: int | None
) -> int | None:
    """The steps after which an episode of the task is truncated: the task's own limit
    (:func:`own_episode_limit`), else ``max_episode_steps`` (``task.max_episode_steps``; None:
    no cap)."""
    own = own_episode_limit(env_id, env_kwargs)
    return own if own is not None else max_episode_steps


def _time_limit(
    env_id: str, env_kwargs: Mapping[str, Any], max_episode_steps: int | None
) -> dict[str, Any]:
    """``gymnasium.make``'s keyword that caps the task's episodes at ``max_episode_steps`` with
    its TimeLimit wrapper, when the task sets no limit of its own (else nothing)."""
    if max_episode_steps is None or own_episode_limit(env_id, env_kwargs) is not None:
        return {}
    return {"max_episode_steps": int(max_episode_steps)}


def make_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    *,
    frame_stack: int = 1,
    max_episode_steps: int | None = None,
    **extra: Any,
) -> gym.Env:
    """One environment of the task, ``frame_stack`` observations stacked as one
    (:func:`stack_frames`), its episodes truncated after ``max_episode_steps`` steps
    (gymnasium's TimeLimit) if the task sets no limit of its own (:func:`episode_cap`);
    ``extra`` e.g. ``render_mode``."""
    limit = _time_limit(env_id, env_kwargs, max_episode_steps)
    return stack_frames(gym.make(env_id, **dict(env_kwargs), **limit, **extra), frame_stack)


def spaces(
    env_id: str, env_kwargs: Mapping[str, Any], frame_stack: int = 1
) -> tuple[gym.Space, gym.Space]:
    """The task's (observation_space, action_space), read off one env."""
    env = make_env(env_id, env_kwargs, frame_stack=frame_stack)
    env.close()
    return env.observation_space, env.action_space


def stack_frames(env: gym.Env, n: int) -> gym.Env:
    """The last ``n`` observations as one: gymnasium's ``FrameStackObservation`` (the first
    observation of an episode repeated until there are ``n``), with the stack merged into the
    observation's own layout so that the network reads it as it reads one: images stack along
    their channels (``(H, W, n*C)`` or ``(n*C, H, W)``, oldest first), vectors are concatenated
    (``(n*D,)``). ``n == 1`` returns ``env`` itself."""
    if n == 1:
        return env
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box):
        raise TaskError(f"task.frame_stack: cannot stack observations of {space}")
    stacked = gym.wrappers.FrameStackObservation(env, n)
    merge = functools.partial(_merge_stack, layout=ObservationKind.of(space).layout)
    low, high = merge(stacked.observation_space.low), merge(stacked.observation_space.high)
    return gym.wrappers.TransformObservation(
        stacked, merge, gym.spaces.Box(low, high, low.shape, space.dtype)
    )


def _merge_stack(obs: np.ndarray, layout: Layout | None) -> np.ndarray:
    """``(n, *shape)`` stacked observations as one observation (see :func:`stack_frames`)."""
    obs = np.asarray(obs)
    n = obs.shape[0]
    if layout == "HWC":  # (n, H, W, C) -> (H, W, n*C)
        return np.ascontiguousarray(np.moveaxis(obs, 0, 2)).reshape(*obs.shape[1:3], -1)
    if layout == "CHW":  # (n, C, H, W) -> (n*C, H, W)
        return obs.reshape(n * obs.shape[1], *obs.shape[2:])
    return obs.reshape(-1)


def make_vector_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    num_envs: int,
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    frame_stack: int = 1,
    max_episode_steps: int | None = None,
) -> gym.vector.VectorEnv:
    """A batch of ``num_envs`` environments in this process.

    Uses the task's own batched implementation (its ``vector_entry_point``) when it registers
    one that takes an ``autoreset_mode``, as ``Racing-v0`` does, and gymnasium's
    ``SyncVectorEnv`` of single envs otherwise (e.g. gymnasium's own ``CartPoleVectorEnv``,
    which only resets on the next step), and always when frames are stacked (each single env
    stacks its own: :func:`stack_frames`). Single envs are capped at ``max_episode_steps`` as
    in :func:`make_env`; a task's own batched env must end its episodes itself (the rollouts
    cut them at :func:`episode_cap` whatever the env).
    """
    if frame_stack > 1:
        make = functools.partial(
            make_env,
            env_id,
            env_kwargs,
            frame_stack=frame_stack,
            max_episode_steps=max_episode_steps,
        )
        return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=autoreset_mode)
    if has_vector_env(env_id):
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="vector_entry_point",
            autoreset_mode=autoreset_mode,
            **dict(env_kwargs),
        )
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": autoreset_mode},
        **dict(env_kwargs),
        **_time_limit(env_id, env_kwargs, max_episode_steps),
    )


def has_vector_env(env_id: str) -> bool:
    """Whether the task registers a batched gymnasium env that takes an ``autoreset_mode`` (the
    rollouts need ``AutoresetMode.DISABLED``, which a vector env without that argument lacks)."""
    entry_point = env_spec(env_id).vector_entry_point
    if entry_point is None:
        return False
    params = parameters(resolve_entry_point(entry_point))
    return params is not None and "autoreset_mode" in params


def parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter] | None:
    """The parameters of ``fn`` by name, or None when Python cannot read its signature (some
    builtins and C callables): then nothing can be checked ahead of a call."""
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None


def resolve_entry_point(entry_point: str | Callable[..., Any]) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute; a callable (gymnasium
    also registers envs by class) is returned as it is."""
    if callable(entry_point):
        return entry_point
    module_name, sep, attr = entry_point.partition(":")
    if not sep or not module_name or not attr:
        raise TaskError(f"entry point {entry_point!r} is not of the form 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise TaskError(
            f"entry point {entry_point!r}: cannot import {module_name!r}: {err}"
        ) from err
    try:
        return functools.reduce(getattr, attr.split("."), module)
    except AttributeError as err:
        raise TaskError(f"entry point {entry_point!r}: {module_name!r} has no {attr!r}") from err


def load_expert(entry_point: str, kwargs: Mapping[str, Any] | None = None) -> PolicyFn:
    """The expert callable with its configured keyword arguments bound."""
    fn = resolve_entry_point(entry_point)
    if not callable(fn):
        raise TaskError(f"expert entry point {entry_point!r} is not callable")
    return functools.partial(fn, **dict(kwargs or {})) if kwargs else fn


def checked_actions(
    policy: PolicyFn, obs: np.ndarray, action_space: gym.Space, who: str = "expert"
) -> np.ndarray:
    """Call ``policy`` on a batch and check what it returns: shape, finiteness, dtype; the
    messages name it as ``who`` (the expert, user code, by default; DAgger's learner)."""
    actions = np.asarray(policy(obs))
    want = (obs.shape[0], *action_space.shape)
    if actions.shape != want:
        raise TaskError(f"{who} returned actions of shape {actions.shape}, expected {want}")
    if np.issubdtype(actions.dtype, np.floating) and not np.all(np.isfinite(actions)):
        raise TaskError(f"{who} returned non-finite actions")
    return actions.astype(action_space.dtype, copy=False)


def entry_point_modules(env_id: str, expert_entry_point: str | None) -> list[str]:
    """The modules a task's code lives in: its env's (and vector env's) registered entry points
    and its expert's (when it has one). Stages add them to their code fingerprint, so an edit to
    a user's env or expert reruns what used them."""
    spec = env_spec(env_id)
    entry_points = [spec.entry_point, spec.vector_entry_point, expert_entry_point]
    return [ep.partition(":")[0] for ep in entry_points if isinstance(ep, str) and ":" in ep]
