"""An exclusive OS file lock with a bounded wait that names its holder: for what two processes
must never do at once (train one RL run, create one MLflow store).

``flock`` is released by the kernel when its process ends, however it ends: a hard-killed holder
never leaves a stale lock, and a live one is never ignored. On a shared filesystem this relies on
its locks reaching every node (NFSv4 and Lustre with ``flock`` do; check yours).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

RESULT_NEUTRAL = True
"""A lock orders processes and cannot change a result: no code fingerprint covers this
module."""


@contextlib.contextmanager
def exclusive(
    lock_path: Path,
    wait: float,
    busy: Callable[[str], Exception],
    *,
    purpose: str | None = None,
    waiting: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock_path`` (created if missing) for the block.

    While held, the file names the holder (``purpose``, pid, host, SLURM job, since). A lock
    held by another process is retried every 0.1 s for up to ``wait`` seconds: ``waiting(holder)``
    is called once when the wait starts, and ``busy(holder)`` gives the exception raised when it
    ends without the lock (``holder``: what the lock file says, or "unknown").
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline, waited = time.monotonic() + wait, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
                if time.monotonic() >= deadline:
                    raise busy(holder) from None
                if waiting is not None and not waited:
                    waiting(holder)
                waited = True
                time.sleep(0.1)
        info = {
            **({"purpose": purpose} if purpose else {}),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # held by nobody: names nobody
    finally:
        os.close(fd)  # releases the lock
