"""Atomic file output: a killed job never leaves a file that looks complete."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` only if the block succeeds.

    The temporary file lives in the same directory (so the rename is atomic on POSIX) under a
    hidden name that no rule declares. On error it is removed and ``path`` is left untouched; the
    temporary files of earlier writers killed outright (SIGKILL: no cleanup runs) are removed
    by the next write of the same path.
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
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _remove_orphans(final: Path) -> None:
    for tmp in final.parent.glob(f".{final.name}.tmp-*"):
        pid = tmp.name.rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
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
