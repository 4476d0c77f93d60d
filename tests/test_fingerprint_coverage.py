"""The modules a rule's code fingerprint hashes are the modules its code runs: for every rule of
the rerun matrix, :func:`demo2rl.provenance.code_modules` (the syntax-tree walk the rules hash)
against tests/import_oracle.py (the imports the modules' bytecode executes), which is also where
the rerun matrix's module cases take what an edit of each module should rerun."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import import_oracle
import pytest
import yaml
from conftest import TEST_CONFIG
from test_rerun_matrix import RULES, SPECIAL_VALUES

from demo2rl import provenance
from demo2rl.config import load as load_config
from demo2rl.workflow.plan import Plan

EXPERT = "task.expert.entry_point"
CONFIGS = {"test config": {}, "a user's expert": {EXPERT: SPECIAL_VALUES[EXPERT]}}
"""The test config, and with the rerun matrix's user expert (tests/user_expert.py: a root outside
demo2rl)."""


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    out = {}
    for name, changes in CONFIGS.items():
        config: dict[str, Any] = yaml.safe_load(TEST_CONFIG.read_text())
        for key, value in changes.items():
            *parents, last = key.split(".")
            node = config
            for part in parents:
                node = node[part]
            node[last] = value
        out[name] = Plan(load_config(config))
    return out


def difference(roots: tuple[str, ...], hashed: set[str], run: dict[str, str | None]) -> list[str]:
    """What the fingerprint of ``roots`` misses (with how the code reaches it) and what it hashes
    that the code does not run by the contract (or declares it need not follow), a line each."""
    return [
        f"  run, not hashed (an edit of it reruns nothing): {m}  [{import_oracle.chain(run, m)}]"
        for m in sorted(set(run) - hashed)
    ] + [
        f"  hashed, not run or declared not to count (an edit of it reruns the rule): {m}"
        for m in sorted(hashed - set(run))
    ]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("rule", RULES)
def test_a_rules_fingerprint_hashes_the_modules_its_code_runs(plans, config: str, rule: str):
    plan = plans[config]
    roots = plan.code_roots(rule, plan.base)
    run = import_oracle.modules_run(*roots)
    wrong = difference(roots, set(provenance.code_modules(*roots)), run)
    head = f"{rule} ({config}): provenance.code_modules{roots} differs from what that code runs:"
    assert not wrong, "\n".join([head, *wrong])


# --------------------------------------------------------------------------------------------
# the oracle itself, on a package that has each case of the contract

PACKAGE = {
    "__init__.py": "",
    "env.py": """
        from __future__ import annotations

        import typing as t
        from typing import TYPE_CHECKING

        import numpy  # installed: not followed

        import ofp.pkg.inner  # runs ofp/pkg/__init__.py too
        from ofp import records  # RESULT_NEUTRAL: neither it nor its imports
        from ofp.named import Thing  # a name of the module ofp.named

        from . import relative  # a relative import of a submodule
        from .sub import deep  # and of a subpackage's module

        if TYPE_CHECKING:
            from ofp import typing_only
        else:
            from ofp import runtime_else
        if not TYPE_CHECKING:
            from ofp import runtime_unless_typing
        if t.TYPE_CHECKING:
            from ofp import typing_only_by_attribute

        UNFINGERPRINTED_IMPORTS = {"ofp.drawing": "drawing only"}
        ENTRY = "ofp.entry:Env"  # a gymnasium entry point


        def run():
            from ofp import in_function

            if TYPE_CHECKING:
                import ofp.typing_only_in_function
            from ofp.drawing import draw  # declared: not followed from here

            return in_function, draw


        class Runner:
            import ofp.in_class
        """,
    "named.py": "Thing = 1\n",
    "pkg/__init__.py": "",
    "pkg/inner.py": "",
    "records.py": "from ofp import only_via_records\n\nRESULT_NEUTRAL = True\n",
    "only_via_records.py": "",
    "relative.py": "",
    "sub/__init__.py": "",
    "sub/deep.py": "from .. import upward  # two levels up\n",
    "upward.py": "",
    "typing_only.py": "",
    "typing_only_by_attribute.py": "",
    "typing_only_in_function.py": "",
    "runtime_else.py": "",
    "runtime_unless_typing.py": "",
    "entry.py": "",
    "in_function.py": "",
    "in_class.py": "",
    "drawing.py": "from ofp import only_via_drawing\n\ndraw = None\n",
    "only_via_drawing.py": "",
    "unused.py": "",
}
RUN = {
    "ofp",
    "ofp.env",
    "ofp.pkg",
    "ofp.pkg.inner",
    "ofp.named",
    "ofp.relative",
    "ofp.sub",
    "ofp.sub.deep",
    "ofp.upward",
    "ofp.runtime_else",
    "ofp.runtime_unless_typing",
    "ofp.entry",
    "ofp.in_function",
    "ofp.in_class",
}
"""What ``ofp.env``'s code runs, by the contract of :func:`demo2rl.provenance.code_modules`."""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The package ``ofp`` of :data:`PACKAGE`, importable."""
    for name, text in PACKAGE.items():
        path = tmp_path / "ofp" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    import_oracle.find.cache_clear()
    yield tmp_path / "ofp"
    import_oracle.find.cache_clear()
    for name in [m for m in sys.modules if m.partition(".")[0] == "ofp"]:
        del sys.modules[name]  # provenance's find_spec imported the packages


def test_the_oracle_finds_what_a_module_runs_by_the_contract(package: Path):
    assert set(import_oracle.modules_run("ofp.env")) == RUN
    assert import_oracle.chain(import_oracle.modules_run("ofp.env"), "ofp.upward") == (
        "ofp.env -> ofp.sub.deep -> ofp.upward"
    )
    assert import_oracle.modules_run("gymnasium.envs.registration") == {}  # installed


def test_provenance_follows_the_same_contract(package: Path):
    """The contract's cases that the library itself may not have (a relative import, a guarded
    import in a function), checked on provenance too."""
    assert set(provenance.code_modules("ofp.env")) == RUN
