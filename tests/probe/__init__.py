"""A probe window for tests: an X client that covers a desktop and records the input events it receives.

It connects like the driver does (:func:`deskctl.providers._x11.connect_display`), so it reaches any X-based
provider's display: the local socket, a socket at any path, or a forwarded TCP port. It never sleeps: every
wait is a ``select`` on the X connection until a condition holds or a deadline passes.

    with Probe.open(X11Address(":5"), cookie) as probe:
        desk.click(10, 20)
        probe.wait_for(lambda p: p.presses(1), "a left click")
        assert probe.presses(1)[0].pos == (10, 20)
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deskctl.providers._x11 import X11Address, connect_display

__all__ = ["Probe", "ProbeEvent"]

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class ProbeEvent:
    kind: str  # press | release | motion | key | key_release
    x: int = 0
    y: int = 0
    button: int = 0
    keysym: int = 0
    char: str = ""
    state: int = 0

    @property
    def pos(self) -> tuple[int, int]:
        return (self.x, self.y)


def _char(keysym: int) -> str:
    names = {0xFF0D: "\n", 0xFF09: "\t", 0xFF08: "\b", 0x20: " "}
    if keysym in names:
        return names[keysym]
    if 0x20 < keysym <= 0xFF:
        return chr(keysym)
    if keysym & 0xFF000000 == 0x01000000:
        return chr(keysym & 0x00FFFFFF)
    return ""


class Probe:
    """A full-screen override-redirect window at 0,0 that has the input focus and records what reaches it."""

    def __init__(self, address: X11Address, cookie: bytes | None) -> None:
        from Xlib import X

        self.display: Any = connect_display(address, cookie)
        screen = self.display.screen()
        geom = screen.root.get_geometry()
        self.size = (int(geom.width), int(geom.height))
        self.events: list[ProbeEvent] = []
        self.window: Any = screen.root.create_window(
            0, 0, self.size[0], self.size[1], 0, screen.root_depth,
            X.InputOutput, X.CopyFromParent,
            background_pixel=screen.white_pixel,
            override_redirect=True,
            event_mask=(X.ButtonPressMask | X.ButtonReleaseMask | X.PointerMotionMask | X.KeyPressMask
                        | X.KeyReleaseMask | X.StructureNotifyMask | X.ExposureMask),
        )
        self.window.map()
        self.display.flush()
        mapped = False

        def is_mapped(_: Probe) -> bool:
            return mapped

        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while not mapped:
            for event in self._next_events(deadline):
                if event.type == X.MapNotify and event.window.id == self.window.id:
                    mapped = True
            if time.monotonic() >= deadline and not mapped:
                raise AssertionError("the probe window was never mapped")
        self.window.raise_window()
        self.window.set_input_focus(X.RevertToParent, X.CurrentTime)
        self.display.sync()

    @classmethod
    def open(cls, address: X11Address, cookie: bytes | None) -> Probe:
        return cls(address, cookie)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.window.destroy()
            self.display.sync()
        except Exception:  # the display may already be gone (tests that kill it)
            pass
        try:
            self.display.close()
        except Exception:
            pass

    def paint(self, x: int, y: int, width: int, height: int, rgb: tuple[int, int, int]) -> None:
        """Fill a rectangle of the probe window with a colour (a 24-bit TrueColor screen), drawn when this returns."""
        red, green, blue = rgb
        gc = self.window.create_gc(foreground=(red << 16) | (green << 8) | blue)
        self.window.fill_rectangle(gc, x, y, width, height)
        gc.free()
        self.display.sync()

    # -- events ----------------------------------------------------------------------------------------------
    def _next_events(self, deadline: float, limit: int | None = None) -> list[Any]:
        """Events already queued (at most ``limit``), else those that arrive before ``deadline`` (one select)."""
        out: list[Any] = []
        if not self.display.pending_events():
            select.select([self.display.fileno()], [], [], max(0.0, deadline - time.monotonic()))
        while (limit is None or len(out) < limit) and self.display.pending_events():
            out.append(self.display.next_event())
        return out

    def _record(self, event: Any) -> None:
        from Xlib import X

        kind = {X.ButtonPress: "press", X.ButtonRelease: "release", X.MotionNotify: "motion",
                X.KeyPress: "key", X.KeyRelease: "key_release"}.get(event.type)
        if event.type == X.MappingNotify:
            self.display.refresh_keyboard_mapping(event)
            return
        if kind is None:
            return
        if kind in ("key", "key_release"):
            index = 1 if event.state & X.ShiftMask else 0
            keysym = self.display.keycode_to_keysym(event.detail, index) or self.display.keycode_to_keysym(
                event.detail, 0)
            self.events.append(ProbeEvent(kind, event.event_x, event.event_y, 0, int(keysym), _char(int(keysym)),
                                          int(event.state)))
        else:
            self.events.append(ProbeEvent(kind, event.event_x, event.event_y, int(event.detail), state=int(
                event.state)))

    def pump(self, deadline: float) -> None:
        # a batch at a time: a condition met by the first events of a flood (100k typed characters, parsed by
        # python-xlib at ~10k a second) is seen at once, not after the whole flood
        for event in self._next_events(deadline, limit=512):
            self._record(event)

    def wait_for(self, condition: Callable[[Probe], Any], what: str, timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Process events until ``condition(self)`` is truthy (returned), or fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            result = condition(self)
            if result:
                return result
            if time.monotonic() >= deadline:
                raise AssertionError(f"the probe never saw {what}; it saw {self.summary()}")
            self.pump(deadline)

    def sync_point(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Wait until every event generated before this call has been received: a round trip to the server,
        then a marker event the probe sends itself."""
        from Xlib import X
        from Xlib.protocol import event as xevent

        self.display.sync()
        marker = xevent.ClientMessage(window=self.window, client_type=self.display.intern_atom("_PROBE_SYNC"),
                                      data=(32, [0, 0, 0, 0, 0]))
        self.window.send_event(marker, event_mask=0, propagate=False)
        self.display.flush()
        deadline = time.monotonic() + timeout
        while True:
            for event in self._next_events(deadline):
                if event.type == X.ClientMessage:
                    return
                self._record(event)
            if time.monotonic() >= deadline:
                raise AssertionError("the probe's own sync event never came back")

    # -- queries ---------------------------------------------------------------------------------------------
    def presses(self, button: int | None = None) -> list[ProbeEvent]:
        return [e for e in self.events if e.kind == "press" and (button is None or e.button == button)]

    def releases(self, button: int | None = None) -> list[ProbeEvent]:
        return [e for e in self.events if e.kind == "release" and (button is None or e.button == button)]

    def motions(self) -> list[ProbeEvent]:
        return [e for e in self.events if e.kind == "motion"]

    def key_presses(self) -> list[ProbeEvent]:
        return [e for e in self.events if e.kind == "key"]

    def text(self) -> str:
        return "".join(e.char for e in self.key_presses())

    def clear(self) -> None:
        self.events.clear()

    def summary(self) -> str:
        shown = [f"{e.kind}({e.button or e.char or hex(e.keysym)}@{e.x},{e.y})" for e in self.events[-20:]]
        return f"{len(self.events)} events: " + (", ".join(shown) or "none")
