"""Atomic file output: a killed job never leaves a file that looks complete, and a full disk
fails the write with an error that names the file and the space left.

Every writer of the library writes through :func:`atomic_path` (datasets, checkpoints, RL state,
JSON, CSV, Markdown, figures), so a full disk is handled here, once: the write fails with
:class:`DiskFull`, naming the file and the free space of its filesystem, and neither the file nor
its temporary file is left. :func:`check_space` fails a write before it starts when its size is
known; :class:`DeferredFile` serves a library that cannot survive a failed write (HDF5 crashes
the process when it cannot flush its caches at close).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
"""The errors of a write that found no room: the filesystem full, or the user's quota used up."""
NEARLY_FULL = 1 << 20
"""Free bytes below which a failed write whose error lost its errno is taken for a full disk:
torch.save to a path raises a RuntimeError of its C++ stream (``unexpected pos``, or ``file
write failed``) that does not say why."""


class FileProblem(ValueError):
    """A file that is missing, corrupt, or not what the caller needs; the message is
    ``<path>: <problem>``. The library's file errors (:class:`demo2rl.demos.dataset.DatasetError`,
    :class:`demo2rl.learning.checkpoints.CheckpointError`) are this, named for what the file is."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


class DiskFull(OSError):
    """A file that did not fit on its filesystem (``errno`` ENOSPC, or EDQUOT: over quota).

    ``path`` is the file; ``free`` the bytes free on its filesystem (once the unfinished file
    was removed); ``need`` the bytes it needs, when known before writing; ``written`` the bytes
    written when the disk filled up.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        free: int,
        *,
        need: int | None = None,
        written: int | None = None,
        quota: bool = False,
    ) -> None:
        self.path, self.free, self.need = Path(path), free, need
        self.written, self.quota = written, quota
        where = f"{size_text(free)} are free in {self.path.parent}"
        ran_out = "the disk quota ran out" if quota else "the disk filled up"
        if need is not None:
            problem = f"the file needs about {size_text(need)}, {where}"
        elif written is not None:
            problem = f"{ran_out} after {size_text(written)} of it were written; {where}"
        else:
            problem = f"{ran_out} while writing it; {where}"
        self.message = f"{path}: not enough disk space: {problem}"
        super().__init__(errno.EDQUOT if quota else errno.ENOSPC, self.message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        state = (str(self.path), self.free, self.need, self.written, self.quota)
        return _disk_full, state


def _disk_full(
    path: str, free: int, need: int | None, written: int | None, quota: bool
) -> DiskFull:
    return DiskFull(path, free, need=need, written=written, quota=quota)


def size_text(nbytes: float) -> str:
    """A size for people: ``512 bytes``, ``12.0 KiB``, ``3.1 MiB``, ``2.0 GiB``."""
    if nbytes < 1024:
        return f"{nbytes:.0f} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        nbytes /= 1024
        if nbytes < 1024 or unit == "GiB":
            break
    return f"{nbytes:.1f} {unit}"


def check_space(path: str | os.PathLike[str], need: int) -> None:
    """Raise :class:`DiskFull` if ``path``'s filesystem has fewer than ``need`` bytes free."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path.parent).free
    if need > free:
        raise DiskFull(path, free, need=need)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` only if the block succeeds.

    The temporary file lives in the same directory (so the rename is atomic on POSIX) under a
    hidden name that no rule declares. On error it is removed and ``path`` is left untouched; the
    temporary files of earlier writers killed outright (SIGKILL: no cleanup runs) are removed
    by the next write of the same path. A write, flush or rename that runs out of space raises
    :class:`DiskFull` (the writer's own error as its cause), once the temporary file is gone.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb+") as fh:  # make the bytes durable before they become visible
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except Exception as err:
        if isinstance(err, DiskFull) and err.path == final:
            raise
        written = _allocated(tmp)
        tmp.unlink(missing_ok=True)  # before the free space is measured
        full = as_disk_full(err, final, written=written)
        if full is None:
            raise
        raise full from err
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def as_disk_full(
    err: BaseException, path: str | os.PathLike[str], *, written: int | None = None
) -> DiskFull | None:
    """``err``, raised while writing ``path``, as a :class:`DiskFull` naming it and the space
    free now, if it is a write that found no room (see :func:`_no_space`); else None. For
    writers that cannot go through :func:`atomic_path` (a log appended in place)."""
    path = Path(path)
    code = _no_space(err, path.parent)
    if code is None:
        return None
    free = shutil.disk_usage(path.parent).free
    return DiskFull(path, free, written=written, quota=code == errno.EDQUOT)


def _allocated(path: Path) -> int | None:
    """The bytes of ``path`` on disk (a file HDF5 writes has holes), None if it is gone."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return min(st.st_size, st.st_blocks * 512)


def _no_space(err: BaseException, directory: Path) -> int | None:
    """ENOSPC or EDQUOT if ``err`` (or an error it was raised from) is a write that found no
    room, else None. Libraries that lose the errno (torch's C++ writer) count when their error
    comes with the filesystem nearly full."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            return e.errno
        text = str(e)
        for code in NO_SPACE:  # HDF5's messages carry the C errno: "errno = 28, ..."
            if os.strerror(code) in text or f"errno = {code}," in text:
                return code
        todo += [e.__cause__, e.__context__]
    if isinstance(err, RuntimeError) or (isinstance(err, OSError) and err.errno is None):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(directory).free < NEARLY_FULL:
                return errno.ENOSPC
    return None


class DeferredFile:
    """A binary file, read and written at any position, whose writes never raise for want of
    space: for a library that cannot survive a failed write (HDF5, through h5py's ``fileobj``
    driver, crashes the process when it cannot flush its caches at close).

    The first write that finds no room (ENOSPC, EDQUOT) is remembered, and it and every later
    write are dropped: the library goes on, and closes, without an error. The writer calls
    :meth:`check` between the library's calls (and once the library has closed the file) to
    raise the remembered error; :func:`atomic_path` turns it into :class:`DiskFull` and removes
    the file. Data read back after a dropped write is not what was written: check first.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pos = 0
        self.error: OSError | None = None

    def check(self) -> None:
        """Raise the error of the first write that found no room, if any."""
        if self.error is not None:
            raise self.error

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while self.error is None and done < len(view):
            try:
                done += os.pwrite(self.fd, view[done:], self.pos + done)
            except OSError as err:
                if err.errno not in NO_SPACE:
                    raise
                self.error = err
        self.pos += len(view)
        return len(view)

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = max(0, os.fstat(self.fd).st_size - self.pos)
        data = os.pread(self.fd, size, self.pos)
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        if hasattr(os, "preadv"):  # into the buffer, without a copy (Linux, BSD)
            n = os.preadv(self.fd, [buffer], self.pos)
        else:
            view = memoryview(buffer).cast("B")
            data = os.pread(self.fd, len(view), self.pos)
            n = len(data)
            view[:n] = data
        self.pos += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self.pos = offset
        elif whence == os.SEEK_CUR:
            self.pos += offset
        else:
            self.pos = os.lseek(self.fd, offset, whence)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if self.error is None:
            os.ftruncate(self.fd, size)
        return size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> DeferredFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_orphans(final: Path) -> None:
    for tmp in final.parent.glob(f".{final.name}.tmp-*"):
        pid = tmp.name.rpartition("-")[2]
        if pid.isdigit() and not process_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts): an unfinished file or
    directory whose writer is gone can be removed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def strict_json(obj: Any) -> Any:
    """``obj`` with NaN and infinities replaced by None (null): strict JSON any reader accepts."""
    if isinstance(obj, Mapping):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
