"""The state of a :class:`deskctl.session.Desktop` and its public properties (the base class it is built on; the
lifecycle and the actions are the methods of :class:`~deskctl.session.Desktop`)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from deskctl.call_args import wait_terms as wait_terms  # aio.py takes it from here
from deskctl.errors import CleanupIncomplete, DeskctlError
from deskctl.lifecycle import SessionStatus
from deskctl.providers import get_provider
from deskctl.providers.base import Provider, RemoteHandle
from deskctl.session_steps import new_session_id

if TYPE_CHECKING:
    from deskctl.ledger import Ledger
    from deskctl.metering import Rate
    from deskctl.recording import Recorder
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
        self._lock = threading.RLock()
        self._teardown_lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._ended_error: DeskctlError | None = None
        self._limit_on_use = False
        self._recorder = None
        #: model spend metered for this session (Desktop.meter): known dollars, and calls of unknown price
        self._model_usd = 0.0
        self._model_unknown = 0
        #: set when model spend moved the money limit (and at stop), so the watchdog looks again
        self._limits_changed = threading.Event()
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
