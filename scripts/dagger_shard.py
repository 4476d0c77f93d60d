"""Rule dagger_shard: one shard of a DAgger round, driven by the last clone and the expert,
labelled by the expert."""

from demo2rl.runner import run_rule
from demo2rl.stages import dagger_shard as stage

run_rule(snakemake, stage.dagger_shard)
