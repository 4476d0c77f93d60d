"""Rule collect_shard: one contiguous range of demonstration episodes to an HDF5 shard."""

from demo2rl.jobs import job, task_config
from demo2rl.stages import collect_shard as stage

shard = int(snakemake.wildcards.shard)
with job(snakemake, stage="collect", run_name=f"collect-shard{shard}") as run:
    stage.collect_shard(
        shard=shard,
        out=snakemake.output[0],
        task=task_config(snakemake),
        n_episodes=snakemake.params.collect["n_episodes"],
        n_shards=snakemake.params.collect["n_shards"],
        seed=snakemake.params.seed,
        n_envs=snakemake.resources.envs,
        codec=snakemake.resources.codec,
        run=run,
    )
