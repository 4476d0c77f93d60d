"""Bad config fails before any job runs, with a message naming the key (real `snakemake` runs)."""

from __future__ import annotations

import copy
import dataclasses
import re
import typing
from pathlib import Path

import configs
import numpy as np
import pytest
import yaml
from conftest import REPO, TEST_CONFIG, snakemake

from demo2rl import arms, config, tasks
from demo2rl.learning import policy
from demo2rl.rl import recipe as rl_recipe

BASE = yaml.safe_load(TEST_CONFIG.read_text())


def with_change(path: str, value) -> dict:
    config = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[last] = value
    return config


CASES = {
    "unknown key": (with_change("collect.n_epsiodes", 5), ["'n_epsiodes' was unexpected"]),
    "wrong type": (
        with_change("collect.n_episodes", "ten"),
        ["'ten' is not of type 'integer'", "n_episodes"],
    ),
    "zero count": (with_change("collect.n_shards", 0), ["less than the minimum of 1", "n_shards"]),
    "negative count": (with_change("collect.n_envs", -2), ["minimum of 1", "n_envs"]),
    "more shards than episodes": (with_change("collect.n_shards", 99), ["'collect.n_shards'"]),
    "unknown env id": (
        with_change("task.env_id", "NoSuchTask-v3"),
        ["'task.env_id'", "NoSuchTask"],
    ),
    "expert does not import": (
        with_change("task.expert.entry_point", "nowhere.at_all:expert"),
        ["'task.expert.entry_point'", "cannot import 'nowhere.at_all'"],
    ),
}


@pytest.mark.integration  # a real Snakemake invocation
@pytest.mark.parametrize("case", CASES)
def test_bad_config_is_rejected_naming_the_key(case, tmp_path: Path):
    """A real invocation (a dry run never writes results/, so it could not show this): it fails
    while the Snakefile is read, before the start hook (the MLflow store) and any job (their
    logs and outputs): no results/ at all."""
    config, expected = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "--cores", "1", "--configfile", str(path), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    for text in expected:
        assert text in output, output
    assert not (tmp_path / "results").exists(), f"something ran on a bad config:\n{output}"


def planned_jobs(output: str) -> dict[str, int]:
    """The job counts of a dry run's "Job stats" table."""
    table = output.split("Job stats:", 1)[1].split("total", 1)[0]
    rows = [line.split() for line in table.splitlines()[3:] if line.strip()]
    return {name: int(count) for name, count in rows}


@pytest.mark.integration  # a real Snakemake invocation
def test_schema_fills_defaults(tmp_path: Path):
    """A config of one section plans what the schema's defaults say: each default seed of
    rl.seeds runs each arm of rl.arms' default (scratch PPO, rlpd and sac), and the expert, the
    clone and every RL run are evaluated."""
    minimal = {"experiment": "defaults", "collect": {"n_episodes": 4, "n_shards": 2}}
    path = tmp_path / "minimal.yaml"
    path.write_text(yaml.safe_dump(minimal))
    proc = snakemake(tmp_path, "-n", "--configfile", str(path))
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    rl = schema["properties"]["rl"]["properties"]
    assert rl["arms"]["default"] == ["scratch", "rlpd", "sac"]
    runs = len(rl["seeds"]["default"]) * 3
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert (jobs["collect_shard"], jobs["train_rl"], jobs["evaluate"]) == (2, runs, runs + 2), jobs


# --------------------------------------------------------------------------------------------
# one source of defaults, typed sections


def schema_leaves(node: dict, prefix: str = "") -> dict[str, dict]:
    """Every leaf key of the schema (dotted path -> its schema entry)."""
    leaves = {}
    for key, entry in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        if entry.get("type") == "object" and "properties" in entry:
            leaves |= schema_leaves(entry, f"{path}.")
        else:
            leaves[path] = entry
    return leaves


def value_at(config: dict, path: str):
    for key in path.split("."):
        config = config[key]
    return config


def test_config_yaml_repeats_the_schema_defaults_exactly():
    """config/config.yaml documents every key with the schema's default, and nothing else."""
    schema = yaml.safe_load(config.SCHEMA.read_text())
    documented = yaml.safe_load((config.SCHEMA.parent / "config.yaml").read_text())
    leaves = schema_leaves(schema)
    assert all("default" in entry for entry in leaves.values()), "a leaf without a default"
    for path, entry in leaves.items():
        assert value_at(documented, path) == entry["default"], path
    assert config.load(documented) == config.load(None), "config.yaml sets a non-default value"


def test_typed_sections_hold_every_key_a_job_reads():
    """Each schema key of a typed section is a dataclass field (or one the rules alone read),
    and each field is a schema key: adding a key to one and not the other fails here."""
    schema = yaml.safe_load(config.SCHEMA.read_text())
    leaves = set(schema_leaves(schema))

    def fields(section: type[config.Section], prefix: str) -> set[str]:
        out = set()
        for field in dataclasses.fields(section):
            kind, _ = config._unwrap(typing.get_type_hints(section)[field.name])
            if isinstance(kind, type) and issubclass(kind, config.Section):
                out |= fields(kind, f"{prefix}{field.name}.")
            else:
                out.add(f"{prefix}{field.name}")
        return out

    for name, section in config.SECTIONS.items():
        in_schema = {p for p in leaves if p.startswith(f"{name}.")} - set(config.RULE_ONLY_KEYS)
        assert fields(section, f"{name}.") == in_schema, name


def test_a_sac_run_counts_its_envs_evaluations_and_budget_from_rl_sac():
    """rl.total_timesteps, rl.n_envs and rl.eval_every are the PPO arms'; a SAC arm's run reads
    its own from rl.sac (config.OFF_POLICY_OWN), and its vector env has that many envs."""
    cfg = config.load(None)
    cfg["rl"] |= {"total_timesteps": 3000, "n_envs": 3, "eval_every": 300}
    cfg["rl"]["sac"] |= {"total_timesteps": 2000, "n_envs": 8, "eval_every": 200}
    for arm, own in (("scratch", cfg["rl"]), ("rlpd", cfg["rl"]["sac"])):
        rl = config.RLConfig.of(arms.get(arm).rl_slice(cfg["rl"]))
        got = (rl.budget, rl.envs, rl.evaluate_every)
        assert got == (own["total_timesteps"], own["n_envs"], own["eval_every"]), arm
        assert (rl.n_envs is None) == arms.get(arm).off_policy
    obs_space, act_space = tasks.spaces(cfg["task"]["env_id"], {})
    stats = {"obs_mean": np.zeros(obs_space.shape), "obs_std": np.ones(obs_space.shape)}
    env = rl_recipe.make_training_env(
        configs.task(cfg["task"]["env_id"]),
        dataclasses.replace(rl, vec_env="native"),
        policy.obs_transform(obs_space, stats, 10.0),
        act_space,
        n_workers=1,
    )
    try:
        assert env.num_envs == 8
    finally:
        env.close()


def test_sections_are_frozen_and_typed():
    cfg = config.load(TEST_CONFIG)
    rl = config.RLConfig.of(arms.get("kickstart").rl_slice(cfg["rl"]))
    assert rl.kickstart == config.KickstartConfig(coef=1.0, decay=0.25)
    assert rl.warm_start is None and rl.residual is None  # other arms' sections: not given
    assert rl.ppo.n_steps == cfg["rl"]["ppo"]["n_steps"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rl.n_envs = 3  # type: ignore[misc]
    policy = config.PolicyConfig.of({**cfg["policy"], "net_arch": [32, 16]})
    assert policy.net_arch == {"pi": [32, 16], "vf": [32, 16]}
    assert isinstance(config.BCConfig.of({**cfg["bc"], "learning_rate": 1}).learning_rate, float)
    collect = config.CollectConfig.of(cfg["collect"])
    assert collect.pick("n_episodes", "n_shards") == {  # a rule's param: the config's own names
        "n_episodes": cfg["collect"]["n_episodes"],
        "n_shards": cfg["collect"]["n_shards"],
    }


def typo(section: str, path: str) -> dict:
    """The test config's ``section`` as a job gets it, with the key at ``path`` misspelt."""
    cfg = config.load(TEST_CONFIG)
    given = arms.get("bc").rl_slice(cfg["rl"]) if section == "rl" else cfg[section]
    *parents, last = path.split(".")
    node = given
    for key in parents:
        node = node[key]
    node[last[:-1]] = node.pop(last)
    return given


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ("bc", "learning_rate"),
        ("rl", "ppo.n_steps"),
        ("policy", "ortho_init"),
        ("collect", "n_shards"),
        ("evaluate", "during_training"),
    ],
)
def test_a_key_a_section_does_not_know_is_named(section, path):
    with pytest.raises(config.ConfigError) as err:
        config.SECTIONS[section].of(typo(section, path))
    assert err.value.key == f"{section}.{path[:-1]}"


def test_a_missing_key_is_named():
    cfg = config.load(TEST_CONFIG)
    with pytest.raises(config.ConfigError, match="'bc.patience': missing"):
        config.BCConfig.of({k: v for k, v in cfg["bc"].items() if k != "patience"})


def test_every_schema_leaf_has_a_description():
    """Each leaf key of config/schema.yaml (a property without ``properties``) says what it
    does: the schema is the reference for every key."""
    schema = yaml.safe_load(config.SCHEMA.read_text())
    missing = []
    todo = [("", schema)]
    while todo:
        prefix, node = todo.pop()
        for key, entry in node.get("properties", {}).items():
            if "properties" in entry:
                todo.append((f"{prefix}{key}.", entry))
            elif not str(entry.get("description") or "").strip():
                missing.append(f"{prefix}{key}")
    assert not missing, f"schema keys without a description in {config.SCHEMA}: {sorted(missing)}"


def test_rl_device_auto_is_cuda_only_for_a_cnn_on_a_machine_with_an_nvidia_gpu(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(config, "NVIDIA_GPUS", tmp_path / "none")
    assert config.device("auto", images=True) == "cpu"
    # a cluster's login node has no GPU, but the invocation declares the jobs' (--resources)
    assert config.device("auto", images=True, gpus=2) == "cuda"
    monkeypatch.setattr(config, "NVIDIA_GPUS", tmp_path)  # a directory: the driver lists GPUs
    assert config.device("auto", images=True) == "cuda"
    assert config.device("auto", images=True, gpus=0) == "cpu"  # declared: none for the jobs
    assert config.device("auto", images=False) == "cpu"  # MLPs: fastest on the CPU
    assert config.device("cuda:1", images=False) == "cuda:1"  # spelled out: as it is


# --------------------------------------------------------------------------------------------
# experiment names: a directory under results/ and an MLflow experiment, so one rule for both

BAD_NAMES = {
    "parent directory": "../x",
    "path separator": "a/b",
    "final newline": "racing\n",
    "leading dot": ".hidden",
    "non-ASCII letter": "rennstrecke-ü",
}


@pytest.mark.parametrize("case", BAD_NAMES)
def test_an_experiment_name_that_is_no_plain_directory_name_is_refused(case, tmp_path: Path):
    """The schema (what the Snakefile's validate runs) refuses it naming the key and the rule;
    the library's tracking start refuses it too, before any store or directory exists."""
    from demo2rl import tracking

    name = BAD_NAMES[case]
    with pytest.raises(Exception, match=r"schema\['properties'\]\['experiment'\]") as caught:
        config.load(BASE | {"experiment": name})
    message = str(caught.value)
    assert f"{name!r} does not match" in message and "Failed validating 'pattern'" in message
    assert "On instance['experiment']" in message
    settings = config.TrackingConfig(enabled=True, fail_on_error=False)
    with pytest.raises(config.ConfigError, match=r"config key 'experiment': .* does not match"):
        tracking.start_workflow(name, {"experiment": name}, settings, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_a_plain_experiment_name_is_accepted():
    assert config.load(BASE | {"experiment": "Racing_2.v-1"})["experiment"] == "Racing_2.v-1"
    assert config.load(BASE | {"experiment": "x" * 100})
    with pytest.raises(Exception, match="does not match"):
        config.load(BASE | {"experiment": "x" * 101})


@pytest.mark.integration
def test_a_workflow_with_a_bad_experiment_name_creates_nothing(tmp_path: Path):
    """A real (not dry) invocation: refused while the Snakefile is read, before the start hook
    (which creates the MLflow store and experiment) and before any job (results/<name>/)."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(BASE | {"experiment": "racing\n"}))
    proc = snakemake(tmp_path, "--cores", "1", "--configfile", str(path), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Failed validating 'pattern' in schema['properties']['experiment']" in output
    assert not (tmp_path / "results").exists(), output  # no results/racing\n/, no mlflow.db


@pytest.mark.parametrize(("ratio", "n_envs", "steps"), [(1, 16, 16), (0.25, 16, 4), (0.5, 2, 1)])
def test_sac_updates_per_step_is_whole_gradient_steps_per_vector_step(ratio, n_envs, steps):
    assert config.gradient_steps(ratio, n_envs) == steps


@pytest.mark.parametrize(("ratio", "n_envs"), [(0.3, 16), (0.25, 2)])
def test_a_sac_update_ratio_that_is_no_whole_number_of_gradient_steps_is_named(ratio, n_envs):
    """0.3 x 16 envs is 4.8 gradient steps per vector step, 0.25 x 2 is half of one: refused
    when the config is read, naming the key and both values."""
    cfg = config.load(None)
    cfg["rl"]["sac"] |= {"n_envs": n_envs, "updates_per_step": ratio}
    with pytest.raises(config.ConfigError, match=r"rl\.sac\.updates_per_step.*whole number") as err:
        config.check(cfg)
    assert f"{ratio} gradient steps per env step with rl.sac.n_envs {n_envs}" in str(err.value)


@pytest.mark.parametrize(
    ("old", "key"),
    [
        ({"rl": {"inits": ["bc", "scratch"]}}, "rl.inits"),
        ({"variants": {"two": {"rl": {"inits": ["scratch"]}}}}, "variants.two.rl.inits"),
        ({"version": 1, "rl": {"arms": ["scratch"]}}, "version"),
    ],
)
def test_a_config_of_the_older_format_is_refused_naming_the_key_to_rename(old, key):
    with pytest.raises(config.ConfigError, match=rf"'{re.escape(key)}'.*rl\.arms"):
        config.load(old)
    assert config.load({"rl": {"arms": ["scratch"]}})["version"] == config.VERSION


def test_spelt_twice_on_purpose_agree():
    """Two constants kept beside the code that reads them, each a copy of its source: the most
    DAgger rounds (the schema's maximum), and the Minari source prefix (planning a collected
    dataset must not import Minari)."""
    from demo2rl import names
    from demo2rl.demos import minari_io, sources

    schema = yaml.safe_load(config.SCHEMA.read_text())
    dagger = schema["properties"]["bc"]["properties"]["dagger"]["properties"]
    assert dagger["rounds"]["maximum"] == names.MAX_DAGGER_ROUNDS
    assert sources.MINARI_PREFIX == minari_io.PREFIX
