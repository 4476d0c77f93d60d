"""Collecting expert demonstrations: one process steps a batch of envs, episodes by global index.

Episode ``e`` always gets seed ``demo_seed(base, e)`` and a shard takes a contiguous range of
episodes, so the merged dataset does not depend on the number of shards or on the batch size.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from demo2rl import provenance, seeds, tasks
from demo2rl.demos import dataset, rollout

if TYPE_CHECKING:
    from demo2rl.config import TaskConfig

log = logging.getLogger(__name__)


def shard_episodes(n_episodes: int, n_shards: int, shard: int) -> range:
    """The contiguous range of global episode indices that shard ``shard`` collects."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard} is outside [0, {n_shards})")
    size, extra = divmod(n_episodes, n_shards)
    start = shard * size + min(shard, extra)
    return range(start, start + size + (shard < extra))


def collect_shard(
    *,
    task: TaskConfig,
    base_seed: int,
    episodes: range,
    n_envs: int,
    progress_every_s: float = 10.0,
) -> dataset.Demos:
    """Collect the demonstration episodes ``episodes`` (global indices) of ``task``'s expert as a
    shard dataset (:func:`demo2rl.demos.rollout.run_episodes`).

    :param task: the env (``env_id``, ``env_kwargs``) and its expert (``task.expert``: the
        callable ``entry_point`` with its ``kwargs``, reading ``input``: the observations, or
        privileged ``info.<key>``); the observations are ``task.frame_stack`` stacked, each
        episode cut at ``task.max_episode_steps`` unless the env sets a limit of its own, and
        each env or expert call limited to ``task.timeout_s``. A task without an expert is a
        ValueError.
    :param base_seed: the experiment's base seed: episode ``e`` gets
        :func:`demo2rl.seeds.demo_seed` ``(base_seed, e)``.
    :param episodes: the shard's episodes, a range of global indices (:func:`shard_episodes`).
    :param n_envs: envs stepped as one batch (speed only).
    :param progress_every_s: how often the progress is logged.
    """
    expert_cfg = task.expert
    if expert_cfg is None:
        raise ValueError(f"collecting demonstrations of {task.env_id!r} needs the task's expert")
    env_id, env_kwargs, frame_stack = task.env_id, task.env_kwargs, task.frame_stack
    expert = tasks.load_expert(expert_cfg.entry_point, expert_cfg.kwargs)
    episode_seeds = [seeds.demo_seed(base_seed, e) for e in episodes]
    start = time.perf_counter()
    progress = progress_log(start, progress_every_s)

    steps, table, info = rollout.run_episodes(
        task,
        expert,
        episode_seeds,
        n_envs=n_envs,
        on_progress=progress,
        episode_ids=episodes,  # errors name episodes by their global index
        policy_input=expert_cfg.input,
    )
    table["index"] = np.asarray(episodes, dtype=np.int64)
    probe = tasks.make_env(env_id, env_kwargs, frame_stack=frame_stack)
    attrs = dataset.episode_attrs(
        env_id=env_id,
        env_kwargs=dict(env_kwargs),
        env_spec=spec_json(probe),
        observation_space=probe.observation_space,
        action_space=probe.action_space,
        expert=expert_record(expert_cfg.entry_point, expert_cfg.kwargs, expert_cfg.input),
        base_seed=base_seed,
        first_episode=episodes.start,
        n_episodes=len(episodes),
        versions=provenance.versions(),
        code_revision=provenance.code_revision(),
    )
    probe.close()
    attrs["frame_stack"] = frame_stack  # (the stacked observation space is in the content hash)
    attrs["collect_seconds"] = time.perf_counter() - start
    return dataset.Demos(steps, table, info, attrs)


def progress_log(start: float, every_s: float) -> Callable[[int, int], None]:
    """``on_progress(done, total)`` of a rollout (:func:`demo2rl.demos.rollout.run_episodes`) that
    logs the episodes done every ``every_s`` seconds and at the end, timed from ``start``
    (``time.perf_counter``)."""
    last = start

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= every_s or done == total:
            last = now
            log.info(
                "episodes %d/%d (%.0f%%), %.1f s", done, total, 100 * done / total, now - start
            )

    return progress


def expert_record(entry_point: str, kwargs: Mapping[str, Any], expert_input: str) -> dict:
    """The dataset's ``expert`` attribute: the callable, its kwargs and (unless it reads the
    observations, as before privileged experts existed) what it reads."""
    record = {"entry_point": entry_point, "kwargs": dict(kwargs)}
    return record if expert_input == rollout.OBSERVATION else record | {"input": expert_input}


def dataset_metrics(demos: dataset.Demos) -> dict[str, float]:
    """Headline numbers of a dataset, logged by the collect and merge jobs: its size, the
    expert's return, and the collection speed (when the dataset records its collection time)."""
    returns = demos.episodes["return"]
    out = {
        "episodes": float(demos.n_episodes),
        "steps": float(demos.n_steps),
        "expert_return_mean": float(returns.mean()),
        "expert_return_std": float(returns.std()),
    }
    if demos.attrs.get("collect_seconds"):
        out["steps_per_s"] = demos.n_steps / demos.attrs["collect_seconds"]
    return out


def spec_json(env: Any) -> str:
    """The env's gymnasium spec as text (JSON; its repr where kwargs are not JSON-serialisable,
    as a frame stack's merge function, without the objects' addresses, which differ from one
    process to the next)."""
    try:
        return env.spec.to_json()
    except (AttributeError, ValueError, TypeError):
        return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(env.spec))
