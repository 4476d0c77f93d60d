"""Where a result came from: package versions, code revision, and a fingerprint of the code."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import platform
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

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
RESULT_NEUTRAL = frozenset(
    {
        "demo2rl.tracking",
        "demo2rl.tracking.arms",
        "demo2rl.tracking.hooks",
        "demo2rl.tracking.lineage",
        "demo2rl.tracking.outbox",
        "demo2rl.tracking.run",
        "demo2rl.tracking.store",
        "demo2rl.tracking.ui",
        "demo2rl.tracking.untracked",
        "demo2rl.tracking.workflow",
        "demo2rl.provenance",
        "demo2rl.jobs",
        "demo2rl.locks",
    }
)
"""Modules that cannot change a result (tracking, provenance records, locks): not
fingerprinted."""
PRESENTATION = {"demo2rl.arms": frozenset({"label", "color"})}
"""Keyword arguments, per module, that only say how a result is shown (an arm's label and colour):
left out of every fingerprint, so that editing one reruns no training. The rules that show them
take them as params instead (``ARM_LOOKS`` in rules/common.smk), which reruns exactly those."""


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
    """Hash of the source of ``modules`` and the modules they import, transitively.

    Snakemake tracks a rule's script but not the library modules it imports; putting this value
    in a rule's ``params`` makes an edit to any module a stage runs rerun that stage. Comments,
    docstrings and formatting do not count: the hash is taken over the parsed syntax tree. What
    :func:`code_modules` follows decides which edits rerun which rules.
    """
    digest = hashlib.sha256()
    for name, path in sorted(code_modules(*modules).items()):
        digest.update(name.encode())
        digest.update(_parsed(path, name).source.encode())
    return digest.hexdigest()[:16]


def code_modules(*modules: str) -> dict[str, Path]:
    """The modules whose code ``modules`` run: name -> file, ``modules`` themselves included.

    Followed, transitively, within the top-level package of each starting module (demo2rl, or a
    user's package named by a task or expert entry point):

    * imports at module level (including those in class bodies);
    * ``"package.module:Name"`` string constants (gymnasium entry points register envs by name).

    Not followed: imports inside a function (a deferred import marks code the module does not
    need for its results, such as the racing env's renderer), ``if TYPE_CHECKING:`` imports,
    :data:`RESULT_NEUTRAL` modules, and modules installed in site-packages (their versions are
    recorded by :func:`versions`).
    """
    seen: dict[str, Path] = {}
    roots = {m.partition(".")[0] for m in modules}
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name in RESULT_NEUTRAL or name.partition(".")[0] not in roots:
            continue
        path = _module_path(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(_parsed(path, name).dependencies)
        if "." in name:  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
            todo.append(name.rpartition(".")[0])
    return seen


def _module_path(name: str) -> Path | None:
    """The source file of module ``name`` (None: no such module, or an installed package's)."""
    if name == "demo2rl" or name.startswith("demo2rl."):
        rel = Path(*name.split(".")[1:])
        for candidate in (_SRC / rel / "__init__.py", (_SRC / rel).with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    if any(part in ("site-packages", "dist-packages") for part in path.parts):
        return None
    return path


_ENTRY_POINT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):[A-Za-z_]\w*")


def _dependencies(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Modules imported at module level, and modules named by entry-point strings."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in _module_level(tree.body):
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
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _ENTRY_POINT.fullmatch(node.value)
            if match:
                found.append(match.group(1))
    return found


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run on import: not function bodies, not ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _module_level(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _module_level([n for n in inner if isinstance(n, ast.AST)])


class _Parsed(NamedTuple):
    source: str
    """The syntax tree without docstrings, as text: what the fingerprint hashes."""
    dependencies: tuple[str, ...]
    """What :func:`code_modules` follows from the module."""


def _parsed(path: Path, name: str) -> _Parsed:
    """Module ``name`` at ``path``, parsed once per process and version of the file (the
    workflow fingerprints every rule at each start, and the rules share most modules)."""
    stat = path.stat()
    return _cached_parse(path, name, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _cached_parse(path: Path, name: str, mtime_ns: int, size: int) -> _Parsed:
    return _parse(path.read_bytes().decode(), path, name)


def _parse(text: str, path: Path, name: str) -> _Parsed:
    tree = ast.parse(text, filename=str(path))
    dependencies = tuple(_dependencies(tree, name, is_package=path.name == "__init__.py"))
    for node in ast.walk(tree):  # docstrings do not count
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    shown_only = PRESENTATION.get(name, frozenset())
    for node in ast.walk(tree):
        if shown_only and isinstance(node, ast.Call):
            node.keywords = [k for k in node.keywords if k.arg not in shown_only]
    return _Parsed(ast.dump(tree, include_attributes=False), dependencies)
