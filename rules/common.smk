# Shared by the rules: the Plan (demo2rl.workflow), the calls into it, wildcard constraints and
# the MLflow hooks.
#
# A heavy rule's params and resources are its job spec's fields (demo2rl.specs), each computed
# from the config keys the field declares it reads: params are what can change its result (the
# config it reads, the fingerprint of the code it runs), which Snakemake reruns a job on and a
# variant shares it on, and the tracking settings (a dataclass: no rerun trigger); resources are
# speed settings, which rerun nothing.
# tests/test_rerun_matrix.py checks the declarations against Snakemake's plans.
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError

from demo2rl import names
from demo2rl.tracking import hooks
from demo2rl.workflow import graph
from demo2rl.workflow.plan import Plan, PlanError

# the GPUs the invocation declares (`--resources gpu=N`, a cluster profile's), where `auto`
# devices may pick CUDA (demo2rl.config.device)
GPUS = getattr(workflow.global_resources.get("gpu"), "value", None)
try:
    PLAN = Plan(config, Path(workflow.basedir) / "config" / "schema.yaml", GPUS)
except PlanError as err:
    raise WorkflowError(f"Invalid config: {err}") from None


def from_variant(get):
    """An input, param or resource: `get(variant)` of the variant whose results the job's `root`
    wildcard is."""
    return lambda wildcards: get(PLAN.at(wildcards.root))


def job_inputs(kind):
    """The inputs of a rule computing the job of `kind` its wildcards name
    (demo2rl.workflow.graph)."""
    job_kind = graph.KINDS[kind]  # (a misspelt kind fails as the rule is parsed)
    return lambda wc: PLAN.inputs(PLAN.at(wc.root), job_kind.job_of(wc))


def variant_labels(**labels):
    """The labels of a file in Snakemake's report, with the variant whose file it is."""
    return from_variant(lambda v: {"variant": v.name, **labels})


wildcard_constraints:
    root="|".join(re.escape(v.root) for v in PLAN.variants.values()),
    shard=r"\d+",
    round=r"[1-9]\d*",
    arm="|".join(PLAN.arms),
    seed=r"\d+",


# MLflow: the store and this invocation's parent run, once, before any job, which records the
# base config as its jobs read it (PLAN.config()); the jobs find both through the environment
# (demo2rl.tracking.hooks; nothing touches MLflow with tracking off)
onstart:
    hooks.on_start(config["experiment"], PLAN.config(), PLAN.tracking, logger)


onsuccess:
    hooks.on_end(True, PLAN.tracking)


onerror:
    hooks.on_end(False, PLAN.tracking)
