"""Job specs: everything a heavy job is given, as one frozen dataclass, and the part that counts.

A job's script builds its spec once from the ``snakemake`` object and hands it to the stage, which
hands it on; nothing re-lists the job's arguments. Every field of a spec is part of the job's
result unless it says otherwise: a file path (:func:`path`: where a file is, not what it holds;
the stage records an input's content digest instead) or a speed setting (:func:`speed`: threads,
envs stepped together, checkpoint spacing, which change how fast a job runs, never what it
produces). :func:`result_fields` is what remains; a resume key built from it covers a field added
later without anyone remembering to add it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

_ROLE = "demo2rl.role"


def path(**kwargs: Any) -> Any:
    """A field holding a file or directory path: not part of the result."""
    return dataclasses.field(metadata={_ROLE: "path"}, **kwargs)


def speed(**kwargs: Any) -> Any:
    """A field holding a speed (or robustness) setting: not part of the result."""
    return dataclasses.field(metadata={_ROLE: "speed"}, **kwargs)


def result_fields(spec: Any) -> dict[str, Any]:
    """The fields of ``spec`` that can change its job's result, as plain JSON-able values (a
    config section as its mapping, less its own speed fields, e.g. ``task.timeout_s``), by
    name."""
    return {
        field.name: _plain(getattr(spec, field.name))
        for field in dataclasses.fields(spec)
        if _ROLE not in field.metadata
    }


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return result_fields(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
