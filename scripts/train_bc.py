"""Rule train_bc: behaviour cloning of the merged demonstrations into the RL policy class."""

from demo2rl.jobs import job
from demo2rl.stages import bc as stage

p = snakemake.params
with job(snakemake, stage="bc", run_name="bc") as run:
    stage.train_bc(
        demos_path=snakemake.input.demos,
        policy_out=snakemake.output.policy,
        metrics_out=snakemake.output.metrics,
        plot_out=snakemake.output.loss_plot,
        task=p.task,
        policy_cfg=p.policy,
        bc_cfg=p.bc,
        eval_cfg=p.evaluate,
        seed=p.seed,
        threads=snakemake.threads,
        run=run,
    )
