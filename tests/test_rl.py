"""PPO in every arm (warm start, residual, kickstart, scratch): how each starts, its guide term,
resume, determinism, errors."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import pickle
import signal
import time
from pathlib import Path

import configs
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import checkpointed_step

from demo2rl import arms, config, rl, seeds, tasks
from demo2rl.demos import collect, dataset
from demo2rl.learning import acting, bc, checkpoints, evaluation, guidance, policy, vec
from demo2rl.rl import trainer
from demo2rl.specs.train_rl import RLJob
from demo2rl.stages import train_rl as train_rl_stage

ENV_ID, ENV_KWARGS = "Racing-v0", {"max_steps": 200}
POLICY_CFG = configs.policy()
RL_CFG = configs.DEFAULTS["rl"] | {
    "total_timesteps": 2048,
    "n_envs": 8,
    "vec_env": "native",
    "device": "cpu",
    "eval_every": 1024,
    "ppo": configs.DEFAULTS["rl"]["ppo"]
    | {"n_steps": 64, "batch_size": 256, "n_epochs": 2, "learning_rate": 3e-4},
    "warm_start": {"critic_warmup_steps": 512, "log_std": None, "bc_coef": 0.0, "bc_decay": 0.5},
    "residual": {"log_std": -0.5},
    "kickstart": {"coef": 1.0, "decay": 0.5},
    # SAC at one update of 256 per env step on 8 envs (the learning tests' budgets are small)
    "sac": configs.DEFAULTS["rl"]["sac"]
    | {
        "n_envs": 8,
        "eval_every": 1024,
        "updates_per_step": 1,
        "batch_size": 256,
        "learning_rate": 0.0003,
        "policy_delay": 1,
    },
}
"""The rl section of these tests (a mapping, changed per test); :func:`typed` gives a run its
arm's slice as the workflow does."""
CLIP_OBS = configs.DEFAULTS["bc"]["clip_obs"]
EVAL_EPISODES = 8
"""Held-out episodes of each evaluation during training (``evaluate.during_training``)."""
RUN_ARGS = {"threads": 1, "eval_envs": 16, "checkpoint_every": 512}
"""Speed and robustness settings: arguments of train_rl, not part of a run's key."""


def typed(arm: str, rl_cfg: dict) -> config.RLConfig:
    """The ``rl`` section a run of ``arm`` gets (rules/rl.smk: its arm's slice)."""
    return config.RLConfig.of(arms.get(arm).rl_slice(rl_cfg))


def dataset_and_clone(
    tmp: Path,
    env_id: str,
    env_kwargs: dict,
    expert: str,
    n_episodes: int,
    *,
    policy_cfg: config.PolicyConfig = POLICY_CFG,
    frame_stack: int = 1,
    expert_input: str = "observation",
    **bc_cfg,
) -> tuple[Path, Path]:
    """A real dataset of ``n_episodes`` expert episodes (a quarter or less held out) and a BC
    checkpoint trained on it, recording the dataset's hash as the workflow's does;
    the collection stacks ``frame_stack`` observations, the expert reading ``expert_input``."""
    task = configs.task(env_id, env_kwargs, entry_point=expert, input=expert_input)
    shard = collect.collect_shard(
        task=dataclasses.replace(task, frame_stack=frame_stack),
        base_seed=0,
        episodes=range(n_episodes),
        n_envs=16,
    )
    valid = 0.125 if n_episodes >= 32 else 0.25
    demos = dataset.merge([shard], ["shard0"], n_episodes=n_episodes, valid_fraction=valid)
    dataset.write(tmp / "demos.h5", demos)
    cfg = configs.bc(device="cpu", **bc_cfg)
    result = bc.train_bc(tmp / "demos.h5", policy_cfg=policy_cfg, bc_cfg=cfg, seed=0, threads=1)
    checkpoints.save_checkpoint(
        tmp / "bc.pt",
        result.policy,
        result.normalizer,
        policy_cfg=policy_cfg,
        observation_space=result.observation_space,
        action_space=result.action_space,
        meta={"dataset_hash": dataset.read_attrs(tmp / "demos.h5")["content_hash"]},
    )
    return tmp / "demos.h5", tmp / "bc.pt"


@pytest.fixture(scope="module")
def demos_and_clone(tmp_path_factory) -> tuple[Path, Path]:
    """A small real dataset (32 expert episodes) and a BC checkpoint trained on it."""
    return dataset_and_clone(
        tmp_path_factory.mktemp("rl"),
        ENV_ID,
        ENV_KWARGS,
        "demo2rl.experts.racing:pure_pursuit",
        32,
        batch_size=64,
        max_epochs=30,
        patience=8,
    )


def key_of(arm: str, rl_cfg: dict, run_seed: int = 1) -> dict:
    """The run key of a run in these tests, as the stage derives it from the run's job spec
    (stand-in digests for the dataset and the clone)."""
    spec = job(("demos.h5", "bc.pt"), Path("state"), arm, rl_cfg, run_seed=run_seed)
    clone = "clone-v1" if spec.clone else None
    return train_rl_stage.run_key(spec, "demos-v1", clone)


def train(
    demos_and_clone,
    state_dir: Path,
    arm: str = "bc",
    key: dict | None = None,
    *,
    task: tuple[str, dict] = (ENV_ID, ENV_KWARGS),
    eval_episodes: int = EVAL_EPISODES,
    **overrides,
) -> rl.RLResult:
    """A run of RL_CFG with ``overrides``: rl config keys, or the speed settings in RUN_ARGS."""
    run_args = RUN_ARGS | {k: overrides.pop(k) for k in RUN_ARGS if k in overrides}
    rl_cfg = RL_CFG | overrides
    spec = job(demos_and_clone, state_dir, arm, rl_cfg, task=task, eval_episodes=eval_episodes)
    spec = dataclasses.replace(spec, **run_args)
    return rl.train_rl(spec, key=key_of(arm, rl_cfg) if key is None else key)


def job(
    demos_and_clone,
    state_dir: Path,
    arm: str,
    rl_cfg: dict,
    *,
    task: tuple[str, dict] = (ENV_ID, ENV_KWARGS),
    eval_episodes: int = EVAL_EPISODES,
    run_seed: int = 1,
    **fields,
) -> RLJob:
    """The job spec of a run of these tests (the clone given to every arm that needs it)."""
    demos, clone = demos_and_clone
    spec = RLJob(
        arm=arm,
        run_seed=run_seed,
        seed=0,
        task=configs.task(*task),
        policy=POLICY_CFG,
        rl=typed(arm, rl_cfg),
        clip_obs=CLIP_OBS,
        eval_episodes=eval_episodes,
        demos=str(demos),
        clone=str(clone) if arms.get(arm).uses_clone(rl_cfg) else None,
        state_dir=str(state_dir),
        **RUN_ARGS,
    )
    return dataclasses.replace(spec, **fields)


def same_rows(a: list[dict], b: list[dict]) -> bool:
    """The same evaluation rows, NaN-aware (the key order of rows read back from state.json is
    not that of rows just made)."""
    return pd.DataFrame(a).sort_index(axis=1).equals(pd.DataFrame(b).sort_index(axis=1))


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    """Assert two policies hold the same tensors, bit for bit."""
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name, value in sa.items():
        assert torch.equal(value, sb[name]), name


@pytest.fixture(scope="module")
def clone_env(demos_and_clone):
    """The clone, its normaliser, the task's action space and a training env (normalised)."""
    _, clone_path = demos_and_clone
    env_probe = vec.make_vec_env(ENV_ID, ENV_KWARGS, 1, "native")
    obs_space, act_space = env_probe.observation_space, env_probe.action_space
    env_probe.close()
    clone, normalizer, _ = checkpoints.load_checkpoint(clone_path, obs_space, act_space, POLICY_CFG)
    env = rl.make_training_env(
        configs.task(ENV_ID, ENV_KWARGS), typed("bc", RL_CFG), normalizer, act_space, n_workers=1
    )
    yield clone, normalizer, act_space, env
    env.close()


def build(arm: str, clone_env, rl_cfg: dict | None = None, seed: int = 3) -> rl.GuidedPPO:
    clone, _, _, env = clone_env
    return rl.build_model(
        rl.Start(
            arm=arms.get(arm),
            env=env,
            policy_cfg=POLICY_CFG,
            rl_cfg=typed(arm, rl_cfg or RL_CFG),
            clone=clone,
            demos=lambda: pytest.fail("no demonstration term in this config"),
            transitions=lambda *_: pytest.fail("no demonstration replay in this config"),
            seed=seed,
            device="cpu",
        )
    )


def test_warm_start_reproduces_the_clone_exactly(demos_and_clone, clone_env):
    clone, normalizer, act_space, env = clone_env
    raw = dataset.read(demos_and_clone[0]).steps["observations"][:500]
    model = build("bc", clone_env)
    clone_actions = acting.make_actor(clone, normalizer, act_space)(raw)
    ppo_actions, _ = model.predict(env.normalize_obs(raw), deterministic=True)
    np.testing.assert_array_equal(np.clip(ppo_actions, -1, 1), clone_actions)
    assert torch.equal(model.policy.log_std, clone.log_std)
    warm = RL_CFG["warm_start"] | {"log_std": -0.5}
    assert torch.all(build("bc", clone_env, RL_CFG | {"warm_start": warm}).policy.log_std == -0.5)


def test_residual_arm_starts_at_the_clone_and_keeps_it_frozen(demos_and_clone, clone_env):
    clone, normalizer, act_space, _ = clone_env
    raw = dataset.read(demos_and_clone[0]).steps["observations"][:500]
    model = build("residual", clone_env)
    assert isinstance(model.policy, policy.ResidualPolicy)
    assert torch.all(model.policy.log_std == RL_CFG["residual"]["log_std"])
    # the correction starts near zero (SB3's action layer gain 0.01): the clone's actions
    clone_actions = acting.make_actor(clone, normalizer, act_space)(raw)
    start_actions = acting.make_actor(model.policy, normalizer, act_space)(raw)
    assert np.abs(start_actions - clone_actions).max() < 0.05
    # the base is frozen: not in the optimiser, no gradient
    base = list(model.policy.base.parameters())
    optimised = {id(p) for group in model.policy.optimizer.param_groups for p in group["params"]}
    assert base and not any(p.requires_grad or id(p) in optimised for p in base)
    before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    model.learn(1024)
    after = model.policy.state_dict()
    for name, value in before.items():
        changed = not torch.equal(value, after[name])
        assert changed != name.startswith("base."), f"{name}: changed={changed}"


def test_residual_checkpoint_loads_and_acts_like_the_trained_policy(
    demos_and_clone, clone_env, tmp_path
):
    _, _, act_space, env = clone_env
    raw = dataset.read(demos_and_clone[0]).steps["observations"][:300]
    result = train(demos_and_clone, tmp_path / "state", arm="residual", total_timesteps=1024)
    checkpoints.save_checkpoint(
        tmp_path / "rl.pt",
        result.model.policy,
        result.normalizer,
        policy_cfg=POLICY_CFG,
        observation_space=env.observation_space,
        action_space=act_space,
        meta={},
    )
    loaded, loaded_norm, ckpt = checkpoints.load_checkpoint(
        tmp_path / "rl.pt", env.observation_space, act_space
    )  # as the evaluate stage does: the network (and its base) from the checkpoint
    assert isinstance(loaded, policy.ResidualPolicy)
    assert ckpt["residual_base"] == {"net_arch": [64, 64], "activation": "tanh"}
    same_weights(loaded, result.model.policy)
    np.testing.assert_array_equal(
        acting.make_actor(loaded, loaded_norm, act_space)(raw),
        acting.make_actor(result.model.policy, result.normalizer, act_space)(raw),
    )


def test_guide_term_trains_the_mean_never_the_log_std(clone_env):
    clone, _, _, env = clone_env
    obs = torch.as_tensor(env.reset())
    for module in (clone, build("residual", clone_env).policy):
        module.zero_grad()
        acting.mean_actions(module, obs).pow(2).sum().backward()
        assert module.log_std.grad is None
        assert module.action_net.weight.grad.abs().sum() > 0


def test_kickstart_pulls_a_fresh_policy_towards_the_clone_then_fades(
    demos_and_clone, clone_env, tmp_path
):
    clone, _, _, env = clone_env
    states = torch.as_tensor(
        env.normalize_obs(dataset.read(demos_and_clone[0]).steps["observations"][:2000])
    )

    def gap(module) -> float:
        with torch.no_grad():
            diff = acting.mean_actions(module, states) - acting.mean_actions(clone, states)
        return float(diff.pow(2).sum(-1).mean())

    fresh = build("kickstart", clone_env)
    assert gap(fresh.policy) > 0.1, "a kickstarted policy starts fresh, not as the clone"
    # enough optimiser steps per update to see the pull (80 here, 80 in the default config)
    ppo = RL_CFG["ppo"] | {"batch_size": 64, "n_epochs": 10, "learning_rate": 1e-3}
    kw = {"total_timesteps": 2048, "ppo": ppo}
    kicked = train(demos_and_clone, tmp_path / "kick", arm="kickstart", **kw)
    plain = train(demos_and_clone, tmp_path / "scratch", arm="scratch", **kw)
    assert gap(kicked.model.policy) < 0.8 * gap(plain.model.policy)
    # the weight falls linearly from coef at step 0 to 0 at decay x budget, by the env steps
    # before each update's rollout (512 env steps per rollout here; SB3 writes an update's
    # metrics in the row of the rollout after it)
    table = rl.progress_table(tmp_path / "kick")
    rows = table.dropna(subset=["train/guide_weight"])
    starts = rows["time/total_timesteps"] - 2 * 512
    np.testing.assert_allclose(rows["train/guide_weight"], 1.0 - starts / 1024)
    assert list(starts) == [0, 512]  # no guide once the weight is 0
    assert "train/guide_weight" not in rl.progress_table(tmp_path / "scratch")


def test_first_update_stays_close_to_the_clone(demos_and_clone, tmp_path):
    result = train(demos_and_clone, tmp_path, total_timesteps=1024, eval_every=512)
    steps = [row["step"] for row in result.evaluations]
    assert steps == [0, 512, 1024]  # before, after the critic warm-up, after the first update
    before, warmed, after = (row["return_mean"] for row in result.evaluations)
    assert warmed == before, "the actor is frozen during the critic warm-up"
    assert after >= 0.9 * before, f"first update dropped the return from {before} to {after}"


LEARNING_PPO = {"n_steps": 128, "batch_size": 256, "n_epochs": 10, "learning_rate": 1e-3}
"""PPO settings that learn within a few thousand steps on the 200-step racing tracks: 8 envs x
128 steps a rollout, 10 epochs (the test's RL_CFG takes 2, which learn nothing this soon)."""
LEARNING_MARGIN = 8.0
"""How far above its step-0 return an arm's held-out return must end. Chosen from the first run
(fixed seeds, Racing-v0 200 steps, 16 held-out tracks): scratch 0.19 -> 17.71 after 16,384
steps, kickstart 0.19 -> 18.63 after 8,192 (the expert and the clone score about 23.5 there).
8 is under half of either gain, so another CPU's instruction set does not decide it, and a third of
the expert's return, far above noise: with the optimiser step removed (Adam.step a no-op) both
runs stay at exactly 0.19 throughout."""


@pytest.mark.parametrize(("arm", "steps"), [("scratch", 16384), ("kickstart", 8192)])
def test_ppo_training_raises_the_held_out_return(demos_and_clone, tmp_path, arm, steps):
    """PPO learns: from scratch (the control) and kickstarted from the clone (a demo arm that
    starts with a fresh policy, so that what it reaches is learnt), the held-out return after
    a few thousand env steps is LEARNING_MARGIN above the return at step 0. The residual and
    warm-start arms start at the clone's return, which this budget barely moves."""
    ppo = RL_CFG["ppo"] | LEARNING_PPO
    run = {"ppo": ppo, "total_timesteps": steps, "eval_every": steps}
    result = train(demos_and_clone, tmp_path, arm=arm, eval_episodes=16, **run)
    assert [row["step"] for row in result.evaluations] == [0, steps]
    (start, end) = (row["return_mean"] for row in result.evaluations)
    assert end >= start + LEARNING_MARGIN, f"{arm}: {start:.2f} at step 0, {end:.2f} at {steps}"


def test_same_seed_gives_the_same_policy(demos_and_clone, tmp_path):
    a = train(demos_and_clone, tmp_path / "a", arm="scratch", total_timesteps=1024)
    b = train(demos_and_clone, tmp_path / "b", arm="scratch", total_timesteps=1024)
    for key, value in a.model.policy.state_dict().items():
        assert torch.equal(value, b.model.policy.state_dict()[key]), key
    assert pd.DataFrame(a.evaluations).equals(pd.DataFrame(b.evaluations))  # NaN-aware


def test_demonstration_term_starts_after_the_critic_warm_up(demos_and_clone, tmp_path):
    warm = RL_CFG["warm_start"] | {"critic_warmup_steps": 1024, "bc_coef": 0.5, "bc_decay": 1.0}
    result = train(demos_and_clone, tmp_path, warm_start=warm, total_timesteps=2560)
    assert result.timesteps == 2560
    rows = rl.progress_table(tmp_path).dropna(subset=["train/guide_weight"])
    starts = rows["time/total_timesteps"] - 2 * 512  # see the kickstart test
    # the actor learns (and is guided) after the warm-up; SB3 logs the last update of a run
    # with the next rollout, which never comes
    assert list(starts) == [1024, 1536]
    np.testing.assert_allclose(rows["train/guide_weight"], 0.5 * (1 - starts / 2560))
    assert (rows["train/guide_loss"] > 0).all()


@pytest.mark.parametrize("arm", ["scratch", "residual", "kickstart"])
def test_every_vec_env_gives_the_same_results(demos_and_clone, tmp_path, arm):
    kw = {"vec_env": "subproc", "total_timesteps": 1024, "n_envs": 4}
    one = train(demos_and_clone, tmp_path / "one", arm=arm, threads=1, **kw)
    two = train(demos_and_clone, tmp_path / "two", arm=arm, threads=2, **kw)
    dummy = train(demos_and_clone, tmp_path / "dummy", arm=arm, **kw | {"vec_env": "dummy"})
    native = train(demos_and_clone, tmp_path / "native", arm=arm, **kw | {"vec_env": "native"})
    for key, value in one.model.policy.state_dict().items():
        assert torch.equal(value, two.model.policy.state_dict()[key]), key
        assert torch.equal(value, dummy.model.policy.state_dict()[key]), key
        assert torch.equal(value, native.model.policy.state_dict()[key]), key


def _train_in_child(demos_and_clone, state_dir, total, arm, checkpoint_every=1024):
    try:  # runs in a forked process
        train(
            demos_and_clone,
            state_dir,
            arm,
            total_timesteps=total,
            checkpoint_every=checkpoint_every,
        )
    except rl.Preempted:
        # as the job script does, it goes on after the checkpoint (its tracking is flushed)
        # before it exits: a SIGTERM that comes then must not kill it. It goes on until the
        # test has sent that SIGTERM (and says so with a file), however slow the machine.
        (state_dir / "preempted").touch()
        deadline = time.monotonic() + 600
        while not (state_dir / "let-go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(rl.PREEMPTED_EXIT_CODE)
    os._exit(0)


def same_progress(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Assert two progress tables log the same steps with the same values (NaN-aware), but for
    the wall-clock columns (fps, elapsed time) and SB3's per-learn() iteration counter."""
    kept = [c for c in a.columns if not c.startswith("time/") or c == "time/total_timesteps"]
    assert sorted(kept) == sorted(c for c in b.columns if c in kept)
    pd.testing.assert_frame_equal(a[kept].reset_index(drop=True), b[kept].reset_index(drop=True))


@pytest.mark.parametrize(
    ("arm", "sig"),
    [("bc", signal.SIGKILL), ("residual", signal.SIGTERM), ("kickstart", signal.SIGKILL)],
)
def test_a_killed_run_resumes_bit_for_bit(demos_and_clone, tmp_path, arm, sig):
    """Killed in the middle of training (SIGKILL: anywhere, even while saving; SIGTERM: the
    trainer saves its last rollout start and exits 75), then rerun: the run resumes from its
    last checkpoint and ends with the weights, evaluations and progress rows of an
    uninterrupted run, bit for bit (Racing-v0's VecEnv saves its cars' state), each step once."""
    total, state_dir = 8192, tmp_path / "killed"
    child = mp.get_context("fork").Process(
        target=_train_in_child, args=(demos_and_clone, state_dir, total, arm, 512)
    )
    child.start()
    deadline = time.monotonic() + 600  # a bound on a hang, not a speed
    while checkpointed_step(state_dir) < 1024 and child.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.is_alive(), "the run ended before it could be killed"
    os.kill(child.pid, sig)
    if sig == signal.SIGTERM:  # SLURM signals every process of a step, Snakemake passes it on
        while not (state_dir / "preempted").exists() and child.is_alive():
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGTERM)
        (state_dir / "preempted").unlink()
        (state_dir / "let-go").touch()
    child.join(600)
    assert child.exitcode == (-signal.SIGKILL if sig == signal.SIGKILL else rl.PREEMPTED_EXIT_CODE)
    stopped_at = checkpointed_step(state_dir)
    assert 1024 <= stopped_at < total
    # the state: tensors, counters and JSON in one checkpoint, the run's key; no pickle. A
    # SIGKILL may land while a file is being replaced: its temporary file is left (the next
    # write of that file removes it)
    (state_dir / "let-go").unlink(missing_ok=True)
    kept = sorted(p.name for p in state_dir.iterdir() if not p.name.startswith("progress-"))
    assert [name for name in kept if ".tmp-" not in name] == [rl.CHECKPOINT, rl.KEY, rl.STATE]
    expected_key = key_of(arm, RL_CFG | {"total_timesteps": total})
    assert json.loads((state_dir / rl.KEY).read_text()) == expected_key
    if arm == "kickstart":  # as if killed between the checkpoint and its readable copy
        (state_dir / rl.STATE).unlink()

    resumed = train(demos_and_clone, state_dir, arm, total_timesteps=total)
    whole = train(demos_and_clone, tmp_path / "whole", arm, total_timesteps=total)
    assert resumed.resumed == 1 and resumed.timesteps == whole.timesteps == total
    same_weights(resumed.model.policy, whole.model.policy)
    assert same_rows(resumed.evaluations, whole.evaluations)  # none lost, none repeated
    assert not list(state_dir.glob(".*.tmp-*")), "the resumed run removes the killed writes"
    table = rl.progress_table(state_dir)
    assert table["time/total_timesteps"].is_unique
    assert table["time/total_timesteps"].is_monotonic_increasing
    same_progress(table, rl.progress_table(tmp_path / "whole"))


def test_a_resumed_env_without_state_is_reset_and_says_so(demos_and_clone, tmp_path, caplog):
    """A task whose VecEnv cannot save its state (here DummyVecEnv of the single env) still
    resumes from the checkpoint's weights and step, with every env reset; the log says the run
    now differs from an uninterrupted one."""
    kw = {"arm": "scratch", "vec_env": "dummy"}
    key = key_of("scratch", RL_CFG | {"total_timesteps": 2048, "vec_env": "dummy"})
    train(demos_and_clone, tmp_path / "s", key=key, total_timesteps=1024, **kw)
    with caplog.at_level("WARNING", logger="demo2rl.rl"):
        resumed = train(demos_and_clone, tmp_path / "s", total_timesteps=2048, **kw)
    assert resumed.resumed == 1 and resumed.timesteps == 2048
    assert "DummyVecEnv has no state_dict()/load_state_dict(): resuming at step 1024" in caplog.text
    whole = train(demos_and_clone, tmp_path / "whole", total_timesteps=2048, **kw)
    assert not torch.equal(
        resumed.model.policy.action_net.weight, whole.model.policy.action_net.weight
    )
    steps = rl.progress_table(tmp_path / "s")["time/total_timesteps"]
    assert steps.is_unique and steps.is_monotonic_increasing and steps.iloc[-1] == 2048


def test_two_trainers_never_share_a_state_dir(demos_and_clone, tmp_path, monkeypatch):
    """A second trainer on the same run (a SLURM retry while the first still runs) waits, then
    fails naming the holder; once the holder is killed hard (no clean-up) the lock is free."""
    state_dir, total = tmp_path / "state", 40_000
    child = mp.get_context("fork").Process(
        target=_train_in_child, args=(demos_and_clone, state_dir, total, "scratch")
    )
    child.start()
    try:
        deadline = time.time() + 120
        while checkpointed_step(state_dir) < 0 and time.time() < deadline:
            time.sleep(0.2)
        assert checkpointed_step(state_dir) >= 0, "the first trainer never checkpointed"
        monkeypatch.setattr(rl.state, "LOCK_WAIT_S", 1.0)
        with pytest.raises(rl.StateDirBusy, match=rf"in use by another trainer .*{child.pid}"):
            train(demos_and_clone, state_dir, "scratch", total_timesteps=total)
        assert child.is_alive(), "the refused trainer must not have disturbed the first"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    key = key_of("scratch", RL_CFG | {"total_timesteps": total})
    with rl.lock_state_dir(state_dir, wait=0.0):  # the lock went with the killed holder
        assert rl.claim_state_dir(state_dir, key)  # and its checkpoint resumes


def test_bc_arm_refuses_a_checkpoint_of_another_architecture(demos_and_clone, tmp_path):
    other = dataclasses.replace(POLICY_CFG, net_arch={"pi": [32], "vf": [32]})
    with pytest.raises(
        checkpoints.CheckpointError, match=r"bc.pt: policy.net_arch.pi is \[64, 64\]"
    ):
        rl.train_rl(
            job(demos_and_clone, tmp_path / "state", "bc", RL_CFG, run_seed=0, policy=other),
            key=key_of("bc", RL_CFG, run_seed=0),
        )
    with pytest.raises(checkpoints.CheckpointError, match="missing.pt: no such checkpoint file"):
        rl.train_rl(
            job(
                demos_and_clone,
                tmp_path / "state",
                "bc",
                RL_CFG,
                run_seed=0,
                clone=str(tmp_path / "missing.pt"),
            ),
            key=key_of("bc", RL_CFG, run_seed=0),
        )


# --------------------------------------------------------------------------------------------
# the state directory belongs to one run: its key decides what resumes


class _Payload:
    """Unpickling this creates ``marker``: what a crafted checkpoint could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _plant_state(state_dir: Path, key: dict, checkpoint: bytes, timesteps: int = 512) -> None:
    """A state dir that claims to be run ``key``'s, at ``timesteps``, with ``checkpoint``."""
    state_dir.mkdir(parents=True)
    (state_dir / rl.KEY).write_text(json.dumps(key))
    state = {"timesteps": timesteps, "evaluations": [], "resumed": 0}
    (state_dir / rl.STATE).write_text(json.dumps(state))
    (state_dir / rl.CHECKPOINT).write_bytes(checkpoint)


def _torch_save_bytes(obj, tmp: Path) -> bytes:
    torch.save(obj, tmp)
    return tmp.read_bytes()


CRAFTED_FORMATS = {
    "torch.save": _torch_save_bytes,  # torch's zip format, the pickle inside
    # torch's legacy format (protocol 2, what torch itself wrote)
    "plain pickle": lambda obj, tmp: pickle.dumps(obj, protocol=2),
}


def test_run_key_names_the_parts_that_differ():
    parts = {"config": {"rl": {"n_envs": 8}}, "inputs.demos": "abc", "code": "f00"}
    key = rl.run_key(parts)
    assert key == rl.run_key(dict(reversed(parts.items())))  # order does not count
    assert set(key["parts"]) == set(parts)
    other = rl.run_key(parts | {"config": {"rl": {"n_envs": 16}}})
    assert other["key"] != key["key"]
    assert [p for p in key["parts"] if key["parts"][p] != other["parts"][p]] == ["config"]


@pytest.mark.parametrize("fmt", CRAFTED_FORMATS)
def test_a_crafted_checkpoint_is_refused_without_running_its_code(demos_and_clone, tmp_path, fmt):
    """checkpoint.pt of the run's own key (so the run resumes from it) holding a pickle that runs
    code when loaded: torch's weights_only loader refuses it, nothing runs, the error is clear."""
    write = CRAFTED_FORMATS[fmt]
    marker = tmp_path / "pwned"
    # the control: torch.load without weights_only does run the payload (a plain pickle runs
    # while torch reads what it takes for the legacy format's magic number, then fails)
    control = write({"policy": _Payload(tmp_path / "control")}, tmp_path / "control.pt")
    (tmp_path / "control.pt").write_bytes(control)
    with contextlib.suppress(RuntimeError):
        torch.load(tmp_path / "control.pt", weights_only=False)
    assert (tmp_path / "control").exists()

    state_dir = tmp_path / "state"
    crafted = {"policy": _Payload(marker), "optimizer": {}, "num_timesteps": 512, "n_updates": 4}
    _plant_state(state_dir, key_of("scratch", RL_CFG), write(crafted, tmp_path / "crafted.pt"))
    assert rl.claim_state_dir(state_dir, key_of("scratch", RL_CFG)), "the run must try to resume"
    with pytest.raises(checkpoints.CheckpointError) as err:
        train(demos_and_clone, state_dir, arm="scratch")
    assert not marker.exists(), "unpickling the crafted checkpoint ran its code"
    assert err.value.path == state_dir / rl.CHECKPOINT
    assert str(err.value).startswith(f"{state_dir / rl.CHECKPOINT}: cannot resume from it")
    assert "UnpicklingError" in str(err.value) and "weights_only" in str(err.value)
    assert isinstance(err.value.__cause__, pickle.UnpicklingError)
    # nothing was trained on top of it, and the evidence is left for a person to look at
    assert not list(state_dir.glob("progress-*.csv"))
    assert (state_dir / rl.CHECKPOINT).is_file()


def test_state_of_another_run_is_discarded(demos_and_clone, tmp_path, caplog):
    """State recorded under another key (here: another learning rate) is deleted with a
    warning naming what differs; the run starts at step 0 and equals a fresh run bit for bit."""
    short = {"total_timesteps": 1024, "eval_every": 512}
    other = RL_CFG["ppo"] | {"learning_rate": 1e-3}
    first = train(demos_and_clone, tmp_path / "state", arm="scratch", **short, ppo=other)
    assert first.timesteps == 1024 and (tmp_path / "state" / rl.CHECKPOINT).is_file()
    with caplog.at_level("WARNING", logger="demo2rl.rl"):
        again = train(demos_and_clone, tmp_path / "state", arm="scratch", **short)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "discarding the state in" in warnings[0]
    assert "its run key differs in: job" in warnings[0]
    assert again.resumed == 0 and again.timesteps == 1024
    assert again.evaluations[0]["step"] == 0
    assert [p.name for p in (tmp_path / "state").glob("progress-*.csv")] == [
        "progress-000000000.csv"
    ]
    assert json.loads((tmp_path / "state" / rl.KEY).read_text()) == key_of(
        "scratch", RL_CFG | short
    )
    fresh = train(demos_and_clone, tmp_path / "fresh", arm="scratch", **short)
    same_weights(again.model.policy, fresh.model.policy)
    assert pd.DataFrame(again.evaluations).equals(pd.DataFrame(fresh.evaluations))
    with pytest.raises(AssertionError):  # the discarded run really was another one
        same_weights(first.model.policy, fresh.model.policy)


def test_state_without_a_key_is_discarded(tmp_path, caplog):
    """A state dir of an older layout (model.zip, no key.json) is not resumed."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "model.zip").write_bytes(b"PK\x03\x04")
    (state_dir / rl.STATE).write_text(json.dumps({"timesteps": 512}))
    key = key_of("scratch", RL_CFG)
    with caplog.at_level("WARNING", logger="demo2rl.rl"):
        assert rl.claim_state_dir(state_dir, key) is False
    assert "it records no run key" in caplog.text
    assert sorted(p.name for p in state_dir.iterdir()) == [rl.KEY]
    assert json.loads((state_dir / rl.KEY).read_text()) == key


def test_a_start_that_never_checkpointed_is_cleared(tmp_path, caplog):
    """A first attempt killed before its first checkpoint left the key and a progress segment:
    nothing to resume, and nothing of it may reach the next attempt's progress table."""
    key = key_of("scratch", RL_CFG)
    state_dir = tmp_path / "state"
    assert rl.claim_state_dir(state_dir, key) is False  # a fresh dir: claimed, nothing to resume
    (state_dir / "progress-000000000.csv").write_text("time/total_timesteps\n512\n1024\n")
    with caplog.at_level("WARNING", logger="demo2rl.rl"):
        assert rl.claim_state_dir(state_dir, key) is False
    assert "it holds no checkpoint yet" in caplog.text
    assert sorted(p.name for p in state_dir.iterdir()) == [rl.KEY]


def test_state_of_the_same_run_resumes(demos_and_clone, tmp_path, caplog):
    """The same key resumes: a finished run, rerun, trains nothing more and returns its policy;
    a run stopped early continues from its checkpoint."""
    short = {"total_timesteps": 1024, "eval_every": 512}
    done = train(demos_and_clone, tmp_path / "done", arm="scratch", **short)
    progress = rl.progress_table(tmp_path / "done")
    with caplog.at_level("WARNING", logger="demo2rl.rl"):
        rerun = train(demos_and_clone, tmp_path / "done", arm="scratch", **short)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert rerun.resumed == 1 and rerun.timesteps == 1024
    same_weights(rerun.model.policy, done.model.policy)
    assert same_rows(rerun.evaluations, done.evaluations)
    assert rl.progress_table(tmp_path / "done").equals(progress)  # no step trained again

    # stopped at 512 of 1024 steps (a run whose budget ended there, recorded under the key of
    # the full run): the rerun continues from step 512, keeping the evaluations made before
    key = key_of("scratch", RL_CFG | short)
    half = train(demos_and_clone, tmp_path / "half", arm="scratch", key=key, total_timesteps=512)
    assert half.timesteps == 512
    resumed = train(demos_and_clone, tmp_path / "half", arm="scratch", **short)
    assert resumed.resumed == 1 and resumed.timesteps == 1024
    assert same_rows(resumed.evaluations[: len(half.evaluations)], half.evaluations)
    assert [row["step"] for row in resumed.evaluations] == [0, 512, 1024]
    same_weights(resumed.model.policy, done.model.policy)  # the native env resumes bit for bit
    assert same_rows(resumed.evaluations, done.evaluations)
    table = rl.progress_table(tmp_path / "half")
    assert (
        table["time/total_timesteps"].is_unique
        and table["time/total_timesteps"].is_monotonic_increasing
    )
    assert table["time/total_timesteps"].iloc[-1] == 1024
    state = json.loads((tmp_path / "half" / rl.STATE).read_text())
    assert state["timesteps"] == 1024 and state["resumed"] == 1


def test_training_cpu_seconds_count_worker_processes_live_and_ended():
    """A run's CPU seconds are the machine's cost of it: a subproc VecEnv's workers step the
    envs, so their CPU counts, while they run and after they end. A child burns 0.3 CPU seconds
    (by its own clock, not the wall's) and reports them; the count grows by them, beyond what
    this process used."""
    import subprocess
    import sys

    burn = (
        "import sys, time\n"
        "while time.process_time() < 0.3: pass\n"
        "print(time.process_time(), flush=True)\n"
        "sys.stdin.readline()\n"
    )
    start, own_start = trainer.training_cpu_seconds(), time.process_time()
    child = subprocess.Popen(
        [sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        child_cpu = float(child.stdout.readline())  # it burnt them and waits, alive
        live = trainer.training_cpu_seconds() - start - (time.process_time() - own_start)
    finally:
        child.communicate("\n", timeout=60)
    ended = trainer.training_cpu_seconds() - start - (time.process_time() - own_start)
    assert child_cpu >= 0.3
    assert live >= 0.9 * child_cpu, (live, child_cpu)
    assert ended >= 0.9 * child_cpu, (ended, child_cpu)


def test_training_tuning_and_evaluation_seeds_are_disjoint():
    """Demonstrations, RL training, tuning (benchmarks/arms.py) and held-out evaluation never
    share a track, also at the largest base seed."""
    for base in (0, seeds.MAX_BASE_SEED - 1):
        groups = [
            {seeds.demo_seed(base, e) for e in range(10_000)},
            set(evaluation.heldout_seeds(base, 10_000)),
            set(evaluation.tuning_seeds(base, 10_000)),
            {seeds.rl_seed(base, s) + i for s in range(20) for i in range(256)},
        ]
        assert sum(map(len, groups)) == len(set().union(*groups))
        assert max(set().union(*groups)) < 2**30  # unseeded resets draw from [2**30, 2**31)


def test_progress_table_drops_rows_lost_in_a_hard_kill(tmp_path):
    """A run killed after its checkpoint at 2048 (rows up to 3072 logged) resumed from 2048: the
    lost rows 2560 and 3072 of the first segment must not appear beside the resumed ones."""
    pd.DataFrame({"time/total_timesteps": [512, 1024, 1536, 2048, 2560, 3072], "b": 1}).to_csv(
        tmp_path / "progress-000000000.csv", index=False
    )
    pd.DataFrame({"b": 2, "time/total_timesteps": [2560, 3072, 3584]}).to_csv(
        tmp_path / "progress-000002048.csv", index=False
    )
    (tmp_path / "progress-000003584.csv").write_text("")  # resumed at the end: nothing logged
    table = rl.progress_table(tmp_path)
    assert table["time/total_timesteps"].tolist() == [512, 1024, 1536, 2048, 2560, 3072, 3584]
    assert table["b"].tolist() == [1, 1, 1, 1, 2, 2, 2]
    assert list(table.columns) == ["time/total_timesteps", "b"]


# --------------------------------------------------------------------------------------------
# Discrete actions (CartPole-v1): a categorical clone, its warm start and kickstart


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory) -> tuple[Path, Path]:
    """A CartPole-v1 dataset (16 expert episodes, integer actions) and a categorical clone."""
    paths = dataset_and_clone(
        tmp_path_factory.mktemp("cartpole"),
        "CartPole-v1",
        {},
        "demo2rl.experts.classic:cart_pole",
        16,
        batch_size=256,
        max_epochs=10,
        patience=3,
    )
    assert dataset.read_attrs(paths[0])["action_space"]["type"] == "Discrete"
    return paths


def train_cartpole(cartpole, state_dir: Path, arm: str, **overrides) -> rl.RLResult:
    """A short run on CartPole-v1 with the default vec_env (auto: DummyVecEnv here)."""
    overrides = {"vec_env": "auto", "total_timesteps": 1024} | overrides
    task = ("CartPole-v1", {})
    return train(cartpole, state_dir, arm, task=task, eval_episodes=4, **overrides)


def test_categorical_guide_loss_is_the_nll_of_demonstrated_actions(cartpole):
    demos, clone_path = cartpole
    obs_space, space = tasks.spaces("CartPole-v1", {})
    clone, normalizer, _ = checkpoints.load_checkpoint(clone_path, obs_space, space)
    data = dataset.read(demos)
    obs = torch.as_tensor(normalizer(data.steps["observations"][:256]))
    actions = torch.as_tensor(data.steps["actions"][:256])
    nll = -clone.get_distribution(obs).log_prob(actions).mean()
    loss = guidance.guide_loss(clone, obs, guidance.demo_targets(actions, space))
    torch.testing.assert_close(loss, nll)
    # against its own probabilities the loss is the policy's entropy, its minimum over policies
    own = guidance.guide_loss(clone, obs, guidance.action_targets(clone, obs).detach())
    torch.testing.assert_close(own, clone.get_distribution(obs).entropy().mean())


def test_discrete_warm_start_acts_like_the_clone_and_kickstart_moves_towards_it(cartpole, tmp_path):
    demos, clone_path = cartpole
    warm = RL_CFG["warm_start"] | {"critic_warmup_steps": 0, "log_std": -1.5, "bc_coef": 0.5}
    bc_run = train_cartpole(cartpole, tmp_path / "bc", "bc", warm_start=warm)
    rows = rl.progress_table(tmp_path / "bc").dropna(subset=["train/guide_loss"])
    assert len(rows) and (rows["train/guide_loss"] > 0).all()  # the demo term ran, as an NLL
    assert bc_run.evaluations[0]["return_mean"] == 500.0  # the clone balances the pole
    clone, normalizer, _ = checkpoints.load_checkpoint(clone_path, *tasks.spaces("CartPole-v1", {}))
    states = torch.as_tensor(normalizer(dataset.read(demos).steps["observations"]))

    def gap(module) -> float:  # cross-entropy to the clone's action probabilities
        with torch.no_grad():
            return float(
                guidance.guide_loss(module, states, guidance.action_targets(clone, states))
            )

    ppo = RL_CFG["ppo"] | {"batch_size": 64, "n_epochs": 10, "learning_rate": 1e-3}
    kicked = train_cartpole(cartpole, tmp_path / "kick", "kickstart", ppo=ppo)
    plain = train_cartpole(cartpole, tmp_path / "scratch", "scratch", ppo=ppo)
    assert gap(kicked.model.policy) < gap(plain.model.policy) - 0.05


# --------------------------------------------------------------------------------------------
# Non-finite values: the run fails naming them, writes nothing, and stays resumable


def test_a_nan_reward_fails_the_run_naming_it_and_keeps_the_last_checkpoint(tmp_path):
    """LateNanReward-v0's reward turns NaN after 600 steps of an env's life (clean
    demonstrations, then 8 envs x 600 = env step 4800 of RL): the run fails naming the
    quantity, the env, the arm, the seed and the step, before PPO trains on it; the last
    checkpoint (step 4096) stays, and resumes."""
    task = ("user_tasks:LateNanReward-v0", {"nan_after": 600})
    demos, _ = dataset_and_clone(
        tmp_path, task[0], {}, "user_tasks:zero_expert", 8, batch_size=64, max_epochs=1
    )
    state_dir, kw = tmp_path / "state", {"total_timesteps": 8192, "vec_env": "dummy"}
    with pytest.raises(rl.recipe.NonFiniteValue) as failed:
        train((demos, None), state_dir, "scratch", task=task, checkpoint_every=1024, **kw)
    assert str(failed.value) == (
        "scratch arm, seed 1, env step 4800: non-finite rewards of env(s) "
        "[0, 1, 2, 3, 4, 5, 6, 7] after an env step. No policy written; the last checkpoint "
        f"(step 4096) in {state_dir} stays resumable"
    )
    assert checkpointed_step(state_dir) == 4096
    key = key_of("scratch", RL_CFG | kw)
    assert rl.claim_state_dir(state_dir, key)  # the same run resumes from there


def test_an_overflowing_update_fails_naming_its_losses(tmp_path):
    """A finite but huge reward (1e30 after 600 steps of an env's life) overflows PPO's value
    loss: the run fails at the next rollout start naming the losses."""
    task = ("user_tasks:LateNanReward-v0", {"nan_after": 600, "value": 1e30})
    demos, _ = dataset_and_clone(
        tmp_path, task[0], {}, "user_tasks:zero_expert", 8, batch_size=64, max_epochs=1
    )
    with pytest.raises(
        rl.recipe.NonFiniteValue,
        match=r"^scratch arm, seed 1, env step 5120: non-finite train/loss, train/value_loss in "
        r"the update before this rollout\. No policy written; the last checkpoint \(step 4608\)",
    ):
        train(
            (demos, None),
            tmp_path / "s",
            "scratch",
            task=task,
            vec_env="dummy",
            total_timesteps=8192,
        )


def test_an_mlp_policy_on_a_gpu_gets_sb3s_advice_to_use_the_cpu(clone_env):
    """SB3's warning for an MLP policy on a GPU stays (test_pixels: none for a CNN)."""
    model = build("scratch", clone_env)
    model.device = torch.device("cuda")  # SB3's check reads only the device's type
    with pytest.warns(UserWarning, match="primarily intended to run on the CPU"):
        model._maybe_recommend_cpu()


def test_the_finite_check_names_a_non_finite_action_or_observation_and_its_envs():
    """CheckFinite: a NaN action fails before the step, naming its envs; a non-finite observation
    fails after it; finite values pass through unchanged."""
    env = rl.recipe.CheckFinite(vec.make_vec_env("Racing-v0", {}, 3, "native"))
    obs = env.reset()
    assert np.isfinite(obs).all()
    actions = np.zeros((3, 2), dtype=np.float32)
    actions[1, 0] = np.nan
    with pytest.raises(
        rl.recipe.NonFiniteValue,
        match=r"^non-finite actions of env\(s\) \[1\] from the policy, before an env step$",
    ):
        env.step_async(actions)
    with pytest.raises(
        rl.recipe.NonFiniteValue,
        match=r"^non-finite observations of env\(s\) \[0, 2\] after an env step$",
    ):
        rl.recipe._check_finite(
            "after an env step",
            observations=np.array([[np.inf, 0.0], [0.0, 1.0], [np.nan, 0.0]]),
            rewards=np.zeros(3),
        )
    env.step_async(np.zeros((3, 2), dtype=np.float32))
    obs, rewards, _, _ = env.step_wait()
    assert np.isfinite(obs).all() and np.isfinite(rewards).all()
    env.close()


def test_an_update_that_leaves_a_nan_weight_fails(clone_env):
    """A weight that turns NaN in an update fails it, naming the weight (not torch's error on a
    NaN action mean in the next rollout)."""
    model = build("scratch", clone_env)
    model.learn(512)  # one rollout in the buffer
    with torch.no_grad():
        model.policy.value_net.bias.fill_(float("nan"))  # NaN values: NaN loss and gradients
    with pytest.raises(
        rl.recipe.NonFiniteValue, match=r"^non-finite weights in \w+ after the update"
    ):
        model.train()


def test_a_position_round_trips_through_tensors_and_numpy_scalars():
    """What a checkpoint stores of a run's position comes back equal, numpy scalars in the
    episode statistics (gymnasium's RecordEpisodeStatistics) and wide unsigned ints included."""
    from demo2rl.rl import resume_point

    at = resume_point.ResumePoint(
        timesteps=512,
        n_updates=4,
        rng={"torch": torch.get_rng_state()},
        last_obs=np.arange(6, dtype=np.float32).reshape(2, 3),
        episode_starts=np.array([True, False]),
        episode_infos=[{"r": np.float32(1.5), "l": np.int64(3), "t": 0.25}],
        successes=[np.True_],
        env={"keys": np.array([2**32 - 1], dtype=np.uint32), "speed": np.ones(2)},
    )
    back = resume_point.from_tensors(resume_point.to_tensors(at))
    assert back.episode_infos == [{"r": 1.5, "l": 3, "t": 0.25}] and back.successes == [True]
    assert np.array_equal(back.last_obs, at.last_obs) and back.episode_starts.tolist() == [1, 0]
    assert back.env["keys"].dtype == np.uint32 and back.env["keys"][0] == 2**32 - 1
    assert torch.equal(back.rng["torch"], at.rng["torch"])
