"""Rule plot_summary: learning curves and final returns, drawn from summary.json."""

from demo2rl.stages import plot_summary as stage
from demo2rl.workflow.runner import job

with job(snakemake, stage="plot", run_name="plot-summary") as run:
    stage.plot_summary(
        summary_json=snakemake.input[0],
        curves_png=snakemake.output.curves_png,
        returns_png=snakemake.output.returns_png,
        run=run,
    )
