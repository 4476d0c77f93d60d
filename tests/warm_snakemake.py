"""Snakemake's command line in forks of a process that has imported it already: for the tests
that ask Snakemake for many plans (dry runs, ``--detailed-summary``) and run no job.

A fresh ``snakemake`` process spends about two of the three seconds such a call takes importing
Snakemake and its plugins. Here a forkserver imports them once; each call runs in a new fork of
it (one call per process, so that no state is carried from one call to the next), with the
call's environment, ``PYTHONPATH`` first on ``sys.path`` as in a fresh interpreter (the working
directory is the call's ``-d``). The workflow itself (the Snakefile, the config checks, the task
probe, the code fingerprints) runs exactly as in a fresh process: nothing of it is imported
before the fork.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

Call = tuple[Sequence[str], dict[str, str]]
"""The command-line arguments (after ``snakemake``) and the environment of one call."""


def run_cli(args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``snakemake args`` in this process (a fresh fork), its output captured at the file
    descriptors, as a subprocess's would be."""
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    from snakemake.cli import main

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            main(list(args))
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(["snakemake", *args], code, out.read(), err.read())


PRELOAD = (
    "snakemake.cli",
    "snakemake.api",
    "snakemake.report",
    "jsonschema",
    "yte",
    "smart_open",
    "numpy",
    "gymnasium",
    "h5py",
)
"""What the forkserver imports for its forks: Snakemake, and the installed packages that the
workflow's own code imports (its config checks, its task probe); demo2rl is not among them, so
that a call's ``PYTHONPATH`` decides which copy of it the workflow runs."""


def _pool(processes: int | None) -> multiprocessing.pool.Pool:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, __name__])
    return context.Pool(processes or os.cpu_count() or 2, maxtasksperchild=1)


@contextmanager
def warm_pool(processes: int | None = None) -> Iterator[multiprocessing.pool.Pool]:
    """A pool of ``processes`` (default: one per core) warm Snakemake processes, one call each."""
    with _pool(processes) as pool:
        yield pool


_SHARED: list[multiprocessing.pool.Pool] = []
"""This process's pool for :func:`call` (made on first use; its processes end with this one)."""
_SHARED_LOCK = threading.Lock()
"""Tests call from several threads at once (e.g. two invocations side by side): one pool."""


def call(args: Sequence[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``snakemake args`` with the environment ``env``, in a warm process: what a test's every
    Snakemake call (a dry run, or a run of the workflow's jobs) costs without importing
    Snakemake, about 1.1 CPU-seconds of each fresh ``snakemake`` process."""
    with _SHARED_LOCK:
        if not _SHARED:
            _SHARED.append(_pool(None))
            atexit.register(_SHARED[0].terminate)  # (before the interpreter tears modules down)
    return _SHARED[0].apply_async(run_cli, (list(args), env)).get(timeout=timeout)


def run_all(
    pool: multiprocessing.pool.Pool, calls: Iterable[Call]
) -> list[subprocess.CompletedProcess[str]]:
    """The calls' completed processes, in order, run in parallel in ``pool``."""
    return pool.starmap(run_cli, [(list(args), env) for args, env in calls], chunksize=1)
