"""`deskctl screenshot ID -o FILE` without click (cli/_shot.py): the same output, exit code, file and ledger count as
through click for the same argv, what it leaves to click, and an import list that stays short."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import _module_desktop
from _cli import FAST_RUNNER as _RUNNER
from _cli import importers

# the module's desktop and home (tests/_module_desktop.py), as fixtures of this module
module_home, same_home, session = _module_desktop.module_home, _module_desktop.same_home, _module_desktop.session


def _screenshots_counted(sid: str) -> int:
    from deskctl.ledger import open_ledger

    with open_ledger() as book:
        record = book.get(sid)
    assert record is not None
    return int(record.action_counts.get("screenshot", 0))


def _run(args: list[str], *, fast: bool, workdir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    modules = workdir / f"modules-{'fast' if fast else 'click'}.json"
    proc = subprocess.run([sys.executable, "-c", _RUNNER, "fast" if fast else "click", *args],
                          capture_output=True, timeout=120, cwd=workdir,
                          env={**os.environ, "DESKCTL_TEST_MODULES": str(modules), **(env or {})})
    return {"exit": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr.decode(),
            "modules": json.loads(modules.read_text())}


def _both_ways(args: list[str], tmp_path: Path, sid: str | None = None,
               env: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each way in a folder of its own holding the same relative paths; what it wrote there and what it counted."""
    results = []
    for fast in (True, False):
        workdir = tmp_path / ("fast" if fast else "click")
        workdir.mkdir(parents=True)
        before = _screenshots_counted(sid) if sid else 0
        result = _run(args, fast=fast, workdir=workdir, env=env)
        result["counted"] = (_screenshots_counted(sid) - before) if sid else 0
        result["written"] = sorted((p.name, p.read_bytes()[:8], p.stat().st_size > 100)
                                   for p in workdir.iterdir() if p.suffix == ".png")
        results.append(result)
    return results[0], results[1]


def _shown(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "modules"}


@pytest.mark.parametrize("tail", [["-o", "shot.png"], ["--output", "shot.png", "--json"], ["--json", "-o", "shot.png"],
                                  ["--output=shot.png"], ["-o", "-"]],
                         ids=lambda tail: " ".join(tail))
def test_the_fast_path_gives_what_click_gives(session: str, tail: list[str], tmp_path: Path) -> None:
    fast, through_click = _both_ways(["screenshot", session, *tail], tmp_path, session)
    assert _shown(fast) == _shown(through_click)
    assert fast["exit"] == 0 and fast["counted"] == 1  # the shot is counted in the ledger, as through click
    if "-" in tail:
        assert fast["stdout"][:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert fast["written"] == [("shot.png", b"\x89PNG\r\n\x1a\n", True)]
    assert "click" not in fast["modules"] and "click" in through_click["modules"]


def test_a_bad_path_and_an_unknown_session_are_the_same_coded_errors_both_ways(session: str, tmp_path: Path) -> None:
    cases = ((["screenshot", session, "-o", "no-such-folder/x.png", "--json"], "usage.bad_path"),
             (["screenshot", session, "-o", "no-such-folder/x.png"], "usage.bad_path"),
             # a user that does not exist: pathlib's RuntimeError made this an internal error (exit 1)
             (["screenshot", session, "-o", "~no-such-user-of-deskctl/x.png"], "usage.bad_path"),
             (["screenshot", "dk-nosuchone", "-o", "x.png"], "usage.not_found"),
             (["screenshot", "dk-nosuchone", "-o", "x.png", "--json"], "usage.not_found"))
    for number, (args, code) in enumerate(cases):
        fast, through_click = _both_ways(args, tmp_path / str(number))
        assert _shown(fast) == _shown(through_click)
        assert fast["exit"] == 2 and code in fast["stdout"].decode() + fast["stderr"]
        assert "Traceback" not in fast["stderr"] and "click" not in fast["modules"]


@pytest.mark.parametrize("tail", [["-o"], ["--max-size", "100x100", "-o", "s.png"], ["-os.png"],
                                  ["-o", "s.png", "-o", "t.png"], ["--help"], ["-o", "s.png", "--bogus"], [],
                                  ["-o", "--json"]],
                         ids=lambda tail: " ".join(tail) or "(nothing)")
def test_what_the_fast_path_declines_click_answers_as_before(session: str, tail: list[str], tmp_path: Path) -> None:
    fast, through_click = _both_ways(["screenshot", session, *tail], tmp_path)
    assert _shown(fast) == _shown(through_click)
    assert "click" in fast["modules"]


def test_config_defaults_go_through_click(session: str, tmp_path: Path) -> None:
    """`[defaults]` may set an option of the command: the fast path leaves such a call to click."""
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\nmax_size = "100x100"\n')
    fast, through_click = _both_ways(["screenshot", session, "-o", "s.png", "--json"], tmp_path, session,
                                     env={"DESKCTL_CONFIG": str(config)})
    assert _shown(fast) == _shown(through_click) and fast["exit"] == 0
    assert "click" in fast["modules"]


def test_a_screenshot_process_loads_only_what_a_capture_needs(session: str, tmp_path: Path) -> None:
    """A whole process per look at the screen: no click, no python-xlib, no Pillow, no thread-pool module, no
    dataclasses (bench/bench_cli.py has what each cost)."""
    result = _run(["screenshot", session, "-o", "s.png"], fast=True, workdir=tmp_path)
    assert result["exit"] == 0, result["stderr"]
    unwanted = {"click", "pydantic", "deskctl.cli._app", "deskctl.cli.session_cmds", "Xlib", "deskctl.core.x11",
                "PIL", "PIL.Image", "concurrent.futures", "dataclasses", "inspect", "subprocess", "shutil"}
    assert sorted(unwanted & set(result["modules"])) == []


def test_a_screenshot_leaves_socket_and_base64_to_the_one_module_that_still_needs_them(session: str,
                                                                                      tmp_path: Path) -> None:
    """As `deskctl do`: the capture's X connection is a ``_socket`` socket (tests/cli/test_do_fast.py)."""
    found = importers(["screenshot", session, "-o", "s.png"], ["socket", "base64", "selectors", "pathlib"],
                      cwd=tmp_path)
    assert found.get("socket") in (None, "deskctl.owners"), found
    # the output path is checked without pathlib (with urllib.parse and ipaddress, ~5% of the process), and
    # nothing else on the path imports it (the ledger, the xvfb provider)
    assert "pathlib" not in found, found
    assert found.get("selectors") in (None, "deskctl.owners"), found
    assert "base64" not in found, found


def test_a_screenshot_loads_none_of_the_xvfb_provider_s_other_parts(session: str, tmp_path: Path) -> None:
    """As `deskctl do` (tests/cli/test_do_fast.py): a capture uses the provider's driver only."""
    unused = ["deskctl.providers.xvfb.preflight", "deskctl.providers.xvfb.browser", "deskctl.providers.xvfb.create",
              "deskctl.providers.xvfb.commands", "deskctl.providers.xvfb.spawn", "deskctl.providers.xvfb.display",
              "deskctl.providers._procs", "deskctl.core.shell"]
    found = importers(["screenshot", session, "-o", "s.png"], [*unused, "deskctl.providers._guest"], cwd=tmp_path)
    assert found.get("deskctl.providers._guest") in (None, "deskctl.providers._x11provider"), found
    assert {module: found[module] for module in unused if module in found} == {}


def test_a_screenshot_loads_no_typing_or_signal(session: str, tmp_path: Path) -> None:
    """As `deskctl do` (tests/cli/test_do_fast.py): typing is for the type checkers, signal's constants are
    ``_signal``'s."""
    found = importers(["screenshot", session, "-o", "s.png"], ["typing", "signal"], cwd=tmp_path)
    assert found == {}, found
