"""Code fingerprints: what edits count, and the on-disk cache of parsed modules that every
workflow start reads (a cached result must be the one a fresh parse gives)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo2rl import provenance


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user package ``fp_pkg`` (a module importing another), importable, and a fresh cache."""
    root = tmp_path / "src" / "fp_pkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "env.py").write_text("from fp_pkg import dynamics\n\nSPEED = dynamics.G * 2\n")
    (root / "dynamics.py").write_text('"""Physics."""\n\nG = 9.81  # m/s^2\n')
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    importlib.invalidate_caches()
    monkeypatch.setenv("DEMO2RL_CACHE_DIR", str(tmp_path / "cache"))
    yield root
    for name in [m for m in sys.modules if m.partition(".")[0] == "fp_pkg"]:
        del sys.modules[name]  # find_spec imported it: the next test's fp_pkg is elsewhere


def fingerprint() -> str:
    """A fingerprint as a new process computes it (no parse remembered in memory)."""
    provenance._cached_parse.cache_clear()
    return provenance.code_fingerprint("fp_pkg.env")


def test_the_cache_gives_what_a_fresh_parse_gives(package: Path, tmp_path: Path, monkeypatch):
    cold = fingerprint()
    entries = sorted((tmp_path / "cache" / "code").glob("*.json"))
    assert len(entries) == 3  # fp_pkg, fp_pkg.env, fp_pkg.dynamics
    assert fingerprint() == cold  # warm: read from the entries
    for entry in entries:  # a damaged entry is parsed again, not trusted
        entry.write_text('{"source": "not this"')
    assert fingerprint() == cold
    monkeypatch.setenv("DEMO2RL_CACHE_DIR", "/proc/no-cache-here")  # cannot be written
    assert fingerprint() == cold


def test_code_edits_count_and_comments_do_not(package: Path):
    before = fingerprint()  # also fills the cache
    dynamics = package / "dynamics.py"
    dynamics.write_text('"""Physics, documented."""\n\nG = 9.81  # gravity, m/s^2\n')
    assert fingerprint() == before
    dynamics.write_text('"""Physics."""\n\nG = 9.80665\n')
    assert fingerprint() != before
