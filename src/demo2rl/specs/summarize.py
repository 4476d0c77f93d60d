"""A variant's comparison across policies and seeds: the summarize job's spec."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from demo2rl.spec_fields import path, result
from demo2rl.specs import common


@dataclasses.dataclass(frozen=True, kw_only=True)
class SummarizeJob:
    """A variant's comparison across policies and RL seeds (rule summarize).

    :param variant: the config variant's name (``base`` for the base config).
    :param bootstrap_reps: bootstrap resamples of each interval.
    :param confidence: the intervals' confidence level.
    :param seed: the workflow's base seed (the bootstrap's stream derives from it).
    :param curve_tracks: the held-out tracks the RL learning curves were evaluated on.
    :param curve_runs: the RL run of each of ``curves`` and ``progress``, in their order.
    :param budgets: env steps per run of each arm (its algorithm's budget).
    :param arm_looks: each arm's label and colour, as the tables show them.
    :param metric_labels: the task's per-episode metrics with their labels, in order (what its
        package registers: :mod:`demo2rl.envs.capabilities`).
    :param evaluations: every policy's evaluation record.
    :param curves: each RL run's held-out evaluations during training.
    :param progress: each RL run's progress table (its training seconds, wall and CPU).
    :param rounds: each DAgger round's clone metrics, in round order (none without DAgger).
    :param reference: without an expert, the dataset (its own episodes are the reference row,
        not held-out); empty with one.
    :param figures: the figures summary.md links to, by key of :data:`names.SUMMARY_FIGURES`.
    """

    STAGE: ClassVar[str] = "summarize"
    TASK_CODE: ClassVar[bool] = False
    variant: str = result(derive="name")
    bootstrap_reps: int = result("evaluate.bootstrap_reps")
    confidence: float = result("evaluate.confidence")
    seed: int = common.seed()
    curve_tracks: int = result("evaluate.during_training")
    curve_runs: list[str] = result("rl.arms", "rl.seeds", derive="run_names")
    budgets: Mapping[str, int] = result(
        "rl.arms", "rl.total_timesteps", "rl.sac.total_timesteps", derive="budgets"
    )
    arm_looks: Mapping[str, list[str]] = result("rl.arms", derive="arm_looks")
    metric_labels: Mapping[str, str] = result(derive="metric_labels")
    evaluations: list[str] = path()
    curves: list[str] = path()
    progress: list[str] = path()
    rounds: list[str] = path(default=())
    reference: list[str] = path(default=())
    figures: Mapping[str, str] = path(derive="summary_figures", source="params")
    summary_json: str = path(source="output")
    summary_md: str = path(source="output")
    policies: str = path(source="output")
    improvement: str = path(source="output")
    runs: str = path(source="output")
    episodes: str = path(source="output")

    def run_name(self) -> str:
        return "summarize"
