"""Rule dagger_shard: one shard of a DAgger round, driven by the last clone and the expert,
labelled by the expert."""

from demo2rl.stages import dagger_shard as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.dagger_shard)
