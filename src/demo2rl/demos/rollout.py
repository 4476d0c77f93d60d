"""Running a batched policy (an expert, a clone, an RL agent) for one episode per seed.

Each episode's trajectory depends only on its seed and the policy, not on the batch size or on
the slot it ran in; episodes come back in the order of their seeds.

:func:`run_episodes` has two parts, each readable alone: the scheduler (:class:`_Slots`, which
slot of the batch runs which episode, and :func:`_batch_steps`, which steps the batch, with the
checks and time limits) and the layout of the results (:class:`_Results`, the per-step rows and
the per-episode tables and info). Who acts is :class:`_Actors`': one policy, whose actions are
executed and recorded, or (DAgger, :class:`Teacher`) a learner and an expert, whose labels are
recorded whichever of the two acted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode

from demo2rl import tasks
from demo2rl.demos import dataset
from demo2rl.tasks import deadline

if TYPE_CHECKING:
    from demo2rl.config import TaskConfig

OBSERVATION = "observation"
"""The policy input that is the observation itself (``task.expert.input``'s default)."""


TEACHER_STEPS = "teacher_steps"
"""The episode table's column, with a :class:`Teacher`: per episode, the steps on which the
teacher's action was the one executed."""


class RolloutError(RuntimeError):
    """The task or policy produced something that cannot be recorded."""


@dataclasses.dataclass(frozen=True)
class Teacher:
    """The expert of a DAgger rollout (Ross et al. 2011): it labels every step the learner's
    episodes visit, and drives some of them.

    With a teacher, :func:`run_episodes`' ``policy`` is the learner. On each step of each
    episode both are called on what they read; the action executed is the teacher's with
    probability ``beta`` (:func:`teacher_drives`: fixed by the episode's seed and the step),
    else the learner's, and the action recorded is always the teacher's: the label that DAgger
    trains on.

    :param policy: the expert, a batched callable (:func:`demo2rl.tasks.load_expert`).
    :param input: what it reads, as ``run_episodes``' ``policy_input`` (``task.expert.input``:
        the observations, or privileged ``"info.<key>"``).
    :param beta: the probability that its action is executed, per episode and step: 1, it
        drives every step (an expert collection of the same seeds); 0, the learner does.
    """

    policy: tasks.PolicyFn
    input: str = OBSERVATION
    beta: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.beta <= 1.0:  # (false for NaN too)
            raise ValueError(f"a teacher's beta must be in [0, 1], got {self.beta}")


def teacher_drives(episode_seeds: np.ndarray, steps: np.ndarray, beta: float) -> np.ndarray:
    """Whether the teacher's action is executed at step ``steps`` (0: an episode's first action)
    of the episodes of seed ``episode_seeds`` (arrays of one shape): ``u(seed, step) < beta``,
    ``u`` uniform in [0, 1) from a counter-based hash (SplitMix64's finaliser, twice) of the two
    numbers. So the choice is the same whichever batch, slot or shard an episode runs in, costs
    a few array operations per step, and a higher ``beta`` only turns learner steps into
    teacher steps."""
    seeds = np.asarray(episode_seeds, dtype=np.int64).astype(np.uint64)
    t = np.asarray(steps, dtype=np.int64).astype(np.uint64)
    u = (_splitmix64(_splitmix64(seeds) + t) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return u < beta


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function of ``x`` (uint64, wrapping): a well-mixed 64-bit value."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def run_episodes(
    task: TaskConfig,
    policy: tasks.PolicyFn,
    episode_seeds: Sequence[int],
    *,
    n_envs: int,
    on_progress: Callable[[int, int], None] | None = None,
    step_means: bool = False,
    episode_ids: Sequence[int] | None = None,
    policy_input: str = OBSERVATION,
    keep_observations: bool = True,
    teacher: Teacher | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run ``policy`` for one episode per seed on ``task``; returns (steps, episodes, info)
    arrays. Of the task it uses the env (``env_id``, ``env_kwargs``), ``frame_stack``,
    ``max_episode_steps`` and ``timeout_s``, never its expert: the policy run, and what it
    reads, are ``policy`` and ``policy_input`` (with a ``teacher``, the teacher too).

    Episodes are laid out in the order of ``episode_seeds``, each in time order, whatever order
    they finish in. Rows are gathered batch-wise and grouped once at the end. ``info`` holds the
    numeric info values at each episode's last step; with ``step_means`` it also holds
    ``"<key>.mean"``, each episode's mean of that value over its steps (e.g. the fraction of
    steps off track), skipping steps where the env did not report it.

    A non-finite observation or reward raises :class:`RolloutError` naming the env, the episode
    (its number in ``episode_ids``, by default its position in ``episode_seeds``, and its seed)
    and the step (1 for the first ``step`` call of the episode; 0 for the reset observation).

    ``task.frame_stack`` observations are stacked as one (:func:`demo2rl.tasks.stack_frames`).
    ``policy_input`` is what the policy reads: the observations, or ``"info.<key>"``, the vector
    env's ``info[key]`` after each reset and step (a privileged expert's state; the recorded
    observations are still the env's). Without ``keep_observations`` the steps hold no
    observations (an evaluation, which needs none, then holds no frames).

    Every episode ends within ``task.max_episode_steps`` steps, unless the env sets a limit of
    its own (:func:`demo2rl.tasks.episode_cap`): cut there, it is truncated, as gymnasium's
    TimeLimit does, so the steps held are bounded by the episodes times the cap. Each batched
    reset and step of the env and each call of the policy must return within
    ``task.timeout_s`` seconds (None: no limit), else
    :class:`demo2rl.tasks.deadline.UserCodeTimeout` names the call, the env or the expert, and the
    episodes it was running (their numbers, seeds and steps).

    With a ``teacher`` (:class:`Teacher`), ``policy`` is the learner, reading ``policy_input``:
    each step executes the teacher's or the learner's action and records the teacher's, and the
    episodes table has :data:`TEACHER_STEPS`. Every recorded step is one the teacher labelled.
    Messages name the ``teacher`` as the expert and ``policy`` as the learner.
    """
    env_id, env_kwargs = task.env_id, task.env_kwargs
    n = len(episode_seeds)
    batch = min(n_envs, n)
    env = tasks.make_vector_env(
        env_id, env_kwargs, batch, AutoresetMode.DISABLED, task.frame_stack, task.max_episode_steps
    )
    ids = list(range(n)) if episode_ids is None else [int(i) for i in episode_ids]
    slots = _Slots(env_id, episode_seeds, ids, batch)
    results = _Results(
        n, env.single_observation_space.shape, keep_observations, step_means, teacher is not None
    )
    for step in _batch_steps(
        env,
        slots,
        _Actors(env_id, policy, policy_input, teacher),
        cap=tasks.episode_cap(env_id, env_kwargs, task.max_episode_steps),
        timeout_s=task.timeout_s,
        on_progress=on_progress,
    ):
        results.add(step)
    env.close()
    return results.tables(episode_seeds)


def policy_reader(
    policy_input: str, env_id: str
) -> Callable[[np.ndarray, Mapping[str, Any], str], np.ndarray]:
    """``read(obs, info, when)``: what the policy reads from a vector env's batch of
    observations and info (``policy_input``: see :func:`run_episodes`). A missing info key is a
    :class:`RolloutError` naming the env, the key, ``when`` it was missing ("at reset" or
    "after a step") and the keys the info has. The task probe reads the expert's input with it."""
    if policy_input == OBSERVATION:
        return lambda obs, info, when: obs
    source, _, key = policy_input.partition(".")
    if source != "info" or not key:
        raise ValueError(f"policy input {policy_input!r} is neither 'observation' nor 'info.<key>'")

    def read(obs: np.ndarray, info: Mapping[str, Any], when: str) -> np.ndarray:
        if key not in info:
            has = ", ".join(k for k in sorted(info) if not k.startswith("_")) or "nothing"
            raise RolloutError(
                f"{env_id!r} reports no info[{key!r}] {when} for the expert to read "
                f"(task.expert.input {policy_input!r}); its info has: {has}"
            )
        return np.asarray(info[key])

    return read


# --------------------------------------------------------------------------------------------
# the scheduler: which slot of the batch runs which episode, stepping the batch


class _Slots:
    """Which episode each env slot of the batch runs (its position in the seeds; -1: idle) and
    the steps it has taken in it. Slot ``s`` starts episode ``s``; a slot whose episode ends
    takes the next episode not yet started, in the order of the seeds, or goes idle when none is
    left. An episode depends only on its seed, so the slot it runs in changes nothing. Errors
    and timeouts name the episodes by their ``ids`` (and seeds)."""

    def __init__(self, env_id: str, seeds: Sequence[int], ids: Sequence[int], batch: int) -> None:
        self.env_id = env_id
        self.seeds = seeds
        self.ids = ids
        self.episode = np.arange(batch)  # per slot: the episode it runs; -1: idle
        self.step = np.zeros(batch, np.int64)  # per slot: steps taken in its episode
        self.next_episode = batch  # the first episode not yet started

    def running(self) -> np.ndarray:
        """The slots that run an episode (a mask)."""
        return self.episode >= 0

    def current_seeds(self) -> np.ndarray:
        """Per slot, the seed of the episode it runs (of the last episode for an idle slot)."""
        return np.asarray(self.seeds, dtype=np.int64)[self.episode]

    def first_seeds(self) -> list[int]:
        """The seeds of the episodes the slots start with, one per slot."""
        return [int(s) for s in self.seeds[: len(self.episode)]]

    def refill(self, done: np.ndarray) -> list[int | None]:
        """Give each slot of ``done`` (a mask: slots whose episode ended) the next episode, or
        leave it idle when none is left; returns each slot's reset seed (None: a slot not given
        a new episode)."""
        reset_seeds: list[int | None] = [None] * len(self.episode)
        for slot in np.flatnonzero(done):
            if self.next_episode < len(self.seeds):
                self.episode[slot] = self.next_episode
                reset_seeds[slot] = int(self.seeds[self.next_episode])
                self.next_episode += 1
            else:
                self.episode[slot] = -1
        return reset_seeds

    def describe(self, slots: np.ndarray | None = None, most: int = 8) -> str:
        """The running episodes of ``slots`` (a mask; default: every running one), for a
        timeout's message: number (in ``ids``), seed and steps taken."""
        mask = self.running() if slots is None else slots & self.running()
        parts = [
            f"{self.ids[self.episode[s]]} (seed {int(self.seeds[self.episode[s]])}, "
            f"after {int(self.step[s])} steps)"
            for s in sorted(np.flatnonzero(mask), key=lambda s: self.episode[s])
        ]
        more = f" and {len(parts) - most} more" if len(parts) > most else ""
        return f"episode{'s' if len(parts) > 1 else ''} {', '.join(parts[:most])}{more}"

    def check_finite(self, values: np.ndarray, what: str, slots: np.ndarray | None = None) -> None:
        """Raise a RolloutError if ``values`` (one row per slot: observations or rewards) are NaN
        or infinite in one of ``slots`` (a mask; default: every running one), naming the env,
        the first such episode and its step."""
        slots = self.running() if slots is None else slots
        values = np.asarray(values)
        if not np.issubdtype(values.dtype, np.floating):
            return
        bad = np.flatnonzero(slots & ~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
        if not len(bad):
            return
        slot = min(bad, key=lambda s: self.episode[s])
        episode = self.episode[slot]
        more = f" (and in {len(bad) - 1} more episode(s) at once)" if len(bad) > 1 else ""
        raise RolloutError(
            f"{self.env_id} returned a non-finite {what} (NaN or inf) in episode "
            f"{self.ids[episode]} (seed {int(self.seeds[episode])}) at step "
            f"{int(self.step[slot])}{more}"
        )


@dataclasses.dataclass(frozen=True)
class _BatchStep:
    """One step of the whole batch: what :class:`_Results` records of it."""

    obs: np.ndarray
    """The observations the actions were chosen on (at the first step, the reset's)."""
    actions: np.ndarray
    """The recorded actions: the executed ones, or with a teacher its labels."""
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    """Truncated by the env or at the episode cap."""
    episode: np.ndarray
    """Per slot: the episode it ran at this step (-1: idle)."""
    info: Mapping[str, Any]
    """The step's info."""
    done: np.ndarray
    """The slots whose episode ended at this step (a mask)."""
    next_obs: np.ndarray
    """The observations after the step: in the ``done`` slots their episodes' final ones."""
    driven: np.ndarray | None
    """With a teacher, the slots where its action was the one executed (a mask)."""


class _Actors:
    """Who acts in the batch, on what: ``policy`` alone, reading ``policy_input`` (its actions
    executed and recorded; "the expert" in messages), or with a ``teacher`` the learner
    ``policy`` and the teacher (the expert), each reading its own input (:class:`Teacher`)."""

    def __init__(
        self, env_id: str, policy: tasks.PolicyFn, policy_input: str, teacher: Teacher | None
    ) -> None:
        self.policy, self.teacher = policy, teacher
        self.readers = [policy_reader(policy_input, env_id)]
        self.policy_what = f"the expert {_callable_name(policy)}"
        if teacher is not None:
            self.readers.append(policy_reader(teacher.input, env_id))
            self.policy_what = f"the learner {_callable_name(policy)}"
            self.teacher_what = f"the expert {_callable_name(teacher.policy)}"

    def read(self, obs: np.ndarray, info: Mapping[str, Any], when: str) -> list[np.ndarray]:
        """What each reads of a batch's observations and info (``when``: see
        :func:`policy_reader`): the policy's input, then the teacher's."""
        return [read(obs, info, when) for read in self.readers]

    def act(
        self, inputs: Sequence[np.ndarray], slots: _Slots, space: Any, limit: Callable[[str], Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(executed, recorded, driven): the batch's actions to execute, those to record and,
        with a teacher, the slots where its action is the executed one (:func:`teacher_drives`
        of the slots' episodes and steps). The learner is not called when the teacher drives
        every running slot. Each call runs under ``limit(what)``."""
        if self.teacher is None:
            with limit(self.policy_what):
                actions = tasks.checked_actions(self.policy, inputs[0], space)
            return actions, actions, None
        with limit(self.teacher_what):
            labels = tasks.checked_actions(self.teacher.policy, inputs[1], space)
        driven = teacher_drives(slots.current_seeds(), slots.step, self.teacher.beta)
        if (driven | ~slots.running()).all():
            return labels, labels, driven
        with limit(self.policy_what):
            own = tasks.checked_actions(self.policy, inputs[0], space, who="the learner")
        executed = np.where(driven.reshape(-1, *[1] * (own.ndim - 1)), labels, own)
        return executed, labels, driven


def _batch_steps(
    env: Any,
    slots: _Slots,
    actors: _Actors,
    *,
    cap: int | None,
    timeout_s: float | None,
    on_progress: Callable[[int, int], None] | None,
) -> Iterator[_BatchStep]:
    """Step the batch ``env`` (a vector env without autoreset) until every episode of ``slots``
    has ended, yielding each step: reset every slot to its first episode, then step with the
    ``actors``' actions (on what they read of each observation and info), truncate episodes
    at ``cap`` steps, and reset the slots whose episode ended to their next one (an idle slot
    whose env ended is reset too, without a seed). Each env and policy call runs under
    ``timeout_s``; ``on_progress(done, total)`` follows the episodes as they end."""
    n = len(slots.seeds)
    space = env.single_action_space
    env_what = f"the env {slots.env_id!r}:"

    def limit(what: str, mask: np.ndarray | None = None) -> Any:
        """``what`` (a call of the env or the expert) under ``timeout_s``; ``mask``: the slots
        it runs, for the message (default: every running one)."""
        return deadline.limit(timeout_s, what, lambda: slots.describe(mask))

    with limit(f"{env_what} reset"):
        obs, info = env.reset(seed=slots.first_seeds())
    inputs = actors.read(obs, info, "at reset")
    done_count = 0
    while done_count < n:
        slots.check_finite(obs, "observation")
        actions, recorded, driven = actors.act(inputs, slots, space, limit)
        with limit(f"{env_what} step"):
            next_obs, rewards, terminated, truncated, info = env.step(actions)
        slots.step += 1
        if cap is not None:  # as gymnasium's TimeLimit, also for a task's own batched env
            truncated = truncated | (slots.step >= cap)
        slots.check_finite(rewards, "reward")
        ended = terminated | truncated  # idle slots end episodes too: they must be reset
        done = ended & slots.running()
        if done.any():
            slots.check_finite(next_obs, "observation", done)  # final observations
        episode = slots.episode.copy()
        yield _BatchStep(
            obs, recorded, rewards, terminated, truncated, episode, info, done, next_obs, driven
        )
        if not ended.any():
            obs, inputs = next_obs, actors.read(next_obs, info, "after a step")
            continue
        if done.any():
            done_count += int(done.sum())
            if on_progress:
                on_progress(done_count, n)
        reset_seeds = slots.refill(done)
        slots.step[ended] = 0
        step_inputs = actors.read(next_obs, info, "after a step")
        with limit(f"{env_what} reset", ended):
            obs, info = env.reset(seed=reset_seeds, options={"reset_mask": ended})
        obs = _where_slots(ended, obs, next_obs)
        reset_inputs = actors.read(obs, info, "at reset")
        inputs = [_where_slots(ended, a, b) for a, b in zip(reset_inputs, step_inputs, strict=True)]


def _where_slots(mask: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per slot (the first axis), the row of ``a`` where ``mask`` holds, else that of ``b``."""
    return np.where(mask.reshape(-1, *[1] * (a.ndim - 1)), a, b)


def _callable_name(fn: Any) -> str:
    """``module:qualname`` of a callable (of the function a ``functools.partial`` binds)."""
    fn = getattr(fn, "func", fn)
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"


# --------------------------------------------------------------------------------------------
# the layout of the results: per-step rows and per-episode tables


class _Results:
    """What :func:`run_episodes` returns, gathered step by step: the rows of every step (of
    every slot, idle ones too; their observations only with ``keep_observations``), each
    episode's final observation and info values at its last step, and with ``step_means`` the
    sums and counts of each info value over each episode's steps, and when ``taught`` (a
    teacher's rollout) each episode's steps driven by the teacher. :meth:`tables` groups them
    by episode once at the end."""

    def __init__(
        self,
        n: int,
        obs_shape: tuple[int, ...],
        keep_observations: bool,
        step_means: bool,
        taught: bool = False,
    ) -> None:
        self.n = n
        self.obs_shape = obs_shape
        self.keep_observations = keep_observations
        self.step_means = step_means
        self.rows: dict[str, list[np.ndarray]] = {k: [] for k in (*dataset.STEP_KEYS, "episode")}
        self.final_obs: np.ndarray | None = None  # made at the first step, in the env's dtype
        self.info_end: dict[str, np.ndarray] = {}
        self.step_sums: dict[str, np.ndarray] = {}
        self.step_counts: dict[str, np.ndarray] = {}
        self.teacher_steps = np.zeros(n, np.int64) if taught else None

    def add(self, step: _BatchStep) -> None:
        """Record one step of the batch."""
        if self.final_obs is None:
            self.final_obs = np.zeros((self.n, *self.obs_shape), step.obs.dtype)
        for key, value in zip(
            (*dataset.STEP_KEYS, "episode"),
            (step.obs, step.actions, step.rewards, step.terminated, step.truncated, step.episode),
            strict=True,
        ):
            if key != "observations" or self.keep_observations:
                self.rows[key].append(np.array(value, copy=True))
        if self.step_means:
            self._add_to_means(step.info, step.episode)
        if self.teacher_steps is not None and step.driven is not None:
            self.teacher_steps[step.episode[step.driven & (step.episode >= 0)]] += 1
        finished = step.episode[step.done]
        if len(finished):
            self.final_obs[finished] = step.next_obs[step.done]
            self._record_ends(step.info, step.done, finished)

    def _add_to_means(self, info: Mapping[str, Any], episode: np.ndarray) -> None:
        """Add this step's reported, finite info values to their episodes' sums and counts
        (``episode``: each slot's)."""
        active = episode >= 0
        for key, value in _numeric_info(info, len(episode)):
            values = value.astype(np.float64)
            mask = (
                np.asarray(info.get(f"_{key}", active), dtype=bool) & active & np.isfinite(values)
            )
            if key not in self.step_sums:
                self.step_sums[key], self.step_counts[key] = np.zeros(self.n), np.zeros(self.n)
            episodes = episode[mask]  # distinct: one slot per running episode
            self.step_sums[key][episodes] += values[mask]
            self.step_counts[key][episodes] += 1

    def _record_ends(self, info: Mapping[str, Any], done: np.ndarray, finished: np.ndarray) -> None:
        """Keep the numeric per-env info values of the ``done`` slots, whose episodes
        (``finished``) ended at this step (vector-env info style)."""
        for key, value in _numeric_info(info, len(done)):
            mask = np.asarray(info.get(f"_{key}", np.ones_like(done)), dtype=bool) & done
            if key not in self.info_end:
                self.info_end[key] = np.full(self.n, np.nan)
            self.info_end[key][finished[mask[done]]] = value[mask]

    def tables(
        self, episode_seeds: Sequence[int]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The (steps, episodes, info) arrays: each episode's rows in time order, episodes in
        the order of ``episode_seeds``."""
        n, info_end = self.n, self.info_end
        for key, total in self.step_sums.items():
            with np.errstate(invalid="ignore", divide="ignore"):
                info_end[f"{key}.mean"] = total / self.step_counts[key]
        rows = dict(self.rows)
        episode_of_row = np.concatenate(rows.pop("episode"))
        keep = np.flatnonzero(episode_of_row >= 0)
        order = keep[np.argsort(episode_of_row[keep], kind="stable")]
        steps = {k: np.concatenate(v)[order] for k, v in rows.items() if v}
        steps["terminated"] = steps["terminated"].astype(bool)
        steps["truncated"] = steps["truncated"].astype(bool)
        steps["rewards"] = steps["rewards"].astype(np.float64)
        lengths = np.bincount(episode_of_row[keep], minlength=n).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        returns = np.array(
            [
                dataset.episode_return(steps["rewards"][s : s + k])
                for s, k in zip(starts, lengths, strict=True)
            ]
        )
        episodes = {
            "seed": np.asarray(episode_seeds, dtype=np.int64),
            "start": starts,
            "length": lengths,
            "return": returns,
            "final_observation": self.final_obs,
        }
        if self.teacher_steps is not None:
            episodes[TEACHER_STEPS] = self.teacher_steps
        return steps, episodes, info_end


def _numeric_info(info: Mapping[str, Any], batch: int) -> Iterator[tuple[str, np.ndarray]]:
    """The per-env numeric values of a vector-env info dict: (key, values of shape (batch,))."""
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        value = np.asarray(value)
        if value.shape != (batch,) or value.dtype.kind not in "biuf":
            continue
        yield key, value
