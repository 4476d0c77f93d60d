"""Reinforcement learning from the demonstrations: PPO in four arms, three of which use them.

* :mod:`demo2rl.rl.arms`: the recipe, read top to bottom: the env, where each arm starts, the
  critic warm-up and the guide terms in PPO's update.
* :mod:`demo2rl.rl.trainer`: one run around it: inputs, resume, evaluation and checkpoint
  schedule, SIGTERM.
* :mod:`demo2rl.rl.state`: the state directory: the run's key, its lock, its checkpoint.
* :mod:`demo2rl.rl.progress`: the progress log lines, the metrics sink and the output tables.
"""

from demo2rl.rl.arms import ARMS, Guide, GuidedPPO, build_model, make_training_env
from demo2rl.rl.progress import evaluations_table, progress_table
from demo2rl.rl.state import (
    CHECKPOINT,
    KEY,
    STATE,
    StateDirBusy,
    claim_state_dir,
    load_checkpoint,
    lock_state_dir,
    run_key,
    save_checkpoint,
)
from demo2rl.rl.trainer import PREEMPTED_EXIT_CODE, Preempted, RLResult, train_rl

__all__ = [
    "ARMS",
    "CHECKPOINT",
    "KEY",
    "PREEMPTED_EXIT_CODE",
    "STATE",
    "Guide",
    "GuidedPPO",
    "Preempted",
    "RLResult",
    "StateDirBusy",
    "build_model",
    "claim_state_dir",
    "evaluations_table",
    "load_checkpoint",
    "lock_state_dir",
    "make_training_env",
    "progress_table",
    "run_key",
    "save_checkpoint",
    "train_rl",
]
