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

RESULT_NEUTRAL = True
"""Recording where a result came from cannot change it: no code fingerprint covers this
module."""

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
DECLARATIONS = ("RESULT_NEUTRAL", "UNFINGERPRINTED_IMPORTS", "PRESENTATION_KEYWORDS")
"""The names of the statements a module makes about its own fingerprint, each a literal
assigned at module level (read from the parsed file, never by importing it):

* ``RESULT_NEUTRAL = True``: the module cannot change a result (tracking, provenance records,
  locks); no fingerprint covers it, and none follows its imports.
* ``UNFINGERPRINTED_IMPORTS = {"package.module": "why", ...}``: modules it imports (wherever the
  import sits) that no fingerprint follows from it, each with the reason they cannot change what
  the rules running it compute (the racing env's renderer: drawing only).
* ``PRESENTATION_KEYWORDS = {"keyword", ...}``: keyword arguments of the module's calls that only
  say how a result is shown (an arm's label and colour); left out of the hashed source.

The statements themselves (and an attribute docstring after one) are left out of the hashed
source: adding one changes no fingerprint but by what it declares."""


class DeclarationError(ValueError):
    """A module's declaration about its fingerprint that cannot be applied: not a literal of the
    declared shape, or naming a module it does not import or a keyword it does not pass."""


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

    * imports, wherever they sit (module level, class bodies, function bodies);
    * ``"package.module:Name"`` string constants (gymnasium entry points register envs by name).

    Not followed: ``if TYPE_CHECKING:`` imports, what a module declares it does not need for its
    results (``UNFINGERPRINTED_IMPORTS``, :data:`DECLARATIONS`), modules that declare themselves
    ``RESULT_NEUTRAL``, and modules installed in site-packages (their versions are recorded by
    :func:`versions`).

    :raises DeclarationError: a module's declaration is malformed or names what it does not
        import (so that a declaration cannot outlive its import).
    """
    seen: dict[str, Path] = {}
    roots = {m.partition(".")[0] for m in modules}
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name.partition(".")[0] not in roots:
            continue
        path = _module_path(name)
        if path is None:
            continue
        parsed = _parsed(path, name)
        if parsed.neutral:
            continue
        seen[name] = path
        todo.extend(parsed.dependencies)
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
    """Modules imported anywhere but under ``if TYPE_CHECKING:``, and modules named by
    entry-point strings."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in _runtime_nodes(tree):
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


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if``'s test is ``TYPE_CHECKING`` (or ``typing.TYPE_CHECKING``, under any
    name of the module) alone: its body never runs (``if not TYPE_CHECKING:``'s does)."""
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return isinstance(test, (ast.Name, ast.Attribute)) and name == "TYPE_CHECKING"


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node`` that can run: all but the body of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for inner in child.orelse:
                yield inner
                yield from _runtime_nodes(inner)
            continue
        yield child
        yield from _runtime_nodes(child)


class _Parsed(NamedTuple):
    source: str
    """The syntax tree without docstrings and declarations, as text: what the fingerprint
    hashes."""
    dependencies: tuple[str, ...]
    """What :func:`code_modules` follows from the module."""
    neutral: bool
    """Whether the module declares itself ``RESULT_NEUTRAL``."""


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
    declared = _declarations(tree, path)
    neutral = declared.get("RESULT_NEUTRAL", False)
    if not isinstance(neutral, bool):
        raise DeclarationError(f"{path}: RESULT_NEUTRAL is {neutral!r}, not True or False")
    unfollowed = _unfollowed(declared.get("UNFINGERPRINTED_IMPORTS", {}), path)
    shown_only = _shown_only(declared.get("PRESENTATION_KEYWORDS", set()), path)
    dependencies = []
    unused = set(unfollowed)
    for dependency in _dependencies(tree, name, is_package=path.name == "__init__.py"):
        covering = {m for m in unfollowed if dependency == m or dependency.startswith(f"{m}.")}
        unused -= covering
        if not covering:
            dependencies.append(dependency)
    if unused:
        raise DeclarationError(
            f"{path}: UNFINGERPRINTED_IMPORTS names {', '.join(sorted(unused))}, which {name} "
            "does not import"
        )
    for node in ast.walk(tree):  # docstrings do not count
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and _is_string(body[0]):
            node.body = body[1:] or [ast.Pass()]
    unpassed = set(shown_only)
    for node in ast.walk(tree):
        if shown_only and isinstance(node, ast.Call):
            unpassed -= {k.arg for k in node.keywords}
            node.keywords = [k for k in node.keywords if k.arg not in shown_only]
    if unpassed:
        raise DeclarationError(
            f"{path}: PRESENTATION_KEYWORDS names {', '.join(sorted(unpassed))}, which no call "
            f"in {name} passes"
        )
    return _Parsed(ast.dump(tree, include_attributes=False), tuple(dependencies), neutral)


def _declarations(tree: ast.Module, path: Path) -> dict[str, object]:
    """The module's :data:`DECLARATIONS`, by name, each a literal; their statements (and the
    attribute docstring after each) are taken out of ``tree``."""
    found: dict[str, object] = {}
    kept: list[ast.stmt] = []
    declared = False  # the statement before is a declaration
    for node in tree.body:
        if declared and _is_string(node):  # its docstring
            declared = False
            continue
        assigned = _assignment(node)
        declared = assigned is not None and assigned[0] in DECLARATIONS
        if not declared:
            kept.append(node)
            continue
        target, value = assigned
        try:
            found[target] = ast.literal_eval(value)
        except (ValueError, TypeError):
            raise DeclarationError(
                f"{path}: {target} is not a literal: {ast.unparse(value)}"
            ) from None
    tree.body = kept
    return found


def _assignment(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """(name, value) of a ``NAME = value`` or ``NAME: type = value`` statement."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        target, value = node.target, node.value
    else:
        return None
    return (target.id, value) if isinstance(target, ast.Name) else None


def _is_string(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _unfollowed(value: object, path: Path) -> dict[str, str]:
    """``UNFINGERPRINTED_IMPORTS``, checked: module name -> a reason."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in value.items()
    ):
        raise DeclarationError(
            f"{path}: UNFINGERPRINTED_IMPORTS is not a dict of module names to reasons"
        )
    return value


def _shown_only(value: object, path: Path) -> frozenset[str]:
    """``PRESENTATION_KEYWORDS``, checked: keyword argument names."""
    if not isinstance(value, (set, frozenset, tuple, list)) or not all(
        isinstance(k, str) for k in value
    ):
        raise DeclarationError(f"{path}: PRESENTATION_KEYWORDS is not a set of keyword names")
    return frozenset(value)
