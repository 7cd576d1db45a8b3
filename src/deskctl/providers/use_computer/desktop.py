"""The desktop of a use.computer sandbox: display, screenshots, input, exec, the pointer and files."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._redact import redact
from deskctl.actions import (
    Action,
    Click,
    Drag,
    KeyDown,
    KeyPress,
    KeyUp,
    MouseDown,
    MouseUp,
    Move,
    Scroll,
    TypeText,
)
from deskctl.errors import (
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._files import FileTransfer, no_such_file
from deskctl.providers._guest import (
    GuestActions,
    background_pid,
    check_exec_options,
    cmd_line,
    posix_line,
    powershell_line,
)
from deskctl.providers._png import png_size
from deskctl.providers.base import (
    ExecResult,
    RemoteHandle,
    Screenshot,
)
from deskctl.providers.use_computer.client import (
    UseComputerApi,
    _FileBody,
)
from deskctl.providers.use_computer.handle_data import UseComputerHandleData

if TYPE_CHECKING:
    from pathlib import Path


#: deskctl canonical key names -> the service's (cua-computer-server style; UNVERIFIED beyond the spec's
#: ``cmd+s`` example). ``super`` is ``cmd`` on macOS, ``win`` on Windows, ``super`` on Ubuntu.
_KEY_NAMES: dict[str, str] = {
    "ctrl": "ctrl", "alt": "alt", "shift": "shift",
    "enter": "enter", "escape": "escape", "tab": "tab", "backspace": "backspace", "delete": "delete",
    "space": "space", "home": "home", "end": "end", "pageup": "pageup", "pagedown": "pagedown",
    "insert": "insert", "up": "up", "down": "down", "left": "left", "right": "right",
    "capslock": "capslock", "menu": "menu", "printscreen": "printscreen", "pause": "pause",
    "numlock": "numlock", "scrolllock": "scrolllock",
    **{f"f{i}": f"f{i}" for i in range(1, 25)},
}
_SUPER = {Platform.MACOS: "cmd", Platform.WINDOWS: "win", Platform.UBUNTU: "super"}


def key_name(canonical: str, platform: Platform = Platform.MACOS) -> str:
    """The service's name for a canonical deskctl key; a single character passes through unchanged."""
    if len(canonical) == 1:
        return canonical
    if canonical == "super":
        return _SUPER.get(platform, "cmd")
    name = _KEY_NAMES.get(canonical)
    if name is None:
        raise UsageError(f"use.computer has no key {canonical!r}", code="usage.unknown_key",
                         provider="use-computer")
    return name


class UseComputerDesktop(FileTransfer, GuestActions, UseComputerApi):
    """The desktop side of :class:`~deskctl.providers.use_computer.UseComputerProvider`."""

    # -- the desktop ---------------------------------------------------------------------------------------
    def _display(self, handle: RemoteHandle, *, deadline: float | None = None,
                 refresh: bool = False) -> tuple[int, int, float]:
        cached = self._displays.get(handle.resource_id)
        if cached is not None and not refresh:
            return cached
        info = self._json(self._sandbox(handle, "GET", "/display/info", "read the display size", idempotent=True,
                                        deadline=deadline))
        try:
            width, height = int(info["width"]), int(info["height"])
            scale = float(info.get("scale") or 1.0)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"use-computer: display/info is malformed: {redact(str(info))[:200]}",
                                   provider=self.name) from exc
        if width <= 0 or height <= 0 or scale <= 0:
            raise ProviderApiError(f"use-computer: display/info reports {width}x{height} at scale {scale:g}",
                                   provider=self.name)
        self._displays[handle.resource_id] = (width, height, scale)
        return width, height, scale

    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        width, height, _ = self._display(handle, refresh=True)
        return width, height

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        response = self._sandbox(handle, "GET", "/screenshot", "take a screenshot", idempotent=True,
                                 params={"show_cursor": "false"}, headers={"Accept": "image/png"})
        png = response.content
        width, height = png_size(png, self.name)
        points_w, points_h, _ = self._display(handle)
        if (width, height) != (points_w, points_h):
            if abs(width / points_w - height / points_h) > 0.02:
                raise ProviderApiError(
                    f"use-computer: the screenshot is {width}x{height}, not a scale of the {points_w}x{points_h} "
                    "display", provider=self.name)
            png = _scale_png(png, (points_w, points_h))
            width, height = points_w, points_h
        return Screenshot(png=png, width=width, height=height)

    def act(self, handle: RemoteHandle, action: Action) -> None:
        platform = Platform(UseComputerHandleData.of(handle).platform or Platform.MACOS.value)
        for path, body in self.action_requests(action, platform):
            self._sandbox(handle, "POST", path, f"send {path.strip('/').replace('/', ' ')}", idempotent=False,
                          json=body)

    @staticmethod
    def action_requests(action: Action, platform: Platform = Platform.MACOS) -> list[tuple[str, dict[str, Any]]]:
        """The data-plane requests (path under the sandbox, JSON body) that perform ``action``, in order."""
        match action:
            case Click(x=x, y=y, button=button, count=count):
                if count <= 2:
                    return [("/mouse/click", {"x": x, "y": y, "button": button, "double": count == 2})]
                return [("/mouse/click", {"x": x, "y": y, "button": button, "double": True}),
                        *[("/mouse/click", {"x": x, "y": y, "button": button, "double": False})] * (count - 2)]
            case Move(x=x, y=y):
                return [("/mouse/move", {"x": x, "y": y})]
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                return [("/mouse/drag", {"startX": x1, "startY": y1, "endX": x2, "endY": y2, "button": button})]
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                requests: list[tuple[str, dict[str, Any]]] = []
                if dy:
                    requests.append(("/mouse/scroll", {"x": x, "y": y, "direction": "down" if dy > 0 else "up",
                                                       "amount": abs(dy)}))
                if dx:
                    requests.append(("/mouse/scroll", {"x": x, "y": y, "direction": "right" if dx > 0 else "left",
                                                       "amount": abs(dx)}))
                return requests
            case TypeText(text=text):
                return _type_requests(text, platform)
            case KeyPress(keys=keys):
                body: dict[str, Any] = {"key": key_name(keys[-1], platform)}
                if len(keys) > 1:
                    body["modifiers"] = [key_name(k, platform) for k in keys[:-1]]
                return [("/keyboard/press", body)]
            case MouseDown() | MouseUp() | KeyDown() | KeyUp():
                raise UsageError(
                    f"use.computer has no endpoint to hold a button or key ({type(action).__name__}): it offers "
                    "click, drag, press and hotkey", code="usage.unsupported", provider="use-computer",
                    remedy="use drag instead of mouse-down/up, and a chord (key ctrl+s) instead of key-down/up")
        raise UsageError(f"use.computer cannot perform {action!r}", code="usage.unsupported",
                         provider="use-computer")

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        if not command.strip():
            raise UsageError("empty command", code="usage.empty_command", provider=self.name)
        clean_env = check_exec_options(env, user, self.name)
        seconds = max(1, math.ceil(timeout))
        dialect = self._guest_dialect(handle)
        if cwd or clean_env or user or background:
            if dialect == "posix":
                # macOS has no setsid(1); nohup alone keeps the command past the SSH session
                setsid = UseComputerHandleData.of(handle).platform != Platform.MACOS.value
                command = posix_line(command, cwd=cwd, env=clean_env, user=user, background=background,
                                     setsid=setsid)
            else:
                build = cmd_line if dialect == "cmd" else powershell_line
                try:
                    command = build(command, cwd=cwd, env=clean_env, user=user, background=background)
                except UsageError as err:
                    raise UsageError(f"use-computer: {err.message}", code=err.code, provider=self.name) from err
        if UseComputerHandleData.of(handle).platform == Platform.UBUNTU.value:
            # the Ubuntu desktop is DISPLAY=:0 (spec); an exec environment without it could start no GUI app
            command = f'export DISPLAY="${{DISPLAY:-:0}}"; {command}'
        body: dict[str, Any] = {"command": command, "timeout": seconds}
        shell = self._shell(handle)
        if shell:
            body["shell"] = shell
        response = self._sandbox(handle, "POST", "/exec", "run a command", idempotent=False, json=body,
                                 timeout=seconds + 15.0)
        answer = self._json(response)
        if not isinstance(answer, dict):
            raise ProviderApiError("use-computer: exec answered an unexpected shape", provider=self.name)
        code = next((answer[k] for k in ("return_code", "exit_code", "returncode") if k in answer), None)
        result = ExecResult(exit_code=int(code) if isinstance(code, int | float) else -1,
                            stdout=str(answer.get("stdout") or ""), stderr=str(answer.get("stderr") or ""),
                            merged=False)
        if background and result.exit_code == 0:
            return ExecResult(result.exit_code, result.stdout, result.stderr, pid=background_pid(result))
        return result

    def _shell(self, handle: RemoteHandle) -> str | None:
        """The ``shell`` the exec request names: the option, else ``bash`` on Ubuntu and ``powershell`` on
        Windows; none on macOS (SSH runs the user's shell)."""
        if self.opts.shell:
            return self.opts.shell
        return {Platform.UBUNTU.value: "bash", Platform.WINDOWS.value: "powershell"}.get(
            UseComputerHandleData.of(handle).platform)

    def _guest_dialect(self, handle: RemoteHandle) -> str:
        if UseComputerHandleData.of(handle).platform != Platform.WINDOWS.value:
            return "posix"
        return "cmd" if self._shell(handle) == "cmd" else "powershell"

    # -- the pointer and files -----------------------------------------------------------------------------
    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        """``GET .../mouse/position``: the pointer in points, the space clicks use (UNVERIFIED on Retina)."""
        answer = self._json(self._sandbox(handle, "GET", "/mouse/position", "read the pointer position",
                                          idempotent=True))
        try:
            x, y = answer["x"], answer["y"]
            if isinstance(x, bool) or isinstance(y, bool):
                raise TypeError("a boolean is not a coordinate")
            return int(x), int(y)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"use-computer: mouse/position is malformed: {redact(str(answer))[:200]}",
                                   provider=self.name) from exc

    def _file_missing(self, handle: RemoteHandle, what: str) -> DeskctlError:
        """A 404 on ``/files``: the file when the sandbox still answers, else the sandbox itself."""
        if self._get(handle) is None:
            return SessionLost(f"use-computer: sandbox {handle.resource_id} is gone", provider=self.name,
                               details={"status": 404},
                               remedy="keep the session's process alive (it sends keepalives) or use "
                                      "-o ephemeral=false")
        return no_such_file(what, "on the desktop", self.name)

    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        response = self._sandbox(
            handle, "PUT", "/files", f"upload {remote}", idempotent=True, ok=frozenset({404}),
            params={"path": remote}, content=_FileBody(local),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(local.stat().st_size)})
        if response.status_code == 404:
            raise self._file_missing(handle, f"the folder of {remote}")

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        import httpx

        response = self._sandbox(handle, "GET", "/files", f"download {remote}", idempotent=True,
                                 ok=frozenset({404}), stream=True, params={"path": remote},
                                 headers={"Accept": "application/octet-stream"})
        try:
            if response.status_code == 404:
                raise self._file_missing(handle, remote)
            with local.open("wb") as fh:
                for chunk in response.iter_bytes(1 << 20):
                    fh.write(chunk)
        except httpx.HTTPError as exc:
            raise ProviderUnreachable(f"use-computer: download of {remote} broke off: {type(exc).__name__}",
                                      provider=self.name) from exc
        finally:
            response.close()


def _type_requests(text: str, platform: Platform) -> list[tuple[str, dict[str, Any]]]:
    """Text as ``keyboard/type``; newlines, tabs and other controls as key presses (their typing is
    UNVERIFIED on the service)."""
    requests: list[tuple[str, dict[str, Any]]] = []
    chunk: list[str] = []
    specials = {"\n": "enter", "\r": "enter", "\t": "tab", "\b": "backspace", "\x1b": "escape"}

    def flush() -> None:
        if chunk:
            requests.append(("/keyboard/type", {"text": "".join(chunk)}))
            chunk.clear()

    previous = ""
    for char in text:
        if char in specials:
            flush()
            if not (char == "\n" and previous == "\r"):
                requests.append(("/keyboard/press", {"key": key_name(specials[char], platform)}))
        elif ord(char) < 32 or ord(char) == 127:
            raise UsageError(f"cannot type the control character {char!r}; use key instead",
                             code="usage.bad_text", provider="use-computer")
        else:
            chunk.append(char)
        previous = char
    flush()
    return requests


def _scale_png(png: bytes, size: tuple[int, int]) -> bytes:
    """A HiDPI capture scaled down to the point grid the actions use."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        scaled = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    scaled.save(out, format="PNG", compress_level=1)
    return out.getvalue()
