"""The actions a harness calls that are commands on the guest (clipboard, open a URL, launch an app, list window
titles), built once for every provider on its ``exec``. The shell lines themselves (exec options as shell text,
:func:`run_here`) are :mod:`deskctl.core.shell`, shared with the in-desktop agent, and re-exported here
(imported on first use).

Every provider whose ``exec`` runs a shell line gets the harness actions from :class:`GuestActions` for free;
a provider with a native API for one of them (a computer-server ``set_clipboard``, an X connection that reads
window names) overrides just that method. Three dialects: ``posix`` (``sh``: ubuntu and macOS), ``cmd``
(``cmd.exe``) and ``powershell``.
"""

from __future__ import annotations

from deskctl.errors import UsageError
from deskctl.platforms import Platform

TYPE_CHECKING = False
if TYPE_CHECKING:
    import shlex
    from collections.abc import Sequence
    from typing import ClassVar

    from deskctl.core import shell
    from deskctl.core.shell import (
        background_pid,
        check_exec_options,
        cmd_line,
        dialect_of,
        posix_line,
        powershell_line,
        run_here,
    )
    from deskctl.providers.base import RemoteHandle
else:
    from deskctl._lazy import LazyModule

    shlex = LazyModule("shlex")  # with re: loaded when a guest command line is written, not with every desktop
    shell = LazyModule("deskctl.core.shell")  # loaded by the first guest command, not with every desktop

__all__ = ["GuestActions", "background_pid", "check_exec_options", "cmd_line", "dialect_of", "posix_line",
           "powershell_line", "run_here"]

#: core/shell.py's names this module re-exports (imported when first asked for: see :func:`__getattr__`)
_SHELL = frozenset({"background_pid", "check_exec_options", "cmd_line", "dialect_of", "posix_line", "powershell_line",
                    "run_here"})


def __getattr__(name: str) -> object:
    """The re-exports of :mod:`deskctl.core.shell`, which a process that runs no guest command (``deskctl do``,
    ``screenshot``, ``down``) does not import."""
    if name not in _SHELL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(shell, name)
    globals()[name] = value
    return value


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


#: the most bytes of clipboard text sent inside the command line (as base64, a third more); more goes as a file
CLIPBOARD_INLINE_BYTES = 32 * 1024


def _xclip_in(before: str, redirect: str, holds: str, cleanup: str = "") -> str:
    """A sh line that gives xclip the clipboard on its stdin (``before`` pipes into it, or ``redirect`` names
    a file) and fails with xclip's own stderr. xclip stays behind as the selection's owner: its output goes to
    /dev/null and a file, never to exec's pipes, which it would hold open. The line ends once the clipboard reads
    back the text (``holds``: a sh test of ``xclip -o``'s output), for at most 5 s: xclip's parent exits as soon
    as it has forked, and its child claims the selection a moment later, so a read at once could still see the
    old owner's text or none (seen in CI as an empty clipboard_get right after clipboard_set)."""
    return (f'e=$(mktemp) || exit 1; {before}xclip -selection clipboard -i{redirect} >/dev/null 2>"$e"; s=$?; '
            f'i=0; while [ $s -eq 0 ] && [ $i -lt 100 ] && ! {holds}; do sleep 0.05; i=$((i+1)); done; '
            f'{cleanup}cat "$e" >&2; rm -f "$e"; exit $s')


class GuestActions:
    """Harness actions as commands on the guest, for a provider class that has ``exec`` (mix in before
    :class:`~deskctl.providers.base.Provider`). ``_guest_dialect(handle)`` says which shell ``exec`` runs."""

    name: ClassVar[str]

    def _guest_dialect(self, handle: RemoteHandle) -> str:
        return shell.dialect_of(handle.data.get("platform"))

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
                read_back = '"$(xclip -selection clipboard -o 2>/dev/null | base64 | tr -d "\\n")"'
                line = _xclip_in(f"printf %s {data} | base64 -d | ", "", f'[ {read_back} = "{data}" ]')
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
            holds = f"xclip -selection clipboard -o 2>/dev/null | cmp -s - {shlex.quote(staged)}"
            line = _xclip_in("", f" <{shlex.quote(staged)}", holds, cleanup=f"rm -f {shlex.quote(staged)}; ")
        else:
            quoted = shell._ps_quote(staged)
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
                shell._cmd_quote(app)
            script = (f"if (Get-Command -ErrorAction SilentlyContinue -Name {shell._ps_quote(app)}) {{ 'found' }} "
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
            quote, special = shell._cmd_quote, shell._CMD_SPECIAL
            command = " ".join(f'"{quote(a)}"' if any(c in a for c in special) else quote(a) for a in (app, *args))
        result = self.exec(handle, command, 30.0, background=True)  # type: ignore[attr-defined]
        if result.exit_code != 0:
            from deskctl.errors import ProviderApiError

            raise ProviderApiError(f"{self.name}: cannot launch {app!r} (exit {result.exit_code})",
                                   provider=self.name)
        return result.pid if result.pid is not None else shell.background_pid(result)

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
