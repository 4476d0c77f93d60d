"""Evaluating policies on held-out episodes (seeds no stage trained on)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from demo2rl import rollout, seeds, tasks

TASK_METRICS: dict[str, str] = {
    "lap_time": "info.lap_time",  # s, time of the first lap; NaN when no lap was completed
    "avg_speed": "info.speed.mean",  # m/s, mean over the episode's steps
    "off_track_rate": "info.off_track.mean",  # fraction of the episode's steps off the track
    "laps": "info.laps",  # laps completed
}
"""Named per-episode metrics and the values they come from; a task has those whose sources it
reports in its info (Racing-v0 has all of them, most classic-control tasks none)."""


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


@dataclasses.dataclass
class Evaluation:
    """A policy's final held-out evaluation."""

    episodes: dict[str, np.ndarray]
    """Per episode: ``seed``, ``return``, ``length`` and the task's :data:`TASK_METRICS`."""
    info: dict[str, np.ndarray]
    """Per episode: every numeric info value at the end (``<key>``) and its step mean
    (``<key>.mean``)."""
    first_actions: np.ndarray
    """The actions of the first episode, in order: :func:`replay_racing` drives it again."""


def final_evaluation(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    policy: tasks.Expert,
    episode_seeds: Sequence[int],
    *,
    n_envs: int,
) -> Evaluation:
    """Run one episode per held-out seed; named per-episode metrics and the raw info values.

    With a lap time, ``lap_completed`` (1.0 or 0.0) says whether the episode finished a lap.
    """
    steps, episodes, info = rollout.run_episodes(
        env_id, env_kwargs, policy, list(episode_seeds), n_envs=n_envs, step_means=True
    )
    raw = {f"info.{k}": np.asarray(v, dtype=np.float64) for k, v in info.items()}
    named = {
        "seed": episodes["seed"],
        "return": episodes["return"],
        "length": episodes["length"],
    } | {name: raw[src] for name, src in TASK_METRICS.items() if src in raw}
    if "lap_time" in named:
        named["lap_completed"] = np.isfinite(named["lap_time"]).astype(np.float64)
    start, length = int(episodes["start"][0]), int(episodes["length"][0])
    return Evaluation(
        episodes=named,
        info={k.removeprefix("info."): v for k, v in raw.items()},
        first_actions=np.asarray(steps["actions"][start : start + length]),
    )
