"""The ledger work of N concurrent `deskctl down`s (each a process, as the CLI runs), without the desktops: the
reads and writes one down makes, per process: total ledger time and the longest write transaction (its wait for
the write lock included). Prints medians over rounds. Run it against another tree with PYTHONPATH=that/src to compare.

    .venv/bin/python bench/bench_ledger_down.py [N=16] [ROUNDS=5]
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time


def one_down(url: str, sid: str, barrier: mp.synchronize.Barrier, out: mp.Queue[tuple[float, float]]) -> None:
    from deskctl.ledger import open_ledger
    barrier.wait()
    start = time.perf_counter()
    book = open_ledger(url)
    book.get(sid)
    if hasattr(book, "attach_state"):
        book.attach_state(sid, event_kind="recording")
    else:
        book.events(sid)
        book.model_spend([sid])
    t = time.perf_counter()
    book.record_destroying(sid, reason="closed", by="host:1")
    w1 = time.perf_counter() - t
    t = time.perf_counter()
    book.record_end(sid, status="ended", reason="closed", ended_at=time.time(), billable_seconds=1.0, cost_usd=0.0)
    w2 = time.perf_counter() - t
    if hasattr(book, "status_and_cost"):
        book.status_and_cost(sid)
    else:
        book.get(sid)
    book.close()
    out.put((time.perf_counter() - start, max(w1, w2)))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    from deskctl.ledger import SessionRecord, open_ledger
    totals, waits = [], []
    for _ in range(rounds):
        url = "sqlite://" + os.path.join(tempfile.mkdtemp(), "ledger.sqlite3")
        with open_ledger(url) as book:
            for i in range(n):
                book.record_intent(SessionRecord(session_id=f"dk-{i:010d}", provider="xvfb", platform="ubuntu",
                                                 geometry="320x240", owner="me", detached=True, status="intent",
                                                 intent_at=time.time()))
                book.record_create_sent(f"dk-{i:010d}", time.time())
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=one_down, args=(url, f"dk-{i:010d}", barrier, out)) for i in range(n)]
        for p in procs:
            p.start()
        got = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        totals.append(max(g[0] for g in got))
        waits.append(max(g[1] for g in got))
    print(f"{n} concurrent downs' ledger work: slowest process {statistics.median(totals)*1000:.1f} ms, "
          f"longest write transaction {statistics.median(waits)*1000:.1f} ms (medians over {rounds} rounds)")


if __name__ == "__main__":
    main()
