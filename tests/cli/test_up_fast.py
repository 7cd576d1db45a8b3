"""`deskctl up` without click (cli/_up_fast.py): for the same argv, the same stdout, stderr, exit code and ledger
row as through click, and no click import; anything but the plain forms goes to click as before."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl_process as deskctl
from _cli import fast_or_click as _run


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path / "home"))


def _sessions() -> dict[str, dict[str, Any]]:
    rows = json.loads(deskctl("ls", "--all", "--json", check=True).stdout)["sessions"]
    return {row["id"]: row for row in rows}


_VARYING = [(re.compile(r"dk-[0-9a-f]{10}"), "ID"), (re.compile(r"\d+\.\d+s\b"), "Ts"),
            (re.compile(r'"seconds_to_ready": [0-9.]+'), '"seconds_to_ready": T'),
            (re.compile(r"DISPLAY=:\d+|\"display\": \":\d+\""), "DISPLAY"),
            (re.compile(r"xvfb:[^\"\s]+:\d+:\d+"), "RESOURCE"),
            (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z"), "TIME")]


def _same_shape(text: str) -> str:
    for pattern, stand_in in _VARYING:
        text = pattern.sub(stand_in, text)
    return text


def _ledger_row(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in ("provider", "platform", "geometry", "status", "detached")}


@pytest.mark.parametrize("tail", [
    ["-p", "xvfb", "-g", "320x240"],
    ["--provider=xvfb", "--geometry=320x240", "--json", "--ttl", "90s", "--label", "team=a", "--label=x=y"],
    ["--geometry", "320x240", "-o", "owner_watch=false", "--option=start_timeout=20", "--ttl=2h"],
], ids=["short", "long and json", "options"])
def test_up_is_the_same_without_click(tail: list[str], tmp_path: Path) -> None:
    before = set(_sessions())
    fast = _run(["up", *tail], fast=True, tmp_path=tmp_path)
    fast_ids = set(_sessions()) - before
    through_click = _run(["up", *tail], fast=False, tmp_path=tmp_path)
    click_ids = set(_sessions()) - before - fast_ids
    try:
        assert fast["exit"] == through_click["exit"] == 0, fast["stderr"] + through_click["stderr"]
        assert len(fast_ids) == len(click_ids) == 1
        assert _same_shape(fast["stdout"]) == _same_shape(through_click["stdout"])
        assert _same_shape(fast["stderr"]) == _same_shape(through_click["stderr"])
        sessions = _sessions()
        (fast_id,), (click_id,) = fast_ids, click_ids
        assert _ledger_row(sessions[fast_id]) == _ledger_row(sessions[click_id])
        assert sessions[fast_id]["status"] == "ready"
        assert fast_id in fast["stdout"] and click_id in through_click["stdout"]
        assert "click" not in fast["modules"] and "click" in through_click["modules"]
    finally:
        deskctl("down", *fast_ids, *click_ids)


@pytest.mark.parametrize("tail", [
    ["--geometry", "0x0"], ["-g", "abc"], ["--provider", "nosuch"], ["--json", "--provider", "nosuch"],
    ["--ttl", "0"], ["--ttl=abc"], ["--label", "novalue"], ["-o", "nosuch=1"], ["--option", "start_timeout=-1"],
], ids=lambda tail: " ".join(tail))
def test_bad_input_is_the_same_without_click(tail: list[str], tmp_path: Path) -> None:
    fast = _run(["up", *tail], fast=True, tmp_path=tmp_path)
    through_click = _run(["up", *tail], fast=False, tmp_path=tmp_path)
    assert {k: fast[k] for k in ("exit", "stdout", "stderr")} == \
        {k: through_click[k] for k in ("exit", "stdout", "stderr")}
    assert fast["exit"] == 2, fast["stderr"]
    assert "Traceback" not in fast["stderr"]
    assert _sessions() == {}  # nothing recorded (a usage error comes before the intent row)


@pytest.mark.parametrize("tail", [["--help"], ["-h"], ["extra"], ["--geometry"], ["-g", "-1x2"], ["--bogus"],
                                  ["-p", "xvfb", "-p", "xvfb", "-g", "1x1"], ["-pnosuch"], ["--", "x"],
                                  ["--json", "--json", "-g", "1x1"], ["-p", "xvfb", "--platform", "windows"]],
                         ids=lambda tail: " ".join(tail))
def test_what_the_fast_path_declines_click_answers_as_before(tail: list[str], tmp_path: Path) -> None:
    fast = _run(["up", *tail], fast=True, tmp_path=tmp_path)
    through_click = _run(["up", *tail], fast=False, tmp_path=tmp_path)
    assert {k: _same_shape(fast[k]) for k in ("stdout", "stderr")} == \
        {k: _same_shape(through_click[k]) for k in ("stdout", "stderr")}
    assert fast["exit"] == through_click["exit"]
    assert "click" in fast["modules"]
    assert fast["exit"] in (0, 2, 3)
    assert _sessions() == {} or fast["exit"] == 3  # nothing made (the platform case fails in the preflight)


def test_an_environment_flag_goes_through_click(tmp_path: Path) -> None:
    """DESKCTL_GEOMETRY sets --geometry when the flag is not given: click reads it, so the call is click's."""
    result = _run(["up", "--json"], fast=True, tmp_path=tmp_path, env={"DESKCTL_GEOMETRY": "0x0"})
    assert result["exit"] == 2
    assert json.loads(result["stdout"])["error"]["code"].startswith("usage.")
    assert "click" in result["modules"]


def test_config_defaults_go_through_click(tmp_path: Path) -> None:
    """`[defaults]` may set any of up's options: the fast path leaves such a call to click, which applies it."""
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\ngeometry = "0x0"\n')
    result = _run(["up"], fast=True, tmp_path=tmp_path, env={"DESKCTL_CONFIG": str(config)})
    assert result["exit"] == 2
    assert "click" in result["modules"]


def test_up_loads_no_click_or_heavy_modules(tmp_path: Path) -> None:
    """`deskctl up` is a whole process per desktop: it imports what bringing one up needs. click (its import was a
    third of the process), dataclasses (inspect, ast, dis: credentials' records are deskctl._record classes),
    secrets (hmac, hashlib, random: the X cookie is os.urandom), importlib.resources (tempfile, zipfile: the
    compat matrix is read beside the package) and shutil (bz2, lzma: Xvfb is looked up by display.which). One of
    these showing up again is a regression of `up`'s cost (bench/bench_cli.py, row "up + down")."""
    result = _run(["up", "--geometry", "320x240"], fast=True, tmp_path=tmp_path)
    try:
        assert result["exit"] == 0, result["stderr"]
    finally:
        deskctl("down", *_sessions())
    unwanted = {"click", "pydantic", "deskctl.cli._app", "deskctl.cli.session_cmds", "dataclasses", "inspect",
                "secrets", "hmac", "importlib.resources", "zipfile", "tempfile", "shutil", "bz2", "lzma", "Xlib"}
    assert sorted(unwanted & set(result["modules"])) == []


def test_up_starts_xvfb_and_its_watch_without_subprocess() -> None:
    """Xvfb and the owner watch are started by os.posix_spawn (providers/xvfb/spawn.py): subprocess and what it
    imports (signal, selectors, locale) were a sixteenth of the instructions of a whole `deskctl up` process."""
    from _cli import importers

    try:
        found = importers(["up", "--provider", "xvfb", "--geometry", "320x240"],
                          ["subprocess", "signal", "selectors", "locale"])
    finally:
        deskctl("down", *_sessions())
    assert found == {}, found


def test_up_of_an_xvfb_desktop_loads_no_typing_or_hashlib() -> None:
    """As `deskctl do` (tests/cli/test_do_fast.py): typing is for the type checkers (the local preflight's
    findings, the credentials model and the option names included); the desktop's deskctl.ledger label is
    SHA-256 from CPython's own module, not hashlib's OpenSSL bindings (each a sixteenth of a `deskctl up`)."""
    from _cli import importers

    try:
        found = importers(["up", "--provider", "xvfb", "--geometry", "320x240"], ["typing", "hashlib", "_hashlib"])
    finally:
        deskctl("down", *_sessions())
    assert found == {}, found
