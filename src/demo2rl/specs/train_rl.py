"""One RL run of an arm and seed: the train_rl job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl import arms, names
from demo2rl.config import PolicyConfig, RLConfig, TaskConfig
from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.arms": "the check that an arm gets the clone it uses (it fails a job or lets it "
    "run, and changes nothing the job computes)",
    "demo2rl.names": "run names (what a run is called, not what it computes); the stages that "
    "name files import it themselves",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RLJob:
    """One RL run of an arm and seed (rule train_rl).

    Every field but the paths and the speed settings is part of the run's resume key
    (:func:`demo2rl.spec_fields.result_fields`).

    :param arm: the arm (:mod:`demo2rl.arms`), the rule's ``arm`` wildcard.
    :param run_seed: the run's seed among ``rl.seeds``.
    :param seed: the workflow's base seed (training and evaluation seed blocks derive from it).
    :param task: the env, without its expert (RL never calls it).
    :param policy: the network config shared with BC.
    :param rl: the ``rl`` section as this arm's runs read it (its own arm section only; not
        ``checkpoint_every``, a speed setting).
    :param clip_obs: ``bc.clip_obs``: the observation normalisation's clip, the same as BC's.
    :param eval_episodes: held-out episodes of each evaluation during training.
    :param demos: the merged dataset (its statistics normalise observations; some arms train on
        it).
    :param clone: the behaviour clone's checkpoint, for the arms that need it, else None.
    :param state_dir: the run's resumable state, beside the outputs (not one: Snakemake must not
        delete it; it records the run's key, and a run resumes only its own state).
    :param policy_out: the trained policy's checkpoint (the stage writes the outputs; None when
        the trainer runs on its own).
    :param progress_out: the per-rollout progress table.
    :param evaluations_out: the held-out evaluations during training (the learning curve).
    :param threads: worker processes of a subproc vec env.
    :param eval_envs: envs stepped together in the evaluations.
    :param checkpoint_every: env steps between resumable checkpoints.
    :param timeout_ms: the time limit on each env call.
    """

    STAGE: ClassVar[str] = "rl"
    TASK_CODE: ClassVar[bool] = True
    VEC_ENV_CODE: ClassVar[bool] = True
    """Its fingerprint covers the task's own VecEnv too, where the run steps it."""
    arm: str = result(source="wildcards")
    run_seed: int = result(source="wildcards", key="seed", of=common.integer)
    seed: int = common.seed()
    task: TaskConfig = result(*common.ENV, of=common.task_config)
    policy: PolicyConfig = result("policy", of=common.typed(PolicyConfig))
    rl: RLConfig = result("rl", per_arm=True, of=common.typed(RLConfig))
    clip_obs: float = result("bc.clip_obs")
    eval_episodes: int = result("evaluate.during_training")
    demos: str = path()
    clone: str | None = path(default=None, key="bc")
    state_dir: str = path(derive="state_dir", source="params")
    policy_out: str | None = path(default=None, source="output", key="policy")
    progress_out: str | None = path(default=None, source="output", key="progress")
    evaluations_out: str | None = path(default=None, source="output", key="evaluations")
    threads: int = speed(source="threads")
    eval_envs: int = speed("evaluate.n_envs")
    checkpoint_every: int = speed("rl.checkpoint_every")
    timeout_ms: int | None = common.timeout_ms(default=None)

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

    def run_name(self) -> str:
        return self.run.name
