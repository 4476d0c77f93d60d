"""Stage train_bc: the behaviour clone, its checkpoint and its held-out comparison with the expert.

The loss plot is drawn by the rule plot_bc (:mod:`demo2rl.stages.plot_bc`), so that plotting code
is not part of this stage's code fingerprint.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import torch

from demo2rl import io, provenance, tasks
from demo2rl.demos import dataset
from demo2rl.learning import acting, bc, checkpoints, evaluation
from demo2rl.specs.train_bc import BCJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow

log = logging.getLogger(__name__)


def train_bc(job: BCJob, run: Run) -> dict[str, Any]:
    """Clone the expert's demonstrations, save the checkpoint, compare clone and expert on
    held-out episodes (:func:`train_clone`)."""
    digest = dataset.verify(job.demos)  # a truncated or altered dataset stops the run here
    run.log_dataset(job.demos, digest, context="training")
    return train_clone(job, run, data=job.demos, meta={"dataset_hash": digest})


def train_clone(
    job: BCJob, run: Run, *, data: str, meta: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train a clone on the dataset ``data`` (verified already; its hash and what else the
    checkpoint records are ``meta``), save its checkpoint, and compare it with the expert on
    held-out episodes (the clone alone without an expert); ``extra`` goes into its metrics.

    ``job.eval_episodes`` held-out episodes (``evaluate.during_training``) are run
    ``job.eval_envs`` at a time; the speed settings change speed, never results.
    """
    task, policy_cfg, bc_cfg, seed, policy_out = (
        job.task,
        job.policy,
        job.bc,
        job.seed,
        job.policy_out,
    )
    obs_space, act_space = tasks.spaces(task.env_id, task.env_kwargs, task.frame_stack)
    result = bc.train_bc(
        data,  # a path, so that BC can stream it when it does not fit in memory
        policy_cfg=policy_cfg,
        bc_cfg=bc_cfg,
        seed=seed,
        threads=job.threads,
        on_epoch=lambda row: run.log_metrics(row, step=int(row["epoch"])),
        env_id=task.env_id,
        observation_space=obs_space,
        action_space=act_space,
    )
    config = {"policy": policy_cfg.to_dict(), "bc": bc_cfg.to_dict()}
    checkpoints.save_checkpoint(
        policy_out,
        result.policy,
        result.normalizer,
        policy_cfg=policy_cfg,
        observation_space=obs_space,
        action_space=act_space,
        meta={**meta, "config": config, "seed": seed},
    )
    # one torch thread when acting, as in the evaluate stage: the held-out numbers must not
    # depend on `threads` (a speed setting), and torch's results can with more than one
    torch.set_num_threads(1)
    actor = acting.make_actor(result.policy.cpu(), result.normalizer, act_space)
    heldout = evaluation.heldout_seeds(seed, job.eval_episodes)
    bc_eval = evaluation.evaluate(task, actor, heldout, n_envs=job.eval_envs).means()
    expert_return = math.nan  # (no expert: the clone alone)
    if task.expert is not None:
        expert = tasks.load_expert(task.expert.entry_point, task.expert.kwargs)
        expert_eval = evaluation.evaluate(
            task, expert, heldout, n_envs=job.eval_envs, policy_input=task.expert.input
        ).means()
        expert_return = expert_eval["return_mean"]
    metrics = {
        "best_epoch": result.best_epoch,
        "best_valid_nll": result.best_valid_nll,
        "epochs": len(result.history),
        "stop_reason": result.stop_reason,
        "data_path": result.data_path,
        "device": result.device,
        "train_samples": result.n_train,
        "valid_samples": result.n_valid,
        "samples_per_s": result.n_train * len(result.history) / max(result.seconds, 1e-9),
        "seconds": result.seconds,
        "heldout_episodes": len(heldout),
        "bc_return_mean": bc_eval["return_mean"],
        "expert_return_mean": expert_return,
        "bc_vs_expert": _ratio(bc_eval["return_mean"], expert_return),
        **meta,
        **(extra or {}),
        "history": result.history,
        "versions": provenance.versions(),
        "code_revision": provenance.code_revision(),
    }
    io.write_json(job.metrics_out, io.strict_json(metrics))  # NaN (an undefined ratio) as null
    scalars = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    run.log_metrics({f"final.{k}": v for k, v in scalars.items()})
    run.set_tags({"demo2rl.stop_reason": result.stop_reason, "demo2rl.data_path": result.data_path})
    run.log_artifact(policy_out)
    log.info(
        "BC return %.2f vs expert %.2f on %d held-out episodes",
        bc_eval["return_mean"],
        expert_return,
        len(heldout),
    )
    return metrics


def _ratio(clone: float, expert: float) -> float:
    """The clone's return as a fraction of the expert's; NaN (null in metrics.json; not a
    division by zero, not a number with the wrong sign) when the expert's return is not
    positive, e.g. a sparse-reward task in which the expert scores 0, or there is no expert."""
    return float(clone / expert) if expert > 0 else math.nan
