"""The script of every rule that runs a stage: the rule's stage (demo2rl.specs.registry) on its
job spec, or for a plot on its named files, with the job's log and MLflow run
(demo2rl.workflow.runner)."""

from demo2rl.workflow.runner import run_rule

run_rule(snakemake)
