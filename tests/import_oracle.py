"""Which modules a rule's code runs, found independently of :mod:`demo2rl.provenance`: the
rerun matrix's expectation, and the check of :func:`demo2rl.provenance.code_modules`.

Provenance reads a module's imports from its syntax tree. This reads them from what the
interpreter executes: the module's bytecode, as CPython's compiler makes it, with every nested
code object (function and class bodies, comprehensions). An ``IMPORT_NAME`` instruction takes
its level and fromlist from the two constants loaded before it; the name it imports is resolved
against the module's package by :func:`importlib.util.resolve_name`, and a module's file is found
by :class:`importlib.machinery.PathFinder` through its parents' ``__path__`` (without importing
anything), as the import system finds it.

It honours the contract that :func:`~demo2rl.provenance.code_modules` documents:

* followed within the top-level packages of the starting modules, never into an installed
  (site-packages) module;
* importing ``a.b.c`` runs ``a`` and ``a.b`` first; ``from a.b import c`` imports the submodule
  ``a.b.c`` where there is one;
* the body of ``if TYPE_CHECKING:`` (the instructions that the jump taken when it is false skips)
  imports nothing;
* ``"package.module:Name"`` string constants (gymnasium entry points) import ``package.module``;
* a module's ``UNFINGERPRINTED_IMPORTS`` (the modules, and their submodules, it declares no
  fingerprint follows from it) are not followed from it, and a module that declares
  ``RESULT_NEUTRAL = True`` is not covered and its imports are not followed. These declarations,
  literals at module level, are the only thing read from the syntax tree.
"""

from __future__ import annotations

import ast
import dis
import functools
import importlib.machinery
import importlib.util
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ENTRY_POINT = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*")
"""A gymnasium-style entry point, ``package.module:Name``."""


class Module(NamedTuple):
    name: str
    path: Path
    is_package: bool


@functools.cache
def find(name: str) -> Module | None:
    """Module ``name``'s source file, found as the import system would (no code runs): None for
    no such module, a name that is not a module (an attribute), or an installed one."""
    parent, _, _ = name.rpartition(".")
    if parent:
        found = find(parent)
        if found is None or not found.is_package:
            return None
        search = [str(found.path.parent)]
    else:
        search = sys.path
    try:
        spec = importlib.machinery.PathFinder.find_spec(name, search)
    except (ImportError, ValueError):
        return None
    if spec is None or not isinstance(spec.origin, str) or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    if {"site-packages", "dist-packages"} & set(path.parts):
        return None
    return Module(name, path, spec.submodule_search_locations is not None)


def code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code objects nested in it (function, class and comprehension bodies)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def strings(value: object) -> Iterator[str]:
    """The string constants in a code object's constant ``value`` (tuples, frozensets)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, frozenset)):
        for item in value:
            yield from strings(item)


LOADS = ("LOAD_CONST", "LOAD_SMALL_INT")
"""How an import's level and fromlist are loaded (LOAD_SMALL_INT: Python 3.14's small ints)."""


class Import(NamedTuple):
    name: str
    level: int
    fromlist: tuple[str, ...]


def type_checking_only(instructions: list[dis.Instruction]) -> set[int]:
    """Offsets of the instructions under ``if TYPE_CHECKING:``: those between the conditional
    jump after loading ``TYPE_CHECKING`` and its target (what runs when it is false)."""
    skipped: set[int] = set()
    for i, ins in enumerate(instructions):
        if ins.argval != "TYPE_CHECKING" or not ins.opname.startswith("LOAD_"):
            continue
        following = [j for j in instructions[i + 1 : i + 4] if j.opname != "TO_BOOL"]
        jump = following[0] if following else None
        if jump is None or "IF_FALSE" not in jump.opname:
            continue
        skipped.update(j.offset for j in instructions if jump.offset < j.offset < jump.argval)
    return skipped


@functools.cache
def imports(path: Path) -> tuple[tuple[Import, ...], tuple[str, ...]]:
    """The imports the bytecode of the module at ``path`` executes anywhere (not under ``if
    TYPE_CHECKING:``), and its string constants."""
    code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    found: list[Import] = []
    texts: list[str] = []
    for obj in code_objects(code):
        for const in obj.co_consts:
            texts += strings(const)
        instructions = list(dis.get_instructions(obj))
        skipped = type_checking_only(instructions)
        for i, ins in enumerate(instructions):
            if ins.opname != "IMPORT_NAME" or ins.offset in skipped:
                continue
            level, fromlist = instructions[i - 2], instructions[i - 1]
            assert level.opname in LOADS and fromlist.opname in LOADS, f"{path}: {ins}"
            found.append(Import(ins.argval, level.argval, tuple(fromlist.argval or ())))
    return tuple(found), tuple(texts)


@functools.cache
def declarations(path: Path) -> dict[str, object]:
    """The literals a module assigns at module level to provenance's declaration names."""
    out = {}
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in (
            "RESULT_NEUTRAL",
            "UNFINGERPRINTED_IMPORTS",
        ):
            out[target.id] = ast.literal_eval(value)
    return out


def with_parents(name: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: what importing it runs."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def imported(module: Module) -> set[str]:
    """The modules (existing or not) that running ``module``'s code imports."""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    found, texts = imports(module.path)
    out: set[str] = set()
    for imp in found:
        name = importlib.util.resolve_name("." * imp.level + imp.name, package)
        out.update(with_parents(name))
        out.update(f"{name}.{attr}" for attr in imp.fromlist if attr != "*")
    for text in texts:
        match = ENTRY_POINT.fullmatch(text)
        if match:
            out.update(with_parents(match["module"]))
    return out


def modules_run(*roots: str) -> dict[str, str | None]:
    """The modules whose code ``roots`` run, ``roots`` included, by the contract of
    :func:`demo2rl.provenance.code_modules`: module -> the module whose code imports it (the
    first found; None for a root and its parents)."""
    packages = {root.partition(".")[0] for root in roots}
    seen: dict[str, str | None] = {}
    todo: list[tuple[str, str | None]] = [(m, None) for r in roots for m in with_parents(r)]
    while todo:
        name, via = todo.pop()
        if name in seen or name.partition(".")[0] not in packages:
            continue
        module = find(name)
        if module is None:
            continue
        declared = declarations(module.path)
        if declared.get("RESULT_NEUTRAL") is True:
            continue
        seen[name] = via
        unfollowed = declared.get("UNFINGERPRINTED_IMPORTS", {})
        todo += [
            (m, name)
            for m in sorted(imported(module), reverse=True)
            if not any(m == u or m.startswith(f"{u}.") for u in unfollowed)
        ]
    return seen


def chain(found: dict[str, str | None], module: str) -> str:
    """How ``module`` is reached in ``found`` (:func:`modules_run`): ``root -> ... -> module``."""
    names = [module]
    while found.get(names[-1]) is not None:
        names.append(found[names[-1]])
    return " -> ".join(reversed(names))
