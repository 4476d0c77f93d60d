"""The evaluated policies' names and the groups they are compared in.

``expert``, ``bc`` (the behaviour clone), and ``rl-<init>-seed<s>`` for each RL run, grouped by
arm as ``rl_<init>``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

GROUPS = ("expert", "bc", "rl_bc", "rl_scratch")
"""Policy groups, in the order of every table and plot."""
LABELS = {
    "expert": "expert",
    "bc": "behaviour clone",
    "rl_bc": "RL from BC",
    "rl_scratch": "RL from scratch",
}
RL_NAME = re.compile(r"rl-(bc|scratch)-seed(\d+)")


def policy_group(name: str) -> str:
    """The group of an evaluated policy: ``expert``, ``bc``, ``rl-bc-seed0`` -> ``rl_bc``."""
    if name in ("expert", "bc"):
        return name
    match = RL_NAME.fullmatch(name)
    if not match:
        raise ValueError(f"unknown policy name {name!r} (expert, bc, rl-<bc|scratch>-seed<N>)")
    return f"rl_{match.group(1)}"


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
