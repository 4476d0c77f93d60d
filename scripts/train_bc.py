"""Rule train_bc: behaviour cloning of the merged demonstrations into the RL policy class."""

from demo2rl.stages import train_bc as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.train_bc)
