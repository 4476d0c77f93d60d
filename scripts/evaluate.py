"""Rule evaluate: one policy (expert, clone or RL run) on the held-out evaluation tracks."""

from demo2rl.jobs import job, task_config
from demo2rl.stages import evaluate as stage

p, name = snakemake.params, snakemake.wildcards.policy
with job(snakemake, stage="evaluate", run_name=f"eval-{name}") as run:
    stage.evaluate_policy(
        name=name,
        checkpoint=snakemake.input.get("checkpoint"),
        demos_path=snakemake.input.get("demos"),
        out=snakemake.output[0],
        task=task_config(snakemake),
        episodes=p.episodes,
        seed=p.seed,
        n_envs=snakemake.resources.envs,
        run=run,
    )
