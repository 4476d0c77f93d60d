"""Stage train_rl: one PPO run of an arm and seed, resumable, under a key of everything it uses."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING

from demo2rl import checkpoints, dataset, io, provenance, rl, tasks
from demo2rl.config import PolicyConfig, RLConfig, TaskConfig

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def train_rl(
    *,
    init: str,
    run_seed: int,
    demos_path: str,
    bc_checkpoint: str | None,
    policy_out: str,
    progress_out: str,
    evaluations_out: str,
    state_dir: str,
    task: TaskConfig,
    policy_cfg: PolicyConfig,
    rl_cfg: RLConfig,
    eval_episodes: int,
    seed: int,
    clip_obs: float,
    threads: int,
    eval_envs: int,
    checkpoint_every: int,
    run: Run,
) -> rl.RLResult:
    """One PPO run of an arm (``init``, see :func:`demo2rl.rl.build_model`) and seed; resumes
    from ``state_dir``.

    The run's key covers every argument that can change its result (the config slices, the
    dataset's content hash, the clone's file digest, the code of this stage), so state left by
    a run of another config, other inputs or other code is never resumed. ``threads``,
    ``eval_envs`` and ``checkpoint_every`` change speed only and are not part of it.
    """
    digest = dataset.verify(demos_path)  # a truncated or altered dataset stops the run here
    run.log_dataset(
        demos_path, digest, context="normalisation" if init == "scratch" else "training"
    )
    if bc_checkpoint:
        run.set_tags({"demo2rl.bc_checkpoint": str(Path(bc_checkpoint).resolve())})
    key = rl.run_key(
        {
            "config": {
                "task": task.to_dict(),
                "policy": policy_cfg.to_dict(),
                "rl": rl_cfg.to_dict(),
                "eval_episodes": eval_episodes,
                "seed": seed,
                "clip_obs": clip_obs,
                "init": init,
                "run_seed": run_seed,
            },
            "inputs.demos": digest,
            "inputs.bc": _file_digest(bc_checkpoint) if bc_checkpoint else None,
            "code": provenance.code_fingerprint(
                __name__, *tasks.entry_point_modules(task.env_id, expert_entry_point=None)
            ),
        }
    )
    result = rl.train_rl(
        task=task,
        init=init,
        demos_path=demos_path,
        bc_checkpoint=bc_checkpoint,
        policy_cfg=policy_cfg,
        rl_cfg=rl_cfg,
        base_seed=seed,
        run_seed=run_seed,
        state_dir=state_dir,
        key=key,
        eval_episodes=eval_episodes,
        clip_obs=clip_obs,
        threads=threads,
        eval_envs=eval_envs,
        checkpoint_every=checkpoint_every,
        log_metrics=lambda metrics, step: run.log_metrics(metrics, step=step),
    )
    obs_space, act_space = tasks.spaces(task.env_id, task.env_kwargs)
    checkpoints.save_checkpoint(
        policy_out,
        result.model.policy,
        result.normalizer,
        policy_cfg=policy_cfg,
        observation_space=obs_space,
        action_space=act_space,
        meta={
            "dataset_hash": digest,
            "init": init,
            "run_seed": run_seed,
            "timesteps": result.timesteps,
            "config": {"policy": policy_cfg.to_dict(), "rl": rl_cfg.to_dict()},
        },
    )
    with io.atomic_path(progress_out) as tmp:
        rl.progress_table(state_dir).to_csv(tmp, index=False)
    with io.atomic_path(evaluations_out) as tmp:
        rl.evaluations_table(result.evaluations).to_csv(tmp, index=False)
    final = result.evaluations[-1]
    run.log_metrics({f"final.{k}": v for k, v in final.items() if math.isfinite(v)})
    run.log_artifact(policy_out)
    return result


def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
