"""Rule merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from demo2rl.stages import merge_demos as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.merge_demos)
