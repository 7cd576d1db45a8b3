"""The keyboard half of :class:`~deskctl.core.x11.X11Driver`: keymap lookup, borrowed keycodes, typing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deskctl.core.x11keys import (
    _BORROWED_PROPERTY,
    _FAKE_INPUT_SIZE,
    _SHIFT,
    _TYPE_BATCH,
    keysym_for_char,
    keysym_for_key,
)
from deskctl.errors import ProviderApiError

if TYPE_CHECKING:
    import contextlib
    import threading

    from Xlib.display import Display

    from deskctl.core.x11auth import X11Address
    from deskctl.core.x11connect import _Watchdog


class _Encoded:
    """Requests already in wire form, in python-xlib's request queue (which only reads ``_binary``)."""

    __slots__ = ("_binary",)

    def __init__(self, binary: bytes) -> None:
        self._binary = binary


class _Keyboard:
    """Mixin of :class:`~deskctl.core.x11.X11Driver`, which sets these attributes and defines these helpers."""

    if TYPE_CHECKING:
        address: X11Address
        provider: str | None
        _display: Display
        _root: Any
        _lock: threading.RLock
        _closed: bool
        _watchdog: _Watchdog
        _keymap_first: int
        _keymap_last: int
        _keymap: list[tuple[int, ...]]
        _keysym_index: dict[int, tuple[int, int]]
        _tap_cache: dict[str, bytes]
        _fake_input_cache: dict[tuple[int, int], bytes]
        _xtest_major: int

        def _errors(self, doing: str) -> contextlib.AbstractContextManager[None]: ...
        def _fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None: ...
        def _check_alive(self) -> None: ...
        def _stop_if_closed(self) -> None: ...

    # -- keyboard ----------------------------------------------------------------------------------------------
    def _load_keymap(self) -> None:
        count = self._keymap_last - self._keymap_first + 1
        self._keymap = [tuple(int(s) for s in row) for row in
                        self._display.get_keyboard_mapping(self._keymap_first, count)]
        self._index_keymap()

    def _index_keymap(self) -> None:
        """Rebuild the keysym index after any change of ``_keymap`` (and forget what was encoded with it)."""
        index: dict[int, tuple[int, int]] = {}
        for offset, row in enumerate(self._keymap):
            for position, sym in enumerate(row[:2]):
                if sym and (sym not in index or position < index[sym][1]):
                    index[sym] = (self._keymap_first + offset, position)
        self._keysym_index = index
        self._tap_cache.clear()

    def _lookup(self, keysym: int) -> tuple[int, int] | None:
        """(keycode, index) for ``keysym`` with the lowest index (0 plain, 1 shifted), or None."""
        return self._keysym_index.get(keysym)

    def _keycode_for(self, keysym: int) -> tuple[int, bool]:
        """(keycode, needs shift) for ``keysym``, binding a spare keycode when the keymap lacks it."""
        found = self._lookup(keysym)
        if found is None:
            self._load_keymap()  # another client may have changed it since
            found = self._lookup(keysym)
        if found is None:
            found = (self._borrow_keycode(keysym), 0)
        keycode, index = found
        return keycode, index == 1

    # The borrowed keycodes, least recently bound first, live on the root window as CARDINALs: for each one
    # [keycode, n, original keysym 1..n], so that any driver of the display can reuse and restore them.
    def _read_borrowed(self, atom: int) -> list[tuple[int, tuple[int, ...]]]:
        from Xlib import Xatom

        prop = self._root.get_property(atom, Xatom.CARDINAL, 0, 65536)
        values = [int(v) for v in prop.value] if prop is not None and prop.format == 32 else []
        records: list[tuple[int, tuple[int, ...]]] = []
        i = 0
        while i + 1 < len(values):
            keycode, count = values[i], values[i + 1]
            records.append((keycode, tuple(values[i + 2 : i + 2 + count])))
            i += 2 + count
        return [(k, o) for k, o in records if self._keymap_first <= k <= self._keymap_last]

    def _write_borrowed(self, atom: int, records: list[tuple[int, tuple[int, ...]]]) -> None:
        from Xlib import Xatom

        if not records:
            self._root.delete_property(atom)
            return
        flat: list[int] = []
        for keycode, original in records:
            flat += [keycode, len(original), *original]
        self._root.change_property(atom, Xatom.CARDINAL, 32, flat)

    def _spare_keycodes(self, taken: set[int]) -> list[int]:
        """Keycodes deskctl may bind: unbound ones first, then those bound only to vendor (XF86) keysyms, which
        no deskctl key name reaches; highest first, as low keycodes are the real keyboard's."""
        empty: list[int] = []
        vendor: list[int] = []
        for offset, row in reversed(list(enumerate(self._keymap))):
            keycode = self._keymap_first + offset
            if keycode in taken:
                continue
            if all(sym == 0 for sym in row):
                empty.append(keycode)
            elif all(sym == 0 or sym & 0xFFFF0000 == 0x10080000 for sym in row):
                vendor.append(keycode)
        return empty + vendor

    def _borrow_keycode(self, keysym: int) -> int:
        """Bind ``keysym`` to a spare keycode (or the least recently bound borrowed one) under a server grab."""
        display = self._display
        atom = display.intern_atom(_BORROWED_PROPERTY)
        display.grab_server()
        try:
            self._load_keymap()
            records = self._read_borrowed(atom)
            spare = self._spare_keycodes({k for k, _ in records})
            if spare:
                keycode = spare[0]
                original = self._keymap[keycode - self._keymap_first]
            elif records:
                keycode, original = records[0]
            else:
                raise ProviderApiError(
                    f"no spare keycode on X display {self.address.display} to type keysym {keysym:#x}",
                    provider=self.provider,
                )
            width = max(2, len(self._keymap[0]) if self._keymap else 2)
            row = (keysym, keysym) + (0,) * (width - 2)
            display.change_keyboard_mapping(keycode, [row])
            self._write_borrowed(atom, [r for r in records if r[0] != keycode] + [(keycode, tuple(original))])
            self._keymap[keycode - self._keymap_first] = row
            self._index_keymap()
            display.sync()
        finally:
            display.ungrab_server()
            display.flush()
        self._drain_events()
        return keycode

    def _drain_events(self) -> None:
        # MappingNotify goes to every client; read them so python-xlib's queue does not grow.
        while self._display.pending_events():
            self._display.next_event()

    def restore_keymap(self) -> None:
        """Give back every keycode deskctl borrowed on this display, with its original keysyms."""
        with self._lock, self._errors("restore the keymap"):
            display = self._display
            atom = display.intern_atom(_BORROWED_PROPERTY)
            display.grab_server()
            try:
                if not self._keymap:
                    self._load_keymap()
                width = max(2, len(self._keymap[0]) if self._keymap else 2)
                for keycode, original in self._read_borrowed(atom):
                    row = tuple(original[:width]) + (0,) * (width - len(original[:width]))
                    display.change_keyboard_mapping(keycode, [row])
                self._write_borrowed(atom, [])
                display.sync()
            finally:
                display.ungrab_server()
                display.flush()
            self._load_keymap()
            self._drain_events()

    def _key_event(self, keycode: int, press: bool) -> None:
        from Xlib import X

        self._fake(X.KeyPress if press else X.KeyRelease, keycode)

    def _encoded_fake_input(self, event_type: int, detail: int) -> bytes:
        """One XTEST FakeInput request as python-xlib would encode it (core device, current time, no motion)."""
        key = (event_type, detail)
        encoded = self._fake_input_cache.get(key)
        if encoded is None:
            from Xlib.ext import xtest

            encoded = bytes(xtest.FakeInput._request.to_binary(
                opcode=self._xtest_major, event_type=event_type, detail=detail, time=0, root=0, x=0, y=0))
            self._fake_input_cache[key] = encoded
        return encoded

    def _encoded_tap(self, keysym: int) -> bytes:
        """The FakeInput requests that tap ``keysym`` (with Shift around it when it is the shifted symbol);
        binds a spare keycode first when the keymap lacks it."""
        from Xlib import X

        keycode, shift = self._keycode_for(keysym)
        press, release = self._encoded_fake_input(X.KeyPress, keycode), self._encoded_fake_input(X.KeyRelease, keycode)
        if not shift:
            return press + release
        shift_code = self._keycode_for(_SHIFT)[0]
        return (self._encoded_fake_input(X.KeyPress, shift_code) + press + release
                + self._encoded_fake_input(X.KeyRelease, shift_code))

    def _queue_encoded(self, chunks: list[bytes]) -> None:
        """Put pre-encoded requests (none with a reply) on python-xlib's request queue as one block, counting
        each in its sequence numbers so that the replies and errors that follow are matched right."""
        if not chunks:
            return
        data = b"".join(chunks)
        conn = self._display.display
        if conn.socket_error:
            raise conn.socket_error
        conn.request_queue_lock.acquire()
        try:
            conn.request_serial = (conn.request_serial + len(data) // _FAKE_INPUT_SIZE) % 65536
            conn.request_queue.append((_Encoded(data), False))
        finally:
            conn.request_queue_lock.release()

    def key(self, *keys: str) -> None:
        """Press a chord (``key("ctrl", "s")``): modifiers down in order, the last key tapped, all released in
        reverse order. A character that needs Shift gets it (``key("ctrl", "S")`` is ctrl+shift+s)."""
        with self._lock, self._errors("press keys"):
            keysyms = [keysym_for_key(k) for k in keys]
            codes: list[int] = []
            need_shift = False
            for keysym in keysyms:
                keycode, shift = self._keycode_for(keysym)
                codes.append(keycode)
                need_shift = need_shift or shift
            if need_shift and _SHIFT not in keysyms:
                codes.insert(len(codes) - 1, self._keycode_for(_SHIFT)[0])
            for keycode in codes:
                self._key_event(keycode, True)
            for keycode in reversed(codes):
                self._key_event(keycode, False)
            self._check_alive()

    def key_down(self, key: str) -> None:
        """Hold a key down; a character that needs Shift (``"A"``) holds Shift with it until :meth:`key_up`."""
        with self._lock, self._errors("press a key"):
            keycode, shift = self._keycode_for(keysym_for_key(key))
            if shift:
                self._key_event(self._keycode_for(_SHIFT)[0], True)
            self._key_event(keycode, True)
            self._check_alive()

    def key_up(self, key: str) -> None:
        with self._lock, self._errors("release a key"):
            keycode, shift = self._keycode_for(keysym_for_key(key))
            self._key_event(keycode, False)
            if shift:
                self._key_event(self._keycode_for(_SHIFT)[0], False)
            self._check_alive()

    def type_text(self, text: str) -> None:
        """Type ``text`` (any Unicode; newline is Return, tab is Tab) as key taps. Linear in the length of the
        text: each distinct character is encoded once, and the taps go out in batches of ``_TYPE_BATCH``
        characters, each confirmed by a round trip (so an error or a lost server is reported by the batch in
        which it happens)."""
        with self._lock, self._errors("type text"):
            taps = self._tap_cache  # cleared in place whenever the keymap changes
            pending: list[bytes] = []
            for char in text:
                if self._closed:
                    self._stop_if_closed()
                encoded = taps.get(char)
                if encoded is None:
                    # Encoding may rebind a keycode: the taps before it must reach the server first.
                    self._queue_encoded(pending)
                    pending = []
                    encoded = self._encoded_tap(keysym_for_char(char))
                    taps[char] = encoded
                pending.append(encoded)
                if len(pending) >= _TYPE_BATCH:
                    self._queue_encoded(pending)
                    pending = []
                    self._watchdog.arm()
                    self._check_alive()
            self._queue_encoded(pending)
            self._check_alive()
