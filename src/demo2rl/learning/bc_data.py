"""Behaviour cloning's data path: a merged dataset's training and validation splits, served as
batches, either from memory or streamed from the HDF5 file.

* **In memory** (:class:`MemoryLoader`, the point of the design): the split is normalised once
  and held as two tensors (pinned when the device is CUDA). Each epoch draws one
  ``torch.randperm`` from the seeded generator, gathers the shuffled rows into a second buffer
  with one ``index_select``, and its batches are plain slices of it, copied with
  ``non_blocking=True``. No ``Dataset`` or ``DataLoader``: the per-sample Python overhead that
  dominates small-MLP training disappears.
* **Streaming** (:class:`StreamLoader`), when the split would not fit in ``bc.memory_fraction``
  of the available RAM: shuffled blocks of rows (HDF5 chunks), prefetched by background threads.

:func:`loaders` picks one and says which. Before any epoch :func:`check_finite` fails, naming the
dataset and the field, on NaN or inf in the statistics or the data (not a learning rate's fault).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import torch

from demo2rl.demos import dataset
from demo2rl.demos.dataset import DatasetError, Demos
from demo2rl.learning.policy import (
    OBS_EPSILON,
    ObsNormalizer,
    ObsTransform,
    obs_transform,
    scale_actions,
)
from demo2rl.observations import ObservationKind

log = logging.getLogger("demo2rl.learning.bc")  # BC's log lines, under one name as before the split

STREAM_BUFFER_BYTES = 32 << 20
"""Target size of one shuffled buffer of HDF5 blocks on the streaming path."""


def loaders(
    data: SplitDataset,
    normalizer: ObsTransform,
    act_space: gym.Space,
    device: torch.device,
    memory_fraction: float,
    workers: int,
) -> tuple[Loader, Loader, str]:
    """The (training, validation) loaders and their path, ``"memory"`` or ``"stream"``: in
    memory when the split fits in ``memory_fraction`` of the available RAM."""
    bytes_needed = data.bytes_needed()
    budget = memory_fraction * available_memory()
    if bytes_needed <= budget:
        train = MemoryLoader(*data.load(data.train_mask, normalizer, act_space), device)
        valid = MemoryLoader(*data.load(data.valid_mask, normalizer, act_space), device)
        return train, valid, "memory"
    log.warning(
        "training split needs ~%.0f MiB, over memory_fraction=%g of the available RAM "
        "(%.0f MiB): streaming shuffled blocks of rows (HDF5 chunks) instead",
        bytes_needed / 2**20,
        memory_fraction,
        budget / 2**20,
    )
    train = StreamLoader(data, data.train_mask, normalizer, act_space, device, workers)
    valid = StreamLoader(data, data.valid_mask, normalizer, act_space, device, workers)
    return train, valid, "stream"


def check_finite(data: SplitDataset, train: Loader, valid: Loader) -> None:
    """Fail with a :class:`DatasetError` naming the dataset and the field when the data BC is
    to train on holds NaN or inf: its statistics, then the observations and actions of both
    splits (in memory all their rows, one pass; streamed the first block of each, so that the
    epochs pay nothing). Such data would otherwise surface as an epoch that "diverged", blamed on
    the learning rate (:class:`demo2rl.learning.bc.Diverged`). It only reads: no random draws."""
    refused = "BC does not train on such data (demo2rl's import refuses it)"
    stats = data.demos.stats or {}
    for key in ("obs_mean", "obs_std", "act_mean", "act_std"):
        values = np.asarray(stats.get(key, 0.0)).reshape(-1)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            field = "observations" if key.startswith("obs") else "actions"
            raise DatasetError(
                data.name,
                f"its statistics are not finite: {key} holds {values[bad[0]]} at element "
                f"{bad[0]} (NaN or inf in the training split's {field}); {refused}",
            )
    if isinstance(train, StreamLoader):
        spans = [loader.blocks[0] for loader in (train, valid) if loader.blocks]
    else:
        spans = [(0, len(data.train_mask))]
    columns = data._columns or (data.observations, data.actions)  # vectors in memory: as loaded
    for field, column in zip(("observations", "actions"), columns, strict=True):
        found = _first_non_finite(column, data.train_mask | data.valid_mask, spans)
        if found is not None:
            row, element, value = found
            starts = data.demos.episodes["start"]
            episode = int(np.searchsorted(starts, row, side="right")) - 1
            split = "training" if data.train_mask[row] else "validation"
            raise DatasetError(
                data.name,
                f"its {field} are not finite: step row {row} (episode {episode}, its step "
                f"{row - int(starts[episode])}, {split} split) holds {value} at element "
                f"{element}; {refused}",
            )


def _first_non_finite(
    column: Any, rows: np.ndarray, spans: list[tuple[int, int]]
) -> tuple[int, int, float] | None:
    """The first row within ``spans`` and in ``rows`` (a step-row mask) whose value in
    ``column`` is NaN or inf, as (row, element, value); read in blocks, so that the check never
    holds a second copy of a column."""
    if np.dtype(column.dtype).kind != "f":
        return None  # integers (frames, discrete actions) are always finite
    block_rows = _block_rows(column)
    for start, stop in spans:
        for a in range(start, stop, block_rows):
            block = np.asarray(column[a : min(a + block_rows, stop)])
            block = block.reshape(len(block), -1)
            bad = np.flatnonzero(rows[a : a + len(block)] & ~np.isfinite(block).all(axis=1))
            if len(bad):
                values = block[bad[0]]
                element = int(np.flatnonzero(~np.isfinite(values))[0])
                return a + int(bad[0]), element, float(values[element])
    return None


def available_memory() -> int:
    """Bytes of RAM available to new allocations (MemAvailable, else free pages)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass
class SplitDataset:
    """A dataset with its train/valid split as step-row masks: its tables in memory and its step
    columns (numpy arrays or open h5py datasets)."""

    name: str
    demos: Demos  # steps hold the observation/action columns, maybe as h5py datasets
    train_mask: np.ndarray  # per step row: in the training split
    valid_mask: np.ndarray
    _columns: tuple[np.ndarray, np.ndarray] | None = dataclasses.field(default=None, repr=False)

    @property
    def observations(self) -> Any:
        return self.demos.steps["observations"]

    @property
    def actions(self) -> Any:
        return self.demos.steps["actions"]

    @functools.cached_property
    def observation_space(self) -> gym.Space:
        """The observation space the dataset records."""
        return dataset.space_from_description(self.demos.attrs["observation_space"])

    @property
    def images(self) -> bool:
        """Whether the observations are images (kept uint8 all the way to the network)."""
        return ObservationKind.of(self.observation_space).image

    def normalizer(self, clip_obs: float) -> ObsTransform:
        """Normalisation fitted on the training split (from the dataset's stats when present);
        for images the transform that leaves them uint8
        (:class:`demo2rl.learning.policy.ImageObs`)."""
        shape = self.observations.shape[1:]
        if self.images:
            return obs_transform(self.observation_space, None, clip_obs)
        stats = self.demos.stats or {}
        if "obs_mean" in stats and stats["obs_mean"].size == math.prod(shape):
            return ObsNormalizer.of_stats(stats, clip_obs, shape)
        count, mean, m2 = 0, np.zeros(shape), np.zeros(shape)  # Chan et al.'s parallel update
        for a, b in _blocks(len(self.train_mask), _block_rows(self.observations)):
            x = np.asarray(self.observations[a:b], dtype=np.float64)[self.train_mask[a:b]]
            if len(x):
                n, m = len(x), x.mean(axis=0)
                delta = m - mean
                mean = mean + delta * n / (count + n)
                m2 = m2 + ((x - m) ** 2).sum(axis=0) + delta**2 * count * n / (count + n)
                count += n
        return ObsNormalizer(mean, m2 / count, clip_obs, OBS_EPSILON)

    def bytes_needed(self) -> int:
        """RAM the in-memory path needs: for vectors the float32 tensors, their shuffled copy
        and the raw columns read whole; for images the uint8 frames once."""
        if self.images:  # uint8 frames, gathered batch by batch (MemoryLoader): held once
            row = math.prod(self.observations.shape[1:]) + 4 * math.prod(self.actions.shape[1:])
            return int((self.train_mask | self.valid_mask).sum()) * row
        row = 4 * (math.prod(self.observations.shape[1:]) + math.prod(self.actions.shape[1:]))
        raw = 0 if isinstance(self.observations, np.ndarray) else len(self.train_mask) * row
        return int(self.train_mask.sum()) * row * 2 + int(self.valid_mask.sum()) * row + raw

    def load(
        self, mask: np.ndarray, normalizer: ObsTransform, act_space: gym.Space
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The masked rows as (normalised observation, policy action) tensors. Vectors are
        read whole (small, fastest); frames block by block into one preallocated uint8 tensor,
        so loading holds no copy of the frames beside it."""
        if not self.images:
            if self._columns is None:  # one read of each whole column (a no-op for numpy)
                self._columns = (self.observations[()], self.actions[()])
            obs, actions = self._columns
            return _to_tensors(obs[mask], actions[mask], normalizer, act_space)
        empty = _to_tensors(self.observations[0:0], self.actions[0:0], normalizer, act_space)
        obs = torch.empty((int(mask.sum()), *empty[0].shape[1:]), dtype=empty[0].dtype)
        actions, done = [empty[1]], 0
        for a, b in _blocks(len(mask), _block_rows(self.observations)):
            keep = mask[a:b]
            if keep.any():
                obs_t, act_t = _to_tensors(
                    self.observations[a:b][keep], self.actions[a:b][keep], normalizer, act_space
                )
                obs[done : done + len(obs_t)] = obs_t
                actions.append(act_t)
                done += len(obs_t)
        return obs, torch.cat(actions)


@contextlib.contextmanager
def open_split_dataset(demos: Demos | str | os.PathLike[str]) -> Iterator[SplitDataset]:
    """The dataset with its split as row masks; a path is opened lazily (tables only)."""
    if isinstance(demos, Demos):
        yield _split_dataset("<in-memory dataset>", demos)
        return
    path = Path(demos)
    if not path.is_file():
        raise DatasetError(path, "no such dataset file")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise DatasetError(path, f"unreadable HDF5 file ({err})") from err
    with f:
        try:
            attrs = dataset.checked_attrs(path, f)
            steps = {k: f["steps"][k] for k in ("observations", "actions")}
            episodes = {k: f["episodes"][k][()] for k in ("start", "length")}
            split = {k: v[()] for k, v in f["split"].items()} if "split" in f else None
            stats = {k: v[()] for k, v in f["stats"].items()} if "stats" in f else None
        except KeyError as err:
            raise DatasetError(path, f"incomplete dataset ({err})") from err
        yield _split_dataset(str(path), Demos(steps, episodes, {}, attrs, split, stats))


def _split_dataset(name: str, demos: Demos) -> SplitDataset:
    """``demos`` (called ``name`` in errors) with its split as row masks, once the split is
    checked: present, covering the steps, with a non-empty training part."""
    if demos.split is None:
        raise DatasetError(name, "has no train/valid split (a shard, not a merged dataset)")
    n_rows = len(demos.steps["observations"])
    if int(demos.episodes["length"].sum()) != n_rows:
        raise DatasetError(name, "episode table does not cover /steps exactly")
    masks = {}
    for part in ("train", "valid"):
        masks[part] = np.zeros(n_rows, dtype=bool)
        masks[part][demos.step_rows(np.asarray(demos.split[part], dtype=np.int64))] = True
    if not masks["train"].any():
        raise DatasetError(name, "the training split is empty")
    return SplitDataset(name, demos, masks["train"], masks["valid"])


def _to_tensors(
    obs: np.ndarray, actions: np.ndarray, normalizer: ObsTransform, act_space: gym.Space
) -> tuple[torch.Tensor, torch.Tensor]:
    obs_t = torch.from_numpy(normalizer(obs))
    if isinstance(act_space, gym.spaces.Box):
        act_t = torch.from_numpy(np.asarray(scale_actions(actions, act_space), dtype=np.float32))
    else:
        act_t = torch.from_numpy(np.asarray(actions, dtype=np.int64).reshape(len(actions)))
    return obs_t, act_t


class MemoryLoader:
    """The whole split as tensors; an epoch is one randperm gather and contiguous slices.

    Frames (uint8 images) are gathered batch by batch instead, into two alternating (pinned)
    batch buffers: a shuffled copy of the whole split would double the RAM frames take, and a
    gather of a batch costs nothing beside a CNN's step. The batches are the same rows either
    way, so results do not depend on which."""

    def __init__(self, obs: torch.Tensor, actions: torch.Tensor, device: torch.device) -> None:
        self.n = len(obs)
        self.device = device
        pin = device.type == "cuda"
        self.obs = obs.pin_memory() if pin else obs
        self.actions = actions.pin_memory() if pin else actions
        self.per_batch = obs.dtype == torch.uint8
        # the shuffled copy each epoch is gathered into (pinned too, so copies are async)
        shape = (0, *self.obs.shape[1:]) if self.per_batch else self.obs.shape
        self._obs_buf = torch.empty(shape, dtype=self.obs.dtype, pin_memory=pin)
        self._act_buf = torch.empty(self.actions.shape, dtype=self.actions.dtype, pin_memory=pin)

    def batches(
        self, batch_size: int, generator: torch.Generator | None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Shuffled batches (in order when ``generator`` is None)."""
        obs, actions = self.obs, self.actions
        if generator is not None:
            if self.device.type == "cuda":  # last epoch's async copies may still read the buffer
                torch.cuda.current_stream(self.device).synchronize()
            perm = torch.randperm(self.n, generator=generator)
            if self.per_batch:
                yield from self._gathered(perm, batch_size)
                return
            obs = torch.index_select(self.obs, 0, perm, out=self._obs_buf)
            actions = torch.index_select(self.actions, 0, perm, out=self._act_buf)
        for start in range(0, self.n, batch_size):
            yield (
                obs[start : start + batch_size].to(self.device, non_blocking=True),
                actions[start : start + batch_size].to(self.device, non_blocking=True),
            )

    def _gathered(
        self, perm: torch.Tensor, batch_size: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of the rows ``perm`` names, each gathered into one of two batch buffers;
        with CUDA a buffer is refilled only once the copy out of it has finished."""
        cuda = self.device.type == "cuda"
        buffers = [
            torch.empty((batch_size, *self.obs.shape[1:]), dtype=self.obs.dtype, pin_memory=cuda)
            for _ in range(2)
        ]
        copied: list[torch.cuda.Event | None] = [None, None]
        actions = torch.index_select(self.actions, 0, perm, out=self._act_buf)
        for k, start in enumerate(range(0, self.n, batch_size)):
            rows = perm[start : start + batch_size]
            event = copied[k % 2]
            if event is not None:
                event.synchronize()
            buffer = buffers[k % 2][: len(rows)]
            torch.index_select(self.obs, 0, rows, out=buffer)
            obs = buffer.to(self.device, non_blocking=True)
            if cuda:
                copied[k % 2] = torch.cuda.Event()
                copied[k % 2].record()
            else:
                obs = obs.clone()  # the buffer is reused while the caller may keep the batch
            yield obs, actions[start : start + batch_size].to(self.device, non_blocking=True)


class StreamLoader:
    """Batches from the dataset file without holding the split in memory.

    The rows are cut into blocks aligned with the file's HDF5 chunks. An epoch visits the blocks
    in a random order, a few at a time: each group is read, normalised and shuffled into one
    buffer (~``STREAM_BUFFER_BYTES``) by background threads while the previous one trains. All
    random draws happen up front in the caller's thread, so results do not depend on timing.
    """

    def __init__(
        self,
        data: SplitDataset,
        mask: np.ndarray,
        normalizer: ObsTransform,
        act_space: gym.Space,
        device: torch.device,
        workers: int,
    ) -> None:
        self.data, self.mask, self.normalizer, self.act_space = data, mask, normalizer, act_space
        self.device, self.workers = device, workers
        self.n = int(mask.sum())
        blocks = _blocks(len(mask), _block_rows(data.observations))
        self.blocks = [(a, b) for a, b in blocks if mask[a:b].any()]
        self.counts = [int(mask[a:b].sum()) for a, b in self.blocks]
        row = (1 if data.images else 4) * math.prod(data.observations.shape[1:])
        row += 4 * math.prod(data.actions.shape[1:])
        block_bytes = max(1, max((b - a for a, b in self.blocks), default=1) * row)
        self.blocks_per_buffer = max(1, STREAM_BUFFER_BYTES // block_bytes)

    def batches(
        self, batch_size: int, generator: torch.Generator | None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Shuffled batches (blocks and rows in file order when ``generator`` is None)."""
        n_blocks, k = len(self.blocks), self.blocks_per_buffer
        shuffle = generator is not None
        order = (
            torch.randperm(n_blocks, generator=generator).tolist() if shuffle else range(n_blocks)
        )
        groups = [list(order[i : i + k]) for i in range(0, n_blocks, k)]
        perms = [
            torch.randperm(sum(self.counts[i] for i in g), generator=generator) if shuffle else None
            for g in groups
        ]
        pin = self.device.type == "cuda"
        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            pending: collections.deque = collections.deque()
            for g, perm in zip(groups, perms, strict=True):
                pending.append(pool.submit(self._read, g, perm, pin))
                if len(pending) <= self.workers:
                    continue
                yield from self._slices(pending.popleft().result(), batch_size)
            while pending:
                yield from self._slices(pending.popleft().result(), batch_size)

    def _read(
        self, group: list[int], perm: torch.Tensor | None, pin: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        obs, actions = [], []
        for a, b in sorted(self.blocks[i] for i in group):
            keep = self.mask[a:b]
            obs.append(self.data.observations[a:b][keep])
            actions.append(self.data.actions[a:b][keep])
        obs_t, act_t = _to_tensors(
            np.concatenate(obs), np.concatenate(actions), self.normalizer, self.act_space
        )
        if perm is not None:
            obs_t, act_t = obs_t[perm], act_t[perm]
        return (obs_t.pin_memory(), act_t.pin_memory()) if pin else (obs_t, act_t)

    def _slices(
        self, buffer: tuple[torch.Tensor, torch.Tensor], batch_size: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        obs, actions = buffer
        for start in range(0, len(obs), batch_size):
            yield (
                obs[start : start + batch_size].to(self.device, non_blocking=True),
                actions[start : start + batch_size].to(self.device, non_blocking=True),
            )


def _block_rows(column: Any) -> int:
    """Rows per streamed block: the HDF5 chunk height, or what one chunk would hold."""
    chunks = getattr(column, "chunks", None)
    if chunks:
        return int(chunks[0])
    row_bytes = max(1, column.itemsize * math.prod(column.shape[1:]))
    return max(1, dataset.CHUNK_BYTES // row_bytes)


def _blocks(n_rows: int, block_rows: int) -> list[tuple[int, int]]:
    return [(a, min(a + block_rows, n_rows)) for a in range(0, n_rows, block_rows)]


Loader = MemoryLoader | StreamLoader
"""Either loader: ``n`` rows, ``batches(batch_size, generator)``."""
