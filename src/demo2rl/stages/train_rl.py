"""Stage train_rl: one RL run of an arm and seed, resumable, under a key of everything it uses."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demo2rl import io, provenance, rl, spec_fields, tasks
from demo2rl.demos import dataset
from demo2rl.learning import checkpoints
from demo2rl.specs.train_rl import RLJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def train_rl(job: RLJob, run: Run) -> rl.RLResult:
    """One RL run of an arm and seed (:class:`~demo2rl.specs.train_rl.RLJob`); resumes from its
    state dir, then writes its policy, progress and evaluations (see :func:`run_key` for what
    resumes)."""
    digest = dataset.verify(job.demos)  # a truncated or altered dataset stops the run here
    run.log_dataset(job.demos, digest, context="training" if job.clone else "normalisation")
    if job.clone:
        run.set_tags({"demo2rl.bc_checkpoint": str(Path(job.clone).resolve())})
    result = rl.train_rl(
        job,
        key=run_key(job, digest, checkpoints.file_digest(job.clone) if job.clone else None),
        log_metrics=lambda metrics, step: run.log_metrics(metrics, step=step),
    )
    assert job.policy_out and job.progress_out and job.evaluations_out
    checkpoints.save_checkpoint(
        job.policy_out,
        result.model.policy,
        result.normalizer,
        policy_cfg=job.policy,
        observation_space=result.observation_space,
        action_space=result.action_space,
        meta={
            "dataset_hash": digest,
            "arm": job.arm,
            "run_seed": job.run_seed,
            "timesteps": result.timesteps,
            "config": {"policy": job.policy.to_dict(), "rl": job.rl.to_dict()},
        },
        sac_spec=None if job.rl.sac is None else rl.sac_spec(job.policy, job.rl.sac),
    )
    with io.atomic_path(job.progress_out) as tmp:
        rl.progress_table(job.state_dir).to_csv(tmp, index=False)
    with io.atomic_path(job.evaluations_out) as tmp:
        rl.evaluations_table(result.evaluations).to_csv(tmp, index=False)
    final = result.evaluations[-1]
    run.log_metrics({f"final.{k}": v for k, v in final.items() if math.isfinite(v)})
    run.log_artifact(job.policy_out)
    return result


def run_key(job: RLJob, demos_digest: str, clone_digest: str | None) -> dict[str, Any]:
    """The run's resume key: every field of the job that can change its result
    (:func:`demo2rl.spec_fields.result_fields`: all but paths and speed settings), the content of
    its inputs (the dataset's content hash, the clone file's digest, None without a clone) and
    the code of this stage and of the task's env. State left by a run of another config, other
    inputs or other code is never resumed; a field added to
    :class:`~demo2rl.specs.train_rl.RLJob` is covered
    without a word here."""
    return rl.run_key(
        {
            "job": spec_fields.result_fields(job),
            "inputs.demos": demos_digest,
            "inputs.clone": clone_digest,
            "code": provenance.code_fingerprint(
                __name__, *tasks.entry_point_modules(job.task.env_id, expert_entry_point=None)
            ),
        }
    )
