"""A `deskctl down` killed (SIGKILL) after its destroy and before its end record, on the real PostgreSQL ledger.

The kill lands at a point the test observes instead of guesses: a trigger that the test adds to its own database
makes the end record wait for an advisory lock the test holds, so that the `down` process is seen waiting in
``pg_stat_activity`` with its desktop already destroyed, and is killed there. Nothing in deskctl knows about it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from deskctl.ledger import open_ledger
from deskctl.providers.base import RemoteHandle
from deskctl.providers.xvfb import XvfbProvider

pytestmark = pytest.mark.postgres

_HOLD = 4242  # the advisory lock key the trigger waits on


def _deskctl(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "deskctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **env})  # fmt: skip


def _wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_down_killed_between_destroy_and_end_leaves_destroying_and_reap_finishes(
        pg_url: str, request: pytest.FixtureRequest) -> None:
    env = {"DESKCTL_LEDGER_URL": pg_url}
    up = _deskctl("up", "--geometry", "320x240", "--ttl", "10m", env=env)
    out, err = up.communicate(timeout=120)
    assert up.returncode == 0, err
    sid = out.strip()
    with open_ledger(pg_url) as book:
        record = book.get(sid)
    assert record is not None and record.status == "ready" and record.handle is not None
    handle = RemoteHandle.from_dict(record.handle)
    request.addfinalizer(lambda: XvfbProvider().destroy(handle))  # idempotent: nothing left if an assert fails

    with psycopg.connect(pg_url, autocommit=True) as holder:
        holder.execute(
            "CREATE FUNCTION test_hold_end() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"PERFORM pg_advisory_lock({_HOLD}); PERFORM pg_advisory_unlock({_HOLD}); RETURN NEW; END $$"
        )
        holder.execute(
            "CREATE TRIGGER test_hold_end BEFORE UPDATE ON sessions FOR EACH ROW "
            "WHEN (NEW.status IN ('ended', 'failed', 'leaked')) EXECUTE FUNCTION test_hold_end()"
        )
        holder.execute("SELECT pg_advisory_lock(%s)", (_HOLD,))
        down = _deskctl("down", sid, env=env)
        try:
            def waiting_pid() -> int | None:
                rows = holder.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' "
                    "AND datname = current_database()"
                ).fetchall()
                return int(rows[0][0]) if rows else None

            _wait_for(lambda: waiting_pid() is not None or down.poll() is not None, "the end record to wait")
            assert down.poll() is None, down.communicate()
            backend = waiting_pid()
            assert not XvfbProvider().is_alive(handle)  # the destroy is done, its end is not recorded
            down.send_signal(signal.SIGKILL)
            assert down.wait(60) == -signal.SIGKILL
        finally:
            if down.poll() is None:
                down.kill()
                down.wait()
            holder.execute("SELECT pg_advisory_unlock(%s)", (_HOLD,))
        # the server rolls back what the dead client never committed
        _wait_for(lambda: not holder.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                             (backend,)).fetchall(), "the killed client's backend to end")  # fmt: skip
        holder.execute("DROP TRIGGER test_hold_end ON sessions")

    with open_ledger(pg_url) as book:
        record = book.get(sid)
        assert record is not None and record.status == "destroying"  # not `ready`: the ledger never lies
        assert [e.kind for e in book.events(sid)][-1] == "destroying"

    reap = _deskctl("reap", "--provider", "xvfb", "--json", env=env)
    out, err = reap.communicate(timeout=120)
    assert reap.returncode == 0, err
    assert [(r["session_id"], r["action"], r["reason"]) for r in json.loads(out)["reaped"]] == [
        (sid, "destroyed", "an earlier destroy was not recorded")
    ]
    with open_ledger(pg_url) as book:
        record = book.get(sid)
    assert record is not None and record.status == "ended"
    assert record.reason == "reaped: an earlier destroy was not recorded"
    assert record.cost_usd == 0.0 and record.billable_seconds is not None
