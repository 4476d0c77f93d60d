"""Benchmark of the behaviour-cloning data path: samples per second of training.

Three ways of feeding the same model, optimiser, batch size and training step
(``demo2rl.learning.bc.train_epoch``) with the training split of one dataset:

(a) ours          ``demo2rl.learning.bc.train_bc``: the split held in memory as tensors, one
randperm
                  gather per epoch, batches are slices (its per-epoch ``samples_per_s``);
(b) naive         a per-sample ``torch.utils.data.Dataset`` whose ``__getitem__`` reads one row
                  from the HDF5 file (opened lazily in each worker) and normalises it, behind
                  ``DataLoader(batch_size, shuffle=True, num_workers=2, pin_memory=True)``;
(c) compute only  the same steps over batches already sliced in memory, no loader at all.

Writes ``results/bench/bc.json`` (atomically). Usage::

    python benchmarks/bc.py [--dataset PATH] [--epochs 3] [--repeats 5] [--device cpu] [--threads 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from demo2rl import provenance
from demo2rl.config import BCConfig, PolicyConfig, TaskConfig
from demo2rl.config import load as load_config
from demo2rl.demos import collect, dataset
from demo2rl.io import write_json
from demo2rl.learning import bc, bc_data
from demo2rl.learning import policy as policy_lib
from demo2rl.learning.policy import ObsNormalizer, build_policy, resolve_device, scale_actions

ENV_ID = "Racing-v0"
EXPERT = "demo2rl.experts.racing:pure_pursuit"
DEFAULTS = load_config(None)
POLICY_CFG = PolicyConfig.of(DEFAULTS["policy"])
"""The default network (config/schema.yaml's defaults)."""
LOSS = {k: DEFAULTS["bc"][k] for k in ("ent_coef", "l2_coef")}
"""The default loss terms, for the training steps timed without train_bc."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, help="a merged demo2rl dataset (else built)")
    parser.add_argument("--episodes", type=int, default=200, help="episodes of a built dataset")
    parser.add_argument("--epochs", type=int, default=3, help="epochs for (a) and (c)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--device", default="cpu", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the trainer")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of (b)")
    parser.add_argument(
        "--naive-seconds", type=float, default=30.0, help="time budget of (b) (at most 1 epoch)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="repeats of (a) and (c)")
    parser.add_argument("--out", type=Path, default=Path("results/bench/bc.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    path = args.dataset or build_dataset(args.out.parent / "bc_demos.h5", args.episodes)
    demos = dataset.read(path)
    bc_cfg = BCConfig.of(
        DEFAULTS["bc"]
        | {
            "device": str(device),
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "max_epochs": args.epochs,
            "patience": args.epochs,
        }
    )

    # (a) and (c), interleaved and repeated: this machine may be shared, report medians
    ours_runs, compute_runs = [], []
    for repeat in range(args.repeats):
        start = time.perf_counter()
        ours = bc.train_bc(path, policy_cfg=POLICY_CFG, bc_cfg=bc_cfg, seed=0, threads=args.threads)
        ours_total = time.perf_counter() - start
        epoch_seconds = [ours.n_train / r["samples_per_s"] for r in ours.history]
        ours_runs.append(ours.n_train / float(np.mean(epoch_seconds)))
        if repeat == 0:
            batches = memory_batches(demos, ours, device, args.batch_size)
        compute_runs.append(compute_only(ours, batches, device, args))
        print(f"repeat {repeat}: ours {ours_runs[-1]:,.0f}, compute only {compute_runs[-1]:,.0f}")
    ours_sps, compute_sps = float(np.median(ours_runs)), float(np.median(compute_runs))
    print(f"(a) ours          {ours_sps:12,.0f} samples/s  ({ours.data_path} path, median)")
    print(f"(c) compute only  {compute_sps:12,.0f} samples/s  (median)")
    normalizer, act_space = ours.normalizer, ours.action_space
    train_rows = demos.step_rows(demos.split["train"])

    # (b) naive: per-sample HDF5 reads behind a DataLoader
    policy, optimizer = fresh_model(ours, device, args.learning_rate)
    rows = RowDataset(str(path), train_rows, normalizer, act_space)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")
        loader = DataLoader(
            rows,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=args.workers,
            pin_memory=True,
            generator=torch.Generator().manual_seed(0),
        )
        naive_samples, naive_seconds = run_naive(
            loader, policy, optimizer, device, args.naive_seconds
        )
    naive_sps = naive_samples / naive_seconds
    print(f"(b) naive         {naive_sps:12,.0f} samples/s  ({naive_samples} samples)")

    result = {
        "ours_samples_per_s": ours_sps,
        "naive_samples_per_s": naive_sps,
        "compute_only_samples_per_s": compute_sps,
        "ours_vs_naive": ours_sps / naive_sps,
        "ours_vs_compute_only": ours_sps / compute_sps,
        "ours_vs_compute_only_best_of_repeats": max(ours_runs) / max(compute_runs),
        "targets": {"ours_vs_naive": ">= 10", "ours_vs_compute_only": ">= 0.9"},
        "load_average_after": os.getloadavg(),
        "machine": machine(device),
        "device": str(device),
        "run": {
            "dataset": str(path),
            "dataset_hash": demos.attrs.get("content_hash"),
            "train_samples": len(train_rows),
            "observation_shape": list(demos.steps["observations"].shape[1:]),
            "policy_cfg": POLICY_CFG.to_dict(),
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "torch_threads": args.threads,
            "ours": {
                "epochs": args.epochs,
                "data_path": ours.data_path,
                "timed": "train_bc's per-epoch training loop (shuffle gather + steps), "
                "mean over epochs, median over repeats; validation and one-time load excluded",
                "repeats_samples_per_s": ours_runs,
                "total_seconds_incl_load_and_validation": ours_total,
            },
            "naive": {
                "num_workers": args.workers,
                "pin_memory": True,
                "samples": naive_samples,
                "seconds": naive_seconds,
                "timed": "from the first batch (worker start-up excluded) until the time budget "
                "or the end of one epoch",
            },
            "compute_only": {
                "epochs": args.epochs,
                "repeats_samples_per_s": compute_runs,
                "timed": "train_epoch over batches pre-sliced from tensors on the device",
            },
            "versions": provenance.versions(),
        },
    }
    write_json(args.out, result)
    print(
        f"ours / naive = {result['ours_vs_naive']:.1f}x (target >= 10), "
        f"ours / compute only = {result['ours_vs_compute_only']:.2f} (target >= 0.9)"
    )
    print(f"wrote {args.out}")


def memory_batches(
    demos: dataset.Demos, ours: bc.BCResult, device: torch.device, batch_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The training split, normalised, on the device, cut into batches once."""
    rows = demos.step_rows(demos.split["train"])
    obs = torch.from_numpy(ours.normalizer(demos.steps["observations"][rows])).to(device)
    act = scale_actions(demos.steps["actions"][rows], ours.action_space).astype(np.float32)
    act = torch.from_numpy(act).to(device)
    return [
        (obs[i : i + batch_size], act[i : i + batch_size]) for i in range(0, len(obs), batch_size)
    ]


def compute_only(
    ours: bc.BCResult, batches: list, device: torch.device, args: argparse.Namespace
) -> float:
    """Samples/s of the same training steps with no loader at all."""
    policy, optimizer = fresh_model(ours, device, args.learning_rate)
    bc.train_epoch(policy, optimizer, batches[:20], **LOSS)  # warm-up
    _sync(device)
    start = time.perf_counter()
    for _ in range(args.epochs):
        bc.train_epoch(policy, optimizer, batches, **LOSS)
    _sync(device)
    return args.epochs * sum(len(o) for o, _ in batches) / (time.perf_counter() - start)


class RowDataset(Dataset):
    """The design BC replaces: one HDF5 row per ``__getitem__``, normalised per sample."""

    def __init__(
        self, path: str, rows: np.ndarray, normalizer: ObsNormalizer, act_space: Any
    ) -> None:
        self.path, self.rows = path, rows
        self.normalizer, self.act_space = normalizer, act_space
        self._file: h5py.File | None = None  # opened lazily, once per worker process

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._file is None:
            self._file = h5py.File(self.path, "r")
        row = int(self.rows[i])
        obs = self._file["steps/observations"][row]
        action = self._file["steps/actions"][row]
        obs = self.normalizer(obs[None])[0]
        action = np.asarray(scale_actions(action[None], self.act_space), dtype=np.float32)[0]
        return torch.from_numpy(obs), torch.from_numpy(action)


def run_naive(
    loader: DataLoader,
    policy: Any,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    budget_s: float,
) -> tuple[int, float]:
    """Train on the loader's batches until the budget or the epoch ends; (samples, seconds)."""
    samples, start = 0, None

    def timed_batches(batches):
        nonlocal samples, start
        for obs, act in batches:
            if start is None:  # first batch: workers are up; start the clock after it
                start = time.perf_counter()
                continue
            samples += len(obs)
            yield obs.to(device, non_blocking=True), act.to(device, non_blocking=True)
            if time.perf_counter() - start > budget_s:
                return

    bc.train_epoch(policy, optimizer, timed_batches(iter(loader)), **LOSS)
    _sync(device)
    seconds = time.perf_counter() - start
    return samples, seconds


def fresh_model(ours: bc.BCResult, device: torch.device, lr: float) -> tuple[Any, Any]:
    """The same network and optimiser as train_bc builds (same seed)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        policy = build_policy(ours.observation_space, ours.action_space, POLICY_CFG).to(device)
    return policy, torch.optim.Adam(policy_lib.actor_parameters(policy), lr=lr)


def build_dataset(path: Path, n_episodes: int) -> Path:
    """Collect ``n_episodes`` racing demonstrations (once; reused when present)."""
    if path.is_file():
        with h5py.File(path, "r") as f:
            if f.attrs.get("n_episodes") == n_episodes:
                return path
    print(f"collecting {n_episodes} {ENV_ID} expert episodes into {path} ...")
    task = TaskConfig.of(
        {
            "env_id": ENV_ID,
            "env_kwargs": {},
            "frame_stack": 1,
            "expert": {"entry_point": EXPERT, "kwargs": {}, "input": "observation"},
        }
    )
    shard = collect.collect_shard(task=task, base_seed=0, episodes=range(n_episodes), n_envs=32)
    merged = dataset.merge([shard], ["bench"], n_episodes=n_episodes, valid_fraction=0.1)
    dataset.write(path, merged)
    return path


def machine(device: torch.device) -> dict[str, Any]:
    """Cores, CPU model, memory, and the GPU when used."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cores": os.cpu_count(),
        "cpu_model": cpu,
        "memory_available_gib": round(bc_data.available_memory() / 2**30, 1),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
