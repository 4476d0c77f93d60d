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
from demo2rl.envs import capabilities

if TYPE_CHECKING:
    from demo2rl.config import TaskConfig


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
    """Per episode: ``seed``, ``return``, ``length`` and those of the metrics the task registers
    (:mod:`demo2rl.envs.capabilities`) whose sources were recorded."""
    info: dict[str, np.ndarray]
    """Per episode: every numeric info value at the end (``<key>``) and, in a final evaluation,
    its step mean (``<key>.mean``)."""
    first_actions: np.ndarray | None = None
    """The actions of the first episode, in order (a replay of the report drives it again); a
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
        task's info keys rather than by its registered metrics."""
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
    metrics = capabilities.of(task.env_id).metrics
    if not final:
        return _evaluation(episodes, info, metrics)
    start, length = int(episodes["start"][0]), int(episodes["length"][0])
    first = np.asarray(steps["actions"][start : start + length])
    return _evaluation(episodes, info, metrics, first)


def _evaluation(
    episodes: Mapping[str, np.ndarray],
    info: Mapping[str, np.ndarray],
    metrics: Mapping[str, capabilities.Metric],
    first_actions: np.ndarray | None = None,
) -> Evaluation:
    """The :class:`Evaluation` of :func:`demo2rl.demos.rollout.run_episodes`' episodes and info,
    with the task's ``metrics`` whose sources the info has."""
    raw = {f"info.{k}": np.asarray(v, dtype=np.float64) for k, v in info.items()}
    named = {
        "seed": episodes["seed"],
        "return": episodes["return"],
        "length": episodes["length"],
    }
    for name, metric in metrics.items():
        if metric.source in raw:
            value = raw[metric.source]
            named[name] = np.isfinite(value).astype(np.float64) if metric.finite else value
    return Evaluation(
        episodes=named,
        info={k.removeprefix("info."): v for k, v in raw.items()},
        first_actions=first_actions,
    )


def _means(table: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Means over episodes (NaN-aware: a value the episode never reached is NaN), plus the
    return's std; an ``info.`` prefix is dropped from the names."""
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
