"""The demonstration dataset: one HDF5 file, columnar, self-describing.

(About 1,000 lines, on purpose: the file format is one module, reader, writer, merge, content
hash and the check that a file's rows are values of the spaces it records (:class:`SpaceValues`,
which an import runs on every row), so that a change to the format is made, and reviewed, in one
place.)

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
    /stats/{obs,act}_{mean,std}                 over the training split (merged file only; no
                                                obs_* for image observations, see below)

File attributes hold the format version, the task (env id, kwargs, spec, spaces), the expert, the
seeds, package versions, code revision and creation time, the ``codec`` of the image columns, and
``content_hash``: a SHA-256 over every array (as decoded) and the attributes that define the data
(not versions, revision, time or codec), so two files with equal hashes hold the same data bit for
bit. Next observations are derived: within an episode they are the following row, and after its
last step the episode's final observation.

**Image observations** (uint8 rows of 2 or more dimensions, e.g. (48, 48, 1): the rule of
:func:`demo2rl.observations.image_column`): ``/steps/observations`` and
``/episodes/final_observation`` are chunked along time, :data:`IMAGE_CHUNK_ROWS` whole frames a
chunk, and compressed with the ``codec`` (:data:`CODECS`: gzip at :data:`GZIP_LEVEL`, lzf, or none;
no shuffle filter). Read them in contiguous blocks of whole chunks: a single frame decodes its
whole chunk. Every other column is stored uncompressed, in chunks of about :data:`CHUNK_BYTES`.
The merged file of image observations holds action statistics only: image policies scale pixels
by 1/255 and never normalise per pixel.
docs/dataset.md has the measurements behind these choices.

Memory: :func:`merge_files` (the merge stage) streams the shards into the merged file in blocks of
rows, through :func:`write_streamed`, which the Minari import (:mod:`demo2rl.demos.minari_io`) feeds
episode by episode; :func:`verify` hashes a file in blocks. None holds more than a few blocks of
frames (plus, for vector observations, the observation and action columns for the statistics).
:func:`read` loads a whole file; :func:`read_tables` everything but the observation and action
columns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from demo2rl import envs, io
from demo2rl.observations import image_column

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
"""Chunk size of the uncompressed (non-image) columns; also the read block of unchunked ones."""
CODECS = ("gzip", "lzf", "none")
"""Compressions of image columns (``collect.codec``): gzip and lzf are built into every HDF5 reader
(h5py, robomimic, Minari); zstd or Blosc would need hdf5plugin wherever the file is read."""
DEFAULT_CODEC = "gzip"
GZIP_LEVEL = 4
"""gzip level of image columns, by measurement (docs/dataset.md): against level 1, 1.35x smaller on
racing-like 48x48x1 frames and 1.4x on noisier 64x64x3 ones, as fast to read, 0.6-0.75x the write
speed (231 and 72 MiB/s of frames per CPU second: a small part of any collection's time). Level 6
is 1.7x smaller again on the racing-like frames, which are tiny already, but only 5% on the noisy
ones, where size matters, at 0.55-0.85x the write speed."""
IMAGE_CHUNK_ROWS = 64
"""Frames per chunk of an image column, by measurement (docs/dataset.md): files 0.6-1.7% larger than
with 128- or 256-frame chunks, the same block-read speed, single frames read twice as fast."""
COPY_BYTES = 4 << 20
"""Target size of one block of rows (whole chunks) that the merge copies and the hash reads."""
STREAMING = {"rdcc_nbytes": 0}
"""``h5py.File`` keywords of a file read or written in blocks of whole chunks: no chunk cache (it
would only copy each chunk once more; measured, it doubled the merge's peak memory)."""
COMPRESSIBLE = ("steps/observations", "episodes/final_observation")
"""The columns stored with the codec when they hold images."""


class DatasetError(io.FileProblem):
    """A dataset file that is missing, corrupt, or not what the caller needs."""


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


def short_description(desc: Mapping[str, Any]) -> str:
    """A :func:`describe_space` description without its bounds (which can hold a number per
    pixel), for a message."""
    return str({k: v for k, v in desc.items() if k not in ("low", "high")})


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


@dataclasses.dataclass(frozen=True)
class SpaceValues:
    """Which rows hold values of a space: of its dtype, finite, and within a Box's bounds where
    it has them (a Discrete's: ``start`` to ``start + n - 1``). An importer checks every row a
    foreign dataset brings with it (:mod:`demo2rl.demos.minari_io`); collected rows come from the
    env and the expert, whose values the rollout and the probe guard as they are made.

    Made from a :func:`describe_space` description (:meth:`of`) once, and asked of a block of
    rows at a time (:meth:`fault`): a few comparisons a value, and none at all for frames whose
    bounds are their dtype's (uint8 in [0, 255]), beyond the dtype.
    """

    dtype: np.dtype | None
    """The rows' dtype (None: any numeric dtype, as for rewards)."""
    low: np.ndarray | None
    """The lower bound of each element of a row, flat (None: none binds)."""
    high: np.ndarray | None
    """The upper bound, the same."""
    shape: tuple[int, ...] = ()
    """A row's shape (to name an element)."""

    @classmethod
    def of(cls, desc: Mapping[str, Any] | None) -> SpaceValues:
        """The check of the space ``desc`` describes; None: any finite number (rewards)."""
        if desc is None:
            return cls(None, None, None)
        if desc["type"] == "Discrete":
            start = int(desc.get("start", 0))
            return cls(np.dtype(np.int64), np.asarray([start]), np.asarray([start + desc["n"] - 1]))
        dtype = np.dtype(desc["dtype"])
        bound_dtype = dtype if dtype.kind == "f" else np.float64  # (a float space's are its own)
        low = np.asarray(desc["low"], dtype=bound_dtype).reshape(-1)
        high = np.asarray(desc["high"], dtype=bound_dtype).reshape(-1)
        if dtype.kind in "iu":  # bounds no value of the dtype can pass bind nothing
            low = np.maximum(low, np.iinfo(dtype).min)
            high = np.minimum(high, np.iinfo(dtype).max)
            binds_low = np.any(low > np.iinfo(dtype).min)
            binds_high = np.any(high < np.iinfo(dtype).max)
        else:
            binds_low, binds_high = np.any(np.isfinite(low)), np.any(np.isfinite(high))
        return cls(
            dtype,
            low if binds_low else None,
            high if binds_high else None,
            tuple(desc["shape"]),
        )

    def fault(self, rows: np.ndarray) -> tuple[int, str] | None:
        """The first of ``rows`` (an array of rows) that is not a value of the space, and what
        is wrong with it (``"element 0 is 7.0, above the space's high bound 1.0"``), or None."""
        if self.dtype is not None and rows.dtype != self.dtype:
            return 0, f"has dtype {rows.dtype}, the space's is {self.dtype}"
        if rows.dtype.kind not in "fiub":
            return 0, f"has dtype {rows.dtype}, not a number's"
        flat = rows.reshape(len(rows), -1)
        floats = flat.dtype.kind == "f"
        if (
            (not floats or np.isfinite(flat).all())
            and (self.low is None or (flat >= self.low).all())
            and (self.high is None or (flat <= self.high).all())
        ):  # (whole-array reductions: the rows that pass, which is all of them, cost least)
            return None
        bad = ~np.isfinite(flat) if floats else np.zeros(flat.shape, bool)
        if self.low is not None:
            bad |= flat < self.low
        if self.high is not None:
            bad |= flat > self.high
        hits = np.flatnonzero(bad.any(axis=1))
        if len(hits) == 0:
            return None
        row = int(hits[0])
        col = int(np.flatnonzero(bad[row])[0])
        value = flat[row, col].item()
        element = "" if self.shape == () else f"element {self._element(col)} "
        if not math.isfinite(value):
            return row, f"{element}is {value} (not finite)"
        if self.low is not None and value < self.low[col]:
            return row, f"{element}is {value}, below the space's low bound {self.low[col]:g}"
        return row, f"{element}is {value}, above the space's high bound {self.high[col]:g}"

    def _element(self, col: int) -> int | tuple[int, ...]:
        if len(self.shape) == 1:
            return col
        return tuple(int(i) for i in np.unravel_index(col, self.shape))


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
        if envs.env_name(str(demos.attrs.get("env_id", ""))) != envs.env_name(env_id):
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
            computed = _hash(_file_groups(f), _file_attrs(f))
    except (OSError, KeyError, ValueError) as err:
        raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
    _check_hash(path, recorded, computed)
    return computed


def _check_hash(path: str | os.PathLike[str], recorded: Any, computed: str) -> None:
    if computed != recorded:
        raise DatasetError(
            path,
            f"content hash mismatch: the file records {recorded} but its data hash to "
            f"{computed}; it was modified or is corrupt (rerun the rule that wrote it)",
        )


def _file_groups(f: h5py.File) -> dict[str, dict[str, Any]]:
    """An open file's arrays as h5py datasets, grouped as the content hash takes them."""
    groups = {
        "steps": {k: f["steps"][k] for k in STEP_KEYS},
        "episodes": {k: f["episodes"][k] for k in EPISODE_KEYS},
        "info": dict(f["episodes/info"].items()),
    }
    return groups | {g: dict(f[g].items()) if g in f else {} for g in ("split", "stats")}


def _file_attrs(f: h5py.File) -> dict[str, Any]:
    return {k: _decode_attr(v) for k, v in f.attrs.items()}


def checked_attrs(path: str | os.PathLike[str], f: h5py.File) -> dict[str, Any]:
    """The attributes of an open dataset file (JSON values decoded), once its format and format
    version are checked to be this module's; else a DatasetError naming ``path``."""
    if f.attrs.get("format") != FORMAT:
        raise DatasetError(path, f"not a {FORMAT} file (format={f.attrs.get('format')!r})")
    if f.attrs.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            path, f"format version {f.attrs.get('format_version')}, expected {FORMAT_VERSION}"
        )
    return _file_attrs(f)


Visitor = Callable[[str, str, np.ndarray], None]
"""Called with (group, key, block) for every block of rows the content hash reads."""


def _hash(groups: dict[str, Any], attrs: dict[str, Any], visit: Visitor | None = None) -> str:
    """The content hash of arrays (numpy, or h5py datasets read in blocks of whole chunks) and
    attributes; ``visit`` sees each block of an h5py dataset as it is hashed."""
    digest = hashlib.sha256()
    for group, arrays in groups.items():
        for key in sorted(arrays):
            arr = arrays[key]
            digest.update(f"{group}/{key}:{np.dtype(arr.dtype).str}:{arr.shape}".encode())
            if isinstance(arr, np.ndarray) or arr.ndim == 0:
                digest.update(_raw_bytes(arr[()]))
                continue
            rows = _block_rows(arr)
            for start in range(0, len(arr), rows):
                block = arr[start : start + rows]
                digest.update(_raw_bytes(block))
                if visit is not None:
                    visit(group, key, block)
    defining = {k: attrs.get(k) for k in DEFINING_ATTRS}
    digest.update(json.dumps(defining, sort_keys=True).encode())
    return digest.hexdigest()


def _raw_bytes(arr: Any) -> np.ndarray:
    """The bytes of an array in C order (as ``tobytes``), without copying a contiguous array."""
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def write(path: str | os.PathLike[str], demos: Demos, *, codec: str = DEFAULT_CODEC) -> str:
    """Write ``demos`` to ``path`` atomically; returns the content hash (also stored).

    Image observations are compressed with ``codec`` (one of :data:`CODECS`; the content hash
    does not depend on it). A disk without room for it fails with :class:`demo2rl.io.DiskFull`
    (before writing when the free space is short of the data, else when the disk fills up), and
    no file is left (see :func:`_created`).
    """
    _check_codec(codec)
    digest = content_hash(demos)
    groups = (demos.steps, demos.episodes, demos.info, demos.split or {}, demos.stats or {})
    _check_space(Path(path), sum(a.nbytes for g in groups for a in g.values()))
    with _created(path) as (f, disk):
        _write_attrs(f, demos.attrs | {"codec": codec, "content_hash": digest})
        groups = {"steps": demos.steps, "episodes": demos.episodes, "episodes/info": demos.info}
        groups |= {"split": demos.split or {}, "stats": demos.stats or {}}
        for group, arrays in groups.items():
            g = f.require_group(group)
            for key, arr in arrays.items():
                layout = _layout(f"{group}/{key}", arr.shape, arr.dtype, codec)
                g.create_dataset(key, data=arr, **layout)
                disk.check()
    return digest


@contextlib.contextmanager
def _created(
    path: str | os.PathLike[str], **kwargs: Any
) -> Iterator[tuple[h5py.File, io.DeferredFile]]:
    """A new HDF5 file written atomically to ``path`` (``kwargs``: more ``h5py.File`` keywords),
    with the :class:`demo2rl.io.DeferredFile` under it, whose ``check()`` the writer calls
    between its HDF5 calls.

    HDF5 writes through that file, which never fails a write for want of space: HDF5 that cannot
    flush its caches when it closes a file crashes the process (h5py 3.16, HDF5 2.0: a
    segmentation fault in ``File.close``), leaving the temporary file behind. So the first write
    that finds the disk full is remembered, HDF5 finishes its call and closes the file without
    an error, and the writer's next ``check()`` (and the one here after the close) raises it;
    :func:`demo2rl.io.atomic_path` then removes the file and raises :class:`demo2rl.io.DiskFull`.
    """
    with io.atomic_path(path) as tmp, io.DeferredFile(tmp) as disk:
        with h5py.File(disk, "w", **kwargs) as f:
            yield f, disk
        disk.check()


def _write_attrs(f: h5py.File, attrs: Mapping[str, Any]) -> None:
    for key, value in attrs.items():
        f.attrs[key] = value if isinstance(value, (int, float, str)) else json.dumps(value)


def _check_codec(codec: str) -> None:
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}: one of {', '.join(CODECS)}")


def _layout(name: str, shape: tuple[int, ...], dtype: Any, codec: str) -> dict[str, Any]:
    """``create_dataset`` keywords of a column (``name`` is ``group/key``): image columns chunked
    by whole frames and compressed with ``codec``; every other one in uncompressed ~1 MiB chunks
    (none for an empty column)."""
    if math.prod(shape) == 0:
        return {"chunks": None}
    if name not in COMPRESSIBLE or not image_column(dtype, shape[1:]):
        return {"chunks": _chunks(shape, dtype)}
    layout: dict[str, Any] = {"chunks": (min(shape[0], IMAGE_CHUNK_ROWS), *shape[1:])}
    if codec == "gzip":
        layout |= {"compression": "gzip", "compression_opts": GZIP_LEVEL, "shuffle": False}
    elif codec == "lzf":
        layout |= {"compression": "lzf", "shuffle": False}
    return layout


def read_attrs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file attributes alone (format, task, provenance, ``content_hash``), without the data."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(path, "no such dataset file")
    try:
        with h5py.File(path, "r") as f:
            return _file_attrs(f)
    except OSError as err:
        raise DatasetError(path, f"unreadable HDF5 dataset ({err})") from err


def read(path: str | os.PathLike[str], *, verify: bool = False) -> Demos:
    """Load a whole dataset file into memory; ``verify`` recomputes the content hash."""
    demos = _load(Path(path), STEP_KEYS, EPISODE_KEYS)
    if verify and content_hash(demos) != demos.attrs.get("content_hash"):
        raise DatasetError(path, "content hash mismatch: the file was modified or is corrupt")
    return demos


TABLE_STEP_KEYS = ("rewards", "terminated", "truncated")
TABLE_EPISODE_KEYS = ("index", "seed", "start", "length", "return")


def read_tables(path: str | os.PathLike[str]) -> Demos:
    """A dataset file without its observation and action columns: the attributes, the episode
    table (without final observations), info, split, statistics, and the per-step scalars
    (``rewards``, ``terminated``, ``truncated``), checked for consistency like :func:`read`.

    For what needs a file's size, returns, split or statistics, not its frames (a few bytes a
    step). Use :func:`verify` to check its content hash.
    """
    return _load(Path(path), TABLE_STEP_KEYS, TABLE_EPISODE_KEYS)


def _load(path: Path, step_keys: Sequence[str], episode_keys: Sequence[str]) -> Demos:
    if not path.is_file():
        raise DatasetError(path, "no such dataset file")
    try:
        with h5py.File(path, "r") as f:
            attrs = checked_attrs(path, f)
            n = len(f["steps/rewards"])
            for key in STEP_KEYS:  # every column's length, read or not
                if len(f["steps"][key]) != n:
                    raise DatasetError(
                        path, f"/steps/{key} has {len(f['steps'][key])} rows, expected {n}"
                    )
            steps = {k: f["steps"][k][()] for k in step_keys}
            episodes = {k: f["episodes"][k][()] for k in episode_keys}
            info = {k: v[()] for k, v in f["episodes/info"].items()}
            split = {k: v[()] for k, v in f["split"].items()} if "split" in f else None
            stats = {k: v[()] for k, v in f["stats"].items()} if "stats" in f else None
    except DatasetError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
    demos = Demos(steps, episodes, info, attrs, split, stats)
    _check_consistent(path, demos)
    return demos


def merge(
    shards: Sequence[Demos], names: Sequence[str], *, n_episodes: int, valid_fraction: float
) -> Demos:
    """Concatenate shards (contiguous episode ranges) and add the split and the statistics, in
    memory; :func:`merge_files` writes the same dataset from shard files in bounded memory."""
    for shard, name in zip(shards, names, strict=True):
        _check_same_task(shard.attrs, shards[0].attrs, name)
    _check_ranges(shards, names, n_episodes)
    steps = {k: np.concatenate([s.steps[k] for s in shards]) for k in STEP_KEYS}
    episodes = {k: np.concatenate([s.episodes[k] for s in shards]) for k in EPISODE_KEYS}
    episodes["start"] = _merged_starts(shards)
    info = _merged_info(shards)
    hashes = [s.attrs.get("content_hash") or content_hash(s) for s in shards]
    attrs = _merged_attrs(shards, names, hashes, n_episodes, valid_fraction)
    demos = Demos(steps, episodes, info, attrs)
    demos.split = episode_split(n_episodes, valid_fraction, seed=attrs["base_seed"])
    demos.stats = statistics(demos, demos.split["train"])
    return demos


def merge_files(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    n_episodes: int,
    valid_fraction: float,
    codec: str = DEFAULT_CODEC,
    check_values: bool = False,
) -> str:
    """Merge shard files into the dataset ``out`` (atomically) with its split and statistics, in
    bounded memory; returns its content hash. The same dataset, hash included, as :func:`write`
    of :func:`merge` of the shards read whole.

    Each step column is created at its final size and filled shard by shard in blocks of whole
    chunks, while each shard's content hash is recomputed from the same blocks (a shard that
    does not match stops the merge, naming it). With ``check_values`` (a file from elsewhere),
    each block's values are checked against the recorded spaces too (:class:`SpaceValues`,
    rewards finite): a DatasetError names the file, the episode, the step and the field. The
    episode table and info are concatenated in
    memory (small); the statistics read the action column, and the observation column unless it
    holds images (see the module docstring). :func:`write_streamed` writes the file.
    """
    _check_codec(codec)
    names = [str(p) for p in paths]
    shards: list[Demos] = []
    for path, name in zip(paths, names, strict=True):
        shard = read_tables(path)  # attributes and tables: a few bytes a step
        _check_same_task(shard.attrs, (shards or [shard])[0].attrs, name)
        if shards:  # the first shard's attributes are the merged file's; the others' can go
            shard.attrs = {k: shard.attrs[k] for k in _SHARD_ATTRS if k in shard.attrs}
        shards.append(shard)
    _check_ranges(shards, names, n_episodes)
    columns = _merged_columns(paths, shards)
    tables = {k: np.concatenate([s.episodes[k] for s in shards]) for k in TABLE_EPISODE_KEYS}
    tables["start"] = _merged_starts(shards)
    info = _merged_info(shards)
    hashes = [s.attrs["content_hash"] for s in shards]  # each checked as the shard is copied
    attrs = _merged_attrs(shards, names, hashes, n_episodes, valid_fraction)

    def fill(appenders: Mapping[str, Appender]) -> tuple[Columns, Columns]:
        for path, shard in zip(paths, shards, strict=True):
            check = _value_check(Path(path), shard, attrs) if check_values else None
            _copy_shard(Path(path), shard, appenders, check)
        return tables, info

    nbytes = _merged_bytes(paths, columns, codec, shards)
    return write_streamed(
        out, attrs, columns, fill, valid_fraction=valid_fraction, codec=codec, nbytes=nbytes
    )


Columns = dict[str, np.ndarray]
"""Named columns of one group: the episode table, or the info."""
Streamed = Mapping[str, tuple[tuple[int, ...], np.dtype]]
"""Shape and dtype of each streamed column, by ``group/key``: :data:`STREAMED` in that order."""
STREAMED = (*(f"steps/{k}" for k in STEP_KEYS), "episodes/final_observation")
"""The columns :func:`write_streamed` takes in blocks: the step columns, the final observations."""


def write_streamed(
    out: str | os.PathLike[str],
    attrs: Mapping[str, Any],
    columns: Streamed,
    fill: Callable[[Mapping[str, Appender]], tuple[Columns, Columns]],
    *,
    valid_fraction: float,
    codec: str,
    nbytes: int,
) -> str:
    """Write a dataset to ``out`` atomically in bounded memory, its rows fed by ``fill``; returns
    its content hash. What :func:`merge_files` (shards) and the Minari import
    (:mod:`demo2rl.demos.minari_io`) write.

    :param attrs: the file attributes (:func:`episode_attrs`' and more); ``valid_fraction`` and
        ``codec`` are added, ``content_hash`` at the end.
    :param columns: the final shape and dtype of each column of :data:`STREAMED`; each is created
        at that size, with the codec's layout.
    :param fill: called once with an :class:`Appender` per column, to which it appends every
        row in order (whole episodes or not, blocks of any size); returns the episode table
        (:data:`TABLE_EPISODE_KEYS`) and the info columns, one row an episode.
    :param valid_fraction: the split's (:func:`episode_split`, seeded by ``attrs["base_seed"]``).
    :param nbytes: about the bytes of the file, checked free before anything is written
        (:func:`demo2rl.io.check_space`).

    Then the episode table, info, split and the statistics of the training split
    (:func:`statistics`: they read the vector columns whole) are added, and the content hash
    is computed by reading the file back in blocks, before it is recorded and the file renamed
    into place. An error, or a kill, leaves no file (see :func:`_created`).
    """
    _check_codec(codec)
    if list(columns) != list(STREAMED):
        raise ValueError(f"streamed columns {list(columns)}, expected {list(STREAMED)}")
    attrs = dict(attrs) | {"valid_fraction": valid_fraction, "codec": codec}
    _check_space(Path(out), nbytes)
    with _created(out, **STREAMING) as (f, disk):
        _write_attrs(f, attrs)
        appenders = {}
        for name, (shape, dtype) in columns.items():
            group, _, key = name.rpartition("/")
            ds = f.require_group(group).create_dataset(
                key, shape=shape, dtype=dtype, **_layout(name, shape, dtype, codec)
            )
            appenders[name] = Appender(ds, Path(out), disk)
        tables, info = fill(appenders)
        for appender in appenders.values():
            appender.close()
        missing = set(TABLE_EPISODE_KEYS) - set(tables)
        if missing:
            raise ValueError(f"the episode table lacks {sorted(missing)}")
        for key in EPISODE_KEYS:
            if key in tables:
                f["episodes"].create_dataset(key, data=tables[key], **_small(tables[key]))
        g = f.require_group("episodes/info")
        for key, arr in info.items():
            g.create_dataset(key, data=arr, **_small(arr))
        split = episode_split(len(tables["index"]), valid_fraction, seed=attrs["base_seed"])
        for key, arr in split.items():
            f.require_group("split").create_dataset(key, data=arr, **_small(arr))
        rows = Demos({}, tables, {}, attrs).step_rows(split["train"])
        for key, arr in _file_statistics(f, rows).items():
            f.require_group("stats").create_dataset(key, data=arr, **_small(arr))
        f.flush()
        disk.check()  # before the file is read back
        digest = _hash(_file_groups(f), _file_attrs(f))  # the file as written, in blocks
        f.attrs["content_hash"] = digest
    return digest


_SHARD_ATTRS = ("first_episode", "content_hash", "codec")
"""What the merge keeps of a shard's attributes but the first's (whose observation space, in a
shard of images, may hold two lists of a number per pixel)."""


def _check_same_task(attrs: Mapping[str, Any], first: Mapping[str, Any], name: str) -> None:
    """A shard of the same task, expert and seeds as the first."""
    for key in DEFINING_ATTRS:
        if attrs.get(key) != first.get(key):
            raise DatasetError(name, f"attribute {key!r} differs from the first shard's")


def _check_ranges(shards: Sequence[Demos], names: Sequence[str], n_episodes: int) -> None:
    """Contiguous episode ranges from 0, ``n_episodes`` in all."""
    expected_start = 0
    for shard, name in zip(shards, names, strict=True):
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


def _merged_starts(shards: Sequence[Demos]) -> np.ndarray:
    offsets = np.cumsum([0] + [s.n_steps for s in shards[:-1]])
    return np.concatenate(
        [s.episodes["start"] + off for s, off in zip(shards, offsets, strict=True)]
    )


def _merged_info(shards: Sequence[Demos]) -> dict[str, np.ndarray]:
    info_keys = sorted(set.intersection(*(set(s.info) for s in shards)))
    return {k: np.concatenate([s.info[k] for s in shards]) for k in info_keys}


def _merged_attrs(
    shards: Sequence[Demos],
    names: Sequence[str],
    hashes: Sequence[str],
    n_episodes: int,
    valid_fraction: float,
) -> dict[str, Any]:
    attrs = dict(shards[0].attrs) | {
        "first_episode": 0,
        "n_episodes": n_episodes,
        "shards": [{"name": n, "hash": h} for n, h in zip(names, hashes, strict=True)],
        "valid_fraction": valid_fraction,
    }
    attrs.pop("content_hash", None)
    return attrs


def _merged_columns(
    paths: Sequence[str | os.PathLike[str]], shards: Sequence[Demos]
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of each streamed column of the merged file (``group/key``: the step
    columns and the final observations), checked to agree across the shards."""
    columns: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for path, shard in zip(paths, shards, strict=True):
        try:
            with h5py.File(path, "r") as f:
                found = {name: (f[name].shape, f[name].dtype) for name in STREAMED}
        except (OSError, KeyError, ValueError) as err:
            raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
        for name, (shape, dtype) in found.items():
            rows = shard.n_episodes if name.startswith("episodes/") else shard.n_steps
            if name not in columns:
                columns[name] = ((0, *shape[1:]), dtype)
            have_shape, have_dtype = columns[name]
            if (shape[1:], dtype) != (have_shape[1:], have_dtype) or shape[0] != rows:
                raise DatasetError(
                    path,
                    f"/{name} is {dtype} {shape}, expected {have_dtype} "
                    f"{(rows, *have_shape[1:])} (the first shard's rows)",
                )
            columns[name] = ((have_shape[0] + shape[0], *have_shape[1:]), have_dtype)
    return columns


def _merged_bytes(
    paths: Sequence[str | os.PathLike[str]],
    columns: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    codec: str,
    shards: Sequence[Demos],
) -> int:
    """Bytes the merged file needs, about: raw bytes, but for compressed columns the shards'
    stored bytes when they used the same codec."""
    raw = {name: math.prod(shape) * dtype.itemsize for name, (shape, dtype) in columns.items()}
    if codec != "none" and all(s.attrs.get("codec") == codec for s in shards):
        stored = dict.fromkeys(raw, 0)
        for path in paths:
            with h5py.File(path, "r") as f:
                for name in raw:
                    stored[name] += f[name].id.get_storage_size()
        raw = {n: stored[n] if n in COMPRESSIBLE else b for n, b in raw.items()}
    n_steps = sum(s.n_steps for s in shards)
    return sum(raw.values()) + 64 * sum(s.n_episodes for s in shards) + 16 * n_steps


def _copy_shard(
    path: Path, shard: Demos, appenders: Mapping[str, Appender], check: Visitor | None = None
) -> None:
    """Append a shard's streamed columns, block by block, checking its content hash on the way
    (and each block with ``check``, when given)."""

    def copy(group: str, key: str, block: np.ndarray) -> None:
        if check is not None:
            check(group, key, block)
        appender = appenders.get(f"{group}/{key}")
        if appender is not None:
            appender.append(block)

    try:
        with h5py.File(path, "r", **STREAMING) as f:
            computed = _hash(_file_groups(f), _file_attrs(f), visit=copy)
    except DatasetError:
        raise
    except OSError as err:
        if err.errno in io.NO_SPACE:  # the merged file's disk, not this shard
            raise
        raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
    except (KeyError, ValueError) as err:
        raise DatasetError(path, f"unreadable or incomplete HDF5 dataset ({err})") from err
    _check_hash(path, shard.attrs.get("content_hash"), computed)


def _value_check(path: Path, shard: Demos, attrs: Mapping[str, Any]) -> Visitor:
    """A visitor of a shard's blocks (in the order :func:`_hash` reads them) that raises a
    DatasetError naming ``path``, the episode, the step and the field at the first value that
    the spaces in ``attrs`` do not hold, or a reward that is not finite."""
    observations = SpaceValues.of(attrs["observation_space"])
    checks = {
        "steps/observations": ("observation", observations),
        "episodes/final_observation": ("observation", observations),
        "steps/actions": ("action", SpaceValues.of(attrs["action_space"])),
        "steps/rewards": ("reward", SpaceValues.of(None)),
    }
    seen = dict.fromkeys(checks, 0)  # rows of each column checked so far
    starts, lengths = shard.episodes["start"], shard.episodes["length"]

    def visit(group: str, key: str, block: np.ndarray) -> None:
        name = f"{group}/{key}"
        if name not in checks:
            return
        field, values = checks[name]
        fault = values.fault(block)
        if fault is not None:
            row = seen[name] + fault[0]
            if group == "episodes":
                episode, step, final = row, int(lengths[row]), " (the final observation)"
            else:
                episode = int(np.searchsorted(starts, row, side="right")) - 1
                step, final = row - int(starts[episode]), ""
            index = int(shard.episodes["index"][episode])
            raise DatasetError(
                path,
                f"episode {episode} (index {index}), step {step}{final}: {field} {fault[1]}",
            )
        seen[name] += len(block)

    return visit


class Appender:
    """Writes rows to an h5py dataset in order, in blocks of whole chunks: a chunk is written
    (and compressed) once, whatever the boundaries of the rows appended (shards, episodes)."""

    def __init__(self, ds: h5py.Dataset, path: Path, disk: io.DeferredFile) -> None:
        self.ds, self.path, self.disk = ds, path, disk
        self.at = 0  # rows written
        self.block = _block_rows(ds)  # (at most the column's rows)
        self.buffer: np.ndarray | None = None
        self.filled = 0

    def append(self, rows: np.ndarray) -> None:
        if self.at + self.filled + len(rows) > len(self.ds):
            raise DatasetError(self.path, f"more rows for {self.ds.name} than it holds")
        i = 0
        while i < len(rows):
            if self.filled == 0 and len(rows) - i >= self.block:  # whole blocks, straight through
                n = (len(rows) - i) // self.block * self.block
                self._write(rows[i : i + n])
                i += n
                continue
            if self.buffer is None:
                self.buffer = np.empty((self.block, *self.ds.shape[1:]), self.ds.dtype)
            n = min(self.block - self.filled, len(rows) - i)
            self.buffer[self.filled : self.filled + n] = rows[i : i + n]
            self.filled += n
            i += n
            if self.filled == self.block:
                self._flush()

    def close(self) -> None:
        self._flush()
        self.buffer = None
        if self.at != len(self.ds):
            raise DatasetError(self.path, f"{self.ds.name}: {self.at} rows of {len(self.ds)}")

    def _flush(self) -> None:
        if self.filled:
            assert self.buffer is not None
            self._write(self.buffer[: self.filled])
            self.filled = 0

    def _write(self, rows: np.ndarray) -> None:
        try:
            self.ds[self.at : self.at + len(rows)] = rows
        except (OSError, ValueError) as err:
            raise DatasetError(self.path, f"writing {self.ds.name} failed ({err})") from err
        self.disk.check()  # a full disk: raised here, not as a failed write (see _created)
        self.at += len(rows)


def _small(arr: np.ndarray) -> dict[str, Any]:
    """``create_dataset`` keywords of a table column (never an image column)."""
    return {"chunks": _chunks(arr.shape, arr.dtype) if arr.size else None}


def episode_split(n_episodes: int, valid_fraction: float, *, seed: int) -> dict[str, np.ndarray]:
    """Episode-level train/valid split, fixed by the seed and independent of sharding."""
    n_valid = 0 if valid_fraction <= 0 else max(1, round(valid_fraction * n_episodes))
    n_valid = min(n_valid, n_episodes - 1)
    order = np.random.default_rng([seed, 0x5B117]).permutation(n_episodes)
    return {"train": np.sort(order[n_valid:]), "valid": np.sort(order[:n_valid])}


def statistics(demos: Demos, episode_rows: np.ndarray) -> dict[str, np.ndarray]:
    """Mean and standard deviation of observations and actions over the given episodes (of the
    actions alone for image observations)."""
    rows = demos.step_rows(episode_rows)
    out = {}
    for name, key in (("obs", "observations"), ("act", "actions")):
        column = demos.steps[key]
        if name == "act" or not image_column(column.dtype, column.shape[1:]):
            out |= _column_stats(name, column, rows)
    return out


def _file_statistics(f: h5py.File, rows: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`statistics` of an open file's step columns (read whole: never image columns)."""
    out = {}
    for name, key in (("obs", "observations"), ("act", "actions")):
        column = f["steps"][key]
        if name == "act" or not image_column(column.dtype, column.shape[1:]):
            out |= _column_stats(name, column[()], rows)
    return out


def _column_stats(name: str, column: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    x = column[rows].astype(np.float64).reshape(len(rows), -1)
    return {f"{name}_mean": x.mean(axis=0), f"{name}_std": x.std(axis=0)}


def episode_return(rewards: np.ndarray) -> float:
    """Exactly rounded sum of an episode's rewards (independent of summation order)."""
    return math.fsum(rewards.tolist())


def _check_space(path: Path, nbytes: int) -> None:
    """Fail before writing (:class:`demo2rl.io.DiskFull`) a file of ``nbytes`` of data that
    cannot fit: its data, 5% and 1 MiB for HDF5's structures."""
    io.check_space(path, math.ceil(nbytes * 1.05) + (1 << 20))


def _chunks(shape: tuple[int, ...], dtype: Any) -> tuple[int, ...]:
    """Chunks of an uncompressed column: as many rows as fit in :data:`CHUNK_BYTES`."""
    row_bytes = max(1, np.dtype(dtype).itemsize * math.prod(shape[1:]))
    return (max(1, min(shape[0], CHUNK_BYTES // row_bytes)), *shape[1:])


def _block_rows(arr: Any) -> int:
    """Rows of one block read or written at once: whole chunks, about :data:`COPY_BYTES` (the
    rows of one :data:`CHUNK_BYTES` for an unchunked column)."""
    row_bytes = max(1, np.dtype(arr.dtype).itemsize * math.prod(arr.shape[1:]))
    chunks = getattr(arr, "chunks", None)
    if not chunks:
        return _chunks(arr.shape, arr.dtype)[0]
    rows = int(chunks[0]) * max(1, COPY_BYTES // (int(chunks[0]) * row_bytes))
    return max(1, min(rows, len(arr)))


def _decode_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value == "null":  # None as _write_attrs writes it (json.dumps)
        return None
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value.item() if isinstance(value, np.generic) else value


def _check_consistent(path: Path, demos: Demos) -> None:
    n = demos.n_steps
    for key in demos.steps:
        if len(demos.steps[key]) != n:
            raise DatasetError(path, f"/steps/{key} has {len(demos.steps[key])} rows, expected {n}")
    ends = demos.episodes["start"] + demos.episodes["length"]
    if demos.n_episodes and (demos.episodes["start"][0] != 0 or ends[-1] != n):
        raise DatasetError(path, "episode table does not cover /steps exactly")
    if np.any(demos.episodes["start"][1:] != ends[:-1]):
        raise DatasetError(path, "episode table has gaps or overlaps")
