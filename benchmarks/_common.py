"""Shared by the benchmark scripts: the machine description and writing results/bench/*.json."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from demo2rl.io import write_json

BENCH_DIR = Path(__file__).resolve().parents[1] / "results" / "bench"


def machine() -> dict[str, Any]:
    """Cores and CPU model of this machine."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu_model": model, "python": platform.python_version()}


def report(name: str, figures: dict[str, Any]) -> Path:
    """Print the figures and write them to results/bench/<name>.json."""
    path = BENCH_DIR / f"{name}.json"
    write_json(path, figures)
    width = max(map(len, figures))
    for key, value in figures.items():
        shown = f"{value:,.3f}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}")
    print(f"-> {path}")
    return path
