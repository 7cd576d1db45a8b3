"""The CLI's shape: one application object in ``ctx.obj``, one abort path (:func:`deskctl.cli.main`, the only
caller of ``sys.exit``), and a command that printed its own outcome ends through it too."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest

import deskctl.cli as cli_package
from _cli import deskctl

CLI = Path(cli_package.__file__).resolve().parent


def _exits(path: Path) -> list[str]:
    """Where ``path`` calls ``sys.exit`` or raises ``SystemExit``, as ``function:line``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(function):
            called = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) == ("sys", "exit")
            raised = isinstance(node, ast.Raise) and "SystemExit" in ast.dump(node)
            if called or raised:
                found.append(f"{function.name}:{node.lineno}")
    return found


def test_only_main_calls_sys_exit() -> None:
    stray = {p.name: _exits(p) for p in sorted(CLI.glob("*.py")) if p.name != "__init__.py" and _exits(p)}
    assert stray == {}
    # main, and entry's ordinary exit when a thread still runs
    assert {spot.split(":")[0] for spot in _exits(CLI / "__init__.py")} == {"main", "entry"}


_SEEN: list[object] = []


@click.command("probe-app")
def _probe_app() -> None:
    from deskctl.cli._app import current_app

    _SEEN.append(current_app())


def test_the_app_object_carries_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from deskctl.cli._app import App, cli
    from deskctl.config import Config

    monkeypatch.setitem(cli_package.COMMANDS, "probe-app", (f"{__name__}:_probe_app", "probe"))
    result = CliRunner().invoke(cli, ["probe-app"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert len(_SEEN) == 1 and isinstance(_SEEN[0], App) and isinstance(_SEEN[0].config, Config)


def test_a_json_error_document_is_printed_once_and_exits_by_its_code() -> None:
    """``down --json`` of an unknown id: the document carries the error, and the abort path adds nothing."""
    done = deskctl("down", "dk-notthere0", "--json")
    assert done.returncode == 2, done.stderr
    doc = json.loads(done.stdout)
    assert doc["error"]["code"] == "usage.not_found" and doc["sessions"][0]["status"] == "error"
    assert done.stderr == ""  # (stdout parsed as one document: nothing was printed after it)
