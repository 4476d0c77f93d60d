"""Rule import_demos: a dataset imported instead of collected (collect.source)."""

from demo2rl.runner import run_rule
from demo2rl.stages import import_demos as stage

run_rule(snakemake, stage.import_demos)
