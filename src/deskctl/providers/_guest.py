"""Commands run inside a desktop, built once for every provider: exec options (cwd, env, user, background) as
shell text, and the actions a harness calls that are commands on the guest (clipboard, open a URL, launch an
app, list window titles).

Every provider whose ``exec`` runs a shell line gets the harness actions from :class:`GuestActions` for free;
a provider with a native API for one of them (a computer-server ``set_clipboard``, an X connection that reads
window names) overrides just that method. Three dialects: ``posix`` (``sh``: ubuntu and macOS), ``cmd``
(``cmd.exe``) and ``powershell``.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from deskctl.errors import UsageError
from deskctl.platforms import Platform

if TYPE_CHECKING:
    from deskctl.providers.base import ExecResult, RemoteHandle

__all__ = ["GuestActions", "check_exec_options", "cmd_line", "dialect_of", "posix_line", "powershell_line",
           "run_here"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*\Z")


def run_here(line: str, timeout: float, *, env: Mapping[str, str] | None = None,
             provider: str | None) -> tuple[int, bytes, bytes]:
    """Run the shell ``line`` on THIS machine (the xvfb host, or the desktop the agent runs in), in its own
    process group, and return (exit code, stdout, stderr). After ``timeout`` seconds the group is killed and the
    exit code is 124, as timeout(1) says; a daemon that left the group and holds the pipes is not waited for."""
    import contextlib
    import os
    import signal
    import subprocess

    from deskctl.errors import ProviderApiError

    try:
        proc = subprocess.Popen(["/bin/sh", "-c", line], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=None if env is None else dict(env),
                                start_new_session=True)
    except OSError as exc:
        raise ProviderApiError(f"cannot run /bin/sh: {exc.strerror}", provider=provider) from exc
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=_KILL_GRACE)
        except subprocess.TimeoutExpired:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            proc.wait()
            out, err = b"", b""
        return 124, out, err + f"deskctl: command timed out after {timeout:g}s\n".encode()


#: how long a killed command's pipes are read before they are given up
_KILL_GRACE = 5.0


def check_exec_options(env: Mapping[str, str] | None, user: str | None, provider: str | None) -> dict[str, str]:
    """Refuse names a shell cannot set (``usage.bad_env``) or a user name that is not one (``usage.bad_user``);
    returns ``env`` as a plain dict of strings."""
    clean: dict[str, str] = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise UsageError(f"invalid environment variable name {key!r}", code="usage.bad_env", provider=provider,
                             remedy="names are letters, digits and _, not starting with a digit")
        if "\0" in str(value):
            raise UsageError(f"environment variable {key} holds a NUL byte", code="usage.bad_env",
                             provider=provider)
        clean[key] = str(value)
    if user is not None and not _USER_NAME.match(user):
        raise UsageError(f"invalid user name {user!r}", code="usage.bad_user", provider=provider)
    return clean


def dialect_of(platform: str | Platform | None, windows_shell: str = "cmd") -> str:
    """``posix`` for ubuntu/macOS (and unknown), else ``windows_shell`` (``cmd`` or ``powershell``)."""
    return windows_shell if str(platform or "") == Platform.WINDOWS.value else "posix"


def posix_line(command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
               user: str | None = None, background: bool = False, setsid: bool = True, shell: str = "sh") -> str:
    """One ``sh`` line running ``command`` with ``sh -c`` (``shell -c``: a guest whose commands are bash's)
    in ``cwd`` with ``env`` added, as ``user`` (through ``sudo -n``), or detached (``background``: output to
    /dev/null, the line prints the new process id and returns at once). A missing ``cwd`` fails the line with
    the shell's message and exit code 2."""
    argv: list[str] = [shell, "-c", command]
    if env:
        argv = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
    if user:
        argv = ["sudo", "-n", "-H", "-u", user, "--", *argv]
    line = " ".join(shlex.quote(a) for a in argv)
    if background:
        detach = "setsid nohup" if setsid else "nohup"
        line = f"{detach} {line} </dev/null >/dev/null 2>&1 & echo $!"
    if cwd:
        line = f"cd -- {shlex.quote(cwd)} || exit 2; {line}"
    return line


_CMD_SPECIAL = frozenset(" \t&|<>^(),;=")


def _cmd_quote(value: str) -> str:
    if any(c in value for c in '"\r\n'):
        raise UsageError(f"cannot pass {value!r} to cmd.exe (quotes or line breaks)", code="usage.invalid")
    return value


def cmd_line(command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
             user: str | None = None, background: bool = False) -> str:
    """The same for ``cmd.exe``: ``cd /d "X" && set "K=V" && command``; ``background`` starts it with
    ``start "" /b``. Another ``user`` is not possible in one cmd line: ``usage.unsupported``."""
    if user:
        raise UsageError("running a command as another user is not supported on Windows", code="usage.unsupported")
    parts: list[str] = []
    if cwd:
        parts.append(f'cd /d "{_cmd_quote(cwd)}"')
    parts.extend(f'set "{k}={_cmd_quote(v)}"' for k, v in (env or {}).items())
    parts.append(f'start "" /b cmd /c {command}' if background else command)
    return " && ".join(parts)


def _ps_quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def powershell_line(command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                    user: str | None = None, background: bool = False) -> str:
    """The same for PowerShell; ``background`` uses ``Start-Process`` and prints the process id."""
    if user:
        raise UsageError("running a command as another user is not supported on Windows", code="usage.unsupported")
    parts: list[str] = []
    if cwd:
        parts.append(f"Set-Location -LiteralPath {_ps_quote(cwd)}")
    parts.extend(f"$env:{k} = {_ps_quote(v)}" for k, v in (env or {}).items())
    if background:
        parts.append("(Start-Process -PassThru -WindowStyle Hidden -FilePath cmd.exe -ArgumentList "
                     f"{_ps_quote('/c ' + command)}).Id")
    else:
        parts.append(command)
    return "; ".join(parts)


def background_pid(result: ExecResult) -> int | None:
    """The process id a background line printed (its last line), when it printed one."""
    lines = result.stdout.strip().splitlines()
    return int(lines[-1]) if lines and lines[-1].strip().isdigit() else None


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


#: the most bytes of clipboard text sent inside the command line (as base64, a third more); more goes as a file
CLIPBOARD_INLINE_BYTES = 32 * 1024


def _xclip_in(before: str, redirect: str, cleanup: str = "") -> str:
    """A sh line that gives xclip the clipboard on its stdin (``before`` pipes into it, or ``redirect`` names
    a file) and fails with xclip's own stderr. xclip stays behind as the selection's owner: its output goes to
    /dev/null and a file, never to exec's pipes, which it would hold open."""
    return (f'e=$(mktemp) || exit 1; {before}xclip -selection clipboard -i{redirect} >/dev/null 2>"$e"; s=$?; '
            f'{cleanup}cat "$e" >&2; rm -f "$e"; exit $s')


class GuestActions:
    """Harness actions as commands on the guest, for a provider class that has ``exec`` (mix in before
    :class:`~deskctl.providers.base.Provider`). ``_guest_dialect(handle)`` says which shell ``exec`` runs."""

    name: ClassVar[str]

    def _guest_dialect(self, handle: RemoteHandle) -> str:
        return dialect_of(handle.data.get("platform"))

    def _guest_run(self, handle: RemoteHandle, line: str, what: str, timeout: float = 30.0) -> str:
        from deskctl.errors import ProviderApiError

        result = self.exec(handle, line, timeout)  # type: ignore[attr-defined]
        if result.exit_code != 0:
            from deskctl._redact import redact

            # the tool's own words say why (no display, no clipboard manager), with any secret in them removed
            detail = redact((result.stderr or result.stdout).strip()[-400:])
            raise ProviderApiError(f"{self.name}: cannot {what} (exit {result.exit_code}): {detail}",
                                   provider=self.name)
        return str(result.stdout)

    def clipboard_get(self, handle: RemoteHandle) -> str:
        dialect = self._guest_dialect(handle)
        if dialect == "posix" and str(handle.data.get("platform")) == Platform.MACOS.value:
            line = "pbpaste"
        elif dialect == "posix":
            line = "xclip -selection clipboard -o 2>/dev/null || true"
        else:
            line = ('powershell -NoProfile -Command "[Console]::OutputEncoding=[Text.Encoding]::UTF8; '
                    'Get-Clipboard -Raw"' if dialect == "cmd" else
                    "[Console]::OutputEncoding=[Text.Encoding]::UTF8; Get-Clipboard -Raw")
            return self._guest_run(handle, line, "read the clipboard").removesuffix("\r\n")
        return self._guest_run(handle, line, "read the clipboard")

    def clipboard_set(self, handle: RemoteHandle, text: str) -> None:
        """Put ``text`` (any size) on the clipboard. A short text travels in the command line (base64); a longer
        one would pass the guest's limit on one argument (128 KiB on Linux), so it is copied to a private file
        on the desktop first (the provider's ``upload``) and the clipboard tool reads it on its stdin. The tool's
        own stderr is in the error when it fails."""
        dialect = self._guest_dialect(handle)
        macos = dialect == "posix" and str(handle.data.get("platform")) == Platform.MACOS.value
        if len(text.encode()) <= CLIPBOARD_INLINE_BYTES:
            data = _b64(text)
            if macos:
                line = f"printf %s {data} | base64 -D | pbcopy"
            elif dialect == "posix":
                line = _xclip_in(f"printf %s {data} | base64 -d | ", "")
            else:
                script = ("Set-Clipboard -Value ([Text.Encoding]::UTF8.GetString([Convert]::FromBase64String("
                          f"'{data}')))")
                line = f'powershell -NoProfile -Command "{script}"' if dialect == "cmd" else script
            self._guest_run(handle, line, "set the clipboard")
            return
        import os
        import tempfile
        import uuid

        name = f"deskctl-clip-{uuid.uuid4().hex[:12]}"
        staged = f"C:\\Windows\\Temp\\{name}" if dialect != "posix" else f"/tmp/{name}"
        fd, local = tempfile.mkstemp(prefix="deskctl-clip-")  # 0600: the text may be a secret
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(text.encode())
            self.upload(handle, local, staged)  # type: ignore[attr-defined]
        finally:
            os.unlink(local)
        if macos:
            line = f"pbcopy < {shlex.quote(staged)}; s=$?; rm -f {shlex.quote(staged)}; exit $s"
        elif dialect == "posix":
            line = _xclip_in("", f" <{shlex.quote(staged)}", cleanup=f"rm -f {shlex.quote(staged)}; ")
        else:
            quoted = _ps_quote(staged)
            script = (f"try {{ Set-Clipboard -Value (Get-Content -Raw -Encoding UTF8 -LiteralPath {quoted}) }} "
                      f"finally {{ Remove-Item -Force -LiteralPath {quoted} }}")
            line = f'powershell -NoProfile -Command "{script}"' if dialect == "cmd" else script
        self._guest_run(handle, line, "set the clipboard")

    def _require_program(self, handle: RemoteHandle, app: str) -> None:
        """``usage.no_such_program`` (exit 2) unless the guest's shell finds ``app`` (a name on its PATH, or a
        path): a detached start reports a pid even for a program that is not there."""
        dialect = self._guest_dialect(handle)
        if not app.strip():
            raise UsageError("an empty program name", code="usage.no_such_program", provider=self.name,
                             remedy="name the program to start")
        if dialect == "posix":
            line = f"if command -v -- {shlex.quote(app)} >/dev/null 2>&1; then echo found; else echo missing; fi"
        else:
            if dialect == "cmd":
                _cmd_quote(app)
            script = (f"if (Get-Command -ErrorAction SilentlyContinue -Name {_ps_quote(app)}) {{ 'found' }} "
                      "else { 'missing' }")
            line = f'powershell -NoProfile -Command "{script}"' if dialect == "cmd" else script
        said = self._guest_run(handle, line, f"look for the program {app!r}").strip().splitlines()
        if said and said[-1].strip() == "missing":
            raise UsageError(f"no program {app!r} on the desktop", code="usage.no_such_program",
                             provider=self.name, remedy="check the name (it is looked up on the desktop's PATH), "
                                                        "or give its full path")

    def launch(self, handle: RemoteHandle, app: str, args: Sequence[str] = ()) -> int | None:
        """Start ``app`` with ``args`` detached; returns its process id where the guest tells it. A program the
        guest does not have is ``usage.no_such_program``, before anything starts."""
        self._require_program(handle, app)
        return self._launch_detached(handle, app, args)

    def _launch_detached(self, handle: RemoteHandle, app: str, args: Sequence[str]) -> int | None:
        dialect = self._guest_dialect(handle)
        if dialect == "posix":
            command = shlex.join([app, *args])
        else:
            # quoted, cmd.exe takes & | < > ^ ( ) literally (a URL's & would otherwise start a second command)
            command = " ".join(f'"{_cmd_quote(a)}"' if any(c in a for c in _CMD_SPECIAL) else _cmd_quote(a)
                               for a in (app, *args))
        result = self.exec(handle, command, 30.0, background=True)  # type: ignore[attr-defined]
        if result.exit_code != 0:
            from deskctl.errors import ProviderApiError

            raise ProviderApiError(f"{self.name}: cannot launch {app!r} (exit {result.exit_code})",
                                   provider=self.name)
        return result.pid if result.pid is not None else background_pid(result)

    def open_url(self, handle: RemoteHandle, url: str, browser: str | None = None) -> None:
        """Open ``url`` with ``browser``, else the desktop's opener (``xdg-open`` / ``open`` / ``explorer.exe``)."""
        platform = str(handle.data.get("platform") or "")
        opener = browser or {Platform.MACOS.value: "open", Platform.WINDOWS.value: "explorer.exe"}.get(platform,
                                                                                                   "xdg-open")
        if browser is not None or platform not in (Platform.MACOS.value, Platform.WINDOWS.value):
            self._require_program(handle, opener)  # a desktop without xdg-open, or a --browser it lacks
        self._launch_detached(handle, opener, [url])

    def window_titles(self, handle: RemoteHandle) -> list[str]:
        """Titles of the desktop's top-level windows (empty names left out)."""
        dialect = self._guest_dialect(handle)
        if dialect == "posix" and str(handle.data.get("platform")) == Platform.MACOS.value:
            line = ("osascript -e 'tell application \"System Events\" to get name of every window of "
                    "(every process whose background only is false)' | tr ',' '\\n'")
        elif dialect == "posix":
            line = "xwininfo -root -tree | sed -n 's/^ *0x[0-9a-f]* \"\\(.*\\)\": .*/\\1/p'"
        else:
            script = ("Get-Process | Where-Object { $_.MainWindowTitle } | "
                      "ForEach-Object { $_.MainWindowTitle }")
            line = f'powershell -NoProfile -Command "{script}"' if dialect == "cmd" else script
        out = self._guest_run(handle, line, "list windows")
        return [t.strip() for t in out.splitlines() if t.strip()]
