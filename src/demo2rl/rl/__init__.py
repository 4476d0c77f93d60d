"""Reinforcement learning from the demonstrations: PPO and SAC in the arms of :mod:`demo2rl.arms`.

* :mod:`demo2rl.rl.recipe`: the recipe, read top to bottom: the env, where each arm starts, the
  critic warm-up and the guide terms in PPO's update.
* :mod:`demo2rl.rl.sac`: our SAC update (SB3's mathematics, a batched critic ensemble).
* :mod:`demo2rl.rl.replay`: the off-policy arms' replay, demonstrations in every batch.
* :mod:`demo2rl.rl.trainer`: one run around the recipe: inputs, resume, evaluation and checkpoint
  schedule, SIGTERM.
* :mod:`demo2rl.rl.state`: the state directory: the run's key, its lock, its resumable state.
* :mod:`demo2rl.rl.progress`: the progress log lines, the metrics sink and the output tables.
"""

from demo2rl.rl.progress import evaluations_table, progress_table
from demo2rl.rl.recipe import (
    DemoSAC,
    Guide,
    GuidedPPO,
    Start,
    build_model,
    make_training_env,
    sac_spec,
)
from demo2rl.rl.state import (
    CHECKPOINT,
    KEY,
    STATE,
    StateDirBusy,
    claim_state_dir,
    load_state,
    lock_state_dir,
    run_key,
    save_state,
)
from demo2rl.rl.trainer import PREEMPTED_EXIT_CODE, Preempted, RLResult, train_rl

__all__ = [
    "CHECKPOINT",
    "KEY",
    "PREEMPTED_EXIT_CODE",
    "STATE",
    "DemoSAC",
    "Guide",
    "GuidedPPO",
    "Preempted",
    "RLResult",
    "Start",
    "StateDirBusy",
    "build_model",
    "claim_state_dir",
    "evaluations_table",
    "load_state",
    "lock_state_dir",
    "make_training_env",
    "progress_table",
    "run_key",
    "sac_spec",
    "save_state",
    "train_rl",
]
