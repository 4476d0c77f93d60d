"""The evaluated policies' groups and the comparisons between them.

``expert``, ``bc`` (the behaviour clone), ``dagger<r>`` (DAgger round r's clone), and one group
``rl_<arm>`` per RL arm (the runs of
that arm over seeds; names in :mod:`demo2rl.names`). The arms, their labels and their order come
from the registry (:mod:`demo2rl.arms`): a demo arm is compared with its own algorithm's control
(what the demonstrations add), with :data:`demo2rl.arms.CONTROL` (``scratch`` PPO, what a user
gets over the default) and with the clone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from demo2rl import arms, names

REFERENCE_GROUPS = {names.EXPERT: ("expert", "black"), names.BC: ("behaviour clone", "tab:orange")}
"""The groups that are not RL arms: their label and colour."""
DAGGER_GROUPS = tuple(names.dagger_policy(r) for r in range(1, names.MAX_DAGGER_ROUNDS + 1))
"""The DAgger rounds' clones (a group each, of one policy), in round order."""
DAGGER_COLORS = ("goldenrod", "darkgoldenrod", "olive", "darkkhaki", "peru")


def arm_groups() -> tuple[str, ...]:
    """The RL arms' groups, in registry order."""
    return tuple(arm.group for arm in arms.REGISTRY.values())


def all_groups() -> tuple[str, ...]:
    """Every policy group, in the order of every table and figure: expert, clone, the DAgger
    rounds' clones, the arms."""
    return (*REFERENCE_GROUPS, *DAGGER_GROUPS, *arm_groups())


def label(group: str) -> str:
    """How tables and figures name a group."""
    return _looks(group)[0]


def color(group: str) -> str:
    """A group's colour, the same in every figure."""
    return _looks(group)[1]


def _looks(group: str) -> tuple[str, str]:
    if group in REFERENCE_GROUPS:
        return REFERENCE_GROUPS[group]
    r = names.dagger_round(group)
    if r is not None:
        return f"DAgger clone, round {r}", DAGGER_COLORS[(r - 1) % len(DAGGER_COLORS)]
    arm = arms.get(names.group_arm(group) or group)
    return arm.label, arm.color


def policy_group(name: str) -> str:
    """The group of an evaluated policy: ``expert``, ``bc``, ``rl-bc-seed0`` -> ``rl_bc``."""
    if name in REFERENCE_GROUPS or names.dagger_round(name) is not None:
        return name
    run = names.RLRun.parse(name)
    if run is None or run.arm not in arms.REGISTRY:
        known = "|".join(arms.names())
        raise ValueError(
            f"unknown policy name {name!r} (expert, bc, dagger<round>, rl-<{known}>-seed<N>)"
        )
    return run.group


def comparison_key(x: str, y: str) -> str:
    """Name of the comparison P(x > y), e.g. ``rl_bc_vs_rl_scratch``."""
    return f"{x}_vs_{y}"


def comparisons(groups: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs (X, Y) whose P(X > Y) is reported, among ``groups``: every demo arm against its
    own algorithm's control (what the demonstrations add) and against scratch PPO (the headline),
    every arm but scratch against the clone, and each off-policy control against scratch PPO."""
    scratch = arms.get(arms.CONTROL).group
    present = [arms.get(names.group_arm(g) or g) for g in arm_groups() if g in groups]
    pairs: list[tuple[str, str]] = []
    for arm in (a for a in present if a.control is not None):
        own = arms.get(arm.control).group
        pairs += [(arm.group, own)] + ([(arm.group, scratch)] if own != scratch else [])
    pairs += [(a.group, scratch) for a in present if a.control is None and a.name != arms.CONTROL]
    pairs += [(a.group, names.BC) for a in present if a.name != arms.CONTROL] + [
        (scratch, names.BC)
    ]
    pairs += [(g, names.BC) for g in DAGGER_GROUPS]  # what each DAgger round adds to the clone
    seen = dict.fromkeys((x, y) for x, y in pairs if x in groups and y in groups)
    return list(seen)


def best_rl_run(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The RL run with the highest mean held-out return among evaluation ``records`` (the first
    of equal ones, in group order), or None without RL runs."""
    best, best_return = None, -math.inf
    for group in arm_groups():
        for rec in (r for r in records if policy_group(r["policy"]) == group):
            returns = np.array([np.nan if r is None else r for r in rec["episodes"]["return"]])
            finite = returns[np.isfinite(returns)]
            mean = float(finite.mean()) if len(finite) else -math.inf
            if best is None or mean > best_return:
                best, best_return = rec["policy"], mean
    return best
