"""Human takeover: a person holds control of a desktop (``deskctl view ID --control --takeover``) and the agent's
actions wait, or fail with ``session.paused``, until the person releases it; the agent can ask for help
(:meth:`deskctl.Desktop.request_takeover`) and block until a person has taken over and released.

The hold is an exclusive ``flock`` on ``$DESKCTL_HOME/run/takeover/<session>.lock``, taken by the process that
serves the person (the view). An agent's action first tries a shared lock on the same file without blocking:
free, it goes on at once (a few microseconds; no file, nothing to check); held, it waits in a blocking ``flock``
that the kernel ends when the hold is released, or when the holder dies (a crashed view never blocks an agent).
The agent and the view must share ``DESKCTL_HOME`` (the same user on the same machine; the view listens on
loopback only anyway). A help request is a JSON file beside it, which the view's page shows.

Who acts is a context variable (:data:`ACTOR`): ``agent`` by default, ``human`` while the view passes a person's
input on; each recorded step says it (``actor``), and the ledger has ``takeover`` / ``release`` events.
"""

from __future__ import annotations

import fcntl
import os
import time

# contextvars.ContextVar itself (contextvars.py is `from _contextvars import *`), without finding that module's file
from _contextvars import ContextVar

from deskctl._jsonc import dumps, loads  # json's codec without the json package's import (re): every action looks here

TYPE_CHECKING = False
if TYPE_CHECKING:
    from contextvars import Token
    from typing import Any

    from deskctl.session import Desktop

__all__ = ["ACTOR", "ON_TAKEOVER_ENV", "Takeover", "acting_as", "current_actor", "gate", "lock_path",
           "pending_request", "request_takeover"]

#: who is acting in this thread: "agent" (default) or "human" (a person's input passed on by the view)
ACTOR: ContextVar[str] = ContextVar("deskctl_actor", default="agent")
#: the default answer of an agent's action while a person holds the desktop: wait (default) or fail
ON_TAKEOVER_ENV = "DESKCTL_ON_TAKEOVER"


def current_actor() -> str:
    return ACTOR.get()


def acting_as(actor: str) -> _ActingAs:
    """``with acting_as("human"):``: ``actor`` is who acts (:data:`ACTOR`) in this context inside the block."""
    return _ActingAs(actor)


class _ActingAs:
    """:func:`acting_as`'s ``with`` block (a class: an agent's ``deskctl do`` process imports no contextlib)."""

    __slots__ = ("_actor", "_token")

    def __init__(self, actor: str) -> None:
        self._actor = actor
        self._token: Token[str] | None = None

    def __enter__(self) -> None:
        self._token = ACTOR.set(self._actor)

    def __exit__(self, *exc: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            ACTOR.reset(token)


# The paths are strs made with os.path: pathlib (which imports urllib.parse and ipaddress) is not on the path of an
# agent's action, whose whole process `deskctl do` is (tests/cli/test_do_fast.py holds it out).
def _folder() -> str:
    from deskctl.paths import home_path

    return os.path.join(home_path(), "run", "takeover")


def lock_path(session_id: str) -> str:
    from deskctl.paths import takeover_lock

    return takeover_lock(session_id)


def _request_path(session_id: str) -> str:
    return os.path.join(_folder(), f"{session_id}.request.json")


def _held(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _holder(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as file:
            data = loads(file.read() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def gate(desk: Desktop, path: str) -> None:
    """Before an agent's action: return at once when nobody holds the desktop; else wait until released
    (``desk.on_takeover == "wait"``) or raise ``session.paused`` (``"fail"``). A person's own input passes."""
    if ACTOR.get() == "human":
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not _held(fd):
            return
        holder = _holder(path)
        if desk.on_takeover == "fail":
            from deskctl.errors import SessionPaused

            reason = f" ({holder['reason']})" if holder.get("reason") else ""
            raise SessionPaused(f"a person holds control of {desk.id}{reason}; the agent's action was not sent",
                                provider=desk.provider_name,
                                remedy="retry when they release it, or wait for it (on_takeover='wait')")
        started = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_SH)  # the kernel wakes this when the hold is released or its holder dies
        fcntl.flock(fd, fcntl.LOCK_UN)
        try:
            desk.ledger.record_event(desk.id, "takeover.waited", {"seconds": round(time.monotonic() - started, 3)})
        except Exception:
            pass
    finally:
        os.close(fd)


class Takeover:
    """The person's side: :meth:`take` holds the desktop, :meth:`release` gives it back (also on process exit).
    One holder at a time: a second :meth:`take` elsewhere is ``usage.conflict``."""

    def __init__(self, desk: Desktop) -> None:
        self.desk = desk
        self.path = lock_path(desk.id)
        self._fd: int | None = None
        self.since: float | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take(self, reason: str = "", by: str = "human") -> None:
        if self._fd is not None:
            return
        from deskctl.errors import UsageError

        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"someone else holds {self.desk.id} already", code="usage.conflict") from None
        self.since = time.time()
        record = dumps({"holder": by, "pid": os.getpid(), "since": self.since, "reason": reason}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        self._fd = fd
        try:
            os.unlink(_request_path(self.desk.id))  # a help request is answered by taking over
        except FileNotFoundError:
            pass
        try:
            self.desk.ledger.record_event(self.desk.id, "takeover", {"by": by, "reason": reason})
        except Exception:
            pass

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        held = time.time() - (self.since or time.time())
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # closing the only descriptor of the open file releases the lock
        try:
            self.desk.ledger.record_event(self.desk.id, "release", {"seconds": round(held, 3)})
        except Exception:
            pass


def pending_request(session_id: str) -> dict[str, Any] | None:
    """The agent's open help request (``reason``, ``since``), or None."""
    path = _request_path(session_id)
    if not os.path.exists(path):
        return None
    data = _holder(path)
    return data or None


def request_takeover(desk: Desktop, reason: str, timeout: float | None = None) -> float:
    """Ask a person for help and block until one has taken over the desktop and released it; returns the
    seconds waited. ``wait.timeout`` (exit 6) when nobody has come and gone within ``timeout``."""
    from deskctl.errors import UsageError, WaitTimeout

    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1000:
        raise UsageError("a help request needs a reason (1 to 1000 characters)", code="usage.bad_reason")
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    os.makedirs(_folder(), mode=0o700, exist_ok=True)
    request = _request_path(desk.id)
    with open(request, "w", encoding="utf-8") as file:
        file.write(dumps({"reason": reason, "since": time.time(), "pid": os.getpid()}))
    desk.ledger.record_event(desk.id, "takeover.requested", {"reason": reason})
    path = lock_path(desk.id)
    try:
        # until a person takes over (the view removes the request when they do); the page's button is the event,
        # and this side has no channel to it but the file, so it looks every 100 ms
        while os.path.exists(request):
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"nobody took over {desk.id} within {timeout} s", provider=desk.provider_name,
                                  remedy=f"deskctl view {desk.id} --control --takeover")
            time.sleep(0.1)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # until the person releases it
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(request)
        except FileNotFoundError:
            pass
    return time.monotonic() - started
