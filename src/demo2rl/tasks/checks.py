"""What demo2rl needs of a task, checked before any job runs (the workflow's task probe,
:mod:`demo2rl.workflow.probe`, calls these on the task it builds): observation and action spaces
the policy reads, an expert's actions that fit the action space, and keyword arguments the env
and the expert take. Each refusal is a :class:`~demo2rl.tasks.TaskError` whose ``key`` is the
config key to change."""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from demo2rl.observations import ObservationKind
from demo2rl.tasks import TaskError, deadline, env_spec, parameters, resolve_entry_point


def check_observation_space(space: gym.Space, env_id: str) -> None:
    """The observations are one of the two kinds the policy reads: a numeric vector ``Box`` (any
    shape, flattened by the MLP), or images (``ObservationKind.image``: uint8 in [0, 255], HxWxC
    or CxHxW, read by a CNN). What looks like images but is not one of these, and images mixed
    with vectors in a ``Dict``, fail here, saying what to do."""
    if isinstance(space, gym.spaces.Dict):
        images = [k for k, sub in space.spaces.items() if ObservationKind.of(sub).looks_like_image]
        if images:
            others = ", ".join(k for k in space.spaces if k != images[0])
            raise TaskError(
                f"{env_id!r} has a Dict observation space whose key {images[0]!r} holds images "
                f"({space.spaces[images[0]]}) beside other keys ({others}): "
                "images mixed with vectors are not supported; observe the image alone and give "
                "the expert the rest as privileged state (task.expert.input: info.<key>)",
                key="task.env_id",
            )
    if not isinstance(space, gym.spaces.Box):
        raise TaskError(
            f"{env_id!r} has observation space {space}: not supported (demo2rl supports Box "
            "observations; flatten a Dict or Tuple space with "
            "gymnasium.wrappers.FlattenObservation in your env's registration)",
            key="task.env_id",
        )
    if not np.issubdtype(space.dtype, np.number) or space.shape == () or 0 in space.shape:
        raise TaskError(
            f"{env_id!r} has observation space {space}: not supported (empty)",
            key="task.env_id",
        )
    kind = ObservationKind.of(space)
    if kind.image or not kind.looks_like_image:
        return
    shape = "x".join(map(str, space.shape))
    if space.dtype != np.uint8:
        problem = (
            f"{space.dtype} frames of shape {shape}: images must be uint8 in [0, 255], which "
            "the network scales to [0, 1]; a float image's scale is unknown. Convert frames to "
            "uint8 in your env (or, if these are not images, flatten them with "
            "gymnasium.wrappers.FlattenObservation)"
        )
    elif len(space.shape) != 3:
        problem = (
            f"uint8 observations of shape {shape}: images must be HxWxC or CxHxW; stacked frames "
            "belong in task.frame_stack, which stacks single frames along their channels"
        )
    elif np.any(space.low != 0) or np.any(space.high != 255):
        problem = (
            f"uint8 frames of shape {shape} with bounds other than [0, 255]: declare the "
            "observation space as Box(0, 255, shape, np.uint8), as stable-baselines3 expects"
        )
    else:
        problem = (
            f"frames of shape {shape}: the channel axis must be the smallest, first (CxHxW) or "
            "last (HxWxC), as stable-baselines3 tells channels; transpose them in your env"
        )
    raise TaskError(f"{env_id!r} observes {problem}", key="task.env_id")


def check_action_space(space: gym.Space, env_id: str) -> None:
    """Continuous ``Box`` actions (float) or ``Discrete`` actions starting at 0 are supported."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise TaskError(
                f"{env_id!r} has action space {space}: not supported (Discrete actions must "
                "start at 0, as stable-baselines3 expects)",
                key="task.env_id",
            )
        return
    raise TaskError(
        f"{env_id!r} has action space {space}: not supported (demo2rl supports float Box and "
        "Discrete actions)",
        key="task.env_id",
    )


def check_actions(actions: Any, space: gym.Space, *, batch: int) -> None:
    """The expert's answer to a batch of ``batch`` observations: an array of ``batch`` actions
    of the action space's shape, of a fitting dtype, finite and within the space's bounds."""
    key = "task.expert.entry_point"
    try:
        arr = np.asarray(actions)
    except Exception as err:
        raise TaskError(f"the expert returned {type(actions).__name__}: {err}", key=key) from err
    want = (batch, *space.shape)
    if arr.shape != want:
        raise TaskError(
            f"the expert returned actions of shape {arr.shape} for a batch of {batch} "
            f"observations; expected {want} for action space {space}",
            key=key,
        )
    if isinstance(space, gym.spaces.Discrete):
        if not np.issubdtype(arr.dtype, np.integer):
            raise TaskError(
                f"the expert returned {arr.dtype} actions for action space {space}; "
                "return integer action indices",
                key=key,
            )
        bad = (arr < space.start) | (arr >= space.start + space.n)
        if bad.any():
            raise TaskError(
                f"the expert returned action {arr[bad][0]}, outside action space {space}",
                key=key,
            )
        return
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise TaskError(f"the expert returned {arr.dtype} actions; expected real numbers", key=key)
    if not np.all(np.isfinite(arr)):
        raise TaskError(f"the expert returned non-finite actions: {arr.tolist()}", key=key)
    low, high = np.broadcast_to(space.low, want), np.broadcast_to(space.high, want)
    outside = (arr < low) | (arr > high)
    if outside.any():
        raise TaskError(
            f"the expert returned action value {arr[outside][0]} outside the action space's "
            f"bounds [{low[outside][0]}, {high[outside][0]}] ({space}); clip its actions",
            key=key,
        )


def env_factory(env_id: str) -> Any:
    """The callable ``gymnasium.make`` passes ``env_kwargs`` to (None if it cannot be read)."""
    try:
        return resolve_entry_point(env_spec(env_id).entry_point)
    except TaskError:
        return None


def check_kwargs(key: str, fn: Any, kwargs: Mapping[str, Any], what: str) -> None:
    """Each of ``kwargs`` is a parameter ``fn`` takes (nothing to check if it takes ``**``)."""
    params = parameters(fn) if fn is not None and kwargs else None
    if params is None:  # nothing to check, or no signature to read: the call itself will tell
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    if key == "task.env_kwargs":  # gymnasium.make's own keywords (max_episode_steps, ...)
        takes += [n for n in inspect.signature(gym.make).parameters if n not in ("id", "kwargs")]
    for name in kwargs:
        if name not in takes:
            raise TaskError(
                f"{what} takes no argument {name!r} (it takes: {', '.join(takes)})",
                key=f"{key}.{name}",
            )


def describe(err: BaseException) -> str:
    """``Type: message`` and where it was raised (the innermost frame; for a timeout, the line
    the call was at when its time ran out), for one error line."""
    frames = traceback.extract_tb(err.__traceback__)
    if isinstance(err, deadline.UserCodeTimeout):  # raised by the alarm's handler: skip it
        frames = [f for f in frames if f.filename != deadline.__file__]
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"
