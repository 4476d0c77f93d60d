"""Rule train_bc: behaviour cloning of the merged demonstrations into the RL policy class."""

from demo2rl.config import BCConfig, PolicyConfig
from demo2rl.jobs import job, task_config
from demo2rl.names import BC
from demo2rl.stages import train_bc as stage

p = snakemake.params
with job(snakemake, stage="bc", run_name=BC) as run:
    spec = stage.BCJob(
        task=task_config(snakemake),
        policy=PolicyConfig.of(p.policy),
        bc=BCConfig.of(p.bc),
        seed=p.seed,
        eval_episodes=p.eval_episodes,
        demos=snakemake.input.demos,
        policy_out=snakemake.output.policy,
        metrics_out=snakemake.output.metrics,
        threads=snakemake.threads,
        eval_envs=snakemake.resources.eval_envs,
    )
    stage.train_bc(spec, run)
