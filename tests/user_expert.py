"""A user's own expert module outside demo2rl, as a config names it:
``task.expert.entry_point: "user_expert:careful_pursuit"`` (the tests put this directory on
PYTHONPATH). Its code is part of the fingerprint of the rules that run it."""

from __future__ import annotations

import numpy as np

from demo2rl.experts.racing import pure_pursuit


def careful_pursuit(obs: np.ndarray, margin: float = 0.6) -> np.ndarray:
    """The built-in racing expert, a little more careful by default."""
    return pure_pursuit(obs, margin=margin)


BREAKS_ON_CALL = 3
"""breaking_pursuit raises on this call (per process): the workflow's task probe, which calls
the expert once, passes; the collection job, which calls it every step, fails mid-episode."""
_calls = 0


def breaking_pursuit(obs: np.ndarray, margin: float = 0.65) -> np.ndarray:
    """The built-in racing expert, broken: it raises on its BREAKS_ON_CALL-th call."""
    global _calls
    _calls += 1
    if _calls >= BREAKS_ON_CALL:
        raise RuntimeError(f"breaking_pursuit broke on its call {_calls}")
    return pure_pursuit(obs, margin=margin)
