# Shared by the rules: config checks, paths, wildcard constraints, code fingerprints, MLflow hooks.
from snakemake.exceptions import WorkflowError

from demo2rl import config as config_checks, provenance, tracking

try:
    config_checks.check(config)
except config_checks.ConfigError as err:
    raise WorkflowError(f"Invalid config: {err}") from None

# params compare as text: sort the config's keys, so that their order in a file never counts
_canonical = config_checks.canonical(config)
config.clear()
config.update(_canonical)

RESULTS = f"results/{config['experiment']}"
SHARDS = range(config["collect"]["n_shards"])
INITS = ["bc", "scratch"]
RL_SEEDS = config["rl"]["seeds"]


def rl_inputs(wildcards):
    """The dataset for both arms (normalisation statistics), the clone for the bc arm."""
    inputs = {"demos": f"{RESULTS}/demos/demos.h5"}
    if wildcards.init == "bc":
        inputs["bc"] = f"{RESULTS}/bc/policy.pt"
    return inputs


def rl_params(wildcards):
    """The rl slice a run depends on: not the seed list (adding a seed must not rerun the
    others), and warm-start settings only for the bc arm."""
    skip = {"seeds"} | ({"warm_start"} if wildcards.init == "scratch" else set())
    return {k: v for k, v in config["rl"].items() if k not in skip}


def gpus(device):
    """The standard `gpu` resource: 1 when the config asks for a CUDA device."""
    return 1 if str(device).startswith("cuda") else 0


def code(*modules):
    """Fingerprint of the library code behind a job; as a param, an edit of that code reruns it."""
    return provenance.code_fingerprint(*modules)


wildcard_constraints:
    shard=r"\d+",
    init="|".join(INITS),
    seed=r"\d+",


# MLflow: the store is created and the parent run started here, once, before any job (jobs
# racing to create a SQLite store corrupt it); the jobs find both through the environment.
onstart:
    parent = tracking.start_workflow(config["experiment"], config)
    if parent:
        logger.info(f"MLflow: parent run {parent} in {tracking.tracking_uri()}")


onsuccess:
    tracking.end_workflow(success=True, settings=tracking.settings(config))


onerror:
    tracking.end_workflow(success=False, settings=tracking.settings(config))
