"""The links ``make ui`` prints: per experiment of the store, its runs table in the UI's
model-training view showing the arm runs (:mod:`demo2rl.tracking.arms`) alone, best IQM first,
with their figures as columns.

Without such a link the arm comparison takes five clicks: MLflow 3.17's UI opens an experiment
in its GenAI view, folds every job under its workflow run, and shows no metric column. What its
address honours, checked in headless Chromium against MLflow 3.17.2: ``workflowType=
machine_learning`` picks the model-training view; ``searchFilter``, ``orderByKey`` and
``orderByAsc`` filter and sort the table (filtered or sorted by a metric, it loads no parent
runs, so the arm runs are listed flat); the columns shown are not part of the address, but a
shared view (``viewStateShareKey``, an experiment tag that the arm runs set) holds the filter,
the order and the columns together. An experiment without that view (no arm runs yet) gets the
filtered, sorted address.

``python -m demo2rl.tracking.ui RESULTS_DIR URL`` prints them, reading the SQLite store under
``RESULTS_DIR`` (the one ``make ui`` serves) before the server starts; it never creates a store.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from pathlib import Path

from demo2rl.tracking.arms import ARM_FILTER, ORDER_BY, VIEW_KEY, VIEW_TAG
from demo2rl.tracking.store import default_tracking_uri, sqlite_path

RESULT_NEUTRAL = True
"""Tracking cannot change a result: no code fingerprint covers this module."""

MODEL_TRAINING = {"workflowType": "machine_learning"}
"""The address parameter that opens the UI's model-training view (not the GenAI one)."""


def arms_link(url: str, experiment_id: str, shared_view: bool = True) -> str:
    """The UI address of an experiment's arm runs, best IQM first (``url``: the UI's root):
    the experiment's shared view of them, or else the same filter and order without columns."""
    if shared_view:
        params = {"viewStateShareKey": VIEW_KEY, **MODEL_TRAINING}
    else:
        params = {**MODEL_TRAINING, "searchFilter": ARM_FILTER}
        params |= {"orderByKey": ORDER_BY, "orderByAsc": "false"}
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    return f"{url.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def experiment_lines(results_dir: str | os.PathLike[str], url: str) -> list[str]:
    """One line per active experiment with runs in the store under ``results_dir``:
    ``  <name>: <link>`` (one without arm runs says so); a line saying what to run when there is
    no store or no run yet."""
    db = sqlite_path(default_tracking_uri(results_dir))
    if db is None or not db.exists():
        return [f"  no MLflow store at {db} yet: `make run` creates it"]
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(default_tracking_uri(results_dir))
    lines = []
    for experiment in client.search_experiments(view_type=ViewType.ACTIVE_ONLY):
        eid = experiment.experiment_id
        if not client.search_runs([eid], max_results=1):
            continue  # MLflow's empty Default experiment, or one whose runs were all deleted
        shared = VIEW_TAG in experiment.tags
        note = "" if client.search_runs([eid], ARM_FILTER, max_results=1) else " (no arm runs yet)"
        lines.append(f"  {experiment.name}: {arms_link(url, eid, shared)}{note}")
    return lines or [f"  no runs in {db} yet: `make run` logs them"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path, help="the results directory: its mlflow.db")
    parser.add_argument("url", help="the UI's address, e.g. http://127.0.0.1:5000")
    args = parser.parse_args()
    print("The arms compared (arm runs, best IQM first), per experiment:")
    print("\n".join(experiment_lines(args.results_dir, args.url)), flush=True)


if __name__ == "__main__":
    main()
