"""deskctl.aio_owner._Worker: one desktop's calls on one thread, in order; a cancel before a call starts skips it,
one after leaves it to finish with its answer dropped; after shutdown the queued calls still run and new ones
are refused; an abandoned worker does not hold the interpreter's exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest

from deskctl.aio_owner import _Worker


def test_calls_run_in_order_on_one_thread_and_answer_or_raise() -> None:
    async def main() -> None:
        worker = _Worker("w")
        threads: list[int] = []

        def call(n: int) -> int:
            threads.append(threading.get_ident())
            return n * 2

        def fail() -> None:
            raise KeyError("no such thing")

        results = await asyncio.gather(*(worker.submit(call, n) for n in range(50)))
        assert results == [n * 2 for n in range(50)]
        assert len(set(threads)) == 1 and threads[0] != threading.get_ident()
        with pytest.raises(KeyError):
            await worker.submit(fail)
        worker.shutdown()

    asyncio.run(main())


def test_a_cancel_before_the_start_skips_the_call_and_after_it_drops_the_answer() -> None:
    async def main() -> None:
        worker = _Worker("w")
        started, release = threading.Event(), threading.Event()
        ran: list[str] = []

        def slow() -> str:
            started.set()
            release.wait(10)
            ran.append("slow")
            return "slow"

        def queued() -> str:
            ran.append("queued")
            return "queued"

        running = worker.submit(slow)
        waiting = worker.submit(queued)
        await asyncio.to_thread(started.wait, 10)
        running.cancel()  # it runs already: it finishes, nobody gets its answer
        waiting.cancel()  # it has not started: skipped
        release.set()
        last = await worker.submit(lambda: "after")
        assert last == "after" and ran == ["slow"]
        assert running.cancelled() and waiting.cancelled()
        worker.shutdown()

    asyncio.run(main())


def test_after_shutdown_the_queued_calls_run_and_new_ones_are_refused() -> None:
    async def main() -> None:
        worker = _Worker("w")
        gate = threading.Event()
        first = worker.submit(lambda: gate.wait(10))
        second = worker.submit(lambda: "queued before the shutdown")
        worker.shutdown()
        with pytest.raises(RuntimeError):
            worker.submit(lambda: "too late")
        gate.set()
        assert await first is True
        assert await second == "queued before the shutdown"

    asyncio.run(main())


def test_an_abandoned_worker_does_not_hold_the_exit() -> None:
    code = ("import asyncio\nfrom deskctl.aio_owner import _Worker\n"
            "async def main():\n    w = _Worker('w')\n    print(await w.submit(lambda: 'answered'))\n"
            "asyncio.run(main())\n")
    # an exit that waited for the idle worker thread would never come: the timeout would fire
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "answered"
