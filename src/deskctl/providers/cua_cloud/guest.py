"""The desktop of a cua sandbox through its OSWorld guest server: display, screenshots, input, exec, files
and the pointer."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deskctl._fsreplace import replace_file
from deskctl._redact import redact
from deskctl.actions import Action
from deskctl.errors import (
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
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
from deskctl.providers._http import (
    RetryPolicy,
    error_from_transport,
)
from deskctl.providers._png import png_size
from deskctl.providers.base import (
    ExecResult,
    RemoteHandle,
    Screenshot,
)
from deskctl.providers.cua_cloud.client import (
    GUEST_EXEC_CAP,
    CuaCloudApi,
)
from deskctl.providers.cua_cloud.handle_data import CuaHandleData
from deskctl.providers.cua_cloud.input import (
    _LINUX_INPUT,
    linux_input_ops,
    linux_pyautogui_code,
    windows_input_code,
)


class CuaGuest(FileTransfer, GuestActions, CuaCloudApi):
    """The desktop side of :class:`~deskctl.providers.cua_cloud.CuaCloudProvider`."""

    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        body = self._json(self._guest(handle, "POST", "/screen_size", "read the screen size", idempotent=True))
        try:
            return int(body["width"]), int(body["height"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"cua-cloud: /screen_size is malformed: {redact(str(body))[:200]}",
                                   provider=self.name) from exc

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        png = self._guest(handle, "GET", "/screenshot", "take a screenshot", idempotent=True).content
        width, height = png_size(png, self.name)
        return Screenshot(png=png, width=width, height=height)

    def _execute(self, handle: RemoteHandle, command: list[str] | str, action: str, timeout: float,
                 runs_for: float | None = None) -> dict[str, Any]:
        """``runs_for``: how long the guest may take to answer (default ``timeout``), never past its cap."""
        body: dict[str, Any] = {"command": command, "shell": isinstance(command, str),
                                "timeout": max(1, math.ceil(timeout))}
        response = self._guest(handle, "POST", "/execute", action, idempotent=False, json=body,
                               timeout=min(timeout if runs_for is None else runs_for, GUEST_EXEC_CAP) + 30.0)
        result = self._json(response)
        if not isinstance(result, dict):
            raise ProviderApiError("cua-cloud: /execute answered an unexpected shape", provider=self.name)
        return result

    def act(self, handle: RemoteHandle, action: Action) -> None:
        if CuaHandleData.of(handle).platform == Platform.WINDOWS.value:
            command = ["python", "-c", windows_input_code(action)]
        else:
            command = ["python3", "-c", _LINUX_INPUT, json.dumps(linux_input_ops(action)),
                       linux_pyautogui_code(action)]
        result = self._execute(handle, command, f"send {type(action).__name__.lower()}", 30.0)
        code = result.get("returncode", result.get("return_code"))
        if code != 0:
            error = redact(str(result.get("error") or result.get("stderr") or result.get("message") or ""))
            raise ProviderApiError(f"cua-cloud: the guest's input program failed (exit {code}): {error[-300:]}",
                                   provider=self.name, details={"exit_code": code})

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        if not command.strip():
            raise UsageError("empty command", code="usage.empty_command", provider=self.name)
        clean_env = check_exec_options(env, user, self.name)
        seconds = max(1, math.ceil(min(timeout, GUEST_EXEC_CAP - 5)))
        wrapped: list[str] | str
        runs_for: float | None = None
        if CuaHandleData.of(handle).platform == Platform.WINDOWS.value:
            # nothing on the guest ends a Windows command at its timeout: only the guest's cap does, so the
            # answer is awaited that long (a shorter wait would fail a command that is still running there)
            runs_for = float(GUEST_EXEC_CAP)
            if user:
                raise UsageError("cua-cloud: running a command as another user is not supported on Windows",
                                 code="usage.unsupported", provider=self.name)
            # cmd.exe through shell=True; the guest's 120 s cap is the timeout
            wrapped = windows_background_line(command, cwd, clean_env) if background else \
                cmd_line(command, cwd=cwd, env=clean_env)
        else:
            # a login bash around the line (the guest user's profile, as Harbor runs it), and bash, not sh, for
            # the command itself: tasks written for Harbor's cua environment use bash syntax
            line = posix_line(command, cwd=cwd, env=clean_env, user=user, background=background, shell="bash")
            wrapped = ["timeout", "-k", "5", str(seconds), "bash", "-lc", line]
        try:
            result = self._execute(handle, wrapped, "run a command", float(seconds), runs_for)
        except ProviderApiError as err:
            # the guest answers 500 {"status": "error", "message": ...} when its own 120 s cap kills the command
            if err.status == 500 and "timed out" in err.message.lower():
                return ExecResult(exit_code=124, stdout="", stderr="")
            raise
        code = result.get("returncode", result.get("return_code"))
        ran = ExecResult(exit_code=int(code) if isinstance(code, int) else -1,
                         stdout=str(result.get("output", result.get("stdout")) or ""),
                         stderr=str(result.get("error", result.get("stderr")) or ""))
        if background and ran.exit_code == 0:
            return ExecResult(ran.exit_code, ran.stdout, ran.stderr, pid=background_pid(ran))
        return ran

    # -- files: the guest's /setup/upload and /file, one regular file each (FileTransfer does the rest) -------
    def _put_file(self, handle: RemoteHandle, local: Path, remote: str, policy: RetryPolicy | None = None) -> None:
        # the multipart body is streamed from the file (and rewound by httpx if a retry sends it again): an
        # upload replaces the file, so sending it twice is harmless
        with local.open("rb") as fh:
            self._guest(handle, "POST", "/setup/upload", f"upload {remote}", idempotent=True, policy=policy,
                        data={"file_path": remote},
                        files={"file_data": (local.name, fh, "application/octet-stream")})

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path, policy: RetryPolicy | None = None) -> None:
        import httpx

        action = f"download {remote}"
        try:
            response = self._guest(handle, "POST", "/file", action, idempotent=True, stream=True, policy=policy,
                                   data={"file_path": remote})
        except ProviderApiError as err:
            if err.status == 404 and "file not found" in err.message.lower():
                raise no_such_file(remote, "on the desktop", self.name) from err
            raise
        try:
            with local.open("wb") as fh:
                for chunk in response.iter_bytes(1 << 20):
                    fh.write(chunk)
        except httpx.HTTPError as exc:
            raise error_from_transport(exc, self._context(action)) from exc
        finally:
            response.close()

    # One file in one request where that settles it; else the shared way, whose exec round trips (make the
    # parent folder, tell a file from a folder) would otherwise precede every file. The guest answers 500 when
    # it cannot write the file (no parent folder) or read it (a folder): those, and only those, take the
    # shared way; a first try is never retried (a 500 there is expected), the shared way retries as usual.
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        source = Path(local)
        if source.is_file() and not source.stat().st_mode & 0o111:  # an executable needs its chmod
            try:
                self._put_file(handle, source, remote, self.retry.with_attempts_at_most(1))
                return
            except (ProviderApiError, ProviderUnreachable) as err:
                if not _worth_the_shared_way(err):
                    raise
        super().upload(handle, local, remote)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        target = Path(local)
        if target.parent.is_dir() and not target.is_dir():
            partial = target.with_name(f".{target.name}.deskctl-part")
            try:
                self._get_file(handle, remote, partial, self.retry.with_attempts_at_most(1))
                replace_file(partial, target)
                return
            except (ProviderApiError, ProviderUnreachable, UsageError) as err:
                # "File not found" too: the shared way tells a missing path from a folder a guest calls so
                if not (_worth_the_shared_way(err) or err.code == "usage.no_such_file"):
                    raise
            finally:
                partial.unlink(missing_ok=True)
        super().download(handle, remote, local)

    # -- the pointer ----------------------------------------------------------------------------------------
    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        """The guest's ``GET /cursor_position`` (pyautogui's position, in screenshot pixels). OSWorld answers
        ``[x, y]``; ``{"x": .., "y": ..}`` is taken too."""
        body = self._json(self._guest(handle, "GET", "/cursor_position", "read the pointer position",
                                      idempotent=True))
        pair = [body.get("x"), body.get("y")] if isinstance(body, dict) else body
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int | float) for v in pair):
            return int(pair[0]), int(pair[1])
        raise ProviderApiError(f"cua-cloud: /cursor_position is malformed: {redact(str(body))[:200]}",
                               provider=self.name)


def windows_background_line(command: str, cwd: str | None, env: Mapping[str, str]) -> str:
    """The cmd.exe line that starts ``command`` detached on a Windows guest and prints its process id.

    Not ``start /b``: a process cmd.exe starts inherits its handles, the guest server's output pipes among
    them, and the server's ``/execute`` waits for those pipes to close, so it would answer only when the app
    exits (or at its 120 s cap). PowerShell's ``Start-Process`` shell-executes the program without inheriting
    them and tells its id; the script travels base64-encoded (``-EncodedCommand``), so no quoting of cmd.exe's
    can break it."""
    import base64

    script = powershell_line(command, cwd=cwd, env=env, background=True)
    encoded = base64.b64encode(script.encode("utf-16-le")).decode()
    return f"powershell -NoProfile -NonInteractive -EncodedCommand {encoded}"


def _worth_the_shared_way(err: DeskctlError) -> bool:
    """Whether a one-request transfer's failure leaves the shared way worth taking: the guest's 500 (no parent
    folder, a folder where a file was meant) or what the shared way retries (a busy proxy, a dropped line)."""
    return isinstance(err, ProviderUnreachable) or (isinstance(err, ProviderApiError) and err.status in
                                                    (500, 502, 503, 504))


