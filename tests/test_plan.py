"""The workflow's plan (demo2rl.workflow.plan), built from a config as rules/common.smk builds
it: its variants resolved, the jobs they share, the paths the rules read and write, and what
an invocation builds. Fast: no Snakemake run."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import inspect
import re

import pytest
import yaml
from conftest import REPO
from snakemake.iocontainers import (
    InputFiles,
    Log,
    OutputFiles,
    Params,
    ResourceList,
    Snakemake,
    Wildcards,
)

from demo2rl import arms, config, spec_fields
from demo2rl.specs import registry
from demo2rl.workflow import graph, runner
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
    assert TEST["rl"]["arms"] == "all" and base.arms == list(arms.BUILTIN)
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


def test_only_a_replayed_task_has_the_replay_figures():
    """The racing task's report replays held-out episodes (demo2rl.envs.capabilities); another
    task's has the summary's figures alone."""
    cartpole = Plan(config.load(REPO / "config" / "cartpole.yaml")).final_targets()
    assert any(t.endswith("/report/plots/learning_curves.png") for t in cartpole), cartpole
    assert not any(t.endswith(("best_lap.gif", "track_lines.png")) for t in cartpole), cartpole


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


def test_the_plan_checks_variants_against_the_schema_it_is_given(tmp_path):
    """A variant is validated by the schema the Plan is given: with a copy where rl.n_envs has
    a maximum of 100, a variant of 128 envs that the repository's schema accepts is refused."""
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    schema["properties"]["rl"]["properties"]["n_envs"]["maximum"] = 100
    capped = tmp_path / "schema.yaml"
    capped.write_text(yaml.safe_dump(schema))
    many_envs = {"variants": {"v": {"rl": {"n_envs": 128}}}}
    assert "v" in Plan(copy.deepcopy(TEST) | many_envs).variants
    with pytest.raises(PlanError, match="(?s)variant 'v': .*greater than the maximum of 100"):
        Plan(copy.deepcopy(TEST) | many_envs, capped)


def _rule_values(plan, rule, wildcards):
    """A job's params and resources as Snakemake computes them from the Plan's input
    functions."""
    wc = Wildcards(fromdict=wildcards)
    params = {k: f(wc) if callable(f) else f for k, f in plan.params(rule).items()}
    resources = {k: f(wc) for k, f in plan.resources(rule).items()}
    return params, resources


@pytest.mark.parametrize("rule", sorted(registry.SPECS))
def test_a_heavy_rules_stage_is_the_function_of_its_name_in_the_module_of_its_name(rule):
    """What scripts/run_stage.py runs for the rule, and where its code fingerprint starts."""
    stage = runner.stage(rule)
    assert stage.__name__ == rule
    assert stage.__module__ == registry.stage_module(rule) == f"demo2rl.stages.{rule}"
    assert list(inspect.signature(stage).parameters)[:2] == ["job", "run"]


def rule_block(rule: str) -> str:
    """The text of ``rule``'s block in rules/*.smk."""
    text = "\n".join(p.read_text() for p in sorted((REPO / "rules").glob("*.smk")))
    found = re.search(rf"^rule {rule}:\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    assert found, f"no rule {rule} in rules/*.smk"
    return found.group(1)


def named_files(rule: str, section: str) -> list[str]:
    """The names of ``rule``'s ``input:`` or ``output:`` entries; an unnamed one fails."""
    found = re.search(rf"^    {section}:\n((?:        .*\n|\n)*)", rule_block(rule), re.M)
    entries = re.findall(r"^        ([^\s)].*)$", found.group(1) if found else "", re.M)
    names = [re.match(r"(\w+)=", e) for e in entries]
    assert all(names), f"rule {rule}: unnamed {section} entries {entries}"
    return [n.group(1) for n in names]


@pytest.mark.parametrize("rule", sorted(registry.PLOTS))
def test_a_plots_stage_takes_exactly_its_rules_named_files(rule):
    """The runner hands a plot's stage its rule's named input and output files (runner.draw):
    the stage's keyword parameters, ``run`` aside, are those names, none twice."""
    files = named_files(rule, "input") + named_files(rule, "output")
    params = set(inspect.signature(runner.stage(rule)).parameters) - {"run"}
    assert sorted(files) == sorted(params)
    assert '"../scripts/run_stage.py"' in rule_block(rule)


@pytest.mark.parametrize("rule", sorted(registry.SPECS))
def test_a_rule_that_reads_the_job_graph_computes_the_kind_it_names(rule):
    """``job_inputs("<kind>")`` in a rule names a kind that the rule computes."""
    for kind in re.findall(r'job_inputs\("(\w+)"\)', rule_block(rule)):
        assert rule in graph.KINDS[kind].rules, f"rule {rule} reads the inputs of {kind}"


def test_a_rule_that_runs_no_stage_has_none_and_the_error_names_those_that_do():
    assert runner.stage("plot_bc").__module__ == "demo2rl.stages.plot_bc"
    with pytest.raises(KeyError, match="'export' runs no stage .*plot_bc.*train_rl"):
        runner.stage("export")


@pytest.mark.parametrize("rule", sorted(registry.SPECS))
def test_a_heavy_rules_params_are_its_specs_result_fields_and_its_resources_the_speed_ones(
    plan, rule
):
    spec = registry.SPECS[rule]
    by_role: dict[str, set[str]] = {"result": set(), "speed": set(), "path": set()}
    for field in dataclasses.fields(spec):
        by_role[spec_fields.role(field)].add(field.name)
        where = spec_fields.source(field)
        # a result field is a param (or a wildcard); a speed field never is
        allowed = {
            "result": {"params", "wildcards"},
            "speed": {"resources", "threads"},
            "path": {"input", "output", "params"},
        }[spec_fields.role(field)]
        assert where in allowed, f"{spec.__name__}.{field.name}: {spec_fields.role(field)} {where}"
    params, resources = set(plan.params(rule)), set(plan.resources(rule))
    assert resources <= by_role["speed"] and not (params & by_role["speed"])
    assert (
        by_role["result"]
        - {f.name for f in dataclasses.fields(spec) if spec_fields.source(f) == "wildcards"}
        <= params
    )
    assert "code" in params  # editing the code the rule runs reruns it
    # the rule, its stage module and its spec's module share a name; the runner reads these
    assert spec.__module__ == f"demo2rl.specs.{rule}"
    assert importlib.util.find_spec(f"demo2rl.stages.{rule}") is not None
    assert isinstance(spec.STAGE, str) and isinstance(spec.TASK_CODE, bool)
    assert callable(spec.run_name)


def test_a_spec_built_from_a_jobs_snakemake_values_is_what_the_plan_says(plan):
    warm = plan.variants["warmup-2048"]
    wildcards = {"root": warm.root, "arm": "bc", "seed": "1"}
    params, resources = _rule_values(plan, "train_rl", wildcards)
    run_dir = plan.output(warm, ("rl", "bc", "1")).rpartition("/")[0]
    smk = Snakemake(
        InputFiles(fromdict=plan.inputs(warm, ("rl", "bc", "1"))),
        OutputFiles(
            fromdict={
                "policy": f"{run_dir}/policy.pt",
                "progress": f"{run_dir}/progress.csv",
                "evaluations": f"{run_dir}/evaluations.csv",
            }
        ),
        Params(fromdict=params),
        Wildcards(fromdict=wildcards),
        1,
        ResourceList(fromdict=resources),
        Log(),
        {},
        "train_rl",
        None,
    )
    job = spec_fields.build(registry.SPECS["train_rl"], smk)
    assert (job.arm, job.run_seed, job.seed) == ("bc", 1, TEST["seed"])
    assert params["rl"] == arms.get("bc").rl_slice(warm.config["rl"])
    assert job.rl == config.RLConfig.of(params["rl"])
    assert params["rl"]["warm_start"]["critic_warmup_steps"] == 2048  # the variant's
    assert job.clone == plan.output(warm, ("clone",)) and job.state_dir == f"{run_dir}/state"
    # the time limit reaches the task as seconds, from the resource; it is not a param
    assert job.task.timeout_s == TEST["task"]["timeout_s"] and "timeout_s" not in params["task"]
    assert (
        job.checkpoint_every == TEST["rl"]["checkpoint_every"]
        and "checkpoint_every" not in (params["rl"])
    )
    assert job.policy_out == f"{run_dir}/policy.pt"


@pytest.mark.parametrize(("gpus", "device"), [(None, "cpu"), (0, "cpu"), (1, "cuda")])
def test_auto_devices_are_decided_once_by_the_gpus_the_invocation_declares(
    gpus, device, monkeypatch, tmp_path
):
    monkeypatch.setattr(config, "NVIDIA_GPUS", tmp_path / "none")  # a login node without GPUs
    cfg = config.load(REPO / "config" / "test-pixels.yaml")
    base = Plan(cfg, gpus=gpus).base
    assert base.config["bc"]["device"] == base.config["rl"]["device"] == device
    assert base.gpus("bc") == base.gpus("rl") == (device == "cuda")


def test_a_field_gets_what_it_declares_it_reads(plan):
    """One key: its value (a section less what it omits); several: each by its last part, in
    the config's (sorted) order, a key read by some jobs only where the job's wildcards select
    it; an arm's slice of rl; a derived value, called with the job's wildcards where it is a
    method. A declaration the Plan could not read is refused where it is written, naming it."""

    @dataclasses.dataclass(frozen=True)
    class Toy:
        one: int = spec_fields.result("evaluate.episodes")
        section: dict = spec_fields.result("task", omit=("timeout_s", "expert"))
        two: dict = spec_fields.result("collect.n_episodes", "collect.n_shards")
        arm: dict = spec_fields.result("rl", per_arm=True)
        selected: dict = spec_fields.result("task.frame_stack", "task.expert[policy=expert]")
        derived: str = spec_fields.path(derive="state_dir", source="params")

    base = plan.base
    wc = Wildcards(fromdict={"root": base.root, "arm": "bc", "seed": "0", "policy": "expert"})
    got = {f.name: plan.value(f, base, wc) for f in dataclasses.fields(Toy)}
    task = base.config["task"]
    assert got["one"] == base.config["evaluate"]["episodes"]
    assert got["section"] == {k: v for k, v in task.items() if k not in ("timeout_s", "expert")}
    assert got["two"] == {k: base.config["collect"][k] for k in ("n_episodes", "n_shards")}
    assert got["arm"] == arms.get("bc").rl_slice(base.config["rl"])
    assert list(got["selected"]) == ["expert", "frame_stack"]  # (sorted, as the config's)
    assert got["selected"]["expert"] == task["expert"]
    bc = Wildcards(fromdict={"root": base.root, "policy": "bc"})
    selected = dataclasses.fields(Toy)[4]
    assert plan.value(selected, base, bc) == {"frame_stack": task["frame_stack"]}
    assert got["derived"] == f"{base.root}/rl/bc/seed-0/state"
    for wrong, message in [
        ({"keys": ("task.expert[policy=expert",)}, "bad config key 'task.expert[policy=expert'"),
        ({"per_arm": True, "keys": ("rl.ppo",)}, "per_arm reads the rl section"),
        ({"omit": ("dagger",), "keys": ("bc", "policy")}, "omit leaves keys out of one"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            spec_fields.Reads(**wrong)
