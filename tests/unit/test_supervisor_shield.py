"""supervisor.shield_signals: a SIGTERM or SIGINT that arrives while a destroy runs in the main thread is held until
the destroy is over, then raised (``Interrupted``); a nested shield, or one in another thread, does nothing. Real
signals, sent to this very thread (delivered before ``pthread_kill`` returns), through supervisor.on_signal."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from deskctl import supervisor
from deskctl.errors import Interrupted


@pytest.fixture
def handled() -> Iterator[None]:
    """supervisor.on_signal as the SIGTERM handler (as install_signal_handlers sets it), the previous one after."""
    previous = signal.signal(signal.SIGTERM, supervisor.on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        supervisor._deferred_signals.clear()


def _sigterm_here() -> None:
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


def test_without_a_shield_the_signal_interrupts_at_once(handled: None) -> None:
    reached = False
    with pytest.raises(Interrupted) as caught:
        _sigterm_here()
        reached = True
    assert not reached and caught.value.signum == signal.SIGTERM


def test_a_signal_during_a_shielded_destroy_is_raised_once_it_is_over(handled: None) -> None:
    steps: list[str] = []
    with pytest.raises(Interrupted) as caught, supervisor.shield_signals():
        _sigterm_here()
        steps.append("destroyed")  # the destroy goes on to its end
    assert steps == ["destroyed"]
    assert caught.value.signum == signal.SIGTERM and "SIGTERM" in caught.value.message
    assert not getattr(supervisor._shielded, "active", False) and supervisor._deferred_signals == []


def test_the_held_signal_outranks_the_error_the_destroy_raised(handled: None) -> None:
    with pytest.raises(Interrupted) as caught, supervisor.shield_signals():
        _sigterm_here()
        raise OSError("the destroy failed")
    assert isinstance(caught.value.__context__, OSError)


def test_a_nested_shield_leaves_the_signal_to_the_outer_one(handled: None) -> None:
    steps: list[str] = []
    with pytest.raises(Interrupted):
        with supervisor.shield_signals():
            with supervisor.shield_signals():
                _sigterm_here()
            steps.append("inner over")  # the inner one raised nothing
            assert getattr(supervisor._shielded, "active", False)
        steps.append("not reached")
    assert steps == ["inner over"]


def test_with_nothing_held_the_shield_raises_nothing(handled: None) -> None:
    with supervisor.shield_signals():
        assert supervisor._shielded.active is True
    assert supervisor._shielded.active is False


def test_in_another_thread_the_shield_does_nothing() -> None:
    seen: list[bool] = []

    def run() -> None:
        with supervisor.shield_signals():
            seen.append(bool(getattr(supervisor._shielded, "active", False)))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [False]
