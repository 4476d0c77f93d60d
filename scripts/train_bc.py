"""Rule train_bc: behaviour cloning of the merged demonstrations into the RL policy class."""

from demo2rl.jobs import job
from demo2rl.stages import train_bc as stage

p = snakemake.params
with job(snakemake, stage="bc", run_name="bc") as run:
    stage.train_bc(
        demos_path=snakemake.input.demos,
        policy_out=snakemake.output.policy,
        metrics_out=snakemake.output.metrics,
        task=p.task,
        policy_cfg=p.policy,
        bc_cfg=p.bc,
        eval_episodes=p.eval_episodes,
        seed=p.seed,
        threads=snakemake.threads,
        eval_envs=snakemake.resources.eval_envs,
        run=run,
    )
