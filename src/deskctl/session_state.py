"""The base class of :class:`deskctl.session.Desktop`: its state, its public properties and its lifecycle (open,
``with``, close, release; the steps themselves are :mod:`deskctl.session_steps` and :mod:`deskctl.supervisor`).
The actions are the methods of :class:`~deskctl.session.Desktop` itself."""

from __future__ import annotations

import os
import time

from deskctl import _threads, session_steps, supervisor
from deskctl.errors import BudgetExceeded, CleanupIncomplete, DeskctlError, SessionClosed
from deskctl.lifecycle import SessionStatus, check_move
from deskctl.providers import get_provider
from deskctl.providers.base import Provider, RemoteHandle
from deskctl.session_steps import new_session_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Mapping
    from types import TracebackType
    from typing import Any

    from deskctl.ledger import Ledger, SessionRecord
    from deskctl.metering import Rate
    from deskctl.recording import Recorder
    from deskctl.session import Desktop
    from deskctl.spec import DesktopSpec

__all__ = ["SessionState"]


class SessionState:
    """What a :class:`~deskctl.session.Desktop` holds: set by :meth:`_init_state` (a new or an attached session)."""

    _recorder: Recorder | None
    _spec: DesktopSpec | None
    _stored_spec: Mapping[str, Any] | None
    _progress: Callable[[str], None] | None

    def _init_state(self, *, provider: str, provider_options: Mapping[str, Any], max_minutes: float | None,
                    max_usd: float | None, ledger: Ledger | None, session_id: str | None, detached: bool) -> None:
        self._provider_name = provider
        self._provider_options = provider_options
        self._max_minutes = max_minutes
        self._max_usd = max_usd
        self._progress = None
        self.id = session_id or new_session_id()
        self.detached = detached
        self.ready_timeout = 120.0
        self.run_preflight = True
        self.state: SessionStatus = SessionStatus.NEW
        self.handle: RemoteHandle | None = None
        self.end_reason: str | None = None
        self._ledger = ledger
        self._owns_ledger = ledger is None
        self._provider: Provider | None = None
        self._owned = True
        self._size: tuple[int, int] | None = None
        self._rate: Rate | None = None
        self._rate_resolved = False
        #: the hourly rate the ledger recorded at the start, for an attached session's money limit
        self._recorded_usd_per_hour: float | None = None
        self._reservation: str | None = None
        self._create_sent_at: float | None = None
        #: the create's own CleanupIncomplete: its answer was lost and what it made may still exist
        self._create_left: CleanupIncomplete | None = None
        self._expires_at: float | None = None
        self._lock = _threads.RLock()
        self._teardown_lock = _threads.Lock()
        #: actions done and not yet in the ledger, by kind (a plain dict: collections.Counter is not loaded)
        self._counts: dict[str, int] = {}
        self._counts_lock = _threads.Lock()
        self._last_flush = time.monotonic()
        self._stop = _threads.Event()
        self._threads: list[threading.Thread] = []
        self._ended_error: DeskctlError | None = None
        self._limit_on_use = False
        self._recorder = None
        #: model spend metered for this session (Desktop.meter): known dollars, and calls of unknown price
        self._model_usd = 0.0
        self._model_unknown = 0
        #: set when model spend moved the money limit (and at stop), so the watchdog looks again
        self._limits_changed = _threads.Event()
        #: what an agent's action does while a person holds the desktop (`deskctl view --takeover`): "wait" until
        #: they release it, or "fail" with session.paused (DESKCTL_ON_TAKEOVER sets the default)
        self.on_takeover = os.environ.get("DESKCTL_ON_TAKEOVER", "wait")
        self._takeover_lock: Any = None

    # -- public properties -----------------------------------------------------------------------
    @property
    def spec(self) -> DesktopSpec:
        """What the session was asked to be."""
        if self._spec is None:
            from deskctl.spec import STORED, DesktopSpec

            stored = self._stored_spec
            self._spec = (DesktopSpec.model_validate(stored, context=STORED) if stored
                          else DesktopSpec.build(provider=self._provider_name))
        return self._spec

    @property
    def provider_name(self) -> str:
        return self._provider_name

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = get_provider(self._provider_name, dict(self._provider_options))
        return self._provider

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            from deskctl.ledger import open_ledger

            self._ledger = open_ledger()
        return self._ledger

    @property
    def expires_at(self) -> float | None:
        return self._expires_at

    @property
    def recording(self) -> Recorder | None:
        """The trajectory recorder (``directory``, ``last_step``), or None when the session is not recorded."""
        return self._recorder

    def _desktop(self) -> Desktop:
        """This object as the :class:`~deskctl.session.Desktop` it is (this class is only ever its base), for the
        steps of :mod:`deskctl.session_steps` and :mod:`deskctl.supervisor`, which take a Desktop."""
        this: Any = self  # not typing.cast: no typing import at run time
        desk: Desktop = this
        return desk

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> Desktop:
        if self.state is SessionStatus.NEW:
            self.open()
        return self._desktop()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._owned or self.detached:
            self.release()
            return
        reason = "closed"
        if exc is not None:
            reason = getattr(exc, "code", None) or type(exc).__name__
            if isinstance(exc, KeyboardInterrupt):
                reason = "interrupted"
        self._teardown(status="ended" if exc is None else "failed", reason=reason)

    def open(self) -> Desktop:
        """Run lifecycle steps 1-5. On any failure, whatever was made is destroyed before re-raising."""
        session_steps.open_session(self._desktop())
        return self._desktop()

    def _step(self, what: str) -> None:
        if self._progress is not None:
            self._progress(what)

    def _move(self, status: SessionStatus) -> None:
        """Go to ``status``: a move of :data:`deskctl.lifecycle.TRANSITIONS`, else ``ValueError`` (a bug)."""
        self.state = check_move(self.state, status)

    def labels(self) -> dict[str, str]:
        return session_steps.labels(self._desktop())

    def _watchdog_seconds(self) -> float | None:
        return supervisor.watchdog_seconds(self._desktop())

    def _end_at_limit(self) -> BudgetExceeded:
        return supervisor.end_at_limit(self._desktop())

    # -- teardown ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the desktop (confirmed), record the end and the cost. Idempotent."""
        self._teardown(status=SessionStatus.ENDED, reason="closed")

    def release(self) -> None:
        """Let go of the desktop without destroying it (detached sessions, :func:`~deskctl.session.attach`)."""
        session_steps.release(self._desktop())

    def _teardown(self, *, status: str, reason: str) -> None:
        session_steps.teardown(self._desktop(), status=status, reason=reason)

    def _end_if_gone(self, code: str) -> None:
        session_steps.end_if_gone(self._desktop(), code)

    @classmethod
    def from_record(cls, record: SessionRecord, *, ledger: Ledger, owns_ledger: bool = False) -> Desktop:
        """A session that runs already, as ``ledger`` records it (what :func:`~deskctl.session.attach` returns):
        leaving a ``with`` block releases it, :meth:`close` destroys it. ``owns_ledger``: close ``ledger`` with the
        session. Reads the stored spec as plain data: it was validated when the session was opened. Raises
        :class:`~deskctl.errors.SessionClosed` for a session that ended (or never got a desktop)."""
        desk = cls.__new__(cls)
        session_steps.attached(desk._desktop(), record, ledger=ledger, owns_ledger=owns_ledger)
        return desk._desktop()

    def _check_usable(self) -> None:
        if self.state is SessionStatus.READY:
            if self._limit_on_use and self._watchdog_seconds() == 0:
                # a detached session has no watchdog thread: its limit is enforced when it is next used
                raise self._end_at_limit()
            return
        if self._ended_error is not None:
            raise self._ended_error
        raise SessionClosed(
            f"session {self.id} is {self.state.value}; it cannot be used", provider=self._provider_name
        )

    def _require_handle(self) -> RemoteHandle:
        if self.handle is None:
            raise SessionClosed(f"session {self.id} has no desktop", provider=self._provider_name)
        return self.handle
