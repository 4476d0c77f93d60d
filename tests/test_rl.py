"""PPO from the clone and from scratch: warm start, first update, resume, determinism, errors."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from demo2rl import bc, collect, dataset, evaluation, policy, rl, seeds, vec

ENV_ID, ENV_KWARGS = "Racing-v0", {"max_steps": 200}
POLICY_CFG = {"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation": "tanh"}
RL_CFG = {
    "total_timesteps": 2048,
    "n_envs": 8,
    "vec_env": "native",
    "device": "cpu",
    "checkpoint_every": 512,
    "eval_every": 1024,
    "eval_episodes": 8,
    "ppo": {"n_steps": 64, "batch_size": 256, "n_epochs": 2, "learning_rate": 3e-4},
    "warm_start": {"critic_warmup_steps": 512, "log_std": None, "bc_coef": 0.0, "bc_decay": 0.5},
}


@pytest.fixture(scope="module")
def demos_and_clone(tmp_path_factory) -> tuple[Path, Path]:
    """A small real dataset (32 expert episodes) and a BC checkpoint trained on it."""
    tmp = tmp_path_factory.mktemp("rl")
    shard = collect.collect_shard(
        env_id=ENV_ID,
        env_kwargs=ENV_KWARGS,
        expert_entry_point="demo2rl.experts.racing:pure_pursuit",
        expert_kwargs={},
        base_seed=0,
        episodes=range(32),
        n_envs=16,
    )
    demos = dataset.merge([shard], ["shard0"], n_episodes=32, valid_fraction=0.125)
    dataset.write(tmp / "demos.h5", demos)
    cfg = {"device": "cpu", "batch_size": 64, "max_epochs": 30, "patience": 8}
    result = bc.train_bc(tmp / "demos.h5", policy_cfg=POLICY_CFG, bc_cfg=cfg, seed=0)
    policy.save_checkpoint(
        tmp / "bc.pt",
        result.policy,
        result.normalizer,
        policy_cfg=POLICY_CFG,
        observation_space=result.observation_space,
        action_space=result.action_space,
        meta={},
    )
    return tmp / "demos.h5", tmp / "bc.pt"


def train(demos_and_clone, state_dir: Path, init: str = "bc", **overrides) -> rl.RLResult:
    demos, clone = demos_and_clone
    return rl.train_rl(
        env_id=ENV_ID,
        env_kwargs=ENV_KWARGS,
        init=init,
        demos_path=demos,
        bc_checkpoint=clone if init == "bc" else None,
        policy_cfg=POLICY_CFG,
        rl_cfg=RL_CFG | overrides,
        base_seed=0,
        run_seed=1,
        state_dir=state_dir,
        threads=overrides.pop("threads", 1) if "threads" in overrides else 1,
    )


def test_warm_start_reproduces_the_clone_exactly(demos_and_clone):
    demos_path, clone = demos_and_clone
    demos = dataset.read(demos_path)
    env_probe = vec.make_vec_env(ENV_ID, ENV_KWARGS, 1, "native")
    obs_space, act_space = env_probe.observation_space, env_probe.action_space
    bc_policy, normalizer, _ = policy.load_checkpoint(clone, obs_space, act_space, POLICY_CFG)
    env = rl.make_training_env(ENV_ID, ENV_KWARGS, RL_CFG, normalizer, n_workers=1)
    model = rl.new_model(env, POLICY_CFG, RL_CFG["ppo"], seed=3, bc_policy=bc_policy)
    raw = demos.steps["observations"][:500]
    clone_actions = policy.make_actor(bc_policy, normalizer, act_space)(raw)
    ppo_actions, _ = model.predict(env.normalize_obs(raw), deterministic=True)
    np.testing.assert_array_equal(np.clip(ppo_actions, -1, 1), clone_actions)
    assert torch.equal(model.policy.log_std, bc_policy.log_std)
    with torch.no_grad():
        model_ls = rl.new_model(
            env, POLICY_CFG, RL_CFG["ppo"], seed=3, bc_policy=bc_policy, log_std=-0.5
        )
    assert torch.all(model_ls.policy.log_std == -0.5)
    env.close()


def test_first_update_stays_close_to_the_clone(demos_and_clone, tmp_path):
    result = train(demos_and_clone, tmp_path, total_timesteps=1024, eval_every=512)
    steps = [row["step"] for row in result.evaluations]
    assert steps == [0, 512, 1024]  # before, after the critic warm-up, after the first update
    before, warmed, after = (row["return_mean"] for row in result.evaluations)
    assert warmed == before, "the actor is frozen during the critic warm-up"
    assert after >= 0.9 * before, f"first update dropped the return from {before} to {after}"


def test_same_seed_gives_the_same_policy(demos_and_clone, tmp_path):
    a = train(demos_and_clone, tmp_path / "a", init="scratch", total_timesteps=1024)
    b = train(demos_and_clone, tmp_path / "b", init="scratch", total_timesteps=1024)
    for key, value in a.model.policy.state_dict().items():
        assert torch.equal(value, b.model.policy.state_dict()[key]), key
    assert pd.DataFrame(a.evaluations).equals(pd.DataFrame(b.evaluations))  # NaN-aware


def test_worker_processes_do_not_change_results(demos_and_clone, tmp_path):
    kw = {"vec_env": "subproc", "total_timesteps": 1024, "n_envs": 4}
    one = train(demos_and_clone, tmp_path / "one", init="scratch", threads=1, **kw)
    two = train(demos_and_clone, tmp_path / "two", init="scratch", threads=2, **kw)
    dummy = train(demos_and_clone, tmp_path / "dummy", init="scratch", **kw | {"vec_env": "dummy"})
    for key, value in one.model.policy.state_dict().items():
        assert torch.equal(value, two.model.policy.state_dict()[key]), key
        assert torch.equal(value, dummy.model.policy.state_dict()[key]), key


def _train_in_child(demos_and_clone, state_dir, total):  # runs in a forked process
    try:
        train(demos_and_clone, state_dir, total_timesteps=total, checkpoint_every=1024)
    except rl.Preempted:
        os._exit(rl.PREEMPTED_EXIT_CODE)
    os._exit(0)


def test_sigterm_checkpoints_and_a_rerun_resumes_to_the_budget(demos_and_clone, tmp_path):
    total = 40_000
    child = mp.get_context("fork").Process(
        target=_train_in_child, args=(demos_and_clone, tmp_path, total)
    )
    child.start()
    state = tmp_path / "state.json"
    deadline = time.time() + 120
    while not state.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert state.exists(), "no checkpoint written"
    os.kill(child.pid, signal.SIGTERM)
    child.join(60)
    assert child.exitcode == rl.PREEMPTED_EXIT_CODE
    stopped_at = json.loads(state.read_text())["timesteps"]
    assert 0 < stopped_at < total
    result = train(demos_and_clone, tmp_path, total_timesteps=total, checkpoint_every=1024)
    assert result.resumed == 1
    assert result.timesteps >= total
    table = rl.progress_table(tmp_path)
    assert table["time/total_timesteps"].iloc[-1] >= total
    assert table["time/total_timesteps"].is_monotonic_increasing


def test_bc_arm_refuses_a_checkpoint_of_another_architecture(demos_and_clone, tmp_path):
    other = POLICY_CFG | {"net_arch": {"pi": [32], "vf": [32]}}
    demos, clone = demos_and_clone
    with pytest.raises(policy.CheckpointError, match=r"bc.pt: policy.net_arch.pi is \[64, 64\]"):
        rl.train_rl(
            env_id=ENV_ID,
            env_kwargs=ENV_KWARGS,
            init="bc",
            demos_path=demos,
            bc_checkpoint=clone,
            policy_cfg=other,
            rl_cfg=RL_CFG,
            base_seed=0,
            run_seed=0,
            state_dir=tmp_path,
        )
    with pytest.raises(policy.CheckpointError, match="missing.pt: no such checkpoint file"):
        rl.train_rl(
            env_id=ENV_ID,
            env_kwargs=ENV_KWARGS,
            init="bc",
            demos_path=demos,
            bc_checkpoint=tmp_path / "missing.pt",
            policy_cfg=POLICY_CFG,
            rl_cfg=RL_CFG,
            base_seed=0,
            run_seed=0,
            state_dir=tmp_path,
        )


def test_training_and_evaluation_seeds_are_disjoint():
    demo = {seeds.demo_seed(0, e) for e in range(10_000)}
    evals = set(evaluation.heldout_seeds(0, 10_000))
    train_starts = {seeds.rl_seed(0, s) + i for s in range(20) for i in range(256)}
    assert not demo & evals and not demo & train_starts and not evals & train_starts
    assert max(demo | evals | train_starts) < 2**30  # unseeded resets draw from [2**30, 2**31)
