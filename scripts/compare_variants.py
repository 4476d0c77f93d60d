"""Rule compare_variants: every config variant against the base, per policy group."""

from demo2rl.stages import compare_variants as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.compare_variants)
