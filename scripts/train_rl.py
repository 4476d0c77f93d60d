"""Rule train_rl: PPO from the clone (init=bc) or from scratch, one seed; resumable."""

import sys

from demo2rl import rl
from demo2rl.config import PolicyConfig, RLConfig, TaskConfig
from demo2rl.jobs import job
from demo2rl.stages import train_rl as stage

p, wc, res = snakemake.params, snakemake.wildcards, snakemake.resources
try:
    with job(snakemake, stage="rl", run_name=f"rl-{wc.init}-seed{wc.seed}") as run:
        stage.train_rl(
            init=wc.init,
            run_seed=int(wc.seed),
            demos_path=snakemake.input.demos,
            bc_checkpoint=snakemake.input.get("bc"),
            policy_out=snakemake.output.policy,
            progress_out=snakemake.output.progress,
            evaluations_out=snakemake.output.evaluations,
            state_dir=p.state_dir,
            task=TaskConfig.of(p.task),
            policy_cfg=PolicyConfig.of(p.policy),
            rl_cfg=RLConfig.of(p.rl),
            eval_episodes=p.eval_episodes,
            seed=p.seed,
            clip_obs=p.clip_obs,
            threads=snakemake.threads,
            eval_envs=res.eval_envs,
            checkpoint_every=res.checkpoint_every,
            run=run,
        )
except rl.Preempted as stop:
    print(f"{stop}; rerun the workflow to resume", file=sys.stderr)
    sys.exit(rl.PREEMPTED_EXIT_CODE)
