"""Rule plot_variants: the config variants' IQM per policy group, drawn from variants.json."""

from demo2rl.stages import plot_variants as stage
from demo2rl.workflow.runner import job

with job(snakemake, stage="plot", run_name="plot-variants") as run:
    stage.plot_variants(
        variants_json=snakemake.input.variants_json,
        variants_png=snakemake.output.variants_png,
        run=run,
    )
