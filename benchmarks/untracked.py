"""What MLflow tracking costs a workflow of short jobs: the test config run end to end tracked
(the baseline: the default ``tracking.enabled: true``, SQLite store) and untracked
(``tracking.enabled: false``, no job imports MLflow).

Each run is a real ``snakemake --cores 2`` of config/test.yaml (19 jobs of a few seconds each,
as in the test suite) in a fresh directory. The figures come from Snakemake's own ``benchmark:``
files, one per job of every rule but the three plot rules (16 here): its wall seconds and the
CPU seconds of its process tree. Reported: the
whole invocation's wall time, the jobs' summed CPU seconds and the mean per job, for both, and
the ratios untracked / tracked. The outputs of the two runs are the same either way
(tests/test_reruns.py compares untracked reruns with a tracked run bit for bit).

Writes results/bench/untracked.json. Run: .venv/bin/python benchmarks/untracked.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import machine, report

REPO = Path(__file__).resolve().parents[1]
TEST_CONFIG = REPO / "config" / "test.yaml"
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs of each, alternating")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"tracked": [], "untracked": []}
    for _ in range(args.repeats):
        for name in runs:
            runs[name].append(run_workflow(enabled=name == "tracked"))
            print(f"{name}: {runs[name][-1]}")
    figures: dict[str, Any] = {**machine(), "config": "config/test.yaml", "repeats": args.repeats}
    for name, measured in runs.items():
        for key in measured[0]:
            figures[f"{name}_{key}"] = statistics.median(m[key] for m in measured)
    for key in ("wall_s", "jobs_cpu_s", "cpu_s_per_job"):
        figures[f"ratio_{key}"] = figures[f"untracked_{key}"] / figures[f"tracked_{key}"]
    report("untracked", figures)


def run_workflow(*, enabled: bool) -> dict[str, float]:
    """One end-to-end run of the test config with tracking on or off, in a fresh directory."""
    spec = yaml.safe_load(TEST_CONFIG.read_text())
    spec["tracking"] = {**spec.get("tracking", {}), "enabled": enabled}
    with tempfile.TemporaryDirectory(prefix="bench-untracked-") as tmp:
        work = Path(tmp)
        config = work / "config.yaml"
        config.write_text(yaml.safe_dump(spec))
        cmd = [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "-d", str(work)]
        cmd += ["--configfile", str(config), "--cores", "2", "--quiet", "all"]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - start
        jobs = [row for path in work.glob("results/*/benchmarks/**/*.tsv") for row in rows(path)]
    cpu = sum(float(job["cpu_time"]) for job in jobs)
    return {"wall_s": wall, "jobs": len(jobs), "jobs_cpu_s": cpu, "cpu_s_per_job": cpu / len(jobs)}


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


if __name__ == "__main__":
    main()
