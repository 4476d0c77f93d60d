"""Rule merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from demo2rl.jobs import job
from demo2rl.stages import merge_demos as stage

with job(snakemake, stage="merge", run_name="merge-demos") as run:
    stage.merge_demos(
        shards=list(snakemake.input),
        out=snakemake.output[0],
        n_episodes=snakemake.params.collect["n_episodes"],
        valid_fraction=snakemake.params.collect["valid_fraction"],
        codec=snakemake.resources.codec,
        run=run,
    )
