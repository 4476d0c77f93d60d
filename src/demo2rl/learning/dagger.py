"""DAgger's data (Ross et al. 2011): one job's share of a round's relabelled episodes.

DAgger trains a clone in rounds. Round 0 is behaviour cloning on the expert's demonstrations.
Round ``r >= 1`` runs episodes in which, per step, the expert's action is executed with
probability :func:`beta` and the previous round's clone's otherwise; the expert labels every
state visited, the round's episodes join the aggregate (the demonstrations and every earlier
round's episodes) and the next clone trains on it. This module makes one shard of a round's
episodes (:func:`relabel_shard`), in the demonstrations' own format, so that the aggregate is a
plain merge (:func:`demo2rl.demos.dataset.merge_files`) of the demonstrations' shards and the
rounds'. Training the clone, the rules and the merge are not here.

A shard's episodes depend on the round, their indices in it, the base seed, the learner and
``beta`` only: each episode's seed is :func:`demo2rl.seeds.dagger_seed`'s, and which of the two
acts at a step is fixed by the episode's seed and the step
(:func:`demo2rl.demos.rollout.teacher_drives`), so neither the number of envs nor the sharding
change a round's data.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from demo2rl import provenance, seeds, tasks
from demo2rl.config import TaskConfig
from demo2rl.demos import collect, dataset, rollout
from demo2rl.learning import acting, checkpoints

log = logging.getLogger(__name__)


def beta(round: int, decay: float) -> float:
    """The probability that the expert acts in round ``round``'s episodes: ``decay ** round``.

    Ross et al. mix the policy of iteration ``i`` (from 1) as ``beta_i`` expert and the rest the
    current clone, with ``beta_i = p ** (i - 1)``: their first iteration (``beta_1 = 1``) is the
    expert's data alone, which is this module's round 0 (behaviour cloning on the
    demonstrations), so round ``r`` is their iteration ``r + 1`` and gets ``decay ** r``. It
    depends on the round and the decay alone, never on how many rounds run, so adding rounds
    leaves the earlier ones as they were. ``decay`` 0 is their ``beta_i = [i == 1]``: from
    round 1 on, the clone drives every step.
    """
    if round < 0:
        raise ValueError(f"a DAgger round is 0 (behaviour cloning) or more, got {round}")
    if not 0.0 <= decay <= 1.0:  # (false for NaN too)
        raise ValueError(f"DAgger's beta decay must be in [0, 1], got {decay}")
    return float(decay**round)


def relabel_shard(
    *,
    task: TaskConfig,
    learner: str | os.PathLike[str],
    round: int,
    episodes: range,
    base_seed: int,
    first_index: int,
    beta: float,
    n_envs: int,
    demos: str | os.PathLike[str] | None = None,
    progress_every_s: float = 10.0,
) -> dataset.Demos:
    """The episodes ``episodes`` (indices within round ``round``) of a DAgger round, as a shard
    of the demonstration dataset's format, every action the expert's label.

    :param task: the env and its expert (the teacher, reading ``task.expert.input``); the
        observations are ``task.frame_stack`` stacked, episodes cut at
        ``task.max_episode_steps`` and each env or policy call limited to ``task.timeout_s``, as in
        the expert's collection (:func:`demo2rl.demos.collect.collect_shard`).
    :param learner: the previous round's clone's checkpoint (round 1: the BC clone's); its
        network is built from the config it records, and it acts on the observations.
    :param round: the round, from 1 (:func:`demo2rl.seeds.dagger_seed`).
    :param episodes: the shard's episodes, a range of indices within the round.
    :param base_seed: the experiment's base seed, the demonstrations'.
    :param first_index: the aggregate's number of the round's episode 0 (the episodes of the
        demonstrations and of the rounds before): episode ``e`` is the aggregate's episode
        ``first_index + e``, which is its ``/episodes/index`` and makes the shard's
        ``first_episode``, so that the round's shards continue the aggregate's numbering.
    :param beta: the probability that the expert's action is executed, per episode and step
        (:func:`beta`; :class:`demo2rl.demos.rollout.Teacher`).
    :param n_envs: envs stepped as one batch (speed only).
    :param demos: the experiment's demonstrations, if given: the learner must belong to them
        (:func:`demo2rl.learning.checkpoints.check_dataset_hash`).
    :param progress_every_s: how often the progress is logged.

    The attributes that define a dataset (task, spaces, expert record, base seed) are those of
    the expert's collection, so the merge takes the shard beside the demonstrations' shards.
    The others add ``dagger_round``, ``beta``, ``learner`` (the checkpoint's path),
    ``learner_hash`` (its file's SHA-256), ``expert_calls`` (the steps the expert labelled:
    every step held) and ``expert_steps`` (those on which its action was executed). The
    learner acts with one torch thread (as every stage that acts), restored after.
    """
    expert_cfg = task.expert
    if expert_cfg is None:
        raise ValueError("DAgger's relabelling needs the task's expert")
    obs_space, act_space = tasks.spaces(task.env_id, task.env_kwargs, task.frame_stack)
    net, normalizer, ckpt = checkpoints.load_checkpoint(learner, obs_space, act_space)
    if demos is not None:
        digest = dataset.read_attrs(demos)["content_hash"]
        checkpoints.check_dataset_hash(learner, ckpt, demos, digest)
    actor = acting.make_actor(net, normalizer, act_space)
    expert = tasks.load_expert(expert_cfg.entry_point, expert_cfg.kwargs)
    teacher = rollout.Teacher(expert, expert_cfg.input, beta)
    episode_seeds = [seeds.dagger_seed(base_seed, round, e) for e in episodes]
    start = time.perf_counter()
    with _one_torch_thread():
        steps, table, info = rollout.run_episodes(
            task,
            actor,
            episode_seeds,
            n_envs=n_envs,
            on_progress=collect.progress_log(start, progress_every_s),
            episode_ids=[first_index + e for e in episodes],  # the aggregate's numbers
            teacher=teacher,
        )
    expert_steps = int(table.pop(rollout.TEACHER_STEPS).sum())
    table["index"] = first_index + np.asarray(episodes, dtype=np.int64)
    probe = tasks.make_env(task.env_id, task.env_kwargs, frame_stack=task.frame_stack)
    # The expert's collection's own record and spec text: the merge compares the records.
    attrs = dataset.episode_attrs(
        env_id=task.env_id,
        env_kwargs=dict(task.env_kwargs),
        env_spec=collect.spec_json(probe),
        observation_space=probe.observation_space,
        action_space=probe.action_space,
        expert=collect.expert_record(expert_cfg.entry_point, expert_cfg.kwargs, expert_cfg.input),
        base_seed=base_seed,
        first_episode=first_index + episodes.start,
        n_episodes=len(episodes),
        versions=provenance.versions(),
        code_revision=provenance.code_revision(),
    )
    probe.close()
    attrs |= {
        "frame_stack": task.frame_stack,
        "collect_seconds": time.perf_counter() - start,
        "dagger_round": round,
        "beta": beta,
        "learner": str(learner),
        "learner_hash": checkpoints.file_digest(learner),
        "expert_calls": len(steps["rewards"]),
        "expert_steps": expert_steps,
    }
    return dataset.Demos(steps, table, info, attrs)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """One torch thread in the body (an action must not depend on a speed setting), the
    previous number restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def expert_calls(aggregate: str, demos: str, round: int) -> dict[str, int]:
    """The steps the expert labelled: in round ``round`` (``expert_calls``), in rounds 1 to
    ``round`` (``expert_calls_total``), and the dataset's own steps (``demo_steps``: each an
    expert call, where the expert collected it). Every round has the same number of episodes,
    numbered after the dataset's and the earlier rounds' (:mod:`demo2rl.learning.dagger`)."""
    episodes = dataset.read_tables(aggregate).episodes
    n_demos = int(dataset.read_attrs(demos)["n_episodes"])
    index, length = episodes["index"], episodes["length"]
    labelled = index >= n_demos
    per_round = int(np.count_nonzero(labelled)) // round
    this = index >= n_demos + (round - 1) * per_round
    return {
        "expert_calls": int(length[this].sum()),
        "expert_calls_total": int(length[labelled].sum()),
        "demo_steps": int(length[~labelled].sum()),
        "dagger_episodes": int(np.count_nonzero(this)),
    }
