"""Collection: episode seeds, shard ranges, shard-count invariance, and the generic task path."""

from __future__ import annotations

import sys
from pathlib import Path

import configs
import numpy as np
import pytest

from demo2rl import seeds, tasks
from demo2rl.demos import collect, dataset, rollout

sys.path.insert(0, str(Path(__file__).parent))  # user_tasks, a user's own task module

RACING = configs.task(
    "Racing-v0",
    {"max_steps": 60},
    entry_point="demo2rl.experts.racing:pure_pursuit",
    kwargs={"margin": 0.65},
)


def collect_merged(n_episodes: int, n_shards: int, n_envs: int, tmp: Path) -> dataset.Demos:
    """The collect_shard/merge_demos pipeline without Snakemake, written and read back."""
    paths = []
    for k in range(n_shards):
        shard = collect.collect_shard(
            task=RACING,
            base_seed=3,
            episodes=collect.shard_episodes(n_episodes, n_shards, k),
            n_envs=n_envs,
        )
        paths.append(tmp / f"shard-{k}.h5")
        dataset.write(paths[-1], shard)
    shards = [dataset.read(p, verify=True) for p in paths]
    merged = dataset.merge(
        shards, [str(p) for p in paths], n_episodes=n_episodes, valid_fraction=0.2
    )
    dataset.write(tmp / "demos.h5", merged)
    return dataset.read(tmp / "demos.h5", verify=True)


@pytest.mark.parametrize("n,k", [(10, 3), (7, 7), (100, 6), (5, 1)])
def test_shards_take_contiguous_ranges_covering_all_episodes(n, k):
    ranges = [collect.shard_episodes(n, k, s) for s in range(k)]
    assert [e for r in ranges for e in r] == list(range(n))
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


def test_merged_dataset_is_identical_for_any_shard_count_and_batch_size(tmp_path):
    one = collect_merged(9, 1, 9, tmp_path / "one")
    three = collect_merged(9, 3, 2, tmp_path / "three")
    for key in dataset.STEP_KEYS:
        np.testing.assert_array_equal(one.steps[key], three.steps[key])
    for key in dataset.EPISODE_KEYS:
        np.testing.assert_array_equal(one.episodes[key], three.episodes[key])
    np.testing.assert_array_equal(one.split["valid"], three.split["valid"])
    assert one.attrs["content_hash"] == three.attrs["content_hash"]
    assert [seeds.demo_seed(3, e) for e in range(9)] == one.episodes["seed"].tolist()


def test_episode_table_matches_steps(tmp_path):
    demos = collect_merged(6, 2, 4, tmp_path)
    e = demos.episodes
    assert demos.n_steps == e["length"].sum()
    for i in range(demos.n_episodes):
        rows = slice(e["start"][i], e["start"][i] + e["length"][i])
        assert e["return"][i] == pytest.approx(demos.steps["rewards"][rows].sum())
        done = demos.steps["terminated"][rows] | demos.steps["truncated"][rows]
        assert done[-1] and not done[:-1].any()
    assert np.all(e["length"] == 60)  # the expert stays on track until the step limit
    assert "laps" in demos.info or "progress" in demos.info


def test_generic_gymnasium_task_through_config_alone():
    steps, episodes, _ = rollout.run_episodes(
        configs.task("MountainCarContinuous-v0"),
        tasks.load_expert("demo2rl.experts.classic:mountain_car"),
        [seeds.demo_seed(0, e) for e in range(6)],
        n_envs=4,
    )
    assert episodes["length"].sum() == len(steps["rewards"])
    ends = episodes["start"] + episodes["length"] - 1
    assert steps["terminated"][ends].all(), "the heuristic expert reaches the flag"
    assert episodes["return"].min() > 80


def test_a_user_task_returning_nan_is_named():
    with pytest.raises(rollout.RolloutError, match=r"user_tasks:NanObs-v0 returned a non-finite"):
        rollout.run_episodes(
            configs.task("user_tasks:NanObs-v0"),
            tasks.load_expert("user_tasks:zero_expert"),
            [1, 2],
            n_envs=2,
        )


def test_an_expert_returning_the_wrong_shape_is_named():
    with pytest.raises(tasks.TaskError, match=r"expert returned actions of shape \(2, 3\)"):
        rollout.run_episodes(
            configs.task("user_tasks:NanObs-v0"),
            tasks.load_expert("user_tasks:wrong_shape_expert"),
            [1, 2],
            n_envs=2,
        )


@pytest.mark.parametrize(
    "entry_point,message",
    [
        ("no_such_module:f", "cannot import 'no_such_module'"),
        ("user_tasks:missing", "'user_tasks' has no 'missing'"),
        ("user_tasks:NOT_CALLABLE", "is not callable"),
        ("no_colon", "is not of the form"),
    ],
)
def test_bad_expert_entry_points(entry_point, message):
    with pytest.raises(tasks.TaskError, match=message):
        tasks.load_expert(entry_point)


def test_a_task_without_an_expert_is_refused():
    with pytest.raises(ValueError, match="needs the task's expert"):
        collect.collect_shard(
            task=configs.task("CartPole-v1"), base_seed=0, episodes=range(2), n_envs=2
        )


def test_the_recorded_env_spec_is_the_same_text_in_every_process():
    """A frame stack's spec is not JSON (its merge function is a kwarg): its repr is recorded,
    without the addresses of objects, which differ from one process to the next."""
    env = tasks.make_env("Racing-v0", {}, frame_stack=2)
    try:
        text = collect.spec_json(env)
    finally:
        env.close()
    assert "_merge_stack" in text and " at 0x" not in text, text[-300:]
