"""Seed policy: one base seed, disjoint ranges for every use.

Demonstration episodes, RL training runs and evaluation episodes draw their seeds from disjoint
blocks, so evaluation always runs on tracks (or initial states) that no stage trained on. All
explicit seeds stay below ``2**30``; the built-in racing task draws the seeds of unseeded resets
from ``[2**30, 2**31)``, so those never collide with an explicitly assigned one either.

A use's seed is ``base + block * BLOCK + index``, ``base`` and ``index`` below :data:`BLOCK`:

=================  =====  =====================================================
use                block  index
=================  =====  =====================================================
demonstrations     0      the episode's global index
evaluation         3      the held-out episode
RL runs            6      ``run_seed * RL_SEED_STRIDE``, plus its env's number
DAgger episodes    8      ``(round - 1) * DAGGER_ROUND_STRIDE + episode``
tuning             9      the tuning episode
=================  =====  =====================================================

For one base seed, every use's seeds are disjoint from every other's, and DAgger's rounds from
each other. The blocks 0, 3, 6 and 9 are three apart, so those four uses' seeds are disjoint
for any two base seeds too; DAgger's block fills a gap one block wide, so one base's DAgger
seeds may equal another base's tuning seeds (never its demonstrations', evaluation's or RL's).
"""

from __future__ import annotations

BLOCK = 100_000_000
"""Width of each seed block; also the largest number of episodes per block."""
MAX_BASE_SEED = BLOCK
DEMO_BLOCK, EVAL_BLOCK, RL_BLOCK, DAGGER_BLOCK, TUNING_BLOCK = 0, 3, 6, 8, 9
RL_SEED_STRIDE = 100_000
"""Seeds reserved per RL run (its envs' first resets use consecutive seeds)."""
DAGGER_ROUND_STRIDE = 1_000_000
"""Seeds reserved per DAgger round: the most episodes one round can run."""
MAX_DAGGER_ROUND = BLOCK // DAGGER_ROUND_STRIDE
"""The last DAgger round with seeds of its own (rounds count from 1)."""


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


def dagger_seed(base: int, round: int, episode: int) -> int:
    """Seed of episode ``episode`` (its index within the round, independent of sharding) of
    DAgger round ``round`` (1 to :data:`MAX_DAGGER_ROUND`; round 0 is behaviour cloning on the
    demonstrations and runs no episodes of its own)."""
    if not 1 <= round <= MAX_DAGGER_ROUND:
        raise ValueError(f"DAgger round must be in [1, {MAX_DAGGER_ROUND}], got {round}")
    if not 0 <= episode < DAGGER_ROUND_STRIDE:
        raise ValueError(
            f"DAgger episode index must be in [0, {DAGGER_ROUND_STRIDE}), got {episode}"
        )
    return _seed(base, DAGGER_BLOCK, (round - 1) * DAGGER_ROUND_STRIDE + episode)


def rl_seed(base: int, run_seed: int) -> int:
    """Seed of RL run ``run_seed``: model seed, and its envs' first resets use ``rl_seed + i``."""
    if not 0 <= run_seed < BLOCK // RL_SEED_STRIDE:
        raise ValueError(f"RL seed must be in [0, {BLOCK // RL_SEED_STRIDE}), got {run_seed}")
    return _seed(base, RL_BLOCK, run_seed * RL_SEED_STRIDE)
