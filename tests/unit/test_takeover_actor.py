"""``deskctl.episodes.takeover.acting_as``: who acts (``ACTOR``, a context variable) for a ``with`` block, put back
at its end whatever happened in it; what the view wraps a person's input in, so each recorded step says who acted
(the whole path through the view and a real browser: tests/episodes/test_takeover.py)."""

from __future__ import annotations

import threading

import pytest

from deskctl.episodes.takeover import ACTOR, acting_as, current_actor


def test_acting_as_sets_the_actor_for_its_block_nested_and_after_an_exception() -> None:
    assert current_actor() == "agent"
    with acting_as("human"):
        assert current_actor() == "human"
        with acting_as("agent"):
            assert current_actor() == "agent"
        assert current_actor() == "human"
        with pytest.raises(ValueError), acting_as("agent"):
            raise ValueError("inside")
        assert current_actor() == "human"
    assert current_actor() == "agent"


def test_the_actor_of_one_thread_is_not_anothers() -> None:
    seen: list[str] = []
    inside, done = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait(30)
        seen.append(ACTOR.get())
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with acting_as("human"):
        inside.set()
        assert done.wait(30)
    thread.join(30)
    assert seen == ["agent"]
