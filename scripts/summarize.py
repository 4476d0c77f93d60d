"""Rule summarize: the comparison across policies and RL seeds, its tables and numbers."""

from demo2rl.stages import summarize as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.summarize)
