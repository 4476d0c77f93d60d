"""Rule export_minari: the dataset as a Minari dataset."""

from demo2rl.stages import export_minari as stage
from demo2rl.workflow.runner import run_rule

run_rule(snakemake, stage.export_minari)
