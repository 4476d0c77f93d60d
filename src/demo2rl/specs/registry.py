"""Each heavy rule's job spec, by rule name: what the Plan and the runner look up (stages import
their own spec's module only)."""

from __future__ import annotations

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
"""Each heavy rule's spec (the stage module of the same name runs it)."""
