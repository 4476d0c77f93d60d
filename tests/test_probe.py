"""The task probe rejects every task or expert the workflow cannot use before any job runs,
naming the config key and what it found; good tasks pass it."""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from conftest import REPO, TEST_CONFIG, snakemake

from demo2rl import config as config_lib
from demo2rl import tasks
from demo2rl.config import ConfigError
from demo2rl.envs import capabilities
from demo2rl.learning import vec_env_choice
from demo2rl.tasks import checks
from demo2rl.workflow import probe, variants
from demo2rl.workflow.plan import Plan

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # probe_tasks, a user's own (bad) task module
BASE = config_lib.load(TEST_CONFIG)  # with the schema's defaults, as the workflow gets it
BASE["rl"] |= {"arms": ["bc", "residual", "kickstart", "scratch"], "vec_env": "auto"}


def config_with(**task) -> dict:
    """The test config with the task's keys (env_id, env_kwargs, expert, expert_kwargs) set;
    an env other than Racing-v0 starts from an empty env_kwargs."""
    config = copy.deepcopy(BASE)
    if "env_id" in task:
        config["task"]["env_id"] = task["env_id"]
        config["task"]["env_kwargs"] = {}
    if "env_kwargs" in task:
        config["task"]["env_kwargs"] = task["env_kwargs"]
    if "expert" in task:
        config["task"]["expert"] |= {"entry_point": task["expert"], "kwargs": {}}
    if "expert_input" in task:
        config["task"]["expert"]["input"] = task["expert_input"]
    for key in ("frame_stack",):
        if key in task:
            config["task"][key] = task[key]
    if "cnn" in task:
        config["policy"]["cnn"] = task["cnn"]
    if "expert_kwargs" in task:
        config["task"]["expert"]["kwargs"] = task["expert_kwargs"]
    return config


CARTPOLE = {"env_id": "CartPole-v1", "expert": "demo2rl.experts.classic:cart_pole"}
PENDULUM = {"env_id": "Pendulum-v1", "expert": "demo2rl.experts.classic:pendulum"}
BAD = {
    "Dict observations": (
        config_with(env_id="probe_tasks:DictObs-v0", expert="probe_tasks:broken"),
        "task.env_id",
        ["observation space Dict(", "not supported", "FlattenObservation"],
    ),
    "MultiDiscrete actions": (
        config_with(env_id="probe_tasks:MultiDiscrete-v0", expert="probe_tasks:one_action"),
        "task.env_id",
        ["action space MultiDiscrete([3 3])", "not supported"],
    ),
    "typo in env_kwargs (checked against the env's signature)": (
        config_with(**CARTPOLE, env_kwargs={"sutton_barto_rewrd": True}),
        "task.env_kwargs.sutton_barto_rewrd",
        ["takes no argument 'sutton_barto_rewrd'", "sutton_barto_reward"],
    ),
    "typo in env_kwargs (an env taking **kwargs)": (
        config_with(env_kwargs={"max_stpes": 150}),
        "task.env_kwargs",
        ["making 'Racing-v0' failed", "max_stpes"],
    ),
    "typo in the expert's kwargs": (
        config_with(expert_kwargs={"margn": 0.6}),
        "task.expert.kwargs.margn",
        ["takes no argument 'margn'", "margin"],
    ),
    "expert ignores the batch": (
        config_with(expert="probe_tasks:one_action"),
        "task.expert.entry_point",
        ["shape (1,) for a batch of 2 observations", "expected (2, 2)"],
    ),
    "expert returns NaN": (
        config_with(expert="probe_tasks:nan_actions"),
        "task.expert.entry_point",
        ["shape (2, 1)"],  # Racing-v0 has 2 action dims: the shape check comes first
    ),
    "expert returns NaN, right shape": (
        config_with(env_id="Pendulum-v1", expert="probe_tasks:nan_actions"),
        "task.expert.entry_point",
        ["non-finite actions"],
    ),
    "expert outside the bounds": (
        config_with(env_id="Pendulum-v1", expert="probe_tasks:too_strong"),
        "task.expert.entry_point",
        ["action value 5.0 outside the action space's bounds [-2.0, 2.0]"],
    ),
    "float actions for a Discrete space": (
        config_with(env_id="CartPole-v1", expert="probe_tasks:float_indices"),
        "task.expert.entry_point",
        ["float64 actions for action space Discrete(2)", "integer"],
    ),
    "expert raises": (
        config_with(expert="probe_tasks:broken"),
        "task.expert.entry_point",
        ["the expert raised on a batch of 2 reset observations", "IndexError", "probe_tasks.py"],
    ),
    "an arm that is not registered": (
        config_with(**CARTPOLE) | {"rl": BASE["rl"] | {"arms": ["bc", "td3"]}},
        "rl.arms",
        ["unknown arm 'td3'", "known: bc, residual, kickstart, scratch, rlpd, sac"],
    ),
    "float images (their scale unknown)": (
        config_with(env_id="probe_tasks:FloatImage-v0", expert="probe_tasks:one_action"),
        "task.env_id",
        ["float32 frames of shape 32x32x3", "must be uint8 in [0, 255]", "FlattenObservation"],
    ),
    "float images, frames to stack (checked before stacking)": (
        config_with(
            env_id="probe_tasks:FloatImage-v0", expert="probe_tasks:one_action", frame_stack=2
        ),
        "task.env_id",
        ["float32 frames of shape 32x32x3", "must be uint8 in [0, 255]"],
    ),
    "an env whose constructor raises an error that carries a key of its own": (
        config_with(env_id="probe_tasks:KeyedFailure-v0", expert="probe_tasks:one_action"),
        "task.env_kwargs",
        ["making 'probe_tasks:KeyedFailure-v0' failed: KeyedError: no such node"],
    ),
    "frames stacked by the env": (
        config_with(env_id="probe_tasks:StackedFrames-v0", expert="probe_tasks:one_action"),
        "task.env_id",
        ["uint8 observations of shape 4x32x32x3", "task.frame_stack"],
    ),
    "uint8 frames with other bounds": (
        config_with(env_id="probe_tasks:ImageBounds-v0", expert="probe_tasks:one_action"),
        "task.env_id",
        ["bounds other than [0, 255]", "Box(0, 255, shape, np.uint8)"],
    ),
    "a channel axis SB3 cannot tell": (
        config_with(env_id="probe_tasks:MiddleChannel-v0", expert="probe_tasks:one_action"),
        "task.env_id",
        ["frames of shape 32x3x32", "channel axis must be the smallest"],
    ),
    "images mixed with vectors in a Dict": (
        config_with(env_id="probe_tasks:ImageAndVector-v0", expert="probe_tasks:one_action"),
        "task.env_id",
        ["key 'pixels' holds images", "beside other keys (speed)", "task.expert.input"],
    ),
    "frames too small for NatureCNN": (
        config_with(env_id="probe_tasks:SmallFrames-v0", expert="probe_tasks:one_action"),
        "policy.cnn",
        ["nature encoder needs frames of at least 36 pixels", "has 16", "policy.cnn: small"],
    ),
    "a privileged expert reading an info key the env lacks": (
        config_with(env_kwargs={"camera": 32}, expert_input="info.speeds", cnn="small"),
        "task.expert.input",
        ["reports no info['speeds'] at reset", "state"],
    ),
    "a privileged expert given the camera frames instead": (
        config_with(env_kwargs={"camera": 32}, cnn="small"),
        "task.expert.entry_point",
        ["the expert raised on a batch of 2 reset observations of shape (2, 32, 32, 1)"],
    ),
    "frame stacking with the task's own VecEnv": (
        config_with(frame_stack=2) | {"rl": BASE["rl"] | {"vec_env": "native"}},
        "rl.vec_env",
        ["'native' with task.frame_stack 2", "auto (picks dummy when stacking)"],
    ),
    "native vec env the task does not have": (
        config_with(**PENDULUM) | {"rl": BASE["rl"] | {"vec_env": "native"}},
        "rl.vec_env",
        ["'Pendulum-v1' registers no batched VecEnv of its own"],
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_the_probe_rejects_a_bad_task_naming_the_key(case):
    config, key, expected = BAD[case]
    start = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        probe.probe_task(config)
    print(f"{case}: rejected in {time.perf_counter() - start:.3f} s: {caught.value}")
    assert caught.value.key == key
    for text in expected:
        assert text in str(caught.value)


OVERLAYS = {"offpolicy-pixels.yaml": "pixels.yaml", "offpolicy-classic.yaml": "pendulum.yaml"}
"""The shipped configs that are layered over another (``--configfile base overlay``)."""


@pytest.mark.parametrize(
    "config",
    sorted(p.name for p in (REPO / "config").glob("*.yaml") if p.name != "schema.yaml"),
)
def test_the_shipped_tasks_pass_the_probe(config):
    """Every shipped config, an overlay layered over the config its header names."""
    raw = yaml.safe_load((REPO / "config" / config).read_text())
    if config in OVERLAYS:
        base = yaml.safe_load((REPO / "config" / OVERLAYS[config]).read_text())
        raw = variants.merge(base, raw)
    full = config_lib.load(raw)
    found = probe.probe_task(full)
    assert found.observation_space.shape
    assert found.images == ("pixels" in config)
    wanted = full["rl"]["arms"]
    if wanted == probe.ALL_ARMS:  # the PPO arms act in Box and Discrete spaces, SAC's in Box
        ppo = {"bc", "residual", "kickstart", "scratch"}
        assert set(found.arms) == (ppo if "cartpole" in config else ppo | {"rlpd", "sac"})
    else:
        assert found.arms == tuple(wanted)


def test_gymnasium_make_keywords_are_not_typos():
    config = config_with(**CARTPOLE, env_kwargs={"max_episode_steps": 50})
    config["rl"]["arms"] = ["bc", "scratch"]
    probe.probe_task(config)


@pytest.mark.parametrize("case", ["Dict observations", "typo in the expert's kwargs"])
@pytest.mark.integration  # a real Snakemake invocation
def test_the_workflow_stops_before_any_job(case, tmp_path: Path):
    """Through the real Snakefile: the error names the key, and nothing ran."""
    config, key, expected = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(
        tmp_path,
        "--cores",
        "1",
        "--configfile",
        str(path),
        env={"PYTHONPATH": str(TESTS)},
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert f"Invalid config: config key {key!r}" in output
    for text in expected:
        assert text in output
    assert not (tmp_path / "results").exists(), "nothing may run on a bad task"


def test_auto_picks_the_tasks_own_vec_env_else_dummy():
    assert vec_env_choice.resolve_vec_env("auto", "Racing-v0") == "native"
    assert vec_env_choice.resolve_vec_env("auto", "demo2rl.envs:Racing-v0") == "native"
    assert vec_env_choice.resolve_vec_env("auto", "CartPole-v1") == "dummy"
    assert vec_env_choice.resolve_vec_env("subproc", "Racing-v0") == "subproc"
    with pytest.raises(tasks.TaskError, match="rl.vec_env must be one of"):
        vec_env_choice.resolve_vec_env("threads", "Racing-v0")


def test_a_registered_vec_env_is_the_tasks_own(monkeypatch):
    monkeypatch.setattr(capabilities, "_REGISTERED", dict(capabilities._REGISTERED))
    capabilities.register("CartPole-v1", sb3_vec_env="somewhere:CartPoleVecEnv")
    assert vec_env_choice.resolve_vec_env("auto", "CartPole-v1") == "native"
    capabilities.register("probe_tasks:DictObs-v0", sb3_vec_env="probe_tasks:Nothing")
    assert vec_env_choice.native_vec_env("probe_tasks:DictObs-v0") == "probe_tasks:Nothing"
    # the RL runs' fingerprint covers a task's own VecEnv, where they step it
    config = config_with(**CARTPOLE) | {"rl": BASE["rl"] | {"vec_env": "native"}}
    config["rl"]["arms"] = ["scratch"]
    base = Plan(config_lib.load(config)).base
    assert base.vec_env_code == ("somewhere",)
    assert Plan.code_roots("train_rl", base)[-1] == "somewhere"
    assert "somewhere" not in Plan.code_roots("evaluate", base)


def test_rollouts_use_a_registered_vector_env_only_if_it_takes_an_autoreset_mode():
    """gymnasium's CartPoleVectorEnv resets on the next step only: the rollouts (which need
    autoreset disabled) use SyncVectorEnv for it, and Racing-v0's own vector env."""
    assert tasks.has_vector_env("Racing-v0")
    assert tasks.env_spec("CartPole-v1").vector_entry_point is not None
    assert not tasks.has_vector_env("CartPole-v1")
    assert not tasks.has_vector_env("Pendulum-v1")


def test_a_task_check_refuses_without_the_workflow_naming_the_key():
    """The checks are the task's, usable without a workflow config: each refusal is a TaskError
    that carries the config key the probe reports."""
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    checks.check_actions(np.array([[1.0, -1.0]]), space, batch=1)
    with pytest.raises(tasks.TaskError, match="outside the action space's bounds") as caught:
        checks.check_actions(np.array([[2.0, 0.0]]), space, batch=1)
    assert caught.value.key == "task.expert.entry_point"
    with pytest.raises(tasks.TaskError) as caught:
        checks.check_action_space(gym.spaces.MultiDiscrete([2, 2]), "X-v0")
    assert caught.value.key == "task.env_id"
