# Helpers shared by the rules: config checks, paths, code fingerprints, MLflow hooks.
from snakemake.exceptions import WorkflowError

from demo2rl import config as config_checks, provenance, tracking

try:
    config_checks.check(config)
except config_checks.ConfigError as err:
    raise WorkflowError(f"Invalid config: {err}") from None

RESULTS = f"results/{config['experiment']}"
SHARDS = range(config["collect"]["n_shards"])


def code(*modules):
    """Fingerprint of the library code a rule runs (params: an edit reruns the rule)."""
    return provenance.code_fingerprint(*modules)


onstart:
    tracking.start_workflow(config["experiment"], config)


onsuccess:
    tracking.end_workflow(success=True)


onerror:
    tracking.end_workflow(success=False)
