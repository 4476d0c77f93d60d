"""Rule plot_racing: the lines the policies drove on a held-out track, and the best run's lap."""

from demo2rl.runner import job
from demo2rl.stages import plot_racing as stage

with job(snakemake, stage="plot", run_name="plot-racing") as run:
    stage.plot_racing(
        evaluations=list(snakemake.input.evaluations),
        track_png=snakemake.output.track_png,
        lap_gif=snakemake.output.lap_gif,
        run=run,
    )
