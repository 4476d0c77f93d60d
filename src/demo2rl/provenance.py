"""Where a result came from: package versions, code revision, and a fingerprint of the code."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path

PACKAGES = (
    "demo2rl",
    "numpy",
    "gymnasium",
    "h5py",
    "torch",
    "stable-baselines3",
    "mlflow",
    "snakemake",
)
_SRC = Path(__file__).resolve().parent
RESULT_NEUTRAL = frozenset({"demo2rl.tracking", "demo2rl.provenance", "demo2rl.jobs"})
"""Modules that cannot change a result (tracking, provenance records): not fingerprinted."""


def versions() -> dict[str, str]:
    """Python and the versions of the packages that shape results (without importing them)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


@functools.cache
def code_revision() -> dict[str, str | bool]:
    """The git commit of the demo2rl checkout and whether its tree has uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=_SRC, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": False}


def code_fingerprint(*modules: str) -> str:
    """Hash of the source of ``modules`` and every demo2rl module they import, transitively.

    Snakemake tracks a rule's script but not the library modules it imports; putting this value
    in a rule's ``params`` makes an edit to any module a stage uses rerun that stage. Comments,
    docstrings and formatting do not count: the hash is taken over the parsed syntax tree.
    """
    digest = hashlib.sha256()
    for name, path in sorted(code_modules(*modules).items()):
        digest.update(name.encode())
        digest.update(_normalised_source(path).encode())
    return digest.hexdigest()[:16]


def code_modules(*modules: str) -> dict[str, Path]:
    """The demo2rl modules ``modules`` import, transitively (themselves included): name -> file."""
    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name in RESULT_NEUTRAL:
            continue
        if not (name == "demo2rl" or name.startswith("demo2rl.")):
            continue
        path = _module_path(name)
        if path is None:
            continue
        seen[name] = path
        tree = ast.parse(path.read_text(), filename=str(path))
        todo.extend(_imports(tree, name, is_package=path.name == "__init__.py"))
        if path.name == "__init__.py" and name != "demo2rl":
            # a subpackage may register its modules by name (gymnasium entry points): take them all
            todo.extend(
                f"{name}.{p.stem}" for p in path.parent.glob("*.py") if p.stem != "__init__"
            )
    return seen


def _module_path(name: str) -> Path | None:
    rel = Path(*name.split(".")[1:])
    for candidate in (_SRC / rel / "__init__.py", (_SRC / rel).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]
    return found


def _normalised_source(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)
