"""Stage train_rl."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from demo2rl import dataset, io, policy, rl, tasks
from demo2rl.tracking import Run


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
    task: Mapping[str, Any],
    policy_cfg: Mapping[str, Any],
    rl_cfg: Mapping[str, Any],
    eval_cfg: Mapping[str, Any],
    seed: int,
    clip_obs: float,
    threads: int,
    run: Run,
) -> rl.RLResult:
    """One PPO run of an arm (``init``: bc or scratch) and seed; resumes from ``state_dir``."""
    digest = dataset.read_attrs(demos_path)["content_hash"]
    run.log_dataset(
        demos_path, digest, context="normalisation" if init == "scratch" else "training"
    )
    if bc_checkpoint:
        run.set_tags({"demo2rl.bc_checkpoint": str(Path(bc_checkpoint).resolve())})
    result = rl.train_rl(
        env_id=task["env_id"],
        env_kwargs=task["env_kwargs"],
        init=init,
        demos_path=demos_path,
        bc_checkpoint=bc_checkpoint,
        policy_cfg=policy_cfg,
        rl_cfg=rl_cfg | {"eval_episodes": eval_cfg["during_training"]},
        base_seed=seed,
        run_seed=run_seed,
        state_dir=state_dir,
        clip_obs=clip_obs,
        threads=threads,
        log_metrics=lambda metrics, step: run.log_metrics(metrics, step=step),
    )
    obs_space, act_space = tasks.spaces(task["env_id"], task["env_kwargs"])
    policy.save_checkpoint(
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
            "config": {"policy": policy_cfg, "rl": rl_cfg},
        },
    )
    with io.atomic_path(progress_out) as tmp:
        rl.progress_table(state_dir).to_csv(tmp, index=False)
    with io.atomic_path(evaluations_out) as tmp:
        pd.DataFrame(result.evaluations).to_csv(tmp, index=False)
    final = result.evaluations[-1]
    run.log_metrics({f"final.{k}": v for k, v in final.items() if math.isfinite(v)})
    run.log_artifact(policy_out)
    return result
