"""Stage import_demos: an existing dataset (collect.source) as the experiment's dataset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from demo2rl import tasks
from demo2rl.demos import collect, dataset, minari_io
from demo2rl.specs.import_demos import ImportJob

if TYPE_CHECKING:
    from demo2rl.tracking import Run  # annotations only: importing it imports MLflow


def import_demos(job: ImportJob, run: Run) -> None:
    """Write the dataset ``job.source`` names as the experiment's dataset: the same format,
    split, statistics and content hash as a collected one, so that BC and every arm read it
    unchanged. A Minari dataset streams in episode by episode (:func:`minari_io.import_minari`:
    memory of one episode and a block of rows); a demo2rl file is re-split and re-hashed as
    this experiment's (:func:`minari_io.import_hdf5`). Episodes that are empty, cut off, of
    another dtype or shape than the task's spaces, or without finite rewards fail the job,
    naming the episode and the field, and leave no file."""
    env = job.env
    obs_space, act_space = tasks.spaces(env.env_id, env.env_kwargs, env.frame_stack)
    if job.data.kind == "hdf5":  # a demo2rl file (else a Minari dataset's directory)
        digest = minari_io.import_hdf5(
            job.data.path, job.out, valid_fraction=job.valid_fraction, codec=job.codec
        )
    else:
        digest = minari_io.import_minari(
            job.data.path,
            job.out,
            env_id=env.env_id,
            env_kwargs=env.env_kwargs,
            base_seed=job.seed,
            valid_fraction=job.valid_fraction,
            codec=job.codec,
            expected_observation_space=obs_space,
            expected_action_space=act_space,
        )
    demos = dataset.read_tables(job.out)
    dataset.check_dataset(demos, obs_space, act_space, env.env_id, path=job.out)
    run.log_metrics(collect.dataset_metrics(demos))
    run.log_dataset(job.out, digest, context="imported")
