"""Rule summarize: the comparison across policies and RL seeds, its tables and numbers."""

from demo2rl.runner import run_rule
from demo2rl.stages import summarize as stage

run_rule(snakemake, stage.summarize)
