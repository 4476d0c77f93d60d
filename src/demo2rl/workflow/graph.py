"""The workflow's job graph, declared once: each kind of job, the rules that compute it, the
jobs whose outputs it reads, and where its output lies.

A job is a tuple: ``("shard", s)`` (shard ``s`` of the expert's episodes), ``("demos",)``
(the shards merged, or a dataset imported), ``("clone",)`` (behaviour cloning), DAgger round
``r``'s ``("dagger_shard", r, s)`` (shard ``s`` of its episodes, driven by the last clone and
labelled by the expert), ``("aggregate", r)`` (its labels added to the last round's) and
``("round", r)`` (the clone trained on them), ``("rl", arm, seed)`` (one RL run) or
``("evaluation", policy)`` (one policy
on the held-out episodes). :data:`KINDS` says, per kind, which rules compute it (what config
they read is their job specs'), which jobs it reads (by the rule's input names) and
where its main output goes under a variant's results (a path of :mod:`demo2rl.names`, which the
rule writes too). Every heavy job of these kinds takes its inputs from here, and the variants'
sharing follows the same entries (:class:`demo2rl.workflow.plan.Plan`): a new upstream step is
one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from demo2rl import arms, names
from demo2rl.config import EXPERT_SOURCE

Job = tuple[str, ...]
"""A job: its kind, then its arguments (``("rl", "bc", "0")``)."""
Reads = dict[str, Job | list[Job]]
"""The jobs a job reads, by the rule's input name: one job, or a list (a round's shards)."""


@dataclasses.dataclass(frozen=True)
class JobKind:
    """One kind of job.

    :param name: the kind (the first element of its jobs).
    :param rules: the rules that compute one job of this kind, in order (a job's identity is
        the result params of each, and the identities of the jobs it reads).
    :param inputs: the jobs one job reads, by the rule's input name, given the variant's config
        and the job's arguments.
    :param wildcards: the names of the rules' wildcards its arguments are, in order.
    :param output: its main output under a variant's results: a pattern of those wildcards (a
        path of :mod:`demo2rl.names`, the one its rule's output is spelled with).
    :param files: its other outputs that other rules read, by name, as ``output`` is.
    """

    name: str
    rules: tuple[str, ...]
    inputs: Callable[[Mapping[str, Any], tuple[str, ...]], Reads]
    wildcards: tuple[str, ...]
    output: str
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def job_of(self, wildcards: Any) -> Job:
        """The job of this kind that a rule's ``wildcards`` name (its arguments are those of
        :attr:`wildcards`)."""
        return (self.name, *(getattr(wildcards, name) for name in self.wildcards))

    def wildcards_of(self, args: tuple[str, ...]) -> dict[str, str]:
        """A job's wildcards, by name, given its arguments."""
        return dict(zip(self.wildcards, args, strict=True))

    def output_of(self, root: str, args: tuple[str, ...], file: str | None = None) -> str:
        """A job's main output (or its output ``file``, of :attr:`files`) under the results
        directory ``root``."""
        pattern = self.output if file is None else self.files[file]
        return f"{root}/{pattern.format(**self.wildcards_of(args))}"


def clone_after(rounds: int) -> Job:
    """The clone after ``rounds`` DAgger rounds: the last round's, or the plain clone (0). The RL
    arms start from the clone after ``bc.dagger.rounds``; DAgger round ``r`` is driven by the
    clone after ``r - 1``."""
    return ("round", str(rounds)) if rounds else ("clone",)


def _rl_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """Every arm reads the dataset (its normalisation statistics); an arm that uses the clone
    (:meth:`demo2rl.arms.Arm.uses_clone`) reads the clone after the last DAgger round too."""
    arm = args[0]
    inputs: Reads = {"demos": ("demos",)}
    if arms.get(arm).uses_clone(config["rl"]):
        inputs["bc"] = clone_after(config["bc"]["dagger"]["rounds"])
    return inputs


def _shard_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """A DAgger shard is driven by the last clone, and its episodes continue the dataset's."""
    return {"clone": clone_after(int(args[0]) - 1), "demos": ("demos",)}


def _aggregate_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """A round's aggregate extends the last round's (round 1: the dataset) by its shards."""
    r, n = int(args[0]), config["bc"]["dagger"]["n_shards"]
    return {
        "data": ("demos",) if r == 1 else ("aggregate", str(r - 1)),
        "shards": [("dagger_shard", str(r), str(s)) for s in range(n)],
    }


def _round_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """A round's clone trains on its aggregate, with the dataset's normalisation."""
    return {"data": ("aggregate", args[0]), "demos": ("demos",)}


def producer(policy: str) -> Job | None:
    """The job that made ``policy`` (None for the expert: code and config only)."""
    run = names.RLRun.parse(policy)
    if run is not None:
        return ("rl", run.arm, str(run.seed))
    r = names.dagger_round(policy)
    if r is not None:
        return ("round", str(r))
    return ("clone",) if policy == names.BC else None


def _evaluation_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """A learned policy's checkpoint, and the dataset it must record as its own."""
    made_by = producer(args[0])
    return {} if made_by is None else {"checkpoint": made_by, "demos": ("demos",)}


def _nothing(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """A shard of collection reads no job (its episodes come from the expert)."""
    return {}


def _dataset_inputs(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """A collected dataset merges its shards; an imported one reads a file, not a job."""
    if config["collect"]["source"] != EXPERT_SOURCE:
        return {}
    return {"shards": [("shard", str(s)) for s in range(config["collect"]["n_shards"])]}


def _the_dataset(config: Mapping[str, Any], args: tuple[str, ...]) -> Reads:
    """Behaviour cloning reads the dataset."""
    return {"demos": ("demos",)}


KINDS: dict[str, JobKind] = {
    kind.name: kind
    for kind in (
        JobKind("shard", ("collect_shard",), _nothing, wildcards=("shard",), output=names.SHARD),
        JobKind(
            "demos",
            rules=("merge_demos", "import_demos"),
            inputs=_dataset_inputs,
            wildcards=(),
            output=names.DEMOS,
        ),
        JobKind(
            "clone",
            ("train_bc",),
            _the_dataset,
            wildcards=(),
            output=names.CLONE,
            files={"metrics": names.CLONE_METRICS},
        ),
        JobKind(
            "dagger_shard",
            ("dagger_shard",),
            _shard_inputs,
            ("round", "shard"),
            names.DAGGER_SHARD,
        ),
        JobKind(
            "aggregate",
            ("aggregate_dagger",),
            _aggregate_inputs,
            ("round",),
            names.DAGGER_AGGREGATE,
        ),
        JobKind(
            "round",
            ("train_dagger",),
            _round_inputs,
            ("round",),
            names.ROUND_CLONE,
            files={"metrics": names.ROUND_METRICS},
        ),
        JobKind(
            "rl",
            ("train_rl",),
            _rl_inputs,
            ("arm", "seed"),
            names.RL_CHECKPOINT,
            files={"progress": names.RL_PROGRESS, "curve": names.RL_CURVE},
        ),
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
