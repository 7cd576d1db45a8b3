"""The desktop session: the :class:`Desktop` object, its actions, and the lifecycle it goes through.

A :class:`Desktop`'s :attr:`~Desktop.state` is a :class:`deskctl.lifecycle.SessionStatus`, the ledger's status of
the session (``State`` is the same enum under the name this module exported first)::

    new -> intent -> creating -> ready -> destroying -> ended | failed
                                                    \\-> leaked (the destroy could not be confirmed)
    intent -> failed (preflight, the budget or the intent record refused it: nothing was made)
    creating -> destroying -> failed (create or readiness failed part-way: whatever was made is destroyed)

``ended`` is a normal close and an end at the watchdog's limit (``end_reason`` says ``budget.exceeded``);
``failed`` is an exception leaving the ``with`` block, a failed open, or a desktop the provider lost. The moves
are :data:`deskctl.lifecycle.TRANSITIONS`; :meth:`Desktop._move` refuses any other.

Guarantees (ARCHITECTURE.md, "Session lifecycle"), kept by :mod:`deskctl.session_steps` (open, attach, teardown)
and :mod:`deskctl.supervisor` (signals, watchdog, keepalive):

1. the spec is validated, the provider's preflight runs, the projected cost is reserved against budgets;
2. an *intent* record is in the ledger, with the client-made session id, before create is sent;
3. the desktop is created with the ``deskctl.*`` labels, so it can be found again after a crash;
4. the live display size must equal the pinned geometry (``geometry.mismatch`` otherwise);
5. a watchdog ends the session at its max minutes or max cost (``budget.exceeded``);
6. destroy runs on return, exception, Ctrl-C (SIGINT), SIGTERM and interpreter exit, and when create or
   readiness failed part-way; the end and the cost are recorded. A destroy that cannot be confirmed raises
   ``cleanup.incomplete`` (exit 5) naming what is left;
7. a *detached* session (``deskctl up``) skips step 6 at exit: ``deskctl down``, its expiry or ``deskctl reap``
   end it.
"""

from __future__ import annotations

import os
import time

from deskctl import session_steps, supervisor
from deskctl._lazy import LazyModule
from deskctl.errors import (
    GeometryMismatch,
    GeometryOutOfBounds,
    InfrastructureError,
    NotFound,
    UsageError,
)
from deskctl.lifecycle import SessionStatus
from deskctl.providers import DEFAULT_PROVIDER
from deskctl.providers.base import ExecResult, RawFrame, Screenshot
from deskctl.session_state import SessionState
from deskctl.session_steps import new_session_id, owner_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from deskctl import actions as act
    from deskctl.browser import BrowserEndpoint, Page
    from deskctl.episodes.store import Snapshot
    from deskctl.ledger import Ledger, ModelUsage
    from deskctl.observe.accessibility import AccessibilityTree, AccessibleNode
    from deskctl.observe.windows import Window
    from deskctl.spec import DesktopSpec
else:
    act = LazyModule("deskctl.actions")  # imported when a method first acts: `deskctl up` and `down` act on nothing

__all__ = ["Desktop", "SessionStatus", "State", "attach", "new_session_id", "open_desktop", "owner_id"]

#: the lifecycle's statuses under the name this module exported first (``deskctl.session.State``)
State = SessionStatus


class Desktop(SessionState):
    """One desktop session. Build with :func:`open_desktop` (owned: destroyed on exit) or :func:`attach`.

    All coordinates are in the pinned geometry's pixel space, the same space as :meth:`screenshot`.
    Methods raise :class:`~deskctl.errors.SessionClosed` after close, and
    :class:`~deskctl.errors.GeometryOutOfBounds` for points outside the screen.
    """

    def __init__(
        self,
        spec: DesktopSpec,
        *,
        ledger: Ledger | None = None,
        ready_timeout: float = 120.0,
        detached: bool = False,
        run_preflight: bool = True,
        session_id: str | None = None,
        progress: Callable[[str], None] | None = None,
        record: str | os.PathLike[str] | None = None,
        record_settle: float = 0.0,
        video: Any = False,
    ) -> None:
        self._spec: DesktopSpec | None = spec
        #: an attached session's spec as the ledger stores it, validated into ``spec`` only when that is read:
        #: acting on a running desktop needs none of it but the fields below (and loading pydantic costs time)
        self._stored_spec: Mapping[str, Any] | None = None
        self._init_state(provider=spec.provider, provider_options=spec.provider_options,
                         max_minutes=spec.max_minutes, max_usd=spec.max_usd, ledger=ledger, session_id=session_id,
                         detached=detached)
        from deskctl.limits import check_number

        self._progress = progress
        self.ready_timeout = check_number("ready_timeout", ready_timeout, what="ready_timeout")
        self.run_preflight = run_preflight
        if record is not None:  # checked before anything is created or paid for
            from deskctl.recording import Recorder

            self._recorder = Recorder.create(record, record_settle, video=video, provider=self.provider)
        elif video:
            raise UsageError("a video is part of a recording: name its directory too", code="usage.invalid",
                             remedy="open_desktop(record=DIR, video=True) / deskctl up --record DIR --video")

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the live display, verified against the pinned geometry at open."""
        self._check_usable()
        assert self._size is not None
        return self._size

    def __repr__(self) -> str:
        return f"<Desktop {self.id} {self.spec.provider} {self.spec.geometry_label()} {self.state.value}>"

    # -- actions -----------------------------------------------------------------------------------
    def _guard(self, kind: str, *, count: bool = True) -> Any:
        """Checks the session is usable, counts the call in the ledger (``count``), and ends the session in the
        ledger when the provider says the desktop is lost."""
        desk = self

        class _Guard:
            def __enter__(self) -> None:
                desk._check_usable()

            def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
                if exc is None:
                    if count:
                        with desk._counts_lock:
                            desk._counts[kind] = desk._counts.get(kind, 0) + 1
                    desk._flush_actions()
                elif isinstance(exc, InfrastructureError) and exc.code == "provider.session_lost":
                    try:
                        if desk._owned:
                            desk._teardown(status="failed", reason=exc.code)
                        else:  # e.g. `deskctl do` on a detached desktop that died: the ledger must not say ready
                            desk._end_if_gone(exc.code)
                    except Exception as failure:  # the loss is the error to raise; this one is logged
                        supervisor.log_cleanup_failure(f"the end of {desk.id}, whose desktop was lost", failure)

        return _Guard()

    def _flush_actions(self, force: bool = False) -> None:
        """Add the counted actions to the ledger (at most every ACTION_FLUSH_SECONDS unless ``force``)."""
        session_steps.flush_actions(self, force=force)

    def _bounds(self, *points: tuple[int, int]) -> None:
        width, height = self.size
        for x, y in points:
            if not (0 <= x < width and 0 <= y < height):
                raise GeometryOutOfBounds(
                    f"point ({x}, {y}) is outside the {width}x{height} screen", provider=self._provider_name,
                    remedy=f"x must be in 0..{width - 1} and y in 0..{height - 1}",
                )

    def _act(self, action: act.Action) -> None:
        act.check_action(action)  # before the screen: a 1e9-click scroll is a usage error, not hours of input
        self._bounds(*act.action_points(action))
        with self._guard(act.action_kind(action)):
            self.provider.act(self._require_handle(), action)

    def _person_gate(self) -> None:
        """Before an agent's action: wait while a person holds the desktop, or fail (deskctl.episodes.takeover)."""
        session_steps.person_gate(self)

    def request_takeover(self, reason: str, timeout: float | None = None) -> float:
        """Ask a person for help (`deskctl view ID --control --takeover` shows the reason) and block until one has
        taken over and released the desktop; returns the seconds waited (``wait.timeout`` after ``timeout``)."""
        from deskctl.episodes.takeover import request_takeover

        self._check_usable()
        return request_takeover(self, reason, timeout)

    def act(self, action: act.Action) -> None:
        """Execute one action from :mod:`deskctl.actions` (bounds-checked); recorded when the session is."""
        self._check_usable()
        self._person_gate()
        if self._recorder is not None:
            self._recorder.step(self, action, lambda: self._act(action))
        else:
            self._act(action)

    def meter(self, role: str, model: str, input_tokens: int = 0, output_tokens: int = 0,
              usd: float | None = None) -> ModelUsage:
        """Record a model's token use for this session beside its desktop cost, and return the ledger row.

        ``role``: who spent it (``agent``, ``user`` for a simulated user, ``judge``, ...); ``usd``: what it cost
        when the caller knows, else it is priced from the ``models`` rows of prices.json (yours first), or by the
        ``genai-prices`` library when installed; a price nobody knows stays None (unknown), never 0. Bad numbers are
        ``usage.bad_meter`` (exit 2) and nothing is recorded.

        The spend counts against the session's ``max_usd`` and its shared budget. A call that takes the session
        past either (or, under the ``refuse`` unknown-cost policy, a call of unknown price under a money cap) is
        still recorded, since the tokens are spent, but then ends the session as its watchdog does for desktop
        spend and raises :class:`~deskctl.errors.BudgetExceeded` (exit 4): the next step is refused."""
        from deskctl import session_spend  # here: an action's process needs none of it

        return session_spend.meter(self, role, model, input_tokens, output_tokens, usd)

    def annotate(self, step: int | None = None, /, **fields: Any) -> int:
        """Add harness fields (model tokens, reward, ...) to a recorded step (default: this session's last);
        returns the step. ``usage.not_recording`` when the session is not recorded."""
        if self._recorder is None:
            raise UsageError(f"session {self.id} is not recorded", code="usage.not_recording",
                             remedy="open it with record=DIR (deskctl up --record DIR)")
        return self._recorder.annotate(self.id, step, fields)

    def screenshot(self, *, max_size: Any = None, scale: Any = None, region: Any = None) -> Screenshot:
        """A PNG whose pixel grid is the action coordinate space. With ``max_size=(w, h)`` (fit inside, never
        enlarged), ``scale=`` or ``region=(x, y, w, h)`` (zoom): a :class:`~deskctl.observe.transform.
        TransformedScreenshot` of that part at that size, whose points pointer actions take with ``space=shot``
        (docs/observation.md)."""
        if max_size is None and scale is None and region is None:
            return self._screenshot(count=True)
        from deskctl.observe import transform

        with self._guard("screenshot"):
            return transform.take(self, max_size=max_size, scale=scale, region=region)

    def _screenshot(self, *, count: bool) -> Screenshot:
        """``count=False``: deskctl's own shots (a recording's before/after) are not the caller's actions."""
        with self._guard("screenshot", count=count):
            shot = self.provider.screenshot(self._require_handle())
        if self._size is not None and (shot.width, shot.height) != self._size:
            raise GeometryMismatch(
                f"screenshot is {shot.width}x{shot.height}, the pinned screen {self._size[0]}x{self._size[1]}",
                provider=self._provider_name,
            )
        return shot

    def raw_frame(self) -> RawFrame:
        """The screen's pixels without PNG encoding (the X11 providers' fast capture), for a live view. Not
        counted as an action in the ledger: a viewer takes many a second."""
        with self._guard("raw_frame", count=False):
            frame = self.provider.raw_frame(self._require_handle())
        if self._size is not None and (frame.width, frame.height) != self._size:
            raise GeometryMismatch(
                f"the screen is {frame.width}x{frame.height}, the pinned screen {self._size[0]}x{self._size[1]}",
                provider=self._provider_name,
            )
        return frame

    def _at(self, x: int | None, y: int | None, space: Any = None) -> tuple[int, int]:
        """``(x, y)``, or where the pointer is when both are None (an action "at the current position"); a point
        of a transformed screenshot's image when ``space`` names it (mapped back to the desktop)."""
        if x is None and y is None:
            return self.cursor_position()
        if x is None or y is None:
            raise UsageError("give both x and y, or neither (the pointer's position)", code="usage.invalid")
        if space is not None:
            from deskctl.observe.transform import as_transform

            return as_transform(space).to_desktop(x, y)
        return x, y

    def click(self, x: int | None = None, y: int | None = None, button: str = "left", count: int = 1, *,
              space: Any = None) -> None:
        """Click at ``(x, y)``, or where the pointer is when both are None. ``space``: the points are in the
        image of that transformed screenshot (every pointer action takes it)."""
        self.act(act.Click(*self._at(x, y, space), act.validate_button(button), count))

    def double_click(self, x: int | None = None, y: int | None = None, button: str = "left", *,
                     space: Any = None) -> None:
        self.click(x, y, button, 2, space=space)

    def triple_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        self.click(x, y, "left", 3, space=space)

    def right_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        self.click(x, y, "right", space=space)

    def middle_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        self.click(x, y, "middle", space=space)

    def move(self, x: int, y: int, *, space: Any = None) -> None:
        self.act(act.Move(*self._at(x, y, space)))

    def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left", *, space: Any = None) -> None:
        self.act(act.Drag(*self._at(x1, y1, space), *self._at(x2, y2, space), act.validate_button(button)))

    def scroll(self, x: int | None = None, y: int | None = None, dx: int = 0, dy: int = 0, *,
               space: Any = None) -> None:
        """Wheel clicks at ``(x, y)`` (or where the pointer is): ``dy`` > 0 down, ``dx`` > 0 right."""
        self.act(act.Scroll(*self._at(x, y, space), dx, dy))

    def mouse_down(self, x: int, y: int, button: str = "left", *, space: Any = None) -> None:
        self.act(act.MouseDown(*self._at(x, y, space), act.validate_button(button)))

    def mouse_up(self, x: int, y: int, button: str = "left", *, space: Any = None) -> None:
        self.act(act.MouseUp(*self._at(x, y, space), act.validate_button(button)))

    def type(self, text: str) -> None:
        self.act(act.TypeText(text))

    def key(self, chord: str) -> None:
        self.act(act.KeyPress(act.normalize_chord(chord)))

    def key_down(self, key: str) -> None:
        self.act(act.KeyDown(act.normalize_key(key)))

    def key_up(self, key: str) -> None:
        self.act(act.KeyUp(act.normalize_key(key)))

    def cursor_position(self) -> tuple[int, int]:
        """Where the pointer is, in action coordinates. ``usage.unsupported`` where the provider cannot tell
        (``capabilities.cursor_position``: the X11 providers can)."""
        with self._guard("cursor_position"):
            return self.provider.cursor_position(self._require_handle())

    def exec(self, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None, background: bool = False,
             on_output: Callable[[str, str], None] | None = None) -> ExecResult:
        """Run ``command`` through the desktop's shell (``sh`` on Linux/macOS, the provider's on Windows) in
        ``cwd`` with ``env`` added, as ``user``; ``background`` starts it detached and returns at once (a GUI
        app: ``exec("xterm", background=True)``). A timeout is exit code 124. ``on_output(text, stream)``
        (``stream``: ``"stdout"`` or ``"stderr"``) gets the output as it comes where the provider streams it
        (``docker``), else all of it once the command ended; the result holds all of it either way."""
        from deskctl.limits import check_number
        from deskctl.providers._guest import check_exec_options

        timeout = check_number("exec_timeout", timeout, what="timeout")
        self._person_gate()
        options: dict[str, Any] = {}
        clean_env = check_exec_options(env, user, self._provider_name)
        if cwd is not None:
            options["cwd"] = cwd
        if clean_env:
            options["env"] = clean_env
        if user is not None:
            options["user"] = user
        if background:
            options["background"] = True
        streams = on_output is not None and getattr(type(self.provider), "exec_streams_output", False)
        if streams:
            options["on_output"] = on_output
        with self._guard("exec"):
            result = self.provider.exec(self._require_handle(), command, timeout, **options)
        if on_output is not None and not streams:
            for text, stream in ((result.stdout, "stdout"), (result.stderr, "stderr")):
                if text:
                    on_output(text, stream)
        return result

    # -- files -----------------------------------------------------------------------------------------------
    def upload(self, local: str | os.PathLike[str], remote: str) -> None:
        """Make ``remote`` (a path on the desktop) a copy of the local file or directory ``local``."""
        with self._guard("upload"):
            self.provider.upload(self._require_handle(), os.fspath(local), remote)

    def download(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Make ``local`` a copy of the file or directory ``remote`` on the desktop."""
        with self._guard("download"):
            self.provider.download(self._require_handle(), remote, os.fspath(local))

    # -- harness actions -------------------------------------------------------------------------------------
    def clipboard_get(self) -> str:
        with self._guard("clipboard"):
            return self.provider.clipboard_get(self._require_handle())

    def clipboard_set(self, text: str) -> None:
        self._person_gate()
        with self._guard("clipboard"):
            self.provider.clipboard_set(self._require_handle(), text)

    def open_url(self, url: str, browser: str | None = None) -> None:
        """Open ``url`` with the desktop's default opener (``xdg-open`` on Linux), or with the program
        ``browser`` (``"chromium"``). ``url`` is a URL with a scheme and a host (``https://example.com/x``), a
        ``file:`` URL of an absolute path, or an absolute path on the desktop; anything else is
        ``usage.bad_url`` (exit 2), before the desktop is reached."""
        if not url:
            raise UsageError("open_url needs a URL", code="usage.invalid")
        from deskctl.call_args import check_url

        check_url(url)
        self._person_gate()
        with self._guard("open_url"):
            self.provider.open_url(self._require_handle(), url, browser)

    def launch(self, app: str, *args: str) -> int | None:
        """Start ``app`` with ``args`` detached; returns its process id on the desktop where known."""
        self._person_gate()
        with self._guard("launch"):
            return self.provider.launch(self._require_handle(), app, [str(a) for a in args])

    def browser(self) -> BrowserEndpoint:
        """The DevTools endpoint of the desktop's Chromium as this process reaches it (a
        :class:`deskctl.browser.BrowserEndpoint`: ``http_url``, ``ws_url``), for a CDP client (Playwright's
        ``connect_over_cdp(desk.browser().ws_url)``). ``usage.no_browser`` when no Chromium with DevTools runs
        (start one with ``start_url`` or ``open_url(url, browser="chromium")``); ``usage.unsupported`` where
        the provider cannot (``capabilities.browser``)."""
        with self._guard("browser", count=False):
            endpoint: BrowserEndpoint = self.provider.browser_endpoint(self._require_handle())
            return endpoint

    def browser_pages(self) -> list[Page]:
        """The pages of the desktop's Chromium as ``[(url, title)]``, the most recently active first (what
        ``/json/list`` at the browser's DevTools port says inside the desktop)."""
        from deskctl.browser import pages

        return pages(self.browser(), self._provider_name)

    # -- episodes (deskctl.episodes: snapshot and restore) -----------------------------------------
    def snapshot(self, name: str, ttl: float | None = None, replace: bool = False) -> Snapshot:
        """Keep this desktop's state as ``name`` (ledger table ``snapshots``); ``usage.unsupported`` where the
        provider's capabilities have no ``snapshots``. ``ttl``: seconds until the reaper deletes it."""
        from deskctl.episodes import take_snapshot

        return take_snapshot(self, name, ttl=ttl, replace=replace)

    def restore(self, name: Snapshot | str) -> Snapshot:
        """Put this desktop back as it was at the snapshot ``name`` (a :class:`Snapshot`, its name or id)."""
        from deskctl.episodes import restore

        return restore(self, name)

    def window_titles(self) -> list[str]:
        with self._guard("window_titles", count=False):
            return self.provider.window_titles(self._require_handle())

    # -- windows (deskctl.observe.windows) -------------------------------------------------------------------
    def windows(self) -> list[Window]:
        """The top-level windows (id, title, class, pid, geometry, focused), bottom to top; ``usage.unsupported``
        without the ``window_management`` capability."""
        from deskctl.observe import windows

        with self._guard("windows", count=False):
            return windows.list_windows(self)

    def focus(self, window: Any) -> Window:
        """Raise ``window`` (a :class:`~deskctl.observe.windows.Window`, its id, or its title) and focus it."""
        from deskctl.observe import windows

        found: Window = self._observed_step({"kind": "focus", "window": str(window)}, "focus",
                                            lambda: windows.focus(self, window))
        return found

    def move_window(self, window: Any, x: int, y: int, width: int, height: int) -> Window:
        """Put ``window``'s client area at ``(x, y)`` with that size; the window as it is afterwards."""
        from deskctl.observe import windows

        moved: Window = self._observed_step(
            {"kind": "move_window", "window": str(window), "geometry": [x, y, width, height]}, "move_window",
            lambda: windows.move_window(self, window, x, y, width, height))
        return moved

    def wait_until_stable(self, region: Any = None, quiet_ms: int = 500, timeout: float = 30.0) -> float:
        """Return once the screen (or ``region`` = (x, y, w, h)) has not changed for ``quiet_ms`` ms (raw frames
        compared, no PNG); the seconds it took. ``wait.timeout`` (exit 6) when it keeps changing."""
        from deskctl.observe.readiness import wait_until_stable

        return wait_until_stable(self, region, quiet_ms, timeout)

    # -- accessibility (deskctl.observe.accessibility) --------------------------------------------------------
    def accessibility_tree(self, window: str | None = None, max_depth: int = 40,
                           max_nodes: int = 5000) -> AccessibilityTree:
        """The accessibility tree (AT-SPI on Linux) of the windows whose title contains ``window``, or of every
        application: nodes with role, name, description, value, states, bounds in screen pixels, children."""
        from deskctl.observe import accessibility

        with self._guard("accessibility_tree", count=False):
            return accessibility.tree(self, window, max_depth, max_nodes)

    def find(self, role: str | None = None, name: str | None = None, window: str | None = None) -> list[AccessibleNode]:
        """The nodes of the accessibility tree with this role (``push button``) and name (exact, else contained)."""
        from deskctl.observe import accessibility

        return accessibility.find(self.accessibility_tree(window), role, name)

    def click_element(self, node: Any, button: str = "left") -> None:
        """Click the centre of a node's bounds (a node of :meth:`accessibility_tree` or :meth:`find`)."""
        from collections.abc import Mapping

        from deskctl.observe.accessibility import center_of

        x, y = center_of(self, node)
        name = node.get("name") if isinstance(node, Mapping) else getattr(node, "name", "")
        role = node.get("role") if isinstance(node, Mapping) else getattr(node, "role", "")
        click = act.Click(x, y, act.validate_button(button), 1)
        self._observed_step({"kind": "click_element", "role": role, "name": name, "x": x, "y": y, "button": button},
                            None, lambda: self._act(click))

    def _observed_step(self, fields: dict[str, Any], kind: str | None, perform: Callable[[], Any]) -> Any:
        """Run ``perform`` as an action counted as ``kind`` (None: ``perform`` counts itself), recorded as the step
        ``fields`` when the session is recorded."""
        self._check_usable()
        result: list[Any] = []

        def run() -> None:
            if kind is None:
                result.append(perform())
                return
            with self._guard(kind):
                result.append(perform())

        if self._recorder is not None:
            self._recorder.step(self, fields, run)
        else:
            run()
        return result[0]

    def wait_for(self, what: str | Callable[[Desktop], Any], timeout: float = 30.0, interval: float = 0.25) -> Any:
        """Wait until a window whose title contains ``what`` exists (returns that title), or until
        ``what(desktop)`` is truthy (returns its value). ``wait.timeout`` (exit 6) when ``timeout`` passes."""
        from deskctl.call_args import wait_terms

        late = wait_terms(what, timeout, interval, self._provider_name)
        deadline = time.monotonic() + timeout
        while True:
            value = (next((t for t in self.window_titles() if what in t), None) if isinstance(what, str)
                     else what(self))
            if value:
                return value
            if time.monotonic() >= deadline:
                raise late
            time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def open_desktop(
    provider: str = DEFAULT_PROVIDER,
    *,
    platform: str = "ubuntu",
    geometry: str | None = "1024x768",
    window_geometry: str | None = None,
    start_url: str | None = None,
    window_manager: bool = False,
    ttl: str | float | None = None,
    max_minutes: float | None = None,
    max_usd: float | None = None,
    budget: str | None = None,
    unknown_cost: str | None = None,
    labels: Mapping[str, str] | None = None,
    provider_options: Mapping[str, Any] | None = None,
    ready_timeout: float = 120.0,
    detached: bool = False,
    preflight: bool = True,
    ledger: Ledger | None = None,
    spec: DesktopSpec | None = None,
    record: str | os.PathLike[str] | None = None,
    record_settle: float = 0.0,
    video: Any = False,
    from_snapshot: Snapshot | str | None = None,
    ready_when: Any = None,
) -> Desktop:
    """Open a desktop and return it, ready and verified. Use it as a context manager::

        with deskctl.open_desktop("xvfb", geometry="1280x800") as desk:
            desk.click(10, 20)

    ``geometry=None`` or ``"native"`` accepts the provider's own size. Raises the deskctl error of the step that
    failed (preflight: exit 3, budget: 4, infrastructure: 20); nothing is left behind when it raises.

    ``record=DIR`` writes a trajectory there (docs/recording.md): a JSONL row per action with the screen before
    and after it; ``record_settle`` is how long the after shot may wait for the screen to change; ``video=True``
    (or :class:`~deskctl.recording_video.VideoOptions`) adds the session's video (docs/observation.md).

    ``from_snapshot``: start from a snapshot (:meth:`Desktop.snapshot`; a name or id of the ledger) instead of
    the provider's fresh desktop (docs/episodes.md).

    ``ready_when``: then wait (within ``ready_timeout`` more seconds) for the application: a window title,
    ``{"url": ...}`` (a DevTools page), ``{"command": ...}`` (exits 0) or a callable (docs/observation.md); not in
    time is ``readiness.timeout`` (exit 20) and the desktop is destroyed.
    """
    if spec is None:
        from deskctl.spec import DesktopSpec

        spec = DesktopSpec.build(
            provider=provider, platform=platform, geometry=geometry if geometry is not None else "native",
            window_geometry=window_geometry, start_url=start_url, window_manager=window_manager,
            ttl_seconds=ttl, max_minutes=max_minutes, max_usd=max_usd, budget=budget, unknown_cost=unknown_cost,
            labels=dict(labels or {}),
            provider_options=dict(provider_options or {}),
        )
    if ready_when is not None:
        from deskctl.observe.readiness import condition

        condition(ready_when)  # a malformed condition is refused before anything is created
    if from_snapshot is not None:
        from deskctl.episodes import open_from_snapshot

        if video:
            raise UsageError("a video of a session started from a snapshot is not supported",
                             code="usage.unsupported")

        desk = open_from_snapshot(spec, from_snapshot, ledger=ledger, desktop_class=Desktop,
                                  ready_timeout=ready_timeout,
                                  detached=detached, run_preflight=preflight, record=record,
                                  record_settle=record_settle)
    else:
        desk = Desktop(spec, ledger=ledger, ready_timeout=ready_timeout, detached=detached,
                       run_preflight=preflight, record=record, record_settle=record_settle, video=video)
        desk.open()
    if ready_when is not None:
        from deskctl.observe.readiness import ready_or_destroyed

        ready_or_destroyed(desk, ready_when, ready_timeout)
    return desk


def attach(session_id: str, *, ledger: Ledger | None = None) -> Desktop:
    """Reach a running session (usually a detached one) by id. Leaving a ``with`` block releases it without
    destroying it; :meth:`Desktop.close` destroys it."""
    from deskctl.ledger import open_ledger

    book = ledger or open_ledger()
    record = book.get(session_id)
    if record is None:
        raise NotFound(f"no session {session_id!r} in the ledger", remedy="deskctl ls --all")
    return Desktop.from_record(record, ledger=book, owns_ledger=ledger is None)
