# Shared by the rules: the Plan (demo2rl.workflow), the calls into it, wildcard constraints and
# the MLflow hooks.
#
# What each rule reruns on is exactly its params (the config it reads, and the fingerprint of
# the code it runs). Settings that change speed only (envs stepped together, checkpoint spacing)
# are `resources:` instead, which rerun nothing. config/schema.yaml says, per key, which rules
# read it (`x-read-by`); tests/test_rerun_matrix.py checks that against Snakemake's plan.
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError

from demo2rl import config as config_checks, names
from demo2rl.tracking import hooks
from demo2rl.workflow.plan import SUMMARY_FIGURES, RACING_FIGURES, Plan, PlanError

SCHEMA = Path(workflow.basedir) / "config" / "schema.yaml"
"""The config schema the Snakefile validates with."""
try:
    PLAN = Plan(config, SCHEMA)
except PlanError as err:
    raise WorkflowError(f"Invalid config: {err}") from None
"""The invocation: its variants resolved, which variant's job each job is, every path."""
RESULTS = PLAN.results
VARIANTS = PLAN.variants
"""Every variant of this invocation, the base first."""
# the base config as its jobs read it, with the variants as declared (what the MLflow parent
# run records)
config.clear()
config.update(PLAN.config())
# how tracking failures are treated: a dataclass, which Snakemake leaves out of its params rerun
# trigger (it cannot change a result); tests/test_rerun_matrix.py checks that it stays so
TRACKING = config_checks.TrackingConfig.of(config["tracking"])
ALL_INITS = PLAN.arms
RL_DIR = f"{{root}}/{names.RL_DIR}"
"""An RL run's directory, with the root (a variant's results), init and seed wildcards."""


def job_variant(wildcards):
    """The variant whose results directory a job's `root` wildcard is."""
    return PLAN.at(wildcards.root)


def rl_run_dir(variant, run):
    return PLAN.run_dir(variant, run)


def evaluation_path(variant, policy):
    return PLAN.output(variant, ("evaluation", policy))


def job_inputs(job):
    """The input function of a rule computing `job(wildcards)` (demo2rl.workflow.graph)."""
    return lambda wildcards: PLAN.inputs(job_variant(wildcards), job(wildcards))


def rl_params(wildcards):
    """The rl slice a run of this arm reads (checkpoint_every is a resource instead)."""
    return PLAN.rl_params(job_variant(wildcards), wildcards.init)


def variant_labels(**labels):
    """The labels of a file in Snakemake's report, with the variant whose file it is."""
    return lambda wildcards: {"variant": job_variant(wildcards).name, **labels}


def code(stage, task=False):
    """The fingerprint of the code of `stage` (Plan.code), as a param: editing that code reruns
    the rule."""
    return lambda wildcards: PLAN.code(stage, job_variant(wildcards) if task else None)


def from_variant(get):
    """A param or resource that is `get(variant)` for the job's variant."""
    return lambda wildcards: get(job_variant(wildcards))


wildcard_constraints:
    root="|".join(re.escape(v.root) for v in VARIANTS.values()),
    shard=r"\d+",
    init="|".join(ALL_INITS),
    seed=r"\d+",


# MLflow: the store and this invocation's parent run, once, before any job; the jobs find both
# through the environment (demo2rl.tracking.hooks; nothing touches MLflow with tracking off)
onstart:
    hooks.on_start(config["experiment"], config, TRACKING, logger)


onsuccess:
    hooks.on_end(True, TRACKING)


onerror:
    hooks.on_end(False, TRACKING)
