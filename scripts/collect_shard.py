"""Rule collect_shard: one contiguous range of demonstration episodes to an HDF5 shard."""

from demo2rl import collect, dataset
from demo2rl.jobs import job

shard = int(snakemake.wildcards.shard)
task, cfg = snakemake.params.task, snakemake.params.collect

with job(snakemake, stage="collect", run_name=f"collect-shard{shard}") as run:
    demos = collect.collect_shard(
        env_id=task["env_id"],
        env_kwargs=task["env_kwargs"],
        expert_entry_point=task["expert"]["entry_point"],
        expert_kwargs=task["expert"]["kwargs"],
        base_seed=snakemake.params.seed,
        episodes=collect.shard_episodes(cfg["n_episodes"], cfg["n_shards"], shard),
        n_envs=cfg["n_envs"],
    )
    digest = dataset.write(snakemake.output[0], demos)
    run.log_metrics(collect.summary(demos))
    run.log_dataset(snakemake.output[0], digest, context="collected")
