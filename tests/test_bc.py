"""Behaviour cloning on real racing demonstrations: quality, determinism, streaming, errors."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from pathlib import Path

import configs
import gymnasium as gym
import numpy as np
import pytest
import torch

from demo2rl import seeds, tasks
from demo2rl.demos import collect, dataset, rollout
from demo2rl.learning import acting, bc, bc_data
from demo2rl.learning import policy as P
from demo2rl.report import plots

ENV_ID = "Racing-v0"
ENV_KWARGS = {"max_steps": 200}
EXPERT = "demo2rl.experts.racing:pure_pursuit"
POLICY_CFG = configs.policy()
FAST = configs.bc(device="cpu", batch_size=64, max_epochs=3)


@pytest.fixture(scope="module")
def racing_demos() -> dataset.Demos:
    """40 expert episodes of 200 steps (8000 rows), merged with a 10% validation split."""
    shard = collect.collect_shard(
        task=configs.task(ENV_ID, ENV_KWARGS, entry_point=EXPERT),
        base_seed=0,
        episodes=range(40),
        n_envs=20,
    )
    return dataset.merge([shard], ["shard0"], n_episodes=40, valid_fraction=0.1)


@pytest.fixture(scope="module")
def racing_file(racing_demos, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bc") / "demos.h5"
    dataset.write(path, racing_demos)
    return str(path)


def weights(result: bc.BCResult) -> dict[str, torch.Tensor]:
    return result.policy.state_dict()


def same_weights(a: bc.BCResult, b: bc.BCResult) -> bool:
    return all(torch.equal(weights(a)[k], weights(b)[k]) for k in weights(a))


def test_bc_reaches_80_percent_of_the_expert_on_held_out_tracks(racing_file, tmp_path):
    cfg = configs.bc(device="cpu", batch_size=64, max_epochs=40, patience=10)
    result = bc.train_bc(racing_file, policy_cfg=POLICY_CFG, bc_cfg=cfg, seed=0, threads=1)
    assert result.data_path == "memory"
    assert result.history[-1]["train_nll"] < result.history[0]["train_nll"]
    eval_seeds = [seeds.eval_seed(0, i) for i in range(20)]
    actor = acting.make_actor(result.policy, result.normalizer, result.action_space)
    task = configs.task(ENV_ID, ENV_KWARGS)
    _, clone, _ = rollout.run_episodes(task, actor, eval_seeds, n_envs=20)
    expert = tasks.load_expert(EXPERT)
    _, ref, _ = rollout.run_episodes(task, expert, eval_seeds, n_envs=20)
    ratio = clone["return"].mean() / ref["return"].mean()
    assert ratio >= 0.8, f"BC return {clone['return'].mean():.2f} is {ratio:.0%} of the expert's"
    plots.loss_curves(result.history, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_a_diverging_clone_fails_naming_the_epoch_and_the_learning_rate(racing_demos):
    """A learning rate of 1e20 blows the NLL up in the first epoch: train_bc raises before any
    clone exists, saying what diverged, when, and which setting to lower."""
    cfg = dataclasses.replace(FAST, learning_rate=1e20)
    with pytest.raises(FloatingPointError) as failed:
        bc.train_bc(racing_demos, policy_cfg=POLICY_CFG, bc_cfg=cfg, seed=7, threads=1)
    assert re.fullmatch(
        r"BC diverged in epoch 1 \(seed 7, bc.learning_rate 1e\+20\): (the training loss "
        r"\(NLL\) is (nan|inf)|the policy's action distribution is invalid \(Expected "
        r"parameter .*\)); no clone is written. Lower bc.learning_rate, or check the dataset's "
        r"observations and actions",
        str(failed.value),
    ), failed.value


def test_same_seed_gives_bitwise_identical_weights_whatever_the_threads(racing_demos):
    threads_before = torch.get_num_threads()
    runs = [
        bc.train_bc(racing_demos, policy_cfg=POLICY_CFG, bc_cfg=FAST, seed=7, threads=t)
        for t in (1, 1, 2)
    ]
    assert same_weights(runs[0], runs[1])
    assert same_weights(runs[0], runs[2]), "the thread count changed the weights"
    assert runs[0].history[-1]["valid_nll"] == runs[2].history[-1]["valid_nll"]
    other = bc.train_bc(racing_demos, policy_cfg=POLICY_CFG, bc_cfg=FAST, seed=8, threads=1)
    assert not same_weights(runs[0], other)
    assert torch.get_num_threads() == threads_before


def test_streaming_path_trains_like_the_memory_path(racing_file, caplog):
    memory = bc.train_bc(racing_file, policy_cfg=POLICY_CFG, bc_cfg=FAST, seed=1, threads=1)
    with caplog.at_level(logging.INFO, logger="demo2rl.learning.bc"):
        stream = bc.train_bc(
            racing_file,
            policy_cfg=POLICY_CFG,
            bc_cfg=dataclasses.replace(FAST, memory_fraction=1e-9),
            seed=1,
            threads=1,
        )
    assert (memory.data_path, stream.data_path) == ("memory", "stream")
    assert "streaming" in caplog.text
    assert stream.n_train == memory.n_train and stream.n_valid == memory.n_valid
    m, s = memory.history[-1]["valid_nll"], stream.history[-1]["valid_nll"]
    assert abs(m - s) < 0.25 * abs(memory.history[0]["valid_nll"] - m) + 0.05, (m, s)
    again = bc.train_bc(
        racing_file,
        policy_cfg=POLICY_CFG,
        bc_cfg=dataclasses.replace(FAST, memory_fraction=1e-9),
        seed=1,
        threads=1,
    )
    assert same_weights(stream, again)


def test_early_stopping_keeps_the_best_weights(racing_demos, caplog):
    records = []
    cfg = dataclasses.replace(FAST, max_epochs=30, patience=1, learning_rate=0.05)
    with caplog.at_level(logging.INFO, logger="demo2rl.learning.bc"):
        result = bc.train_bc(
            racing_demos,
            policy_cfg=POLICY_CFG,
            bc_cfg=cfg,
            seed=0,
            on_epoch=records.append,
            threads=1,
        )
    assert result.stop_reason == "patience: no valid improvement for 1 epochs"
    assert "BC stopped: patience" in caplog.text and "epoch 1/30 train_nll" in caplog.text
    assert records == result.history and len(records) < 30
    valid = [r["valid_nll"] for r in result.history]
    assert result.best_epoch == 1 + int(np.argmin(valid))
    assert result.best_valid_nll == min(valid)
    with bc_data.open_split_dataset(
        racing_demos
    ) as data:  # the returned policy is the best epoch's
        loader = bc_data.MemoryLoader(
            *data.load(data.valid_mask, result.normalizer, result.action_space), torch.device("cpu")
        )
    assert math.isclose(bc.evaluate_nll(result.policy, loader), min(valid), rel_tol=1e-6)
    short = bc.train_bc(racing_demos, policy_cfg=POLICY_CFG, bc_cfg=FAST, seed=0, threads=1)
    assert short.stop_reason == "max_epochs reached (3)" and len(short.history) == 3


def test_loss_trains_mean_and_log_std():
    obs_space = gym.spaces.Box(-1, 1, (4,), np.float32)
    act_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    torch.manual_seed(0)
    policy = P.build_policy(obs_space, act_space, POLICY_CFG)
    obs, actions = torch.randn(32, 4), torch.rand(32, 2) * 2 - 1
    loss, nll, entropy = bc.bc_loss(policy, obs, actions, ent_coef=0.0, l2_coef=0.0)
    assert torch.equal(loss.detach(), nll)
    loss.backward()
    assert policy.log_std.grad.abs().sum() > 0
    assert policy.action_net.weight.grad.abs().sum() > 0
    assert policy.value_net.weight.grad is None  # the critic is not part of BC
    _, log_prob, ent = policy.evaluate_actions(obs, actions)  # same distribution as PPO's
    torch.testing.assert_close(nll, -log_prob.mean().detach())
    torch.testing.assert_close(entropy, ent.mean().detach())
    reg, _, _ = bc.bc_loss(policy, obs, actions, ent_coef=0.5, l2_coef=0.1)
    l2 = sum(w.pow(2).sum() for w in bc._actor_weights(policy))
    torch.testing.assert_close(reg.detach(), (nll - 0.5 * entropy + 0.1 * l2).detach())


def test_rescaled_action_space_is_learned_in_env_units():
    demos = _linear_demos(n_episodes=20, length=50)
    cfg = configs.bc(device="cpu", batch_size=64, max_epochs=40, learning_rate=3e-3)
    result = bc.train_bc(demos, policy_cfg=POLICY_CFG, bc_cfg=cfg, seed=0, threads=1)
    assert P.needs_rescale(result.action_space)
    obs = np.random.default_rng(9).uniform(-1, 1, size=(256, 3)).astype(np.float32)
    actions = acting.make_actor(result.policy, result.normalizer, result.action_space)(obs)
    np.testing.assert_allclose(actions, _linear_expert(obs), atol=0.25)


def test_dataset_errors_name_the_file_and_the_problem(racing_demos, racing_file, tmp_path):
    racing = tasks.make_env(ENV_ID, ENV_KWARGS)
    dataset.check_dataset(racing_demos, racing.observation_space, racing.action_space, ENV_ID)
    car = gym.make("MountainCarContinuous-v0")
    with pytest.raises(dataset.DatasetError, match=r"demos.h5: observation_space shape \(39,\)"):
        bc.train_bc(
            racing_file,
            policy_cfg=POLICY_CFG,
            bc_cfg=FAST,
            seed=0,
            observation_space=car.observation_space,
            threads=1,
        )
    with pytest.raises(dataset.DatasetError, match=r"action_space shape \(2,\) vs \(1,\)"):
        dataset.check_dataset(racing_demos, None, car.action_space, None, path="x.h5")
    with pytest.raises(dataset.DatasetError, match="env_id 'Racing-v0' vs expected 'Mount"):
        dataset.check_dataset(racing_demos, None, None, "MountainCarContinuous-v0")
    dataset.check_dataset(racing_demos, None, None, "demo2rl.envs:Racing-v0")

    no_train = dataclasses.replace(
        racing_demos, split={"train": np.zeros(0, np.int64), "valid": np.arange(40)}
    )
    with pytest.raises(dataset.DatasetError, match="training split is empty"):
        bc.train_bc(no_train, policy_cfg=POLICY_CFG, bc_cfg=FAST, seed=0, threads=1)
    with pytest.raises(dataset.DatasetError, match="no train/valid split"):
        bc.train_bc(
            dataclasses.replace(racing_demos, split=None),
            policy_cfg=POLICY_CFG,
            bc_cfg=FAST,
            seed=0,
            threads=1,
        )
    with pytest.raises(dataset.DatasetError, match="missing.h5: no such dataset file"):
        bc.train_bc(tmp_path / "missing.h5", policy_cfg=POLICY_CFG, bc_cfg=FAST, seed=0, threads=1)


REFUSED = "BC does not train on such data (demo2rl's import refuses it)"


@pytest.mark.parametrize("memory_fraction", [FAST.memory_fraction, 1e-12], ids=["memory", "stream"])
def test_a_nan_observation_fails_naming_the_file_the_field_and_the_row(
    tmp_path, memory_fraction, caplog
):
    """NaN in the training split's observations (statistics recorded before it, so finite)
    fails before any epoch, naming the dataset, the field and the step row, not the learning
    rate; in memory and streamed (the row lies in the first block)."""
    demos = _linear_demos(n_episodes=10, length=20)
    demos.stats = dataset.statistics(demos, demos.split["train"])
    episode = int(demos.split["train"][1])
    demos.steps["observations"][episode * 20 + 7, 1] = np.nan
    path = tmp_path / "nan.h5"
    with caplog.at_level(logging.INFO, logger="demo2rl.learning.bc"):
        message = _refused(path, demos, memory_fraction)
    assert ("streaming" in caplog.text) == (memory_fraction == 1e-12)
    where = f"step row {episode * 20 + 7} (episode {episode}, its step 7, training split)"
    assert message == (
        f"{path}: its observations are not finite: {where} holds nan at element 1; {REFUSED}"
    )
    demos.stats = None  # no statistics: normalised with NaN, every row would look at fault
    assert _refused(None, demos) == (
        f"<in-memory dataset>: its observations are not finite: {where} holds nan at element 1; "
        f"{REFUSED}"
    )


def test_an_inf_action_fails_naming_the_file_the_field_and_the_row(tmp_path):
    demos = _linear_demos(n_episodes=10, length=20)
    demos.stats = dataset.statistics(demos, demos.split["train"])
    episode = int(demos.split["valid"][0])
    demos.steps["actions"][episode * 20 + 19, 1] = -np.inf
    path = tmp_path / "inf.h5"
    assert _refused(path, demos) == (
        f"{path}: its actions are not finite: step row {episode * 20 + 19} (episode {episode}, "
        f"its step 19, validation split) holds -inf at element 1; {REFUSED}"
    )


def test_statistics_that_are_not_finite_fail_naming_the_file_and_the_key(tmp_path):
    """A NaN observation in the training split makes the statistics computed over it NaN (as
    the merge computes them): the statistics are named first; an inf in any key is too."""
    demos = _linear_demos(n_episodes=10, length=20)
    demos.steps["observations"][20 * int(demos.split["train"][0]) + 3, 2] = np.nan
    demos.stats = dataset.statistics(demos, demos.split["train"])
    path = tmp_path / "nan-stats.h5"
    assert _refused(path, demos) == (
        f"{path}: its statistics are not finite: obs_mean holds nan at element 2 (NaN or inf "
        f"in the training split's observations); {REFUSED}"
    )
    clean = _linear_demos(n_episodes=10, length=20)
    clean.stats = dataset.statistics(clean, clean.split["train"])
    clean.stats["act_std"][1] = np.inf
    path = tmp_path / "inf-stats.h5"
    assert _refused(path, clean) == (
        f"{path}: its statistics are not finite: act_std holds inf at element 1 (NaN or inf "
        f"in the training split's actions); {REFUSED}"
    )


def _refused(
    path: Path | None, demos: dataset.Demos, memory_fraction: float = FAST.memory_fraction
) -> str:
    """The message of the DatasetError train_bc raises on ``demos`` (written to ``path``, a
    valid file with its content hash; None: in memory), once checked that no epoch ran and
    that the learning rate is not blamed."""
    if path is not None:
        dataset.write(path, demos)
    cfg = dataclasses.replace(FAST, memory_fraction=memory_fraction)
    records: list[dict[str, float]] = []
    with pytest.raises(dataset.DatasetError) as refused:
        bc.train_bc(
            demos if path is None else path,
            policy_cfg=POLICY_CFG,
            bc_cfg=cfg,
            seed=0,
            threads=1,
            on_epoch=records.append,
        )
    assert records == [], "an epoch ran"
    assert "learning_rate" not in str(refused.value)
    return str(refused.value)


def _linear_expert(obs: np.ndarray) -> np.ndarray:
    """An expert in env units for the action space [-2, 2] x [0, 10]."""
    a0 = np.clip(2.0 * obs[:, 0] - obs[:, 1], -2.0, 2.0)
    a1 = 5.0 + 4.0 * obs[:, 2]
    return np.stack([a0, a1], axis=1).astype(np.float32)


def _linear_demos(n_episodes: int, length: int) -> dataset.Demos:
    rng = np.random.default_rng(0)
    n = n_episodes * length
    obs = rng.uniform(-1, 1, size=(n, 3)).astype(np.float32)
    steps = {
        "observations": obs,
        "actions": _linear_expert(obs),
        "rewards": np.zeros(n),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
    }
    episodes = {
        "index": np.arange(n_episodes),
        "seed": np.arange(n_episodes),
        "start": np.arange(n_episodes) * length,
        "length": np.full(n_episodes, length),
        "return": np.zeros(n_episodes),
        "final_observation": np.zeros((n_episodes, 3), np.float32),
    }
    low, high = np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32)
    attrs = dataset.episode_attrs(
        env_id="Linear-v0",
        env_kwargs={},
        env_spec="{}",
        observation_space=gym.spaces.Box(-1, 1, (3,), np.float32),
        action_space=gym.spaces.Box(low, high, dtype=np.float32),
        expert={"entry_point": "tests:linear", "kwargs": {}},
        base_seed=0,
        first_episode=0,
        n_episodes=n_episodes,
        versions={},
        code_revision={},
    )
    split = dataset.episode_split(n_episodes, 0.2, seed=0)
    return dataset.Demos(steps, episodes, {}, attrs, split)
