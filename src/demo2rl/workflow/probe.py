"""The task probe: before any job runs, build the task from config and try it once.

One batch of :data:`BATCH` envs is made with ``task.env_kwargs``, reset once, the expert is
called once on the reset observations, and the batch takes up to :data:`STEPS` steps with the
expert's actions. Everything a job would otherwise find out late fails here, as a
:class:`demo2rl.config.ConfigError` that names the config key and what was found: an
``env_kwargs`` or expert ``kwargs`` key the callable does not take, a space the workflow does
not support, an env that fails to reset or step, an expert that raises or returns actions of the
wrong shape, dtype or range (what demo2rl needs of any task: :mod:`demo2rl.tasks.checks`), an
arm or vec env the task cannot use, and an env or expert call that takes longer than
``task.timeout_s`` (:mod:`demo2rl.tasks.deadline`: a hung task fails a dry run instead of
hanging it). It takes well under a second for the shipped tasks. A task without an expert
(``task.expert: null``, demonstrations imported) steps with actions sampled from its action
space instead; :func:`demo2rl.config.check` refuses what needs an expert at run time
(collection, DAgger) before the probe.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from demo2rl import arms, tasks
from demo2rl.config import ConfigError
from demo2rl.demos import rollout
from demo2rl.learning import vec_env_choice
from demo2rl.observations import ObservationKind
from demo2rl.tasks import checks, deadline
from demo2rl.tasks.checks import describe

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
    """What the probe found: the task's spaces, the arms that run."""

    observation_space: gym.Space
    action_space: gym.Space
    arms: tuple[str, ...]

    @property
    def images(self) -> bool:
        """Whether the policy reads images (a CNN encoder, no observation normalisation)."""
        return ObservationKind.of(self.observation_space).image


def probe_task(config: Mapping[str, Any]) -> Probe:
    """Check the task of a (schema-validated) workflow config; raise ConfigError naming the key
    (a check's refusal, :mod:`demo2rl.tasks.checks`, as the ConfigError of its key).

    Assumes ``task.env_id`` and the expert's entry point resolve (:func:`demo2rl.config.check`
    checks those first).
    """
    try:
        return _probe(config)
    except tasks.TaskError as err:
        if err.key is None:
            raise
        raise ConfigError(err.key, str(err)) from err.__cause__


def _refusal(err: Exception) -> bool:
    """Whether ``err`` is a check's refusal that names its config key (passed on as it is),
    not an error of the user's code."""
    return isinstance(err, ConfigError) or (
        isinstance(err, tasks.TaskError) and err.key is not None
    )


def _probe(config: Mapping[str, Any]) -> Probe:
    """:func:`probe_task`, a check's refusal raised as it is."""
    task = config["task"]
    env_id, env_kwargs = task["env_id"], task["env_kwargs"]
    expert_cfg = task["expert"]
    checks.check_kwargs(
        "task.env_kwargs", checks.env_factory(env_id), env_kwargs, f"env {env_id!r}"
    )
    if expert_cfg is not None:
        expert_fn = tasks.resolve_entry_point(expert_cfg["entry_point"])
        checks.check_kwargs(
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
                checks.check_observation_space(tasks.spaces(env_id, env_kwargs)[0], env_id)
            env = tasks.make_vector_env(
                env_id, env_kwargs, BATCH, AutoresetMode.DISABLED, frame_stack=frame_stack
            )
    except Exception as err:  # a user's env: anything can go wrong in its constructor
        if _refusal(err):
            raise
        raise ConfigError("task.env_kwargs", f"making {env_id!r} failed: {describe(err)}") from err
    try:
        try:
            obs_space, act_space = env.single_observation_space, env.single_action_space
            checks.check_observation_space(obs_space, env_id)
            checks.check_action_space(act_space, env_id)
            with limit(f"{env_what} reset", lambda: _probe_episodes(0)):
                obs, info = env.reset(seed=list(range(BATCH)))
        except Exception as err:
            if _refusal(err):
                raise
            raise ConfigError(
                "task.env_id", f"resetting {env_id!r} failed: {describe(err)}"
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
    return Probe(obs_space, act_space, chosen)


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
            f"{reads.shape}: {describe(err)}",
        ) from err
    checks.check_actions(actions, act_space, batch=BATCH)
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
                "task.env_id", f"stepping {env_id!r} failed at step {step}: {describe(err)}"
            ) from err
        if np.any(terminated) or np.any(truncated):
            return


def _probe_episodes(steps: int) -> str:
    """The probe's episodes, for a timeout's message."""
    return f"the task probe's {BATCH} episodes, seeds 0-{BATCH - 1}, after {steps} steps"


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
