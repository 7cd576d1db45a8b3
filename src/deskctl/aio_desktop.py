"""The awaited desktop of :mod:`deskctl.aio`: :class:`AsyncDesktop` mirrors every method and property of
:class:`deskctl.session.Desktop` as a coroutine run on the desktop's own worker thread, and closes it shielded
from cancels. :func:`deskctl.aio.open_desktop` and :func:`deskctl.aio.attach` make it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from deskctl.aio_owner import T, _Cancelled, _in_own_thread, _Owner, _to_the_end, _Worker
from deskctl.call_args import wait_terms
from deskctl.session import Desktop, State

if TYPE_CHECKING:
    from deskctl import actions as act
    from deskctl.browser import BrowserEndpoint, Page
    from deskctl.episodes.store import Snapshot
    from deskctl.ledger import Ledger, ModelUsage
    from deskctl.observe.accessibility import AccessibilityTree, AccessibleNode
    from deskctl.observe.windows import Window
    from deskctl.providers.base import ExecResult, Provider, RawFrame, RemoteHandle, Screenshot
    from deskctl.recording import Recorder
    from deskctl.spec import DesktopSpec

__all__ = ["AsyncDesktop"]


class AsyncDesktop:
    """One desktop session, awaited. Made by :func:`open_desktop` or :func:`attach`, never directly.

    Every method of :class:`deskctl.session.Desktop` is here with the same parameters, as a coroutine (a test
    pins that); the properties are the same too. :attr:`sync` is the underlying session.
    """

    def __init__(self, desk: Desktop, owner: _Owner) -> None:
        self._desk = desk
        self._owner = owner
        # one worker per desktop: its calls keep their order and never share an X connection between threads
        self._worker = _Worker(f"deskctl-aio-{desk.id}")

    # -- the sync session's properties ---------------------------------------------------------------
    @property
    def sync(self) -> Desktop:
        """The :class:`~deskctl.session.Desktop` this wraps (call it only from a thread, not the event loop)."""
        return self._desk

    @property
    def id(self) -> str:
        return self._desk.id

    @property
    def spec(self) -> DesktopSpec:
        return self._desk.spec

    @property
    def state(self) -> State:
        return self._desk.state

    @property
    def handle(self) -> RemoteHandle | None:
        return self._desk.handle

    @property
    def detached(self) -> bool:
        return self._desk.detached

    @property
    def end_reason(self) -> str | None:
        return self._desk.end_reason

    @property
    def provider_name(self) -> str:
        return self._desk.provider_name

    @property
    def provider(self) -> Provider:
        return self._desk.provider

    @property
    def ledger(self) -> Ledger:
        return self._desk.ledger

    @property
    def size(self) -> tuple[int, int]:
        return self._desk.size

    @property
    def expires_at(self) -> float | None:
        return self._desk.expires_at

    @property
    def recording(self) -> Recorder | None:
        return self._desk.recording

    def __repr__(self) -> str:
        return f"<AsyncDesktop {self._desk.id} {self._desk.spec.provider} {self._desk.state.value}>"

    # -- plumbing ------------------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            work = self._worker.submit(fn, *args)
        except RuntimeError:  # closed (the worker is shut down): the session itself says why it cannot be used
            return await asyncio.to_thread(fn, *args)
        # a cancel before the call starts drops it from the queue; one after leaves it to finish in its thread
        return await work

    async def _end(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a closing call (destroy or release) to its end on its own thread, shielded from cancels; it
        does not queue behind a call still running on the worker (destroying the desktop ends that call)."""
        try:
            await _to_the_end(_in_own_thread(fn, *args, name=f"deskctl-aio-close-{self._desk.id}"))
        finally:
            self._owner.done()
            # calls still queued run after it and get the session's own SessionClosed, not a CancelledError
            self._worker.shutdown()

    # -- lifecycle -----------------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncDesktop:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        seen: BaseException | None = exc
        if isinstance(exc, asyncio.CancelledError):
            seen = _Cancelled("the task was cancelled")
        provider = self._desk.spec.provider
        try:
            await self._end(self._desk.__exit__, type(seen) if seen else None, seen, tb)
        except asyncio.CancelledError as cancel:
            raise self._owner.after_cancel(cancel, provider)
        if isinstance(exc, asyncio.CancelledError) and self._owner.signum is not None:
            raise self._owner.after_cancel(exc, provider)

    async def close(self) -> None:
        """Destroy the desktop (confirmed), record the end and the cost. Idempotent; shielded from cancels."""
        await self._end(self._desk.close)

    async def release(self) -> None:
        """Let go of the desktop without destroying it (detached sessions, :func:`attach`)."""
        await self._end(self._desk.release)

    # -- actions: the sync session's, one by one -----------------------------------------------------
    # Written out, not generated from deskctl.action_table: a static signature is what mypy --strict checks a
    # caller against and what an IDE shows. tests/unit/test_action_surfaces.py proves each of the table's aio
    # actions is here, a coroutine with the Desktop method's signature, and that none is here the table lacks.
    async def act(self, action: act.Action) -> None:
        await self._call(self._desk.act, action)

    async def annotate(self, step: int | None = None, /, **fields: Any) -> int:
        return await self._call(lambda: self._desk.annotate(step, **fields))

    async def meter(self, role: str, model: str, input_tokens: int = 0, output_tokens: int = 0,
                    usd: float | None = None) -> ModelUsage:
        """:meth:`deskctl.Desktop.meter`: record a model's token use beside the desktop's cost (``budget.exceeded``
        ends the session when it passes a cap)."""
        return await self._call(lambda: self._desk.meter(role, model, input_tokens, output_tokens, usd))

    async def screenshot(self, *, max_size: Any = None, scale: Any = None, region: Any = None) -> Screenshot:
        return await self._call(lambda: self._desk.screenshot(max_size=max_size, scale=scale, region=region))

    async def raw_frame(self) -> RawFrame:
        return await self._call(self._desk.raw_frame)

    async def click(self, x: int | None = None, y: int | None = None, button: str = "left", count: int = 1, *,
                    space: Any = None) -> None:
        await self._call(lambda: self._desk.click(x, y, button, count, space=space))

    async def double_click(self, x: int | None = None, y: int | None = None, button: str = "left", *,
                           space: Any = None) -> None:
        await self._call(lambda: self._desk.double_click(x, y, button, space=space))

    async def triple_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.triple_click(x, y, space=space))

    async def right_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.right_click(x, y, space=space))

    async def middle_click(self, x: int | None = None, y: int | None = None, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.middle_click(x, y, space=space))

    async def move(self, x: int, y: int, *, space: Any = None) -> None:
        await self._call(lambda: self._desk.move(x, y, space=space))

    async def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left", *, space: Any = None) -> None:
        await self._call(lambda: self._desk.drag(x1, y1, x2, y2, button, space=space))

    async def scroll(self, x: int | None = None, y: int | None = None, dx: int = 0, dy: int = 0, *,
                     space: Any = None) -> None:
        await self._call(lambda: self._desk.scroll(x, y, dx, dy, space=space))

    async def mouse_down(self, x: int, y: int, button: str = "left", *, space: Any = None) -> None:
        await self._call(lambda: self._desk.mouse_down(x, y, button, space=space))

    async def mouse_up(self, x: int, y: int, button: str = "left", *, space: Any = None) -> None:
        await self._call(lambda: self._desk.mouse_up(x, y, button, space=space))

    async def type(self, text: str) -> None:
        await self._call(self._desk.type, text)

    async def key(self, chord: str) -> None:
        await self._call(self._desk.key, chord)

    async def key_down(self, key: str) -> None:
        await self._call(self._desk.key_down, key)

    async def key_up(self, key: str) -> None:
        await self._call(self._desk.key_up, key)

    async def cursor_position(self) -> tuple[int, int]:
        return await self._call(self._desk.cursor_position)

    async def exec(self, command: str, timeout: float = 60.0, *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, user: str | None = None,
                   background: bool = False, on_output: Callable[[str, str], None] | None = None) -> ExecResult:
        """As :meth:`Desktop.exec`; ``on_output`` is called from the desktop's worker thread (hand the text to
        the event loop with ``loop.call_soon_threadsafe``)."""
        return await self._call(lambda: self._desk.exec(command, timeout, cwd=cwd, env=env, user=user,
                                                        background=background, on_output=on_output))

    async def upload(self, local: str | os.PathLike[str], remote: str) -> None:
        await self._call(self._desk.upload, local, remote)

    async def download(self, remote: str, local: str | os.PathLike[str]) -> None:
        await self._call(self._desk.download, remote, local)

    async def clipboard_get(self) -> str:
        return await self._call(self._desk.clipboard_get)

    async def clipboard_set(self, text: str) -> None:
        await self._call(self._desk.clipboard_set, text)

    async def open_url(self, url: str, browser: str | None = None) -> None:
        await self._call(self._desk.open_url, url, browser)

    async def launch(self, app: str, *args: str) -> int | None:
        return await self._call(self._desk.launch, app, *args)

    async def window_titles(self) -> list[str]:
        return await self._call(self._desk.window_titles)

    async def browser(self) -> BrowserEndpoint:
        return await self._call(self._desk.browser)

    async def browser_pages(self) -> list[Page]:
        return await self._call(self._desk.browser_pages)

    # -- episodes (docs/episodes.md) -------------------------------------------------------------------------
    async def snapshot(self, name: str, ttl: float | None = None, replace: bool = False) -> Snapshot:
        return await self._call(self._desk.snapshot, name, ttl, replace)

    async def restore(self, name: Snapshot | str) -> Snapshot:
        return await self._call(self._desk.restore, name)

    async def request_takeover(self, reason: str, timeout: float | None = None) -> float:
        return await self._call(self._desk.request_takeover, reason, timeout)

    # -- deskctl.observe (docs/observation.md) ------------------------------------------------------------
    async def windows(self) -> list[Window]:
        return await self._call(self._desk.windows)

    async def focus(self, window: Any) -> Window:
        return await self._call(self._desk.focus, window)

    async def move_window(self, window: Any, x: int, y: int, width: int, height: int) -> Window:
        return await self._call(self._desk.move_window, window, x, y, width, height)

    async def wait_until_stable(self, region: Any = None, quiet_ms: int = 500, timeout: float = 30.0) -> float:
        return await self._call(self._desk.wait_until_stable, region, quiet_ms, timeout)

    async def accessibility_tree(self, window: str | None = None, max_depth: int = 40,
                                 max_nodes: int = 5000) -> AccessibilityTree:
        return await self._call(self._desk.accessibility_tree, window, max_depth, max_nodes)

    async def find(self, role: str | None = None, name: str | None = None,
                   window: str | None = None) -> list[AccessibleNode]:
        return await self._call(self._desk.find, role, name, window)

    async def click_element(self, node: Any, button: str = "left") -> None:
        await self._call(self._desk.click_element, node, button)

    async def wait_for(self, what: str | Callable[[AsyncDesktop], Any], timeout: float = 30.0,
                       interval: float = 0.25) -> Any:
        """The sync :meth:`~deskctl.Desktop.wait_for`, polling without a thread: ``what`` is a window title or a
        callable taking this desktop (a coroutine function too); cancellable between polls."""
        late = wait_terms(what, timeout, interval, self._desk.spec.provider)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if isinstance(what, str):
                value: Any = next((t for t in await self.window_titles() if what in t), None)
            else:
                value = what(self)
                if inspect.isawaitable(value):
                    value = await value
            if value:
                return value
            if loop.time() >= deadline:
                raise late
            await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))

    def labels(self) -> dict[str, str]:
        return self._desk.labels()
