"""The ledger and budget reservations: deskctl's ledger next to the naive ways, in one run.

1. One session's whole record (intent, create sent, created, ready, 10 action-count flushes, end), timed per
   session: deskctl's SQLite ledger (WAL, one connection per process, one transaction per step) vs a JSON file
   rewritten under ``flock`` (the usual "safe" harness ledger) vs SQLite opened per step in its default
   rollback-journal mode.
2. Several processes recording sessions at once: records kept (deskctl, JSON+flock, and a JSON file written
   without a lock, which is what loses records) and wall time.
3. A budget reservation (check + hold, atomic) charged to a real budget: median latency as the window fills.
4. A ledger of ``--rows`` (100k) ended sessions, each with its settled reservation, and 20 running ones:
   ``deskctl ls``, ``deskctl cost`` and ``deskctl budget check`` as whole processes, and ``reserve`` as a call,
   next to the naive ways on the same data: one JSON file loaded whole, and the same SQLite file without the
   indexes read whole and summed in Python (the way deskctl did it before schema 4).

    .venv/bin/python bench/bench_ledger.py [--sessions 200] [--procs 8] [--per-proc 40] [--rows 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import multiprocessing
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import median_ms, row, timed

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


# -- 4. a ledger of 100k sessions ---------------------------------------------------------------------------

_RUNNING = 20  # sessions still running in the big ledger
_DAY = 86400.0


def _fill(root: Path, rows: int) -> tuple[Path, Path, Path]:
    """The same sessions and reservations three times: deskctl's ledger (schema 4, its indexes), that file
    without the secondary indexes (the naive SQLite), and one JSON file."""
    import random
    import shutil

    rng = random.Random(4)
    now = time.time()
    path = root / "big.sqlite3"
    open_ledger(f"sqlite://{path}").close()  # the schema, migrated like any deskctl ledger
    sessions, reservations = [], []
    for i in range(rows + _RUNNING):
        running = i >= rows
        intent = now - rng.uniform(60, 25 * _DAY) if not running else now - rng.uniform(10, 600)
        created = intent + 1
        ended = None if running else created + rng.uniform(60, 3600)
        rate = rng.choice([0.0, 0.2336, 0.0504])
        cost = None if running else rate * (ended - created) / 3600  # type: ignore[operator]
        sid = f"dk-{i:010x}"
        sessions.append((sid, rng.choice(["xvfb", "docker", "daytona"]), "ubuntu", "1024x768", "bench:1", 0,
                         "ready" if running else "ended", intent, created, created + 1 if running else None,
                         ended, intent + 3600, None, '{"max_minutes": 60}', "{}", None if running else "closed",
                         None if running else ended - created, cost, rate, "bench", f"rsv-{i:010x}", 1024, 768))  # type: ignore[operator]  # fmt: skip
        reservations.append((f"rsv-{i:010x}", "bench", sid, rate, 0, intent, intent + 3900,
                             "held" if running else "settled", None if running else ended, cost, rate, "bench:1"))
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(f"INSERT INTO sessions VALUES ({', '.join('?' * 23)})", sessions)
        conn.executemany(f"INSERT INTO reservations VALUES ({', '.join('?' * 12)})", reservations)
        conn.execute("INSERT INTO budgets VALUES ('bench', 1e9, ?, 60, 'refuse', ?, ?)", (30 * _DAY, now, now))
    naive = root / "big-naive.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(path, naive)
    with contextlib.closing(sqlite3.connect(naive)) as conn, conn:
        indexes = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").fetchall()
        for (name,) in indexes:
            conn.execute(f"DROP INDEX {name}")
        columns = [d[0] for d in conn.execute("SELECT * FROM sessions LIMIT 0").description]
        rcolumns = [d[0] for d in conn.execute("SELECT * FROM reservations LIMIT 0").description]
    doc = {"sessions": [dict(zip(columns, r, strict=True)) for r in sessions],
           "reservations": [dict(zip(rcolumns, r, strict=True)) for r in reservations]}
    json_path = root / "big.json"
    json_path.write_text(json.dumps(doc))
    return path, naive, json_path


# The naive ways as whole processes: read everything, then filter and sum in Python. ``load()`` gives the
# sessions and reservations as dicts, from the JSON file or from a full scan of the SQLite file.
_NAIVE_LOAD = """
import json, sqlite3, sys, time
source, verb = sys.argv[1], sys.argv[2]
def load():
    if source.endswith(".json"):
        doc = json.load(open(source))
        return doc["sessions"], doc["reservations"]
    conn = sqlite3.connect(source)
    conn.row_factory = sqlite3.Row
    return ([dict(r) for r in conn.execute("SELECT * FROM sessions ORDER BY intent_at")],
            [dict(r) for r in conn.execute("SELECT * FROM reservations ORDER BY created_at")])
sessions, reservations = load()
now = time.time()
def cost(s):
    if s["status"] in ("ended", "failed"):
        return s["cost_usd"]
    if s["created_at"] is None:
        return 0.0
    return None if s["rate_usd_per_hour"] is None else s["rate_usd_per_hour"] * (now - s["created_at"]) / 3600
if verb == "ls":
    out = [{"id": s["session_id"], "status": s["status"], "cost_usd": cost(s)} for s in sessions
           if s["status"] not in ("ended", "failed")]
    print(json.dumps({"sessions": out}))
elif verb == "cost":
    groups = {}
    for s in sessions:
        g = groups.setdefault(s["provider"], [0, 0.0])
        g[0] += 1
        g[1] += cost(s) or 0.0
    print(json.dumps({"groups": groups, "total": sum(g[1] for g in groups.values())}))
else:
    since = now - 30 * 86400
    by_id = {s["session_id"]: s for s in sessions}
    spent = running = 0.0
    for r in reservations:
        if r["budget"] != "bench" or not (r["created_at"] >= since or r["status"] == "held"):
            continue
        s = by_id.get(r["session_id"])
        if s is not None and s["status"] not in ("ended", "failed"):
            running += max(r["amount_usd"], cost(s) or 0.0)
        elif r["status"] == "settled":
            spent += r["cost_usd"] or 0.0
    print(json.dumps({"spent_usd": spent, "running_usd": running}))
"""


def _process(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({done.returncode}): {done.stderr[-500:]}")
    return done.stdout


def _naive_reserve(path: Path, since: float) -> None:
    """What deskctl did before schema 4: under the write lock, every reservation of the window and its session
    loaded and counted in Python, then the hold inserted."""
    with contextlib.closing(sqlite3.connect(path, timeout=60, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute("SELECT session_id, amount_usd, status, cost_usd FROM reservations "
                            "WHERE budget = 'bench' AND (created_at >= ? OR status = 'held')", (since,)).fetchall()
        states = dict(conn.execute(
            "SELECT session_id, status FROM sessions WHERE session_id IN (SELECT session_id FROM reservations "
            "WHERE budget = 'bench' AND (created_at >= ? OR status = 'held'))", (since,)).fetchall())  # fmt: skip
        total = sum((amount if states.get(sid) not in ("ended", "failed") else (cost or 0.0))
                    for sid, amount, status, cost in rows)  # fmt: skip
        assert total < 1e9
        rid = "rsv-naive-" + os.urandom(6).hex()
        conn.execute("INSERT INTO reservations VALUES (?, 'bench', ?, 0.04, 0, ?, ?, 'settled', ?, 0.0, 0.2336, 'b:1')",
                     (rid, rid, time.time(), time.time() + 900, time.time()))  # fmt: skip
        conn.execute("COMMIT")


def _json_reserve(path: Path, since: float) -> None:
    """A JSON ledger's reservation: lock, load everything, sum the window, append, write it all back."""
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = json.loads(path.read_text())
        total = sum(r["cost_usd"] or r["amount_usd"] for r in doc["reservations"]
                    if r["budget"] == "bench" and (r["created_at"] >= since or r["status"] == "held"))  # fmt: skip
        assert total < 1e9
        doc["reservations"].append({"id": "rsv-json", "budget": "bench", "created_at": time.time(), "status": "settled",
                                    "amount_usd": 0.04, "cost_usd": 0.0})  # fmt: skip
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)


def big_ledger(root: Path, rows: int, rounds: int, reserve_rounds: int) -> None:
    import sys

    print(f"\na ledger of {rows} ended sessions (each with its settled reservation) and {_RUNNING} running ones:")
    started = time.perf_counter()
    path, naive_path, json_path = _fill(root, rows)
    print(f"  (filled in {time.perf_counter() - started:.1f} s; SQLite {path.stat().st_size / 2**20:.0f} MiB, "
          f"JSON {json_path.stat().st_size / 2**20:.0f} MiB)")
    env = {**os.environ, "DESKCTL_LEDGER_URL": f"sqlite://{path}"}
    deskctl = [sys.executable, "-m", "deskctl"]
    naive = [sys.executable, "-c", _NAIVE_LOAD]
    # the same answers, or the comparison would mean nothing
    ours_cost = json.loads(_process([*deskctl, "cost", "--json"], env))["total"]["cost_usd"]
    for source in (naive_path, json_path):
        theirs = json.loads(_process([*naive, str(source), "cost"], env))["total"]
        # (the running sessions cost a little more by the time the second process looks)
        assert abs(ours_cost - theirs) < 1e-4 * max(1.0, abs(theirs)), (ours_cost, theirs)
    running = len(json.loads(_process([*deskctl, "ls", "--json"], env))["sessions"])
    assert running == _RUNNING, running
    print(f"  whole processes, median of {rounds} (each naive way reads everything and sums in Python):")
    for verb, args in (("ls", ["ls", "--json"]), ("cost", ["cost", "--json"]),
                       ("budget", ["budget", "check", "bench", "--json"])):  # fmt: skip
        ours = timed(lambda a=args: _process([*deskctl, *a], env), rounds)  # type: ignore[misc]
        theirs = {
            "unindexed scan": timed(lambda v=verb: _process([*naive, str(naive_path), v], env), rounds),  # type: ignore[misc]
            "JSON file": timed(lambda v=verb: _process([*naive, str(json_path), v], env), rounds),  # type: ignore[misc]
        }
        row(f"{verb}", ours, theirs)
    book = open_ledger(f"sqlite://{path}")
    spec = DesktopSpec.build(provider="xvfb", max_minutes=10, budget="bench")
    rate = Rate(usd_per_hour=0.2336, granularity_seconds=1, minimum_seconds=0, source="bench", date="-")
    since = time.time() - 30 * _DAY

    def ours_reserve() -> None:
        rid = reserve(book, session_id=f"r-{os.urandom(4).hex()}", spec=spec, rate=rate)
        assert rid is not None
        settle(book, rid, cost_usd=0.0)

    reserve_ours = timed(ours_reserve, reserve_rounds)
    book.close()
    row("reserve", reserve_ours, {
        "unindexed scan": timed(lambda: _naive_reserve(naive_path, since), reserve_rounds),
        "JSON file": timed(lambda: _json_reserve(json_path, since), max(3, reserve_rounds // 4)),
    })  # fmt: skip
    print(f"  (reserve: deskctl's check + hold + settle as a call, median {median_ms(reserve_ours):.2f} ms, with "
          f"{rows} reservations in the window; the naive ways hold their lock for all of theirs)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--per-proc", type=int, default=40)
    parser.add_argument("--reservations", type=int, default=300)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--process-rounds", type=int, default=5)
    parser.add_argument("--reserve-rounds", type=int, default=20)
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
        spec = DesktopSpec.build(provider="xvfb", max_minutes=10, budget="bench")
        rate = Rate(usd_per_hour=0.2336, granularity_seconds=1, minimum_seconds=0, source="bench", date="-")
        times = []
        for i in range(args.reservations):
            start = time.perf_counter()
            rid = reserve(book, session_id=f"r-{i}", spec=spec, rate=rate)
            times.append((time.perf_counter() - start) * 1000)
            assert rid is not None, "the spec names no budget: nothing would be measured"
            if i % 2 == 0:
                settle(book, rid, cost_usd=0.01)
        book.close()
        print(f"\nbudget reservation (check + hold, atomic) with up to {args.reservations} in the window: "
              f"median {statistics.median(times):.2f} ms, p90 {sorted(times)[int(len(times) * 0.9)]:.2f} ms")

        big_ledger(root, args.rows, args.process_rounds, args.reserve_rounds)


if __name__ == "__main__":
    main()
