"""Behaviour cloning: fit the shared policy to the expert's actions by maximum likelihood.

Everything that decides the result is in this file:

* **Loss** (:func:`bc_loss`): the negative log-likelihood of the expert's actions under the
  policy's action distribution (mean *and* log-std learn), minus ``ent_coef`` x entropy, plus
  ``l2_coef`` x the sum of the actor's squared weights. Only the actor is trained; the value
  head keeps its initialisation for PPO to fit.
* **Data** (the point of the design): the training split is normalised once and held in memory
  as two tensors (pinned when the device is CUDA). Each epoch draws one ``torch.randperm`` from a
  seeded generator, gathers the shuffled rows into a second buffer with one ``index_select``, and
  its batches are plain slices of that buffer, copied with ``non_blocking=True``. There is no
  ``Dataset`` or ``DataLoader``: the per-sample Python overhead that dominates small-MLP training
  disappears. If the split would not fit in ``memory_fraction`` of the available RAM, batches
  stream from shuffled HDF5 blocks instead (prefetched by a background thread; see
  :class:`_StreamLoader`), and the log says so.
* **Validation and stopping**: NLL on the dataset's episode-level validation split after every
  epoch; training stops after ``patience`` epochs without improvement (or ``max_epochs``) and the
  best weights are returned.
* **Determinism**: the initial weights (``torch.manual_seed(seed)`` inside a forked RNG) and every
  shuffle (one ``torch.Generator``) depend only on ``seed``, so on the CPU the same config, data,
  seed and thread count give bitwise identical weights.

The settings are the ``bc`` config section (:class:`demo2rl.config.BCConfig`; each key is
documented in config/schema.yaml, with its default) and the network is ``policy``
(:class:`demo2rl.config.PolicyConfig`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import torch
from stable_baselines3.common.policies import ActorCriticPolicy

from demo2rl import dataset
from demo2rl.config import BCConfig, PolicyConfig
from demo2rl.dataset import DatasetError, Demos, space_from_description, space_mismatch
from demo2rl.policy import ObsNormalizer, build_policy, resolve_device, scale_actions

log = logging.getLogger(__name__)

OBS_EPSILON = 1e-8
"""Epsilon of the observation normalisation (VecNormalize's default)."""
EVAL_BATCH = 8192
STREAM_BUFFER_BYTES = 32 << 20
"""Target size of one shuffled buffer of HDF5 blocks on the streaming path."""


@dataclasses.dataclass
class BCResult:
    """The outcome of :func:`train_bc`: the best policy and how training went."""

    policy: ActorCriticPolicy
    normalizer: ObsNormalizer
    history: list[dict[str, float]]
    best_epoch: int
    best_valid_nll: float
    stop_reason: str
    data_path: str  # "memory" or "stream"
    device: str
    observation_space: gym.Space
    action_space: gym.Space
    n_train: int
    n_valid: int
    dataset_hash: str | None
    seconds: float


# --------------------------------------------------------------------------------------------
# the loss


def bc_loss(
    policy: ActorCriticPolicy,
    obs: torch.Tensor,
    actions: torch.Tensor,
    *,
    ent_coef: float,
    l2_coef: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BC objective on a batch; returns (loss, mean NLL, mean entropy).

    ``loss = -mean log pi(a_expert | s) - ent_coef * mean entropy + l2_coef * sum(W**2)`` over the
    actor's weight matrices. The distribution is ``policy.get_distribution(obs)``: the actor half
    of ``policy.evaluate_actions`` (same log-probability and entropy, no value-head forward).
    """
    dist = policy.get_distribution(obs)
    nll = -dist.log_prob(actions).mean()
    entropy = dist.entropy()
    entropy = entropy.mean() if entropy is not None else torch.zeros((), device=obs.device)
    loss = nll - ent_coef * entropy
    if l2_coef:
        loss = loss + l2_coef * sum(w.pow(2).sum() for w in _actor_weights(policy))
    return loss, nll.detach(), entropy.detach()


def actor_parameters(policy: ActorCriticPolicy) -> list[torch.nn.Parameter]:
    """The parameters that shape the action distribution (everything but the value function)."""
    critic = {id(p) for p in policy.mlp_extractor.value_net.parameters()}
    critic |= {id(p) for p in policy.value_net.parameters()}
    if not policy.share_features_extractor:
        critic |= {id(p) for p in policy.vf_features_extractor.parameters()}
    return [p for p in policy.parameters() if id(p) not in critic]


def _actor_weights(policy: ActorCriticPolicy) -> list[torch.Tensor]:
    return [p for p in actor_parameters(policy) if p.ndim >= 2]


# --------------------------------------------------------------------------------------------
# training


def train_bc(
    demos: Demos | str | os.PathLike[str],
    *,
    policy_cfg: PolicyConfig,
    bc_cfg: BCConfig,
    seed: int,
    threads: int,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    env_id: str | None = None,
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
) -> BCResult:
    """Behaviour-clone the dataset (a ``Demos`` or an HDF5 path) into a fresh policy.

    ``on_epoch`` receives each epoch's record (as appended to ``history``). Passing the task's
    ``env_id`` and/or spaces checks the dataset against them first (:func:`check_dataset`).
    """
    device = resolve_device(bc_cfg.device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with _open_split_dataset(demos) as data:
            if env_id is not None or observation_space is not None or action_space is not None:
                check_dataset(data.demos, observation_space, action_space, env_id, path=data.name)
            return _train(data, policy_cfg, bc_cfg, seed, device, threads, on_epoch)
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    data: _SplitDataset,
    policy_cfg: PolicyConfig,
    cfg: BCConfig,
    seed: int,
    device: torch.device,
    threads: int,
    on_epoch: Callable[[dict[str, float]], None] | None,
) -> BCResult:
    start_time = time.perf_counter()
    obs_space = space_from_description(data.demos.attrs["observation_space"])
    act_space = space_from_description(data.demos.attrs["action_space"])
    normalizer = data.normalizer(cfg.clip_obs)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = build_policy(obs_space, act_space, policy_cfg)
    policy = policy.to(device)
    optimizer = torch.optim.Adam(actor_parameters(policy), lr=cfg.learning_rate)
    generator = torch.Generator().manual_seed(seed)

    bytes_needed = data.bytes_needed()
    budget = cfg.memory_fraction * available_memory()
    if bytes_needed <= budget:
        data_path = "memory"
        train = _MemoryLoader(*data.load(data.train_mask, normalizer, act_space), device)
        valid = _MemoryLoader(*data.load(data.valid_mask, normalizer, act_space), device)
    else:
        data_path = "stream"
        log.warning(
            "training split needs ~%.0f MiB, over memory_fraction=%g of the available RAM "
            "(%.0f MiB): streaming shuffled blocks of rows (HDF5 chunks) instead",
            bytes_needed / 2**20,
            cfg.memory_fraction,
            budget / 2**20,
        )
        workers = max(1, threads)
        train = _StreamLoader(data, data.train_mask, normalizer, act_space, device, workers)
        valid = _StreamLoader(data, data.valid_mask, normalizer, act_space, device, workers)
    log.info(
        "BC on %s: %d training / %d validation samples, %s path, device %s, seed %d",
        data.name,
        train.n,
        valid.n,
        data_path,
        device,
        seed,
    )

    history: list[dict[str, float]] = []
    best = {"nll": math.inf, "epoch": 0, "state": _state_copy(policy)}
    stop_reason = f"max_epochs reached ({cfg.max_epochs})"
    select_on = "valid_nll" if valid.n else "train_nll"
    if not valid.n:
        log.warning("empty validation split: early stopping on the training NLL")
    for epoch in range(1, cfg.max_epochs + 1):
        epoch_start = time.perf_counter()
        batches = train.batches(cfg.batch_size, generator)
        train_nll, _ = train_epoch(
            policy, optimizer, batches, ent_coef=cfg.ent_coef, l2_coef=cfg.l2_coef
        )
        train_seconds = time.perf_counter() - epoch_start
        valid_nll = evaluate_nll(policy, valid) if valid.n else math.nan
        record = {
            "epoch": epoch,
            "train_nll": train_nll,
            "valid_nll": valid_nll,
            "samples_per_s": train.n / train_seconds,
            "seconds": time.perf_counter() - epoch_start,
        }
        if not math.isfinite(train_nll):
            raise FloatingPointError(f"BC loss became non-finite in epoch {epoch}")
        history.append(record)
        if record[select_on] < best["nll"]:
            best = {"nll": record[select_on], "epoch": epoch, "state": _state_copy(policy)}
        log.info(
            "epoch %d/%d train_nll %.4f valid_nll %.4f (best %.4f @ %d) %.0f samples/s %.2f s",
            epoch,
            cfg.max_epochs,
            train_nll,
            valid_nll,
            best["nll"],
            best["epoch"],
            record["samples_per_s"],
            record["seconds"],
        )
        if on_epoch is not None:
            on_epoch(dict(record))
        if epoch - best["epoch"] >= cfg.patience:
            stop_reason = (
                f"patience: no {select_on.split('_')[0]} improvement for {cfg.patience} epochs"
            )
            break
    log.info(
        "BC stopped: %s; best epoch %d (%s %.4f)",
        stop_reason,
        best["epoch"],
        select_on,
        best["nll"],
    )
    policy.load_state_dict(best["state"])
    policy.eval()
    return BCResult(
        policy=policy,
        normalizer=normalizer,
        history=history,
        best_epoch=best["epoch"],
        best_valid_nll=best["nll"] if valid.n else math.nan,
        stop_reason=stop_reason,
        data_path=data_path,
        device=str(device),
        observation_space=obs_space,
        action_space=act_space,
        n_train=train.n,
        n_valid=valid.n,
        dataset_hash=data.demos.attrs.get("content_hash"),
        seconds=time.perf_counter() - start_time,
    )


def train_epoch(
    policy: ActorCriticPolicy,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    ent_coef: float,
    l2_coef: float,
) -> tuple[float, int]:
    """One pass of Adam steps on :func:`bc_loss` over ``batches``; returns (mean NLL, samples)."""
    policy.train()
    nll_sum, n = None, 0
    for obs, actions in batches:
        loss, nll, _ = bc_loss(policy, obs, actions, ent_coef=ent_coef, l2_coef=l2_coef)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        nll_sum = nll * len(obs) if nll_sum is None else nll_sum + nll * len(obs)
        n += len(obs)
    return (float(nll_sum) / n if n else math.nan), n  # one device sync per epoch


def evaluate_nll(policy: ActorCriticPolicy, loader: _MemoryLoader | _StreamLoader) -> float:
    """Mean NLL of the loader's actions under the policy (no gradients, eval mode)."""
    policy.eval()
    total = torch.zeros((), dtype=torch.float64, device=policy.device)
    with torch.no_grad():
        for obs, actions in loader.batches(EVAL_BATCH, None):
            total += -policy.get_distribution(obs).log_prob(actions).double().sum()
    policy.train()
    return float(total) / loader.n


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
        problem = space_mismatch(key, demos.attrs.get(key, {}), dataset.describe_space(space))
        if problem:
            raise DatasetError(name, f"{problem} (dataset vs task)")


def available_memory() -> int:
    """Bytes of RAM available to new allocations (MemAvailable, else free pages)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _state_copy(policy: ActorCriticPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


# --------------------------------------------------------------------------------------------
# data: the dataset's step columns, and the two ways of serving batches


@dataclasses.dataclass
class _SplitDataset:
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

    def normalizer(self, clip_obs: float) -> ObsNormalizer:
        """Normalisation fitted on the training split (from the dataset's stats when present)."""
        shape = self.observations.shape[1:]
        stats = self.demos.stats or {}
        if "obs_mean" in stats and stats["obs_mean"].size == math.prod(shape):
            mean = stats["obs_mean"].reshape(shape)
            var = np.square(stats["obs_std"].reshape(shape))
            return ObsNormalizer(mean, var, clip_obs, OBS_EPSILON)
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
        """RAM the in-memory path needs: float32 tensors, a shuffled copy, the raw columns."""
        row = 4 * (math.prod(self.observations.shape[1:]) + math.prod(self.actions.shape[1:]))
        raw = 0 if isinstance(self.observations, np.ndarray) else len(self.train_mask) * row
        return int(self.train_mask.sum()) * row * 2 + int(self.valid_mask.sum()) * row + raw

    def load(
        self, mask: np.ndarray, normalizer: ObsNormalizer, act_space: gym.Space
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The masked rows as (normalised observation, policy action) tensors."""
        if self._columns is None:  # one read of each whole column (a no-op for numpy)
            self._columns = (self.observations[()], self.actions[()])
        obs, actions = self._columns
        return _to_tensors(obs[mask], actions[mask], normalizer, act_space)


@contextlib.contextmanager
def _open_split_dataset(demos: Demos | str | os.PathLike[str]) -> Iterator[_SplitDataset]:
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
            if f.attrs.get("format") != dataset.FORMAT:
                raise DatasetError(path, f"not a {dataset.FORMAT} file")
            if f.attrs.get("format_version") != dataset.FORMAT_VERSION:
                version = f.attrs.get("format_version")
                raise DatasetError(path, f"format version {version}, not {dataset.FORMAT_VERSION}")
            attrs = {k: _decode(v) for k, v in f.attrs.items()}
            steps = {k: f["steps"][k] for k in ("observations", "actions")}
            episodes = {k: f["episodes"][k][()] for k in ("start", "length")}
            split = {k: v[()] for k, v in f["split"].items()} if "split" in f else None
            stats = {k: v[()] for k, v in f["stats"].items()} if "stats" in f else None
        except KeyError as err:
            raise DatasetError(path, f"incomplete dataset ({err})") from err
        yield _split_dataset(str(path), Demos(steps, episodes, {}, attrs, split, stats))


def _split_dataset(name: str, demos: Demos) -> _SplitDataset:
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
    return _SplitDataset(name, demos, masks["train"], masks["valid"])


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value[:1] in "[{":
        with contextlib.suppress(json.JSONDecodeError):
            return json.loads(value)
    return value.item() if isinstance(value, np.generic) else value


def _to_tensors(
    obs: np.ndarray, actions: np.ndarray, normalizer: ObsNormalizer, act_space: gym.Space
) -> tuple[torch.Tensor, torch.Tensor]:
    obs_t = torch.from_numpy(normalizer(obs))
    if isinstance(act_space, gym.spaces.Box):
        act_t = torch.from_numpy(np.asarray(scale_actions(actions, act_space), dtype=np.float32))
    else:
        act_t = torch.from_numpy(np.asarray(actions, dtype=np.int64).reshape(len(actions)))
    return obs_t, act_t


class _MemoryLoader:
    """The whole split as tensors; an epoch is one randperm gather and contiguous slices."""

    def __init__(self, obs: torch.Tensor, actions: torch.Tensor, device: torch.device) -> None:
        self.n = len(obs)
        self.device = device
        pin = device.type == "cuda"
        self.obs = obs.pin_memory() if pin else obs
        self.actions = actions.pin_memory() if pin else actions
        # the shuffled copy each epoch is gathered into (pinned too, so copies are async)
        self._obs_buf = torch.empty(self.obs.shape, dtype=self.obs.dtype, pin_memory=pin)
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
            obs = torch.index_select(self.obs, 0, perm, out=self._obs_buf)
            actions = torch.index_select(self.actions, 0, perm, out=self._act_buf)
        for start in range(0, self.n, batch_size):
            yield (
                obs[start : start + batch_size].to(self.device, non_blocking=True),
                actions[start : start + batch_size].to(self.device, non_blocking=True),
            )


class _StreamLoader:
    """Batches from the dataset file without holding the split in memory.

    The rows are cut into blocks aligned with the file's HDF5 chunks. An epoch visits the blocks
    in a random order, a few at a time: each group is read, normalised and shuffled into one
    buffer (~``STREAM_BUFFER_BYTES``) by background threads while the previous one trains. All
    random draws happen up front in the caller's thread, so results do not depend on timing.
    """

    def __init__(
        self,
        data: _SplitDataset,
        mask: np.ndarray,
        normalizer: ObsNormalizer,
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
        row = 4 * (math.prod(data.observations.shape[1:]) + math.prod(data.actions.shape[1:]))
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
