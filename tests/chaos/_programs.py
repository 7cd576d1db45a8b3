"""The library users of the chaos test, each a process of its own: ``python _programs.py KIND STOPFILE``.

Each acts until STOPFILE exists, closes its desktops, and prints one JSON line of what it acknowledged (an
action that returned, an event whose write returned): the test compares that with the ledger.

* ``aio``: four desktops in one event loop (:mod:`deskctl.aio`), clicking on all at once.
* ``threads``: one desktop, two threads clicking and two threads writing events straight to the ledger.
* ``victim``: one desktop (its owner watch off, so only the reaper can end it), clicking until the test
  SIGKILLs it; it prints its session id first.
* ``writer SESSION N``: events straight to the ledger as fast as it can, each printed (``N i``) once its write
  returned, until the test SIGKILLs it, often in the middle of a transaction.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import deskctl
import deskctl.aio

GEOMETRY = "320x240"


def _stopped(stopfile: str) -> bool:
    return os.path.exists(stopfile)


async def _aio(stopfile: str) -> dict[str, int]:
    clicks: dict[str, int] = {}

    async def one(n: int) -> None:
        async with deskctl.aio.open_desktop("xvfb", geometry=GEOMETRY, labels={"chaos": "aio"}) as desk:
            clicks[desk.id] = 0
            while not _stopped(stopfile):
                await desk.click(10 + n, 20 + n)
                clicks[desk.id] += 1

    await asyncio.gather(*(one(n) for n in range(4)))
    return clicks


def _threads(stopfile: str) -> dict[str, object]:
    counted = {"clicks": 0, "events": 0}
    lock = threading.Lock()
    errors: list[str] = []
    with deskctl.open_desktop("xvfb", geometry=GEOMETRY, labels={"chaos": "threads"}) as desk:
        def click(n: int) -> None:
            try:
                while not _stopped(stopfile):
                    desk.click(5 + n, 5 + n)
                    with lock:
                        counted["clicks"] += 1
            except Exception as exc:  # reported, and the counts then differ
                errors.append(repr(exc))

        def write(n: int) -> None:
            try:
                i = 0
                while not _stopped(stopfile):
                    desk.ledger.record_event(desk.id, "chaos", {"thread": n, "i": i})
                    i += 1
                    with lock:
                        counted["events"] += 1
            except Exception as exc:
                errors.append(repr(exc))

        workers = [threading.Thread(target=click, args=(n,)) for n in range(2)]
        workers += [threading.Thread(target=write, args=(n,)) for n in range(2)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        return {"id": desk.id, **counted, "errors": errors}


def _victim() -> None:
    desk = deskctl.open_desktop("xvfb", geometry=GEOMETRY, labels={"chaos": "victim"},
                                provider_options={"owner_watch": False})
    print(json.dumps({"id": desk.id}), flush=True)
    while True:
        desk.click(3, 3)
        time.sleep(0.01)


def _writer(session_id: str, n: str) -> None:
    from deskctl.ledger import open_ledger

    book = open_ledger()
    i = 0
    while True:
        book.record_event(session_id, "writer", {"n": int(n), "i": i})
        print(n, i, flush=True)
        i += 1


def main() -> None:
    kind, stopfile = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    if kind == "aio":
        print(json.dumps({"clicks": asyncio.run(_aio(stopfile))}), flush=True)
    elif kind == "threads":
        print(json.dumps(_threads(stopfile)), flush=True)
    elif kind == "victim":
        _victim()
    elif kind == "writer":
        _writer(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown program {kind!r}")


if __name__ == "__main__":
    main()
