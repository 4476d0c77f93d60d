# demo2rl: expert demonstrations -> behaviour cloning -> RL, one reproducible workflow.
# Run: `snakemake --cores N` (the default profile in profiles/default is loaded automatically),
# or on a cluster `snakemake --profile profiles/slurm`. See README.md.
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from demo2rl.config import ConfigError, check_version

min_version("9.0")


# --configfile replaces the default config (rather than merging into it); --config key=value
# overrides single keys of whichever config is in effect
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


try:  # a config of an older format: the key to rename, before the schema's own message
    check_version(config)
except ConfigError as err:
    raise WorkflowError(f"Invalid config: {err}") from None
validate(config, "config/schema.yaml")


include: "rules/common.smk"
include: "rules/collect.smk"
include: "rules/bc.smk"
include: "rules/dagger.smk"
include: "rules/rl.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        # every variant's (the base config's first): the dataset, the clone, the RL runs, the
        # report; where a variant shares a job with an earlier one, that job's files
        PLAN.final_targets(),
