"""A key recorder for tests that type long texts: a focused full-screen window whose KeyPress events are read
as raw 32-byte packets straight off its own X connection, in a thread, so that a million keys are recorded in
seconds (python-xlib parses an event in tens of microseconds).

    with KeyRecorder.open(X11Address(":5"), cookie) as keys:
        desk.type(text)
        assert keys.text() == text

:meth:`KeyRecorder.text` is a sync point: it asks the server for a reply on the recorder's connection; the X
server sends every event it delivered before that request first, so the reply marks the end of what was typed
before the call. It translates keycodes with the keymap as it is at that moment (fine as long as no borrowed
keycode was rebound while typing, which holds for fewer distinct missing symbols than spare keycodes).
"""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

from deskctl.providers._x11 import X11Address, connect_display
from probe import _char

__all__ = ["KeyRecorder"]

_KEY_PRESS, _REPLY, _GENERIC_EVENT = 2, 1, 35
_PACKET = struct.Struct("=BB26xH2x")  # type, detail (keycode), state: the fields of a core key event we need
_GET_INPUT_FOCUS = struct.pack("=BxH", 43, 1)  # a request with a reply and no side effect


class KeyRecorder:
    def __init__(self, address: X11Address, cookie: bytes | None, timeout: float = 30.0) -> None:
        from Xlib import X

        self.address, self.cookie, self.timeout = address, cookie, timeout
        self.display: Any = connect_display(address, cookie)
        screen = self.display.screen()
        geom = screen.root.get_geometry()
        self.window: Any = screen.root.create_window(
            0, 0, int(geom.width), int(geom.height), 0, screen.root_depth, X.InputOutput, X.CopyFromParent,
            background_pixel=screen.white_pixel, override_redirect=True,
            event_mask=X.KeyPressMask | X.StructureNotifyMask,
        )
        self.window.map()
        self.display.flush()
        deadline = time.monotonic() + timeout
        while True:  # next_event blocks until the server sends the MapNotify
            event = self.display.next_event()
            if event.type == X.MapNotify and event.window.id == self.window.id:
                break
            if time.monotonic() > deadline:
                raise AssertionError("the key recorder's window was never mapped")
        self.window.set_input_focus(X.RevertToParent, X.CurrentTime)
        self.display.sync()
        # From here on python-xlib no longer reads this socket: the thread does, and text() writes to it.
        self._sock = self.display.display.socket
        self._buffer = bytearray(self.display.display.data_recv)
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="key-recorder", daemon=True)
        self._reader.start()

    @classmethod
    def open(cls, address: X11Address, cookie: bytes | None) -> KeyRecorder:
        return cls(address, cookie)

    def __enter__(self) -> KeyRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 20)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    self._closed = True
                else:
                    self._buffer += data
                self._cond.notify_all()
            if not data:
                return

    def _packets_until_reply(self) -> list[tuple[int, int, int]]:
        """Every packet up to the first reply (consumed from the buffer), waiting for the reply to arrive."""
        deadline = time.monotonic() + self.timeout
        scanned = 0
        with self._cond:
            while True:
                end = len(self._buffer) - len(self._buffer) % 32
                for offset in range(scanned, end, 32):
                    kind = self._buffer[offset] & 0x7F
                    if kind == _GENERIC_EVENT:
                        raise AssertionError("the key recorder received a generic event it did not ask for")
                    if kind == _REPLY:
                        packets = list(_PACKET.iter_unpack(memoryview(self._buffer)[:offset]))
                        del self._buffer[: offset + 32]
                        return packets
                scanned = end
                if self._closed:
                    raise AssertionError("the key recorder's connection closed before its sync reply")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no sync reply within {self.timeout:g}s; {scanned // 32} packets read")
                self._cond.wait(remaining)

    def keycodes(self) -> list[tuple[int, int]]:
        """(keycode, modifier state) of every key press delivered so far (a sync point; see the module doc)."""
        self._sock.sendall(_GET_INPUT_FOCUS)
        return [(detail, state) for kind, detail, state in self._packets_until_reply() if kind & 0x7F == _KEY_PRESS]

    def text(self) -> str:
        """The characters of every key press delivered so far (Return is a newline, Tab a tab)."""
        presses = self.keycodes()
        other = connect_display(self.address, self.cookie)
        try:
            first = int(other.display.info.min_keycode)
            count = int(other.display.info.max_keycode) - first + 1
            keymap = [tuple(int(s) for s in row) for row in other.get_keyboard_mapping(first, count)]
        finally:
            other.close()
        chars: list[str] = []
        for keycode, state in presses:
            row = keymap[keycode - first]
            keysym = row[1] if state & 1 and len(row) > 1 and row[1] else row[0]
            chars.append(_char(keysym))
        return "".join(chars)

    def close(self) -> None:
        try:
            self.display.close()
        except Exception:  # the server may be gone already
            pass
        self._reader.join(timeout=5)
