"""Rule train_bc: behaviour cloning of the merged demonstrations into the RL policy class."""

from demo2rl.config import BCConfig, PolicyConfig, TaskConfig
from demo2rl.jobs import job
from demo2rl.stages import train_bc as stage

p = snakemake.params
with job(snakemake, stage="bc", run_name="bc") as run:
    stage.train_bc(
        demos_path=snakemake.input.demos,
        policy_out=snakemake.output.policy,
        metrics_out=snakemake.output.metrics,
        task=TaskConfig.of(p.task),
        policy_cfg=PolicyConfig.of(p.policy),
        bc_cfg=BCConfig.of(p.bc),
        eval_episodes=p.eval_episodes,
        seed=p.seed,
        threads=snakemake.threads,
        eval_envs=snakemake.resources.eval_envs,
        run=run,
    )
