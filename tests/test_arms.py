"""The arm registry (one record per arm, everything derived from it), a toy arm registered from
this module and run through the trainer and the summary, the residual arm on Discrete actions,
and the train_rl job spec whose resume key is derived from its fields."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import configs
import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from conftest import REPO
from test_rl import POLICY_CFG, RL_CFG, dataset_and_clone, job

from demo2rl import arms, config, names, provenance, rl, tasks
from demo2rl.demos import dataset
from demo2rl.learning import acting, checkpoints, evaluation, policy
from demo2rl.report import groups, summary
from demo2rl.specs.train_rl import RLJob
from demo2rl.stages import train_rl as train_rl_stage
from demo2rl.workflow import probe

CARTPOLE = ("CartPole-v1", {})


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> tuple[Path, Path]:
    """A CartPole-v1 dataset (16 expert episodes) and a categorical clone trained on it."""
    return dataset_and_clone(
        tmp_path_factory.mktemp("arms"),
        *CARTPOLE,
        "demo2rl.experts.classic:cart_pole",
        16,
        batch_size=256,
        max_epochs=10,
        patience=3,
    )


# --------------------------------------------------------------------------------------------
# the registry is the one home of an arm


def test_the_schema_leaves_the_arms_to_the_registry():
    """Any arm name passes the schema (an arm is the registry's), and the probe names an unknown
    one; the schema's description names every built-in arm."""
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    entry = schema["properties"]["rl"]["properties"]["arms"]
    # the default (make run's): a demo arm beside its own control and beside scratch PPO; all:
    # every arm that applies
    default = [arms.get(name) for name in entry["default"]]
    assert any(arm.control for arm in default)
    assert all(arm.control in entry["default"] for arm in default if arm.control)
    assert arms.CONTROL in entry["default"]
    assert probe.ALL_ARMS in entry["description"]
    assert all(arm in entry["description"] for arm in arms.BUILTIN)
    cfg = config.load({"rl": {"arms": ["bc", "td3"]}})  # the schema lets it through
    with pytest.raises(config.ConfigError, match=r"'rl.arms': unknown arm 'td3' \(known: bc,"):
        probe.probe_task(cfg)
    with pytest.raises(Exception, match="is not valid"):
        config.load({"rl": {"arms": ["my-arm"]}})  # not a name an arm can have


def test_every_arm_section_is_a_field_of_the_rl_config_and_read_only_by_its_arm():
    fields = {f.name for f in dataclasses.fields(config.RLConfig)}
    for section, owner in arms.sections().items():
        assert section in fields, f"the {owner} arm's section rl.{section} is not in RLConfig"
        for arm in arms.names():
            given = arms.get(arm).rl_slice(configs.DEFAULTS["rl"])
            assert (section in given) == (arm == owner), (section, arm)


def test_arms_have_distinct_names_labels_colours_and_a_control():
    records = list(arms.REGISTRY.values())
    for attr in ("name", "label", "color"):
        values = [getattr(a, attr) for a in records]
        assert len(set(values)) == len(values), attr
    assert not arms.get(arms.CONTROL).needs_clone
    rl = configs.DEFAULTS["rl"]
    assert not rl["rlpd"]["actor_from_clone"] and not rl["rlpd"]["clone_warmup"]
    assert [a for a in arms.BUILTIN if arms.get(a).uses_clone(rl)] == [
        "bc",
        "residual",
        "kickstart",
    ]
    for switch in ("actor_from_clone", "clone_warmup"):
        assert arms.get("rlpd").uses_clone(rl | {"rlpd": rl["rlpd"] | {switch: True}})
    with pytest.raises(ValueError, match="clone switches .* but no section"):
        arms.Arm("x", "x", "red", start=lambda s: None, needs_clone=("on",))
    rounds = tuple(f"dagger{r}" for r in range(1, 21))
    assert groups.all_groups() == ("expert", "bc", *rounds, *(f"rl_{a}" for a in arms.BUILTIN))
    with pytest.raises(ValueError, match="unknown arm 'td3'"):
        arms.get("td3")
    with pytest.raises(ValueError, match="registered already"):
        arms.register(arms.Arm("bc", "again", "red", start=lambda s: None))
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        arms.Arm("my-arm", "x", "red", start=lambda s: None)


def test_names_are_built_and_parsed_in_one_place():
    run = names.RLRun("kickstart", 2)
    assert run.name == "rl-kickstart-seed2" and run.group == "rl_kickstart"
    assert run.dir("results/x") == "results/x/rl/kickstart/seed-2"
    assert names.RLRun.parse(run.name) == run
    assert names.RLRun.parse("bc") is None and names.RLRun.parse("rl-bc-seedX") is None
    assert names.policy_names(["bc", "scratch"], [0, 1]) == [
        "expert",
        "bc",
        "rl-bc-seed0",
        "rl-bc-seed1",
        "rl-scratch-seed0",
        "rl-scratch-seed1",
    ]
    import re

    pattern = re.compile(names.policy_pattern(["bc", "scratch"]))
    assert all(pattern.fullmatch(n) for n in names.policy_names(["bc", "scratch"], [0, 7]))
    assert not pattern.fullmatch("rl-residual-seed0")


# --------------------------------------------------------------------------------------------
# a toy arm, registered here: trainer, probe and summary take it without a library edit


STARTED: list[str] = []
"""The arms :func:`toy_start` built a model for."""


def toy_start(start: rl.Start) -> rl.GuidedPPO:
    """The toy arm: scratch's fresh policy, with a seed of its own."""
    STARTED.append(start.arm.name)
    return dataclasses.replace(start, seed=start.seed + 1).ppo()


@pytest.fixture
def toy_arm():
    STARTED.clear()
    arm = arms.register(
        arms.Arm(
            name="toy",
            label="toy arm",
            color="tab:cyan",
            start=toy_start,
            needs_clone=False,
            action_spaces=("Box",),
        )
    )
    yield arm
    del arms.REGISTRY[arm.name]


def test_a_toy_arm_runs_through_the_trainer_and_the_summary(toy_arm, cartpole, tmp_path):
    """Registered from this module only: it trains (its start function, no clone), is compared
    with the control and the clone in the summary, labelled and coloured from its record."""
    _, clone_path = cartpole
    toy_arm = dataclasses.replace(toy_arm, action_spaces=("Box", "Discrete"))
    arms.REGISTRY["toy"] = toy_arm
    cfg = RL_CFG | {"vec_env": "auto", "total_timesteps": 512, "eval_every": 512}
    records = []
    obs_space, act_space = tasks.spaces(*CARTPOLE)
    task = configs.task(*CARTPOLE)
    heldout = evaluation.heldout_seeds(0, 4)

    def record(name: str, actor) -> dict:
        result = evaluation.evaluate(task, actor, heldout, n_envs=4, final=True)
        return {"policy": name, "episodes": {k: list(v) for k, v in result.episodes.items()}}

    for arm in ("toy", "scratch"):
        spec = job(cartpole, tmp_path / arm, arm, cfg, task=CARTPOLE, eval_episodes=2)
        result = rl.train_rl(spec, key=train_rl_stage.run_key(spec, "demos", "clone"))
        assert result.timesteps == 512 and len(result.evaluations) >= 2
        actor = acting.make_actor(result.model.policy, result.normalizer, act_space)
        records.append(record(spec.run.name, actor))
    assert STARTED == ["toy"]  # its own start function built its model; scratch's is the library's
    clone, normalizer, _ = checkpoints.load_checkpoint(clone_path, obs_space, act_space)
    records.append(record("bc", acting.make_actor(clone, normalizer, act_space)))
    out = summary.summarize(records, reps=200, confidence=0.9, seed=0)
    assert list(out["groups"]) == ["bc", "rl_scratch", "rl_toy"]  # registered after scratch
    assert out["groups"]["rl_toy"]["label"] == "toy arm"
    assert "rl_toy_vs_rl_scratch" in out["probability_of_improvement"]
    assert "rl_toy_vs_bc" in out["probability_of_improvement"]
    assert "| toy arm |" in summary.markdown(out)
    assert groups.color("rl_toy") == "tab:cyan"


def test_all_leaves_out_an_arm_the_task_cannot_use_and_a_named_one_is_an_error(toy_arm, caplog):
    cfg = config.load(yaml.safe_load((REPO / "config" / "cartpole.yaml").read_text()))
    cfg["rl"]["arms"] = probe.ALL_ARMS
    with caplog.at_level(logging.WARNING, logger="demo2rl.workflow.probe"):
        found = probe.probe_task(cfg)
    # every built-in PPO arm applies to Discrete actions; the SAC arms do not (SAC's actor is a
    # squashed Gaussian), and all leaves them out saying so
    assert found.arms == tuple(a for a in arms.BUILTIN if not arms.get(a).off_policy)
    assert "leaves out the toy arm: it supports Box actions" in caplog.text
    for name in ("rlpd", "sac"):
        assert f"leaves out the {name} arm: it supports bounded Box actions" in caplog.text
    cfg["rl"]["arms"] = ["toy", "scratch"]
    with pytest.raises(config.ConfigError, match=r"'rl.arms': the toy arm supports Box"):
        probe.probe_task(cfg)
    cfg["rl"]["arms"] = ["sac", "scratch"]
    with pytest.raises(config.ConfigError, match=r"'rl.arms': the sac arm supports bounded Box"):
        probe.probe_task(cfg)
    cfg["rl"]["arms"] = ["td3"]
    with pytest.raises(config.ConfigError, match=r"unknown arm 'td3'"):
        probe.probe_task(cfg)


def test_an_unbounded_box_is_refused_to_the_off_policy_arms_saying_bounded_box(caplog):
    """SAC's squashed actions need a Box bounded on every side: the message says so (an
    unbounded Box is a Box, so "supports Box actions" would contradict itself)."""
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    half = gym.spaces.Box(np.float32([-1, -np.inf]), np.float32([1, 1]), dtype=np.float32)
    for space in (unbounded, half):
        for name in ("rlpd", "sac"):
            with pytest.raises(
                config.ConfigError,
                match=rf"the {name} arm supports bounded Box actions; 'Free-v0' has Box\(",
            ):
                probe.resolve_arms([name, "scratch"], space, "Free-v0")
    assert probe.resolve_arms(["bc", "scratch"], unbounded, "Free-v0") == ("bc", "scratch")
    with caplog.at_level(logging.WARNING, logger="demo2rl.workflow.probe"):
        chosen = probe.resolve_arms(probe.ALL_ARMS, unbounded, "Free-v0")
    assert "rlpd" not in chosen and "sac" not in chosen and "scratch" in chosen
    assert "leaves out the rlpd arm: it supports bounded Box actions" in caplog.text


# --------------------------------------------------------------------------------------------
# the residual arm on Discrete actions: the correction adds to the frozen clone's logits


def test_discrete_residual_starts_at_the_clone_and_trains_only_the_correction(cartpole, tmp_path):
    demos, clone_path = cartpole
    obs_space, act_space = tasks.spaces(*CARTPOLE)
    clone, normalizer, _ = checkpoints.load_checkpoint(clone_path, obs_space, act_space)
    raw = dataset.read(demos).steps["observations"]
    cfg = RL_CFG | {"vec_env": "auto", "total_timesteps": 1024, "eval_every": 1024}
    spec = job(cartpole, tmp_path / "state", "residual", cfg, task=CARTPOLE, eval_episodes=4)
    env = rl.make_training_env(spec.task, spec.rl, normalizer, act_space, n_workers=1)
    try:
        start = rl.Start(
            arms.get("residual"),
            env,
            POLICY_CFG,
            spec.rl,
            clone,
            lambda: None,
            lambda *_: None,
            3,
            "cpu",
        )
        model = rl.build_model(start)
    finally:
        env.close()
    assert isinstance(model.policy, policy.ResidualPolicy)
    states = torch.as_tensor(normalizer(raw))
    with torch.no_grad():
        want = clone.get_distribution(states).distribution.probs
        got = model.policy.get_distribution(states).distribution.probs
    assert torch.equal(got, want)  # the correction starts at zero: exactly the clone
    np.testing.assert_array_equal(
        acting.make_actor(model.policy, normalizer, act_space)(raw),
        acting.make_actor(clone, normalizer, act_space)(raw),
    )
    # trained: the base stays the clone's, the correction moves, and the run starts at the clone
    result = rl.train_rl(spec, key=train_rl_stage.run_key(spec, "demos", "clone"))
    trained = result.model.policy.state_dict()
    assert torch.equal(trained["base.0.weight"], clone.mlp_extractor.policy_net[0].weight)
    assert torch.equal(trained["base.4.bias"], clone.action_net.bias)
    assert not torch.equal(trained["action_net.weight"], model.policy.action_net.weight)
    clone_return = evaluation.evaluate(
        configs.task(*CARTPOLE),
        acting.make_actor(clone, normalizer, act_space),
        evaluation.heldout_seeds(0, 4),
        n_envs=4,
    ).means()["return_mean"]
    assert result.evaluations[0]["step"] == 0
    assert result.evaluations[0]["return_mean"] == clone_return


# --------------------------------------------------------------------------------------------
# the job spec: the resume key is derived from its fields


def test_the_resume_key_covers_every_result_field_and_no_path_or_speed_setting(cartpole, tmp_path):
    spec = job(cartpole, tmp_path / "state", "bc", RL_CFG)
    key = train_rl_stage.run_key(spec, "digest", "clone")
    # speed settings and paths (the clone's content is in the key, not its path) change nothing
    same = dataclasses.replace(
        spec, threads=4, eval_envs=2, checkpoint_every=7, state_dir="elsewhere", policy_out="p"
    )
    assert train_rl_stage.run_key(same, "digest", "clone") == key
    # every result field does, and names itself
    for name, value in {"run_seed": 9, "seed": 5, "clip_obs": 3.0, "eval_episodes": 1}.items():
        other = train_rl_stage.run_key(
            dataclasses.replace(spec, **{name: value}), "digest", "clone"
        )
        assert other["key"] != key["key"], name
        assert [p for p in key["parts"] if key["parts"][p] != other["parts"][p]] == ["job"]
    assert train_rl_stage.run_key(spec, "other digest", "clone")["key"] != key["key"]
    assert train_rl_stage.run_key(spec, "digest", "other clone")["key"] != key["key"]

    # a field added to the spec later is covered without a word in the key's code
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Extended(RLJob):
        new_knob: float = 1.0

    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    base = train_rl_stage.run_key(Extended(**fields), "digest", "clone")
    turned = train_rl_stage.run_key(Extended(**fields, new_knob=2.0), "digest", "clone")
    assert base["key"] != key["key"] and turned["key"] != base["key"]


def test_a_train_rl_job_resolves_the_task_spaces_once(cartpole, tmp_path, monkeypatch):
    calls = []
    original = tasks.spaces

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(tasks, "spaces", counted)
    cfg = RL_CFG | {"vec_env": "auto", "total_timesteps": 256, "eval_every": 256}
    for arm in ("scratch", "bc"):
        calls.clear()
        spec = job(cartpole, tmp_path / arm, arm, cfg, task=CARTPOLE, eval_episodes=2)
        rl.train_rl(spec, key=train_rl_stage.run_key(spec, "demos", "clone"))
        assert len(calls) == 1, arm


def test_an_arms_label_or_colour_is_no_code_a_training_rule_runs(tmp_path):
    """Editing how an arm is shown (label, colour) changes no code fingerprint (the rules that
    show it take it as a param instead); editing what it does (its start, needs_clone) does."""
    source = (REPO / "src" / "demo2rl" / "arms.py").read_text()
    assert 'color="tab:red",' in source and 'label="residual RL on BC",' in source

    def fingerprint(text: str) -> str:
        return provenance._parse(text, tmp_path / "arms.py", "demo2rl.arms").source

    base = fingerprint(source)
    shown = source.replace('color="tab:red",', 'color="tab:pink",')
    assert fingerprint(shown.replace('"residual RL on BC"', '"residual PPO"')) == base
    assert fingerprint(source.replace('start="residual"', 'start="scratch"')) != base
    assert fingerprint(source.replace("needs_clone=False", "needs_clone=True")) != base
