"""One policy on the held-out tracks: the evaluate job's spec."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from demo2rl import names
from demo2rl.config import TaskConfig
from demo2rl.spec_fields import path, result, speed
from demo2rl.specs import common

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.names": "run names (what a run is called, not what it computes); the stages that "
    "name files import it themselves",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluateJob:
    """One policy (the expert, the clone or an RL run) on the held-out tracks (rule evaluate).

    :param name: the policy's name (``expert``, ``bc`` or ``rl-<arm>-seed<s>``), the rule's
        ``policy`` wildcard.
    :param task: the env, with its expert for the expert's evaluation (a learned policy's
        network comes from its checkpoint).
    :param episodes: held-out episodes.
    :param seed: the workflow's base seed (the held-out tracks' seeds derive from it).
    :param checkpoint: a learned policy's checkpoint (None for the expert).
    :param demos: the dataset the policy was trained on (None for the expert).
    :param out: the evaluation record.
    :param envs: envs stepped together.
    :param timeout_ms: the time limit on each env or expert call.
    """

    STAGE: ClassVar[str] = "evaluate"
    TASK_CODE: ClassVar[bool] = True
    name: str = result(source="wildcards", key="policy")
    task: TaskConfig = result(
        *common.ENV, f"task.expert[policy={names.EXPERT}]", of=common.task_config
    )
    episodes: int = result("evaluate.episodes")
    seed: int = common.seed()
    checkpoint: str | None = path(default=None)
    demos: str | None = path(default=None)
    out: str = path(source="output")
    envs: int = speed("evaluate.n_envs")
    timeout_ms: int = common.timeout_ms()

    def run_name(self) -> str:
        return f"eval-{self.name}"
