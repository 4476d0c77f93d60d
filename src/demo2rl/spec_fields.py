"""What a field of a job spec is: its role (does it change the job's result?) and its source
(where the workflow takes its value from).

A job spec (:mod:`demo2rl.specs`) is everything one heavy job is given, as one frozen
dataclass; the script builds it from the ``snakemake`` object (:func:`build`) and hands it to the
stage. Each field is one of:

* a **result** field (:func:`result`, or a field without a role): it can change what the job
  produces. The workflow passes it as a rule ``param``, the values Snakemake reruns a job on, and
  a resume key covers it (:func:`result_fields`).
* a **speed** field (:func:`speed`): threads, envs stepped together, checkpoint spacing, a time
  limit; it changes how fast (or whether) a job runs, never what it produces. The workflow passes
  it as a rule ``resource``, which reruns nothing.
* a **path** field (:func:`path`): where a file is, not what it holds (a stage records an
  input's content digest instead): a rule ``input`` or ``output``, or a param for a path that is
  neither.

A field's ``get`` says how the workflow computes its value for a job, from the job's subject
(its config variant, or the whole plan for a job across variants) and its wildcards; the Plan
(:mod:`demo2rl.workflow.plan`) turns the result fields into the rule's params and the speed fields
into its resources, so the two can never disagree with the spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

_ROLE = "demo2rl.role"
_SOURCE = "demo2rl.source"
_GET = "demo2rl.get"
_OF = "demo2rl.of"
_KEY = "demo2rl.key"
SOURCES = ("params", "resources", "input", "output", "wildcards", "threads")
"""Where :func:`build` takes a field from: the ``snakemake`` object's attribute of that name."""

Getter = Callable[[Any, Any], Any]
"""How the workflow computes a field for a job: ``get(subject, wildcards)``."""
Converter = Callable[[Any, Mapping[str, Any]], Any]
"""How :func:`build` turns a raw value into the field's type: ``of(raw, all_raw_values)``."""


def _field(
    role: str,
    source: str,
    get: Getter | None,
    of: Converter | None,
    key: str | None = None,
    **kwargs: Any,
) -> Any:
    if source not in SOURCES:
        raise ValueError(f"unknown field source {source!r} (one of {', '.join(SOURCES)})")
    metadata = {_ROLE: role, _SOURCE: source, _GET: get, _OF: of, _KEY: key}
    return dataclasses.field(metadata=metadata, **kwargs)


def result(
    get: Getter | None = None, *, source: str = "params", of: Converter | None = None, **kw: Any
) -> Any:
    """A field that can change the job's result: a rule param computed by ``get`` (or a
    wildcard, ``source="wildcards"``, named ``key`` where its name differs)."""
    return _field("result", source, get, of, **kw)


def speed(
    get: Getter | None = None, *, source: str = "resources", of: Converter | None = None, **kw: Any
) -> Any:
    """A field holding a speed (or robustness) setting: not part of the result; a rule resource
    computed by ``get`` (or the rule's ``threads``, ``source="threads"``)."""
    return _field("speed", source, get, of, **kw)


def path(
    get: Getter | None = None, *, source: str = "input", of: Converter | None = None, **kw: Any
) -> Any:
    """A field holding a file or directory path: not part of the result; a rule input or output
    of the field's name, or a param computed by ``get`` (``source="params"``)."""
    return _field("path", source, get, of, **kw)


def role(field: dataclasses.Field) -> str:
    """``result``, ``speed`` or ``path``."""
    return field.metadata.get(_ROLE, "result")


def source(field: dataclasses.Field) -> str | None:
    """Where the workflow passes the field (:data:`SOURCES`); None for a plain field."""
    return field.metadata.get(_SOURCE)


def getter(field: dataclasses.Field) -> Getter | None:
    """How the workflow computes the field (None: an input, output, wildcard or threads)."""
    return field.metadata.get(_GET)


def fields_from(spec_type: type, where: str, only: str | None = None) -> dict[str, Getter]:
    """The fields of ``spec_type`` the workflow passes through ``where`` (``params`` or
    ``resources``), only those of role ``only`` if given, each with its getter, by name."""
    out = {}
    for field in dataclasses.fields(spec_type):
        if source(field) == where and only in (None, role(field)):
            get = getter(field)
            if get is None:
                raise TypeError(f"{spec_type.__name__}.{field.name}: a {where} field needs a get")
            out[field.name] = get
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
