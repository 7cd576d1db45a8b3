"""deskctl._threads: threading's locks and an Event without importing threading until a thread waits."""

from __future__ import annotations

import subprocess
import sys
import threading

from deskctl import _threads


def test_the_locks_are_threadings_own() -> None:
    assert type(_threads.Lock()) is type(threading.Lock())
    assert type(_threads.RLock()) is type(threading.RLock())
    assert _threads.local is threading.local
    assert _threads.get_ident() == threading.get_ident()


def test_event_without_a_waiter_is_a_flag() -> None:
    event = _threads.Event()
    assert not event.is_set()
    event.set()
    assert event.is_set()
    event.clear()
    assert not event.is_set()
    assert event._real is None  # nobody waited: no threading.Event was made


def test_event_wait_sees_a_set_made_before_the_wait() -> None:
    event = _threads.Event()
    event.set()
    assert event.wait(0) is True
    assert event._real is not None and event._real.is_set()
    event.clear()
    assert event.wait(0) is False and not event.is_set()


def test_event_wakes_a_thread_that_waits_for_it() -> None:
    event = _threads.Event()
    woke: list[bool] = []
    waiting = threading.Event()

    def waiter() -> None:
        waiting.set()
        woke.append(event.wait(60))

    thread = _threads.start(waiter, name="waiter")
    assert thread.daemon and thread.name == "waiter"
    waiting.wait(60)
    while event._real is None:  # the waiter made the real event
        threading.Event().wait(0.001)
    event.set()
    thread.join(60)
    assert woke == [True]


def test_event_set_from_many_threads_while_one_converts_it() -> None:
    """A set racing the first wait is never lost: either the flag is copied into the real event, or the set goes
    to the real one."""
    for _ in range(200):
        event = _threads.Event()
        setter = threading.Thread(target=event.set)
        setter.start()
        result = event.wait(60)
        setter.join()
        assert result is True


def test_importing_it_loads_no_threading() -> None:
    code = "import sys, deskctl._threads as t; e = t.Event(); e.set(); e.clear(); print('threading' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
