"""Rule plot_bc: the behaviour clone's loss curves."""

from demo2rl.stages import plot_bc as stage
from demo2rl.workflow.runner import job

with job(snakemake, stage="plot", run_name="plot-bc") as run:
    stage.plot_bc(metrics=snakemake.input[0], out=snakemake.output[0], run=run)
