"""Every rule that runs a stage, by name: each heavy rule's job spec, the plotting rules, and
the order the workflow runs them in; what the Plan, the runner and the rerun tests look up
(stages import their own spec's module only).

A rule's stage is the function of the rule's name in the module of that name under
:mod:`demo2rl.stages` (:func:`stage_module`), where its code fingerprint starts: each of these
rules runs it through the one script, scripts/run_stage.py
(:func:`demo2rl.workflow.runner.stage` imports it at job time).
"""

from __future__ import annotations

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class Plot:
    """A plotting rule: it has no job spec (its stage gets the rule's named files), reruns on its
    code (and the arms' looks, where it shows arms), and what it draws:

    :param task_code: whether its code fingerprint covers the task's env and expert too (as a
        job spec's ``TASK_CODE``): the racing replays step the task's env.
    :param shows_arms: whether it shows arms: its param ``arm_looks``, each arm's label and
        colour, reads ``rl.arms``.
    """

    task_code: bool = False
    shows_arms: bool = False


RULES: dict[str, type | Plot] = {
    "collect_shard": collect_shard.CollectJob,
    "merge_demos": merge_demos.MergeJob,
    "import_demos": import_demos.ImportJob,
    "train_bc": train_bc.BCJob,
    "plot_bc": Plot(),
    "dagger_shard": dagger_shard.DaggerShardJob,
    "aggregate_dagger": aggregate_dagger.AggregateJob,
    "train_dagger": train_dagger.DaggerBCJob,
    "train_rl": train_rl.RLJob,
    "evaluate": evaluate.EvaluateJob,
    "summarize": summarize.SummarizeJob,
    "plot_summary": Plot(shows_arms=True),
    "plot_racing": Plot(task_code=True, shows_arms=True),
    "compare_variants": compare_variants.CompareJob,
    "plot_variants": Plot(shows_arms=True),
    "export_minari": export_minari.ExportJob,
}
"""Every rule that runs a stage, in the order the workflow runs them (``export_minari`` on its
own target, ``export``, only): a heavy rule's job spec (the stage of the same name runs it), or
a plotting rule's :class:`Plot`."""
SPECS: dict[str, type] = {r: s for r, s in RULES.items() if not isinstance(s, Plot)}
"""Each heavy rule's spec."""
PLOTS: dict[str, Plot] = {r: s for r, s in RULES.items() if isinstance(s, Plot)}
"""Each plotting rule."""


def runs_task_code(rule: str) -> bool:
    """Whether ``rule``'s code fingerprint covers the task's env and expert (its spec's
    ``TASK_CODE``, or its plot's ``task_code``)."""
    if rule in SPECS:
        return SPECS[rule].TASK_CODE
    if rule in PLOTS:
        return PLOTS[rule].task_code
    raise KeyError(f"{rule!r} runs no stage (the rules that do: {', '.join(RULES)})")


def runs_vec_env_code(rule: str) -> bool:
    """Whether ``rule``'s code fingerprint covers the task's own SB3 VecEnv, where its jobs step
    it (its spec's ``VEC_ENV_CODE``: the RL runs')."""
    return getattr(SPECS.get(rule), "VEC_ENV_CODE", False)


def stage_module(rule: str) -> str:
    """The module of ``rule``'s stage."""
    return f"demo2rl.stages.{rule}"
