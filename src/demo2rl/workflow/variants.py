"""Config variants: named overrides of the base config, run beside it in one invocation, and
which of their jobs each shares with a variant before it.

The ``variants`` section of a config declares them three ways, each a set of overrides that is
deep-merged into the base config (a mapping merges into a mapping, anything else replaces):

* named: ``lr-high: {rl: {ppo: {learning_rate: 0.003}}}``;
* ``grid``: dotted keys with lists of values, one variant per combination, named after its
  values (``learning_rate-0.003_n_envs-32``);
* ``sample``: ``n`` variants drawn from declared ranges with their own ``seed``: the same
  config gives the same variants, on every machine.

The base config runs as variant ``base`` (:data:`demo2rl.names.BASE_VARIANT`). A job reruns on
exactly what Snakemake compares: its params, the result fields of its job spec
(:mod:`demo2rl.specs`) and its code. So a job of a variant whose params agree with an earlier
variant's (the base first), and whose upstream jobs do too, would compute the same bytes: it is
that variant's job, not a new one (:class:`Sharing`). A variant of ``rl.*`` therefore reuses the
base's demonstrations and clone.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from demo2rl.config import ConfigError
from demo2rl.names import BASE_VARIANT
from demo2rl.workflow import graph

SHORTHANDS = ("grid", "sample")
"""Keys of the ``variants`` section that are not variant names."""
FIXED = ("experiment", "seed", "variants", "tracking")
"""Top-level keys a variant cannot override: they belong to the whole invocation (``seed``
chooses the held-out episodes every variant is compared on)."""
SAMPLE_DIGITS = 3
"""Significant digits of a sampled float: readable in names and tables, the same everywhere."""


# --------------------------------------------------------------------------------------------
# declaring variants


def declared(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every variant the ``variants`` section declares, by name, as nested overrides: the named
    ones (sorted by name, so that their order in a file never counts), then the grid's, then the
    sample's. A name declared twice is a :class:`~demo2rl.config.ConfigError`."""
    out: dict[str, dict[str, Any]] = {}
    named = {k: v for k, v in section.items() if k not in SHORTHANDS}
    generated = [
        *((name, copy.deepcopy(named[name])) for name in sorted(named)),
        *grid(section.get("grid") or {}).items(),
        *sample(section.get("sample") or {}).items(),
    ]
    for name, overrides in generated:
        if name == BASE_VARIANT or name in out:
            raise ConfigError(f"variants.{name}", "declared twice (or named like the base)")
        out[name] = overrides
    return out


def grid(spec: Mapping[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """One variant per combination of the values of ``spec``'s dotted keys (sorted keys; each
    key's values in their order), named ``<key>-<value>`` joined by ``_`` (the key's last part,
    or more of it where two keys end alike). Names keep to the characters an experiment name
    may have, which MLflow takes in metric keys too (Snakemake's ``Paramspace`` uses ``~``,
    which it does not)."""
    keys = sorted(spec)
    short = short_names(keys)
    out: dict[str, dict[str, Any]] = {}
    if not keys:
        return out
    for values in itertools.product(*(spec[k] for k in keys)):
        name = "_".join(f"{short[k]}-{value_text(v)}" for k, v in zip(keys, values, strict=True))
        out[name] = nest(dict(zip(keys, values, strict=True)))
    return out


def sample(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``spec["n"]`` variants ``sample-<i>``, each key of ``spec["ranges"]`` drawn (in sorted
    key order) from numpy's PCG64 stream of ``spec["seed"]``:

    * ``{values: [...]}``: one of the values, uniformly;
    * ``{low, high}`` integers: an integer in [low, high], uniformly;
    * ``{low, high}`` with a float, ``log: false``: a float in [low, high), uniformly; with
      ``log: true``: log-uniformly (learning rates). Floats keep :data:`SAMPLE_DIGITS`
      significant digits.
    """
    n, ranges = spec.get("n", 0), spec.get("ranges") or {}
    if n and not ranges:
        raise ConfigError("variants.sample.ranges", f"empty: nothing to draw for n={n} variants")
    rng = np.random.default_rng(spec.get("seed", 0))
    out = {}
    for i in range(n):
        values = {key: _draw(rng, key, ranges[key]) for key in sorted(ranges)}
        out[f"sample-{i}"] = nest(values)
    return out


def _draw(rng: np.random.Generator, key: str, spec: Mapping[str, Any]) -> Any:
    if "values" in spec:
        return copy.deepcopy(spec["values"][int(rng.integers(len(spec["values"])))])
    low, high = spec["low"], spec["high"]
    if not low < high:
        raise ConfigError(f"variants.sample.ranges.{key}", f"low {low} is not below high {high}")
    if isinstance(low, int) and isinstance(high, int) and not spec.get("log"):
        return int(rng.integers(low, high, endpoint=True))
    if spec.get("log"):
        if low <= 0:
            raise ConfigError(f"variants.sample.ranges.{key}", f"log: true needs low > 0: {low}")
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    return float(f"{value:.{SAMPLE_DIGITS}g}")


def short_names(keys: Iterable[str]) -> dict[str, str]:
    """Each dotted key's shortest tail of parts that no other key shares."""
    keys = list(keys)
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != key and (o == tail or o.endswith(f".{tail}")) for o in keys):
                break
        out[key] = tail
    return out


def value_text(value: Any) -> str:
    """A value as it appears in a variant's name: its JSON text (a mapping's keys sorted, as the
    config's are: the order a file writes them in names nothing), ``+`` dropped (``1e+20`` ->
    ``1e20``), runs of other characters than letters, digits, ``.``, ``_`` and ``-`` made one
    ``-`` (``[64, 64]`` -> ``64-64``)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = text.replace("+", "")
    parts = re.split(r"[^A-Za-z0-9._-]+", text)
    return "-".join(p for p in parts if p) or "none"


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"rl.ppo.learning_rate": x}`` -> ``{"rl": {"ppo": {"learning_rate": x}}}``."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = copy.deepcopy(value)
    return out


def merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` deep-merged in: a mapping merges into a mapping, any other
    value (a list too) replaces what was there."""
    out = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check_overrides(name: str, overrides: Any, leaves: Mapping[str, Any]) -> None:
    """Refuse overrides that name no config key, or a key of the whole invocation
    (:data:`FIXED`), with a :class:`~demo2rl.config.ConfigError` naming the variant's key."""
    if not isinstance(overrides, Mapping) or not overrides:
        raise ConfigError(f"variants.{name}", f"expected a mapping of overrides, got {overrides!r}")
    for key in flatten(overrides, leaves):
        top = key.split(".")[0]
        if top in FIXED:
            raise ConfigError(
                f"variants.{name}.{key}", f"{top!r} belongs to the whole invocation, not a variant"
            )
        if key not in leaves:
            raise ConfigError(f"variants.{name}.{key}", "unknown config key")


def flatten(overrides: Mapping[str, Any], leaves: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted config keys ``overrides`` set: down to the schema's leaf keys (a leaf that is a
    mapping, such as ``task.env_kwargs``, is one key), or to where the schema has no such key."""
    keys = []
    for name, value in overrides.items():
        key = f"{prefix}{name}"
        if key not in leaves and isinstance(value, Mapping) and value:
            keys += flatten(value, leaves, f"{key}.")
        else:
            keys.append(key)
    return keys


def schema_leaves(node: Mapping[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Dotted key -> schema entry of every leaf key of the config schema (what a variant may
    override)."""
    out = {}
    for name, sub in node.get("properties", {}).items():
        if "properties" in sub:
            out |= schema_leaves(sub, f"{prefix}{name}.")
        else:
            out[f"{prefix}{name}"] = sub
    return out


# --------------------------------------------------------------------------------------------
# which jobs a variant shares


class Sharing:
    """Which variant's job each job of a variant is.

    A job's identity is what can change its result, upstream jobs included: for each of its
    rules, the result params its job spec gives it (what Snakemake reruns it on) and the modules
    whose code it runs, and the identities of the jobs it reads
    (:data:`demo2rl.workflow.graph.KINDS`). A variant's job is the job of the first variant (in
    ``configs``' order, the base first) with the same identity; with ``configs`` built from the
    same config, the same answer on every machine.

    :param configs: each variant's full config, the base first.
    :param params: ``params(variant, rule, wildcards)``: the result params and code of
        ``variant``'s job of ``rule`` (:meth:`demo2rl.workflow.plan.Plan.result_params`).
    """

    def __init__(
        self,
        configs: Mapping[str, Mapping[str, Any]],
        params: Callable[[str, str, Mapping[str, str]], Mapping[str, Any]],
    ) -> None:
        self.configs = dict(configs)
        self.params = params

    @functools.cache  # noqa: B019  (one Sharing per workflow: it lives as long as the cache)
    def _identity(self, variant: str, job: graph.Job) -> str:
        """A digest of what ``variant``'s ``job`` reads: the identities of the jobs it reads, and
        its rules' params (a digest, so that a DAgger round's, which reads every shard of every
        round before it, stays one string; cached, so that each is computed once)."""
        kind, args = graph.kind(job), job[1:]
        reads = kind.inputs(self.configs[variant], args).values()
        upstream = [j for r in reads for j in (r if isinstance(r, list) else [r])]
        wildcards = kind.wildcards_of(args)
        parts = [
            *(self._identity(variant, needed) for needed in upstream),
            *(
                json.dumps(self.params(variant, rule, wildcards), sort_keys=True)
                for rule in kind.rules
            ),
        ]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    @functools.cache  # noqa: B019  (as _identity: one Sharing per workflow)
    def owner(self, variant: str, *job: str) -> str:
        """The variant whose job ``job`` of ``variant`` is: ``("demos",)``, ``("clone",)``,
        ``("rl", arm, seed)``, ... (:mod:`demo2rl.workflow.graph`)."""
        identity = self._identity(variant, job)
        return next(
            name
            for name in self.configs
            if name == variant or self._identity(name, job) == identity
        )
