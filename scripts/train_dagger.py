"""Rule train_dagger: a DAgger round's clone, trained on its aggregate."""

from demo2rl.stages import train_dagger as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.train_dagger)
