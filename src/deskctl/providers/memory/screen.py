"""A memory desktop's folder: :class:`MemoryScreen` reads and writes it (the frame buffer, the input state, the
event log, the clipboard, the windows) under ``flock``; :class:`Input` is the X semantics of one action on it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl.actions import Click, Drag, KeyDown, KeyPress, KeyUp, MouseDown, MouseUp, Move, Scroll, TypeText
from deskctl.core.x11 import keysym_for_char, keysym_for_key
from deskctl.errors import SessionLost, UsageError
from deskctl.providers._procs import alive

if TYPE_CHECKING:
    from deskctl.actions import Action

__all__ = ["DESKTOP_ENV", "MARKS", "Input", "MemoryScreen"]

#: X modifier masks and keysyms of the modifier keys, and the button masks (Button1Mask = 256 ...)
SHIFT, CONTROL, MOD1, MOD4 = 1, 4, 8, 64
_MODIFIERS = {keysym_for_key("shift"): SHIFT, keysym_for_key("ctrl"): CONTROL, keysym_for_key("alt"): MOD1,
              keysym_for_key("super"): MOD4}
_BUTTONS = {"left": 1, "middle": 2, "right": 3}
MARKS = {1: (255, 0, 0), 2: (0, 200, 0), 3: (0, 0, 255)}
_DRAG_STEPS = 4
#: the environment variable naming the desktop's folder, in every command ``exec`` runs
DESKTOP_ENV = "DESKCTL_MEMORY_DESKTOP"

def _bgrx(rgb: tuple[int, int, int]) -> bytes:
    red, green, blue = rgb
    return bytes((blue, green, red, 0))


class MemoryScreen:
    """One memory desktop's folder: its frame buffer, input events, pointer and keyboard state, clipboard and
    windows. Every change happens under an exclusive ``flock`` of ``lock``, so processes see each other's
    changes whole. Raises :class:`~deskctl.errors.SessionLost` when the desktop is gone."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    # -- files -----------------------------------------------------------------------------------------------
    @property
    def marker(self) -> Path:
        return self.dir / "desktop.json"

    def exists(self) -> bool:
        return self.marker.is_file() and (self.dir / "screen").is_file()

    def read_marker(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_json(self, name: str, body: Any) -> None:
        tmp = self.dir / f".{name}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(body, fh)
        os.replace(tmp, self.dir / name)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        import fcntl

        try:
            fd = os.open(self.dir / "lock", os.O_RDWR)
        except OSError as exc:
            raise SessionLost(f"the memory desktop in {self.dir} is gone", provider="memory") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @property
    def size(self) -> tuple[int, int]:
        marker = self.read_marker()
        if marker is None:
            raise SessionLost(f"the memory desktop in {self.dir} is gone", provider="memory")
        width, height = marker["size"]
        return int(width), int(height)

    # -- pixels ----------------------------------------------------------------------------------------------
    def frame(self) -> bytes:
        """The whole frame buffer (BGRX rows, packed)."""
        with self.locked():
            try:
                return (self.dir / "screen").read_bytes()
            except OSError as exc:
                raise SessionLost(f"the memory desktop in {self.dir} is gone", provider="memory") from exc

    def write_frame(self, data: bytes) -> None:
        with self.locked():
            (self.dir / "screen").write_bytes(data)

    def fill(self, x: int, y: int, width: int, height: int, rgb: tuple[int, int, int]) -> None:
        """Paint a rectangle (clipped to the screen) in one colour."""
        screen_w, screen_h = self.size
        left, top = max(0, x), max(0, y)
        right, bottom = min(screen_w, x + width), min(screen_h, y + height)
        if right <= left or bottom <= top:
            return
        row = _bgrx(rgb) * (right - left)
        with self.locked():
            fd = os.open(self.dir / "screen", os.O_WRONLY)
            try:
                for line in range(top, bottom):
                    os.pwrite(fd, row, (line * screen_w + left) * 4)
            finally:
                os.close(fd)

    # -- input state and events ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError) as exc:
            raise SessionLost(f"the memory desktop in {self.dir} is gone", provider="memory") from exc
        return data if isinstance(data, dict) else {}

    def events(self, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """The events recorded after byte ``offset`` of the log, and the offset after them."""
        try:
            with open(self.dir / "events.jsonl", "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError as exc:
            raise SessionLost(f"the memory desktop in {self.dir} is gone", provider="memory") from exc
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        return [json.loads(line) for line in data[:end].splitlines() if line], offset + end

    def windows(self) -> list[dict[str, Any]]:
        """The windows whose owning process is alive."""
        found: list[dict[str, Any]] = []
        for path in sorted((self.dir / "windows").glob("*.json")):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                window = json.loads(path.read_text())
                if alive(int(window["pid"]), int(window["ticks"])):
                    found.append(window)
        return found


class Input:
    """The X semantics of one action on a :class:`MemoryScreen`, applied under its lock: events with their
    masks, the pointer, held buttons and keys, typed text and click marks."""

    def __init__(self, screen: MemoryScreen) -> None:
        self.screen = screen
        self.state = screen.state()
        self.lines: list[str] = []
        self.typed: list[str] = []
        self.marks: list[tuple[int, int, int]] = []

    @property
    def mask(self) -> int:
        mods = 0
        for keysym in self.state["keys"]:
            mods |= _MODIFIERS.get(int(keysym), 0)
        for button in self.state["buttons"]:
            if int(button) <= 5:
                mods |= 128 << int(button)
        return mods

    def _event(self, kind: str, button: int = 0, keysym: int = 0, state: int | None = None) -> None:
        x, y = self.state["pointer"]
        self.lines.append(json.dumps({"kind": kind, "x": x, "y": y, "button": button, "keysym": keysym,
                                      "state": self.mask if state is None else state}))

    def move(self, x: int, y: int) -> None:
        if [x, y] != list(self.state["pointer"]):
            self.state["pointer"] = [x, y]
            self._event("motion")

    def press(self, button: int) -> None:
        self._event("press", button=button)
        self.state["buttons"] = sorted({*self.state["buttons"], button})

    def release(self, button: int) -> None:
        self._event("release", button=button)
        self.state["buttons"] = [b for b in self.state["buttons"] if b != button]

    def key_down(self, keysym: int, state: int | None = None) -> None:
        self._event("key", keysym=keysym, state=state)
        if keysym in _MODIFIERS:
            self.state["keys"] = sorted({*self.state["keys"], keysym})

    def key_up(self, keysym: int, state: int | None = None) -> None:
        self._event("key_release", keysym=keysym, state=state)
        self.state["keys"] = [k for k in self.state["keys"] if k != keysym]

    def char(self, char: str) -> None:
        """Press and release the key of one character, as a layout with every symbol on a key would: held
        shift gives a letter's upper case, an upper-case letter is sent with shift."""
        if self.mask & SHIFT and len(char.upper()) == 1:
            char = char.upper()
        keysym = keysym_for_char(char)
        state = self.mask | (SHIFT if char != char.lower() else 0)
        self.key_down(keysym, state)
        self.key_up(keysym, state)
        if not self.mask & (CONTROL | MOD1 | MOD4):
            self.typed.append("\n" if char == "\r" else char)

    def apply(self, action: Action) -> None:
        match action:
            case Click(x=x, y=y, button=button, count=count):
                self.move(x, y)
                for _ in range(count):
                    self.press(_BUTTONS[button])
                    self.release(_BUTTONS[button])
                self.marks.append((x, y, _BUTTONS[button]))
            case Move(x=x, y=y):
                self.move(x, y)
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                self.move(x1, y1)
                self.press(_BUTTONS[button])
                for step in range(1, _DRAG_STEPS + 1):
                    self.move(x1 + (x2 - x1) * step // _DRAG_STEPS, y1 + (y2 - y1) * step // _DRAG_STEPS)
                self.release(_BUTTONS[button])
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                self.move(x, y)
                for wheel, clicks in ((5 if dy > 0 else 4, abs(dy)), (7 if dx > 0 else 6, abs(dx))):
                    for _ in range(clicks):
                        self.press(wheel)
                        self.release(wheel)
            case MouseDown(x=x, y=y, button=button):
                self.move(x, y)
                self.press(_BUTTONS[button])
            case MouseUp(x=x, y=y, button=button):
                self.move(x, y)
                self.release(_BUTTONS[button])
            case TypeText(text=text):
                for char in text:
                    self.char(char)
            case KeyPress(keys=keys):
                *modifiers, main = keys
                for key in modifiers:
                    self.key_down(keysym_for_key(key))
                if len(main) == 1:
                    self.char(main)
                else:
                    keysym = keysym_for_key(main)
                    self.key_down(keysym)
                    self.key_up(keysym)
                    if main in ("enter", "tab", "space") and not self.mask & (CONTROL | MOD1 | MOD4):
                        self.typed.append({"enter": "\n", "tab": "\t", "space": " "}[main])
                for key in reversed(modifiers):
                    self.key_up(keysym_for_key(key))
            case KeyDown(key=key):
                self.key_down(keysym_for_key(key))
            case KeyUp(key=key):
                self.key_up(keysym_for_key(key))
            case _:
                raise UsageError(f"the memory provider cannot perform {action!r}", code="usage.unsupported",
                                 provider="memory")

    def commit(self) -> None:
        """Write the events, state and typed text (the caller holds the screen's lock), then the marks."""
        directory = self.screen.dir
        if self.lines:
            with open(directory / "events.jsonl", "a") as fh:
                fh.write("".join(line + "\n" for line in self.lines))
        self.screen.write_json("state.json", self.state)
        if self.typed:
            with open(directory / "typed.txt", "a", encoding="utf-8") as fh:
                fh.write("".join(self.typed))
