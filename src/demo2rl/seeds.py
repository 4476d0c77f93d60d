"""Seed policy: one base seed, disjoint ranges for every use.

Demonstration episodes, RL training runs and evaluation episodes draw their seeds from disjoint
blocks, so evaluation always runs on tracks (or initial states) that no stage trained on. All
explicit seeds stay below ``2**30``; the built-in racing task draws the seeds of unseeded resets
from ``[2**30, 2**31)``, so those never collide with an explicitly assigned one either.
"""

from __future__ import annotations

BLOCK = 100_000_000
"""Width of each seed block; also the largest number of episodes per block."""
MAX_BASE_SEED = BLOCK
DEMO_BLOCK, EVAL_BLOCK, RL_BLOCK, TUNING_BLOCK = 0, 3, 6, 9
RL_SEED_STRIDE = 100_000
"""Seeds reserved per RL run (its envs' first resets use consecutive seeds)."""


def _seed(base: int, block: int, index: int) -> int:
    if not 0 <= base < MAX_BASE_SEED:
        raise ValueError(f"base seed must be in [0, {MAX_BASE_SEED}), got {base}")
    if not 0 <= index < BLOCK:
        raise ValueError(f"seed index must be in [0, {BLOCK}), got {index}")
    return base + block * BLOCK + index


def demo_seed(base: int, episode: int) -> int:
    """Seed of demonstration episode ``episode`` (a global index, independent of sharding)."""
    return _seed(base, DEMO_BLOCK, episode)


def eval_seed(base: int, episode: int) -> int:
    """Seed of held-out evaluation episode ``episode``."""
    return _seed(base, EVAL_BLOCK, episode)


def tuning_seed(base: int, episode: int) -> int:
    """Seed of tuning episode ``episode``: tracks for choosing settings (benchmarks/arms.py), so
    that the held-out ones stay unseen by every choice that shapes a result."""
    return _seed(base, TUNING_BLOCK, episode)


def rl_seed(base: int, run_seed: int) -> int:
    """Seed of RL run ``run_seed``: model seed, and its envs' first resets use ``rl_seed + i``."""
    if not 0 <= run_seed < BLOCK // RL_SEED_STRIDE:
        raise ValueError(f"RL seed must be in [0, {BLOCK // RL_SEED_STRIDE}), got {run_seed}")
    return _seed(base, RL_BLOCK, run_seed * RL_SEED_STRIDE)
