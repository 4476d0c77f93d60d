"""Rule train_rl: one PPO run of an arm (the init wildcard) and seed; resumable."""

import sys

from demo2rl import rl
from demo2rl.config import PolicyConfig, RLConfig
from demo2rl.jobs import job, task_config
from demo2rl.names import RLRun
from demo2rl.stages import train_rl as stage

p, res, wc = snakemake.params, snakemake.resources, snakemake.wildcards
try:
    with job(snakemake, stage="rl", run_name=RLRun(wc.init, int(wc.seed)).name) as run:
        spec = rl.RLJob(
            arm=wc.init,
            run_seed=int(wc.seed),
            seed=p.seed,
            task=task_config(snakemake),
            policy=PolicyConfig.of(p.policy),
            rl=RLConfig.of(p.rl),
            clip_obs=p.clip_obs,
            eval_episodes=p.eval_episodes,
            demos=snakemake.input.demos,
            clone=snakemake.input.get("bc"),
            state_dir=p.state_dir,
            policy_out=snakemake.output.policy,
            progress_out=snakemake.output.progress,
            evaluations_out=snakemake.output.evaluations,
            threads=snakemake.threads,
            eval_envs=res.eval_envs,
            checkpoint_every=res.checkpoint_every,
        )
        stage.train_rl(spec, run)
except rl.Preempted as stop:
    print(f"{stop}; rerun the workflow to resume", file=sys.stderr)
    sys.exit(rl.PREEMPTED_EXIT_CODE)
