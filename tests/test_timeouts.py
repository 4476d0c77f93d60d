"""Hung user code fails, naming the call, instead of hanging: an env that hangs in a step or a
reset, an expert that never returns, in the rollouts (collection, BC's comparison, evaluation),
the RL vector envs (in process and in worker processes), the task probe, and one collection job
of the real workflow. An env without a time limit is capped at ``task.max_episode_steps``.

The hung calls sleep an hour (tests/probe_tasks.py); the limits here are a second, so a test that
fails to end a call hangs for an hour rather than passing."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import configs
import numpy as np
import pytest
import yaml
from conftest import BIN, TEST_CONFIG, snakemake_call, untracked

from demo2rl import config as config_lib
from demo2rl import seeds, spec_fields, tasks
from demo2rl.config import ConfigError
from demo2rl.demos import rollout
from demo2rl.learning import vec
from demo2rl.tasks import deadline
from demo2rl.workflow import probe

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # probe_tasks: the hanging tasks and experts
LIMIT = 1.0
"""task.timeout_s in these tests: long for the tiny tasks' real calls, short to wait for."""
HANGING = "probe_tasks:Hanging-v0"
ZERO = tasks.load_expert("user_tasks:zero_expert")
EPISODE_SEEDS = [101, 102, 103]


def run(env_kwargs: dict, policy=ZERO, max_episode_steps: int | None = None):
    """Three episodes of the hanging task, two at a time, under the limit (and episodes cut at
    ``max_episode_steps``)."""
    task = dataclasses.replace(
        configs.task(HANGING, env_kwargs), max_episode_steps=max_episode_steps, timeout_s=LIMIT
    )
    return rollout.run_episodes(task, policy, EPISODE_SEEDS, n_envs=2)


# --------------------------------------------------------------------------------------------
# the time limit itself


def test_a_limit_restores_the_previous_handler_and_timer():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)  # far longer than a stall of a loaded machine
        with deadline.limit(LIMIT, "a quick call"):
            pass
        assert signal.getsignal(signal.SIGALRM) is not None and not fired
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 5.0, "the outer timer is re-armed"
        give_up = time.monotonic() + 60  # a bound on a hang, not a speed
        while not fired and time.monotonic() < give_up:
            time.sleep(0.05)
        assert fired, "the outer timer fired, into its own handler"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------------------------
# rollouts: collection, BC's comparison and evaluation


def test_an_env_that_hangs_in_a_step_is_named_with_its_episodes():
    with pytest.raises(deadline.UserCodeTimeout) as caught:
        run({"hang_at_step": 3})
    message = str(caught.value)
    assert message == (
        f"the env {HANGING!r}: step did not return within task.timeout_s = 1 s (episodes "
        "0 (seed 101, after 2 steps), 1 (seed 102, after 2 steps))"
    )


def test_an_env_that_hangs_in_a_later_reset_names_the_episode_it_was_starting():
    # each env's second reset hangs: the first to come is that of episode 2 (slot 0)
    with pytest.raises(
        deadline.UserCodeTimeout,
        match=re.escape(
            f"the env {HANGING!r}: reset did not return within task.timeout_s = 1 s "
            "(episode 2 (seed 103, after 0 steps))"
        ),
    ):
        run({"hang_at_reset": 2, "length": 2})


def test_an_env_that_hangs_in_its_first_reset_is_named():
    with pytest.raises(deadline.UserCodeTimeout, match=r"'probe_tasks:Hanging-v0': reset did"):
        run({"hang_at_reset": 1})


def test_a_hung_expert_is_named_with_its_episodes():
    with pytest.raises(deadline.UserCodeTimeout) as caught:
        run({}, tasks.load_expert("probe_tasks:hanging_expert"))
    assert str(caught.value) == (
        "the expert probe_tasks:hanging_expert did not return within task.timeout_s = 1 s "
        "(episodes 0 (seed 101, after 0 steps), 1 (seed 102, after 0 steps))"
    )


def test_an_env_without_a_time_limit_is_capped_at_max_episode_steps():
    steps, episodes, _ = run({}, max_episode_steps=7)
    assert episodes["length"].tolist() == [7, 7, 7]
    ends = episodes["start"] + episodes["length"] - 1
    assert steps["truncated"][ends].all() and steps["truncated"].sum() == 3
    assert not steps["terminated"].any()
    # single envs (RL's dummy and subproc vec envs) get gymnasium's TimeLimit
    env = tasks.make_env(HANGING, {}, max_episode_steps=7)
    assert env.spec.max_episode_steps == 7
    env.reset(seed=0)
    assert [env.step(np.zeros(1, np.float32))[3] for _ in range(7)] == [False] * 6 + [True]


def test_a_task_with_a_limit_of_its_own_keeps_it():
    assert tasks.episode_cap("Pendulum-v1", {}, 7) == 200
    assert tasks.episode_cap("Pendulum-v1", {"max_episode_steps": 50}, 7) == 50
    assert tasks.episode_cap(HANGING, {}, 7) == 7
    assert tasks.make_env("Pendulum-v1", {}, max_episode_steps=7).spec.max_episode_steps == 200


# --------------------------------------------------------------------------------------------
# RL's vector envs


@pytest.mark.parametrize("kind", ["dummy", "subproc"])
def test_a_hung_rl_env_is_named_with_its_envs(kind):
    venv = vec.make_vec_env(HANGING, {"hang_at_step": 2}, 4, kind, n_workers=2, timeout_s=LIMIT)
    try:
        venv.reset()
        venv.step(np.zeros((4, 1), np.float32))
        with pytest.raises(deadline.UserCodeTimeout) as caught:
            venv.step(np.zeros((4, 1), np.float32))
    finally:
        venv.close()
    # the subproc pool names the first worker that missed the limit (its chunk of envs)
    where = "envs 0-3 of 4" if kind == "dummy" else "worker 0: envs 0-1 of 4"
    assert str(caught.value) == (
        f"the env {HANGING!r}: step did not return within task.timeout_s = 1 s "
        f"({where}, in episode 1, 1{', 1, 1' if kind == 'dummy' else ''} since the last reset)"
    )
    if kind == "subproc":
        assert not any(proc.is_alive() for proc in venv.processes), "hung workers are stopped"


def test_the_limit_starts_once_the_workers_have_built_their_envs():
    """Starting the workers is not limited: envs that take twice the limit to build in their
    worker (and a loaded machine's imports) do not count against the first reset."""
    kwargs = {"hang_at_step": None, "start_s": 2 * LIMIT}
    venv = vec.make_vec_env(HANGING, kwargs, 4, "subproc", n_workers=2, timeout_s=LIMIT)
    try:
        assert venv.reset().shape == (4, 2)
    finally:
        venv.close()


# --------------------------------------------------------------------------------------------
# the config keys

BASE = config_lib.load(TEST_CONFIG)


def test_the_time_limit_is_no_part_of_a_jobs_result_and_the_cap_is():
    """A job spec's result fields (RL's resume key) leave task.timeout_s out, as its rules'
    params do (tests/test_rerun_matrix.py checks those)."""

    @dataclasses.dataclass(frozen=True)
    class Spec:
        task: config_lib.TaskConfig

    task = config_lib.TaskConfig.of(BASE["task"])
    fields = spec_fields.result_fields(Spec(task))
    assert "timeout_s" not in fields["task"] and fields["task"]["max_episode_steps"] == 10000
    assert spec_fields.result_fields(Spec(dataclasses.replace(task, timeout_s=5.0))) == fields
    assert spec_fields.result_fields(Spec(dataclasses.replace(task, max_episode_steps=5))) != fields


def test_a_time_limit_must_be_positive():
    with pytest.raises(Exception, match=r"(?s)less than or equal to the minimum of 0.*timeout_s"):
        config_lib.load({"task": {"timeout_s": 0}})


# --------------------------------------------------------------------------------------------
# the task probe (which every dry run runs)


def probe_config(env_kwargs: dict, expert: str = "user_tasks:zero_expert") -> dict:
    config = copy.deepcopy(BASE)
    config["task"] |= {"env_id": HANGING, "env_kwargs": env_kwargs, "timeout_s": LIMIT}
    config["task"]["expert"] |= {"entry_point": expert, "kwargs": {}}
    return config


@pytest.mark.parametrize(
    ("env_kwargs", "expert", "key", "words"),
    [
        ({"hang_at_reset": 1}, None, "task.env_id", "resetting 'probe_tasks:Hanging-v0' failed"),
        ({"hang_at_step": 2}, None, "task.env_id", "failed at step 2"),
        ({}, "probe_tasks:hanging_expert", "task.expert.entry_point", "the expert raised"),
    ],
    ids=["reset", "step", "expert"],
)
def test_the_probe_fails_on_hung_user_code_naming_it(env_kwargs, expert, key, words):
    config = probe_config(env_kwargs, expert or "user_tasks:zero_expert")
    with pytest.raises(ConfigError) as caught:
        probe.probe_task(config)
    message = str(caught.value)
    assert caught.value.key == key
    assert words in message
    assert "did not return within task.timeout_s = 1 s (the task probe's 2 episodes" in message
    assert re.search(r"\(at .*probe_tasks\.py:\d+\)$", message), "names the line it hung at"


# --------------------------------------------------------------------------------------------
# the real workflow


@pytest.mark.integration
def test_a_collection_job_with_a_hung_expert_fails_naming_it(tmp_path):
    """A user's expert that hangs mid-collection (tests/probe_tasks.py:stalling_expert, on its
    third call: after the task probe): the shard job fails within seconds, its log ending with
    the timeout naming the expert and the shard's episodes; no shard file is left."""
    spec = untracked(yaml.safe_load(TEST_CONFIG.read_text())) | {"experiment": "hung"}
    spec["task"] = {
        "env_id": HANGING,
        "env_kwargs": {"length": 20},
        "expert": {"entry_point": "probe_tasks:stalling_expert", "kwargs": {}},
        "timeout_s": LIMIT,
    }
    config = tmp_path / "hung.yaml"
    config.write_text(yaml.safe_dump(spec))
    shard = tmp_path / "results" / "hung" / "demos" / "shard-0.h5"
    args, env = snakemake_call(
        tmp_path,
        "--configfile",
        str(config),
        "--cores",
        "1",
        str(shard.relative_to(tmp_path)),
        env={"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.getenv("PYTHONPATH")]))},
    )
    proc = subprocess.Popen(
        [str(BIN / "snakemake"), *args],
        env=env,
        text=True,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        output, _ = proc.communicate(timeout=240)  # hung for an hour without the limit
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the workflow hung:\n{proc.communicate()[0][-3000:]}")
    assert proc.returncode != 0, output[-3000:]
    assert "Error in rule collect_shard" in output
    log = (tmp_path / "results" / "hung" / "logs" / "collect_shard" / "0.log").read_text()
    # shard 0's 4 episodes run side by side; the expert's third call comes after 2 steps
    episodes = ", ".join(
        f"{e} (seed {seeds.demo_seed(spec['seed'], e)}, after 2 steps)" for e in range(4)
    )
    assert log.rstrip().splitlines()[-1] == (
        "demo2rl.tasks.deadline.UserCodeTimeout: the expert probe_tasks:stalling_expert did not "
        f"return within task.timeout_s = 1 s (episodes {episodes})"
    ), log[-2000:]
    assert not shard.exists()
