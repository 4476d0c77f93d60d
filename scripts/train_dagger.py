"""Rule train_dagger: a DAgger round's clone, trained on its aggregate."""

from demo2rl.runner import run_rule
from demo2rl.stages import train_dagger as stage

run_rule(snakemake, stage.train_dagger)
