"""Every rule that runs a stage, by name: each heavy rule's job spec, the plotting rules, and
the order the workflow runs them in; what the Plan, the runner and the rerun tests look up
(stages import their own spec's module only).

A rule's stage is the function of the rule's name in the module of that name under
:mod:`demo2rl.stages` (:func:`stage`); every heavy rule runs it through the one script,
scripts/run_stage.py, and its code fingerprint starts there (:func:`stage_module`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from demo2rl.specs import (
    aggregate_dagger,
    collect_shard,
    compare_variants,
    dagger_shard,
    evaluate,
    export_minari,
    import_demos,
    merge_demos,
    summarize,
    train_bc,
    train_dagger,
    train_rl,
)

SPECS: dict[str, type] = {
    "collect_shard": collect_shard.CollectJob,
    "merge_demos": merge_demos.MergeJob,
    "import_demos": import_demos.ImportJob,
    "export_minari": export_minari.ExportJob,
    "dagger_shard": dagger_shard.DaggerShardJob,
    "aggregate_dagger": aggregate_dagger.AggregateJob,
    "train_dagger": train_dagger.DaggerBCJob,
    "train_bc": train_bc.BCJob,
    "train_rl": train_rl.RLJob,
    "evaluate": evaluate.EvaluateJob,
    "summarize": summarize.SummarizeJob,
    "compare_variants": compare_variants.CompareJob,
}
"""Each heavy rule's spec (the stage of the same name runs it: :func:`stage`)."""


@dataclasses.dataclass(frozen=True)
class Plot:
    """A plotting rule: it has no job spec (its script hands the stage its files) and reruns on
    its code only, and what it draws:

    :param task_code: whether its code fingerprint covers the task's env and expert too (as a
        job spec's ``TASK_CODE``): the racing replays step the task's env.
    :param shows_arms: whether it shows arms: its param ``arm_looks``, each arm's label and
        colour, reads ``rl.arms``.
    """

    task_code: bool = False
    shows_arms: bool = False


PLOTS: dict[str, Plot] = {
    "plot_bc": Plot(),
    "plot_summary": Plot(shows_arms=True),
    "plot_racing": Plot(task_code=True, shows_arms=True),
    "plot_variants": Plot(shows_arms=True),
}
"""Each plotting rule."""

RULES = (
    "collect_shard",
    "merge_demos",
    "import_demos",
    "train_bc",
    "plot_bc",
    "dagger_shard",
    "aggregate_dagger",
    "train_dagger",
    "train_rl",
    "evaluate",
    "summarize",
    "plot_summary",
    "plot_racing",
    "compare_variants",
    "plot_variants",
    "export_minari",
)
"""Every rule that runs a stage, in the order the workflow runs them (``export_minari`` on its
own target, ``export``, only)."""
assert set(RULES) == set(SPECS) | set(PLOTS), "every spec and plot in RULES, once"


def runs_task_code(rule: str) -> bool:
    """Whether ``rule``'s code fingerprint covers the task's env and expert (its spec's
    ``TASK_CODE``, or its plot's ``task_code``)."""
    return SPECS[rule].TASK_CODE if rule in SPECS else PLOTS[rule].task_code


def stage_module(rule: str) -> str:
    """The module of ``rule``'s stage."""
    return f"demo2rl.stages.{rule}"


def stage(rule: str) -> Callable[[Any, Any], Any]:
    """The stage of heavy rule ``rule``: ``stage(spec, run)``, imported at job time (the Plan
    reads the specs only; a stage imports what its job needs, torch included)."""
    if rule not in SPECS:
        raise KeyError(f"{rule!r} is no heavy rule (they are: {', '.join(SPECS)})")
    return getattr(importlib.import_module(stage_module(rule)), rule)
