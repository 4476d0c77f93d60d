"""What a rule's params carry is what its spec declares it reads, checked without Snakemake.

A job's params (its spec's result fields, :meth:`demo2rl.workflow.plan.Plan.params`) are what
Snakemake reruns it on, and what a variant's job is shared on
(:meth:`demo2rl.workflow.plan.Plan.result_params`); the keys its spec's fields declare they read
(:func:`demo2rl.workflow.plan.readers`) are what docs/reruns.md and tests/test_rerun_matrix.py
expect a change of a key to rerun. The two must agree (a value a field derives, ``derive``, is
code that could read more or less than it declares). For every config key, this changes the key
alone in the test config, builds both Plans and compares every heavy job's params: the jobs
whose params changed must be exactly the jobs that declare the key read.
(tests/test_rerun_matrix.py checks the same declaration against Snakemake's own plans,
downstream jobs and code included, in minutes.)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from snakemake.iocontainers import Wildcards
from test_rerun_matrix import (
    KEYS,
    SPECIAL_CONFIGS,
    changed_value,
    effective_config,
    reads,
    with_value,
)

from demo2rl import spec_fields
from demo2rl.specs import registry
from demo2rl.workflow.plan import Plan

NEEDS_FILES = {"collect.source": "a dataset to import: its file must exist at plan time"}
"""Keys whose changed value a plan cannot be built with here (tests/test_rerun_matrix.py covers
them on a finished run)."""

Job = tuple[str, tuple[tuple[str, str], ...]]
"""A heavy job: its rule and its wildcards."""


def jobs(plan: Plan) -> Iterator[Job]:
    """Every heavy job of the plan's base variant, and the comparison across variants (a DAgger
    round's jobs as round 1's, which exist with ``bc.dagger.rounds`` 0 as well)."""
    base = plan.base
    root = {"root": base.root}
    for rule in registry.SPECS:
        if rule == "compare_variants":
            yield rule, ()
        elif rule in ("collect_shard", "dagger_shard"):
            for shard in range(base.config["collect"]["n_shards"]):
                extra = {"round": "1"} if rule == "dagger_shard" else {}
                yield rule, tuple((root | extra | {"shard": str(shard)}).items())
        elif rule in ("aggregate_dagger", "train_dagger"):
            yield rule, tuple((root | {"round": "1"}).items())
        elif rule == "train_rl":
            for run in base.runs:
                yield rule, tuple((root | {"arm": run.arm, "seed": str(run.seed)}).items())
        elif rule == "evaluate":
            for policy in base.policies:
                yield rule, tuple((root | {"policy": policy}).items())
        else:
            yield rule, tuple(root.items())


def result_params(plan: Plan, job: Job) -> dict[str, Any]:
    """The params of ``job`` that can change its result: its spec's result fields (not the
    code fingerprint, not a path)."""
    rule, wildcards = job
    spec = registry.SPECS[rule]
    result = {f.name for f in dataclasses.fields(spec) if spec_fields.role(f) == "result"}
    wc = Wildcards(fromdict=dict(wildcards))
    return {k: f(wc) for k, f in plan.params(rule).items() if k in result}


def changed_config(config: dict[str, Any], key: str) -> dict[str, Any]:
    if key in SPECIAL_CONFIGS:
        return SPECIAL_CONFIGS[key](config)
    value = config
    for part in key.split("."):
        value = value[part]
    return with_value(config, key, changed_value(key, value, KEYS[key]))


@pytest.fixture(scope="module")
def base() -> tuple[Plan, dict[Job, dict[str, Any]]]:
    plan = Plan(effective_config())
    return plan, {job: result_params(plan, job) for job in jobs(plan)}


CASES = [k for k, spec in KEYS.items() if "const" not in spec and k not in NEEDS_FILES]


@pytest.mark.parametrize("key", CASES)
def test_the_jobs_whose_params_a_key_changes_are_the_jobs_that_declare_it_read(base, key):
    _, params = base
    changed = Plan(changed_config(copy.deepcopy(effective_config()), key))
    still = set(jobs(changed))  # (a key such as rl.arms removes jobs: those are compared not)
    moved = {job for job in params if job in still and result_params(changed, job) != params[job]}
    declared = {job for job in params if job in still and key in reads(job[0], **dict(job[1]))}
    assert moved == declared, (
        f"{key}: params changed but not declared read: {sorted(moved - declared)}; "
        f"declared read but params unchanged: {sorted(declared - moved)}"
    )


def test_what_sharing_keys_on_is_what_the_params_carry(base):
    """A variant's job is shared on :meth:`Plan.result_params`: for every heavy job, exactly
    its rule's result params as Snakemake gets them (and the code it runs, as named modules)."""
    plan, params = base
    for (rule, wildcards), expected in params.items():
        if rule in ("summarize", "compare_variants"):
            continue  # (no job kind: never shared)
        keyed = plan.result_params(
            plan.base.name, rule, {k: v for k, v in wildcards if k != "root"}
        )
        assert keyed.pop("code") == plan.code_roots(rule, plan.base)
        assert keyed == expected, rule
