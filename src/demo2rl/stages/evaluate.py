"""Stage evaluate: one policy (expert, clone or RL run) on the held-out evaluation episodes."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from demo2rl import io, names, provenance, tasks
from demo2rl.demos import dataset, rollout
from demo2rl.learning import acting, checkpoints, evaluation
from demo2rl.report import groups
from demo2rl.specs.evaluate import EvaluateJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow

log = logging.getLogger(__name__)


def evaluate(job: EvaluateJob, run: Run) -> dict[str, Any]:
    """Evaluate one policy (``expert``, ``bc`` or ``rl-<arm>-seed<s>``) on the held-out tracks.

    Writes the evaluation record (per-episode metrics, the raw info values, the first episode's
    actions for replays) to ``job.out`` and logs its means on the job's run, tagged with the
    policy. A learned policy's network is built from the config its checkpoint records, and the
    checkpoint must record the content hash of ``job.demos`` (the experiment's dataset) as the
    one it was trained on. ``job.envs`` (envs stepped together) changes speed, never results,
    and ``task.timeout_s`` (each env or expert call's time limit) only whether a hung call fails.
    """
    name, checkpoint, demos_path, out = job.name, job.checkpoint, job.demos, job.out
    task, episodes, seed, n_envs = job.task, job.episodes, job.seed, job.envs
    torch.set_num_threads(1)  # one thread: fastest for small MLPs, and results stay exact
    group = groups.policy_group(name)
    env_id, env_kwargs = task.env_id, task.env_kwargs
    obs_space, act_space = tasks.spaces(env_id, env_kwargs, task.frame_stack)
    source: dict[str, Any]
    reads = rollout.OBSERVATION
    if name == names.EXPERT:
        assert task.expert is not None, "the expert's evaluation needs the task's expert"
        actor = tasks.load_expert(task.expert.entry_point, task.expert.kwargs)
        reads = task.expert.input
        source = {"expert": task.expert.to_dict()}
    else:
        if checkpoint is None or demos_path is None:
            raise ValueError(f"policy {name!r} needs a checkpoint and the dataset")
        net, normalizer, ckpt = checkpoints.load_checkpoint(checkpoint, obs_space, act_space)
        digest = dataset.read_attrs(demos_path)["content_hash"]
        checkpoints.check_dataset_hash(checkpoint, ckpt, demos_path, digest)
        actor = acting.make_actor(net, normalizer, act_space)
        meta = ckpt.get("meta", {})
        source = {
            "checkpoint": str(checkpoint),
            "dataset_hash": meta.get("dataset_hash"),
            "timesteps": meta.get("timesteps"),
        }
    track_seeds = evaluation.heldout_seeds(seed, episodes)
    start = time.perf_counter()
    result = evaluation.evaluate(
        task, actor, track_seeds, n_envs=n_envs, policy_input=reads, final=True
    )
    seconds = time.perf_counter() - start
    means = result.means()
    record = {
        "policy": name,
        "group": group,
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs),
        "base_seed": seed,
        "source": source,
        "summary": means,
        "episodes": {k: _jsonable(v) for k, v in result.episodes.items()},
        "info": {k: _jsonable(v) for k, v in result.info.items()},
        "first_episode": {
            "seed": int(track_seeds[0]),
            "actions": _jsonable(result.first_actions),
        },
        "seconds": seconds,
        "versions": provenance.versions(),
        "code_revision": provenance.code_revision(),
    }
    io.write_json(out, io.strict_json(record))
    run.set_tags({"demo2rl.learning.policy": name, "demo2rl.policy_group": group})
    if "checkpoint" in source:
        run.set_tags({"demo2rl.checkpoint": str(Path(checkpoint).resolve())})
    finite = {f"eval.{k}": v for k, v in means.items() if math.isfinite(v)}
    run.log_metrics(finite | {"eval.episodes": len(track_seeds), "eval.seconds": seconds})
    log.info(
        "%s: return %.2f +- %.2f over %d held-out episodes in %.1f s",
        name,
        means["return_mean"],
        means["return_std"],
        len(track_seeds),
        seconds,
    )
    return record


def _jsonable(values: np.ndarray) -> list[Any]:
    """An array as nested lists of Python numbers."""
    return np.asarray(values).tolist()
