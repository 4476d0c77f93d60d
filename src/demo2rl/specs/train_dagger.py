"""A DAgger round's clone: the train_dagger job's spec."""

from __future__ import annotations

import dataclasses

from demo2rl import names
from demo2rl.spec_fields import path, result
from demo2rl.specs import common
from demo2rl.specs.train_bc import BCJob

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.names": "run names (what a run is called, not what it computes)",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class DaggerBCJob(BCJob):
    """The clone of DAgger round ``round``: the plain clone's job (:class:`BCJob`, every field
    read the same way), trained on the round's aggregate ``data`` (rule train_dagger). Its
    ``demos`` is the dataset the aggregate grew from, which the clone records as its own (its
    ``demos_hash``: the arms and the evaluation check it).

    :param round: the round, the rule's ``round`` wildcard.
    :param data: the round's aggregate.
    """

    round: int = result(source="wildcards", of=common.integer)
    data: str = path()

    def run_name(self) -> str:
        return names.dagger_policy(self.round)
