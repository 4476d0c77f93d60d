"""Rule plot_racing: the lines the policies drove on a held-out track, and the best run's lap."""

from demo2rl.stages import plot_racing as stage
from demo2rl.workflow.runner import job

with job(snakemake, stage="plot", run_name="plot-racing") as run:
    stage.plot_racing(
        evaluations=list(snakemake.input.evaluations),
        track_png=snakemake.output.track_png,
        lap_gif=snakemake.output.lap_gif,
        run=run,
    )
