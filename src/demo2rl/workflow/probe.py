"""The task probe: before any job runs, build the task from config and try it once.

One batch of :data:`BATCH` envs is made with ``task.env_kwargs``, reset once, the expert is
called once on the reset observations, and the batch takes up to :data:`STEPS` steps with the
expert's actions. Everything a job would otherwise find out late fails here, as a
:class:`demo2rl.config.ConfigError` that names the config key and what was found: an
``env_kwargs`` or expert ``kwargs`` key the callable does not take, a space the workflow does
not support, an env that fails to reset or step, an expert that raises or returns actions of the
wrong shape, dtype or range, an arm or vec env the task cannot use, and an env or expert call
that takes longer than ``task.timeout_s`` (:mod:`demo2rl.deadline`: a hung task fails a dry run
instead of hanging it). It takes well under a second for the shipped tasks. A task without an
expert (``task.expert: null``, demonstrations imported) steps with actions sampled from its
action space instead; :func:`demo2rl.config.check` refuses what needs an expert at run time
(collection, DAgger) before the probe.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from demo2rl import arms, deadline, tasks
from demo2rl.config import ConfigError
from demo2rl.demos import rollout
from demo2rl.learning import vec_env_choice
from demo2rl.observations import ObservationKind

log = logging.getLogger(__name__)

BATCH = 2
"""Envs in the probe's batch: the expert must handle a batch, not one observation."""
STEPS = 3
"""Steps the probe's batch takes (fewer if an episode ends), all with the expert's first actions:
the expert is called once (a user's expert may count its calls; tests/user_expert.py does)."""
ALL_ARMS = "all"
"""``rl.arms: all``: every registered arm that applies to the task."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """What the probe found: the task's spaces, the arms that run, how long the probe took."""

    observation_space: gym.Space
    action_space: gym.Space
    arms: tuple[str, ...]
    seconds: float

    @property
    def images(self) -> bool:
        """Whether the policy reads images (a CNN encoder, no observation normalisation)."""
        return ObservationKind.of(self.observation_space).image


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
    if expert_cfg is not None:
        expert_fn = tasks.resolve_entry_point(expert_cfg["entry_point"])
        _check_kwargs(
            "task.expert.kwargs",
            expert_fn,
            expert_cfg.get("kwargs") or {},
            f"expert {expert_cfg['entry_point']!r}",
        )
    frame_stack = task["frame_stack"]
    limit = functools.partial(deadline.limit, task["timeout_s"])
    env_what = f"the env {env_id!r}:"
    try:
        with limit(f"{env_what} make", lambda: f"the task probe's {BATCH} envs"):
            if frame_stack > 1:  # the env's own observations first: stacking reshapes them
                check_observation_space(tasks.spaces(env_id, env_kwargs)[0], env_id)
            env = tasks.make_vector_env(
                env_id, env_kwargs, BATCH, AutoresetMode.DISABLED, frame_stack=frame_stack
            )
    except ConfigError:
        raise
    except Exception as err:  # a user's env: anything can go wrong in its constructor
        raise ConfigError("task.env_kwargs", f"making {env_id!r} failed: {_describe(err)}") from err
    try:
        try:
            obs_space, act_space = env.single_observation_space, env.single_action_space
            check_observation_space(obs_space, env_id)
            check_action_space(act_space, env_id)
            with limit(f"{env_what} reset", lambda: _probe_episodes(0)):
                obs, info = env.reset(seed=list(range(BATCH)))
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(
                "task.env_id", f"resetting {env_id!r} failed: {_describe(err)}"
            ) from err
        check_encoder(obs_space, config["policy"]["cnn"])
        if expert_cfg is None:  # (no expert: the env steps with actions of its own space)
            act_space.seed(0)
            actions = np.stack([act_space.sample() for _ in range(BATCH)])
        else:
            actions = _expert_actions(expert_cfg, obs, info, env_id, act_space, limit)
        _step(env, np.asarray(actions).astype(act_space.dtype), limit, env_id)
    finally:
        env.close()
    check_vec_env(config["rl"], env_id, frame_stack)
    chosen = resolve_arms(config["rl"]["arms"], act_space, env_id)
    return Probe(obs_space, act_space, chosen, time.perf_counter() - start)


def _expert_actions(
    expert_cfg: Mapping[str, Any],
    obs: np.ndarray,
    info: Mapping[str, Any],
    env_id: str,
    act_space: gym.Space,
    limit: Any,
) -> np.ndarray:
    """The expert's actions on the batch's reset observations, checked against the task's
    action space; the expert is called once."""
    reads, what = _expert_input(expert_cfg["input"], obs, info, env_id)
    expert = tasks.load_expert(expert_cfg["entry_point"], expert_cfg.get("kwargs"))
    try:
        with limit(f"the expert {expert_cfg['entry_point']}", lambda: _probe_episodes(0)):
            actions = expert(reads)
    except Exception as err:
        raise ConfigError(
            "task.expert.entry_point",
            f"the expert raised on a batch of {BATCH} reset {what} of shape "
            f"{reads.shape}: {_describe(err)}",
        ) from err
    check_expert_actions(actions, act_space, batch=BATCH)
    return actions


def _step(env: gym.vector.VectorEnv, actions: np.ndarray, limit: Any, env_id: str) -> None:
    """Step the probe's batch up to :data:`STEPS` times with ``actions`` (until an episode
    ends: the batch does not reset itself), each step under the time limit ``limit``."""
    for step in range(1, STEPS + 1):
        try:
            with limit(f"the env {env_id!r}: step", lambda n=step - 1: _probe_episodes(n)):
                _, _, terminated, truncated, _ = env.step(actions)
        except Exception as err:
            raise ConfigError(
                "task.env_id", f"stepping {env_id!r} failed at step {step}: {_describe(err)}"
            ) from err
        if np.any(terminated) or np.any(truncated):
            return


def _probe_episodes(steps: int) -> str:
    """The probe's episodes, for a timeout's message."""
    return f"the task probe's {BATCH} episodes, seeds 0-{BATCH - 1}, after {steps} steps"


def check_observation_space(space: gym.Space, env_id: str) -> None:
    """The observations are one of the two kinds the policy reads: a numeric vector ``Box`` (any
    shape, flattened by the MLP), or images (``ObservationKind.image``: uint8 in [0, 255], HxWxC
    or CxHxW, read by a CNN). What looks like images but is not one of these, and images mixed
    with vectors in a ``Dict``, fail here, saying what to do."""
    if isinstance(space, gym.spaces.Dict):
        images = [k for k, sub in space.spaces.items() if ObservationKind.of(sub).looks_like_image]
        if images:
            others = ", ".join(k for k in space.spaces if k != images[0])
            raise ConfigError(
                "task.env_id",
                f"{env_id!r} has a Dict observation space whose key {images[0]!r} holds images "
                f"({space.spaces[images[0]]}) beside other keys ({others}): "
                "images mixed with vectors are not supported; observe the image alone and give "
                "the expert the rest as privileged state (task.expert.input: info.<key>)",
            )
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
    raise ConfigError("task.env_id", f"{env_id!r} observes {problem}")


def check_encoder(space: gym.Space, cnn: str) -> None:
    """Frames large enough for the image encoder ``policy.cnn`` (nothing to check for vectors)."""
    layout = ObservationKind.of(space).layout
    if layout is None:
        return
    from demo2rl.learning.policy import (
        MIN_FRAME,  # deferred: torch is imported only for image tasks
    )

    side = min(space.shape[1:] if layout == "CHW" else space.shape[:2])
    if side < MIN_FRAME[cnn]:
        smaller = [name for name, least in MIN_FRAME.items() if side >= least]
        fix = f"use policy.cnn: {smaller[0]}" if smaller else "use larger frames"
        raise ConfigError(
            "policy.cnn",
            f"the {cnn} encoder needs frames of at least {MIN_FRAME[cnn]} pixels a side; "
            f"{space.shape} has {side}: {fix}",
        )


def _expert_input(
    expert_input: str, obs: np.ndarray, info: Mapping[str, Any], env_id: str
) -> tuple[np.ndarray, str]:
    """What the expert reads at reset (``task.expert.input``, read as the rollouts read it),
    and what to call it in errors."""
    try:
        value = rollout.policy_reader(expert_input, env_id)(obs, info, "at reset")
    except rollout.RolloutError as err:
        raise ConfigError("task.expert.input", str(err)) from None
    if expert_input == rollout.OBSERVATION:
        return value, "observations"
    key = expert_input.partition(".")[2]
    if value.dtype == object or value.shape[:1] != (BATCH,):
        raise ConfigError(
            "task.expert.input",
            f"{env_id!r}'s info[{key!r}] is not an array with one row per env "
            f"(got {value.dtype} of shape {value.shape} for {BATCH} envs)",
        )
    return value, f"info[{key!r}] values"


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
    wanted: str | Sequence[str], action_space: gym.Space, env_id: str
) -> tuple[str, ...]:
    """The arms that run: ``rl.arms`` as the task allows.

    ``all`` is every registered arm (:mod:`demo2rl.arms`) that supports the task's action space;
    one that does not is left out with a note in the log. An arm named in an explicit list must
    exist and apply to the task, else a ConfigError names it. The control arm must be among them
    for the comparison to have one; that is the user's choice, not checked here.
    """
    if wanted == ALL_ARMS:
        chosen = []
        for arm in arms.REGISTRY.values():
            if arm.supports(action_space):
                chosen.append(arm.name)
            else:
                log.warning(
                    "rl.arms: all leaves out the %s arm: it supports %s actions, %r has %s",
                    arm.name,
                    arm.supported_actions,
                    env_id,
                    action_space,
                )
        if not chosen:
            raise ConfigError("rl.arms", f"no registered arm supports {action_space}")
        return tuple(chosen)
    for name in wanted:
        try:
            arm = arms.get(name)
        except ValueError as err:  # names the known arms
            raise ConfigError("rl.arms", str(err)) from None
        if not arm.supports(action_space):
            raise ConfigError(
                "rl.arms",
                f"the {name} arm supports {arm.supported_actions} actions; {env_id!r} "
                f"has {action_space}: leave {name!r} out of rl.arms (or use rl.arms: all)",
            )
    return tuple(wanted)


def check_vec_env(rl_cfg: Mapping[str, Any], env_id: str, frame_stack: int = 1) -> None:
    """The vec env kind ``rl.vec_env`` names exists for this task (and stacks frames if asked)."""
    if rl_cfg["vec_env"] != "native":
        return
    if vec_env_choice.native_vec_env(env_id) is None:
        raise ConfigError(
            "rl.vec_env",
            f"'native': {env_id!r} registers no batched VecEnv of its own; use auto (picks "
            "dummy here), dummy or subproc",
        )
    if frame_stack > 1:
        raise ConfigError(
            "rl.vec_env",
            f"'native' with task.frame_stack {frame_stack}: a task's own VecEnv stacks no "
            "frames; use auto (picks dummy when stacking), dummy or subproc",
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
    """``Type: message`` and where it was raised (the innermost frame; for a timeout, the line
    the call was at when its time ran out), for one error line."""
    frames = traceback.extract_tb(err.__traceback__)
    if isinstance(err, deadline.UserCodeTimeout):  # raised by the alarm's handler: skip it
        frames = [f for f in frames if f.filename != deadline.__file__]
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}{where}"
