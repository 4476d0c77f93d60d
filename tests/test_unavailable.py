"""conftest.unavailable: a test whose real component cannot start is skipped on a developer's
machine and fails under CI=true, proven by running pytest on a tiny test file both ways."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("ci", [True, False], ids=["CI=true", "no CI"])
def test_a_missing_component_fails_under_ci_and_skips_elsewhere(tmp_path, ci):
    (tmp_path / "test_needs_x.py").write_text(
        "from conftest import unavailable\n\n\n"
        "def test_needs_x():\n"
        '    unavailable("x cannot start here")\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "test_needs_x.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    if ci:
        assert proc.returncode == 1, out
        assert "FAILED test_needs_x.py::test_needs_x" in out, out
        assert "CI=true and a real component is unavailable: x cannot start here" in out, out
    else:
        assert proc.returncode == 0, out
        assert "SKIPPED" in out and "x cannot start here" in out, out
        assert "1 skipped" in out, out
