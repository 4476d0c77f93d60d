"""Each heavy rule's job spec and stage, by rule name: what the Plan and the runner look up
(stages import their own spec's module only).

A heavy rule's stage is the function of the rule's name in the module of that name under
:mod:`demo2rl.stages` (:func:`stage`); every heavy rule runs it through the one script,
scripts/run_stage.py, and its code fingerprint starts there (:func:`stage_module`).
"""

from __future__ import annotations

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


def stage_module(rule: str) -> str:
    """The module of ``rule``'s stage."""
    return f"demo2rl.stages.{rule}"


def stage(rule: str) -> Callable[[Any, Any], Any]:
    """The stage of heavy rule ``rule``: ``stage(spec, run)``, imported at job time (the Plan
    reads the specs only; a stage imports what its job needs, torch included)."""
    if rule not in SPECS:
        raise KeyError(f"{rule!r} is no heavy rule (they are: {', '.join(SPECS)})")
    return getattr(importlib.import_module(stage_module(rule)), rule)
