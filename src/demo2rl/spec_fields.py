"""What a field of a job spec is: its role (does it change the job's result?), its source
(where the job takes its value from) and what it reads (where the workflow takes it from).

A job spec (:mod:`demo2rl.specs`) is everything one heavy job is given, as one frozen
dataclass; the script builds it from the ``snakemake`` object (:func:`build`) and hands it to the
stage. Each field is one of:

* a **result** field (:func:`result`, or a field without a role): it can change what the job
  produces. The workflow passes it as a rule ``param``, the values Snakemake reruns a job on and
  a variant shares a job on, and a resume key covers it (:func:`result_fields`).
* a **speed** field (:func:`speed`): threads, envs stepped together, checkpoint spacing, a time
  limit; it changes how fast (or whether) a job runs, never what it produces. The workflow passes
  it as a rule ``resource``, which reruns nothing.
* a **path** field (:func:`path`): where a file is, not what it holds (a stage records an
  input's content digest instead): a rule ``input`` or ``output``, or a param for a path that is
  neither.

What a param or resource field reads is data, declared on the field (:class:`Reads`): the config
keys, or the name of a value the workflow derives from them. The Plan
(:mod:`demo2rl.workflow.plan`) computes the rule's params and resources from it, keys a
variant's job on those params, and lists from it which jobs read each config key (what
docs/reruns.md and the rerun tests expect a change to rerun), so the three never disagree.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

_ROLE = "demo2rl.role"
_SOURCE = "demo2rl.source"
_READS = "demo2rl.reads"
_OF = "demo2rl.of"
_KEY = "demo2rl.key"
SOURCES = ("params", "resources", "input", "output", "wildcards", "threads")
"""Where :func:`build` takes a field from: the ``snakemake`` object's attribute of that name."""

Converter = Callable[[Any, Mapping[str, Any]], Any]
"""How :func:`build` turns a raw value into the field's type: ``of(raw, all_raw_values)``."""


@dataclasses.dataclass(frozen=True)
class Reads:
    """What the workflow gives a param or resource field, as data.

    :param keys: the dotted config keys it reads (a section: every key under it). Without
        ``derive``, its value: one key's value (a section's mapping, less ``omit``), or for
        several keys a mapping of each key's last part to its value, in that order's sorted
        order (as the config holds them). A key may name the jobs that read it,
        ``task.expert[policy=expert]``: read by, and given to, the jobs with that wildcard only.
    :param omit: keys of a section left out of it (``task``'s ``timeout_s``).
    :param per_arm: the ``rl`` section as the job's arm reads it (its ``arm`` wildcard; the arm
        record's :meth:`~demo2rl.arms.Arm.rl_slice`), and only the keys the arm reads.
    :param derive: the name of what the workflow derives the value from ``keys`` by: an
        attribute of the job's variant (or of the plan, for a job across variants), called with
        the job's wildcards where it is a method.
    """

    keys: tuple[str, ...] = ()
    omit: tuple[str, ...] = ()
    per_arm: bool = False
    derive: str | None = None

    def __post_init__(self) -> None:
        self.selected()  # (a key that does not parse is refused here, named)
        if self.per_arm and self.keys != ("rl",):
            raise ValueError(f"per_arm reads the rl section, not {self.keys}")
        if self.omit and len(self.keys) != 1:
            raise ValueError(f"omit leaves keys out of one section, not of {self.keys}")

    def selected(self) -> list[tuple[str, dict[str, str]]]:
        """Each key, with the wildcard values of the jobs that read it ({}: every job)."""
        out = []
        for entry in self.keys:
            match = re.fullmatch(r"([\w.]+)(?:\[(.*)\])?", entry)
            if not match:
                raise ValueError(f"bad config key {entry!r} in a spec's reads")
            pairs = [p.split("=", 1) for p in (match[2] or "").split(",") if p]
            out.append((match[1], {k.strip(): v.strip() for k, v in pairs}))
        return out


def _field(
    role: str, source: str, reads: Reads, of: Converter | None, key: str | None, **kw: Any
) -> Any:
    if source not in SOURCES:
        raise ValueError(f"unknown field source {source!r} (one of {', '.join(SOURCES)})")
    metadata = {_ROLE: role, _SOURCE: source, _READS: reads, _OF: of, _KEY: key}
    return dataclasses.field(metadata=metadata, **kw)


def result(
    *keys: str,
    source: str = "params",
    omit: tuple[str, ...] = (),
    per_arm: bool = False,
    derive: str | None = None,
    of: Converter | None = None,
    key: str | None = None,
    **kw: Any,
) -> Any:
    """A field that can change the job's result: a rule param that reads ``keys``
    (:class:`Reads`), or a wildcard (``source="wildcards"``, named ``key`` where its name
    differs)."""
    return _field("result", source, Reads(keys, omit, per_arm, derive), of, key, **kw)


def speed(
    *keys: str,
    source: str = "resources",
    derive: str | None = None,
    of: Converter | None = None,
    **kw: Any,
) -> Any:
    """A field holding a speed (or robustness) setting, not part of the result: a rule resource
    that reads ``keys`` (:class:`Reads`), or the rule's ``threads`` (``source="threads"``)."""
    return _field("speed", source, Reads(keys, derive=derive), of, None, **kw)


def path(
    *,
    source: str = "input",
    derive: str | None = None,
    of: Converter | None = None,
    key: str | None = None,
    **kw: Any,
) -> Any:
    """A field holding a file or directory path, not part of the result: a rule input or output
    of the field's name (or ``key``), or a param the workflow derives (``derive``,
    ``source="params"``)."""
    return _field("path", source, Reads(derive=derive), of, key, **kw)


def role(field: dataclasses.Field) -> str:
    """``result``, ``speed`` or ``path``."""
    return field.metadata.get(_ROLE, "result")


def source(field: dataclasses.Field) -> str | None:
    """Where the workflow passes the field (:data:`SOURCES`); None for a plain field."""
    return field.metadata.get(_SOURCE)


def reads(field: dataclasses.Field) -> Reads:
    """What the workflow gives the field (nothing for an input, output, wildcard or threads)."""
    return field.metadata.get(_READS, Reads())


def fields_from(spec_type: type, where: str, only: str | None = None) -> list[dataclasses.Field]:
    """The fields of ``spec_type`` the workflow passes through ``where`` (``params`` or
    ``resources``), only those of role ``only`` if given."""
    out = []
    for field in dataclasses.fields(spec_type):
        if source(field) == where and only in (None, role(field)):
            if reads(field) == Reads():
                raise TypeError(f"{spec_type.__name__}.{field.name}: a {where} field reads nothing")
            out.append(field)
    return out


def build(spec_type: type, smk: Any) -> Any:
    """The spec of the job that the ``snakemake`` object ``smk`` describes: each field from its
    source (an absent optional input is None), converted by its ``of``."""
    raw: dict[str, Any] = {}
    for field in dataclasses.fields(spec_type):
        where = source(field)
        if where is None:
            continue
        if where == "threads":
            raw[field.name] = smk.threads
            continue
        name = field.metadata.get(_KEY) or field.name
        container = getattr(smk, where)
        value = container.get(name)
        if value is None and where != "input":  # only an input may be absent (an optional one)
            if not hasattr(container, name):
                raise KeyError(
                    f"{spec_type.__name__}.{field.name}: the rule {smk.rule} has no {where} "
                    f"named {name!r}"
                )
            value = getattr(container, name)
        raw[field.name] = list(value) if _is_file_list(value) else value
    values = {}
    for field in dataclasses.fields(spec_type):
        if field.name in raw:
            of = field.metadata.get(_OF)
            values[field.name] = of(raw[field.name], raw) if of else raw[field.name]
    return spec_type(**values)


def _is_file_list(value: Any) -> bool:
    """A named list of a rule's inputs (Snakemake's Namedlist), not one path or a param."""
    return isinstance(value, list) and not isinstance(value, str)


def result_fields(spec: Any) -> dict[str, Any]:
    """The fields of ``spec`` that can change its job's result, as plain JSON-able values (a
    config section as its mapping, less its own speed fields, e.g. ``task.timeout_s``), by
    name."""
    return {
        field.name: _plain(getattr(spec, field.name))
        for field in dataclasses.fields(spec)
        if role(field) == "result"
    }


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return result_fields(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
