"""Chaos: every surface of deskctl writes to one ledger at once, a process is SIGKILLed at random points, and
afterwards every write that was acknowledged is in the ledger, the file is sound, and no desktop is left.

For ``DESKCTL_CHAOS_SECONDS`` (default 30) per backend (SQLite, then PostgreSQL), all at once, on cheap Xvfb
desktops:

* ``deskctl view --control`` on a detached desktop, fed click events over HTTP (acknowledged: a 204);
* ``deskctl mcp`` (stdio) driven by the official ``mcp`` client library (acknowledged: a click without error);
* an asyncio program with four desktops (:mod:`deskctl.aio`), clicking on all of them;
* a library process with one desktop, two threads clicking and two threads writing events to the ledger;
* ``deskctl do ID click`` in a loop on another detached desktop (acknowledged: exit 0), and ``deskctl ls``,
  ``cost`` and ``reap`` in a loop (each must exit 0);
* a process that opens a desktop and clicks, SIGKILLed at a random moment (during its create or after), and a
  process writing events to the ledger as fast as it can, SIGKILLed at a random moment (often inside a
  transaction), in turn, again and again (``DESKCTL_CHAOS_SEED`` repeats the random draws of a run).

Meanwhile every process's open descriptors are watched (SQLite): none may point at a ``(deleted)`` ledger file,
the mark of a WAL deleted under a live process. Afterwards: each surface's acknowledged count equals the ledger's
(action counts per session, event rows), ``PRAGMA integrity_check`` is ``ok`` and ``deskctl ledger check``
passes, ``deskctl reap`` leaves no session active, and no Xvfb of this test is running.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl_process as deskctl
from _procs import xvfb_servers_under
from deskctl.ledger import SessionRecord, open_ledger
from deskctl.session import owner_id

DURATION = float(os.environ.get("DESKCTL_CHAOS_SECONDS") or 30)
PROGRAMS = Path(__file__).with_name("_programs.py")

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(DURATION * 2 + 600)]


@dataclass
class Tally:
    """What the surfaces acknowledged, and everything that went wrong on the way."""

    view_clicks: int = 0
    do_clicks: int = 0
    mcp_clicks: int = 0
    reads: int = 0
    victims: int = 0
    #: (writer, i) of every event a killed writer acknowledged, and how many writers were killed
    written: set[tuple[int, int]] = field(default_factory=set)
    writers: int = 0
    problems: list[str] = field(default_factory=list)
    deleted_ledger_fds: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def problem(self, what: str) -> None:
        with self.lock:
            if len(self.problems) < 50:
                self.problems.append(what)


def _loop(stop: threading.Event, tally: Tally, name: str, body: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            while not stop.is_set():
                body()
        except Exception as exc:  # a driver that breaks is a finding, not a hang
            tally.problem(f"{name} stopped: {exc!r}")

    thread = threading.Thread(target=run, name=f"chaos-{name}", daemon=True)
    thread.start()
    return thread


def _up(label: str) -> str:
    proc = deskctl("up", "--geometry", "320x240", "--ttl", "30m", "--label", f"chaos={label}", check=True)
    return proc.stdout.strip()


def _start_view(session_id: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "deskctl", "view", session_id, "--control", "--fps", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    url = proc.stdout.readline().strip() if ready else ""
    if not url:
        proc.kill()
        raise AssertionError(f"deskctl view printed no URL: {proc.communicate()[1]}")
    return proc, url


def _post_click(url: str, n: int) -> int:
    base, token = url.split("/?", 1)[0], url.split("token=", 1)[1]
    body = json.dumps({"type": "click", "x": n % 300, "y": n % 200, "w": 320, "h": 240}).encode()
    request = urllib.request.Request(f"{base}/input?token={token}", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _mcp_driver(stop: threading.Event, tally: Tally) -> threading.Thread:
    import anyio
    import mcp

    async def main() -> None:
        params = mcp.StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                           args=["-m", "deskctl", "mcp", "--geometry", "320x240", "--label",
                                                 "chaos=mcp"])  # fmt: skip
        async with mcp.Client(params, read_timeout_seconds=120) as client:
            n = 0
            while not stop.is_set():
                result = await client.call_tool("click", {"x": 1 + n % 300, "y": 1 + n % 200})
                n += 1
                if result.is_error:
                    tally.problem(f"mcp click: {result.content[0].text if result.content else result}")
                else:
                    with tally.lock:
                        tally.mcp_clicks += 1

    def run() -> None:
        try:
            anyio.run(main)
        except Exception as exc:
            tally.problem(f"mcp driver: {exc!r}")

    thread = threading.Thread(target=run, name="chaos-mcp", daemon=True)
    thread.start()
    return thread


def _ledger_paths(url: str) -> tuple[str, ...]:
    path = url.removeprefix("sqlite://")
    return (path, path + "-wal", path + "-shm")


def _deleted_ledger_fds(paths: tuple[str, ...]) -> set[str]:
    """``pid: target`` for every descriptor of any process that points at a deleted ledger file."""
    found: set[str] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.endswith(" (deleted)") and target.removesuffix(" (deleted)") in paths:
                found.add(f"{entry.name}: {target}")
    return found


def _kill_leftovers(home: Path) -> None:
    """After a failed run: the processes this test's desktops left (found by its DESKCTL_HOME in their command
    line), so a failure never leaves Xvfb servers and their watchers behind."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(home).encode() in argv:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


def _finish(proc: subprocess.Popen[str], what: str, timeout: float = 300) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{what} did not finish: {err[-3000:]}") from None
    assert proc.returncode == 0, f"{what} exited {proc.returncode}: {err[-3000:]}"
    return out


def test_every_acknowledged_write_survives_every_surface_at_once(chaos_ledger_url: str, deskctl_home: Path,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    try:
        _chaos(chaos_ledger_url, deskctl_home, tmp_path)
    except BaseException:
        _kill_leftovers(deskctl_home)
        raise


def _chaos(chaos_ledger_url: str, deskctl_home: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    backend = "postgresql" if chaos_ledger_url.startswith("postgresql") else "sqlite"
    seed = int(os.environ.get("DESKCTL_CHAOS_SEED") or time.time_ns() % 1_000_000)
    chance = random.Random(seed)
    stop = threading.Event()
    stopfile = tmp_path / "stop"
    tally = Tally()
    view_desk, cli_desk = _up("view"), _up("cli")
    view, url = _start_view(view_desk)
    programs = {kind: subprocess.Popen([sys.executable, str(PROGRAMS), kind, str(stopfile)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
                for kind in ("aio", "threads")}  # fmt: skip
    clicks = iter(range(10**9))

    def feed_view() -> None:
        status = _post_click(url, next(clicks))
        if status == 204:
            with tally.lock:
                tally.view_clicks += 1
        else:
            tally.problem(f"view input answered {status}")

    def cli_do() -> None:
        proc = deskctl("do", cli_desk, "click", str(chance.randrange(320)), str(chance.randrange(240)))
        if proc.returncode == 0:
            with tally.lock:
                tally.do_clicks += 1
        else:
            tally.problem(f"deskctl do exited {proc.returncode}: {proc.stderr.strip()[-500:]}")

    reads = iter(__import__("itertools").cycle((["ls", "--json"], ["cost", "--json"], ["reap", "--json"])))

    def cli_read() -> None:
        args = next(reads)
        proc = deskctl(*args)
        if proc.returncode == 0:
            with tally.lock:
                tally.reads += 1
        else:
            tally.problem(f"deskctl {args[0]} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")

    writer_session = "dk-chaos-writer"
    with open_ledger(chaos_ledger_url) as book:
        book.record_intent(SessionRecord(writer_session, "xvfb", "ubuntu", "1x1", owner_id(), False, "intent",
                                         time.time(), labels={"chaos": "writer"}))  # fmt: skip
    kills = iter(__import__("itertools").count())

    def victim() -> None:
        n = next(kills)
        if n % 2:
            _kill_a_writer(n)
            return
        proc = subprocess.Popen([sys.executable, str(PROGRAMS), "victim"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        stop.wait(chance.uniform(0.2, 4.0))  # during its preflight, create, readiness or clicks
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with tally.lock:
            tally.victims += 1

    def _kill_a_writer(n: int) -> None:
        proc = subprocess.Popen([sys.executable, str(PROGRAMS), "writer", writer_session, str(n)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        assert proc.stdout is not None
        select.select([proc.stdout], [], [], 120)  # its first write, then a random moment
        stop.wait(chance.uniform(0.05, 1.5))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        # a line cut short by the kill is not an acknowledgement (its event may or may not be in)
        complete = out.split("\n")[:-1]
        acknowledged = {(int(a), int(b)) for a, b in (line.split() for line in complete)}
        with tally.lock:
            tally.written |= acknowledged
            tally.writers += 1

    paths = _ledger_paths(chaos_ledger_url)

    def watch_fds() -> None:
        if backend == "sqlite":
            hits = _deleted_ledger_fds(paths)
            with tally.lock:
                tally.deleted_ledger_fds |= hits
        stop.wait(0.25)

    threads = [_loop(stop, tally, "view", feed_view), _loop(stop, tally, "do", cli_do),
               _loop(stop, tally, "read", cli_read), _loop(stop, tally, "victim", victim),
               _loop(stop, tally, "fds", watch_fds), _mcp_driver(stop, tally)]  # fmt: skip
    try:
        stop.wait(DURATION)
    finally:
        stopfile.touch()
        stop.set()
        for thread in threads:
            thread.join(timeout=300)
    if backend == "sqlite":
        tally.deleted_ledger_fds |= _deleted_ledger_fds(paths)
    view.send_signal(signal.SIGINT)
    _finish(view, "deskctl view")
    outcomes = {kind: json.loads(_finish(proc, f"the {kind} program").strip().splitlines()[-1])
                for kind, proc in programs.items()}  # fmt: skip
    down = deskctl("down", view_desk, cli_desk)
    assert down.returncode == 0, f"{down.stderr}; problems on the way: {tally.problems}"
    reaped = deskctl("reap", "--json")
    assert reaped.returncode == 0, reaped.stderr

    with open_ledger(chaos_ledger_url) as book:
        records = book.sessions()
        by_label: dict[str, list[Any]] = {}
        for record in records:
            by_label.setdefault(record.labels.get("chaos", "?"), []).append(record)
        ledger_counts = {
            "view": book.get(view_desk).action_counts.get("click", 0),  # type: ignore[union-attr]
            "do": book.get(cli_desk).action_counts.get("click", 0),  # type: ignore[union-attr]
            "mcp": sum(r.action_counts.get("click", 0) for r in by_label.get("mcp", [])),
            "aio": {r.session_id: r.action_counts.get("click", 0) for r in by_label.get("aio", [])},
            "threads.clicks": book.get(outcomes["threads"]["id"]).action_counts.get("click", 0),  # type: ignore[union-attr]
            "threads.events": sum(e.kind == "chaos" for e in book.events(outcomes["threads"]["id"])),
        }
        acknowledged = {
            "view": tally.view_clicks, "do": tally.do_clicks, "mcp": tally.mcp_clicks,
            "aio": outcomes["aio"]["clicks"], "threads.clicks": outcomes["threads"]["clicks"],
            "threads.events": outcomes["threads"]["events"],
        }  # fmt: skip
        written = [e.data for e in book.events(writer_session) if e.kind == "writer"]
        in_ledger = {(int(d["n"]), int(d["i"])) for d in written}
        book.record_end(writer_session, status="ended", reason="chaos over", ended_at=time.time(),
                        billable_seconds=0.0, cost_usd=0.0)  # fmt: skip
        active = [(r.session_id, r.labels.get("chaos"), r.status) for r in book.sessions(active=True)]
        missing_intent = [r.session_id for r in records if not book.events(r.session_id)
                          or book.events(r.session_id)[0].kind != "intent"]  # fmt: skip
        integrity = None
        if backend == "sqlite":
            with book.transaction(readonly=True) as tx:
                integrity = tx.run("PRAGMA integrity_check")
    check = deskctl("ledger", "check", "--json")
    elapsed = time.monotonic() - started
    print(f"\nchaos[{backend}] seed {seed}, {elapsed:.0f}s ({DURATION:.0f}s of chaos): acknowledged {acknowledged}; "
          f"ledger {ledger_counts}; {tally.reads} ls/cost/reap, {tally.victims} victims killed, "
          f"{len(records)} sessions; {tally.writers} writers killed, {len(tally.written)} of their events "
          f"acknowledged, {len(in_ledger)} in the ledger")  # fmt: skip

    assert tally.problems == [], tally.problems
    assert outcomes["threads"]["errors"] == []
    assert tally.deleted_ledger_fds == set()
    assert ledger_counts == acknowledged
    # a killed writer's acknowledged events are all there; at most the one in flight when it died is extra
    assert tally.written <= in_ledger, sorted(tally.written - in_ledger)[:20]
    assert len(written) == len(in_ledger)  # no event twice
    assert len(in_ledger - tally.written) <= tally.writers
    assert tally.writers > 0 and tally.written
    assert min(tally.view_clicks, tally.do_clicks, tally.mcp_clicks, outcomes["threads"]["events"]) > 0
    assert len(outcomes["aio"]["clicks"]) == 4 and all(n > 0 for n in outcomes["aio"]["clicks"].values())
    assert tally.victims > 0 and tally.reads > 0
    assert missing_intent == []
    assert active == [], active
    assert integrity in (None, [("ok",)]), integrity
    assert check.returncode == 0 and json.loads(check.stdout)["ok"] is True, check.stdout + check.stderr
    assert xvfb_servers_under(deskctl_home) == {}
    from deskctl.providers.xvfb import XvfbProvider

    assert XvfbProvider().list_owned() == []  # every desktop accounted for: nothing left for a reaper to find
