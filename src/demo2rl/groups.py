"""The evaluated policies' names and the groups they are compared in.

``expert``, ``bc`` (the behaviour clone), and ``rl-<arm>-seed<s>`` for each RL run, grouped by
arm as ``rl_<arm>``. The arms (the ``init`` of an RL run, see :mod:`demo2rl.rl`) are
:data:`ARMS`; ``scratch`` is the control every demo-guided arm is compared with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ARMS = ("bc", "residual", "kickstart", "scratch")
"""The RL arms: how a run uses the demonstrations (``scratch``: not at all, the control)."""
CONTROL = "scratch"
ARM_SETTINGS = {"bc": "warm_start", "residual": "residual", "kickstart": "kickstart"}
"""The section of the ``rl`` config that only one arm reads."""
GROUPS = ("expert", "bc", *(f"rl_{arm}" for arm in ARMS))
"""Policy groups, in the order of every table and plot."""
LABELS = {
    "expert": "expert",
    "bc": "behaviour clone",
    "rl_bc": "RL warm-started from BC",
    "rl_residual": "residual RL on BC",
    "rl_kickstart": "RL kickstarted by BC",
    "rl_scratch": "RL from scratch",
}
RL_NAME = re.compile(rf"rl-({'|'.join(ARMS)})-seed(\d+)")


def arm_rl_config(rl_cfg: Mapping[str, Any], arm: str) -> dict[str, Any]:
    """The ``rl`` config a run of ``arm`` reads: not the seed and arm lists (adding a seed or an
    arm must not rerun the others), not ``checkpoint_every`` (a speed setting), and of the arms'
    own sections (:data:`ARM_SETTINGS`) only its own."""
    skip = {"seeds", "inits", "checkpoint_every"}
    skip |= {section for other, section in ARM_SETTINGS.items() if other != arm}
    return {k: v for k, v in rl_cfg.items() if k not in skip}


def policy_group(name: str) -> str:
    """The group of an evaluated policy: ``expert``, ``bc``, ``rl-bc-seed0`` -> ``rl_bc``."""
    if name in ("expert", "bc"):
        return name
    match = RL_NAME.fullmatch(name)
    if not match:
        arms = "|".join(ARMS)
        raise ValueError(f"unknown policy name {name!r} (expert, bc, rl-<{arms}>-seed<N>)")
    return f"rl_{match.group(1)}"


def comparison_key(x: str, y: str) -> str:
    """Name of the comparison P(x > y), e.g. ``rl_bc_vs_rl_scratch``."""
    return f"{x}_vs_{y}"


def comparisons(groups: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs (X, Y) whose P(X > Y) is reported, among ``groups``: every demo-guided arm
    against RL from scratch (the headline) and against the clone, and scratch against the clone."""
    control = f"rl_{CONTROL}"
    arms = [g for g in GROUPS if g.startswith("rl_") and g != control and g in groups]
    pairs = [(a, control) for a in arms] + [(a, "bc") for a in arms] + [(control, "bc")]
    return [(x, y) for x, y in pairs if x in groups and y in groups]


def best_rl_run(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The RL run with the highest mean held-out return among evaluation ``records`` (the first
    of equal ones, in group order), or None without RL runs."""
    best, best_return = None, -math.inf
    for group in (g for g in GROUPS if g.startswith("rl_")):
        for rec in (r for r in records if policy_group(r["policy"]) == group):
            returns = np.array([np.nan if r is None else r for r in rec["episodes"]["return"]])
            finite = returns[np.isfinite(returns)]
            mean = float(finite.mean()) if len(finite) else -math.inf
            if best is None or mean > best_return:
                best, best_return = rec["policy"], mean
    return best
