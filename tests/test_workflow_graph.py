"""The job graph (demo2rl.workflow.graph): what each job reads, where it writes, and how the
variants' sharing follows it. Fast: no Snakemake."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from conftest import REPO
from snakemake.iocontainers import Wildcards

from demo2rl import config, spec_fields
from demo2rl.specs import registry
from demo2rl.workflow import graph
from demo2rl.workflow.plan import Plan

BASE = config.load(REPO / "config" / "config.yaml")


def inputs(job: graph.Job, cfg: dict = BASE) -> dict[str, graph.Job]:
    return graph.kind(job).inputs(cfg, job[1:])


def test_each_job_reads_the_jobs_the_rules_take_as_inputs():
    shards = [("shard", str(s)) for s in range(BASE["collect"]["n_shards"])]
    assert inputs(("demos",)) == {"shards": shards}
    assert inputs(("shard", "1")) == {}
    imported = BASE | {"collect": BASE["collect"] | {"source": "d.h5"}}
    assert inputs(("demos",), imported) == {}  # an imported dataset reads a file, not a job
    assert inputs(("clone",)) == {"demos": ("demos",)}
    for arm in ("bc", "residual", "kickstart"):
        assert inputs(("rl", arm, "0")) == {"demos": ("demos",), "bc": ("clone",)}
    for arm in ("scratch", "sac", "rlpd"):  # rlpd: its clone switches are off by default
        assert inputs(("rl", arm, "0")) == {"demos": ("demos",)}
    on = BASE | {"rl": BASE["rl"] | {"rlpd": BASE["rl"]["rlpd"] | {"clone_warmup": True}}}
    assert inputs(("rl", "rlpd", "0"), on) == {"demos": ("demos",), "bc": ("clone",)}
    dagger = BASE | {"bc": BASE["bc"] | {"dagger": BASE["bc"]["dagger"] | {"n_shards": 2}}}
    assert inputs(("dagger_shard", "1", "0")) == {"clone": ("clone",), "demos": ("demos",)}
    assert inputs(("dagger_shard", "3", "1")) == {"clone": ("round", "2"), "demos": ("demos",)}
    assert inputs(("aggregate", "1"), dagger) == {
        "data": ("demos",),
        "shards": [("dagger_shard", "1", "0"), ("dagger_shard", "1", "1")],
    }
    assert inputs(("aggregate", "2"), dagger)["data"] == ("aggregate", "1")
    assert inputs(("round", "2")) == {"data": ("aggregate", "2"), "demos": ("demos",)}
    assert inputs(("evaluation", "expert")) == {}
    assert inputs(("evaluation", "bc")) == {"checkpoint": ("clone",), "demos": ("demos",)}
    assert inputs(("evaluation", "rl-kickstart-seed2")) == {
        "checkpoint": ("rl", "kickstart", "2"),
        "demos": ("demos",),
    }


def test_each_job_writes_under_its_variants_results():
    outputs = {
        ("shard", "3"): "r/demos/shard-3.h5",
        ("demos",): "r/demos/demos.h5",
        ("clone",): "r/bc/policy.pt",
        ("rl", "sac", "1"): "r/rl/sac/seed-1/policy.pt",
        ("evaluation", "rl-sac-seed1"): "r/eval/rl-sac-seed1.json",
        ("dagger_shard", "2", "1"): "r/bc/dagger/round-2/shard-1.h5",
        ("aggregate", "2"): "r/bc/dagger/round-2/demos.h5",
        ("round", "2"): "r/bc/dagger/round-2/policy.pt",
    }
    for job, path in outputs.items():
        assert graph.kind(job).output_of("r", job[1:]) == path


def test_an_unknown_kind_is_named():
    try:
        graph.kind(("distill",))
    except ValueError as err:
        known = "shard, demos, clone, dagger_shard, aggregate, round, rl, evaluation"
        assert f"unknown job kind 'distill' (known: {known})" in str(err)
    else:
        raise AssertionError("no error")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillJob:
    """The toy kind's spec: a student of the clone, checked on as many episodes as the final
    evaluation's."""

    TASK_CODE: ClassVar[bool] = False
    episodes: int = spec_fields.result("evaluate.episodes")
    teacher: str = spec_fields.path()


def test_a_new_kind_is_one_entry_and_the_sharing_follows_it(monkeypatch):
    """The worked example of docs/architecture.md: a toy job kind, "distill" (a student network
    trained on the clone's actions, computed by a rule train_distill whose spec reads
    evaluate.episodes), added to the table and the registry in the test; the sharing treats it like
    the built-in kinds without a line of its own: a variant of an upstream key owns its distill
    job, a variant of another arm's settings shares the base's, and one of the key its spec
    reads owns it too."""
    distill = graph.JobKind(
        "distill",
        rules=("train_distill",),
        inputs=lambda cfg, args: {"teacher": ("clone",)},
        wildcards=(),
        output="distill/policy.pt",
    )
    monkeypatch.setitem(graph.KINDS, "distill", distill)
    monkeypatch.setitem(registry.SPECS, "train_distill", DistillJob)
    named = {
        "lr": {"bc": {"learning_rate": 0.01}},  # the clone changes: so does its student
        "warm": {"rl": {"warm_start": {"log_std": -0.5}}},  # an RL arm's own key: shared
        "episodes": {"evaluate": {"episodes": 7}},  # the student's own key: not the clone's
    }
    share = Plan(BASE | {"variants": named}).sharing
    assert share.owner("lr", "distill") == "lr"
    assert share.owner("episodes", "clone") == "base"
    assert share.owner("episodes", "distill") == "episodes"
    assert share.owner("warm", "distill") == "base"


def test_a_rule_names_its_job_by_the_kind_and_its_wildcards():
    """A rule names the kind it computes (`job_inputs("rl")`); its wildcards give the job's
    arguments in the kind's order, whatever else they hold (the variant's root)."""
    wildcards = Wildcards(fromdict={"seed": "2", "root": "results/base", "arm": "bc"})
    assert graph.KINDS["rl"].job_of(wildcards) == ("rl", "bc", "2")
    shard = Wildcards(fromdict={"shard": "1", "round": "3", "root": "results/base"})
    assert graph.KINDS["dagger_shard"].job_of(shard) == ("dagger_shard", "3", "1")
    assert graph.KINDS["clone"].job_of(shard) == ("clone",)
