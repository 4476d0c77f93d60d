"""Stage train_dagger: a DAgger round's clone, trained on the round's aggregate, with its
held-out comparison with the expert and the expert calls the rounds cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from demo2rl.demos import dataset
from demo2rl.learning import dagger
from demo2rl.specs.train_dagger import DaggerBCJob
from demo2rl.stages.train_bc import train_clone

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def train_dagger(job: DaggerBCJob, run: Run) -> dict[str, Any]:
    """Train round ``job.round``'s clone as the plain clone is trained, on the aggregate
    ``job.data``. The checkpoint records the aggregate's hash and the dataset's
    (``demos_hash``: the clone belongs to the experiment's dataset, which the arms and the
    evaluation check); the metrics add the expert calls (steps the expert labelled) of this
    round and of every round so far, beside the dataset's own steps."""
    digest = dataset.verify(job.data)
    demos_hash = dataset.verify(job.demos)
    run.log_dataset(job.data, digest, context="training")
    calls = dagger.expert_calls(job.data, job.demos, job.round)
    meta = {"dataset_hash": digest, "demos_hash": demos_hash, "dagger_round": job.round}
    return train_clone(job, run, data=job.data, meta=meta, extra=calls)
