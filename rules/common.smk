# Shared by the rules: config checks, paths, wildcard constraints, code fingerprints, MLflow hooks.
#
# What each rule reruns on is exactly its params (the config it reads, and the fingerprint of
# the code it runs). Settings that change speed only (envs stepped together, checkpoint spacing)
# are `resources:` instead, which rerun nothing. config/schema.yaml says, per key, which rules
# read it (`x-read-by`); tests/test_rerun_matrix.py checks that against Snakemake's plan.
from snakemake.exceptions import WorkflowError

from demo2rl import (
    arms,
    config as config_checks,
    groups,
    names,
    probe,
    provenance,
    tasks,
    vec_kinds,
)

# the config, then the task itself (one env batch, one reset, one expert call): a bad key, a
# space the workflow cannot use or an expert that does not fit fails here, before any job
try:
    config_checks.check(config)
    PROBE = probe.probe_task(config)
except config_checks.ConfigError as err:
    raise WorkflowError(f"Invalid config: {err}") from None
# `rl.inits: all`: every arm that applies to the task (the probe says which, and logs why an arm
# is left out); an explicit list is checked by the probe and kept as it is
config["rl"]["inits"] = list(PROBE.arms)
# `auto` as it runs (native or dummy), so that spelling out the same choice reruns nothing
config["rl"]["vec_env"] = vec_kinds.resolve_vec_env(
    config["rl"]["vec_env"], config["task"]["env_id"], config["task"]["frame_stack"]
)
# `rl.device: auto` as it runs: CUDA for a CNN policy where this machine has an NVIDIA GPU (the
# job then requests the `gpu` resource), else the CPU, where small MLPs train fastest
config["rl"]["device"] = config_checks.rl_device(config["rl"]["device"], PROBE.images)

# params compare as text: sort the config's keys, so that their order in a file never counts
_canonical = config_checks.canonical(config)
config.clear()
config.update(_canonical)

RESULTS = f"results/{config['experiment']}"
# the sections the rules read themselves (each job gets the one or two numbers it uses)
COLLECT = config_checks.CollectConfig.of(config["collect"])
EVALUATE = config_checks.EvaluateConfig.of(config["evaluate"])
SHARDS = range(COLLECT.n_shards)
INITS = config["rl"]["inits"]
RL_SEEDS = config["rl"]["seeds"]
RL_RUNS = names.rl_runs(INITS, RL_SEEDS)
RL_DIR = f"{RESULTS}/{names.RL_DIR}"
"""An RL run's directory, with the init and seed wildcards."""
ARM_LOOKS = {arm.name: [arm.label, arm.color] for arm in map(arms.get, INITS)}
"""How tables and figures show each arm: a param of the rules that show them (code fingerprints
leave labels and colours out, so that editing one retrains nothing)."""
TASK = {k: v for k, v in config["task"].items() if k != "timeout_s"}
"""The task as a job's param: all but `timeout_s`, which changes no result (the time limit on
the task's code: the `timeout_ms` resource, demo2rl.jobs.task_config)."""
ENV = {k: TASK[k] for k in ("env_id", "env_kwargs", "frame_stack", "max_episode_steps")}
"""The task without its expert: what stages that only step the env read."""
TIMEOUT_MS = max(1, round(1000 * config["task"]["timeout_s"]))
"""`task.timeout_s` in integer milliseconds, the resource the rules take (Snakemake would round
a float resource to whole seconds)."""
TASK_CODE = tasks.entry_point_modules(
    config["task"]["env_id"], config["task"]["expert"]["entry_point"]
)
"""The modules of the task's env and expert (a user's own code, too)."""
# how tracking failures are treated: a dataclass, which Snakemake leaves out of its params rerun
# trigger (it cannot change a result); tests/test_rerun_matrix.py checks that it stays so
TRACKING = config_checks.TrackingConfig.of(config["tracking"])


def rl_inputs(wildcards):
    """The dataset for every arm (normalisation statistics), the clone for the arms that use it."""
    inputs = {"demos": f"{RESULTS}/demos/demos.h5"}
    if arms.get(wildcards.init).needs_clone:
        inputs["bc"] = f"{RESULTS}/bc/policy.pt"
    return inputs


def rl_params(wildcards):
    """The rl slice a run of this arm reads (checkpoint_every is a resource instead)."""
    return groups.arm_rl_config(config["rl"], wildcards.init)


def gpus(device):
    """The standard `gpu` resource: 1 when the config asks for a CUDA device."""
    return 1 if str(device).startswith("cuda") else 0


def code(stage, task=False):
    """Fingerprint of the code a rule runs (its stage module and what that imports; with
    `task`, the task's env and expert too); as a param, an edit of that code reruns the rule.
    """
    return provenance.code_fingerprint(
        f"demo2rl.stages.{stage}", *(TASK_CODE if task else ())
    )


wildcard_constraints:
    shard=r"\d+",
    init="|".join(INITS),
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
