"""Rule evaluate: one policy (expert, clone or RL run) on the held-out evaluation tracks."""

from demo2rl.runner import run_rule
from demo2rl.stages import evaluate as stage

run_rule(snakemake, stage.evaluate_policy)
