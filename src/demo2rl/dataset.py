"""The demonstration dataset: one HDF5 file, columnar, self-describing.

(About 400 lines, on purpose: the file format is one module, reader, writer, merge and content
hash together, so that a change to the format is made, and reviewed, in one place.)

Layout (``FORMAT_VERSION`` 1)::

    /steps/observations      (T, *obs_shape)   per-step arrays, episodes concatenated in order
    /steps/actions           (T, *act_shape)
    /steps/rewards           (T,) float64
    /steps/terminated        (T,) bool
    /steps/truncated         (T,) bool
    /episodes/index          (E,) int64        global episode index (sets its seed)
    /episodes/seed           (E,) int64
    /episodes/start          (E,) int64        first row of the episode in /steps
    /episodes/length         (E,) int64
    /episodes/return         (E,) float64
    /episodes/final_observation (E, *obs_shape) observation after the last step
    /episodes/info/<key>     (E,) float64      task-specific values at the episode's end
    /split/train, /split/valid                  episode rows (merged file only)
    /stats/{obs,act}_{mean,std}                 over the training split (merged file only)

File attributes hold the format version, the task (env id, kwargs, spec, spaces), the expert, the
seeds, package versions, code revision and creation time, and ``content_hash``: a SHA-256 over
every array and the attributes that define the data (not versions, revision or time), so two
files with equal hashes hold the same data bit for bit. Next observations are derived: within an
episode they are the following row, and after its last step the episode's final observation.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from demo2rl.io import atomic_path

FORMAT = "demo2rl-demos"
FORMAT_VERSION = 1
STEP_KEYS = ("observations", "actions", "rewards", "terminated", "truncated")
EPISODE_KEYS = ("index", "seed", "start", "length", "return", "final_observation")
# attributes that define the data, and so enter the content hash
DEFINING_ATTRS = (
    "format",
    "format_version",
    "env_id",
    "env_kwargs",
    "observation_space",
    "action_space",
    "expert",
    "base_seed",
)
CHUNK_BYTES = 1 << 20


class DatasetError(ValueError):
    """A dataset file that is missing, corrupt, or not what the caller needs."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


@dataclasses.dataclass
class Demos:
    """A demonstration dataset in memory (shard or merged)."""

    steps: dict[str, np.ndarray]
    episodes: dict[str, np.ndarray]
    info: dict[str, np.ndarray]
    attrs: dict[str, Any]
    split: dict[str, np.ndarray] | None = None
    stats: dict[str, np.ndarray] | None = None

    @property
    def n_steps(self) -> int:
        return len(self.steps["rewards"])

    @property
    def n_episodes(self) -> int:
        return len(self.episodes["index"])

    def step_rows(self, episode_rows: np.ndarray) -> np.ndarray:
        """Rows of /steps belonging to the given episode rows, in order."""
        starts = self.episodes["start"][episode_rows]
        lengths = self.episodes["length"][episode_rows]
        if len(starts) == 0:
            return np.zeros(0, dtype=np.int64)
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        return offsets + np.arange(int(lengths.sum()))

    def next_observations(self) -> np.ndarray:
        """Observation after each step (derived, see the module docstring)."""
        nxt = np.empty_like(self.steps["observations"])
        nxt[:-1] = self.steps["observations"][1:]
        last = self.episodes["start"] + self.episodes["length"] - 1
        nxt[last] = self.episodes["final_observation"]
        return nxt


def describe_space(space: gym.Space) -> dict[str, Any]:
    """A JSON-able description of a gymnasium space, exact enough to compare two of them."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": space.low.tolist(),
            "high": space.high.tolist(),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    raise TypeError(f"unsupported space for demonstrations: {space}")


def space_from_description(desc: Mapping[str, Any]) -> gym.Space:
    """The gymnasium space a :func:`describe_space` description describes (a dataset's or a
    checkpoint's record of the task's spaces)."""
    if desc.get("type") == "Box":
        dtype = np.dtype(desc["dtype"])
        low = np.asarray(desc["low"], dtype=dtype).reshape(desc["shape"])
        high = np.asarray(desc["high"], dtype=dtype).reshape(desc["shape"])
        return gym.spaces.Box(low, high, tuple(desc["shape"]), dtype)
    if desc.get("type") == "Discrete":
        return gym.spaces.Discrete(int(desc["n"]), start=int(desc.get("start", 0)))
    raise ValueError(f"unsupported space description: {desc}")


def space_mismatch(name: str, expected: Mapping[str, Any], actual: Mapping[str, Any]) -> str | None:
    """How two :func:`describe_space` descriptions differ, e.g. ``"observation_space shape (39,) vs
    (2,)"`` (``expected`` first), or None when they are equal."""
    if expected == actual:
        return None
    for key in ("type", "shape", "n", "dtype", "start", "low", "high"):
        a, b = expected.get(key), actual.get(key)
        if a != b:
            if key == "shape":
                a, b = tuple(a or ()), tuple(b or ())
            return f"{name} {key} {a} vs {b}"
    return f"{name} {dict(expected)} vs {dict(actual)}"


def check_dataset(
    demos: Demos,
    observation_space: gym.Space | None,
    action_space: gym.Space | None,
    env_id: str | None,
    *,
    path: str | os.PathLike[str] | None = None,
) -> None:
    """Raise DatasetError (naming ``path`` and the mismatch) if the dataset is not of this task.

    Env ids are compared without a ``module:`` prefix; None skips a check.
    """
    name = path if path is not None else "<in-memory dataset>"
    if env_id is not None:
        have = str(demos.attrs.get("env_id", "")).rpartition(":")[2]
        if have != env_id.rpartition(":")[2]:
            raise DatasetError(name, f"env_id {demos.attrs.get('env_id')!r} vs expected {env_id!r}")
    for key, space in (("observation_space", observation_space), ("action_space", action_space)):
        if space is None:
            continue
        problem = space_mismatch(key, demos.attrs.get(key, {}), describe_space(space))
        if problem:
            raise DatasetError(name, f"{problem} (dataset vs task)")


def episode_attrs(
    *,
    env_id: str,
    env_kwargs: dict[str, Any],
    env_spec: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    expert: dict[str, Any],
    base_seed: int,
    first_episode: int,
    n_episodes: int,
    versions: dict[str, str],
    code_revision: dict[str, Any],
) -> dict[str, Any]:
    """The attribute set every dataset file carries."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "env_spec": env_spec,
        "observation_space": describe_space(observation_space),
        "action_space": describe_space(action_space),
        "expert": expert,
        "base_seed": base_seed,
        "first_episode": first_episode,
        "n_episodes": n_episodes,
        "versions": versions,
        "code_revision": code_revision,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def content_hash(demos: Demos) -> str:
    """SHA-256 over the arrays and defining attributes (see the module docstring)."""
    groups = {"steps": demos.steps, "episodes": demos.episodes, "info": demos.info}
    groups |= {"split": demos.split or {}, "stats": demos.stats or {}}
    return _hash(groups, demos.attrs)


def verify(path: str | os.PathLike[str]) -> str:
    """Recompute a dataset file's content hash, reading it in blocks of rows (so it works for a
    file larger than memory), and compare it with the one it records; returns the hash.

    Raises DatasetError naming the file when it is unreadable, truncated or altered.
    """
    path = Path(path)
    recorded = read_attrs(path).get("content_hash")
    try:
        with h5py.File(path, "r") as f:
            attrs = {k: _decode_attr(v) for k, v in f.attrs.items()}
            groups = {
                "steps": {k: f["steps"][k] for k in STEP_KEYS},
                "episodes": {k: f["episodes"][k] for k in EPISODE_KEYS},
                "info": dict(f["episodes/info"].items()),
            }
            groups |= {g: dict(f[g].items()) if g in f else {} for g in ("split", "stats")}
            computed = _hash(groups, attrs)
    except (OSError, KeyError, ValueError) as err:
        raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
    if computed != recorded:
        raise DatasetError(
            path,
            f"content hash mismatch: the file records {recorded} but its data hash to "
            f"{computed}; it was modified or is corrupt (rerun the rule that wrote it)",
        )
    return computed


def _hash(groups: dict[str, Any], attrs: dict[str, Any]) -> str:
    """The content hash of arrays (numpy, or h5py datasets read in blocks) and attributes."""
    digest = hashlib.sha256()
    for group, arrays in groups.items():
        for key in sorted(arrays):
            arr = arrays[key]
            digest.update(f"{group}/{key}:{np.dtype(arr.dtype).str}:{arr.shape}".encode())
            if isinstance(arr, np.ndarray) or arr.ndim == 0:
                digest.update(np.ascontiguousarray(arr[()]).tobytes())
                continue
            rows = _chunks(arr)[0]
            for start in range(0, len(arr), rows):
                digest.update(np.ascontiguousarray(arr[start : start + rows]).tobytes())
    defining = {k: attrs.get(k) for k in DEFINING_ATTRS}
    digest.update(json.dumps(defining, sort_keys=True).encode())
    return digest.hexdigest()


def write(path: str | os.PathLike[str], demos: Demos) -> str:
    """Write ``demos`` to ``path`` atomically; returns the content hash (also stored).

    Checks the free space first: HDF5 fails badly on a full disk (h5py can crash the process).
    """
    digest = content_hash(demos)
    _check_space(Path(path), demos)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        for key, value in demos.attrs.items():
            f.attrs[key] = value if isinstance(value, (int, float, str)) else json.dumps(value)
        f.attrs["content_hash"] = digest
        groups = {"steps": demos.steps, "episodes": demos.episodes, "episodes/info": demos.info}
        groups |= {"split": demos.split or {}, "stats": demos.stats or {}}
        for group, arrays in groups.items():
            g = f.require_group(group)
            for key, arr in arrays.items():
                g.create_dataset(key, data=arr, chunks=_chunks(arr) if arr.size else None)
    return digest


def read_attrs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file attributes alone (format, task, provenance, ``content_hash``), without the data."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(path, "no such dataset file")
    try:
        with h5py.File(path, "r") as f:
            return {k: _decode_attr(v) for k, v in f.attrs.items()}
    except OSError as err:
        raise DatasetError(path, f"unreadable HDF5 dataset ({err})") from err


def read(path: str | os.PathLike[str], *, verify: bool = False) -> Demos:
    """Load a whole dataset file into memory; ``verify`` recomputes the content hash."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(path, "no such dataset file")
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT:
                raise DatasetError(path, f"not a {FORMAT} file (format={f.attrs.get('format')!r})")
            if f.attrs.get("format_version") != FORMAT_VERSION:
                raise DatasetError(
                    path,
                    f"format version {f.attrs.get('format_version')}, expected {FORMAT_VERSION}",
                )
            attrs = {k: _decode_attr(v) for k, v in f.attrs.items()}
            steps = {k: f["steps"][k][()] for k in STEP_KEYS}
            episodes = {k: f["episodes"][k][()] for k in EPISODE_KEYS}
            info = {k: v[()] for k, v in f["episodes/info"].items()}
            split = {k: v[()] for k, v in f["split"].items()} if "split" in f else None
            stats = {k: v[()] for k, v in f["stats"].items()} if "stats" in f else None
    except DatasetError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
    demos = Demos(steps, episodes, info, attrs, split, stats)
    _check_consistent(path, demos)
    if verify and content_hash(demos) != attrs.get("content_hash"):
        raise DatasetError(path, "content hash mismatch: the file was modified or is corrupt")
    return demos


def merge(
    shards: Sequence[Demos], names: Sequence[str], *, n_episodes: int, valid_fraction: float
) -> Demos:
    """Concatenate shards (contiguous episode ranges) and add the split and the statistics."""
    first = shards[0].attrs
    expected_start = 0
    for shard, name in zip(shards, names, strict=True):
        for key in DEFINING_ATTRS:
            if shard.attrs.get(key) != first.get(key):
                raise DatasetError(name, f"attribute {key!r} differs from the first shard's")
        if shard.attrs["first_episode"] != expected_start:
            raise DatasetError(
                name,
                f"starts at episode {shard.attrs['first_episode']}, expected {expected_start}",
            )
        expected_start += shard.n_episodes
    if expected_start != n_episodes:
        raise DatasetError(
            names[-1], f"shards hold {expected_start} episodes, expected {n_episodes}"
        )

    steps = {k: np.concatenate([s.steps[k] for s in shards]) for k in STEP_KEYS}
    episodes = {k: np.concatenate([s.episodes[k] for s in shards]) for k in EPISODE_KEYS}
    offsets = np.cumsum([0] + [s.n_steps for s in shards[:-1]])
    episodes["start"] = np.concatenate(
        [s.episodes["start"] + off for s, off in zip(shards, offsets, strict=True)]
    )
    info_keys = sorted(set.intersection(*(set(s.info) for s in shards)))
    info = {k: np.concatenate([s.info[k] for s in shards]) for k in info_keys}
    attrs = dict(first) | {
        "first_episode": 0,
        "n_episodes": n_episodes,
        "shards": [
            {"name": n, "hash": s.attrs.get("content_hash") or content_hash(s)}
            for s, n in zip(shards, names, strict=True)
        ],
        "valid_fraction": valid_fraction,
    }
    attrs.pop("content_hash", None)
    demos = Demos(steps, episodes, info, attrs)
    demos.split = episode_split(n_episodes, valid_fraction, seed=first["base_seed"])
    demos.stats = statistics(demos, demos.split["train"])
    return demos


def episode_split(n_episodes: int, valid_fraction: float, *, seed: int) -> dict[str, np.ndarray]:
    """Episode-level train/valid split, fixed by the seed and independent of sharding."""
    n_valid = 0 if valid_fraction <= 0 else max(1, round(valid_fraction * n_episodes))
    n_valid = min(n_valid, n_episodes - 1)
    order = np.random.default_rng([seed, 0x5B117]).permutation(n_episodes)
    return {"train": np.sort(order[n_valid:]), "valid": np.sort(order[:n_valid])}


def statistics(demos: Demos, episode_rows: np.ndarray) -> dict[str, np.ndarray]:
    """Mean and standard deviation of observations and actions over the given episodes."""
    rows = demos.step_rows(episode_rows)
    out = {}
    for name, key in (("obs", "observations"), ("act", "actions")):
        x = demos.steps[key][rows].astype(np.float64).reshape(len(rows), -1)
        out[f"{name}_mean"] = x.mean(axis=0)
        out[f"{name}_std"] = x.std(axis=0)
    return out


def episode_return(rewards: np.ndarray) -> float:
    """Exactly rounded sum of an episode's rewards (independent of summation order)."""
    return math.fsum(rewards.tolist())


def _check_space(path: Path, demos: Demos) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    groups = (demos.steps, demos.episodes, demos.info, demos.split or {}, demos.stats or {})
    need = sum(a.nbytes for g in groups for a in g.values()) * 1.05 + (1 << 20)
    free = shutil.disk_usage(path.parent).free
    if need > free:
        raise DatasetError(
            path,
            f"not enough disk space: the file needs about {need / 2**20:.1f} MiB, "
            f"{free / 2**20:.1f} MiB are free in {path.parent}",
        )


def _chunks(arr: np.ndarray) -> tuple[int, ...]:
    row_bytes = max(1, arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64)))
    return (max(1, min(len(arr), CHUNK_BYTES // row_bytes)), *arr.shape[1:])


def _decode_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value.item() if isinstance(value, np.generic) else value


def _check_consistent(path: Path, demos: Demos) -> None:
    n = demos.n_steps
    for key in STEP_KEYS:
        if len(demos.steps[key]) != n:
            raise DatasetError(path, f"/steps/{key} has {len(demos.steps[key])} rows, expected {n}")
    ends = demos.episodes["start"] + demos.episodes["length"]
    if demos.n_episodes and (demos.episodes["start"][0] != 0 or ends[-1] != n):
        raise DatasetError(path, "episode table does not cover /steps exactly")
    if np.any(demos.episodes["start"][1:] != ends[:-1]):
        raise DatasetError(path, "episode table has gaps or overlaps")
