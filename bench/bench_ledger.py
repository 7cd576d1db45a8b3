"""The ledger and budget reservations: deskctl's ledger next to the naive ways, in one run.

1. One session's whole record (intent, create sent, created, ready, 10 action-count flushes, end), timed per
   session: deskctl's SQLite ledger (WAL, one connection per process, one transaction per step) vs a JSON file
   rewritten under ``flock`` (the usual "safe" harness ledger) vs SQLite opened per step in its default
   rollback-journal mode.
2. Several processes recording sessions at once: records kept (deskctl, JSON+flock, and a JSON file written
   without a lock, which is what loses records) and wall time.
3. A budget reservation (check + hold, atomic): median latency.

    .venv/bin/python bench/bench_ledger.py [--sessions 200] [--procs 8] [--per-proc 40]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deskctl.budget import reserve, settle
from deskctl.ledger import Ledger, SessionRecord, open_ledger
from deskctl.metering import Rate
from deskctl.spec import DesktopSpec

_STEPS = 10  # action-count flushes per session


def deskctl_session(book: Ledger, sid: str) -> None:
    now = time.time()
    book.record_intent(SessionRecord(sid, "xvfb", "ubuntu", "1024x768", "host:1", False, "intent", now))
    book.record_create_sent(sid, now)
    book.record_created(sid, {"provider": "xvfb", "resource_id": sid, "data": {"display": ":9"}})
    book.record_ready(sid, now, 1024, 768)
    for _ in range(_STEPS):
        book.add_actions(sid, {"click": 3, "key": 1})
    book.record_end(sid, status="ended", reason="closed", ended_at=time.time(), billable_seconds=1.0, cost_usd=0.0)


def _json_update(path: Path, change: Callable[[dict[str, Any]], None], *, lock: bool) -> None:
    # the lock is on a separate file: a lock on the data file would be lost when os.replace swaps the inode
    with open(path.with_suffix(".lock"), "a") as lock_file:
        if lock:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        doc: dict[str, Any] = json.loads(text) if text else {}
        change(doc)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)  # atomic, but without the lock a concurrent writer's update is overwritten


def json_session(path: Path, sid: str, *, lock: bool = True) -> None:
    now = time.time()

    def set_fields(**fields: Any) -> Callable[[dict[str, Any]], None]:
        return lambda doc: doc.setdefault(sid, {}).update(fields)

    def add_actions(doc: dict[str, Any]) -> None:
        counts = doc.setdefault(sid, {}).setdefault("actions", {})
        counts["click"] = counts.get("click", 0) + 3
        counts["key"] = counts.get("key", 0) + 1

    _json_update(path, set_fields(status="intent", intent_at=now), lock=lock)
    _json_update(path, set_fields(status="creating", created_at=now), lock=lock)
    _json_update(path, set_fields(handle={"resource_id": sid}), lock=lock)
    _json_update(path, set_fields(status="ready", ready_at=now), lock=lock)
    for _ in range(_STEPS):
        _json_update(path, add_actions, lock=lock)
    _json_update(path, set_fields(status="ended", ended_at=time.time()), lock=lock)


def sqlite_naive_session(path: Path, sid: str) -> None:
    def step(sql: str, params: tuple[Any, ...]) -> None:
        conn = sqlite3.connect(path, timeout=60)
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS s (id TEXT PRIMARY KEY, status TEXT, actions INTEGER)")
            conn.execute(sql, params)
        conn.close()

    step("INSERT INTO s VALUES (?, 'intent', 0)", (sid,))
    step("UPDATE s SET status = 'creating' WHERE id = ?", (sid,))
    step("UPDATE s SET status = 'created' WHERE id = ?", (sid,))
    step("UPDATE s SET status = 'ready' WHERE id = ?", (sid,))
    for _ in range(_STEPS):
        step("UPDATE s SET actions = actions + 4 WHERE id = ?", (sid,))
    step("UPDATE s SET status = 'ended' WHERE id = ?", (sid,))


def _time_each(fn: Callable[[str], None], n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(f"dk-{i}")
        out.append((time.perf_counter() - start) * 1000)
    return out


def _worker(kind: str, target: str, worker: int, per_proc: int, go: Any) -> None:
    go.wait()
    if kind == "deskctl":
        book = open_ledger(target)
        for i in range(per_proc):
            deskctl_session(book, f"dk-{worker}-{i}")
        book.close()
    else:
        for i in range(per_proc):
            json_session(Path(target), f"dk-{worker}-{i}", lock=(kind == "json+flock"))


def _concurrent(kind: str, target: str, procs: int, per_proc: int) -> tuple[float, int]:
    mp = multiprocessing.get_context("fork")
    go = mp.Event()
    workers = [mp.Process(target=_worker, args=(kind, target, w, per_proc, go)) for w in range(procs)]
    for p in workers:
        p.start()
    start = time.perf_counter()
    go.set()
    for p in workers:
        p.join()
    wall = time.perf_counter() - start
    if kind == "deskctl":
        with open_ledger(target) as book:
            kept = sum(1 for s in book.sessions() if s.status == "ended" and s.action_counts.get("click") == 30)
    else:
        doc = json.loads(Path(target).read_text())
        kept = sum(1 for s in doc.values() if s.get("status") == "ended" and s.get("actions", {}).get("click") == 30)
    return wall, kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--per-proc", type=int, default=40)
    parser.add_argument("--reservations", type=int, default=300)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="deskctl-bench-ledger-") as tmp:
        root = Path(tmp)
        book = open_ledger(f"sqlite://{root / 'deskctl.sqlite3'}")
        ours = _time_each(lambda sid: deskctl_session(book, sid), args.sessions)
        book.close()
        flocked = _time_each(lambda sid: json_session(root / "naive.json", sid), args.sessions)
        per_step = _time_each(lambda sid: sqlite_naive_session(root / "naive.sqlite3", sid), args.sessions)
        m_ours, m_json, m_sqlite = (statistics.median(x) for x in (ours, flocked, per_step))
        print(f"one session's record ({4 + _STEPS + 1} writes), median over {args.sessions} sessions:")
        print(f"  deskctl ledger (SQLite WAL)        {m_ours:8.2f} ms")
        print(f"  JSON file + flock (naive)          {m_json:8.2f} ms   naive/deskctl = {m_json / m_ours:5.1f}x")
        print(f"  SQLite opened per step (naive)     {m_sqlite:8.2f} ms   naive/deskctl = {m_sqlite / m_ours:5.1f}x")

        total = args.procs * args.per_proc
        print(f"\n{args.procs} processes x {args.per_proc} sessions at once ({total} sessions):")
        for kind, target in (("deskctl", f"sqlite://{root / 'conc.sqlite3'}"), ("json+flock", str(root / "c1.json")),
                             ("json, no lock", str(root / "c2.json"))):  # fmt: skip
            wall, kept = _concurrent(kind, target, args.procs, args.per_proc)
            print(f"  {kind:<15} {wall:7.2f} s wall   {kept:4d}/{total} sessions recorded intact"
                  f"   ({total / wall:6.0f} sessions/s)")

        book = open_ledger(f"sqlite://{root / 'budget.sqlite3'}")
        book.set_budget("bench", max_usd=1e9, window_seconds=86400)
        spec = DesktopSpec.build(provider="xvfb", max_minutes=10, provider_options={"budget": "bench"})
        rate = Rate(usd_per_hour=0.2336, granularity_seconds=1, minimum_seconds=0, source="bench", date="-")
        times = []
        for i in range(args.reservations):
            start = time.perf_counter()
            rid = reserve(book, session_id=f"r-{i}", spec=spec, rate=rate)
            times.append((time.perf_counter() - start) * 1000)
            if i % 2 == 0:
                settle(book, rid, cost_usd=0.01)
        book.close()
        print(f"\nbudget reservation (check + hold, atomic) with up to {args.reservations} in the window: "
              f"median {statistics.median(times):.2f} ms, p90 {sorted(times)[int(len(times) * 0.9)]:.2f} ms")


if __name__ == "__main__":
    main()
