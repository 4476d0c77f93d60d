"""Rule import_demos: a dataset imported instead of collected (collect.source)."""

from demo2rl.stages import import_demos as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.import_demos)
