"""Rule evaluate: one policy (expert, clone or RL run) on the held-out evaluation tracks."""

from demo2rl.stages import evaluate as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.evaluate_policy)
