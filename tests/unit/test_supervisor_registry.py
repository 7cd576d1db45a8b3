"""supervisor's registry of open desktops: what close_all (SIGTERM, interpreter exit) tears down. It holds them by
weak references: a desktop nobody holds leaves it, an unwatched one leaves it, an open one is ended."""

from __future__ import annotations

import gc

import deskctl
from deskctl import supervisor
from deskctl.ledger import open_ledger


def _watched() -> set[str]:
    return {desk.id for desk in (each() for each in supervisor._open_desktops) if desk is not None}


def test_close_all_ends_every_open_desktop_and_skips_the_closed_ones() -> None:
    first = deskctl.open_desktop("memory", geometry="320x200", preflight=False)
    second = deskctl.open_desktop("memory", geometry="320x200", preflight=False)
    closed = deskctl.open_desktop("memory", geometry="320x200", preflight=False)
    assert {first.id, second.id, closed.id} <= _watched()
    closed.close()
    assert closed.id not in _watched()
    supervisor.close_all("a test's end")
    with open_ledger() as book:
        for desk in (first, second):
            record = book.get(desk.id)
            assert record is not None and (record.status, record.reason) == ("ended", "a test's end")
    assert not {first.id, second.id} & _watched()


def test_a_desktop_nobody_holds_leaves_the_registry() -> None:
    desk = deskctl.open_desktop("memory", geometry="320x200", preflight=False, detached=True)
    sid = desk.id
    before = len(supervisor._open_desktops)
    supervisor.watch(desk)  # as an attached desktop is: then dropped without a close or a release
    assert sid in _watched() and len(supervisor._open_desktops) == before + 1
    del desk
    gc.collect()
    assert sid not in _watched() and len(supervisor._open_desktops) == before
    supervisor.close_all("a test's end")  # nothing of the dropped desktop is left to end
