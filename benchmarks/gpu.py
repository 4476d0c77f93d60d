"""The BC and RL stages on CUDA against the CPU, on the camera task: one run, ratios and figures.

What a user with a GPU gets from ``bc: {device: cuda}`` / ``rl: {device: cuda}`` (or ``auto``)
on the pixel task (``config/pixels.yaml``: a 48x48 grayscale camera, NatureCNN). The stages run as
the workflow's jobs run them (``demo2rl.stages.*``, untracked), on one dataset collected here:

1. ``collect_shard`` x ``--shards`` and ``merge_demos`` (CPU; the dataset both devices share);
2. ``train_bc`` with ``bc.device`` cpu and cuda: seconds, samples/s, the best validation NLL,
   the clone's held-out return against the expert's;
3. ``train_rl`` for the scratch and warm-start (``bc``) arms with ``rl.device`` cpu and cuda
   (each warm start loads the clone of its own device): env steps/s of the whole job (its
   evaluations during training included) and the held-out returns it reached.

Figures: ``bc_speedup`` and ``rl_speedup_<arm>`` (cuda samples or steps per second / cpu's, same
run, same machine). CUDA is not bitwise reproducible (cuDNN, atomics): the returns of the two
devices are reported side by side, not compared for equality. Torch threads: ``--threads`` for
both devices.

The config is resolved beforehand (``--write-resolved``: the schema's defaults filled in by
``demo2rl.config.load``, which imports Snakemake), so that the GPU machine needs only the
training stack (gymnasium, SB3, torch, h5py). Usage::

    python benchmarks/gpu.py --write-resolved results/bench/pixels-resolved.json
    python benchmarks/gpu.py --resolved results/bench/pixels-resolved.json [--rl-steps 32768]

Figures to ``results/bench/gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _common import machine, report

from demo2rl import arms
from demo2rl.config import BCConfig, PolicyConfig, RLConfig, TaskConfig
from demo2rl.specs.collect_shard import CollectJob, Shards
from demo2rl.specs.merge_demos import MergeJob, Split
from demo2rl.specs.train_bc import BCJob
from demo2rl.specs.train_rl import RLJob
from demo2rl.stages import collect_shard, merge_demos, train_bc, train_rl
from demo2rl.tracking.untracked import Untracked

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("scratch", "bc")


def resolve(out: Path, config: Path) -> None:
    """Write ``config`` with every schema default filled in, as JSON."""
    from demo2rl.config import load

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(load(config), indent=1))


def collect(cfg: dict[str, Any], work: Path, shards: int, n_envs: int) -> tuple[str, float]:
    task = TaskConfig.of(cfg["task"])
    start = time.perf_counter()
    paths = []
    for k in range(shards):
        paths.append(str(work / f"shard-{k}.h5"))
        job = CollectJob(
            shard=k,
            task=task,
            collect=Shards(n_episodes=cfg["collect"]["n_episodes"], n_shards=shards),
            seed=cfg["seed"],
            out=paths[-1],
            envs=n_envs,
            codec="gzip",
            timeout_ms=max(1, round(1000 * cfg["task"]["timeout_s"])),
        )
        collect_shard.collect_shard(job, Untracked())
    demos = str(work / "demos.h5")
    merge = MergeJob(
        collect=Split(cfg["collect"]["n_episodes"], cfg["collect"]["valid_fraction"]),
        shards=paths,
        out=demos,
        codec="gzip",
    )
    merge_demos.merge_demos(merge, Untracked())
    return demos, time.perf_counter() - start


def run_bc(cfg: dict[str, Any], demos: str, work: Path, device: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    job = BCJob(
        task=TaskConfig.of(cfg["task"]),
        policy=PolicyConfig.of(cfg["policy"]),
        bc=BCConfig.of({**cfg["bc"], "device": device}),
        seed=cfg["seed"],
        eval_episodes=cfg["evaluate"]["during_training"],
        demos=demos,
        policy_out=str(work / f"bc-{device}.pt"),
        metrics_out=str(work / f"bc-{device}.json"),
        threads=threads,
        eval_envs=cfg["evaluate"]["n_envs"],
    )
    start = time.perf_counter()
    metrics = train_bc.train_bc(job, Untracked())
    keep = ("device", "epochs", "best_valid_nll", "samples_per_s", "seconds", "train_samples")
    out = {k: metrics[k] for k in keep}
    out |= {k: metrics[k] for k in ("bc_return_mean", "expert_return_mean", "bc_vs_expert")}
    out["job_seconds"] = time.perf_counter() - start
    return out


def run_rl(
    cfg: dict[str, Any], demos: str, work: Path, arm: str, device: str, steps: int, threads: int
) -> dict:
    torch.set_num_threads(threads)
    rl_cfg = arms.get(arm).rl_slice({**cfg["rl"], "device": device, "total_timesteps": steps})
    run_dir = work / f"rl-{arm}-{device}"
    job = RLJob(
        arm=arm,
        run_seed=0,
        seed=cfg["seed"],
        task=TaskConfig.of({k: v for k, v in cfg["task"].items() if k != "expert"}),
        policy=PolicyConfig.of(cfg["policy"]),
        rl=RLConfig.of(rl_cfg),
        clip_obs=cfg["bc"]["clip_obs"],
        eval_episodes=cfg["evaluate"]["during_training"],
        demos=demos,
        clone=str(work / f"bc-{device}.pt") if arm != "scratch" else None,
        state_dir=str(run_dir / "state"),
        policy_out=str(run_dir / "policy.pt"),
        progress_out=str(run_dir / "progress.csv"),
        evaluations_out=str(run_dir / "evaluations.csv"),
        threads=1,
        eval_envs=cfg["evaluate"]["n_envs"],
        checkpoint_every=cfg["rl"]["checkpoint_every"],
    )
    start = time.perf_counter()
    result = train_rl.train_rl(job, Untracked())
    seconds = time.perf_counter() - start
    returns = [round(e["return_mean"], 2) for e in result.evaluations]
    return {
        "device": str(result.model.device),
        "steps": result.timesteps,
        "seconds": seconds,
        "steps_per_s": result.timesteps / seconds,
        "heldout_returns": returns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "pixels.yaml")
    parser.add_argument("--write-resolved", type=Path, help="resolve --config to this file, exit")
    parser.add_argument("--resolved", type=Path, help="a config written by --write-resolved")
    parser.add_argument("--episodes", type=int, default=32, help="demonstration episodes")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--collect-envs", type=int, default=16)
    parser.add_argument("--bc-epochs", type=int, default=10)
    parser.add_argument("--rl-steps", type=int, default=32768, help="env steps of each RL run")
    parser.add_argument("--threads", type=int, default=4, help="torch threads, both devices")
    parser.add_argument("--devices", default="cpu,cuda")
    args = parser.parse_args()
    if args.write_resolved:
        resolve(args.write_resolved, args.config)
        return
    cfg = json.loads(args.resolved.read_text())
    cfg["collect"]["n_episodes"] = args.episodes
    cfg["bc"] |= {"max_epochs": args.bc_epochs, "patience": args.bc_epochs}
    devices = args.devices.split(",")
    info: dict[str, Any] = {
        "config": args.resolved.name,
        **machine(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "threads": args.threads,
        "episodes": args.episodes,
        "rl_steps": args.rl_steps,
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        demos, info["collect_seconds"] = collect(cfg, work, args.shards, args.collect_envs)
        info["dataset_mb"] = Path(demos).stat().st_size / 1e6
        print(json.dumps(info), flush=True)
        info["bc"] = {d: run_bc(cfg, demos, work, d, args.threads) for d in devices}
        print(json.dumps(info["bc"]), flush=True)
        info["rl"] = {}
        for arm in ARMS:
            info["rl"][arm] = {}
            for d in devices:
                if d.startswith("cuda"):
                    torch.cuda.reset_peak_memory_stats()
                info["rl"][arm][d] = run_rl(cfg, demos, work, arm, d, args.rl_steps, args.threads)
                if d.startswith("cuda"):
                    info["rl"][arm][d]["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 1e6
                print(arm, d, json.dumps(info["rl"][arm][d]), flush=True)
    if {"cpu", "cuda"} <= set(devices):
        bc_ = info["bc"]
        info["bc_speedup"] = bc_["cuda"]["samples_per_s"] / bc_["cpu"]["samples_per_s"]
        for arm in ARMS:
            r = info["rl"][arm]
            info[f"rl_speedup_{arm}"] = r["cuda"]["steps_per_s"] / r["cpu"]["steps_per_s"]
    report("gpu", info)


if __name__ == "__main__":
    main()
