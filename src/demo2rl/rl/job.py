"""The train_rl job's spec: one RL run of an arm and seed, everything it is given."""

from __future__ import annotations

import dataclasses

from demo2rl import arms, names
from demo2rl.config import PolicyConfig, RLConfig, TaskConfig
from demo2rl.jobspec import path, speed


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLJob:
    """One RL run, as scripts/train_rl.py builds it from the rule.

    Every field but the paths and the speed settings is part of the run's resume key
    (:func:`demo2rl.jobspec.result_fields`).

    :param arm: the arm (:mod:`demo2rl.arms`), the rule's ``init`` wildcard.
    :param run_seed: the run's seed among ``rl.seeds``.
    :param seed: the workflow's base seed (training and evaluation seed blocks derive from it).
    :param task: the env, without its expert (RL never calls it).
    :param policy: the network config shared with BC.
    :param rl: the ``rl`` section as this arm's runs read it (its own arm section only).
    :param clip_obs: ``bc.clip_obs``: the observation normalisation's clip, the same as BC's.
    :param eval_episodes: held-out episodes of each evaluation during training.
    :param demos: the merged dataset (its statistics normalise observations; some arms train on
        it).
    :param clone: the behaviour clone's checkpoint, for the arms that need it, else None.
    :param state_dir: the run's resumable state, beside the outputs.
    :param policy_out: the trained policy's checkpoint (the stage writes the outputs; None when
        the trainer runs on its own).
    :param progress_out: PPO's per-rollout progress table.
    :param evaluations_out: the held-out evaluations during training (the learning curve).
    :param threads: worker processes of a subproc vec env.
    :param eval_envs: envs stepped together in the evaluations.
    :param checkpoint_every: env steps between resumable checkpoints.
    """

    arm: str
    run_seed: int
    seed: int
    task: TaskConfig
    policy: PolicyConfig
    rl: RLConfig
    clip_obs: float
    eval_episodes: int
    demos: str = path()
    clone: str | None = path(default=None)
    state_dir: str = path()
    policy_out: str | None = path(default=None)
    progress_out: str | None = path(default=None)
    evaluations_out: str | None = path(default=None)
    threads: int = speed()
    eval_envs: int = speed()
    checkpoint_every: int = speed()

    def __post_init__(self) -> None:
        arm = arms.get(self.arm)
        uses_clone = arm.uses_clone(self.rl.to_dict())
        if uses_clone != (self.clone is not None):
            given = "given" if self.clone is not None else "not given"
            raise ValueError(
                f"the {arm.name} arm's job: the clone is {given}, but the arm "
                f"{'needs' if uses_clone else 'does not use'} it with this config"
            )

    @property
    def run(self) -> names.RLRun:
        """The run's name and directory."""
        return names.RLRun(self.arm, self.run_seed)
