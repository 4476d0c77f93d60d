"""Rule aggregate_dagger: a DAgger round's aggregate of every label so far."""

from demo2rl.stages import aggregate_dagger as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.aggregate_dagger)
