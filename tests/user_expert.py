"""A user's own expert module outside demo2rl, as a config names it:
``task.expert.entry_point: "user_expert:careful_pursuit"`` (the tests put this directory on
PYTHONPATH). Its code is part of the fingerprint of the rules that run it."""

from __future__ import annotations

import numpy as np

from demo2rl.experts.racing import pure_pursuit


def careful_pursuit(obs: np.ndarray, margin: float = 0.6) -> np.ndarray:
    """The built-in racing expert, a little more careful by default."""
    return pure_pursuit(obs, margin=margin)
