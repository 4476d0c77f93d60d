"""Arm-level runs: one MLflow run per RL arm of a summary, so that the runs table compares the
arms row by row (IQM, mean, P(arm > scratch), steps to the expert's return, the learning curve).

The job runs hold one seed each and the parent run holds the whole summary as ``summary.<group>.*``
metrics: neither lines the arms up as rows whose columns can be sorted and charted. An arm run is
a child of the workflow's parent run, tagged :data:`STAGE_TAG` ``= arm``, :data:`ARM_TAG` and
:data:`VARIANT_TAG`, and names the seed runs it summarises (``demo2rl.seed_runs.<rule>``, from the
lineage sidecars of its inputs). A rerun of the summary replaces the arm's previous run: once the
new run is complete, the older live runs of the same (experiment, variant, arm) are deleted
(MLflow's soft delete: restorable until ``mlflow gc``), so the table filtered by
:data:`ARM_FILTER` shows exactly one current run per (variant, arm).

The experiment also gets the runs table's view of its arm runs (:data:`VIEW_TAG`): a search
filter and a sort order fit in the UI's address, but the columns shown do not, and MLflow 3.17's
runs table shows no metric column until one is chosen. The view is stored as the UI's own Share
button stores one, so ``?viewStateShareKey=`` :data:`VIEW_KEY` opens it (:mod:`.ui`).

This module says what an arm run holds and replaces; :meth:`demo2rl.tracking.run.Run.log_arm`
sends it through the outbox of the job that logs it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence

from mlflow.entities import Metric, ViewType
from mlflow.tracking import MlflowClient

from demo2rl.names import BASE_VARIANT
from demo2rl.tracking.lineage import ids_tag, upstream_runs

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

STAGE_TAG = "demo2rl.stage"
ARM_STAGE = "arm"
ARM_TAG = "demo2rl.arm"
VARIANT_TAG = "demo2rl.variant"
SEED_RUNS_TAG = "demo2rl.seed_runs"
"""Prefix of the tags naming an arm's seed runs: ``demo2rl.seed_runs.<rule>`` = run ids."""
ARM_FILTER = f"tags.`{STAGE_TAG}` = '{ARM_STAGE}'"
"""The MLflow search filter that selects the arm runs (and no job or workflow run)."""
CURVE_METRICS = {"mean": "curve_mean", "low": "curve_low", "high": "curve_high"}
"""A learning-curve band's series -> the arm run's metric whose history (step = env step) holds
it."""
SEARCH_PAGE = 1000
"""Runs per search call when looking for the runs a new arm run replaces."""
ORDER_BY = "metrics.`iqm`"
"""The arm runs' order in the runs table (``orderByKey``): the IQM return."""
VIEW_KEY = "demo2rl-arms"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
"""The experiment tag holding the runs table's view of the arm runs."""
VIEW_COLUMNS = ("iqm", "iqm_low", "iqm_high", "p_vs_scratch", "steps_to_expert", "mean")
"""The metrics the view shows as columns (the UI orders them by name)."""


def run_name(arm: str, variant: str) -> str:
    """``arm-<arm>``, with ``-<variant>`` for a variant other than the base config."""
    return f"arm-{arm}" if variant == BASE_VARIANT else f"arm-{arm}-{variant}"


def arm_view() -> str:
    """The runs table's view of the arm runs, as the UI's Share button stores it: the arm runs
    alone, best IQM first, with :data:`VIEW_COLUMNS` and the variant as columns."""
    columns = [f"metrics.`{m}`" for m in VIEW_COLUMNS] + [f"tags.`{VARIANT_TAG}`"]
    return json.dumps(
        {
            "searchFilter": ARM_FILTER,
            "orderByKey": ORDER_BY,
            "orderByAsc": False,
            "selectedColumns": columns,
        }
    )


def tags(
    arm: str,
    variant: str,
    inputs: Mapping[str, Sequence[str | os.PathLike[str]]],
    parent: str | None,
) -> dict[str, str]:
    """The tags of the run of ``arm`` in ``variant``: its stage, arm and variant, its ``parent``
    run (the workflow's; None outside a workflow) and the seed runs that wrote ``inputs``
    (by rule)."""
    out = {STAGE_TAG: ARM_STAGE, ARM_TAG: arm, VARIANT_TAG: variant}
    if parent:
        out["mlflow.parentRunId"] = parent
    for rule, paths in inputs.items():
        ids = [i for found in upstream_runs(paths).values() for i in found]
        if ids:
            out[f"{SEED_RUNS_TAG}.{rule}"] = ids_tag(ids)
    return out


def curve_metrics(band: Mapping[str, Sequence[float]]) -> list[Metric]:
    """A learning-curve band (``step``, ``mean``, ``low``, ``high``; empty for none) as the
    points of the :data:`CURVE_METRICS` histories, one per env step."""
    if not band:
        return []
    ts = int(time.time() * 1000)
    return [
        Metric(key, float(value), ts, int(step))
        for series, key in CURVE_METRICS.items()
        for step, value in zip(band["step"], band[series], strict=True)
    ]


def delete_replaced(client: MlflowClient, run_id: str, arm: str, variant: str) -> None:
    """Soft-delete the live runs of ``arm`` in ``variant`` in the experiment of ``run_id`` other
    than that run (compared here, not in the filter: a variant's name needs no quoting then)."""
    experiment_id = client.get_run(run_id).info.experiment_id
    replaced, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=ARM_FILTER,
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=SEARCH_PAGE,
            page_token=token,
        )
        replaced += [
            r.info.run_id
            for r in page
            if r.info.run_id != run_id
            and r.data.tags.get(ARM_TAG) == arm
            and r.data.tags.get(VARIANT_TAG) == variant
        ]
        token = page.token
        if not token:
            break
    for replaced_id in replaced:
        client.delete_run(replaced_id)


def set_view(client: MlflowClient, run_id: str) -> None:
    """Store the runs table's view of the arm runs (:func:`arm_view`) in the experiment of
    ``run_id``."""
    experiment_id = client.get_run(run_id).info.experiment_id
    client.set_experiment_tag(experiment_id, VIEW_TAG, arm_view())
