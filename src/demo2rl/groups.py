"""The evaluated policies' names and the groups they are compared in.

``expert``, ``bc`` (the behaviour clone), and ``rl-<init>-seed<s>`` for each RL run, grouped by
arm as ``rl_<init>``.
"""

from __future__ import annotations

import re

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
