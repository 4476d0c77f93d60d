"""The workflow's plan (demo2rl.workflow.plan), built from a config as rules/common.smk builds
it: its variants resolved, the jobs they share, the paths the rules read and write, and what
an invocation builds. Fast: no Snakemake run."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO

from demo2rl import arms, config
from demo2rl.workflow.plan import Plan, PlanError

TEST = config.load(REPO / "config" / "test.yaml")


@pytest.fixture(scope="module")
def plan() -> Plan:
    return Plan(copy.deepcopy(TEST))


def test_the_variants_are_resolved_without_touching_the_config_given(plan):
    given = copy.deepcopy(TEST)
    Plan(given)
    assert given == TEST  # Snakemake's config is the caller's to rewrite
    assert list(plan.variants) == ["base", "warmup-2048"]
    base, warm = plan.variants.values()
    # `all` resolved by the probe: every arm applies to the racing task's Box actions
    assert TEST["rl"]["inits"] == "all" and base.inits == list(arms.BUILTIN)
    assert base.config["rl"]["vec_env"] == "native" and base.config["rl"]["device"] == "cpu"
    assert warm.config["rl"]["warm_start"]["critic_warmup_steps"] == 2048
    assert plan.arms == sorted(arms.BUILTIN)
    assert plan.config()["variants"] == TEST["variants"]
    assert list(plan.config()) == sorted(plan.config())  # params compare as text


def test_a_variant_writes_only_its_own_jobs_and_reads_the_rest_from_the_base(plan):
    base, warm = plan.variants.values()
    root = "results/test-racing"
    assert (base.root, warm.root) == (root, f"{root}/variants/warmup-2048")
    assert plan.output(warm, ("demos",)) == f"{root}/demos/demos.h5"
    assert plan.output(warm, ("clone",)) == f"{root}/bc/policy.pt"
    assert plan.output(warm, ("rl", "bc", "0")) == f"{warm.root}/rl/bc/seed-0/policy.pt"
    assert plan.output(warm, ("rl", "scratch", "0")) == f"{root}/rl/scratch/seed-0/policy.pt"
    assert plan.inputs(warm, ("evaluation", "rl-bc-seed0")) == {
        "checkpoint": f"{warm.root}/rl/bc/seed-0/policy.pt",
        "demos": f"{root}/demos/demos.h5",
    }
    assert plan.inputs(warm, ("rl", "residual", "0")) == {
        "demos": f"{root}/demos/demos.h5",
        "bc": f"{root}/bc/policy.pt",
    }
    assert plan.at(warm.root) is warm


def test_the_final_targets_are_every_variants_results_and_their_comparison(plan):
    targets = plan.final_targets()
    # shared with the base: the dataset, the clone and its loss plot, the 5 runs of other arms
    assert len(targets) == len(set(targets)) + 8
    base, warm = plan.variants.values()
    assert f"{warm.root}/report/summary.md" in targets
    assert f"{base.root}/report/plots/best_lap.gif" in targets  # the racing task's figures
    assert f"{plan.results}/report/variants.md" in targets
    single = Plan(copy.deepcopy(TEST) | {"variants": {}})
    assert not any("variants" in t for t in single.final_targets())


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ({"big": {"rl": {"n_envs": "many"}}}, "variant 'big'"),
        ({"v": {"rl": {"nope": 1}}}, "variants.v.rl.nope"),
        (
            {"bad-expert": {"task": {"expert": {"kwargs": {"no_such_argument": 1}}}}},
            "variant 'bad-expert': config key 'task.expert.kwargs.no_such_argument'",
        ),
    ],
)
def test_a_variant_the_workflow_cannot_run_is_named(variants, message):
    with pytest.raises(PlanError, match=message.replace(".", r"\.")):
        Plan(copy.deepcopy(TEST) | {"variants": variants})


def test_the_plan_reads_the_schema_it_is_given(tmp_path):
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    path = tmp_path / "schema.yaml"
    path.write_text(yaml.safe_dump(schema))
    assert (
        Plan(copy.deepcopy(TEST), path).final_targets() == Plan(copy.deepcopy(TEST)).final_targets()
    )
