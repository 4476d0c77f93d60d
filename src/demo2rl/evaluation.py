"""Evaluating policies on held-out episodes (seeds no stage trained on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from demo2rl import rollout, seeds, tasks


def heldout_seeds(base_seed: int, n_episodes: int) -> list[int]:
    """Seeds of the first ``n_episodes`` held-out evaluation episodes."""
    return [seeds.eval_seed(base_seed, e) for e in range(n_episodes)]


def evaluate(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: tasks.Expert,
    episode_seeds: list[int],
    *,
    n_envs: int = 16,
) -> dict[str, np.ndarray]:
    """Per-episode ``return`` and ``length`` (plus the task's end-of-episode info values)."""
    _, episodes, info = rollout.run_episodes(
        env_id, env_kwargs, policy, episode_seeds, n_envs=n_envs
    )
    return {
        "seed": episodes["seed"],
        "return": episodes["return"],
        "length": episodes["length"],
    } | {f"info.{k}": v for k, v in info.items()}


def summary(result: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Means over episodes (NaN-aware for info values such as lap time), plus the return's std."""
    out = {
        "return_mean": float(np.mean(result["return"])),
        "return_std": float(np.std(result["return"])),
    }
    for key, values in result.items():
        if key not in ("seed", "return"):
            values = np.asarray(values, dtype=np.float64)
            name = key.removeprefix("info.")
            out[f"{name}_mean"] = (
                float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
            )
    return out
