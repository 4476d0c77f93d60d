"""Rule merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from demo2rl import collect, dataset
from demo2rl.jobs import job

with job(snakemake, stage="merge", run_name="merge-demos") as run:
    shards = [dataset.read(path, verify=True) for path in snakemake.input]
    merged = dataset.merge(
        shards,
        list(snakemake.input),
        n_episodes=snakemake.params.collect["n_episodes"],
        valid_fraction=snakemake.params.collect["valid_fraction"],
    )
    digest = dataset.write(snakemake.output[0], merged)
    run.log_metrics(collect.summary(merged))
    run.log_dataset(snakemake.output[0], digest, context="merged")
