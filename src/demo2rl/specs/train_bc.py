"""The behaviour clone: the train_bc job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl import names
from demo2rl.config import BCConfig, PolicyConfig, TaskConfig
from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.names": "run names (what a run is called, not what it computes); the stages that "
    "name files import it themselves",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BCJob:
    """The behaviour clone and its held-out comparison with the expert (rule train_bc).

    :param task: the env and its expert (the held-out comparison drives both).
    :param policy: the network config shared with the RL arms.
    :param bc: the ``bc`` section.
    :param seed: the workflow's base seed.
    :param eval_episodes: held-out episodes of the clone-vs-expert comparison.
    :param demos: the merged dataset.
    :param policy_out: the clone's checkpoint.
    :param metrics_out: the training history and the comparison.
    :param threads: torch threads (and loader workers when streaming).
    :param eval_envs: envs stepped together in the comparison.
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "bc"
    TASK_CODE: ClassVar[bool] = True
    task: TaskConfig = common.task()
    policy: PolicyConfig = result("policy", of=common.typed(PolicyConfig))
    bc: BCConfig = result("bc", omit=("dagger",), of=common.typed(BCConfig))
    seed: int = common.seed()
    eval_episodes: int = result("evaluate.during_training")
    demos: str = path()
    policy_out: str = path(source="output", key="policy")
    metrics_out: str = path(source="output", key="metrics")
    threads: int = speed(source="threads")
    eval_envs: int = speed("evaluate.n_envs")
    timeout_ms: int | None = common.timeout_ms(default=None)

    def run_name(self) -> str:
        return names.BC
