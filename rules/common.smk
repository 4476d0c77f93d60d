# Shared by the rules: config checks, paths, wildcard constraints, code fingerprints, MLflow hooks.
#
# What each rule reruns on is exactly its params (the config it reads, and the fingerprint of
# the code it runs). Settings that change speed only (envs stepped together, checkpoint spacing)
# are `resources:` instead, which rerun nothing. config/schema.yaml says, per key, which rules
# read it (`x-read-by`); tests/test_rerun_matrix.py checks that against Snakemake's plan.
import functools
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError

from demo2rl import config as config_checks, groups, names, provenance
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


def demos_path(variant):
    return PLAN.output(variant, ("demos",))


def rl_run_dir(variant, run):
    return PLAN.run_dir(variant, run)


def evaluation_path(variant, policy):
    return PLAN.output(variant, ("evaluation", policy))


def job_inputs(job):
    """The input function of a rule computing `job(wildcards)` (demo2rl.workflow.graph)."""
    return lambda wildcards: PLAN.inputs(job_variant(wildcards), job(wildcards))


def rl_params(wildcards):
    """The rl slice a run of this arm reads (checkpoint_every is a resource instead)."""
    return groups.arm_rl_config(job_variant(wildcards).config["rl"], wildcards.init)


def variant_labels(**labels):
    """The labels of a file in Snakemake's report, with the variant whose file it is."""
    return lambda wildcards: {"variant": job_variant(wildcards).name, **labels}


def gpus(device):
    """The standard `gpu` resource: 1 when the config asks for a CUDA device."""
    return 1 if str(device).startswith("cuda") else 0


@functools.cache
def fingerprint(stage, task_code):
    return provenance.code_fingerprint(f"demo2rl.stages.{stage}", *task_code)


def code(stage, task=False):
    """Fingerprint of the code a rule runs (its stage module and what that imports; with
    `task`, the task's env and expert too), a function of the job's variant; as a param, an
    edit of that code reruns the rule.
    """
    return lambda wildcards: fingerprint(
        stage, job_variant(wildcards).task_code if task else ()
    )


def from_variant(get):
    """A param or resource that is `get(variant)` for the job's variant."""
    return lambda wildcards: get(job_variant(wildcards))


wildcard_constraints:
    root="|".join(re.escape(v.root) for v in VARIANTS.values()),
    shard=r"\d+",
    init="|".join(ALL_INITS),
    seed=r"\d+",


# MLflow: the store is created and the parent run started here, once, before any job (jobs
# racing to create a SQLite store corrupt it); the jobs find both through the environment.
# (demo2rl.tracking imports mlflow only when used, here: that takes seconds, and every job and
# dry run parses this file.) With tracking.enabled false, nothing here touches MLflow.
def start_tracking():
    from demo2rl import tracking

    if not TRACKING.enabled:
        logger.info("MLflow tracking off (tracking.enabled: false)")
        return
    parent = tracking.start_workflow(config["experiment"], config, TRACKING)
    if parent:
        logger.info(f"MLflow: parent run {parent} in {tracking.tracking_uri()}")


def end_tracking(success):
    from demo2rl import tracking

    if TRACKING.enabled:
        tracking.end_workflow(success=success, settings=TRACKING)


onstart:
    start_tracking()


onsuccess:
    end_tracking(True)


onerror:
    end_tracking(False)
