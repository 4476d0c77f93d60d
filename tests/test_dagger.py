"""DAgger's library side: rollouts with a teacher (who acts, what is recorded), beta per round,
its seed block, a round's shard in the demonstrations' format, and the clone's dataset check.

On CartPole-v1 with the classic expert (it balances for 500 steps) and a learner that always
pushes left (its episodes end within a dozen steps), so who drove a step shows in the states."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import configs
import gymnasium as gym
import numpy as np
import pytest
import torch

from demo2rl import seeds, tasks
from demo2rl.demos import collect, dataset, rollout
from demo2rl.learning import checkpoints, dagger, evaluation
from demo2rl.learning import policy as P
from demo2rl.tasks import deadline

sys.path.insert(0, str(Path(__file__).parent))  # probe_tasks: a learner that hangs

ENV_ID = "CartPole-v1"
EXPERT = "demo2rl.experts.classic:cart_pole"
TASK = configs.task(ENV_ID, entry_point=EXPERT)
expert = tasks.load_expert(EXPERT)


def push_left(obs: np.ndarray) -> np.ndarray:
    """A learner that always pushes left: it drops the pole within a dozen steps."""
    return np.zeros(len(obs), np.int64)


def taught(policy, episode_seeds, beta: float, n_envs: int = 3):
    """``policy`` as the learner of the expert, one episode per seed."""
    teacher = rollout.Teacher(expert, beta=beta)
    return rollout.run_episodes(TASK, policy, episode_seeds, n_envs=n_envs, teacher=teacher)


def replay(seed: int, labels: np.ndarray, beta: float) -> np.ndarray:
    """The observations of an episode whose recorded actions are ``labels``, re-run in one env
    with the executed actions as the rollout chose them: the label where the teacher drives,
    else the left-pushing learner's."""
    env = gym.make(ENV_ID)
    obs, _ = env.reset(seed=seed)
    driven = rollout.teacher_drives(np.full(len(labels), seed), np.arange(len(labels)), beta)
    executed = np.where(driven, labels, 0)
    rows = [obs]
    for action in executed[:-1]:
        obs, *_ = env.step(int(action))
        rows.append(obs)
    env.close()
    return np.array(rows)


def episode_rows(episodes, e: int) -> slice:
    start = int(episodes["start"][e])
    return slice(start, start + int(episodes["length"][e]))


# --------------------------------------------------------------------------------------------
# rollouts with a teacher


def test_with_beta_1_the_teacher_drives_and_the_episodes_are_the_experts():
    episode_seeds = [seeds.dagger_seed(0, 1, e) for e in range(4)]
    steps, episodes, info = taught(push_left, episode_seeds, beta=1.0)
    ref_steps, ref_episodes, ref_info = rollout.run_episodes(TASK, expert, episode_seeds, n_envs=2)
    for key in dataset.STEP_KEYS:
        np.testing.assert_array_equal(steps[key], ref_steps[key], err_msg=key)
    for key in ref_episodes:
        np.testing.assert_array_equal(episodes[key], ref_episodes[key], err_msg=key)
    assert info.keys() == ref_info.keys()
    assert episodes[rollout.TEACHER_STEPS].tolist() == episodes["length"].tolist()
    assert episodes["length"].min() == 500  # (the expert's: the learner never acted)


def test_with_beta_0_the_learner_drives_and_the_expert_labels_its_states():
    episode_seeds = [seeds.dagger_seed(0, 1, e) for e in range(5)]
    steps, episodes, _ = taught(push_left, episode_seeds, beta=0.0)
    assert episodes["length"].max() < 30, "the learner drove: the pole fell within steps"
    assert episodes[rollout.TEACHER_STEPS].tolist() == [0] * 5
    obs, labels = steps["observations"], steps["actions"]
    np.testing.assert_array_equal(labels, expert(obs), "every action is the expert's label")
    assert labels.any(), "labels the learner never gave: the expert's, not the executed"
    for e, seed in enumerate(episode_seeds):
        rows = episode_rows(episodes, e)
        np.testing.assert_array_equal(obs[rows], replay(seed, labels[rows], 0.0))


def test_a_mixture_executes_the_teachers_action_on_its_steps_and_records_labels():
    episode_seeds = [seeds.dagger_seed(3, 2, e) for e in range(6)]
    beta = 0.7
    steps, episodes, _ = taught(push_left, episode_seeds, beta)
    obs, labels = steps["observations"], steps["actions"]
    np.testing.assert_array_equal(labels, expert(obs))
    for e, seed in enumerate(episode_seeds):
        rows = episode_rows(episodes, e)
        np.testing.assert_array_equal(obs[rows], replay(seed, labels[rows], beta))
        n = rows.stop - rows.start
        driven = rollout.teacher_drives(np.full(n, seed), np.arange(n), beta)
        assert episodes[rollout.TEACHER_STEPS][e] == driven.sum()
    assert 0 < episodes[rollout.TEACHER_STEPS].sum() < len(labels)


def test_the_mixture_does_not_depend_on_the_batch_or_the_sharding():
    episode_seeds = [seeds.dagger_seed(1, 1, e) for e in range(7)]
    whole = taught(push_left, episode_seeds, 0.5, n_envs=7)
    for n_envs in (1, 3):
        halves = [
            taught(push_left, part, 0.5, n_envs) for part in (episode_seeds[:3], episode_seeds[3:])
        ]
        one = taught(push_left, episode_seeds, 0.5, n_envs)
        for key in dataset.STEP_KEYS:
            np.testing.assert_array_equal(one[0][key], whole[0][key])
            joined = np.concatenate([h[0][key] for h in halves])
            np.testing.assert_array_equal(joined, whole[0][key])
        for key in ("length", rollout.TEACHER_STEPS):
            np.testing.assert_array_equal(one[1][key], whole[1][key])


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_the_teacher_drives_a_fraction_beta_of_the_steps(beta):
    episode_seeds = np.repeat(np.arange(1000), 200)
    steps = np.tile(np.arange(200), 1000)
    driven = rollout.teacher_drives(episode_seeds, steps, beta)
    assert driven.mean() == pytest.approx(beta, abs=0.005)  # 200000 draws: sd <= 0.0011
    # the choice is the same for every call, and a higher beta only adds teacher steps
    np.testing.assert_array_equal(driven, rollout.teacher_drives(episode_seeds, steps, beta))
    assert not (driven & ~rollout.teacher_drives(episode_seeds, steps, min(1.0, beta + 0.2))).any()
    # and no pattern along the steps of one episode or across the episodes of one step
    per_step = driven.reshape(1000, 200)
    assert np.abs(per_step.mean(axis=0) - beta).max() < 0.08
    assert np.abs(per_step.mean(axis=1) - beta).max() < 0.15


def test_a_teachers_beta_outside_0_1_is_refused():
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="beta must be in"):
            rollout.Teacher(expert, beta=bad)


def test_a_hung_learner_is_named_as_the_learner():
    learner = tasks.load_expert("probe_tasks:hanging_expert")
    with pytest.raises(
        deadline.UserCodeTimeout, match=r"^the learner probe_tasks:hanging_expert did not return"
    ):
        rollout.run_episodes(
            dataclasses.replace(TASK, timeout_s=0.5),
            learner,
            [1, 2],
            n_envs=2,
            teacher=rollout.Teacher(expert, beta=0.0),
        )


# --------------------------------------------------------------------------------------------
# beta per round and the seed block


def test_beta_is_the_decay_to_the_round():
    assert dagger.beta(0, 0.5) == 1.0  # round 0: behaviour cloning on the expert's data
    assert [dagger.beta(r, 0.5) for r in (1, 2, 3)] == [0.5, 0.25, 0.125]
    assert dagger.beta(1, 0.0) == 0.0 and dagger.beta(4, 1.0) == 1.0
    for round_, decay in ((-1, 0.5), (1, 1.5), (1, -0.1)):
        with pytest.raises(ValueError):
            dagger.beta(round_, decay)


def test_dagger_seeds_are_disjoint_from_each_round_and_every_other_use():
    for base in (0, 7, 12345, seeds.MAX_BASE_SEED - 1):
        rounds = [
            {seeds.dagger_seed(base, r, e) for e in (*range(500), seeds.DAGGER_ROUND_STRIDE - 1)}
            for r in (1, 2, 3, seeds.MAX_DAGGER_ROUND)
        ]
        assert sum(map(len, rounds)) == len(set().union(*rounds)), "rounds share no seed"
        ours = set().union(*rounds)
        last = seeds.BLOCK - 1
        others = {seeds.demo_seed(base, e) for e in (*range(500), last)}
        others |= set(evaluation.heldout_seeds(base, 500)) | {seeds.eval_seed(base, last)}
        others |= {seeds.tuning_seed(base, e) for e in (*range(500), last)}
        others |= {seeds.rl_seed(base, s) + i for s in (0, 1, 999) for i in (0, 63, 99_999)}
        assert not ours & others
        assert max(ours) < 2**30  # below the racing task's unseeded resets
    for bad in ((0, 0, 0), (0, seeds.MAX_DAGGER_ROUND + 1, 0), (0, 1, seeds.DAGGER_ROUND_STRIDE)):
        with pytest.raises(ValueError):
            seeds.dagger_seed(*bad)


# --------------------------------------------------------------------------------------------
# a round's shard


def save_clone(path: Path, dataset_hash: str, **meta) -> Path:
    """An untrained CartPole network saved as a clone that claims ``dataset_hash``."""
    obs_space, act_space = tasks.spaces(ENV_ID, {})
    torch.manual_seed(0)
    net = P.build_policy(obs_space, act_space, configs.policy(net_arch=[16]))
    norm = P.ObsNormalizer(np.zeros(4), np.ones(4))
    checkpoints.save_checkpoint(
        path,
        net,
        norm,
        policy_cfg=configs.policy(net_arch=[16]),
        observation_space=obs_space,
        action_space=act_space,
        meta={"dataset_hash": dataset_hash, **meta},
    )
    return path


def relabel(clone: Path, episodes: range, n_envs: int = 2, **options) -> dataset.Demos:
    return dagger.relabel_shard(
        task=TASK,
        learner=clone,
        round=1,
        episodes=episodes,
        base_seed=5,
        first_index=4,
        beta=options.pop("beta", 0.5),
        n_envs=n_envs,
        **options,
    )


def demonstrations(n: int) -> dataset.Demos:
    """``n`` of the expert's demonstrations of the test task, under the rounds' base seed."""
    return collect.collect_shard(task=TASK, base_seed=5, episodes=range(n), n_envs=2)


def test_a_round_shard_merges_after_the_demonstrations(tmp_path):
    demo = demonstrations(4)
    digest = dataset.write(tmp_path / "demos.h5", demo)
    clone = save_clone(tmp_path / "clone.pt", digest)
    shard = relabel(clone, range(3), demos=tmp_path / "demos.h5")
    assert shard.attrs["first_episode"] == 4 and shard.episodes["index"].tolist() == [4, 5, 6]
    assert shard.episodes["seed"].tolist() == [seeds.dagger_seed(5, 1, e) for e in range(3)]
    assert shard.attrs["dagger_round"] == 1 and shard.attrs["beta"] == 0.5
    assert shard.attrs["learner"] == str(clone)
    assert shard.attrs["learner_hash"] == checkpoints.file_digest(clone)
    assert shard.attrs["expert_calls"] == shard.n_steps
    assert 0 < shard.attrs["expert_steps"] < shard.n_steps
    np.testing.assert_array_equal(shard.steps["actions"], expert(shard.steps["observations"]))
    for key in dataset.DEFINING_ATTRS:
        assert shard.attrs[key] == demo.attrs[key], key
    dataset.write(tmp_path / "round1.h5", shard)
    merged = tmp_path / "aggregate.h5"
    dataset.merge_files(
        [tmp_path / "demos.h5", tmp_path / "round1.h5"], merged, n_episodes=7, valid_fraction=0.2
    )
    aggregate = dataset.read(merged, verify=True)
    assert aggregate.episodes["index"].tolist() == list(range(7))
    np.testing.assert_array_equal(
        aggregate.steps["actions"], np.concatenate([demo.steps["actions"], shard.steps["actions"]])
    )


def test_a_rounds_data_does_not_depend_on_its_sharding_or_batch(tmp_path):
    clone = save_clone(tmp_path / "clone.pt", "d" * 64)
    whole = relabel(clone, range(5), n_envs=5)
    parts = [relabel(clone, r, n_envs=2) for r in (range(2), range(2, 5))]
    assert [p.attrs["first_episode"] for p in parts] == [4, 6]
    for key in dataset.STEP_KEYS:
        joined = np.concatenate([p.steps[key] for p in parts])
        np.testing.assert_array_equal(joined, whole.steps[key], err_msg=key)
    assert sum(p.attrs["expert_steps"] for p in parts) == whole.attrs["expert_steps"]


def test_a_round_refuses_a_learner_of_other_demonstrations(tmp_path):
    dataset.write(tmp_path / "demos.h5", demonstrations(1))
    clone = save_clone(tmp_path / "clone.pt", "0" * 64)
    with pytest.raises(checkpoints.CheckpointError, match="trained on the dataset with content"):
        relabel(clone, range(1), demos=tmp_path / "demos.h5")


# --------------------------------------------------------------------------------------------
# a DAgger clone belongs to the demonstrations its aggregate grew from


def test_a_dagger_clone_is_checked_against_its_demonstrations():
    demos_hash, aggregate_hash = "a" * 64, "b" * 64
    ckpt = {"meta": {"dataset_hash": aggregate_hash, "demos_hash": demos_hash}}
    checkpoints.check_dataset_hash("clone.pt", ckpt, "demos.h5", demos_hash)
    with pytest.raises(checkpoints.CheckpointError) as caught:
        checkpoints.check_dataset_hash("clone.pt", ckpt, "demos.h5", aggregate_hash)
    message = str(caught.value)
    assert message.startswith("clone.pt: grown from the demonstrations with content hash aaaa")
    assert f"aggregate {aggregate_hash}" in message
    assert f"dataset demos.h5 has content hash {aggregate_hash}" in message
    # a BC clone or an RL run: its dataset_hash, as before
    plain = {"meta": {"dataset_hash": demos_hash}}
    checkpoints.check_dataset_hash("bc.pt", plain, "demos.h5", demos_hash)
    with pytest.raises(checkpoints.CheckpointError, match=r"bc.pt: trained on the dataset with"):
        checkpoints.check_dataset_hash("bc.pt", plain, "demos.h5", aggregate_hash)
