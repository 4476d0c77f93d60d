"""The variants against the base: the compare_variants job's spec."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from demo2rl.spec_fields import path, result


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareJob:
    """Every config variant against the base, per policy group (rule compare_variants).

    :param overrides: each variant, the base first, with its overrides as declared. It reads
        ``variants.sample.seed`` and ``.ranges`` too where ``variants.sample.n`` > 0 (the
        declaration names what it reads in every config; Snakemake reruns on the value).
    :param progress_runs: the ``[variant, policy]`` of each of ``progress``, in their order.
    :param bootstrap_reps: bootstrap resamples of each interval (the base's setting).
    :param confidence: the intervals' confidence level (the base's).
    :param seed: the workflow's base seed.
    :param arm_looks: each arm's label and colour.
    :param summaries: each variant's summary.json, in the order of ``overrides``.
    :param episodes: each variant's episodes.csv, in the same order.
    :param progress: each variant's RL runs' progress tables (their wall time).
    :param figure: the figure variants.md links to.
    """

    STAGE: ClassVar[str] = "compare"
    TASK_CODE: ClassVar[bool] = False
    overrides: Mapping[str, Mapping[str, Any]] = result(
        "variants.grid", "variants.sample.n", derive="overrides"
    )
    progress_runs: list[list[str]] = result("rl.arms", "rl.seeds", derive="progress_runs")
    bootstrap_reps: int = result("evaluate.bootstrap_reps")
    confidence: float = result("evaluate.confidence")
    seed: int = result("seed")
    arm_looks: Mapping[str, list[str]] = result("rl.arms", derive="arm_looks")
    summaries: list[str] = path()
    episodes: list[str] = path()
    progress: list[str] = path()
    figure: str = path(derive="variants_figure", source="params")
    variants_json: str = path(source="output")
    variants_md: str = path(source="output")

    def run_name(self) -> str:
        return "compare-variants"
