"""Running a batched policy (an expert, a clone, an RL agent) for one episode per seed.

Each episode's trajectory depends only on its seed and the policy, not on the batch size or on
the slot it ran in; episodes come back in the order of their seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from demo2rl import dataset, deadline, tasks

OBSERVATION = "observation"
"""The policy input that is the observation itself (``task.expert.input``'s default)."""


class RolloutError(RuntimeError):
    """The task or policy produced something that cannot be recorded."""


def run_episodes(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: tasks.PolicyFn,
    episode_seeds: Sequence[int],
    *,
    n_envs: int,
    on_progress: Callable[[int, int], None] | None = None,
    step_means: bool = False,
    episode_ids: Sequence[int] | None = None,
    frame_stack: int = 1,
    policy_input: str = OBSERVATION,
    keep_observations: bool = True,
    max_episode_steps: int | None = None,
    timeout_s: float | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run ``policy`` for one episode per seed; returns (steps, episodes, info) arrays.

    Episodes are laid out in the order of ``episode_seeds``, each in time order, whatever order
    they finish in. Rows are gathered batch-wise and grouped once at the end. ``info`` holds the
    numeric info values at each episode's last step; with ``step_means`` it also holds
    ``"<key>.mean"``, each episode's mean of that value over its steps (e.g. the fraction of
    steps off track), skipping steps where the env did not report it.

    A non-finite observation or reward raises :class:`RolloutError` naming the env, the episode
    (its number in ``episode_ids``, by default its position in ``episode_seeds``, and its seed)
    and the step (1 for the first ``step`` call of the episode; 0 for the reset observation).

    ``frame_stack`` observations are stacked as one (:func:`demo2rl.tasks.stack_frames`).
    ``policy_input`` is what the policy reads: the observations, or ``"info.<key>"``, the vector
    env's ``info[key]`` after each reset and step (a privileged expert's state; the recorded
    observations are still the env's). Without ``keep_observations`` the steps hold no
    observations (an evaluation, which needs none, then holds no frames).

    Every episode ends within ``max_episode_steps`` steps (``task.max_episode_steps``), unless
    the task sets a limit of its own (:func:`demo2rl.tasks.episode_cap`): cut there, it is
    truncated, as gymnasium's TimeLimit does, so the steps held are bounded by the episodes
    times the cap. Each batched reset and step of the env and each call of the policy must
    return within ``timeout_s`` seconds (``task.timeout_s``; None: no limit), else
    :class:`demo2rl.deadline.UserCodeTimeout` names the call, the env or the expert, and the
    episodes it was running (their numbers, seeds and steps).
    """
    n = len(episode_seeds)
    batch = min(n_envs, n)
    env = tasks.make_vector_env(
        env_id, env_kwargs, batch, AutoresetMode.DISABLED, frame_stack, max_episode_steps
    )
    cap = tasks.episode_cap(env_id, env_kwargs, max_episode_steps)
    read = policy_reader(policy_input, env_id)
    space = env.single_action_space
    slot_episode = np.arange(batch)  # episode (position in episode_seeds) in each slot; -1: idle
    slot_step = np.zeros(batch, np.int64)  # steps taken in each slot's episode
    next_episode = batch
    ids = list(range(n)) if episode_ids is None else [int(i) for i in episode_ids]

    def check_finite(values: np.ndarray, what: str, slots: np.ndarray | None = None) -> None:
        slots = slot_episode >= 0 if slots is None else slots
        _check_finite(values, what, env_id, slots, slot_episode, slot_step, ids, episode_seeds)

    def limit(what: str, slots: np.ndarray | None = None) -> Any:
        """``what`` (a call of the env or the expert) under ``timeout_s``; ``slots`` (a mask):
        the episodes it runs, for the message (default: every running one)."""

        def where() -> str:
            mask = slot_episode >= 0 if slots is None else slots & (slot_episode >= 0)
            running = np.flatnonzero(mask)
            return _describe_episodes(running, slot_episode, slot_step, ids, episode_seeds)

        return deadline.limit(timeout_s, what, where)

    env_what = f"the env {env_id!r}:"
    expert_what = f"the expert {_callable_name(policy)}"
    with limit(f"{env_what} reset"):
        obs, info = env.reset(seed=[int(s) for s in episode_seeds[:batch]])
    inputs = read(obs, info, "at reset")
    rows: dict[str, list[np.ndarray]] = {k: [] for k in (*dataset.STEP_KEYS, "episode")}
    final_obs = np.zeros((n, *env.single_observation_space.shape), obs.dtype)
    info_end: dict[str, np.ndarray] = {}
    step_sums: dict[str, np.ndarray] = {}
    step_counts: dict[str, np.ndarray] = {}
    done_count = 0
    while done_count < n:
        check_finite(obs, "observation")
        with limit(expert_what):
            actions = tasks.checked_actions(policy, inputs, space)
        with limit(f"{env_what} step"):
            next_obs, rewards, terminated, truncated, info = env.step(actions)
        slot_step += 1
        if cap is not None:  # as gymnasium's TimeLimit, also for a task's own batched env
            truncated = truncated | (slot_step >= cap)
        check_finite(rewards, "reward")
        for key, value in zip(
            (*dataset.STEP_KEYS, "episode"),
            (obs, actions, rewards, terminated, truncated, slot_episode),
            strict=True,
        ):
            if key != "observations" or keep_observations:
                rows[key].append(np.array(value, copy=True))
        if step_means:
            _accumulate_info(step_sums, step_counts, info, slot_episode, n)
        ended = terminated | truncated  # idle slots end episodes too: they must be reset
        if not ended.any():
            obs, inputs = next_obs, read(next_obs, info, "after a step")
            continue
        done = ended & (slot_episode >= 0)
        finished = slot_episode[done]
        if len(finished):
            check_finite(next_obs, "observation", done)  # final observations
            final_obs[finished] = next_obs[done]
            _record_info(info_end, info, done, finished, n)
            done_count += len(finished)
            if on_progress:
                on_progress(done_count, n)
        # refill finished slots with the next episodes; slots with nothing left go idle
        reset_seeds: list[int | None] = [None] * batch
        for slot in np.flatnonzero(done):
            if next_episode < n:
                slot_episode[slot] = next_episode
                reset_seeds[slot] = int(episode_seeds[next_episode])
                next_episode += 1
            else:
                slot_episode[slot] = -1
        reset_mask = ended
        slot_step[reset_mask] = 0
        step_inputs = read(next_obs, info, "after a step")
        with limit(f"{env_what} reset", reset_mask):
            obs, info = env.reset(seed=reset_seeds, options={"reset_mask": reset_mask})
        obs = np.where(reset_mask.reshape(-1, *[1] * (obs.ndim - 1)), obs, next_obs)
        inputs = read(obs, info, "at reset")
        inputs = np.where(reset_mask.reshape(-1, *[1] * (inputs.ndim - 1)), inputs, step_inputs)
    env.close()
    for key, total in step_sums.items():
        with np.errstate(invalid="ignore", divide="ignore"):
            info_end[f"{key}.mean"] = total / step_counts[key]

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
        "final_observation": final_obs,
    }
    return steps, episodes, info_end


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


def _callable_name(fn: Any) -> str:
    """``module:qualname`` of a callable (of the function a ``functools.partial`` binds)."""
    fn = getattr(fn, "func", fn)
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}:{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def _describe_episodes(
    slots: np.ndarray,
    slot_episode: np.ndarray,
    slot_step: np.ndarray,
    episode_ids: Sequence[int],
    episode_seeds: Sequence[int],
    most: int = 8,
) -> str:
    """The episodes running in ``slots``: number (in ``episode_ids``), seed and steps taken."""
    parts = [
        f"{episode_ids[slot_episode[s]]} (seed {int(episode_seeds[slot_episode[s]])}, "
        f"after {int(slot_step[s])} steps)"
        for s in sorted(slots, key=lambda s: slot_episode[s])
    ]
    more = f" and {len(parts) - most} more" if len(parts) > most else ""
    return f"episode{'s' if len(parts) > 1 else ''} {', '.join(parts[:most])}{more}"


def _check_finite(
    values: np.ndarray,
    what: str,
    env_id: str,
    slots: np.ndarray,
    slot_episode: np.ndarray,
    slot_step: np.ndarray,
    episode_ids: Sequence[int],
    episode_seeds: Sequence[int],
) -> None:
    """Raise a RolloutError if ``values`` (one row per slot: observations or rewards) are NaN or
    infinite in one of ``slots`` (a mask), naming the env, the first such episode and its step."""
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.floating):
        return
    bad = np.flatnonzero(slots & ~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
    if not len(bad):
        return
    slot = min(bad, key=lambda s: slot_episode[s])
    episode = slot_episode[slot]
    more = f" (and in {len(bad) - 1} more episode(s) at once)" if len(bad) > 1 else ""
    raise RolloutError(
        f"{env_id} returned a non-finite {what} (NaN or inf) in episode {episode_ids[episode]} "
        f"(seed {int(episode_seeds[episode])}) at step {int(slot_step[slot])}{more}"
    )


def _numeric_info(info: Mapping[str, Any], batch: int) -> Iterator[tuple[str, np.ndarray]]:
    """The per-env numeric values of a vector-env info dict: (key, values of shape (batch,))."""
    for key, value in info.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        value = np.asarray(value)
        if value.shape != (batch,) or value.dtype.kind not in "biuf":
            continue
        yield key, value


def _accumulate_info(
    sums: dict[str, np.ndarray],
    counts: dict[str, np.ndarray],
    info: Mapping[str, Any],
    slot_episode: np.ndarray,
    n: int,
) -> None:
    """Add this step's reported, finite info values to their episodes' sums and counts."""
    active = slot_episode >= 0
    for key, value in _numeric_info(info, len(slot_episode)):
        values = value.astype(np.float64)
        mask = np.asarray(info.get(f"_{key}", active), dtype=bool) & active & np.isfinite(values)
        if key not in sums:
            sums[key], counts[key] = np.zeros(n), np.zeros(n)
        episodes = slot_episode[mask]  # distinct: one slot per running episode
        sums[key][episodes] += values[mask]
        counts[key][episodes] += 1


def _record_info(
    store: dict[str, np.ndarray],
    info: Mapping[str, Any],
    done: np.ndarray,
    finished: np.ndarray,
    n: int,
) -> None:
    """Keep numeric per-env info values at each episode's last step (vector-env info style)."""
    for key, value in _numeric_info(info, len(done)):
        mask = np.asarray(info.get(f"_{key}", np.ones_like(done)), dtype=bool) & done
        if key not in store:
            store[key] = np.full(n, np.nan)
        store[key][finished[mask[done]]] = value[mask]
