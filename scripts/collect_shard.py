"""Rule collect_shard: one contiguous range of demonstration episodes to an HDF5 shard."""

from demo2rl.stages import collect_shard as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.collect_shard)
