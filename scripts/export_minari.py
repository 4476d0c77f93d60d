"""Rule export_minari: the dataset as a Minari dataset."""

from demo2rl.runner import run_rule
from demo2rl.stages import export_minari as stage

run_rule(snakemake, stage.export_minari)
