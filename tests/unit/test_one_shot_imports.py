"""The modules of deskctl's one-shot CLI processes (``do``, ``screenshot``, ``down``, ``ls``, ``cost``, ``up``) that
are not a provider's or a session's: none imports, when it is imported, a module of the chain ``threading`` /
``enum`` / ``contextlib`` / ``functools`` / ``collections`` / ``weakref`` / ``importlib`` / ``warnings`` / ``re``
(together a quarter of a ``deskctl do`` process). What needs one for a rare branch imports it in that function;
what only annotates with one imports it under ``if TYPE_CHECKING:``. Read from the source (every import statement
that runs at import time: the module's own, its classes', its ``if``/``try`` blocks'), so a new one is named with
its line whichever module happens to load the banned one first in a process.

The SQLite driver's own import of functools: tests/unit/test_ledger_driver.py; the PNG encoder's threads:
tests/unit/test_png.py."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import deskctl

BANNED = {"threading", "enum", "contextlib", "functools", "collections", "weakref", "importlib", "warnings", "re"}

#: the modules of the one-shot paths that this rule holds (the providers' and the session's have their own)
MODULES = [
    "deskctl", "deskctl._fds", "deskctl._jsonc", "deskctl._lazy", "deskctl._record", "deskctl._redact",
    "deskctl._threads", "deskctl.call_args", "deskctl.config", "deskctl.errors", "deskctl.limits", "deskctl.owners",
    "deskctl.paths", "deskctl.providers",
    "deskctl.cli", "deskctl.cli._do_fast", "deskctl.cli._do_table", "deskctl.cli._down", "deskctl.cli._output",
    "deskctl.cli._report", "deskctl.cli._shot", "deskctl.cli._spec", "deskctl.cli._up_fast",
    "deskctl.core", "deskctl.core.frames", "deskctl.core.png", "deskctl.core.shell", "deskctl.core.x11auth",
    "deskctl.core.x11keys", "deskctl.core.x11open", "deskctl.core.x11wire",
    "deskctl.episodes", "deskctl.episodes.store", "deskctl.episodes.takeover",
    "deskctl.ledger", "deskctl.ledger._core", "deskctl.ledger._driver", "deskctl.ledger._open",
    "deskctl.ledger._queries", "deskctl.ledger._records", "deskctl.ledger._schema", "deskctl.ledger._sqlite",
]


def _path(module: str) -> Path:
    root = Path(deskctl.__file__).parent
    parts = module.split(".")[1:]
    package = root.joinpath(*parts) / "__init__.py"
    return package if package.exists() else root.joinpath(*parts).with_suffix(".py")


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_imports(body: list[ast.stmt]) -> list[tuple[int, str]]:
    """(line, module) of each import statement of ``body`` that runs when the module is imported."""
    found: list[tuple[int, str]] = []
    for node in body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.If):
            if not _type_checking(node.test):
                found += _import_time_imports(node.body)
            found += _import_time_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _import_time_imports(block)
        elif isinstance(node, (ast.ClassDef, ast.With)):
            found += _import_time_imports(node.body)
    return found


def test_the_reader_sees_what_runs_at_import_time() -> None:
    source = ("import os\nimport re\nTYPE_CHECKING = False\nif TYPE_CHECKING:\n    import enum\nelse:\n"
              "    from functools import cache\ntry:\n    import weakref\nexcept ImportError:\n    pass\n"
              "class A:\n    from contextlib import suppress\ndef f():\n    import threading\n")
    found = _import_time_imports(ast.parse(source).body)
    assert found == [(1, "os"), (2, "re"), (7, "functools"), (9, "weakref"), (13, "contextlib")]


@pytest.mark.parametrize("module", MODULES)
def test_a_one_shot_module_imports_none_of_the_chain(module: str) -> None:
    path = _path(module)
    banned = [f"{path.name}:{line} imports {name}" for line, name in
              _import_time_imports(ast.parse(path.read_text(encoding="utf-8")).body)
              if name.split(".")[0] in BANNED]
    assert banned == []


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def _fresh(code: str, env: dict[str, str] | None = None) -> str:
    done = _run(code, env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_a_submodule_from_the_package_loads_no_importlib() -> None:
    """``from deskctl import _threads`` asks the package's ``__getattr__`` first (the submodule is not an
    attribute yet): a name it does not serve is refused without importing importlib (which imports warnings)."""
    out = _fresh("import sys\nfrom deskctl import _threads, _jsonc\nimport deskctl\n"
                 "print(sorted(m for m in ('importlib', 'warnings') if m in sys.modules))\n"
                 "print(deskctl.aio.__name__, deskctl.Desktop.__name__)\n")  # what it serves, it still serves
    assert out.splitlines() == ["[]", "deskctl.aio Desktop"]


def test_deskctl_ls_exits_without_threading(tmp_path: Path) -> None:
    """The whole ``deskctl ls`` process, through the console script's :func:`deskctl.cli.entry` (which asks
    threading for live threads only when threading was imported), never imports threading."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('THREADING', 'threading' in sys.modules))\n"
            "sys.argv = ['deskctl', 'ls']\n"
            "from deskctl.cli import entry\n"
            "entry()\n")
    out = _fresh(code, env={"DESKCTL_HOME": str(tmp_path), "DESKCTL_LEDGER_URL": ""})
    assert out.splitlines()[-1] == "THREADING False"


def test_deskctl_ups_check_of_the_environment_loads_no_pathlib(tmp_path: Path) -> None:
    """``deskctl up`` checks DESKCTL_HOME and the ledger URL before anything else (exit 2 on a bad one) without
    pathlib, which imports warnings, re, functools and urllib.parse."""
    code = ("import sys\nfrom deskctl.cli._spec import check_environment\ncheck_environment()\n"
            "print(sorted(m for m in ('pathlib', 'warnings') if m in sys.modules))\n")
    home = tmp_path / "home"
    assert _fresh(code, env={"DESKCTL_HOME": str(home), "DESKCTL_LEDGER_URL": ""}).strip() == "[]"
    assert home.is_dir()
    (tmp_path / "file").write_text("")
    bad = _run(code, env={"DESKCTL_HOME": str(tmp_path / "file" / "home"), "DESKCTL_LEDGER_URL": ""})
    assert bad.returncode == 1 and "ConfigInvalid" in bad.stderr and "not a usable directory" in bad.stderr
