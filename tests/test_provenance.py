"""Code fingerprints: what edits count."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo2rl import provenance


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user package ``fp_pkg`` (a module importing another), importable."""
    root = tmp_path / "src" / "fp_pkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "env.py").write_text("from fp_pkg import dynamics\n\nSPEED = dynamics.G * 2\n")
    (root / "dynamics.py").write_text('"""Physics."""\n\nG = 9.81  # m/s^2\n')
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    yield root
    for name in [m for m in sys.modules if m.partition(".")[0] == "fp_pkg"]:
        del sys.modules[name]  # find_spec imported it: the next test's fp_pkg is elsewhere


def fingerprint() -> str:
    """A fingerprint as a new process computes it (no parse remembered in memory)."""
    provenance._cached_parse.cache_clear()
    return provenance.code_fingerprint("fp_pkg.env")


def test_code_edits_count_and_comments_do_not(package: Path):
    before = fingerprint()
    dynamics = package / "dynamics.py"
    dynamics.write_text('"""Physics, documented."""\n\nG = 9.81  # gravity, m/s^2\n')
    assert fingerprint() == before
    dynamics.write_text('"""Physics."""\n\nG = 9.80665\n')
    assert fingerprint() != before
