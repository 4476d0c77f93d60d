"""Rule merge_demos: shards to the merged dataset with its split, statistics and content hash."""

from demo2rl.runner import run_rule
from demo2rl.stages import merge_demos as stage

run_rule(snakemake, stage.merge_demos)
