"""The library's folders are its layers (docs/architecture.md's map): each module imports only
from its own layer and the layers below it, never back up. The imports are what each module's
bytecode runs (tests/import_oracle.py), in function bodies too, and the modules its
``"package.module:Name"`` entry points name; annotation-only imports under ``if TYPE_CHECKING:``
run nothing and do not count, nor does ``importlib.import_module`` (only the workflow's job glue
imports a stage by name)."""

from __future__ import annotations

import pytest
from conftest import REPO
from import_oracle import find, imported

SRC = REPO / "src" / "demo2rl"
LAYERS = (
    ("envs", "experts"),
    ("vocabulary", "tasks"),
    ("demos",),
    ("specs",),
    ("learning",),
    ("rl",),
    ("report",),
    ("tracking",),
    ("stages",),
    ("workflow",),
)
"""The layers from the bottom up, as docs/architecture.md lists them; ``vocabulary`` is the
modules at the package's top level."""


def layer(module: str) -> int:
    """The index in :data:`LAYERS` of ``demo2rl.<...>`` module ``module``."""
    first = module.split(".")[1]
    name = first if (SRC / first).is_dir() else "vocabulary"
    return next(i for i, names in enumerate(LAYERS) if name in names)


def library_modules() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return [m for m in out if m != "demo2rl"]


def test_every_folder_of_the_library_has_a_layer():
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {name for names in LAYERS for name in names} - {"vocabulary"}


@pytest.mark.parametrize("module", library_modules())
def test_no_import_runs_back_up_the_layers(module):
    found = find(module)
    assert found is not None, module
    up = sorted(
        target
        for target in imported(found)
        if target.startswith("demo2rl.") and find(target) and layer(target) > layer(module)
    )
    assert not up, f"{module} ({LAYERS[layer(module)]}) imports from a layer above it: {up}"
