"""The HDF5 dataset format: round trip, metadata, hashing, split, atomic writes, bad files."""

from __future__ import annotations

import os

import gymnasium as gym
import h5py
import numpy as np
import pytest

from demo2rl.demos import dataset


def make_demos(n_episodes: int = 4, first: int = 0, seed: int = 0) -> dataset.Demos:
    rng = np.random.default_rng(seed + first)
    lengths = rng.integers(3, 9, size=n_episodes)
    n = int(lengths.sum())
    steps = {
        "observations": rng.normal(size=(n, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        "rewards": rng.normal(size=n),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
    }
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    steps["truncated"][starts + lengths - 1] = True
    episodes = {
        "index": np.arange(first, first + n_episodes),
        "seed": 100 + np.arange(first, first + n_episodes),
        "start": starts,
        "length": lengths,
        "return": np.array(
            [steps["rewards"][s : s + k].sum() for s, k in zip(starts, lengths, strict=True)]
        ),
        "final_observation": rng.normal(size=(n_episodes, 3)).astype(np.float32),
    }
    attrs = dataset.episode_attrs(
        env_id="Toy-v0",
        env_kwargs={"k": 1},
        env_spec="{}",
        observation_space=gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
        expert={"entry_point": "m:f", "kwargs": {}},
        base_seed=seed,
        first_episode=first,
        n_episodes=n_episodes,
        versions={"numpy": np.__version__},
        code_revision={"commit": "abc", "dirty": False},
    )
    return dataset.Demos(steps, episodes, {"laps": np.arange(n_episodes, dtype=float)}, attrs)


def test_round_trip_keeps_arrays_and_metadata(tmp_path):
    demos = make_demos()
    digest = dataset.write(tmp_path / "d.h5", demos)
    back = dataset.read(tmp_path / "d.h5", verify=True)
    for key in dataset.STEP_KEYS:
        np.testing.assert_array_equal(back.steps[key], demos.steps[key])
        assert back.steps[key].dtype == demos.steps[key].dtype
    for key in dataset.EPISODE_KEYS:
        np.testing.assert_array_equal(back.episodes[key], demos.episodes[key])
    np.testing.assert_array_equal(back.info["laps"], demos.info["laps"])
    assert back.attrs["content_hash"] == digest == dataset.content_hash(back)
    assert back.attrs["env_kwargs"] == {"k": 1}
    assert back.attrs["action_space"]["type"] == "Box"
    assert back.attrs["action_space"]["high"] == [1.0, 1.0]
    assert back.attrs["code_revision"] == {"commit": "abc", "dirty": False}
    with h5py.File(tmp_path / "d.h5") as f:
        assert f["steps/observations"].chunks is not None


def test_space_description_round_trip_and_mismatch():
    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    for space in (
        gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
        box,
        gym.spaces.Discrete(4, 1),
    ):
        desc = dataset.describe_space(space)
        assert dataset.describe_space(dataset.space_from_description(desc)) == desc
        assert dataset.space_mismatch("action_space", desc, desc) is None
    wide = dataset.describe_space(gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    problem = dataset.space_mismatch("action_space", dataset.describe_space(box), wide)
    assert problem == "action_space shape (1,) vs (2,)"


def test_next_observations_follow_episodes():
    demos = make_demos()
    nxt = demos.next_observations()
    ends = demos.episodes["start"] + demos.episodes["length"] - 1
    np.testing.assert_array_equal(nxt[ends], demos.episodes["final_observation"])
    inner = np.setdiff1d(np.arange(demos.n_steps), ends)
    np.testing.assert_array_equal(nxt[inner], demos.steps["observations"][inner + 1])


def test_step_rows_select_whole_episodes():
    demos = make_demos(5)
    rows = demos.step_rows(np.array([1, 3]))
    e = demos.episodes
    want = np.concatenate(
        [np.arange(e["start"][i], e["start"][i] + e["length"][i]) for i in (1, 3)]
    )
    np.testing.assert_array_equal(rows, want)


def test_hash_changes_with_data_but_not_with_provenance():
    a, b = make_demos(), make_demos()
    b.attrs["created"] = "another time"
    b.attrs["versions"] = {"numpy": "0"}
    assert dataset.content_hash(a) == dataset.content_hash(b)
    b.steps["actions"][0, 0] += 1e-6
    assert dataset.content_hash(a) != dataset.content_hash(b)


def test_merge_concatenates_contiguous_shards_and_splits_by_episode():
    shards = [make_demos(3, first=0), make_demos(4, first=3), make_demos(2, first=7)]
    merged = dataset.merge(shards, ["a", "b", "c"], n_episodes=9, valid_fraction=0.25)
    assert merged.n_episodes == 9
    assert merged.n_steps == sum(s.n_steps for s in shards)
    np.testing.assert_array_equal(merged.episodes["index"], np.arange(9))
    rows = merged.step_rows(np.array([3]))
    first_of_b = shards[1].steps["actions"][shards[1].step_rows(np.array([0]))]
    np.testing.assert_array_equal(merged.steps["actions"][rows], first_of_b)
    split = merged.split
    assert len(split["valid"]) == 2 and len(split["train"]) == 7
    assert not set(split["valid"]) & set(split["train"])
    train_obs = merged.steps["observations"][merged.step_rows(split["train"])]
    np.testing.assert_allclose(merged.stats["obs_mean"], train_obs.mean(axis=0), rtol=1e-6)


def test_merge_rejects_gaps_and_foreign_shards():
    with pytest.raises(dataset.DatasetError, match="b: starts at episode 4, expected 3"):
        dataset.merge(
            [make_demos(3), make_demos(4, first=4)], ["a", "b"], n_episodes=8, valid_fraction=0.1
        )
    other = make_demos(4, first=3)
    other.attrs["env_id"] = "Other-v0"
    with pytest.raises(dataset.DatasetError, match="b: attribute 'env_id' differs"):
        dataset.merge([make_demos(3), other], ["a", "b"], n_episodes=7, valid_fraction=0.1)
    with pytest.raises(dataset.DatasetError, match="shards hold 3 episodes, expected 5"):
        dataset.merge([make_demos(3)], ["a"], n_episodes=5, valid_fraction=0.1)


def test_split_is_fixed_by_seed():
    a = dataset.episode_split(50, 0.2, seed=3)
    b = dataset.episode_split(50, 0.2, seed=3)
    c = dataset.episode_split(50, 0.2, seed=4)
    np.testing.assert_array_equal(a["valid"], b["valid"])
    assert len(a["valid"]) == 10
    assert not np.array_equal(a["valid"], c["valid"])


def test_a_write_that_fails_midway_leaves_neither_file_nor_temporary_file(tmp_path, monkeypatch):
    """The write fails once the temporary file holds part of the dataset (the steps written,
    the episode table not): that file existed then, and is gone afterwards, with no final file."""
    seen: dict[str, list[str]] = {}
    create_dataset = h5py.Group.create_dataset

    def fail_at_the_returns(group, name, *args, **kwargs):
        if group.name == "/episodes" and name == "return":
            seen["during"] = sorted(p.name for p in tmp_path.iterdir())
            raise RuntimeError("a failure in the middle of the write")
        return create_dataset(group, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", fail_at_the_returns)
    with pytest.raises(RuntimeError, match="in the middle of the write"):
        dataset.write(tmp_path / "d.h5", make_demos())
    assert seen["during"] == [f".d.h5.tmp-{os.getpid()}"]
    assert list(tmp_path.iterdir()) == []


def test_bad_files_are_named(tmp_path):
    with pytest.raises(dataset.DatasetError, match="missing.h5: no such dataset file"):
        dataset.read(tmp_path / "missing.h5")
    dataset.write(tmp_path / "d.h5", make_demos())
    raw = (tmp_path / "d.h5").read_bytes()
    (tmp_path / "cut.h5").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(dataset.DatasetError, match="cut.h5: unreadable or incomplete"):
        dataset.read(tmp_path / "cut.h5")
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(dataset.DatasetError, match="junk.h5"):
        dataset.read(tmp_path / "junk.h5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.attrs["format"] = "something-else"
    with pytest.raises(dataset.DatasetError, match="other.h5: not a demo2rl-demos file"):
        dataset.read(tmp_path / "other.h5")


def test_verify_detects_modified_data(tmp_path):
    dataset.write(tmp_path / "d.h5", make_demos())
    with h5py.File(tmp_path / "d.h5", "r+") as f:
        f["steps/rewards"][0] += 1.0
    dataset.read(tmp_path / "d.h5")  # structure is fine
    with pytest.raises(dataset.DatasetError, match="content hash mismatch"):
        dataset.read(tmp_path / "d.h5", verify=True)


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    """A temporary file of a dead process is an orphan and goes; one of a live process (another
    writer, still writing) stays, and so does a file whose suffix is no pid at all."""
    dead = 2**22 + 12345  # above the default pid_max: no such process
    orphan = tmp_path / f".d.h5.tmp-{dead}"
    orphan.write_bytes(b"half a file")
    live = tmp_path / f".d.h5.tmp-{os.getppid()}"  # this test's parent: alive while it runs
    live.write_bytes(b"another writer's half")
    other = tmp_path / ".d.h5.tmp-notes"  # no pid suffix: not a writer's file
    other.write_bytes(b"")
    dataset.write(tmp_path / "d.h5", make_demos())
    assert not orphan.exists()
    assert live.read_bytes() == b"another writer's half"
    assert other.exists()
    dataset.read(tmp_path / "d.h5", verify=True)
