"""Minari datasets in and out: imports equal to the Minari episodes, the exact round trip of an
export (the same content hash), bad episodes refused by name, the local store only, bounded
memory. Every Minari dataset here is made by the test with Minari's own API."""

from __future__ import annotations

import os
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest
from minari.data_collector import EpisodeBuffer
from test_collect import EXPERT, RACING
from test_dataset_images import make_image_demos

from demo2rl import collect, dataset, minari_io

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)  # an image space to Minari (JPEG if asked)


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """A local Minari store of the test's own (MINARI_DATASETS_PATH)."""
    path = tmp_path / "store"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def make_minari(
    dataset_id: str,
    episodes: list[dict[str, Any]],
    obs_space: gym.Space,
    act_space: gym.Space,
    env: str | None = None,
) -> Path:
    """A Minari dataset in the store, written with Minari's own API (with the env spec of
    ``env``, if given); its directory."""
    buffers = [
        EpisodeBuffer(
            seed=ep.get("seed"),
            observations=ep["observations"],
            actions=ep["actions"],
            rewards=ep["rewards"],
            terminations=ep["terminations"],
            truncations=ep["truncations"],
        )
        for ep in episodes
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its advice to name an author and such
        minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            env=env,
            observation_space=obs_space,
            action_space=act_space,
            jpeg_encoding=False,
        )
    return Path(os.environ["MINARI_DATASETS_PATH"]) / dataset_id


def toy_episodes(n_episodes: int, obs_space: gym.Space = OBS, seed: int = 0) -> list[dict]:
    """Episodes of random rows (``obs_space`` rows, ACT actions), of 3 to 40 steps, each ended by
    a termination or a truncation, seeded 100, 101, ... but the third (no seed)."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(n_episodes):
        n = int(rng.integers(3, 40))
        if obs_space.dtype == np.uint8:
            obs = rng.integers(0, 256, size=(n + 1, *obs_space.shape), dtype=np.uint8)
        else:
            obs = rng.normal(size=(n + 1, *obs_space.shape)).astype(obs_space.dtype)
        ended = np.zeros(n, bool)
        ended[-1] = True
        terminated = bool(rng.integers(2))
        out.append(
            {
                "seed": None if e == 2 else 100 + e,
                "observations": obs,
                "actions": rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
                "rewards": rng.normal(size=n),
                "terminations": ended if terminated else np.zeros(n, bool),
                "truncations": np.zeros(n, bool) if terminated else ended,
            }
        )
    return out


def cart_pole_episodes(n_episodes: int, seed: int = 0) -> list[dict]:
    """CartPole-v1 rolled out with random actions."""
    env = gym.make("CartPole-v1")
    env.action_space.seed(seed)
    out = []
    for e in range(n_episodes):
        obs, _ = env.reset(seed=seed + e)
        rows, actions, rewards, terms, truncs = [obs], [], [], [], []
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            rows.append(obs)
            actions.append(action)
            rewards.append(reward)
            terms.append(terminated)
            truncs.append(truncated)
            done = terminated or truncated
        out.append(
            {
                "seed": seed + e,
                "observations": np.asarray(rows),
                "actions": np.asarray(actions, dtype=np.int64),
                "rewards": np.asarray(rewards, dtype=np.float64),
                "terminations": np.asarray(terms),
                "truncations": np.asarray(truncs),
            }
        )
    return out


def import_toy(source: str | Path, out: Path, **kwargs: Any) -> str:
    args = {"env_id": "Toy-v0", "env_kwargs": {}, "base_seed": 7, "valid_fraction": 0.25}
    return minari_io.import_minari(source, out, **(args | kwargs))


def assert_equals_episodes(demos: dataset.Demos, episodes: list[dict]) -> None:
    """The imported dataset holds the Minari episodes, row for row."""
    assert demos.n_episodes == len(episodes)
    e = demos.episodes
    for i, ep in enumerate(episodes):
        rows = slice(e["start"][i], e["start"][i] + e["length"][i])
        np.testing.assert_array_equal(demos.steps["observations"][rows], ep["observations"][:-1])
        np.testing.assert_array_equal(e["final_observation"][i], ep["observations"][-1])
        np.testing.assert_array_equal(demos.steps["actions"][rows], ep["actions"])
        np.testing.assert_array_equal(demos.steps["rewards"][rows], ep["rewards"])
        np.testing.assert_array_equal(demos.steps["terminated"][rows], ep["terminations"])
        np.testing.assert_array_equal(demos.steps["truncated"][rows], ep["truncations"])
        assert e["seed"][i] == (-1 if ep["seed"] is None else ep["seed"])
        assert e["return"][i] == dataset.episode_return(ep["rewards"])
    np.testing.assert_array_equal(e["index"], np.arange(len(episodes)))
    assert demos.steps["rewards"].dtype == np.float64


# --------------------------------------------------------------------------------------------
# import


def test_a_vector_dataset_imports_as_its_episodes(store, tmp_path):
    episodes = cart_pole_episodes(5)
    make_minari("cartpole/random-v0", episodes, *_cart_pole_spaces(), env="CartPole-v1")
    out = tmp_path / "demos.h5"
    digest = minari_io.import_minari(
        "minari:cartpole/random-v0",
        out,
        env_id="CartPole-v1",
        env_kwargs={},
        base_seed=7,
        valid_fraction=0.4,
        expected_observation_space=_cart_pole_spaces()[0],
        expected_action_space=_cart_pole_spaces()[1],
    )
    assert dataset.verify(out) == digest
    demos = dataset.read(out, verify=True)
    assert_equals_episodes(demos, episodes)
    assert demos.steps["actions"].dtype == np.int64
    assert demos.attrs["expert"] is None  # a foreign dataset: no expert to call
    assert demos.attrs["env_id"] == "CartPole-v1" and demos.attrs["base_seed"] == 7
    assert demos.attrs["source"]["minari_dataset_id"] == "cartpole/random-v0"
    assert _same_split(demos, 5, 0.4, 7)
    assert set(demos.stats) == {"obs_mean", "obs_std", "act_mean", "act_std"}
    info = minari_io.describe(store / "cartpole/random-v0")
    assert (info.n_episodes, info.n_steps) == (5, demos.n_steps)
    assert (info.env_id, info.env_kwargs, info.from_demo2rl) == ("CartPole-v1", {}, False)
    assert info.action_space == {"type": "Discrete", "n": 2, "start": 0}


def test_an_image_dataset_imports_exactly_and_compressed(store, tmp_path):
    episodes = toy_episodes(4, IMAGE)
    make_minari("toy-images-v0", episodes, IMAGE, ACT)
    out = tmp_path / "demos.h5"
    digest = import_toy("minari:toy-images-v0", out, codec="lzf")
    demos = dataset.read(out, verify=True)
    assert digest == demos.attrs["content_hash"]
    assert_equals_episodes(demos, episodes)
    assert set(demos.stats) == {"act_mean", "act_std"}
    with h5py.File(out) as f:
        assert f["steps/observations"].compression == "lzf"
        assert f["steps/observations"].chunks[1:] == IMAGE.shape


def test_a_dataset_directory_is_the_one_holding_data(store, tmp_path):
    path = make_minari("toy-v0", toy_episodes(3), OBS, ACT)
    assert minari_io.resolve(path) == path == minari_io.resolve("minari:toy-v0")
    assert minari_io.describe(path).env_id is None  # made without an env spec
    with pytest.raises(dataset.DatasetError, match=r"data directory: give the directory above"):
        minari_io.resolve(path / "data")
    with pytest.raises(dataset.DatasetError, match=r"not a Minari dataset directory"):
        minari_io.resolve(tmp_path)
    assert import_toy(path, tmp_path / "a.h5") == import_toy("minari:toy-v0", tmp_path / "b.h5")


def test_a_store_id_that_is_not_there_is_refused_naming_it_and_the_store(store, tmp_path):
    make_minari("toy-v0", toy_episodes(3), OBS, ACT)
    out = tmp_path / "demos.h5"
    with pytest.raises(dataset.DatasetError) as err:
        import_toy("minari:missing/thing-v3", out)
    text = str(err.value)
    assert "'missing/thing-v3'" in text and str(store) in text and "toy-v0" in text
    assert "minari download missing/thing-v3" in text
    assert not out.exists() and not (store / "missing").exists()  # nothing downloaded
    with pytest.raises(dataset.DatasetError, match=r"'\.\./escape' is not a Minari dataset id"):
        minari_io.resolve("minari:../escape")


def _bad_episode(kind: str) -> tuple[list[dict], str]:
    """Toy episodes whose second (Minari id 1) is bad in one way, and the error it gets."""
    episodes = toy_episodes(3)
    ep = episodes[1]
    n = len(ep["rewards"])
    if kind == "cut off":
        ep["terminations"], ep["truncations"] = np.zeros(n, bool), np.zeros(n, bool)
        return (
            episodes,
            rf"episode 1: neither terminated nor truncated at its last step \({n - 1}\)",
        )
    if kind == "ended early":
        ep["truncations"] = ep["truncations"] | (np.arange(n) == 1)
        return episodes, r"episode 1: terminations or truncations at step 1, before its last"
    if kind == "observation dtype":
        ep["observations"] = ep["observations"].astype(np.float64)
        return episodes, r"episode 1: observations dtype float64 vs float32 expected"
    if kind == "observation shape":
        ep["observations"] = ep["observations"][:, :3]
        return episodes, r"episode 1: observations of shape \(3,\) vs \(4,\) expected"
    if kind == "action dtype":
        ep["actions"] = ep["actions"].astype(np.float64)
        return episodes, r"episode 1: actions dtype float64 vs float32 expected"
    if kind == "observation rows":
        ep["observations"] = ep["observations"][:-1]
        return episodes, rf"episode 1: {n} rows of observations, expected {n + 1}"
    if kind == "action rows":
        ep["actions"] = ep["actions"][:-1]
        return episodes, rf"episode 1: {n - 1} rows of actions, expected {n}"
    if kind == "non-finite reward":
        ep["rewards"] = ep["rewards"].copy()
        ep["rewards"][2] = np.nan
        return episodes, r"episode 1: rewards at step 2 is nan"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "cut off",
        "ended early",
        "observation dtype",
        "observation shape",
        "action dtype",
        "observation rows",
        "action rows",
        "non-finite reward",
    ],
)
def test_a_bad_episode_is_refused_naming_it_and_the_field(store, tmp_path, kind):
    episodes, message = _bad_episode(kind)
    make_minari("bad-v0", episodes, OBS, ACT)
    out = tmp_path / "out" / "demos.h5"
    with pytest.raises(dataset.DatasetError, match=message) as err:
        import_toy("minari:bad-v0", out)
    assert str(err.value).startswith(f"minari:bad-v0 ({store / 'bad-v0'}): ")
    assert not out.exists() and os.listdir(out.parent) == []  # no temporary file either


@pytest.mark.parametrize("kind", ["empty", "no rewards"])
def test_an_episode_minari_cannot_write_is_refused_too(store, tmp_path, kind):
    """An empty episode, or one without rewards (Minari's writer refuses neither to a file
    edited after it; its reader reads the first and fails on the second)."""
    path = make_minari("bad-v0", toy_episodes(3), OBS, ACT)
    with h5py.File(path / "data" / "main_data.hdf5", "r+") as f:
        group = f["episode_1"]
        if kind == "empty":
            for key, row in (("actions", (2,)), ("rewards", ()), ("terminations", ())):
                del group[key]
                group[key] = np.zeros((0, *row), np.float32 if key != "terminations" else bool)
            del group["truncations"], group["observations"]
            group["truncations"] = np.zeros(0, bool)
            group["observations"] = np.zeros((1, 4), np.float32)
        else:
            del group["rewards"]
    out = tmp_path / "demos.h5"
    message = "episode 1: an empty episode" if kind == "empty" else "episode 1: .*'rewards'"
    with pytest.raises(dataset.DatasetError, match=message):
        import_toy("minari:bad-v0", out)
    assert not out.exists()


def test_spaces_other_than_the_tasks_are_refused_naming_both(store, tmp_path):
    make_minari("toy-v0", toy_episodes(3), OBS, ACT)
    out = tmp_path / "demos.h5"
    task_obs = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    with pytest.raises(
        dataset.DatasetError,
        match=r"observation_space shape \(5,\) vs \(4,\) \(expected vs the dataset's\); "
        r"expected: .*'shape': \[5\].*the dataset's: .*'shape': \[4\]",
    ):
        import_toy("minari:toy-v0", out, expected_observation_space=task_obs)
    with pytest.raises(dataset.DatasetError, match=r"action_space type Discrete vs Box"):
        import_toy("minari:toy-v0", out, expected_action_space=gym.spaces.Discrete(3))
    assert not out.exists()
    space = gym.spaces.Dict({"a": OBS})
    make_minari(
        "dict-v0",
        [{**e, "observations": {"a": e["observations"]}} for e in toy_episodes(2)],
        space,
        ACT,
    )
    with pytest.raises(
        dataset.DatasetError, match=r"observation_space Dict.* not one demo2rl stores"
    ):
        minari_io.describe("minari:dict-v0")


# --------------------------------------------------------------------------------------------
# export and the round trip


def collected(tmp_path: Path, env: dict[str, Any], expert: dict[str, Any]) -> Path:
    """A demo2rl dataset made by demo2rl's own collection: 6 episodes in 2 shards, merged."""
    paths = []
    for k in range(2):
        shard = collect.collect_shard(
            **env, **expert, base_seed=3, episodes=collect.shard_episodes(6, 2, k), n_envs=3
        )
        paths.append(tmp_path / f"shard-{k}.h5")
        dataset.write(paths[-1], shard)
    dataset.merge_files(paths, tmp_path / "demos.h5", n_episodes=6, valid_fraction=0.2)
    return tmp_path / "demos.h5"


CART_POLE = (
    {"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 40}},
    {"expert_entry_point": "demo2rl.experts.classic:cart_pole", "expert_kwargs": {}},
)


@pytest.mark.parametrize("task", ["racing", "cart_pole"])
def test_an_export_imports_to_the_same_content_hash(tmp_path, monkeypatch, task):
    env, expert = (RACING, EXPERT) if task == "racing" else CART_POLE
    demos_path = collected(tmp_path, env, expert)
    original = dataset.read(demos_path, verify=True)
    monkeypatch.setenv("MINARI_DATASETS_PATH", "/elsewhere")
    path = minari_io.export_minari(demos_path, tmp_path / "minari", "demo2rl/test-v0")
    assert path == tmp_path / "minari" / "demo2rl" / "test-v0"
    assert os.environ["MINARI_DATASETS_PATH"] == "/elsewhere"  # restored
    assert sorted(os.listdir(tmp_path / "minari")) == ["demo2rl"]  # no temporary store left

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    exported = minari.load_dataset("demo2rl/test-v0")
    assert exported.total_episodes == 6 and exported.total_steps == original.n_steps
    assert exported.env_spec.id == env["env_id"]
    seeds = [m["seed"] for m in exported.storage.get_episode_metadata(range(6))]
    assert seeds == original.episodes["seed"].tolist()
    if task == "racing":
        assert original.info  # the info columns travel in the record
    digest = minari_io.import_minari(
        "minari:demo2rl/test-v0",
        tmp_path / "back.h5",
        env_id=env["env_id"],
        env_kwargs=env["env_kwargs"],
        base_seed=123,  # an export keeps its own
        valid_fraction=0.2,
        expected_observation_space=dataset.space_from_description(
            original.attrs["observation_space"]
        ),
    )
    assert digest == original.attrs["content_hash"] == dataset.verify(tmp_path / "back.h5")
    info = minari_io.describe(path)
    assert info.from_demo2rl and (info.env_id, info.env_kwargs) == (
        env["env_id"],
        env["env_kwargs"],
    )
    with pytest.raises(dataset.DatasetError, match=r"exported with env_kwargs .* the task's are"):
        minari_io.import_minari(
            path,
            tmp_path / "other.h5",
            env_id=env["env_id"],
            env_kwargs={"other": 1},
            base_seed=3,
            valid_fraction=0.2,
        )


def test_an_image_export_is_exact_and_imports_to_the_same_content_hash(tmp_path, monkeypatch):
    lengths = np.array([70, 5, 64, 1])  # across the image chunks (64 frames)
    demos = make_image_demos(4, shape=IMAGE.shape, lengths=lengths)
    dataset.write(tmp_path / "shard.h5", demos)
    dataset.merge_files(
        [tmp_path / "shard.h5"], tmp_path / "demos.h5", n_episodes=4, valid_fraction=0.25
    )
    original = dataset.read(tmp_path / "demos.h5")
    minari_io.export_minari(tmp_path / "demos.h5", tmp_path / "minari", "images-v0")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    exported = minari.load_dataset("images-v0")
    assert exported.storage.jpeg_encoding is False
    for i, ep in enumerate(exported.iterate_episodes()):
        rows = original.step_rows(np.array([i]))
        np.testing.assert_array_equal(ep.observations[:-1], original.steps["observations"][rows])
        np.testing.assert_array_equal(
            ep.observations[-1], original.episodes["final_observation"][i]
        )
        np.testing.assert_array_equal(ep.actions, original.steps["actions"][rows])
    digest = minari_io.import_minari(
        "minari:images-v0",
        tmp_path / "back.h5",
        env_id="Toy-v0",
        env_kwargs={"k": 1},
        base_seed=0,
        valid_fraction=0.25,
        codec="none",  # the codec never changes the hash
    )
    assert digest == original.attrs["content_hash"]


def test_relative_store_paths_work_as_the_workflow_gives_them(tmp_path, monkeypatch):
    """The rule's output and a user's MINARI_DATASETS_PATH are relative to the working
    directory (Minari, given a relative store, joins the data path to itself: export_minari
    hands it an absolute one)."""
    dataset.write(tmp_path / "demos.h5", make_image_demos(2, shape=(8, 8, 1)))
    monkeypatch.chdir(tmp_path)
    path = minari_io.export_minari("demos.h5", Path("results/demos/minari"), "demo2rl/rel-v0")
    assert path == tmp_path / "results/demos/minari/demo2rl/rel-v0" and path.is_dir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", "results/demos/minari")
    assert minari.load_dataset("demo2rl/rel-v0").total_episodes == 2
    assert minari_io.describe("minari:demo2rl/rel-v0").n_episodes == 2
    digest = minari_io.import_minari(
        "minari:demo2rl/rel-v0",
        "back.h5",
        env_id="Toy-v0",
        env_kwargs={"k": 1},
        base_seed=0,
        valid_fraction=0.0,
    )
    assert digest == dataset.read_attrs("back.h5")["content_hash"]


def test_a_failed_export_leaves_the_previous_one_and_nothing_half_written(tmp_path, monkeypatch):
    demos = make_image_demos(3, shape=IMAGE.shape)
    dataset.write(tmp_path / "demos.h5", demos)
    first = minari_io.export_minari(tmp_path / "demos.h5", tmp_path / "minari", "demo2rl/x-v0")
    before = sorted(p.relative_to(first) for p in first.rglob("*"))
    buffers = minari_io._episode_buffers

    def fail_at_the_second(*args):
        for k, buffer in enumerate(buffers(*args)):
            if k == 1:
                raise OSError("disk on fire")
            yield buffer

    monkeypatch.setattr(minari_io, "_episode_buffers", fail_at_the_second)
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    with pytest.raises(OSError, match="disk on fire"):
        minari_io.export_minari(tmp_path / "demos.h5", tmp_path / "minari", "demo2rl/x-v0")
    assert "MINARI_DATASETS_PATH" not in os.environ
    assert sorted(os.listdir(tmp_path / "minari")) == ["demo2rl"]
    assert sorted(p.relative_to(first) for p in first.rglob("*")) == before
    with pytest.raises(dataset.DatasetError, match=r"'demo2rl/x' is not a Minari dataset id"):
        minari_io.export_minari(tmp_path / "demos.h5", tmp_path / "minari", "demo2rl/x")


# --------------------------------------------------------------------------------------------
# a demo2rl file from elsewhere


def test_a_demo2rl_file_is_reimported_with_its_hash_checked(tmp_path):
    demos = make_image_demos(5, shape=(8, 8, 1))
    dataset.write(tmp_path / "shard.h5", demos)  # a first shard: episodes from 0
    dataset.merge_files(
        [tmp_path / "shard.h5"], tmp_path / "demos.h5", n_episodes=5, valid_fraction=0.2
    )
    merged = dataset.read_attrs(tmp_path / "demos.h5")
    assert merged["first_episode"] == 0
    # a merged file, split as it was: the same dataset, hash included
    same = minari_io.import_hdf5(tmp_path / "demos.h5", tmp_path / "same.h5", valid_fraction=0.2)
    assert same == merged["content_hash"]
    other = minari_io.import_hdf5(tmp_path / "demos.h5", tmp_path / "other.h5", valid_fraction=0.6)
    assert other != same and dataset.verify(tmp_path / "other.h5") == other
    assert len(dataset.read_tables(tmp_path / "other.h5").split["valid"]) == 3
    later = make_image_demos(2, first=5, shape=(8, 8, 1))
    dataset.write(tmp_path / "later.h5", later)
    with pytest.raises(dataset.DatasetError, match=r"later.h5: starts at episode 5, expected 0"):
        minari_io.import_hdf5(tmp_path / "later.h5", tmp_path / "x.h5", valid_fraction=0.2)
    with h5py.File(tmp_path / "demos.h5", "r+") as f:
        f["steps/rewards"][3] += 1.0
    with pytest.raises(dataset.DatasetError, match=r"demos.h5: content hash mismatch"):
        minari_io.import_hdf5(tmp_path / "demos.h5", tmp_path / "x.h5", valid_fraction=0.2)
    assert not (tmp_path / "x.h5").exists()


# --------------------------------------------------------------------------------------------
# memory


def traced_peak(source: Path, out: Path) -> int:
    """Peak bytes of Python and numpy allocations while the import runs."""
    tracemalloc.start()
    try:
        import_toy(source, out, codec="none")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_import_holds_an_episode_and_blocks_not_the_dataset(store, tmp_path):
    """Image episodes of 100 frames (300 KiB each): the import's peak allocations do not grow
    with the number of episodes (36 or 72: 10.5 or 21 MiB of frames), and stay below one
    episode's frames three times over plus two copy blocks (the hash reads the file back a block
    at a time, the next block read while the last is held). Holding the dataset, as a reader of
    it whole would, grows by the 10.5 MiB between the two."""
    rng = np.random.default_rng(0)

    def episodes(n):
        return [
            {
                "seed": e,
                "observations": rng.integers(0, 256, (101, *IMAGE.shape), dtype=np.uint8),
                "actions": np.zeros((100, 2), np.float32),
                "rewards": np.ones(100),
                "terminations": np.arange(100) == 99,
                "truncations": np.zeros(100, bool),
            }
            for e in range(n)
        ]

    small = make_minari("small-v0", episodes(36), IMAGE, ACT)
    large = make_minari("large-v0", episodes(72), IMAGE, ACT)
    episode_bytes = 101 * IMAGE.shape[0] * IMAGE.shape[1] * IMAGE.shape[2]
    traced_peak(small, tmp_path / "warm.h5")  # first-call costs (imports, caches)
    peaks = {n: traced_peak(p, tmp_path / f"{n}.h5") for n, p in ((36, small), (72, large))}
    mib = {n: round(p / 2**20, 2) for n, p in peaks.items()}
    assert peaks[72] - peaks[36] < episode_bytes, mib
    assert peaks[72] < 3 * episode_bytes + 2 * dataset.COPY_BYTES, mib
    assert dataset.read_tables(tmp_path / "72.h5").n_steps == 7200


def _cart_pole_spaces() -> tuple[gym.Space, gym.Space]:
    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


def _same_split(demos: dataset.Demos, n: int, fraction: float, seed: int) -> bool:
    split = dataset.episode_split(n, fraction, seed=seed)
    return all(np.array_equal(demos.split[k], split[k]) for k in split)
