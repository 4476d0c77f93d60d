"""Rule train_bc: behaviour cloning of the merged demonstrations into the RL policy class."""

from demo2rl.runner import run_rule
from demo2rl.stages import train_bc as stage

run_rule(snakemake, stage.train_bc)
