"""Config variants: how the `variants` section declares them, and which jobs each shares.

The unit tests call demo2rl.workflow.variants; the workflow tests run the real workflow on a copy of
the session's finished run of the test config (which declares one variant).
"""

from __future__ import annotations

import copy
import json
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, copy_run, snakemake
from mlflow.tracking import MlflowClient
from test_rerun_matrix import dry_run_jobs, reads
from test_reruns import assert_same, comparable

from demo2rl import arms, config, names
from demo2rl.config import ConfigError
from demo2rl.workflow import variants
from demo2rl.workflow.plan import Plan, readers

SCHEMA = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
LEAVES = variants.schema_leaves(SCHEMA)
BASE = config.load(REPO / "config" / "test.yaml")


def test_named_variants_are_sorted_and_grid_and_sample_follow():
    section = {
        "zeta": {"rl": {"n_envs": 4}},
        "alpha": {"bc": {"learning_rate": 0.01}},
        "grid": {"rl.ppo.learning_rate": [0.001, 0.003], "bc.learning_rate": [0.01]},
        "sample": {"n": 2, "seed": 3, "ranges": {"rl.n_envs": {"values": [4, 8, 16]}}},
    }
    got = variants.declared(section)
    assert list(got) == [
        "alpha",
        "zeta",
        "bc.learning_rate-0.01_ppo.learning_rate-0.001",
        "bc.learning_rate-0.01_ppo.learning_rate-0.003",
        "sample-0",
        "sample-1",
    ]
    assert got["bc.learning_rate-0.01_ppo.learning_rate-0.003"] == {
        "bc": {"learning_rate": 0.01},
        "rl": {"ppo": {"learning_rate": 0.003}},
    }
    assert all(got[f"sample-{i}"]["rl"]["n_envs"] in (4, 8, 16) for i in range(2))


def test_a_mapping_in_a_grid_names_its_variant_whatever_its_key_order():
    """A grid value that is a mapping names its variant with its keys sorted: the order a file
    writes them in renames nothing, and the comparison across variants (which reads the
    declaration as the jobs do, keys sorted) finds every variant's runs under its name."""

    def named(kwargs):
        return list(variants.declared({"grid": {"task.env_kwargs": [kwargs]}}))

    name = "env_kwargs-grip-8.0-max_speed-25.0"
    assert named({"max_speed": 25.0, "grip": 8.0}) == named({"grip": 8.0, "max_speed": 25.0})
    assert named({"max_speed": 25.0, "grip": 8.0}) == [name]
    grid = {"grid": {"task.env_kwargs": [{"max_speed": 25.0, "grip": 8.0}]}}
    plan = Plan(BASE | {"variants": grid})
    assert list(plan.variants) == list(plan.overrides) == [names.BASE_VARIANT, name]


def test_a_sample_is_the_same_for_the_same_seed_and_differs_for_another():
    ranges = {
        "rl.ppo.learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
        "rl.n_envs": {"low": 2, "high": 64},
        "bc.weight_decay": {"low": 0.0, "high": 0.1},
    }
    first = variants.sample({"n": 8, "seed": 0, "ranges": ranges})
    assert first == variants.sample({"n": 8, "seed": 0, "ranges": dict(reversed(ranges.items()))})
    assert first != variants.sample({"n": 8, "seed": 1, "ranges": ranges})
    for overrides in first.values():
        lr = overrides["rl"]["ppo"]["learning_rate"]
        assert 1e-4 <= lr <= 1e-2 and lr == float(f"{lr:.3g}")
        assert isinstance(overrides["rl"]["n_envs"], int) and 2 <= overrides["rl"]["n_envs"] <= 64
        assert 0.0 <= overrides["bc"]["weight_decay"] <= 0.1
    # log-uniform: about half the draws below the geometric middle (1e-3), not 1 in 10
    below = sum(o["rl"]["ppo"]["learning_rate"] < 1e-3 for o in first.values())
    assert 2 <= below <= 6


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"sample": {"n": 2, "ranges": {}}}, "variants.sample.ranges"),
        ({"sample": {"n": 1, "ranges": {"rl.n_envs": {"low": 8, "high": 8}}}}, "rl.n_envs"),
        ({"base": {"rl": {"n_envs": 4}}}, "variants.base"),
        ({"n_envs-4": {"rl": {"n_envs": 2}}, "grid": {"rl.n_envs": [4]}}, "variants.n_envs-4"),
    ],
)
def test_a_bad_declaration_is_named(section, key):
    with pytest.raises(ConfigError, match=key.replace("-", "-").replace(".", r"\.")):
        variants.declared(section)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"rl": {"ppo": {"learnin_rate": 0.1}}}, "variants.v.rl.ppo.learnin_rate"),
        ({"experiment": "other"}, "variants.v.experiment"),
        ({"seed": 3}, "variants.v.seed"),
        ({"tracking": {"enabled": False}}, "variants.v.tracking.enabled"),
        ({}, "variants.v"),
    ],
)
def test_an_override_of_no_key_or_of_the_invocation_is_named(overrides, key):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        variants.check_overrides("v", overrides, LEAVES)


def test_merge_is_deep_and_replaces_lists():
    merged = variants.merge(BASE, {"rl": {"ppo": {"learning_rate": 0.003}, "seeds": [5]}})
    assert merged["rl"]["ppo"]["learning_rate"] == 0.003
    assert merged["rl"]["ppo"]["n_steps"] == BASE["rl"]["ppo"]["n_steps"]
    assert merged["rl"]["seeds"] == [5]
    assert BASE["rl"]["seeds"] == [0]  # the base is left as it was


def sharing(**named: dict) -> variants.Sharing:
    """Which variant's job each job is, in a plan of the test config with the variants
    ``named`` (and no other)."""
    return Plan(BASE | {"variants": named}).sharing


def test_a_variant_of_rl_shares_the_demonstrations_and_the_clone():
    share = sharing(lr={"rl": {"ppo": {"learning_rate": 0.003}}})
    assert share.owner("lr", "demos") == "base"
    assert share.owner("lr", "clone") == "base"
    assert share.owner("lr", "rl", "scratch", "0") == "lr"
    assert share.owner("lr", "evaluation", "expert") == "base"
    assert share.owner("lr", "evaluation", "bc") == "base"
    assert share.owner("lr", "evaluation", "rl-bc-seed0") == "lr"


def test_an_arm_setting_owns_only_that_arms_runs_and_a_bc_setting_the_clone_and_its_users():
    share = sharing(
        warmup={"rl": {"warm_start": {"critic_warmup_steps": 512}}},
        bclr={"bc": {"learning_rate": 0.01}},
    )
    owners = {arm: share.owner("warmup", "rl", arm, "0") for arm in ("bc", "residual", "scratch")}
    assert owners == {"bc": "warmup", "residual": "base", "scratch": "base"}
    assert share.owner("bclr", "demos") == "base"
    assert share.owner("bclr", "clone") == "bclr"
    # the clone's users follow it; the control never reads it
    assert share.owner("bclr", "rl", "kickstart", "0") == "bclr"
    assert share.owner("bclr", "rl", "scratch", "0") == "base"


def leaf_keys(node: dict, prefix: str) -> set[str]:
    """The dotted keys of a nested config section's leaves."""
    return set().union(
        *(
            leaf_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
            for k, v in node.items()
        )
    )


@pytest.mark.parametrize("arm", [*arms.BUILTIN, "toy_sac"])
def test_a_run_is_declared_to_read_exactly_the_rl_keys_it_is_given(arm):
    """What a train_rl job is declared to read (its spec's ``rl`` field, per arm: the keys the
    arm record reads) is exactly the ``rl`` slice its params carry, for every arm and for one
    registered later (an off-policy toy arm without a section); the schema names no arm."""
    toy = arms.Arm("toy_sac", "toy", "tab:cyan", start=lambda s: None, algorithm="SAC")
    arms.REGISTRY[toy.name] = toy
    try:
        read = {k for k in reads("train_rl", arm=arm) if k.startswith("rl.")}
        given = leaf_keys(arms.get(arm).rl_slice(BASE["rl"]), "rl.")
    finally:
        del arms.REGISTRY[toy.name]
    assert read == given
    record = arms.get(arm) if arm != toy.name else toy
    sections = {k.split(".")[1] for k in given} & set(arms.ALGORITHMS.values())
    assert sections == {record.algorithm_section}  # its algorithm's hyperparameters only
    # an off-policy run's budget, env count and evaluation spacing are rl.sac's, not rl's
    for key in ("total_timesteps", "n_envs", "eval_every"):
        assert (f"rl.{key}" in given) == (not record.off_policy)
        assert (f"rl.sac.{key}" in given) == record.off_policy
    assert "arm=" not in (REPO / "config" / "schema.yaml").read_text()


def test_rlpd_follows_the_clone_only_with_a_clone_switch_on():
    """rlpd reads the clone only to start its actor or drive its warm-up: with both switches
    off (the defaults) a BC change leaves its runs shared; with one on they follow the clone."""
    bclr = {"bc": {"learning_rate": 0.01}}
    assert sharing(bclr=bclr).owner("bclr", "rl", "rlpd", "0") == "base"
    for switch in ("actor_from_clone", "clone_warmup"):
        on = {"rl": {"rlpd": {switch: True}}}
        share = sharing(on=on, both=variants.merge(on, bclr))
        assert share.owner("both", "rl", "rlpd", "0") == "both", switch
        assert share.owner("both", "rl", "sac", "0") == "base", switch


def test_a_variant_shares_with_the_first_earlier_variant_alike_and_speed_keys_share_all():
    share = sharing(
        a={"rl": {"total_timesteps": 8192}, "evaluate": {"confidence": 0.9}},
        b={"rl": {"total_timesteps": 8192}, "evaluate": {"confidence": 0.8}},
        fast={"rl": {"checkpoint_every": 7}, "collect": {"n_envs": 3}},
    )
    assert share.owner("b", "rl", "bc", "0") == "a"
    assert share.owner("b", "demos") == "base"
    assert {share.owner("fast", "rl", arm, "0") for arm in ("bc", "scratch")} == {"base"}
    changed = sharing(more={"collect": {"n_episodes": 16}})
    assert changed.owner("more", "demos") == "more"
    assert changed.owner("more", "rl", "scratch", "0") == "more"  # normalisation statistics


def test_only_the_comparison_across_variants_reads_the_variants_section():
    """The section's own keys shape the set of jobs; no job of a variant reads them, only the
    comparison across the variants (the overrides it labels each variant with)."""
    found = {k: {rule for rule, _ in v} for k, v in readers(LEAVES).items()}
    keys = [k for k in found if k.startswith("variants.")]
    assert keys and all(found[k] <= {"compare_variants"} for k in keys)
    assert any(found[k] for k in keys)


# --------------------------------------------------------------------------------------------
# the workflow: schema validation and the probe, per variant


def with_variants(tmp_path: Path, section: dict) -> Path:
    spec = copy.deepcopy(yaml.safe_load((REPO / "config" / "test.yaml").read_text()))
    spec["variants"] = section
    spec["tracking"] = {"enabled": False}
    path = tmp_path / "variants.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.integration  # a real Snakemake invocation
@pytest.mark.parametrize(
    ("section", "message"),
    [
        # the schema, on the merged config
        ({"big": {"rl": {"n_envs": "many"}}}, "variant 'big'"),
        ({"grid": {"rl.ppo.clip_range": [0.2, -1]}}, "variant 'clip_range--1'"),
        # the probe, on the variant's task
        (
            {"bad-expert": {"task": {"expert": {"kwargs": {"no_such_argument": 1}}}}},
            "variant 'bad-expert': config key 'task.expert.kwargs.no_such_argument'",
        ),
        ({"v": {"rl": {"nope": 1}}}, "variants.v.rl.nope"),
        ({"sample": {"n": 2}}, "variants.sample.ranges"),
        ({"bad name": {"rl": {"n_envs": 2}}}, "bad name"),
    ],
)
def test_every_variant_is_validated_and_probed_before_any_job(tmp_path, section, message):
    """A real invocation (a dry run never writes results/, so it could not show this): it fails
    while the Snakefile is read, before the start hook (the MLflow store) and any job."""
    config_path = with_variants(tmp_path, section)
    proc = snakemake(tmp_path, "--cores", "1", "--configfile", str(config_path), check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "results").exists(), "something ran on a bad variant"


# --------------------------------------------------------------------------------------------
# the workflow: one invocation of the test config runs its variant beside the base


TEST = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
VARIANT = next(iter(TEST["variants"]))
"""The test config's one variant."""
EXP = TEST["experiment"]
VARIANT_DIR = f"variants/{VARIANT}"


@pytest.mark.integration
def test_one_invocation_runs_the_variant_beside_the_base_sharing_collection_and_bc(
    test_workflow: Path,
):
    """The session's run: collection and BC once, the variant's own jobs (the warm-start arm's
    run, its evaluation, its report) in its own results, the rest shared; every job's MLflow run
    tagged with its variant; the comparison across variants written."""
    results = test_workflow / "results" / EXP
    store = MlflowClient(f"sqlite:///{test_workflow / 'results' / 'mlflow.db'}")
    experiment = store.get_experiment_by_name(EXP)
    runs = store.search_runs([experiment.experiment_id], max_results=1000)
    jobs = Counter(
        (r.data.tags["demo2rl.stage"], r.data.tags.get("demo2rl.variant"))
        for r in runs
        if r.data.tags.get("demo2rl.stage") not in ("workflow", "arm")
    )
    shards = TEST["collect"]["n_shards"]
    assert jobs[("collect", "base")] == shards and jobs[("merge", "base")] == 1
    assert jobs[("bc", "base")] == 1 and not any(s == "bc" and v != "base" for s, v in jobs)
    assert jobs[("rl", "base")] == len(arms.BUILTIN) and jobs[("rl", VARIANT)] == 1
    assert jobs[("summarize", VARIANT)] == 1 and jobs[("compare", None)] == 1
    own = results / VARIANT_DIR
    assert sorted(p.name for p in own.iterdir()) == ["benchmarks", "eval", "logs", "report", "rl"]
    assert [p.name for p in (own / "rl").iterdir()] == ["bc"]
    assert [p.name for p in (own / "eval").glob("[!.]*")] == ["rl-bc-seed0.json"]
    summary = json.loads((own / "report" / "summary.json").read_text())
    assert set(summary["groups"]) == {"expert", "bc", *(f"rl_{a}" for a in arms.BUILTIN)}
    report = json.loads((results / "report" / "variants.json").read_text())
    assert "variants.md" in {p.name for p in (results / "report").iterdir()}
    assert report and VARIANT in (results / "report" / "variants.md").read_text()


def changed_variant(value: int) -> dict:
    spec = copy.deepcopy(TEST)
    spec["variants"][VARIANT]["rl"]["warm_start"]["critic_warmup_steps"] = value
    spec["tracking"] = {"enabled": False}
    return spec


def stamps_of(results: Path, skip: tuple[str, ...]) -> dict[str, tuple[int, bytes]]:
    """Name -> (mtime, bytes) of every file under ``results`` but those under ``skip``."""
    return {
        str(p.relative_to(results)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in results.rglob("*")
        if p.is_file() and not str(p.relative_to(results)).startswith(skip)
    }


@pytest.mark.integration
@pytest.mark.slow
def test_changing_a_variant_reruns_only_its_jobs_as_a_fresh_run_would(
    test_workflow: Path, tmp_path: Path
):
    """One rerun: the variant's value changed on a copy of the session run. Only the variant's
    jobs and the comparison rerun; every other file keeps its bytes and modification time; the
    variant's results equal those of a fresh run of the changed variant (the same copy without
    the variant's results), bit for bit."""
    spec = changed_variant(3072)
    config_path = tmp_path / "changed.yaml"
    config_path.write_text(yaml.safe_dump(spec))
    rerun, fresh = (copy_run(test_workflow, tmp_path / name) for name in ("rerun", "fresh"))
    shutil.rmtree(fresh / "results" / EXP / "variants")
    comparison = (  # (with the MLflow lineage records beside them: untracked, a rerun drops them)
        "report/variants",
        "report/.variants",
        "report/plots/variants",
        "report/plots/.variants",
        "logs/compare_variants",
        "logs/plot_variants",
        "benchmarks/compare_variants",
    )
    results = rerun / "results" / EXP
    before = stamps_of(results, (*comparison, VARIANT_DIR))
    old_policy = torch.load(results / VARIANT_DIR / "rl/bc/seed-0/policy.pt", weights_only=True)
    # the variant's results and the comparison (its figures are the same code as the base's)
    targets = [
        f"results/{EXP}/{VARIANT_DIR}/report/summary.json",
        f"results/{EXP}/report/variants.json",
    ]
    with ThreadPoolExecutor(2) as pool:
        procs = list(
            pool.map(
                lambda workdir: snakemake(
                    workdir, *targets, "--cores", "1", "--configfile", str(config_path)
                ),
                (rerun, fresh),
            )
        )
    ran = {
        (job["rule"], job["wildcards"].get("root"))
        for job in dry_run_jobs(procs[0].stdout + procs[0].stderr).values()
    }
    own = f"results/{EXP}/{VARIANT_DIR}"
    # (every job upstream of the targets that the change touches: the shared ones are there)
    assert ran == {
        ("train_rl", own),
        ("evaluate", own),
        ("summarize", own),
        ("compare_variants", None),
    }, ran
    assert stamps_of(results, (*comparison, VARIANT_DIR)) == before
    new_policy = torch.load(results / VARIANT_DIR / "rl/bc/seed-0/policy.pt", weights_only=True)
    assert any(
        not torch.equal(new_policy["state_dict"][k], old_policy["state_dict"][k])
        for k in new_policy["state_dict"]
    ), "the changed warm-up changed nothing"
    for rel in (
        "rl/bc/seed-0/policy.pt",
        "rl/bc/seed-0/progress.csv",
        "rl/bc/seed-0/evaluations.csv",
        "eval/rl-bc-seed0.json",
        "report/summary.json",
    ):
        a, b = (w / "results" / EXP / VARIANT_DIR / rel for w in (rerun, fresh))
        assert_same(comparable(a), comparable(b), rel)
    # the comparison: the same figures, but the wall time of the runs
    tables = [
        [
            {k: v for k, v in row.items() if k != "wall_seconds"}
            for row in json.loads((w / "results" / EXP / "report/variants.json").read_text())[
                "rows"
            ]
        ]
        for w in (rerun, fresh)
    ]
    assert_same(*tables, "variants.json")
