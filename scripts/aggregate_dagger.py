"""Rule aggregate_dagger: a DAgger round's aggregate of every label so far."""

from demo2rl.runner import run_rule
from demo2rl.stages import aggregate_dagger as stage

run_rule(snakemake, stage.aggregate_dagger)
