"""Minari datasets in and out: imports equal to the Minari episodes, the exact round trip of an
export (the same content hash), bad episodes refused by name, the local store only, bounded
memory. Every Minari dataset here is made by the test with Minari's own API."""

from __future__ import annotations

import json
import os
import re
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import configs
import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest
from minari.data_collector import EpisodeBuffer
from test_collect import RACING
from test_dataset import make_demos
from test_dataset_images import make_image_demos

from demo2rl import config
from demo2rl.demos import collect, dataset, minari_io

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
    jpeg_encoding: bool = False,
) -> Path:
    """A Minari dataset in the store, written with Minari's own API (with the env spec of
    ``env``, if given; image observations raw, or JPEG-encoded as Minari's default has them with
    ``jpeg_encoding``); its directory."""
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
            jpeg_encoding=jpeg_encoding,
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


def test_a_jpeg_image_dataset_imports_as_minari_decodes_it(store, tmp_path):
    """Minari stores image observations as JPEG by default (lossy): the import holds the frames
    Minari's reader decodes, not the ones recorded."""
    episodes = toy_episodes(3, IMAGE)
    for ep in episodes:  # smooth frames, which JPEG keeps close to, not noise
        ramp = np.linspace(0, 200, IMAGE.shape[0], dtype=np.float32)[:, None, None]
        steps = np.arange(len(ep["observations"]), dtype=np.float32)[:, None, None, None]
        ep["observations"] = (ramp + steps + np.zeros(IMAGE.shape)).astype(np.uint8)
    make_minari("jpeg-v0", episodes, IMAGE, ACT, jpeg_encoding=True)
    decoded = list(minari.load_dataset("jpeg-v0").iterate_episodes())
    assert minari.load_dataset("jpeg-v0").storage.jpeg_encoding
    out = tmp_path / "demos.h5"
    import_toy("minari:jpeg-v0", out)
    demos = dataset.read(out, verify=True)
    assert_equals_episodes(
        demos,
        [ep | {"observations": d.observations} for ep, d in zip(episodes, decoded, strict=True)],
    )
    recorded = np.concatenate([ep["observations"][:-1] for ep in episodes])
    assert not np.array_equal(demos.steps["observations"], recorded)  # decoded, lossy
    assert np.abs(demos.steps["observations"].astype(int) - recorded).mean() < 3
    with h5py.File(out) as f:  # frames as collected frames are stored
        assert f["steps/observations"].dtype == np.uint8
        assert f["steps/observations"].compression == dataset.DEFAULT_CODEC


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
    """Toy episodes whose second (index 1, Minari id 1) is bad in one way, and the error it
    gets (after ``episode 1 (Minari id 1)``)."""
    episodes = toy_episodes(3)
    ep = episodes[1]
    n = len(ep["rewards"])
    for field in ("observations", "actions", "rewards"):
        ep[field] = ep[field].copy()
    if kind == "cut off":
        ep["terminations"], ep["truncations"] = np.zeros(n, bool), np.zeros(n, bool)
        return episodes, rf": neither terminated nor truncated at its last step \({n - 1}\)"
    if kind == "ended early":
        ep["truncations"] = ep["truncations"] | (np.arange(n) == 1)
        return episodes, r": terminations or truncations at step 1, before its last"
    if kind == "observation dtype":
        ep["observations"] = ep["observations"].astype(np.float64)
        return episodes, r": observations dtype float64 vs float32 expected"
    if kind == "observation shape":
        ep["observations"] = ep["observations"][:, :3]
        return episodes, r": observations of shape \(3,\) vs \(4,\) expected"
    if kind == "action dtype":
        ep["actions"] = ep["actions"].astype(np.float64)
        return episodes, r": actions dtype float64 vs float32 expected"
    if kind == "observation rows":
        ep["observations"] = ep["observations"][:-1]
        return episodes, rf": {n} rows of observations, expected {n + 1}"
    if kind == "action rows":
        ep["actions"] = ep["actions"][:-1]
        return episodes, rf": {n - 1} rows of actions, expected {n}"
    # a value the space does not hold (the three: a NaN observation, an action of 7.0
    # in Box(-1, 1), an infinite action), and the same for the others
    if kind == "NaN observation":
        ep["observations"][2, 1] = np.nan
        return episodes, r", step 2: observation element 1 is nan \(not finite\)"
    if kind == "NaN final observation":
        ep["observations"][n, 3] = np.nan
        return episodes, rf", step {n} \(the final observation\): observation element 3 is nan"
    if kind == "action of 7":
        ep["actions"][1, 0] = 7.0
        return episodes, r", step 1: action element 0 is 7.0, above the space's high bound 1$"
    if kind == "action below the bound":
        ep["actions"][0, 1] = -1.5
        return episodes, r", step 0: action element 1 is -1.5, below the space's low bound -1$"
    if kind == "infinite action":
        ep["actions"][2, 1] = -np.inf
        return episodes, r", step 2: action element 1 is -inf \(not finite\)"
    if kind == "NaN reward":
        ep["rewards"][2] = np.nan
        return episodes, r", step 2: reward is nan \(not finite\)"
    if kind == "infinite reward":
        ep["rewards"][0] = np.inf
        return episodes, r", step 0: reward is inf \(not finite\)"
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
        "NaN observation",
        "NaN final observation",
        "action of 7",
        "action below the bound",
        "infinite action",
        "NaN reward",
        "infinite reward",
    ],
)
def test_a_bad_episode_is_refused_naming_it_and_the_field(store, tmp_path, kind):
    episodes, message = _bad_episode(kind)
    make_minari("bad-v0", episodes, OBS, ACT)
    out = tmp_path / "out" / "demos.h5"
    with pytest.raises(dataset.DatasetError) as err:
        import_toy("minari:bad-v0", out)
    assert str(err.value).startswith(f"minari:bad-v0 ({store / 'bad-v0'}): episode 1 (Minari id 1)")
    assert re.search(r"episode 1 \(Minari id 1\)" + message, str(err.value)), str(err.value)
    assert not out.exists() and os.listdir(out.parent) == []  # no temporary file either


def test_observations_outside_a_bounded_space_and_actions_outside_a_discrete_one(store, tmp_path):
    bounded = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    episodes = toy_episodes(3, bounded)
    for ep in episodes:
        ep["observations"] = np.clip(ep["observations"], -1, 1)
    make_minari("clean-v0", episodes, bounded, ACT)
    import_toy("minari:clean-v0", tmp_path / "clean.h5")  # within the bounds: imported
    episodes[2]["observations"][5, 3] = 1.25
    make_minari("outside-v0", episodes, bounded, ACT)
    with pytest.raises(
        dataset.DatasetError,
        match=r"episode 2 \(Minari id 2\), step 5: observation element 3 is 1.25, above the "
        r"space's high bound 1$",
    ):
        import_toy("minari:outside-v0", tmp_path / "outside.h5")
    episodes = cart_pole_episodes(3)
    episodes[1]["actions"][4] = 2  # CartPole's Discrete(2): 0 or 1
    make_minari("cartpole/bad-v0", episodes, *_cart_pole_spaces())
    with pytest.raises(
        dataset.DatasetError,
        match=r"episode 1 \(Minari id 1\), step 4: action is 2, above the space's high bound 1$",
    ):
        import_toy("minari:cartpole/bad-v0", tmp_path / "discrete.h5")
    assert sorted(os.listdir(tmp_path)) == ["clean.h5", "store"]


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
    message = (
        r"episode 1 \(Minari id 1\): an empty episode"
        if kind == "empty"
        else "episode 1: unreadable, a field missing.*'rewards'"
    )
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


def _edit_metadata(path: Path, **changes: Any) -> None:
    """Change keys of a Minari dataset's data/metadata.json (None deletes one)."""
    file = path / "data" / "metadata.json"
    meta = json.loads(file.read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key)
        else:
            meta[key] = value(meta[key]) if callable(value) else value
    file.write_text(json.dumps(meta))


def _damage(path: Path, kind: str) -> str:
    """Damage the toy dataset at ``path`` (3 episodes) in one way; the error it must get."""
    main = path / "data" / "main_data.hdf5"
    if kind == "metadata not JSON":
        (path / "data" / "metadata.json").write_text("{not json")
        return r"unreadable Minari metadata"
    if kind == "spaces unreadable":
        _edit_metadata(path, observation_space='{"type": "Mystery"}')
        return r"its spaces cannot be read"
    if kind == "no data file":
        main.unlink()
        return r"Minari cannot open it \(No data found"
    if kind == "no episodes":
        _edit_metadata(path, total_episodes=0)
        return r"it holds no episodes$"
    if kind == "fewer steps than said":
        _edit_metadata(path, total_steps=lambda n: n + 5)
        return r"its metadata says (\d+) steps, its episodes hold (\d+)$"
    if kind == "more steps than said":
        _edit_metadata(path, total_steps=lambda n: n - 1)
        return r"episode 2 \(Minari id 2\): its episodes hold more steps than the metadata's"
    if kind == "an episode missing":
        with h5py.File(main, "r+") as f:
            del f["episode_2"]
        return r"episode metadata unreadable \(.*episode_2"
    if kind == "rewards of another shape":
        with h5py.File(main, "r+") as f:
            rewards = f["episode_1/rewards"][()]
            del f["episode_1/rewards"]
            f["episode_1/rewards"] = rewards[:, None]
        return rf"episode 1 \(Minari id 1\): rewards are float64 \({len(rewards)}, 1\), not numbers"
    if kind == "terminations not flags":
        with h5py.File(main, "r+") as f:
            flags = f["episode_0/terminations"][()]
            del f["episode_0/terminations"]
            f["episode_0/terminations"] = flags.astype(np.float64)
        return (
            rf"episode 0 \(Minari id 0\): terminations are float64 \({len(flags)},\), expected bool"
        )
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "metadata not JSON",
        "spaces unreadable",
        "no data file",
        "no episodes",
        "fewer steps than said",
        "more steps than said",
        "an episode missing",
        "rewards of another shape",
        "terminations not flags",
    ],
)
def test_a_damaged_minari_dataset_is_refused_naming_what(store, tmp_path, kind):
    path = make_minari("damaged-v0", toy_episodes(3), OBS, ACT)
    message = _damage(path, kind)
    out = tmp_path / "out" / "demos.h5"
    out.parent.mkdir()
    with pytest.raises(dataset.DatasetError, match=message) as err:
        import_toy("minari:damaged-v0", out)
    assert str(err.value).startswith(("minari:damaged-v0", str(path)))
    if kind == "fewer steps than said":
        said, held = re.search(message, str(err.value)).groups()
        assert int(said) == int(held) + 5
    assert os.listdir(out.parent) == []


def test_an_env_spec_that_is_not_json_is_refused_naming_the_dataset(store):
    path = make_minari("spec-v0", toy_episodes(2), OBS, ACT)
    _edit_metadata(path, env_spec="{not json")
    with pytest.raises(dataset.DatasetError, match=r"spec-v0: its env spec is not JSON"):
        minari_io.describe("minari:spec-v0")
    _edit_metadata(path, env_spec=None)
    assert minari_io.describe("minari:spec-v0").env_id is None


def _damage_record(record: dict[str, Any], kind: str) -> str:
    """Change an export's demo2rl record in one way; the error it must get."""
    if kind == "format version":
        record["format_version"] = 99
        return r"exported as demo2rl-demos version 99; this demo2rl reads demo2rl-demos version 1"
    if kind == "spaces":
        record["attrs"]["action_space"]["high"] = [2.0, 2.0]
        return r"action_space high \[2.0, 2.0\] vs \[1.0, 1.0\] \(its demo2rl record vs Minari's\)"
    if kind == "columns":
        record["episodes"]["index"]["values"].pop()
        return r"its demo2rl record has 4 index values for 5 episodes"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["format version", "spaces", "columns", "env id"])
def test_an_export_whose_record_disagrees_is_refused_naming_it(tmp_path, monkeypatch, kind):
    dataset.write(tmp_path / "demos.h5", make_demos(5))
    path = minari_io.export_minari(tmp_path / "demos.h5", tmp_path / "minari", "exp-v0")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env_id = "Toy-v0"
    if kind == "env id":
        env_id, message = "Other-v0", r"exported from env 'Toy-v0', the task's is 'Other-v0'"
    else:
        record = json.loads((path / "data" / "metadata.json").read_text())["demo2rl"]
        message = _damage_record(record, kind)
        _edit_metadata(path, demo2rl=record)
    out = tmp_path / "back.h5"
    with pytest.raises(dataset.DatasetError, match=message):
        import_toy("minari:exp-v0", out, env_id=env_id, env_kwargs={"k": 1})
    assert not out.exists()


# --------------------------------------------------------------------------------------------
# export and the round trip


def collected(tmp_path: Path, task: config.TaskConfig) -> Path:
    """A demo2rl dataset made by demo2rl's own collection of ``task`` (with its expert): 6
    episodes in 2 shards, merged."""
    paths = []
    for k in range(2):
        shard = collect.collect_shard(
            task=task, base_seed=3, episodes=collect.shard_episodes(6, 2, k), n_envs=3
        )
        paths.append(tmp_path / f"shard-{k}.h5")
        dataset.write(paths[-1], shard)
    dataset.merge_files(paths, tmp_path / "demos.h5", n_episodes=6, valid_fraction=0.2)
    return tmp_path / "demos.h5"


CART_POLE = configs.task(
    "CartPole-v1", {"max_episode_steps": 40}, entry_point="demo2rl.experts.classic:cart_pole"
)


@pytest.mark.parametrize("task", ["racing", "cart_pole"])
def test_an_export_imports_to_the_same_content_hash(tmp_path, monkeypatch, task):
    env = RACING if task == "racing" else CART_POLE
    demos_path = collected(tmp_path, env)
    original = dataset.read(demos_path, verify=True)
    monkeypatch.setenv("MINARI_DATASETS_PATH", "/elsewhere")
    path = minari_io.export_minari(demos_path, tmp_path / "minari", "demo2rl/test-v0")
    assert path == tmp_path / "minari" / "demo2rl" / "test-v0"
    assert os.environ["MINARI_DATASETS_PATH"] == "/elsewhere"  # restored
    assert sorted(os.listdir(tmp_path / "minari")) == ["demo2rl"]  # no temporary store left

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    exported = minari.load_dataset("demo2rl/test-v0")
    assert exported.total_episodes == 6 and exported.total_steps == original.n_steps
    assert exported.env_spec.id == env.env_id
    seeds = [m["seed"] for m in exported.storage.get_episode_metadata(range(6))]
    assert seeds == original.episodes["seed"].tolist()
    if task == "racing":
        assert original.info  # the info columns travel in the record
    digest = minari_io.import_minari(
        "minari:demo2rl/test-v0",
        tmp_path / "back.h5",
        env_id=env.env_id,
        env_kwargs=env.env_kwargs,
        base_seed=123,  # an export keeps its own
        valid_fraction=0.2,
        expected_observation_space=dataset.space_from_description(
            original.attrs["observation_space"]
        ),
    )
    assert digest == original.attrs["content_hash"] == dataset.verify(tmp_path / "back.h5")
    info = minari_io.describe(path)
    assert info.from_demo2rl and (info.env_id, info.env_kwargs) == (
        env.env_id,
        env.env_kwargs,
    )
    with pytest.raises(dataset.DatasetError, match=r"exported with env_kwargs .* the task's are"):
        minari_io.import_minari(
            path,
            tmp_path / "other.h5",
            env_id=env.env_id,
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


@pytest.mark.parametrize(
    "kind",
    ["NaN observation", "NaN final observation", "action of 7", "infinite action", "NaN reward"],
)
def test_a_demo2rl_file_holding_a_value_its_space_does_not_is_refused(tmp_path, kind):
    """The same checks as a Minari dataset's, on a file whose content hash is right: written
    with the bad value by :func:`dataset.write`, only the value check can tell."""
    demos = make_demos(5)
    e, step = 2, 1
    row, n = demos.episodes["start"][e] + step, demos.episodes["length"][e]
    if kind == "NaN observation":
        demos.steps["observations"][row, 2] = np.nan
        message = r"step 1: observation element 2 is nan \(not finite\)"
    elif kind == "NaN final observation":
        demos.episodes["final_observation"][e, 0] = np.nan
        message = rf"step {n} \(the final observation\): observation element 0 is nan"
    elif kind == "action of 7":
        demos.steps["actions"][row, 1] = 7.0
        message = r"step 1: action element 1 is 7.0, above the space's high bound 1$"
    elif kind == "infinite action":
        demos.steps["actions"][row, 0] = np.inf
        message = r"step 1: action element 0 is inf \(not finite\)"
    else:
        demos.steps["rewards"][row] = np.nan
        message = r"step 1: reward is nan \(not finite\)"
    dataset.write(tmp_path / "demos.h5", demos)
    out = tmp_path / "out" / "demos.h5"
    out.parent.mkdir()
    with pytest.raises(dataset.DatasetError, match=message) as err:
        minari_io.import_hdf5(tmp_path / "demos.h5", out, valid_fraction=0.2)
    assert str(err.value).startswith(f"{tmp_path / 'demos.h5'}: episode 2 (index 2), step")
    assert os.listdir(out.parent) == []


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
