"""deskctl's modules import each other without a circle, and the errors module imports nothing above it.

The graph is read from the source (ast): an import at a module's top level is an edge (the body of an
``if TYPE_CHECKING:`` is not: it never runs); importing ``a.b.c`` also imports the packages ``a.b`` and ``a``.
Imports inside functions are left out: they run when called, after every module involved has loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import deskctl

ROOT = Path(deskctl.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run when the module is imported (into if/try blocks, never into functions)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If) and not _is_type_checking(node):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _top_level(node.body) + [s for h in node.handlers for s in _top_level(h.body)]
            out += _top_level(node.orelse) + _top_level(node.finalbody)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
    return out


def _parse(source: str) -> ast.Module:
    """``ast.parse`` with the garbage collector held. On CPython 3.11.2 the whole unit run failed here with
    "SystemError: AST constructor recursion depth mismatch" (a module the test parses alone without fault) and
    passes with collections held off: the AST converter keeps its depth counter per interpreter, so a finalizer
    that a collection runs mid-conversion and that parses too (3.11 tracebacks parse their lines) upsets it."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()


def _imports(name: str, path: Path, modules: dict[str, Path], *, everywhere: bool = False) -> set[str]:
    tree = _parse(path.read_text(encoding="utf-8"))
    nodes = list(ast.walk(tree)) if everywhere else _top_level(tree.body)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from deskctl.providers import base` imports the module deskctl.providers.base
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            # importing a.b.c runs a and a.b first, except the packages that contain the importer
            for end in range(1, len(parts) + 1):
                module = ".".join(parts[:end])
                if module in modules and module != name and not name.startswith(module + "."):
                    found.add(module)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as the list of its modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_module_of_deskctl_imports_itself_through_others() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and {"deskctl.errors", "deskctl.platforms"} <= graph["deskctl.spec"]  # the graph was read
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_errors_import_nothing_above_them() -> None:
    """errors and the redaction it uses are the bottom of the layering: not even a function imports more."""
    modules = _modules()
    errors = _imports("deskctl.errors", modules["deskctl.errors"], modules, everywhere=True)
    assert errors <= {"deskctl._redact"}
    assert _imports("deskctl._redact", modules["deskctl._redact"], modules, everywhere=True) == set()
    credentials = _imports("deskctl.credentials", modules["deskctl.credentials"], modules)
    assert credentials <= {"deskctl._redact", "deskctl.providers", "deskctl.providers.base"}  # no provider module
