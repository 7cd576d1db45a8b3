"""The ledger, on both backends (SQLite file and a real PostgreSQL), including concurrent processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from deskctl.credentials import register_secret
from deskctl.errors import ConfigInvalid, InfrastructureError, NotFound
from deskctl.ledger import SCHEMA_VERSION, Ledger, SessionRecord, default_ledger_url, open_ledger


def _record(session_id: str, *, provider: str = "xvfb", at: float | None = None, **extra: object) -> SessionRecord:
    return SessionRecord(
        session_id=session_id, provider=provider, platform="ubuntu", geometry="1024x768", owner="host:1",
        detached=False, status="intent", intent_at=time.time() if at is None else at, **extra,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture
def ledger(ledger_url: str) -> Ledger:
    book = open_ledger(ledger_url)
    yield book  # type: ignore[misc]
    book.close()


def test_lifecycle_round_trip(ledger: Ledger) -> None:
    ledger.record_intent(_record("dk-a", at=100.0, spec={"provider": "xvfb"}, labels={"team": "qa"}, expires_at=900.0))
    ledger.record_create_sent("dk-a", 101.0)
    ledger.record_created("dk-a", {"provider": "xvfb", "resource_id": "r-1", "data": {"display": ":5"}})
    ledger.record_ready("dk-a", 102.5, 1024, 768)
    ledger.record_event("dk-a", "note", {"k": [1, 2]})
    ledger.record_end("dk-a", status="ended", reason="closed", ended_at=110.0, billable_seconds=9.0, cost_usd=0.0)

    got = ledger.get("dk-a")
    assert got is not None
    assert (got.status, got.intent_at, got.created_at, got.ready_at, got.ended_at, got.expires_at) == (
        "ended", 100.0, 101.0, 102.5, 110.0, 900.0,
    )  # fmt: skip
    assert got.handle == {"provider": "xvfb", "resource_id": "r-1", "data": {"display": ":5"}}
    assert (got.width, got.height, got.billable_seconds, got.cost_usd, got.reason) == (1024, 768, 9.0, 0.0, "closed")
    assert got.spec == {"provider": "xvfb"} and got.labels == {"team": "qa"}
    assert got.detached is False and not got.active
    kinds = [e.kind for e in ledger.events("dk-a")]
    assert kinds == ["intent", "create_sent", "created", "ready", "note", "ended"]
    assert ledger.events("dk-a")[4].data == {"k": [1, 2]}
    assert ledger.get("dk-missing") is None


def test_unknown_cost_stays_unknown(ledger: Ledger) -> None:
    ledger.record_intent(_record("dk-u"))
    ledger.record_end("dk-u", status="ended", reason="closed", ended_at=time.time(), billable_seconds=5.0,
                      cost_usd=None)  # fmt: skip
    got = ledger.get("dk-u")
    assert got is not None and got.cost_usd is None and got.billable_seconds == 5.0


def test_the_reaper_never_overwrites_an_end_recorded_meanwhile(ledger: Ledger) -> None:
    ledger.record_intent(_record("dk-race"))
    ledger.record_destroying("dk-race", reason="closed", by="host:2")
    assert ledger.get("dk-race").status == "destroying"  # type: ignore[union-attr]
    ledger.record_end("dk-race", status="ended", reason="closed", ended_at=10.0, billable_seconds=1.0, cost_usd=0.5)
    assert not ledger.record_end("dk-race", status="failed", reason="reaped", ended_at=11.0, billable_seconds=None,
                                 cost_usd=None, only_active=True)  # fmt: skip
    got = ledger.get("dk-race")
    assert got is not None and (got.status, got.reason, got.cost_usd) == ("ended", "closed", 0.5)
    assert [e.kind for e in ledger.events("dk-race")] == ["intent", "destroying", "ended"]
    assert ledger.events("dk-race")[1].data == {"reason": "closed", "by": "host:2"}


def test_a_destroy_written_ahead_never_reopens_an_end(ledger: Ledger) -> None:
    """The reaper may record a desktop it found gone as failed while its owner still lives: the owner's later
    write-ahead must not turn that finished row back into an active `destroying` one."""
    ledger.record_intent(_record("dk-over"))
    ledger.record_end("dk-over", status="failed", reason="the desktop is gone", ended_at=time.time(),
                      billable_seconds=1.0, cost_usd=0.0)
    ledger.record_destroying("dk-over", reason="closed", by="host:3")
    assert ledger.get("dk-over").status == "failed"  # type: ignore[union-attr]
    assert "destroying" not in [e.kind for e in ledger.events("dk-over")]


def test_update_of_unknown_session_is_not_found(ledger: Ledger) -> None:
    with pytest.raises(NotFound):
        ledger.record_create_sent("dk-nope", 1.0)
    with pytest.raises(NotFound):
        ledger.record_destroying("dk-nope", reason="closed", by="host:1")
    with pytest.raises(NotFound):
        ledger.record_end("dk-nope", status="ended", reason="closed", ended_at=1.0, billable_seconds=0.0,
                          cost_usd=0.0)
    assert ledger.events("dk-nope") == []  # nothing written for a session the ledger does not know


def test_action_counts_add_up(ledger: Ledger) -> None:
    ledger.record_intent(_record("dk-c"))
    ledger.add_actions("dk-c", {"click": 2, "key": 1})
    ledger.add_actions("dk-c", {"click": 3})
    ledger.add_actions("dk-c", {})
    got = ledger.get("dk-c")
    assert got is not None and got.action_counts == {"click": 5, "key": 1}
    assert [s.action_counts for s in ledger.sessions()] == [{"click": 5, "key": 1}]


def test_session_filters(ledger: Ledger) -> None:
    ledger.record_intent(_record("dk-old", at=1000.0))
    ledger.record_end("dk-old", status="ended", reason="closed", ended_at=1100.0, billable_seconds=100.0,
                      cost_usd=0.0)  # fmt: skip
    ledger.record_intent(_record("dk-run", at=2000.0, provider="docker"))
    ledger.record_intent(_record("dk-fail", at=3000.0))
    ledger.record_end("dk-fail", status="failed", reason="readiness.timeout", ended_at=3001.0, billable_seconds=1.0,
                      cost_usd=0.0)  # fmt: skip
    ledger.record_intent(_record("dk-leak", at=4000.0))
    ledger.record_end("dk-leak", status="leaked", reason="cleanup.incomplete", ended_at=4001.0,
                      billable_seconds=1.0, cost_usd=0.0)  # fmt: skip

    def ids(**kw: object) -> list[str]:
        return [s.session_id for s in ledger.sessions(**kw)]  # type: ignore[arg-type]

    assert ids() == ["dk-old", "dk-run", "dk-fail", "dk-leak"]
    assert ids(active=True) == ["dk-run", "dk-leak"]  # a leak may still exist and bill
    assert ids(active=False) == ["dk-old", "dk-fail"]
    assert ids(provider="docker") == ["dk-run"]
    assert ids(since=1500.0) == ["dk-run", "dk-fail", "dk-leak"]
    assert ids(since=1050.0, active=False) == ["dk-old", "dk-fail"]


def test_record_status(ledger: Ledger) -> None:
    ledger.record_intent(_record("dk-s"))
    ledger.record_status("dk-s", "leaked", reason="ttl")
    got = ledger.get("dk-s")
    assert got is not None and got.status == "leaked" and got.reason == "ttl" and got.active
    with pytest.raises(ValueError):
        ledger.record_status("dk-s", "bogus")
    with pytest.raises(ValueError):  # the dead status nothing ever wrote is no status any more
        ledger.record_status("dk-s", "ending")
    with pytest.raises(ValueError):  # a move outside deskctl.lifecycle.TRANSITIONS
        ledger.record_status("dk-s", "ready")
    ledger.record_status("dk-s", "failed", reason="gone")
    with pytest.raises(ValueError):  # an end is never reopened
        ledger.record_status("dk-s", "destroying")
    got = ledger.get("dk-s")
    assert got is not None and (got.status, got.reason) == ("failed", "gone")


def test_secrets_never_reach_the_ledger(ledger: Ledger) -> None:
    secret = "sk-live-" + "9f8e7d6c5b4a"
    register_secret(secret)
    ledger.record_intent(_record("dk-x", spec={"provider_options": {"note": f"uses {secret}"}}))
    ledger.record_created("dk-x", {"resource_id": "r", "data": {"api_key": "abc123456"}})
    ledger.record_event("dk-x", "error", {"message": f"401 for {secret}"})
    ledger.record_end("dk-x", status="failed", reason=f"auth {secret}", ended_at=time.time(), billable_seconds=0.0,
                      cost_usd=0.0)  # fmt: skip
    got = ledger.get("dk-x")
    assert got is not None
    everything = repr(got) + repr(ledger.events("dk-x"))
    assert secret not in everything and "abc123456" not in everything
    assert got.reason == "auth ***"


def test_schema_is_versioned(ledger: Ledger, ledger_url: str) -> None:
    assert ledger.schema_version() == SCHEMA_VERSION
    again = open_ledger(ledger_url)  # reopening migrates nothing and loses nothing
    try:
        ledger.record_intent(_record("dk-v"))
        assert again.schema_version() == SCHEMA_VERSION and again.get("dk-v") is not None
    finally:
        again.close()


def test_migrates_an_old_schema_forward(ledger_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import deskctl.ledger._schema as ledger_module  # where the migrations read it

    monkeypatch.setattr(ledger_module, "SCHEMA_VERSION", 1)
    old = open_ledger(ledger_url)
    assert old.schema_version() == 1
    old.record_intent(_record("dk-old-schema"))
    with pytest.raises(InfrastructureError):  # version 1 has no budgets table
        old.budgets()
    old.close()
    monkeypatch.undo()

    new = open_ledger(ledger_url)
    try:
        assert new.schema_version() == SCHEMA_VERSION
        assert new.get("dk-old-schema") is not None
        assert new.budgets() == []
    finally:
        new.close()


def test_a_schema_3_ledger_gets_the_indexes_and_keeps_its_records(ledger_url: str, monkeypatch: pytest.MonkeyPatch,
                                                                   ) -> None:  # fmt: skip
    import deskctl.ledger._schema as ledger_module  # where the migrations read it
    from deskctl.budget import status

    monkeypatch.setattr(ledger_module, "SCHEMA_VERSION", 3)  # a ledger written by the previous release
    old = open_ledger(ledger_url)
    old.set_budget("ci", max_usd=1.0, window_seconds=86400)
    old.record_intent(_record("dk-three", at=time.time() - 60))
    old.record_create_sent("dk-three", time.time() - 59)
    old.record_end("dk-three", status="ended", reason="closed", ended_at=time.time(), billable_seconds=59.0,
                   cost_usd=0.25)  # fmt: skip
    with old.transaction() as tx:
        tx.run("INSERT INTO reservations (id, budget, session_id, amount_usd, unknown, created_at, expires_at, "
               "status, settled_at, cost_usd) VALUES ('rsv-3', 'ci', 'dk-three', 0.5, 0, ?, ?, 'settled', ?, 0.25)",
               (time.time() - 60, time.time() + 600, time.time()))  # fmt: skip
    old.close()  # (its budget status is read once migrated: this deskctl's budget reads the later tables too)
    monkeypatch.undo()

    new = open_ledger(ledger_url)
    try:
        assert new.schema_version() == SCHEMA_VERSION >= 5
        if new.backend == "sqlite":
            names = {r[0] for r in new._read("SELECT name FROM sqlite_master WHERE type = 'index'")}
        else:
            names = {r[0] for r in new._read("SELECT indexname FROM pg_indexes")}
        assert {"reservations_budget_status", "sessions_ended"} <= names
        after = status(new, "ci")
        assert (after.spent_usd, after.ended_sessions) == (0.25, 1)
        assert new.ended_totals(by="provider")["xvfb"].cost_usd == 0.25
    finally:
        new.close()


def test_refuses_a_newer_schema(ledger_url: str) -> None:
    book = open_ledger(ledger_url)
    with book.transaction() as tx:
        tx.run("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    book.close()
    with pytest.raises(ConfigInvalid, match="newer than this deskctl"):
        open_ledger(ledger_url)


# -- several processes at once ---------------------------------------------------------------------------

_WORKER = r"""
import sys, time
from deskctl.ledger import SessionRecord, open_ledger
url, worker, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
book = open_ledger(url)
for i in range(n):
    sid = f"dk-w{worker}-{i}"
    book.record_intent(SessionRecord(sid, "xvfb", "ubuntu", "1024x768", f"h:{worker}", False, "intent", time.time()))
    book.record_create_sent(sid, time.time())
    book.add_actions("dk-shared", {"click": 1, f"w{worker}": 1})
    book.record_end(sid, status="ended", reason="closed", ended_at=time.time(), billable_seconds=1.0, cost_usd=0.0)
book.close()
"""


def test_concurrent_processes_lose_nothing(ledger_url: str) -> None:
    workers, per_worker = 6, 20
    book = open_ledger(ledger_url)
    book.record_intent(_record("dk-shared"))
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, ledger_url, str(w), str(per_worker)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(workers)
    ]
    try:
        outcomes = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * workers, [err for _, err in outcomes]
    try:
        ended = [s for s in book.sessions() if s.session_id.startswith("dk-w")]
        assert len(ended) == workers * per_worker
        assert all(s.status == "ended" and s.created_at is not None for s in ended)
        shared = book.get("dk-shared")
        assert shared is not None
        assert shared.action_counts["click"] == workers * per_worker
        assert all(shared.action_counts[f"w{w}"] == per_worker for w in range(workers))
        assert all(len(book.events(s.session_id)) == 3 for s in ended)
        if book.backend == "sqlite":
            with book.transaction(readonly=True) as tx:
                assert tx.run("PRAGMA integrity_check") == [("ok",)]
                assert tx.run("PRAGMA journal_mode") == [("wal",)]
    finally:
        book.close()


def test_concurrent_first_open_migrates_once(ledger_url: str) -> None:
    script = "import sys; from deskctl.ledger import open_ledger; b = open_ledger(sys.argv[1]); " \
             "print(b.schema_version()); b.close()"  # fmt: skip
    procs = [subprocess.Popen([sys.executable, "-c", script, ledger_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]  # fmt: skip
    outcomes = [p.communicate(timeout=120) for p in procs]
    assert [out.strip() for out, _ in outcomes] == [str(SCHEMA_VERSION)] * 6, [err for _, err in outcomes]


def test_threads_use_their_own_connections(ledger: Ledger) -> None:
    import threading

    ledger.record_intent(_record("dk-t"))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(25):
                ledger.add_actions("dk-t", {"key": 1})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = ledger.get("dk-t")
    assert got is not None and got.action_counts == {"key": 100}


@pytest.mark.postgres
def test_postgres_reconnects_after_the_server_drops_the_connection(pg_url: str) -> None:
    import psycopg

    book = open_ledger(pg_url)
    try:
        book.record_intent(_record("dk-before"))
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")  # fmt: skip
        with pytest.raises(InfrastructureError) as info:
            book.get("dk-before")
        assert info.value.code == "ledger.unavailable"
        assert book.get("dk-before") is not None  # a fresh connection
    finally:
        book.close()


# -- URLs ------------------------------------------------------------------------------------------------


def test_default_url_is_a_file_under_deskctl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path))
    monkeypatch.delenv("DESKCTL_LEDGER_URL", raising=False)
    assert default_ledger_url() == f"sqlite://{tmp_path}/ledger.sqlite3"
    book = open_ledger()
    book.close()
    assert (tmp_path / "ledger.sqlite3").exists()
    other = tmp_path / "sub" / "other.db"
    monkeypatch.setenv("DESKCTL_LEDGER_URL", f"sqlite://{other}")
    open_ledger().close()
    assert other.exists()


def test_sqlite_file_is_private_to_its_user(tmp_path: Path) -> None:
    import stat

    with open_ledger(f"sqlite://{tmp_path / 'private.sqlite3'}") as book:
        book.record_intent(_record("dk-p"))
        for name in ("private.sqlite3", "private.sqlite3-wal"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


def test_bare_path_and_bad_urls(tmp_path: Path) -> None:
    book = open_ledger(str(tmp_path / "bare.sqlite3"))
    assert book.backend == "sqlite"
    book.close()
    for bad in ("mysql://x/y", "sqlite://relative", "sqlite:///", ""):
        with pytest.raises(ConfigInvalid):
            open_ledger(bad)


def test_unreachable_postgres_is_an_infrastructure_error_without_the_password() -> None:
    with socket_closed_port() as port, pytest.raises(InfrastructureError) as info:
        open_ledger(f"postgres://deskctl:hunter2-pass@127.0.0.1:{port}/nope")
    assert info.value.code == "ledger.unavailable" and info.value.exit_code == 20
    assert "hunter2-pass" not in str(info.value) and "hunter2-pass" not in repr(info.value.to_dict())


class socket_closed_port:
    """A loopback port that is bound but not listening, so connections to it are refused at once."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_nothing_is_scrubbed_while_the_write_lock_is_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every writer of a SQLite ledger (16 `deskctl down` processes at once) waits while one holds its write lock,
    and SQLite's busy handler sleeps 1, 2, 5 ... 100 ms between its tries: an event's data is scrubbed and made
    JSON (a process's first scrub compiles its patterns) before the write transaction begins. A second connection
    that may take no lock (busy timeout 0) tries the write lock at every scrub; the secrets are scrubbed all the
    same."""
    import sqlite3

    from deskctl import _redact
    from deskctl.ledger import _queries, _schema

    path = tmp_path / "ledger.sqlite3"
    book = open_ledger(f"sqlite://{path}")
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    held: list[str] = []

    def watching(text: str | None) -> str:
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError:  # database is locked: a write transaction of the ledger is open
            held.append(str(text))
        return _redact.redact(text)

    monkeypatch.setattr(_queries, "redact", watching)
    monkeypatch.setattr(_schema, "redact", watching)
    secret = "hunter2-" + "x" * 12
    register_secret(secret)
    try:
        book.record_intent(_record("dk-s"))
        book.record_create_sent("dk-s", time.time())
        book.record_created("dk-s", {"provider": "xvfb", "resource_id": "r-1", "data": {"display": ":5"}})
        book.record_ready("dk-s", time.time(), 1024, 768)
        book.record_event("dk-s", "note", {"said": f"token={secret}"})
        book.record_status("dk-s", "leaked", reason=f"lost with {secret}")
        book.record_destroying("dk-s", reason=f"closed by {secret}", by="host:1")
        book.record_end("dk-s", status="ended", reason=f"done {secret}", ended_at=time.time(), billable_seconds=1.0,
                        cost_usd=0.0)
        events = book.events("dk-s")
        record = book.get("dk-s")
    finally:
        probe.close()
        book.close()
    assert held == []
    assert record is not None and record.status == "ended" and record.reason is not None
    assert [e.kind for e in events] == ["intent", "create_sent", "created", "ready", "note", "leaked", "destroying",
                                        "ended"]
    assert secret not in repr(events) and secret not in record.reason


@pytest.mark.parametrize("url", ["sqlite:///tmp/x/ledger.sqlite3", "/var/lib/deskctl/ledger.sqlite3",
                                 "postgresql://user:pw@db.example:5433/deskctl?host=/run/pg&sslmode=require",
                                 "postgres://db/deskctl"])
def test_ledger_id_is_sha256_of_the_ledger_in_a_process_without_hashlib(url: str) -> None:
    """The deskctl.ledger label every desktop carries (the reaper finds a ledger's desktops by it) is the first 16
    hex digits of SHA-256 of the ledger's file or server: computed without importing hashlib (its OpenSSL bindings
    were a sixteenth of a `deskctl up`), and equal to hashlib's, checked here in a fresh interpreter."""
    import hashlib

    from deskctl.ledger import ledger_id
    from deskctl.ledger._open import check_ledger_url

    backend, target = check_ledger_url(url)
    if backend == "postgresql":
        from urllib.parse import urlsplit

        parts = urlsplit(target)
        query = "&".join(sorted(q for q in parts.query.split("&") if q.startswith(("host=", "port="))))
        target = f"postgresql://{parts.hostname or ''}:{parts.port or ''}{parts.path}?{query}"
    else:
        target = "sqlite://" + target
    expected = hashlib.sha256(target.encode()).hexdigest()[:16]
    assert ledger_id(url) == expected
    probe = ("import sys; from deskctl.ledger import ledger_id; print(ledger_id(sys.argv[1]), "
             "'hashlib' in sys.modules, '_hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, check=True).stdout
    assert out.split() == [expected, "False", "False"]
