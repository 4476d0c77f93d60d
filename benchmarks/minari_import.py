"""Minari import: demo2rl's import_minari against Minari's own reader, speed and memory.

A dataset of ``--episodes`` Racing-v0 episodes (the default vector observations; ``--camera``:
the 48x48 camera of ``config/pixels.yaml``, its expert reading ``info.state``) is collected
with demo2rl's own collection (one shard, merged: ``collect.collect_shard``,
``dataset.merge_files``) and exported with ``minari_io.export_minari``. The Minari file is read
once (into the page cache), then each arm runs in a fresh subprocess:

(a) load: ``minari.load_dataset`` and every episode's arrays (``iterate_episodes``);
(b) import: ``minari_io.import_minari`` of it (valid_fraction 0.1, ``--codec``, by default gzip:
    the import stage's call);
(c) the same import with its value checks off (``dataset.SpaceValues.fault`` answering None):
    (b) and (c) alternate ``--repeats`` times, and each (b) also times its checks alone.

Figures: ``import_vs_load`` = steps/s of (b) / steps/s of (a) (target >= 0.8); the cost of the
value checks, as the median time of (b) over (c), and as the checks' own seconds over (b)'s
(target: within a few per cent); the import's
peak RSS over its RSS when it starts (after its imports: ``/proc/self/status`` VmHWM - VmRSS),
overall and up to the end of the episodes' stream (read when the statistics begin), beside the
largest episode's bytes (target: about one episode plus a block of rows) and the observation
and action columns' bytes (what the statistics of vector observations read whole).
Writes ``results/bench/minari_import[_camera]_<codec>.json``. Usage::

    python benchmarks/minari_import.py [--episodes 200] [--camera] [--codec gzip]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import machine, report

from demo2rl.config import TaskConfig
from demo2rl.demos import collect, dataset, minari_io

ENV_ID = "Racing-v0"
EXPERT = "demo2rl.experts.racing:pure_pursuit"
CAMERA = {"camera": 48, "camera_view": 64.0}  # config/pixels.yaml's
DATASET_ID = "bench/racing-v0"
CHILD = """
import json, sys, time
a = json.loads(sys.argv[1])
if a["arm"] == "load":
    import minari
else:
    from demo2rl.demos import dataset, minari_io

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

start_rss = status("VmRSS")
start = time.perf_counter()
if a["arm"] == "load":
    steps = 0
    for episode in minari.load_dataset(a["dataset_id"]).iterate_episodes():
        steps += len(episode.rewards)
else:
    statistics = dataset._file_statistics

    def stream_ends(*args):  # the peak of the episodes' stream, before the statistics
        a["stream_peak_rss"] = status("VmHWM")
        return statistics(*args)

    dataset._file_statistics = stream_ends
    fault = dataset.SpaceValues.fault
    a["check_seconds"] = 0.0

    def timed_fault(self, rows):  # the value checks' own time
        begin = time.perf_counter()
        try:
            return fault(self, rows)
        finally:
            a["check_seconds"] += time.perf_counter() - begin

    unchecked = a["arm"] == "unchecked"
    dataset.SpaceValues.fault = (lambda self, rows: None) if unchecked else timed_fault
    minari_io.import_minari(
        "minari:" + a["dataset_id"], a["out"], env_id=a["env_id"], env_kwargs=a["env_kwargs"],
        base_seed=0, valid_fraction=0.1, codec=a["codec"],
    )
    steps = None
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "steps": steps, "start_rss": start_rss,
                  "peak_rss": status("VmHWM"), "stream_peak_rss": a.get("stream_peak_rss"),
                  "check_seconds": a.get("check_seconds")}))
"""


def build(tmp: Path, n_episodes: int, env_kwargs: dict[str, Any], expert_input: str) -> Path:
    """The collected dataset, merged (``tmp/demos.h5``), exported into the store ``tmp/minari``."""
    start = time.perf_counter()
    task = TaskConfig.of(
        {
            "env_id": ENV_ID,
            "env_kwargs": env_kwargs,
            "frame_stack": 1,
            "expert": {"entry_point": EXPERT, "kwargs": {}, "input": expert_input},
        }
    )
    shard = collect.collect_shard(task=task, base_seed=0, episodes=range(n_episodes), n_envs=16)
    dataset.write(tmp / "shard.h5", shard)
    del shard
    dataset.merge_files(
        [tmp / "shard.h5"], tmp / "demos.h5", n_episodes=n_episodes, valid_fraction=0.1
    )
    print(f"collected and merged in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    path = minari_io.export_minari(tmp / "demos.h5", tmp / "minari", DATASET_ID)
    print(f"exported in {time.perf_counter() - start:.1f} s")
    return path


def run_child(arm: str, tmp: Path, env_kwargs: dict[str, Any], codec: str) -> dict[str, Any]:
    arguments = {
        "codec": codec,
        "arm": arm,
        "dataset_id": DATASET_ID,
        "out": str(tmp / "imported.h5"),
        "env_id": ENV_ID,
        "env_kwargs": env_kwargs,
    }
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(arguments)],
        env=os.environ | {"MINARI_DATASETS_PATH": str(tmp / "minari")},
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--camera", action="store_true", help="48x48 camera observations")
    parser.add_argument("--codec", default="gzip", choices=dataset.CODECS, help="of the import")
    parser.add_argument("--repeats", type=int, default=5, help="of the imports, checked or not")
    args = parser.parse_args()
    env_kwargs = CAMERA if args.camera else {}
    expert_input = "info.state" if args.camera else "observation"

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = build(tmp, args.episodes, env_kwargs, expert_input)
        for file in (path / "data").iterdir():  # both arms find the file in the page cache
            file.read_bytes()
        load = run_child("load", tmp, env_kwargs, args.codec)
        runs: dict[str, list[dict[str, Any]]] = {"import": [], "unchecked": []}
        for _ in range(args.repeats):  # alternating, so that a slow spell hits both
            for arm, arm_runs in runs.items():
                arm_runs.append(run_child(arm, tmp, env_kwargs, args.codec))
        imported = runs["import"][0]
        demos = dataset.read_tables(tmp / "demos.h5")
        assert dataset.verify(tmp / "imported.h5") == demos.attrs["content_hash"]
        with_attrs = dataset.read_attrs(tmp / "demos.h5")
        obs_row = _row_bytes(with_attrs["observation_space"])
        act_row = _row_bytes(with_attrs["action_space"])
        longest = int(demos.episodes["length"].max())
        # an episode as Minari hands it over: T + 1 observations, T actions, rewards and flags
        episode_bytes = (longest + 1) * obs_row + longest * (act_row + 8 + 2)
        columns_bytes = demos.n_steps * (obs_row + act_row)
        minari_bytes = sum(f.stat().st_size for f in (path / "data").iterdir())
        demos_bytes = (tmp / "imported.h5").stat().st_size

    n_steps = demos.n_steps
    seconds = {arm: float(np.median([r["seconds"] for r in rs])) for arm, rs in runs.items()}
    check_share = float(np.median([r["check_seconds"] / r["seconds"] for r in runs["import"]]))
    load_speed = n_steps / load["seconds"]
    import_speed = n_steps / imported["seconds"]
    growth = imported["peak_rss"] - imported["start_rss"]
    stream = imported["stream_peak_rss"] - imported["start_rss"]
    mib = 2**20
    report(
        "minari_import" + ("_camera" if args.camera else "") + f"_{args.codec}",
        {
            "import_vs_load": import_speed / load_speed,
            "checked_vs_unchecked_seconds": seconds["import"] / seconds["unchecked"],
            "check_share_of_import": check_share,
            "import_median_seconds": seconds["import"],
            "unchecked_median_seconds": seconds["unchecked"],
            "repeats": args.repeats,
            "load_steps_per_s": load_speed,
            "import_steps_per_s": import_speed,
            "load_seconds": load["seconds"],
            "import_seconds": imported["seconds"],
            "import_peak_rss_over_start_mib": growth / mib,
            "import_stream_peak_rss_over_start_mib": stream / mib,
            "load_peak_rss_over_start_mib": (load["peak_rss"] - load["start_rss"]) / mib,
            "largest_episode_mib": episode_bytes / mib,
            "obs_and_action_columns_mib": columns_bytes / mib,
            "copy_block_mib": dataset.COPY_BYTES / mib,
            "episodes": args.episodes,
            "codec": args.codec,
            "steps": n_steps,
            "minari_file_mib": minari_bytes / mib,
            "imported_file_mib": demos_bytes / mib,
            "machine": machine(),
            "what": (
                f"{ENV_ID} {env_kwargs or '(vector observations)'} with {EXPERT}; one run "
                "each in a fresh subprocess, the Minari file in the page cache; RSS from "
                "/proc/self/status (VmHWM - VmRSS at the start, after the imports)"
            ),
        },
    )


def _row_bytes(space: dict[str, Any]) -> int:
    if space["type"] == "Discrete":
        return 8
    return int(np.dtype(space["dtype"]).itemsize * np.prod(space["shape"], dtype=np.int64))


if __name__ == "__main__":
    main()
