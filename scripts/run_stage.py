"""Every heavy rule's script: the rule's stage on its job spec, both named by the rule
(demo2rl.specs.registry), with the job's log and MLflow run (demo2rl.workflow.runner)."""

from demo2rl.workflow.runner import run_rule

run_rule(snakemake)
