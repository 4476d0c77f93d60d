"""Minari datasets in and out of demo2rl's demonstration format (:mod:`demo2rl.demos.dataset`).

Why: a workflow can start from demonstrations someone else recorded (a Minari dataset, or a
demo2rl file from another experiment) instead of collecting its own, and its own dataset can be
handed to offline-RL libraries that read Minari (d3rlpy, TorchRL). This module converts; it
does not collect, train, or download (a Minari id is looked up in the local store only).

**Sources.** ``minari:<dataset id>`` is a dataset in the local Minari store
(``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``: Minari's own rule,
``minari.storage.get_dataset_path``). A path is a Minari *dataset directory*: the one holding
``data/`` (with Minari's ``data/metadata.json``), as in the store, ``<store>/<dataset id>``; its
``data/`` directory itself is refused, naming the directory to give instead. :func:`resolve`
turns either into the dataset directory; :func:`describe` reads its metadata alone (plan time).

**Import** (:func:`import_minari`) streams the episodes, one at a time, through Minari's own reader
into :func:`demo2rl.demos.dataset.write_streamed`, which writes the file atomically. Minari records
``T + 1`` observations for an episode of ``T`` steps; the mapping:

=====================================  ===================================================
demo2rl                                Minari episode
=====================================  ===================================================
``/steps/observations``                ``observations[:-1]``
``/episodes/final_observation``        ``observations[-1]``
``/steps/actions``                     ``actions``
``/steps/rewards`` (float64)           ``rewards``
``/steps/terminated``, ``truncated``   ``terminations``, ``truncations``
``/episodes/seed``                     the episode's ``seed`` (its metadata), -1 if none
``/episodes/index``                    0 .. E-1 (an export's own, see below)
``/episodes/return``                   :func:`~demo2rl.demos.dataset.episode_return` of the rewards
=====================================  ===================================================

A foreign dataset has no expert demo2rl can call: its ``expert`` attribute is None (the config's
``task.expert: null``) and its ``source`` attribute names the dataset. Minari's per-step
``infos`` are not imported. An episode that is empty, not terminated or truncated at its last
step (a cut-off recording) or before it, whose observations or actions are of another dtype or
shape than the spaces or of the wrong number of rows, or whose rewards are missing, fails the import
with a :class:`~demo2rl.demos.dataset.DatasetError` naming the source, the episode (its index and
its Minari id) and the field; so does any value a space does not hold
(:class:`~demo2rl.demos.dataset.SpaceValues`: a NaN or an infinity, an action or an observation
outside its space's bounds, a reward that is not finite), naming the step too; no file is
left. Memory: one episode and a block of rows a column (the statistics of *vector*
observations then read the observation and action columns whole, as the merge's do; image
columns never).

**Export** (:func:`export_minari`) writes a demo2rl file as a Minari dataset with Minari's own
API (``create_dataset_from_buffers``, then the storage's ``update_episodes`` fed one episode at
a time), images stored raw (``jpeg_encoding=False``: exact), the env spec of the task's env
when it can be made, each episode's seed as Minari's episode seed, and under the metadata key
``"demo2rl"`` (:data:`METADATA_KEY`; Minari keeps any key) what else the file holds::

    {"format": "demo2rl-demos", "format_version": 1,
     "attrs": {"env_id", "env_kwargs", "env_spec", "observation_space", "action_space",
               "expert", "base_seed", "frame_stack"},      # those the file has
     "episodes": {"index": {"dtype": "<i8", "values": [...]}},
     "info": {"<key>": {"dtype": "<f8", "values": [...]}, ...},
     "exported_from": {"path", "content_hash", "valid_fraction"}}

So :func:`import_minari` of an export, with the same ``valid_fraction``, writes a file with the
same content hash as the exported one; it keeps the export's base seed (it seeded the
episodes, and seeds the split), and refuses an export of another env id or env kwargs than the
caller's.

**A demo2rl file from elsewhere** (:func:`import_hdf5`) is :func:`demo2rl.demos.dataset.merge_files`
of that one file: its hash and every value checked as it is copied (the checks above), re-split
with this experiment's ``valid_fraction``. It must start at episode 0 (a merged dataset, or a
first shard).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import minari
import numpy as np
from minari.data_collector import EpisodeBuffer
from minari.dataset.minari_dataset import parse_dataset_id
from minari.dataset.minari_storage import METADATA_FILE_NAME, MinariStorage
from minari.namespace import create_namespace, list_local_namespaces
from minari.serialization import deserialize_space
from minari.storage import get_dataset_path

from demo2rl import envs, io, provenance, tasks
from demo2rl.demos import dataset
from demo2rl.demos.dataset import DatasetError
from demo2rl.observations import image_column

log = logging.getLogger(__name__)

PREFIX = "minari:"
"""A source naming a dataset of the local Minari store: ``minari:<dataset id>``."""
METADATA_KEY = "demo2rl"
"""The key of an export's record in Minari's dataset metadata (see the module docstring)."""
RECORDED_ATTRS = (
    "env_id",
    "env_kwargs",
    "env_spec",
    "observation_space",
    "action_space",
    "expert",
    "base_seed",
    "frame_stack",
)
"""The file attributes an export records: the defining ones (but the format's) and the task's."""
STORE_ENV = "MINARI_DATASETS_PATH"
"""The environment variable that places Minari's local store."""
_TMP_STORE = ".export-tmp-"


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """What a Minari dataset's metadata says about it (:func:`describe`).

    :param path: the dataset directory (the one holding ``data/``).
    :param dataset_id: its Minari id.
    :param env_id: the env id of its env spec (an export's: the task's), None without one.
    :param env_kwargs: the kwargs of that env spec, None without one.
    :param observation_space: :func:`demo2rl.demos.dataset.describe_space` of its observation space.
    :param action_space: the same of its action space.
    :param n_episodes: episodes it holds.
    :param n_steps: steps it holds (Minari's ``total_steps``).
    :param from_demo2rl: whether :func:`export_minari` wrote it (it holds :data:`METADATA_KEY`).
    """

    path: Path
    dataset_id: str
    env_id: str | None
    env_kwargs: dict[str, Any] | None
    observation_space: dict[str, Any]
    action_space: dict[str, Any]
    n_episodes: int
    n_steps: int
    from_demo2rl: bool


def resolve(source: str | os.PathLike[str]) -> Path:
    """The dataset directory ``source`` names: ``minari:<dataset id>`` in the local store, or a
    directory holding Minari's ``data/metadata.json`` (see the module docstring). Nothing is
    downloaded; a DatasetError names the source and, for a missing id, the store and the ids it
    holds."""
    text = os.fspath(source)
    if not text.startswith(PREFIX):
        path = Path(text)
        if (path / "data" / METADATA_FILE_NAME).is_file():
            return path
        if (path / METADATA_FILE_NAME).is_file():
            raise DatasetError(
                path,
                f"this is a Minari dataset's data directory: give the directory above it, "
                f"{path.parent}",
            )
        raise DatasetError(
            path, f"not a Minari dataset directory (no data/{METADATA_FILE_NAME} in it)"
        )
    dataset_id = text[len(PREFIX) :]
    _check_id(text, dataset_id)
    path = get_dataset_path(dataset_id)
    if not (path / "data" / METADATA_FILE_NAME).is_file():
        local = ", ".join(_local_ids()) or "none"
        raise DatasetError(
            text,
            f"no dataset {dataset_id!r} in the local Minari store {get_dataset_path()} "
            f"(${STORE_ENV}, else ~/.minari/datasets); it holds: {local}. Nothing is "
            f"downloaded: fetch it with `minari download {dataset_id}` first",
        )
    return path


def describe(source: str | os.PathLike[str]) -> SourceInfo:
    """What the metadata of the Minari dataset ``source`` (:func:`resolve`) says about it,
    without reading its episodes (the workflow's check before any job)."""
    path = resolve(source)
    meta = _metadata(path)
    obs_space, act_space = _spaces(path, meta)
    record = meta.get(METADATA_KEY)
    if record is not None:
        env_id, env_kwargs = record["attrs"]["env_id"], record["attrs"]["env_kwargs"]
    elif meta.get("env_spec"):
        try:
            spec = json.loads(meta["env_spec"])
        except json.JSONDecodeError as err:
            raise DatasetError(path, f"its env spec is not JSON ({err})") from err
        env_id, env_kwargs = spec.get("id"), spec.get("kwargs", {})
    else:
        env_id, env_kwargs = None, None
    return SourceInfo(
        path=path,
        dataset_id=str(meta.get("dataset_id")),
        env_id=env_id,
        env_kwargs=env_kwargs,
        observation_space=_described(path, "observation_space", obs_space),
        action_space=_described(path, "action_space", act_space),
        n_episodes=int(meta["total_episodes"]),
        n_steps=int(meta["total_steps"]),
        from_demo2rl=record is not None,
    )


def import_minari(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    base_seed: int,
    valid_fraction: float,
    codec: str = dataset.DEFAULT_CODEC,
    expected_observation_space: gym.Space | Mapping[str, Any] | None = None,
    expected_action_space: gym.Space | Mapping[str, Any] | None = None,
) -> str:
    """Write the Minari dataset ``source`` as a demo2rl dataset at ``out`` (atomically: no file
    on error or kill), streaming it episode by episode; returns its content hash.

    :param source: ``minari:<dataset id>`` or a dataset directory (:func:`resolve`).
    :param env_id: the task's env id (the file's; an export of another env id is refused).
    :param env_kwargs: the task's env kwargs (the same).
    :param base_seed: seeds the train/valid split; an export keeps its own.
    :param valid_fraction: the fraction of episodes in the validation split.
    :param codec: compression of image observations (:data:`demo2rl.demos.dataset.CODECS`).
    :param expected_observation_space: the task's observation space (a gymnasium space or its
        :func:`~demo2rl.demos.dataset.describe_space`); the dataset's must be it. None: the
        dataset's.
    :param expected_action_space: the same for actions.

    Bad episodes and spaces fail with a DatasetError naming the source, the episode and the
    field (see the module docstring).
    """
    path = resolve(source)
    name = _name(source, path)
    meta = _metadata(path)
    obs_space, act_space = _spaces(path, meta)
    spaces = {
        "observation_space": _described(name, "observation_space", obs_space),
        "action_space": _described(name, "action_space", act_space),
    }
    for key, expected in (
        ("observation_space", expected_observation_space),
        ("action_space", expected_action_space),
    ):
        if expected is not None:
            want = expected if isinstance(expected, Mapping) else dataset.describe_space(expected)
            problem = dataset.space_mismatch(key, dict(want), spaces[key])
            if problem:
                raise DatasetError(
                    name,
                    f"{problem} (expected vs the dataset's); expected: "
                    f"{dataset.short_description(want)}, the dataset's: "
                    f"{dataset.short_description(spaces[key])}",
                )
    try:
        data = minari.MinariDataset(path / "data")
    except (ValueError, OSError, KeyError) as err:
        raise DatasetError(name, f"Minari cannot open it ({err})") from err
    storage = data.storage
    n_episodes, n_steps = int(meta["total_episodes"]), int(meta["total_steps"])
    if n_episodes == 0:
        raise DatasetError(name, "it holds no episodes")
    record = meta.get(METADATA_KEY)
    task = {"env_id": env_id, "env_kwargs": dict(env_kwargs), "base_seed": base_seed}
    attrs = _attrs(name, meta, record, spaces, (obs_space, act_space), task)
    seeds = _episode_seeds(name, storage, n_episodes)
    index, info = _recorded_columns(name, record, n_episodes)
    columns = _columns(obs_space, act_space, n_steps, n_episodes)
    nbytes = sum(
        0
        if codec != "none" and image_column(dtype, shape[1:])
        else math.prod(shape) * dtype.itemsize
        for shape, dtype in columns.values()
    )  # compressed images: their size is not known before they are written

    checks = {key: dataset.SpaceValues.of(desc) for key, desc in spaces.items()}
    checks["rewards"] = dataset.SpaceValues.of(None)

    def fill(appenders: Mapping[str, dataset.Appender]) -> tuple[dataset.Columns, dataset.Columns]:
        lengths, returns = [], []
        episodes = iter(storage.get_episodes(range(n_episodes)))
        for i in range(n_episodes):
            length, ret = _append_episode(
                name, episodes, i, spaces, checks, appenders, sum(lengths), n_steps
            )
            lengths.append(length)
            returns.append(ret)
        if sum(lengths) != n_steps:
            raise DatasetError(
                name, f"its metadata says {n_steps} steps, its episodes hold {sum(lengths)}"
            )
        length_arr = np.asarray(lengths, dtype=np.int64)
        tables = {
            "index": index,
            "seed": seeds,
            "start": np.concatenate([[0], np.cumsum(length_arr)[:-1]]).astype(np.int64),
            "length": length_arr,
            "return": np.asarray(returns, dtype=np.float64),
        }
        return tables, info

    return dataset.write_streamed(
        out, attrs, columns, fill, valid_fraction=valid_fraction, codec=codec, nbytes=nbytes
    )


def export_minari(
    demos_path: str | os.PathLike[str], out_dir: str | os.PathLike[str], dataset_id: str
) -> Path:
    """Write the demo2rl dataset ``demos_path`` (its hash verified first) as the Minari dataset
    ``dataset_id`` in the store directory ``out_dir``; returns its directory,
    ``out_dir/<dataset_id>``, which ``minari.load_dataset(dataset_id)`` reads with
    ``MINARI_DATASETS_PATH=out_dir``. See the module docstring for what it records.

    It is written episode by episode into a hidden store beside it (``out_dir/.export-tmp-<pid>``,
    with ``MINARI_DATASETS_PATH`` set there for the call and restored after) and renamed into
    place, replacing an earlier export: an error or a kill leaves no half-written dataset (a
    killed export's hidden store is removed by the next one).
    """
    demos_path, out_dir = Path(demos_path), Path(out_dir).absolute()  # (Minari: a store path)
    _check_id(dataset_id, dataset_id)
    digest = dataset.verify(demos_path)
    tables = dataset.read_tables(demos_path)
    attrs = tables.attrs
    obs_space = dataset.space_from_description(attrs["observation_space"])
    act_space = dataset.space_from_description(attrs["action_space"])
    record = {
        "format": dataset.FORMAT,
        "format_version": dataset.FORMAT_VERSION,
        "attrs": {k: attrs[k] for k in RECORDED_ATTRS if k in attrs},
        "episodes": {"index": _column_record(tables.episodes["index"])},
        "info": {k: _column_record(v) for k, v in tables.info.items()},
        "exported_from": {
            "path": str(demos_path),
            "content_hash": digest,
            "valid_fraction": attrs.get("valid_fraction"),
        },
    }
    expert = attrs.get("expert")
    algorithm = expert.get("entry_point") if isinstance(expert, Mapping) else None
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_orphan_stores(out_dir)
    tmp_store = out_dir / f"{_TMP_STORE}{os.getpid()}"
    shutil.rmtree(tmp_store, ignore_errors=True)
    env = None
    try:
        env = _env_for_spec(attrs["env_id"], attrs["env_kwargs"])
        with _store(tmp_store), warnings.catch_warnings():
            # Minari's advice to name an author, an e-mail, a permalink and an eval env
            warnings.filterwarnings("ignore", r".*(is set to None|env_spec is None)", UserWarning)
            exported = minari.create_dataset_from_buffers(
                dataset_id,
                [],
                env=env,
                observation_space=obs_space,
                action_space=act_space,
                algorithm_name=algorithm or "demo2rl",
                description=(
                    f"demo2rl demonstrations of {attrs['env_id']}: {tables.n_episodes} episodes, "
                    f"{tables.n_steps} steps; content hash {digest}"
                ),
                jpeg_encoding=False,
            )
            exported.storage.update_episodes(_episode_buffers(demos_path, tables))
            exported.storage.update_metadata({METADATA_KEY: record})
        written = tmp_store / dataset_id
        for file in (written / "data").iterdir():  # durable before it becomes visible
            with open(file, "rb+") as fh:
                os.fsync(fh.fileno())
        final = out_dir / dataset_id
        final.parent.mkdir(parents=True, exist_ok=True)
        _replace_dir(written, final)
        namespace = parse_dataset_id(dataset_id)[0]
        if namespace is not None:
            with _store(out_dir):
                if namespace not in list_local_namespaces():
                    create_namespace(namespace)
    finally:
        if env is not None:
            env.close()
        shutil.rmtree(tmp_store, ignore_errors=True)
    return final


def import_hdf5(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    valid_fraction: float,
    codec: str = dataset.DEFAULT_CODEC,
) -> str:
    """Write the demo2rl dataset file ``path`` (a merged dataset, or a shard starting at episode
    0) as this experiment's dataset ``out``: its content hash and every value (a DatasetError
    naming the episode, the step and the field) checked as it is copied, split again with
    ``valid_fraction``, statistics of the new training split; returns the new content hash (the
    file's own, when ``valid_fraction`` is the one it was split with)."""
    n_episodes = dataset.read_tables(path).n_episodes
    return dataset.merge_files(
        [path],
        out,
        n_episodes=n_episodes,
        valid_fraction=valid_fraction,
        codec=codec,
        check_values=True,
    )


# --------------------------------------------------------------------------------------------
# import


def _name(source: str | os.PathLike[str], path: Path) -> str:
    """How errors name a source: as given, and where it lies when that is a store id."""
    text = os.fspath(source)
    return f"{text} ({path})" if text.startswith(PREFIX) else text


def _metadata(path: Path) -> dict[str, Any]:
    try:
        return MinariStorage.read_raw_metadata(path / "data")
    except (ValueError, OSError) as err:  # (json's errors are ValueErrors)
        raise DatasetError(path, f"unreadable Minari metadata ({err})") from err


def _spaces(path: Path, meta: Mapping[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The dataset's spaces: those its metadata records, else its env spec's (Minari's rule)."""
    try:
        if "observation_space" in meta and "action_space" in meta:
            return (
                deserialize_space(meta["observation_space"]),
                deserialize_space(meta["action_space"]),
            )
        storage = MinariStorage.read(path / "data")  # makes the env of its spec
        return storage.observation_space, storage.action_space
    except (ValueError, KeyError, TypeError, NotImplementedError, gym.error.Error) as err:
        raise DatasetError(path, f"its spaces cannot be read ({err})") from err


def _described(name: str | os.PathLike[str], key: str, space: gym.Space) -> dict[str, Any]:
    try:
        return dataset.describe_space(space)
    except TypeError:
        raise DatasetError(
            name, f"{key} {space} is not one demo2rl stores (a Box or a Discrete)"
        ) from None


def _attrs(
    name: str,
    meta: Mapping[str, Any],
    record: Mapping[str, Any] | None,
    spaces: Mapping[str, dict[str, Any]],
    gym_spaces: tuple[gym.Space, gym.Space],
    task: Mapping[str, Any],
) -> dict[str, Any]:
    """The imported file's attributes: for a foreign dataset, the caller's ``task`` (env id,
    env kwargs, base seed) and no expert; for an export, its recorded ones, checked against the
    caller's env and the dataset's spaces."""
    n_episodes = int(meta["total_episodes"])
    source = {
        "minari_dataset_id": meta.get("dataset_id"),
        "minari_version": meta.get("minari_version"),
        "path": name,
    }
    attrs = dataset.episode_attrs(
        env_id=task["env_id"],
        env_kwargs=task["env_kwargs"],
        env_spec=meta.get("env_spec", ""),
        observation_space=gym_spaces[0],
        action_space=gym_spaces[1],
        expert=None,
        base_seed=task["base_seed"],
        first_episode=0,
        n_episodes=n_episodes,
        versions=provenance.versions(),
        code_revision=provenance.code_revision(),
    )
    if record is None:
        return attrs | {"source": source}
    if (record.get("format"), record.get("format_version")) != (
        dataset.FORMAT,
        dataset.FORMAT_VERSION,
    ):
        raise DatasetError(
            name,
            f"exported as {record.get('format')} version {record.get('format_version')}; this "
            f"demo2rl reads {dataset.FORMAT} version {dataset.FORMAT_VERSION}",
        )
    recorded = dict(record["attrs"])
    if envs.env_name(recorded["env_id"]) != envs.env_name(task["env_id"]):
        raise DatasetError(
            name, f"exported from env {recorded['env_id']!r}, the task's is {task['env_id']!r}"
        )
    if recorded["env_kwargs"] != task["env_kwargs"]:
        raise DatasetError(
            name,
            f"exported with env_kwargs {recorded['env_kwargs']}, the task's are "
            f"{task['env_kwargs']}",
        )
    for key in ("observation_space", "action_space"):
        problem = dataset.space_mismatch(key, recorded[key], spaces[key])
        if problem:
            raise DatasetError(name, f"{problem} (its demo2rl record vs Minari's)")
    source["exported_from"] = record.get("exported_from")
    return attrs | recorded | {"source": source}


def _episode_seeds(name: str, storage: MinariStorage, n_episodes: int) -> np.ndarray:
    """Each episode's seed from its Minari metadata, -1 where it has none."""
    try:
        metas = list(storage.get_episode_metadata(range(n_episodes)))
    except (KeyError, OSError, ValueError) as err:
        raise DatasetError(name, f"episode metadata unreadable ({err})") from err
    seeds = [m.get("seed") for m in metas]
    return np.asarray([-1 if s is None else int(s) for s in seeds], dtype=np.int64)


def _recorded_columns(
    name: str, record: Mapping[str, Any] | None, n_episodes: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The episode index and info columns: an export's recorded ones, else 0..E-1 and none."""
    if record is None:
        return np.arange(n_episodes, dtype=np.int64), {}
    index = _column_from_record(record["episodes"]["index"])
    info = {k: _column_from_record(v) for k, v in record.get("info", {}).items()}
    for key, column in ({"index": index} | info).items():
        if len(column) != n_episodes:
            raise DatasetError(
                name, f"its demo2rl record has {len(column)} {key} values for {n_episodes} episodes"
            )
    return index, info


def _columns(
    obs_space: gym.Space, act_space: gym.Space, n_steps: int, n_episodes: int
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    obs_shape, act_shape = tuple(obs_space.shape), tuple(act_space.shape)
    return {
        "steps/observations": ((n_steps, *obs_shape), np.dtype(obs_space.dtype)),
        "steps/actions": ((n_steps, *act_shape), np.dtype(act_space.dtype)),
        "steps/rewards": ((n_steps,), np.dtype(np.float64)),
        "steps/terminated": ((n_steps,), np.dtype(bool)),
        "steps/truncated": ((n_steps,), np.dtype(bool)),
        "episodes/final_observation": ((n_episodes, *obs_shape), np.dtype(obs_space.dtype)),
    }


def _append_episode(
    name: str,
    episodes: Iterator[dict[str, Any]],
    i: int,
    spaces: Mapping[str, dict[str, Any]],
    checks: Mapping[str, dataset.SpaceValues],
    appenders: Mapping[str, dataset.Appender],
    written: int,
    n_steps: int,
) -> tuple[int, float]:
    """Read the next episode (the ``i``-th), check it (its fields' dtypes and shapes, its ends,
    and every value: ``checks`` by space name, and ``rewards``) and append its rows; returns its
    length and return. (One function, so that the episode is freed before the next is read.)"""
    try:
        episode = next(episodes)
    except (KeyError, OSError, ValueError, TypeError) as err:
        raise DatasetError(name, f"episode {i}: unreadable, a field missing? ({err})") from err
    where = f"episode {i} (Minari id {episode.get('id', i)})"
    rewards = np.asarray(episode.get("rewards"))
    if rewards.ndim != 1 or rewards.dtype.kind not in "fiu":
        raise DatasetError(
            name, f"{where}: rewards are {rewards.dtype} {rewards.shape}, not numbers"
        )
    n = len(rewards)
    if n == 0:
        raise DatasetError(name, f"{where}: an empty episode (0 steps)")
    obs = _checked(name, where, "observations", episode, spaces["observation_space"], n + 1)
    actions = _checked(name, where, "actions", episode, spaces["action_space"], n)
    for field, rows, values in (
        ("reward", rewards, checks["rewards"]),
        ("observation", obs, checks["observation_space"]),
        ("action", actions, checks["action_space"]),
    ):
        fault = values.fault(rows)
        if fault is not None:
            step, problem = fault
            final = " (the final observation)" if step == n else ""
            raise DatasetError(name, f"{where}, step {step}{final}: {field} {problem}")
    done = {}
    for field in ("terminations", "truncations"):
        flags = np.asarray(episode.get(field) if episode.get(field) is not None else [])
        if flags.shape != (n,) or flags.dtype.kind not in "biu":
            raise DatasetError(
                name, f"{where}: {field} are {flags.dtype} {flags.shape}, expected bool ({n},)"
            )
        done[field] = flags.astype(bool)
    ends = np.flatnonzero(done["terminations"] | done["truncations"])
    if len(ends) == 0 or ends[-1] != n - 1:
        raise DatasetError(
            name,
            f"{where}: neither terminated nor truncated at its last step ({n - 1}): a recording "
            "cut off (terminations and truncations)",
        )
    if ends[0] != n - 1:
        raise DatasetError(
            name,
            f"{where}: terminations or truncations at step {ends[0]}, before its last ({n - 1})",
        )
    if written + n > n_steps:
        raise DatasetError(
            name, f"{where}: its episodes hold more steps than the metadata's {n_steps}"
        )
    appenders["steps/observations"].append(obs[:-1])
    appenders["episodes/final_observation"].append(obs[-1:])
    appenders["steps/actions"].append(actions)
    appenders["steps/rewards"].append(rewards.astype(np.float64, copy=False))
    appenders["steps/terminated"].append(done["terminations"])
    appenders["steps/truncated"].append(done["truncations"])
    return n, dataset.episode_return(rewards.astype(np.float64, copy=False))


def _checked(
    name: str,
    where: str,
    field: str,
    episode: Mapping[str, Any],
    space: Mapping[str, Any],
    rows: int,
) -> np.ndarray:
    """An episode's ``field`` (observations or actions), checked against its space's dtype and
    shape (named with the expected ones) and to have ``rows`` rows."""
    value = np.asarray(episode.get(field))
    dtype = "int64" if space["type"] == "Discrete" else space["dtype"]
    shape = () if space["type"] == "Discrete" else tuple(space["shape"])
    if str(value.dtype) != dtype:
        raise DatasetError(name, f"{where}: {field} dtype {value.dtype} vs {dtype} expected")
    if value.shape[1:] != shape:
        raise DatasetError(
            name, f"{where}: {field} of shape {value.shape[1:]} vs {shape} expected (a row)"
        )
    if len(value) != rows:
        raise DatasetError(
            name,
            f"{where}: {len(value)} rows of {field}, expected {rows} (Minari records one "
            "observation more than its steps)",
        )
    return value


def _column_record(arr: np.ndarray) -> dict[str, Any]:
    return {"dtype": arr.dtype.str, "values": arr.tolist()}


def _column_from_record(record: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(record["values"], dtype=np.dtype(record["dtype"]))


def _check_id(source: str, dataset_id: str) -> None:
    """A Minari dataset id, ``(namespace/)name-v<version>``: nothing that leaves the store."""
    try:
        parse_dataset_id(dataset_id)
    except (ValueError, TypeError):  # (an id without a version is a TypeError in Minari 0.5)
        raise DatasetError(
            source,
            f"{dataset_id!r} is not a Minari dataset id ((namespace/)name-v<version>)",
        ) from None


def _local_ids() -> list[str]:
    """The ids in the local store (those Minari can list)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its complaints about each misconfigured dataset
        try:
            return sorted(minari.list_local_datasets())
        except (ValueError, TypeError, OSError):
            return []


# --------------------------------------------------------------------------------------------
# export


def _episode_buffers(path: Path, tables: dataset.Demos) -> Iterator[EpisodeBuffer]:
    """The file's episodes as Minari's episode buffers, one at a time (``T + 1``
    observations: the steps' and the final one)."""
    episodes = tables.episodes
    with h5py.File(path, "r") as f:
        steps = f["steps"]
        for e in range(tables.n_episodes):
            s, n = int(episodes["start"][e]), int(episodes["length"][e])
            obs = np.concatenate(
                [steps["observations"][s : s + n], f["episodes/final_observation"][e : e + 1]]
            )
            seed = int(episodes["seed"][e])
            yield EpisodeBuffer(
                seed=None if seed == -1 else seed,
                observations=obs,
                actions=steps["actions"][s : s + n],
                rewards=tables.steps["rewards"][s : s + n],
                terminations=tables.steps["terminated"][s : s + n],
                truncations=tables.steps["truncated"][s : s + n],
            )


def _env_for_spec(env_id: str, env_kwargs: Mapping[str, Any]) -> gym.Env | None:
    """One env of the task, for Minari to record its spec (so that ``recover_environment``
    works), or None where it cannot be made here (the export then has no env spec)."""
    try:
        return tasks.make_env(env_id, env_kwargs)
    except (gym.error.Error, tasks.TaskError, ImportError, TypeError, ValueError) as err:
        log.warning("exporting without an env spec: %s cannot be made here (%s)", env_id, err)
        return None


@contextlib.contextmanager
def _store(path: Path) -> Iterator[None]:
    """Minari's local store at ``path`` for the block (``MINARI_DATASETS_PATH``), restored after."""
    before = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STORE_ENV, None)
        else:
            os.environ[STORE_ENV] = before


def _replace_dir(new: Path, final: Path) -> None:
    """Rename the directory ``new`` to ``final``, replacing one there."""
    if not final.exists():
        os.replace(new, final)
        return
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(final, old)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)


def _remove_orphan_stores(out_dir: Path) -> None:
    """The hidden stores of exports killed outright (their process is gone)."""
    for tmp in out_dir.glob(f"{_TMP_STORE}*"):
        pid = tmp.name.removeprefix(_TMP_STORE)
        if pid.isdigit() and not io.process_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
