"""`deskctl do` commands made from the action table, as a real process against a real Xvfb desktop: the actions the
table gave the CLI (cursor-position; double-click's --button), the result output convention (plain and --json),
and a bound checked while the flags are parsed (scroll's --dx)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from _cli import deskctl
from deskctl.ledger import open_ledger
from deskctl.providers._x11 import X11Address, read_cookie
from probe import Probe

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")


@pytest.fixture
def sid() -> Iterator[str]:
    session = deskctl("up", "--geometry", "320x240", check=True).stdout.strip()
    try:
        yield session
    finally:
        deskctl("down", session)


def _probe(sid: str) -> Probe:
    with open_ledger() as book:
        record = book.get(sid)
    assert record is not None and record.handle is not None
    data = record.handle["data"]
    return Probe.open(X11Address(display=str(data["display"])), read_cookie(data["cookie_file"]))


def test_cursor_position_prints_the_pointer_plain_and_as_json(sid: str) -> None:
    deskctl("do", sid, "move", "30", "40", check=True)
    assert deskctl("do", sid, "cursor-position", check=True).stdout == "30 40\n"
    assert json.loads(deskctl("do", sid, "cursor-position", "--json", check=True).stdout) == {
        "id": sid, "action": "cursor-position", "ok": True, "x": 30, "y": 40}


def test_double_click_takes_a_button_as_desktop_double_click_does(sid: str) -> None:
    with _probe(sid) as probe:
        done = deskctl("do", sid, "double-click", "12", "34", "--button", "right", "--json", check=True)
        assert json.loads(done.stdout) == {"id": sid, "action": "double-click", "ok": True, "x": 12, "y": 34,
                                           "button": "right", "space": None}
        probe.wait_for(lambda p: len(p.releases(3)) >= 2, "a double right click")
        assert [e.pos for e in probe.presses(3)] == [(12, 34), (12, 34)] and probe.presses(1) == []


def test_scroll_dx_is_checked_while_parsing_with_the_bounds_code() -> None:
    # before any session is looked up: the bound is the flag's, as every bounded flag's
    proc = deskctl("do", "dk-missing", "scroll", "1", "1", "--dx", "5000", "--json")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "usage.out_of_range"
