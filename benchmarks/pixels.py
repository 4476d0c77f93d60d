"""Benchmark of the camera (pixel) task's data path and training: ratios measured in one run.

The task is the built-in pixel task (``config/pixels.yaml``: Racing-v0 through a 48x48 uint8
camera, the privileged pure-pursuit expert reading ``info.state``, ``policy.cnn: nature``). A
dataset of ``--shards`` shards (``--episodes`` episodes of 400 steps each) is collected with the
default codec (gzip) and merged; every figure is a ratio against a baseline measured in the same
run (raw numbers recorded beside it):

1. ``bytes_vs_raw`` (target <= 0.125): the merged ``demos.h5``'s file bytes / the raw uint8
   frame bytes it holds (observations + final observations). Also the same merged with
   ``codec`` lzf and none (bytes only).
2. ``merge_peak_rss_vs_shard`` (target <= 2.0): peak RSS of the streaming merge
   (``dataset.merge_files``, gzip) in a fresh subprocess, minus that of a subprocess that only
   imports the same modules (both read with ``os.wait4``), / one shard's raw frame bytes.
3. ``bc_memory_vs_compute_only`` (target >= 0.9): BC samples/s (``bc.train_epoch``, NatureCNN,
   batch 256, 1 torch thread, CPU) fed by ``bc_data.MemoryLoader`` (the uint8 split in memory,
   one randperm gather per epoch, the network converting each batch) vs the same model,
   optimiser and steps over a list of (uint8 channels-first frames, actions) batches made once.
4. ``bc_streaming_vs_memory`` (target >= 0.7): the same with the split forced to stream
   (``memory_fraction`` tiny: ``bc_data.StreamLoader``, shuffled chunk blocks decoded by
   background threads; 1 worker, what ``train_bc`` uses at 1 thread) vs in memory. Also
   streaming with 2 worker threads, and a ``torch.utils.data.DataLoader(num_workers=2)``
   reading the same shuffled block groups in worker processes (``--no-dataloader`` skips it).
5. ``ppo_vs_sb3_cnn`` (target >= 1.0): PPO env steps/s of ``model.learn(N)`` (after a warm-up)
   for the scratch arm's model (``recipe.make_training_env`` + ``recipe.Start`` +
   ``recipe.build_model``; pixels.yaml's ``rl.ppo``, 16 native envs, 1 torch thread) vs SB3's
   defaults, ``PPO("CnnPolicy", the same kind of VecEnv, same n_steps/batch_size/n_epochs/lr)``.
   SB3 applies ``VecTransposeImage`` in both. Ours has ``net_arch`` pi/vf [64, 64] after the CNN,
   ``CnnPolicy`` none: both parameter counts are recorded.
6. ``train_bc_peak_rss_per_gb_frames`` (no target): peak RSS of ``bc.train_bc`` on the dataset
   path (in-memory path, ``--train-bc-epochs`` epochs) in a subprocess minus an import-only
   subprocess, per GB of the dataset's uint8 step frames (what BC loads). Also against a baseline
   that builds the same network and takes one Adam step (the model's and torch's own memory).

Timed figures are medians of ``--repeats`` interleaved repeats, the order of the arms rotated
from one repeat to the next (the machine may be shared). All seeds are fixed (collection base
seed 0, BC and PPO seed 0). Writes ``results/bench/pixels.json``; ``--quick`` (tiny sizes, one
repeat, < 1 min) is a smoke check whose ratios mean little. Usage::

    python benchmarks/pixels.py [--quick] [--shards 8] [--episodes 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from _common import BENCH_DIR, machine, report
from stable_baselines3 import PPO
from torch.utils.data import DataLoader, Dataset

from demo2rl import arms, tasks
from demo2rl.config import PolicyConfig, RLConfig, TaskConfig
from demo2rl.config import load as load_config
from demo2rl.demos import collect, dataset
from demo2rl.learning import bc, bc_data
from demo2rl.learning import policy as policy_lib
from demo2rl.rl import recipe

CONFIG = load_config(Path(__file__).resolve().parents[1] / "config" / "pixels.yaml")
TASK = TaskConfig.of(CONFIG["task"])
COLLECT_TASK = dataclasses.replace(TASK, max_episode_steps=None, timeout_s=None)
"""The task as this benchmark collects it: no episode cap but the env's own, no time limit."""
POLICY_CFG = PolicyConfig.of(CONFIG["policy"])
LOSS = {k: CONFIG["bc"][k] for k in ("ent_coef", "l2_coef")}
SEED = 0
CPU = torch.device("cpu")

# subprocess bodies whose peak RSS is measured (argv[1]: JSON arguments; "run": false imports only)
MERGE_CHILD = """
import json, sys
from demo2rl.demos import dataset
a = json.loads(sys.argv[1])
if a["run"]:
    dataset.merge_files(a["shards"], a["out"], n_episodes=a["n_episodes"],
                        valid_fraction=a["valid_fraction"], codec=a["codec"])
"""
TRAIN_BC_CHILD = """
import json, sys
import torch
from demo2rl.learning import bc, policy
from demo2rl.demos import dataset
from demo2rl.config import BCConfig, PolicyConfig
a = json.loads(sys.argv[1])
torch.set_num_threads(1)
if a["run"] == "train_bc":
    r = bc.train_bc(a["path"], policy_cfg=PolicyConfig.of(a["policy"]),
                    bc_cfg=BCConfig.of(a["bc"]), seed=0, threads=1)
    print(json.dumps({"data_path": r.data_path, "n_train": r.n_train, "seconds": r.seconds}))
elif a["run"] == "model":  # the network, its optimiser and one Adam step on one batch
    attrs = dataset.read_attrs(a["path"])
    obs_space = dataset.space_from_description(attrs["observation_space"])
    act_space = dataset.space_from_description(attrs["action_space"])
    p = policy.build_policy(obs_space, act_space, PolicyConfig.of(a["policy"]))
    opt = torch.optim.Adam(policy.actor_parameters(p), lr=1e-3)
    shape = policy.policy_observation_space(obs_space).shape
    obs = torch.zeros((a["bc"]["batch_size"], *shape), dtype=torch.uint8)
    act = torch.zeros((a["bc"]["batch_size"], *act_space.shape))
    loss, _, _ = bc.bc_loss(p, obs, act, ent_coef=0.0, l2_coef=0.0)
    loss.backward()
    opt.step()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke check (< 1 min)")
    parser.add_argument("--shards", type=int, default=8, help="shards of the dataset (>= 8)")
    parser.add_argument("--episodes", type=int, default=32, help="episodes per shard (400 steps)")
    parser.add_argument("--collect-envs", type=int, default=16, help="envs per collection batch")
    parser.add_argument("--batch-size", type=int, default=256, help="BC batch size")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats (medians)")
    parser.add_argument("--no-dataloader", action="store_true", help="skip the DataLoader arm")
    parser.add_argument("--n-envs", type=int, default=16, help="PPO envs")
    parser.add_argument("--ppo-steps", type=int, default=16384, help="timed PPO env steps")
    parser.add_argument("--ppo-warmup", type=int, default=2048, help="untimed PPO steps first")
    parser.add_argument("--train-bc-epochs", type=int, default=1, help="epochs of figure 6")
    parser.add_argument("--workdir", type=Path, help="where the shards and datasets go (kept)")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.repeats = 2, 1
        args.ppo_steps, args.ppo_warmup = 2048, 2048
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    started = time.perf_counter()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pixels-", dir=_bench_dir()))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        data = data_figures(workdir, args)
        training = bc_figures(Path(data["run"]["dataset"]), args)
        rss = train_bc_memory(Path(data["run"]["dataset"]), args)
        ppo = ppo_figures(args)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    figures = {
        "bytes_vs_raw": data["bytes_vs_raw"],
        "merge_peak_rss_vs_shard": data["merge_peak_rss_vs_shard"],
        "bc_memory_vs_compute_only": training["bc_memory_vs_compute_only"],
        "bc_streaming_vs_memory": training["bc_streaming_vs_memory"],
        "ppo_vs_sb3_cnn": ppo["ppo_vs_sb3_cnn"],
        "train_bc_peak_rss_per_gb_frames": rss["train_bc_peak_rss_per_gb_frames"],
        "targets": {
            "bytes_vs_raw": "<= 0.125",
            "merge_peak_rss_vs_shard": "<= 2.0",
            "bc_memory_vs_compute_only": ">= 0.9",
            "bc_streaming_vs_memory": ">= 0.7",
            "ppo_vs_sb3_cnn": ">= 1.0",
            "train_bc_peak_rss_per_gb_frames": "none",
        },
        "data": data,
        "bc": training,
        "train_bc_memory": rss,
        "ppo": ppo,
        "quick": args.quick,
        "seconds": time.perf_counter() - started,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "machine": machine(),
    }
    report("pixels", figures)


def _bench_dir() -> Path:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    return BENCH_DIR


# --------------------------------------------------------------------------------------------
# 1, 2: the dataset's bytes and the merge's memory


def data_figures(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Collect the shards (gzip), merge them in a measured subprocess, then merge them again
    with lzf and none for their bytes."""
    n_episodes = args.shards * args.episodes
    start = time.perf_counter()
    shards, shard_frames = [], []
    for shard in range(args.shards):
        demos = collect.collect_shard(
            task=COLLECT_TASK,
            base_seed=SEED,
            episodes=collect.shard_episodes(n_episodes, args.shards, shard),
            n_envs=args.collect_envs,
        )
        path = workdir / f"shard{shard}.h5"
        dataset.write(path, demos, codec=dataset.DEFAULT_CODEC)
        shards.append(str(path))
        shard_frames.append(
            demos.steps["observations"].nbytes + demos.episodes["final_observation"].nbytes
        )
        del demos
    collect_seconds = time.perf_counter() - start
    print(f"collected {args.shards} shards x {args.episodes} episodes in {collect_seconds:.1f} s")

    merge_args = {
        "n_episodes": n_episodes,
        "valid_fraction": CONFIG["collect"]["valid_fraction"],
    }
    out = workdir / "demos.h5"
    base_rss = min(
        child_peak_rss(MERGE_CHILD, {"run": False})[0] for _ in range(max(1, args.repeats))
    )
    merge_rss, merge_seconds, _ = child_peak_rss(
        MERGE_CHILD,
        merge_args | {"run": True, "shards": shards, "out": str(out), "codec": "gzip"},
    )
    raw = sum(shard_frames)
    stored = {"gzip": out.stat().st_size}
    merge_seconds_by_codec = {"gzip": merge_seconds}
    for codec in ("lzf", "none"):
        other = workdir / f"demos-{codec}.h5"
        t = time.perf_counter()
        dataset.merge_files(shards, other, codec=codec, **merge_args)
        merge_seconds_by_codec[codec] = time.perf_counter() - t
        stored[codec] = other.stat().st_size
        other.unlink()
    with h5py.File(out, "r") as f:
        frames_shape = list(f["steps/observations"].shape)
    print(f"merged: {stored['gzip'] / raw:.3f} of the raw frames, merge RSS {merge_rss >> 20} MiB")
    shard_sizes = [Path(p).stat().st_size for p in shards]
    return {
        "bytes_vs_raw": stored["gzip"] / raw,
        "merge_peak_rss_vs_shard": (merge_rss - base_rss) / max(shard_frames),
        "file_bytes": stored,
        "raw_frame_bytes": raw,
        "bytes_vs_raw_by_codec": {codec: b / raw for codec, b in stored.items()},
        "shard_raw_frame_bytes": max(shard_frames),
        "shard_file_bytes": shard_sizes,
        "merge_peak_rss_bytes": merge_rss,
        "import_only_peak_rss_bytes": base_rss,
        "merge_rss_above_imports_bytes": merge_rss - base_rss,
        "merge_seconds": merge_seconds_by_codec,
        "collect_seconds": collect_seconds,
        "run": {
            "dataset": str(out),
            "shards": args.shards,
            "episodes_per_shard": args.episodes,
            "n_episodes": n_episodes,
            "observations_shape": frames_shape,
            "env_kwargs": TASK.env_kwargs,
            "expert": TASK.expert.entry_point,
            "expert_input": TASK.expert.input,
            "measured": "merge: peak RSS of a fresh python running dataset.merge_files (gzip) "
            "minus that of one importing demo2rl.demos.dataset only (min over repeats), os.wait4",
        },
    }


LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-c", *sys.argv[1:]])
_, status, usage = os.wait4(pid, 0)
sys.stdout.flush()
print(json.dumps({"exit": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}))
"""
"""Forks the measured process from a fresh, small interpreter: Linux counts the RSS a process
had before ``exec`` in its ``ru_maxrss``, so a child forked from this (large) benchmark process
would report at least the benchmark's own RSS."""


def child_peak_rss(code: str, arguments: dict[str, Any]) -> tuple[int, float, str]:
    """Run ``python -c code json(arguments)`` (through :data:`LAUNCHER`); (its peak RSS in
    bytes, as ``os.wait4`` reports it, wall seconds, its stdout)."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", LAUNCHER, code, json.dumps(arguments)],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout
    seconds = time.perf_counter() - start
    *lines, last = out.rstrip("\n").split("\n")
    usage = json.loads(last)
    if usage["exit"] != 0:
        raise RuntimeError(f"the measured subprocess failed (exit {usage['exit']})")
    return usage["maxrss_kib"] * 1024, seconds, "\n".join(lines)


# --------------------------------------------------------------------------------------------
# 3, 4: BC's loaders


def bc_figures(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Samples/s of the same BC steps fed by each loader, interleaved repeats."""
    runs: dict[str, list[float]] = {
        "memory": [],
        "compute_only": [],
        "stream_1_worker": [],
        "stream_2_workers": [],
    }
    if not args.no_dataloader:
        runs["stream_dataloader_2_workers"] = []
    with bc_data.open_split_dataset(path) as data:
        attrs = data.demos.attrs
        obs_space = dataset.space_from_description(attrs["observation_space"])
        act_space = dataset.space_from_description(attrs["action_space"])
        transform = data.normalizer(CONFIG["bc"]["clip_obs"])
        memory, _, kind = bc_data.loaders(
            data, transform, act_space, CPU, CONFIG["bc"]["memory_fraction"], workers=1
        )
        assert kind == "memory", kind
        streams = {}
        for workers in (1, 2):
            streams[workers], _, kind = bc_data.loaders(
                data, transform, act_space, CPU, 1e-12, workers=workers
            )
            assert kind == "stream", kind
        perm = torch.randperm(memory.n, generator=torch.Generator().manual_seed(SEED))
        obs, act = memory.obs[perm], memory.actions[perm]
        b = args.batch_size
        prepared = [(obs[i : i + b], act[i : i + b]) for i in range(0, memory.n, b)]
        del obs, act
        feeds = {
            "memory": lambda gen: memory.batches(b, gen),
            "compute_only": lambda gen: iter(prepared),
            "stream_1_worker": lambda gen: streams[1].batches(b, gen),
            "stream_2_workers": lambda gen: streams[2].batches(b, gen),
            "stream_dataloader_2_workers": lambda gen: dataloader_batches(
                path, streams[1], transform, act_space, b, gen
            ),
        }
        names = list(runs)
        for repeat in range(args.repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:  # rotated
                samples, seconds = timed_epoch(obs_space, act_space, feeds[name], prepared)
                assert samples == memory.n, (name, samples, memory.n)
                runs[name].append(samples / seconds)
            shown = ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items())
            print(f"BC repeat {repeat}: {shown} samples/s")
        n_train, block_rows = memory.n, data.observations.chunks[0]
        blocks_per_buffer = streams[1].blocks_per_buffer
        n_groups = -(-len(streams[1].blocks) // blocks_per_buffer)
    sps = {name: float(np.median(v)) for name, v in runs.items()}
    stream_workers = {"1": sps["stream_1_worker"], "2": sps["stream_2_workers"]}
    result = {
        "bc_memory_vs_compute_only": sps["memory"] / sps["compute_only"],
        "bc_streaming_vs_memory": sps["stream_1_worker"] / sps["memory"],
        "bc_streaming_2_workers_vs_memory": sps["stream_2_workers"] / sps["memory"],
        "samples_per_s": sps,
        "repeats_samples_per_s": runs,
        "faster_streaming": max(stream_workers, key=stream_workers.get) + " worker thread(s)",
    }
    if "stream_dataloader_2_workers" in sps:
        result["bc_dataloader_2_workers_vs_memory"] = (
            sps["stream_dataloader_2_workers"] / sps["memory"]
        )
    result["run"] = {
        "train_samples": n_train,
        "batch_size": args.batch_size,
        "policy_cfg": POLICY_CFG.to_dict(),
        "torch_threads": torch.get_num_threads(),
        "stream_block_rows": block_rows,
        "stream_blocks_per_buffer": blocks_per_buffer,
        "stream_buffers_per_epoch": n_groups,
        "timed": "one epoch of bc.train_epoch over the training split (loader included: "
        "MemoryLoader's randperm gather, StreamLoader's decoding, DataLoader's worker start) "
        "with a fresh seeded model after 4 warm-up steps; median over repeats",
    }
    return result


def timed_epoch(obs_space, act_space, feed, warmup: list) -> tuple[int, float]:
    """(samples, seconds) of one epoch of ``bc.train_epoch`` on a fresh seeded model."""
    policy, optimizer = fresh_model(obs_space, act_space)
    bc.train_epoch(policy, optimizer, warmup[:4], **LOSS)
    generator = torch.Generator().manual_seed(SEED)
    start = time.perf_counter()
    _, samples = bc.train_epoch(policy, optimizer, feed(generator), **LOSS)
    return samples, time.perf_counter() - start


def fresh_model(obs_space, act_space) -> tuple[Any, torch.optim.Optimizer]:
    """The network and optimiser train_bc builds (seed 0)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        policy = policy_lib.build_policy(obs_space, act_space, POLICY_CFG)
    lr = CONFIG["bc"]["learning_rate"]
    return policy, torch.optim.Adam(policy_lib.actor_parameters(policy), lr=lr)


class BlockGroups(Dataset):
    """Item i: the i-th group of HDF5 chunk blocks of the training split, read in a DataLoader
    worker (the file opened once per worker), transformed and shuffled: StreamLoader's buffers,
    decoded in processes instead of threads."""

    def __init__(self, path: Path, blocks, mask, transform, act_space, groups_, perms) -> None:
        self.path, self.blocks, self.mask = str(path), blocks, mask
        self.transform, self.act_space = transform, act_space
        self.groups, self.perms = groups_, perms
        self._file: h5py.File | None = None

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._file is None:
            self._file = h5py.File(self.path, "r")
        obs_col, act_col = self._file["steps/observations"], self._file["steps/actions"]
        obs, actions = [], []
        for a, b in sorted(self.blocks[j] for j in self.groups[i]):
            keep = self.mask[a:b]
            obs.append(obs_col[a:b][keep])
            actions.append(act_col[a:b][keep])
        obs_t = torch.from_numpy(self.transform(np.concatenate(obs)))
        act = policy_lib.scale_actions(np.concatenate(actions), self.act_space)
        act_t = torch.from_numpy(np.asarray(act, dtype=np.float32))
        return obs_t[self.perms[i]], act_t[self.perms[i]]


def dataloader_batches(
    path: Path, stream: bc_data.StreamLoader, transform, act_space, batch_size: int, generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The StreamLoader's shuffled block groups (drawn the same way) through
    ``DataLoader(num_workers=2)``, cut into batches."""
    n_blocks, k = len(stream.blocks), stream.blocks_per_buffer
    order = torch.randperm(n_blocks, generator=generator).tolist()
    groups_ = [order[i : i + k] for i in range(0, n_blocks, k)]
    perms = [torch.randperm(sum(stream.counts[i] for i in g), generator=generator) for g in groups_]
    ds = BlockGroups(path, stream.blocks, stream.mask, transform, act_space, groups_, perms)
    loader = DataLoader(ds, batch_size=None, shuffle=False, num_workers=2, prefetch_factor=1)
    for obs, act in loader:
        for start in range(0, len(obs), batch_size):
            yield obs[start : start + batch_size], act[start : start + batch_size]


# --------------------------------------------------------------------------------------------
# 6: train_bc's memory


def train_bc_memory(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of train_bc (in-memory path) in a subprocess, above two baselines."""
    bc_cfg = CONFIG["bc"] | {
        "device": "cpu",
        "batch_size": args.batch_size,
        "max_epochs": args.train_bc_epochs,
        "patience": args.train_bc_epochs,
    }
    common = {"path": str(path), "policy": POLICY_CFG.to_dict(), "bc": bc_cfg}
    imports, _, _ = child_peak_rss(TRAIN_BC_CHILD, common | {"run": None})
    model, _, _ = child_peak_rss(TRAIN_BC_CHILD, common | {"run": "model"})
    peak, seconds, out = child_peak_rss(TRAIN_BC_CHILD, common | {"run": "train_bc"})
    run = json.loads(out.strip().splitlines()[-1])
    assert run["data_path"] == "memory", run
    tables = dataset.read_tables(path)
    with h5py.File(path, "r") as f:
        row_bytes = f["steps/observations"][0].nbytes
    frame_bytes = tables.n_steps * row_bytes
    # BC holds the training rows twice (the split and its shuffled copy), the validation once
    train_bytes = len(tables.step_rows(tables.split["train"])) * row_bytes
    gb = frame_bytes / 1e9
    print(f"train_bc: peak RSS {peak >> 20} MiB, {(peak - imports) / 1e9 / gb:.2f} GB per GB")
    return {
        "train_bc_peak_rss_per_gb_frames": (peak - imports) / 1e9 / gb,
        "train_bc_peak_rss_per_gb_frames_above_model": (peak - model) / 1e9 / gb,
        "train_bc_peak_rss_bytes": peak,
        "import_only_peak_rss_bytes": imports,
        "model_and_one_step_peak_rss_bytes": model,
        "step_frame_bytes": frame_bytes,
        "train_frame_bytes": train_bytes,
        "train_bc_seconds": seconds,
        "train_bc": run,
        "epochs": args.train_bc_epochs,
    }


# --------------------------------------------------------------------------------------------
# 5: PPO


def ppo_figures(args: argparse.Namespace) -> dict[str, Any]:
    """Env steps/s of ``learn`` for our scratch arm's model and SB3's CnnPolicy defaults."""
    rl_cfg = RLConfig.of(
        arms.get("scratch").rl_slice(
            CONFIG["rl"] | {"n_envs": args.n_envs, "vec_env": "native", "device": "cpu"}
        )
    )
    obs_space, act_space = tasks.spaces(TASK.env_id, TASK.env_kwargs, TASK.frame_stack)
    transform = policy_lib.obs_transform(obs_space, None, CONFIG["bc"]["clip_obs"])
    ppo = rl_cfg.ppo

    def env():
        return recipe.make_training_env(TASK, rl_cfg, transform, act_space, n_workers=1)

    start = recipe.Start(
        arms.get("scratch"), env(), POLICY_CFG, rl_cfg, None, lambda: None, SEED, "cpu"
    )
    models = {
        "ours": recipe.build_model(start),
        "sb3_cnn": PPO(
            "CnnPolicy",
            env(),
            n_steps=ppo.n_steps,
            batch_size=ppo.batch_size,
            n_epochs=ppo.n_epochs,
            learning_rate=ppo.learning_rate,
            seed=SEED,
            device="cpu",
            verbose=0,
        ),
    }
    for model in models.values():
        model.learn(args.ppo_warmup)
    runs: dict[str, list[float]] = {name: [] for name in models}
    for repeat in range(args.repeats):
        for name, model in list(models.items())[:: 1 if repeat % 2 == 0 else -1]:  # alternated
            t = time.perf_counter()
            model.learn(args.ppo_steps, reset_num_timesteps=False)
            runs[name].append(args.ppo_steps / (time.perf_counter() - t))
        print(f"PPO repeat {repeat}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items()))
    fps = {name: float(np.median(v)) for name, v in runs.items()}
    info = {}
    for name, model in models.items():
        p = model.policy
        info[name] = {
            "params": sum(x.numel() for x in p.parameters()),
            "features_extractor": type(p.features_extractor).__name__,
            "net_arch": p.net_arch,
            "env": type(model.env).__name__ + "(" + type(model.env.venv).__name__ + ")"
            if hasattr(model.env, "venv")
            else type(model.env).__name__,
        }
        model.env.close()
    return {
        "ppo_vs_sb3_cnn": fps["ours"] / fps["sb3_cnn"],
        "env_steps_per_s": fps,
        "repeats_env_steps_per_s": runs,
        "models": info,
        "run": {
            "n_envs": args.n_envs,
            "ppo": ppo.to_dict(),
            "timed_steps": args.ppo_steps,
            "warmup_steps": args.ppo_warmup,
            "torch_threads": torch.get_num_threads(),
            "timed": "model.learn(timed_steps, reset_num_timesteps=False) after a warm-up learn, "
            "interleaved, median over repeats",
        },
    }


if __name__ == "__main__":
    main()
