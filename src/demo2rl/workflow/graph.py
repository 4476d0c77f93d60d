"""The workflow's job graph, declared once: each kind of job, the rules that compute it, the
jobs whose outputs it reads, and where its output lies.

A job is a tuple: ``("demos",)`` (the collection shards and their merge, or the import of a
dataset), ``("clone",)`` (behaviour cloning), ``("round", r)`` (DAgger round ``r``: its
relabelling shards, the aggregate and the clone trained on it), ``("rl", arm, seed)`` (one RL
run) or ``("evaluation", policy)`` (one policy on the held-out episodes). :data:`KINDS`
says, per kind, which rules compute it (what config they read is the schema's ``x-read-by``),
which jobs it reads (by the rule's input names) and where its main output goes under a
variant's results (a path of :mod:`demo2rl.names`, which the rule writes too). The rules' inputs
and the variants' sharing both derive from it (:class:`demo2rl.workflow.plan.Plan`): a new
upstream step is one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from demo2rl import arms, names

Job = tuple[str, ...]
"""A job: its kind, then its arguments (``("rl", "bc", "0")``)."""


@dataclasses.dataclass(frozen=True)
class JobKind:
    """One kind of job.

    :param name: the kind (the first element of its jobs).
    :param rules: the rules that compute one job of this kind, in order (a job's identity is
        the config keys each reads, ``x-read-by``, and the identities of the jobs it reads).
    :param inputs: the jobs one job reads, by the rule's input name, given the variant's config
        and the job's arguments.
    :param wildcards: the names of the rules' wildcards its arguments are, in order.
    :param output: its main output under a variant's results: a pattern of those wildcards (a
        path of :mod:`demo2rl.names`, the one its rule's output is spelled with).
    """

    name: str
    rules: tuple[str, ...]
    inputs: Callable[[Mapping[str, Any], tuple[str, ...]], dict[str, Job]]
    wildcards: tuple[str, ...]
    output: str

    def wildcards_of(self, args: tuple[str, ...]) -> dict[str, str]:
        """A job's wildcards, by name, given its arguments."""
        return dict(zip(self.wildcards, args, strict=True))

    def output_of(self, root: str, args: tuple[str, ...]) -> str:
        """A job's main output under the results directory ``root``."""
        return f"{root}/{self.output.format(**self.wildcards_of(args))}"


def final_clone(config: Mapping[str, Any]) -> Job:
    """The clone the RL arms start from: the last DAgger round's, or the plain clone without
    DAgger (``bc.dagger.rounds`` 0)."""
    rounds = config["bc"]["dagger"]["rounds"]
    return ("round", str(rounds)) if rounds else ("clone",)


def _rl_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> dict[str, Job]:
    """Every arm reads the dataset (its normalisation statistics); an arm that uses the clone
    (:meth:`demo2rl.arms.Arm.uses_clone`) reads it too: :func:`final_clone`."""
    arm = args[0]
    inputs: dict[str, Job] = {"demos": ("demos",)}
    if arms.get(arm).uses_clone(config["rl"]):
        inputs["bc"] = final_clone(config)
    return inputs


def _round_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> dict[str, Job]:
    """A DAgger round reads the last round's clone (round 1: the plain clone), which drives, and
    the dataset, whose episodes its own continue."""
    r = int(args[0])
    return {"previous": ("clone",) if r == 1 else ("round", str(r - 1)), "demos": ("demos",)}


def producer(policy: str) -> Job | None:
    """The job that made ``policy`` (None for the expert: code and config only)."""
    run = names.RLRun.parse(policy)
    if run is not None:
        return ("rl", run.arm, str(run.seed))
    r = names.dagger_round(policy)
    if r is not None:
        return ("round", str(r))
    return ("clone",) if policy == names.BC else None


def _evaluation_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> dict[str, Job]:
    """A learned policy's checkpoint, and the dataset it must record as its own."""
    made_by = producer(args[0])
    return {} if made_by is None else {"checkpoint": made_by, "demos": ("demos",)}


def _nothing(config: Mapping[str, Any], args: tuple[str, ...]) -> dict[str, Job]:
    """Collection reads no job (its demonstrations come from the expert or a file)."""
    return {}


def _the_dataset(config: Mapping[str, Any], args: tuple[str, ...]) -> dict[str, Job]:
    """Behaviour cloning reads the dataset."""
    return {"demos": ("demos",)}


KINDS: dict[str, JobKind] = {
    kind.name: kind
    for kind in (
        JobKind(
            "demos",
            rules=("collect_shard", "merge_demos", "import_demos"),
            inputs=_nothing,
            wildcards=(),
            output=names.DEMOS,
        ),
        JobKind("clone", ("train_bc",), _the_dataset, wildcards=(), output=names.CLONE),
        JobKind(
            "round",
            rules=("dagger_shard", "aggregate_dagger", "train_dagger"),
            inputs=_round_inputs,
            wildcards=("round",),
            output=names.ROUND_CLONE,
        ),
        JobKind("rl", ("train_rl",), _rl_inputs, ("arm", "seed"), names.RL_CHECKPOINT),
        JobKind("evaluation", ("evaluate",), _evaluation_inputs, ("policy",), names.EVALUATION),
    )
}
"""Every kind of job, by name."""


def kind(job: Job) -> JobKind:
    """The kind of ``job``; a ValueError naming the known kinds otherwise."""
    try:
        return KINDS[job[0]]
    except KeyError:
        raise ValueError(f"unknown job kind {job[0]!r} (known: {', '.join(KINDS)})") from None
