"""Code fingerprints: what edits count."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo2rl import provenance, tasks


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


def modules() -> list[str]:
    """The modules the fingerprint of ``fp_pkg.env`` covers."""
    provenance._cached_parse.cache_clear()
    return sorted(provenance.code_modules("fp_pkg.env"))


def test_a_result_neutral_module_is_not_fingerprinted(package: Path):
    (package / "records.py").write_text(
        "from fp_pkg import dynamics\n\nRESULT_NEUTRAL = True\n\nSAVED = []\n"
    )
    (package / "env.py").write_text("from fp_pkg import records\n\nSPEED = 2\n")
    assert modules() == ["fp_pkg", "fp_pkg.env"]  # neither it nor what it imports
    before = fingerprint()
    (package / "records.py").write_text("RESULT_NEUTRAL = True\n\nSAVED = [1]\n")
    assert fingerprint() == before


def test_an_import_in_a_function_is_followed(package: Path):
    (package / "env.py").write_text(
        "def speed():\n    from fp_pkg import dynamics\n\n    return dynamics.G * 2\n"
    )
    assert modules() == ["fp_pkg", "fp_pkg.dynamics", "fp_pkg.env"]
    before = fingerprint()
    (package / "dynamics.py").write_text("G = 9.80665\n")
    assert fingerprint() != before


def test_a_declared_import_is_not_followed(package: Path):
    (package / "paint.py").write_text("COLOR = 'red'\n")
    (package / "env.py").write_text(
        "from fp_pkg import dynamics\n\n"
        'UNFINGERPRINTED_IMPORTS = {"fp_pkg.paint": "drawing only"}\n\n\n'
        "def draw():\n    from fp_pkg.paint import COLOR\n\n    return COLOR\n"
    )
    assert modules() == ["fp_pkg", "fp_pkg.dynamics", "fp_pkg.env"]
    before = fingerprint()
    (package / "paint.py").write_text("COLOR = 'blue'\n")
    assert fingerprint() == before


def test_presentation_keywords_are_left_out(package: Path):
    def env(label: str, size: int) -> str:
        return f'PRESENTATION_KEYWORDS = {{"label"}}\n\nARM = dict(size={size}, label={label!r})\n'

    (package / "env.py").write_text(env("clone", 3))
    before = fingerprint()
    (package / "env.py").write_text(env("behaviour clone", 3))
    assert fingerprint() == before
    (package / "env.py").write_text(env("clone", 4))
    assert fingerprint() != before


def test_the_declarations_are_no_part_of_the_hashed_source(tmp_path: Path):
    """A declaration, and a docstring after it, is a statement about the fingerprint: adding one
    changes the hash only by what it declares (here the ``label`` keyword, left out)."""
    code = "import fp_pkg.dynamics\n\n\ndef draw():\n    import fp_pkg.paint\n\n"
    declared = (
        "import fp_pkg.dynamics\n\n"
        "RESULT_NEUTRAL = False\n"
        '"""Results come from here."""\n'
        'UNFINGERPRINTED_IMPORTS: dict[str, str] = {"fp_pkg.paint": "drawing only"}\n'
        '"""Why it is not followed."""\n'
        'PRESENTATION_KEYWORDS = {"label"}\n\n\n'
        "def draw():\n    import fp_pkg.paint\n\n"
    )

    def parsed(text: str) -> provenance._Parsed:
        return provenance._parse(text, tmp_path / "env.py", "fp_pkg.env")

    call = "    return fp_pkg.paint.line(width=2{})\n"
    plain, shown = parsed(code + call.format("")), parsed(declared + call.format(", label='a'"))
    assert shown.source == plain.source
    assert "fp_pkg.paint" in plain.dependencies and "fp_pkg.paint" not in shown.dependencies


@pytest.mark.parametrize(
    ("declaration", "error"),
    [
        ('UNFINGERPRINTED_IMPORTS = {"fp_pkg.paint": "gone"}', "names fp_pkg.paint, which"),
        ('PRESENTATION_KEYWORDS = {"color"}', "names color, which no call"),
        ('UNFINGERPRINTED_IMPORTS = {"fp_pkg.dynamics": ""}', "not a dict of module names to"),
        ("RESULT_NEUTRAL = SPEED > 0", "RESULT_NEUTRAL is not a literal"),
    ],
)
def test_a_declaration_that_does_not_apply_is_an_error(package: Path, declaration, error):
    """A declaration naming a module the file does not import (or a keyword no call passes) fails
    at fingerprint time, naming the file: a declaration cannot outlive what it is about."""
    env = package / "env.py"
    env.write_text(f"{env.read_text()}\n{declaration}\n")
    with pytest.raises(provenance.DeclarationError, match=error) as raised:
        fingerprint()
    assert str(env) in str(raised.value)


def test_the_library_declares_what_its_training_rules_leave_out():
    """The racing env's renderer and the RL package, each imported in a function by a module
    that a training rule runs, are declared; the report's replay draws with the renderer."""
    task = tasks.entry_point_modules("Racing-v0", "demo2rl.experts.racing:pure_pursuit")
    evaluate = provenance.code_modules("demo2rl.stages.evaluate", *task)
    assert {"demo2rl.envs.racing", "demo2rl.learning.policy"} <= set(evaluate)
    assert not [m for m in evaluate if m == "demo2rl.envs.render" or m.startswith("demo2rl.rl")]
    assert "demo2rl.envs.render" in provenance.code_modules("demo2rl.stages.plot_racing", *task)
