# Shared by the rules: config checks, paths, wildcard constraints, code fingerprints, MLflow hooks.
#
# What each rule reruns on is exactly its params (the config it reads, and the fingerprint of
# the code it runs). Settings that change speed only (envs stepped together, checkpoint spacing)
# are `resources:` instead, which rerun nothing. config/schema.yaml says, per key, which rules
# read it (`x-read-by`); tests/test_rerun_matrix.py checks that against Snakemake's plan.
import copy
import functools
import json
import re
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

from demo2rl import (
    arms,
    config as config_checks,
    groups,
    names,
    probe,
    provenance,
    tasks,
    variants,
    vec_kinds,
)
from demo2rl.workflow import graph

SCHEMA = Path(workflow.basedir) / "config" / "schema.yaml"
"""The config schema the Snakefile validates with."""
SCHEMA_LEAVES = variants.schema_leaves(yaml.safe_load(SCHEMA.read_text()))
"""Every config key, with the rules that read it (x-read-by): what a variant shares by."""


@functools.cache
def probed(task_json):
    """The task probe (one env batch, one reset, a few steps, one expert call), once per distinct
    task, encoder and arm choice among the variants."""
    return probe.probe_task(json.loads(task_json))


def resolved(name, cfg):
    """A variant's config as its jobs read it: checked, its task probed (a bad key, a space the
    workflow cannot use or an expert that does not fit fails here, before any job, naming the
    variant), the `auto` and `all` values resolved as they run, keys sorted."""
    try:
        config_checks.check(cfg)
        probe_input = {
            "task": cfg["task"],
            "policy": {"cnn": cfg["policy"]["cnn"]},
            "rl": {k: cfg["rl"][k] for k in ("inits", "vec_env")},
        }
        found = probed(json.dumps(probe_input, sort_keys=True))
    except config_checks.ConfigError as err:
        where = "" if name == variants.BASE else f"variant {name!r}: "
        raise WorkflowError(f"Invalid config: {where}{err}") from None
    # `rl.inits: all`: every arm that applies to the task (the probe says which, and logs why an
    # arm is left out); an explicit list is checked by the probe and kept as it is
    cfg["rl"]["inits"] = list(found.arms)
    # `auto` as it runs (native or dummy), so that spelling out the same choice reruns nothing
    cfg["rl"]["vec_env"] = vec_kinds.resolve_vec_env(
        cfg["rl"]["vec_env"], cfg["task"]["env_id"], cfg["task"]["frame_stack"]
    )
    # `rl.device: auto` as it runs: CUDA for a CNN policy where this machine has an NVIDIA GPU
    # (the job then requests the `gpu` resource), else the CPU, where small MLPs train fastest
    cfg["rl"]["device"] = config_checks.rl_device(cfg["rl"]["device"], found.images)
    # params compare as text: sort the config's keys, so that their order in a file never counts
    return config_checks.canonical(cfg)


def variant_configs(base):
    """The base config and every variant's, each validated by the schema and resolved."""
    plain = {k: v for k, v in base.items() if k != "variants"}
    configs = {variants.BASE: resolved(variants.BASE, copy.deepcopy(plain))}
    try:
        declared = variants.declared(base["variants"])
        for name, overrides in declared.items():
            variants.check_overrides(name, overrides, SCHEMA_LEAVES)
    except config_checks.ConfigError as err:
        raise WorkflowError(f"Invalid config: {err}") from None
    for name, overrides in declared.items():
        merged = variants.merge(plain, overrides)
        try:
            validate(merged, str(SCHEMA))
        except WorkflowError as err:
            raise WorkflowError(f"Invalid config: variant {name!r}: {err}") from None
        configs[name] = resolved(name, merged)
    return configs


class Variant:
    """One variant of the invocation as the rules read it: its config's sections and the
    values derived from them (the base config is the variant `base`)."""

    def __init__(self, name, cfg):
        self.name = name
        self.config = cfg
        self.root = names.variant_root(RESULTS, name)
        # the sections the rules read themselves (each job gets the one or two numbers it uses)
        self.collect = config_checks.CollectConfig.of(cfg["collect"])
        self.evaluate = config_checks.EvaluateConfig.of(cfg["evaluate"])
        self.inits = cfg["rl"]["inits"]
        self.runs = names.rl_runs(self.inits, cfg["rl"]["seeds"])
        self.policies = names.policy_names(self.inits, cfg["rl"]["seeds"])
        self.arm_looks = {
            arm.name: [arm.label, arm.color] for arm in map(arms.get, self.inits)
        }
        """How tables and figures show each arm: a param of the rules that show them (code
        fingerprints leave labels and colours out, so that editing one retrains nothing)."""
        self.task = {k: v for k, v in cfg["task"].items() if k != "timeout_s"}
        """The task as a job's param: all but `timeout_s`, which changes no result (the time
        limit on the task's code: the `timeout_ms` resource, demo2rl.jobs.task_config)."""
        self.env = {
            k: self.task[k]
            for k in ("env_id", "env_kwargs", "frame_stack", "max_episode_steps")
        }
        """The task without its expert: what stages that only step the env read."""
        self.timeout_ms = max(1, round(1000 * cfg["task"]["timeout_s"]))
        """`task.timeout_s` in integer milliseconds, the resource the rules take (Snakemake
        would round a float resource to whole seconds)."""
        self.task_code = tuple(
            tasks.entry_point_modules(
                cfg["task"]["env_id"], cfg["task"]["expert"]["entry_point"]
            )
        )
        """The modules of the task's env and expert (a user's own code, too)."""
        self.racing = cfg["task"]["env_id"].rpartition(":")[2] == "Racing-v0"


RESULTS = f"results/{config['experiment']}"
VARIANTS = {name: Variant(name, cfg) for name, cfg in variant_configs(config).items()}
"""Every variant of this invocation, the base first."""
BASE = VARIANTS[variants.BASE]
BY_ROOT = {v.root: v for v in VARIANTS.values()}
SHARING = variants.Sharing(
    {name: v.config for name, v in VARIANTS.items()}, SCHEMA_LEAVES
)
# the base config as its jobs read it, with the variants as declared (what the MLflow parent
# run records)
_declared = config["variants"]
config.clear()
config.update(config_checks.canonical({**BASE.config, "variants": _declared}))
# how tracking failures are treated: a dataclass, which Snakemake leaves out of its params rerun
# trigger (it cannot change a result); tests/test_rerun_matrix.py checks that it stays so
TRACKING = config_checks.TrackingConfig.of(config["tracking"])
ALL_INITS = sorted({init for v in VARIANTS.values() for init in v.inits})
RL_DIR = f"{{root}}/{names.RL_DIR}"
"""An RL run's directory, with the root (a variant's results), init and seed wildcards."""


def V(wildcards):
    """The variant whose results directory a job's `root` wildcard is."""
    return BY_ROOT[wildcards.root]


def owner_root(variant, *job):
    """Where the job `job` of `variant` writes: the results of the first variant with the same
    job (demo2rl.variants.Sharing), so that a job is never run twice."""
    return VARIANTS[SHARING.owner(variant.name, *job)].root


def output_path(variant, job):
    """The main output of `variant`'s job `job` (demo2rl.workflow.graph), where its owner writes it."""
    return graph.kind(job).output(owner_root(variant, *job), job[1:])


def job_inputs(variant, job):
    """The outputs `variant`'s job `job` reads, by the rule's input name (the graph's)."""
    needed = graph.kind(job).inputs(variant.config, job[1:])
    return {name: output_path(variant, upstream) for name, upstream in needed.items()}


def demos_path(variant):
    return output_path(variant, ("demos",))


def clone_path(variant):
    return output_path(variant, ("clone",))


def rl_run_dir(variant, run):
    return run.dir(owner_root(variant, "rl", run.arm, str(run.seed)))


def evaluation_path(variant, policy):
    return output_path(variant, ("evaluation", policy))


def report_targets(variant):
    """What rule all builds of a variant's report (rules/report.smk) (the clone's loss plot is its clone's)."""
    reports = f"{variant.root}/report"
    figures = {**SUMMARY_FIGURES, **(RACING_FIGURES if variant.racing else {})}
    return [
        f"{reports}/summary.md",
        f"{reports}/summary.json",
        f"{owner_root(variant, 'clone')}/bc/loss.png",
        *(f"{reports}/{path}" for path in figures.values()),
    ]


def rl_inputs(wildcards):
    """The dataset for every arm (normalisation statistics), the clone for the arms that use it."""
    return job_inputs(V(wildcards), ("rl", wildcards.init, wildcards.seed))


def evaluation_inputs(wildcards):
    """A learned policy's checkpoint, and the dataset it must record as its own (the expert:
    nothing)."""
    return job_inputs(V(wildcards), ("evaluation", wildcards.policy))


def rl_params(wildcards):
    """The rl slice a run of this arm reads (checkpoint_every is a resource instead)."""
    return groups.arm_rl_config(V(wildcards).config["rl"], wildcards.init)


def variant_labels(**labels):
    """The labels of a file in Snakemake's report, with the variant whose file it is."""
    return lambda wildcards: {"variant": V(wildcards).name, **labels}


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
    return lambda wildcards: fingerprint(stage, V(wildcards).task_code if task else ())


def of_variant(get):
    """A param or resource that is `get(variant)` for the job's variant."""
    return lambda wildcards: get(V(wildcards))


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
