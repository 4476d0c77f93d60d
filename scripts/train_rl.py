"""Rule train_rl: one RL run of an arm and seed; resumable."""

import sys

from demo2rl import rl
from demo2rl.stages import train_rl as stage
from demo2rl.workflow.runner import run_rule

try:
    run_rule(snakemake, stage.train_rl)
except rl.Preempted as stop:
    print(f"{stop}; rerun the workflow to resume", file=sys.stderr)
    sys.exit(rl.PREEMPTED_EXIT_CODE)
