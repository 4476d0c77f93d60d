"""Evaluating policies on held-out episodes (seeds no stage trained on).

The quick checks during training and the evaluate stage's final record are one call,
:func:`evaluate` (``final`` for the record), and return the same :class:`Evaluation`; the final
one adds what costs extra to collect.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from demo2rl import seeds, tasks
from demo2rl.demos import rollout

if TYPE_CHECKING:
    from demo2rl.config import TaskConfig

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


def tuning_seeds(base_seed: int, n_episodes: int) -> list[int]:
    """Seeds of the first ``n_episodes`` tuning episodes (disjoint from the held-out ones)."""
    return [seeds.tuning_seed(base_seed, e) for e in range(n_episodes)]


@dataclasses.dataclass
class Evaluation:
    """A policy's held-out evaluation (:func:`evaluate`): quick, for the checks during
    training, or ``final``, the evaluate stage's record."""

    episodes: dict[str, np.ndarray]
    """Per episode: ``seed``, ``return``, ``length`` and those of the task's
    :data:`TASK_METRICS` whose sources were recorded (with a lap time, ``lap_completed``: 1.0 or
    0.0, whether the episode finished a lap)."""
    info: dict[str, np.ndarray]
    """Per episode: every numeric info value at the end (``<key>``) and, in a final evaluation,
    its step mean (``<key>.mean``)."""
    first_actions: np.ndarray | None = None
    """The actions of the first episode, in order (:func:`replay_racing` drives it again); a
    final evaluation's only."""

    def means(self) -> dict[str, float]:
        """The mean over episodes of every column of :attr:`episodes` but ``seed``
        (``<name>_mean``, NaN-aware, NaN when no episode has a finite value) and the return's std
        (``return_std``): the evaluate stage's summary of a policy."""
        return _means(self.episodes)

    def info_means(self) -> dict[str, float]:
        """``return_mean``, ``return_std``, ``length_mean`` and the mean of every value in
        :attr:`info` under its own name (``<key>_mean``, NaN-aware, as :meth:`means`): the
        metrics of the held-out checks during training (RL's ``evaluations.csv``), named by the
        task's info keys rather than by :data:`TASK_METRICS`."""
        table = {k: self.episodes[k] for k in ("seed", "return", "length")}
        return _means(table | {f"info.{k}": v for k, v in self.info.items()})


def evaluate(
    task: TaskConfig,
    policy: tasks.PolicyFn,
    episode_seeds: Sequence[int],
    *,
    n_envs: int,
    policy_input: str = rollout.OBSERVATION,
    final: bool = False,
) -> Evaluation:
    """Run ``policy`` for one episode per held-out seed of ``task`` (its env, ``frame_stack``,
    ``max_episode_steps`` and ``timeout_s``: :func:`demo2rl.demos.rollout.run_episodes` takes it
    whole); ``policy_input`` is what the policy reads (``task.expert.input`` for the expert).

    A check during training takes the per-episode metrics and the info values at the end. The
    evaluate stage's record (``final``) adds what costs extra: the info values' step means (and
    the metrics made of them, e.g. ``avg_speed``) and the first episode's actions."""
    steps, episodes, info = rollout.run_episodes(
        task,
        policy,
        list(episode_seeds),
        n_envs=n_envs,
        step_means=final,
        policy_input=policy_input,
        keep_observations=False,
    )
    if not final:
        return _evaluation(episodes, info)
    start, length = int(episodes["start"][0]), int(episodes["length"][0])
    return _evaluation(episodes, info, np.asarray(steps["actions"][start : start + length]))


def _evaluation(
    episodes: Mapping[str, np.ndarray],
    info: Mapping[str, np.ndarray],
    first_actions: np.ndarray | None = None,
) -> Evaluation:
    """The :class:`Evaluation` of :func:`demo2rl.demos.rollout.run_episodes`' episodes and info."""
    raw = {f"info.{k}": np.asarray(v, dtype=np.float64) for k, v in info.items()}
    named = {
        "seed": episodes["seed"],
        "return": episodes["return"],
        "length": episodes["length"],
    } | {name: raw[src] for name, src in TASK_METRICS.items() if src in raw}
    if "lap_time" in named:
        named["lap_completed"] = np.isfinite(named["lap_time"]).astype(np.float64)
    return Evaluation(
        episodes=named,
        info={k.removeprefix("info."): v for k, v in raw.items()},
        first_actions=first_actions,
    )


def _means(table: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Means over episodes (NaN-aware for values such as lap time), plus the return's std; an
    ``info.`` prefix is dropped from the names."""
    out = {
        "return_mean": float(np.mean(table["return"])),
        "return_std": float(np.std(table["return"])),
    }
    for key, values in table.items():
        if key not in ("seed", "return"):
            values = np.asarray(values, dtype=np.float64)
            name = key.removeprefix("info.")
            out[f"{name}_mean"] = (
                float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")
            )
    return out
