"""Stage export_minari: the experiment's dataset as a Minari dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl.demos import dataset, minari_io
from demo2rl.specs.export_minari import ExportJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def export_minari(job: ExportJob, run: Run) -> None:
    """Write ``job.demos`` as the Minari dataset ``job.dataset_id`` under the store directory
    ``job.out``, with Minari's own API and images exact (:func:`minari_io.export_minari`); an
    import of it gives a dataset of the same content hash."""
    digest = dataset.verify(job.demos)
    run.log_dataset(job.demos, digest, context="exported")
    path = minari_io.export_minari(job.demos, job.out, job.dataset_id)
    run.set_tags({"demo2rl.minari_dataset": job.dataset_id, "demo2rl.minari_path": str(path)})
