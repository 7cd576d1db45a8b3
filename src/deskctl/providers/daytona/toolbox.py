"""The desktop of a Daytona sandbox through the toolbox API: display, screenshots, input, exec and files."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import stat
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
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
    SessionLost,
    UsageError,
)
from deskctl.providers._files import FileTransfer, no_such_file
from deskctl.providers._guest import GuestActions, background_pid, check_exec_options, cmd_line, posix_line
from deskctl.providers._http import error_from_transport
from deskctl.providers._png import png_size
from deskctl.providers.base import (
    ExecResult,
    RemoteHandle,
    Screenshot,
)

if TYPE_CHECKING:
    import httpx


from deskctl.providers._multipart import MultipartReader, form_name, multipart_boundary
from deskctl.providers.daytona.client import DaytonaApi

#: deskctl canonical key names (deskctl.actions) -> toolbox names (spec section 4 "Keys")
_KEY_NAMES: dict[str, str] = {
    "ctrl": "ctrl", "alt": "alt", "shift": "shift", "super": "cmd",
    "enter": "enter", "escape": "escape", "tab": "tab", "backspace": "backspace", "delete": "delete",
    "space": "space", "home": "home", "end": "end", "pageup": "pageup", "pagedown": "pagedown",
    "insert": "insert", "up": "up", "down": "down", "left": "left", "right": "right",
    "capslock": "capslock", "menu": "menu",
    **{f"f{i}": f"f{i}" for i in range(1, 25)},
}


def toolbox_key_name(canonical: str) -> str:
    """The toolbox's name for a canonical deskctl key; a single character passes through unchanged."""
    if len(canonical) == 1:
        return canonical
    name = _KEY_NAMES.get(canonical)
    if name is None:
        raise UsageError(
            f"the Daytona toolbox has no key {canonical!r} (it offers: {', '.join(sorted(_KEY_NAMES))} "
            "and single characters)", code="usage.unknown_key", provider="daytona",
        )
    return name


class DaytonaToolbox(FileTransfer, GuestActions, DaytonaApi):
    """The desktop side of :class:`~deskctl.providers.daytona.DaytonaProvider`."""

    # -- the desktop ---------------------------------------------------------------------------------------
    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        info = self._json(self._toolbox(handle, "GET", "/computeruse/display/info", "read the display size",
                                        idempotent=True))
        displays = [d for d in (info.get("displays") or []) if isinstance(d, dict)] if isinstance(info, dict) else []
        if not displays:
            raise ProviderApiError(f"daytona: sandbox {handle.resource_id} reports no display", provider=self.name)
        primary = next((d for d in displays if d.get("x", 0) == 0 and d.get("y", 0) == 0), displays[0])
        try:
            return int(primary["width"]), int(primary["height"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"daytona: display/info is malformed: {redact(str(info))[:200]}",
                                   provider=self.name) from exc

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        body = self._json(self._toolbox(handle, "GET", "/computeruse/screenshot", "take a screenshot",
                                        idempotent=True, params={"showCursor": "false"}))
        raw = body.get("screenshot") if isinstance(body, dict) else None
        if not isinstance(raw, str):
            raise ProviderApiError("daytona: the screenshot answer has no image", provider=self.name)
        try:
            png = base64.b64decode(raw, validate=False)
        except ValueError as exc:
            raise ProviderApiError("daytona: the screenshot is not base64", provider=self.name) from exc
        width, height = png_size(png, self.name)
        return Screenshot(png=png, width=width, height=height)

    def act(self, handle: RemoteHandle, action: Action) -> None:
        for path, body in self.action_requests(action):
            self._toolbox(handle, "POST", path, f"send {path.rsplit('/', 2)[-2]} {path.rsplit('/', 1)[-1]}",
                          idempotent=False, json=body)

    @staticmethod
    def action_requests(action: Action) -> list[tuple[str, dict[str, Any]]]:
        """The toolbox requests (path, JSON body) that perform ``action``, in order."""
        match action:
            case Click(x=x, y=y, button=button, count=count):
                body: dict[str, Any] = {"x": x, "y": y, "button": button, "double": count == 2}
                if count > 2:
                    body["clicks"] = count
                return [("/computeruse/mouse/click", body)]
            case Move(x=x, y=y):
                return [("/computeruse/mouse/move", {"x": x, "y": y})]
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                return [("/computeruse/mouse/drag",
                         {"startX": x1, "startY": y1, "endX": x2, "endY": y2, "button": button})]
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                requests = []
                if dy:
                    requests.append(("/computeruse/mouse/scroll",
                                     {"x": x, "y": y, "direction": "down" if dy > 0 else "up", "amount": abs(dy)}))
                if dx:
                    requests.append(("/computeruse/mouse/scroll",
                                     {"x": x, "y": y, "direction": "right" if dx > 0 else "left",
                                      "amount": abs(dx)}))
                return requests
            case MouseDown(x=x, y=y, button=button):
                return [("/computeruse/mouse/down", {"x": x, "y": y, "button": button})]
            case MouseUp(x=x, y=y, button=button):
                return [("/computeruse/mouse/up", {"x": x, "y": y, "button": button})]
            case TypeText(text=text):
                return _type_requests(text)
            case KeyPress(keys=keys):
                modifiers = [toolbox_key_name(k) for k in keys[:-1]]
                body = {"key": toolbox_key_name(keys[-1])}
                if modifiers:
                    body["modifiers"] = modifiers
                return [("/computeruse/keyboard/key", body)]
            case KeyDown(key=key):
                return [("/computeruse/keyboard/down", {"key": toolbox_key_name(key)})]
            case KeyUp(key=key):
                return [("/computeruse/keyboard/up", {"key": toolbox_key_name(key)})]
        raise UsageError(f"daytona cannot perform {action!r}", code="usage.unsupported")

    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        body = self._json(self._toolbox(handle, "GET", "/computeruse/mouse/position", "read the pointer position",
                                        idempotent=True))
        try:
            return int(body["x"]), int(body["y"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"daytona: mouse/position is malformed: {redact(str(body))[:200]}",
                                   provider=self.name) from exc

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        if not command.strip():
            raise UsageError("empty command", code="usage.empty_command", provider=self.name)
        clean_env = check_exec_options(env, user, self.name)
        seconds = max(1, math.ceil(timeout))
        request: dict[str, Any] = {"timeout": seconds}
        if cwd:
            request["cwd"] = cwd
        marker: str | None = None
        if self._guest_dialect(handle) == "posix":
            # sudo starts the other user with a clean environment: env then travels inside the line
            line = posix_line(command, env=clean_env if user else None, user=user, background=background)
            if clean_env and not user:
                request["envs"] = clean_env
            if not background:
                marker = f"--deskctl-stderr-{uuid.uuid4().hex}--"
                line = _stderr_apart(line, marker)
        else:
            line = cmd_line(command, user=user, background=background)
            if clean_env:
                request["envs"] = clean_env
        request["command"] = line
        try:
            response = self._toolbox(handle, "POST", "/process/execute", "run a command", idempotent=False,
                                     json=request, timeout=seconds + 5.0)
        except ProviderApiError as err:
            if err.status == 408:
                return ExecResult(exit_code=124, stdout="", stderr="", merged=marker is None)
            raise
        body = self._json(response)
        if not isinstance(body, dict):
            raise ProviderApiError("daytona: process/execute answered an unexpected shape", provider=self.name)
        raw_code = body.get("exitCode", body.get("code"))
        exit_code = int(raw_code) if isinstance(raw_code, int | float) else -1
        text = str(body.get("result") or "")
        if exit_code == -1 and cwd and self._remote_kind(handle, cwd) != "dir":
            # the service could not start the shell in a cwd that is no folder: exit 2 with its message, as the
            # other providers' `cd DIR || exit 2` does (the command did not run)
            return ExecResult(exit_code=2, stdout="", stderr=text or f"cd: {cwd}: No such file or directory\n",
                              merged=False)
        if background:  # the line printed the new process's id (posix) or nothing (cmd.exe's start)
            pid = background_pid(ExecResult(exit_code, text)) if exit_code == 0 else None
            return ExecResult(exit_code=exit_code, stdout=text, stderr="", merged=False, pid=pid)
        if marker is not None:
            out, found, errors = text.partition(marker)
            if found:
                return ExecResult(exit_code=exit_code, stdout=out, stderr=errors, merged=False)
            if exit_code == -1:
                # the service could not start the shell (a cwd that does not exist): its message is the error
                return ExecResult(exit_code=exit_code, stdout="", stderr=text, merged=False)
        return ExecResult(exit_code=exit_code, stdout=text, stderr="", merged=True)

    # -- files (FileTransfer's primitives, over the toolbox's file API) ---------------------------------------
    def _mkdirs(self, handle: RemoteHandle, remote_dir: str) -> None:
        self._toolbox(handle, "POST", "/files/folder", f"make the folder {remote_dir}", idempotent=True,
                      params={"path": remote_dir, "mode": "755"})

    def _remote_kind(self, handle: RemoteHandle, remote: str) -> str:
        response = self._toolbox(handle, "GET", "/files/info", f"look at {remote}", idempotent=True,
                                 params={"path": remote}, ok=frozenset({404}))
        body = _json_or_empty(response)
        if response.status_code == 404:
            if body.get("code") == "FILE_NOT_FOUND":
                return "none"
            # the file, or the sandbox itself (archived: "sandbox container not found"): its own state says which
            lost = self._toolbox_lost(handle, ProviderApiError(
                f"daytona: files/info about {remote} answered HTTP 404", provider=self.name, status=404))
            if isinstance(lost, SessionLost):
                raise lost
            return "none"
        if not isinstance(body, dict) or not isinstance(body.get("isDir"), bool):
            raise ProviderApiError(f"daytona: files/info about {remote} is malformed", provider=self.name)
        return "dir" if body["isDir"] else "file"

    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        size = local.stat().st_size
        with local.open("rb") as stream:
            # httpx streams the open file in chunks (and rewinds it for a retry): never all in memory
            response = self._toolbox(
                handle, "POST", "/files/bulk-upload", f"upload {remote}", idempotent=True,
                data={"files[0].path": remote},
                files={"files[0].file": (local.name or "file", stream, "application/octet-stream")},
            )
        body = self._json(response) if response.content else {}
        files = body.get("files") if isinstance(body, dict) else None
        written = files[0].get("bytes") if isinstance(files, list) and files and isinstance(files[0], dict) else None
        if written is not None and written != size:
            raise ProviderApiError(f"daytona: {remote} arrived with {written} of {size} bytes", provider=self.name)
        mode = stat.S_IMODE(local.stat().st_mode)
        if mode != 0o644 and self._guest_dialect(handle) == "posix":
            # the daemon writes every upload 0644: a script must stay executable, a key private
            self._toolbox(handle, "POST", "/files/permissions", f"set the mode of {remote}", idempotent=True,
                          params={"path": remote, "mode": f"{mode:04o}"})

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        import httpx

        response = self._toolbox(handle, "POST", "/files/bulk-download", f"download {remote}", idempotent=True,
                                 json={"paths": [remote]}, stream=True)
        error = bytearray()
        parts: list[str] = []
        with contextlib.closing(response), local.open("wb") as out:
            def on_part(headers: Mapping[str, str]) -> Callable[[bytes], object]:
                name = form_name(headers.get("content-disposition", ""))
                # the current daemon names a file's part "file" (older ones: the path) and an error's "error"
                parts.append("error" if name == "error" else "file")
                if name == "error":
                    return error.extend
                if parts.count("file") > 1:
                    raise ProviderApiError(f"daytona: bulk-download of {remote} answered several files",
                                           provider=self.name)
                return out.write

            reader = MultipartReader(multipart_boundary(response.headers.get("content-type", ""), self.name), on_part)
            try:
                for chunk in response.iter_bytes(256 * 1024):
                    reader.feed(chunk)
            except httpx.HTTPError as exc:  # the connection broke mid-body
                raise error_from_transport(exc, self._context(f"download {remote}")) from exc
        if error:
            raise self._download_error(remote, bytes(error))
        if not reader.done or "file" not in parts:
            raise ProviderApiError(f"daytona: the download of {remote} ended early (no complete file part)",
                                   provider=self.name)

    def _download_error(self, remote: str, payload: bytes) -> DeskctlError:
        text = payload.decode("utf-8", "replace").strip()
        try:
            detail = json.loads(text)
        except ValueError:
            detail = {"message": text}
        if not isinstance(detail, dict):
            detail = {"message": text}
        code = str(detail.get("code") or detail.get("error_code") or "")
        status = detail.get("statusCode", detail.get("status_code"))
        message = str(detail.get("message") or text)
        if code == "FILE_NOT_FOUND" or status == 404 or "not found" in message.lower():
            return no_such_file(remote, "on the desktop", self.name)
        return ProviderApiError(f"daytona: cannot download {remote}: {redact(message)[:300]}", provider=self.name,
                                status=status if isinstance(status, int) else None)


def _json_or_empty(response: httpx.Response) -> dict[str, Any]:
    """A JSON object answer, else ``{}`` (an empty or non-JSON body, or another shape)."""
    try:
        body = response.json() if response.content else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _stderr_apart(line: str, marker: str) -> str:
    """``line`` with its stderr kept apart: in a temp file unlinked at once (a killed command leaves nothing),
    printed after ``marker`` once the line is done; exit status kept. One line: the service feeds it to the
    shell on stdin, and the command must not read the rest of it."""
    return (f'__dk_e=$(mktemp) || exit 125; exec 3>"$__dk_e" 4<"$__dk_e"; rm -f "$__dk_e"; '
            f"{line} 2>&3 3>&- 4<&- </dev/null; __dk_rc=$?; exec 3>&-; printf %s {marker}; cat <&4; "
            "exit $__dk_rc")


def _type_requests(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``keyboard/type`` rejects control characters: newlines and tabs become key presses."""
    requests: list[tuple[str, dict[str, Any]]] = []
    chunk: list[str] = []
    specials = {"\n": "enter", "\r": "enter", "\t": "tab", "\b": "backspace", "\x1b": "escape"}

    def flush() -> None:
        if chunk:
            requests.append(("/computeruse/keyboard/type", {"text": "".join(chunk), "delay": 0}))
            chunk.clear()

    previous = ""
    for char in text:
        if char in specials:
            flush()
            if not (char == "\n" and previous == "\r"):
                requests.append(("/computeruse/keyboard/key", {"key": specials[char]}))
        elif ord(char) < 32 or ord(char) == 127:
            raise UsageError(f"cannot type the control character {char!r}; use key instead",
                             code="usage.bad_text", provider="daytona")
        else:
            chunk.append(char)
        previous = char
    flush()
    return requests

