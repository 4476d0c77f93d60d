"""Rule compare_variants: every config variant against the base, per policy group."""

from demo2rl.runner import run_rule
from demo2rl.stages import compare_variants as stage

run_rule(snakemake, stage.compare_variants)
