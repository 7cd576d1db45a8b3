"""Shell lines for commands run inside a desktop, shared by the providers and the in-desktop agent: ``exec``
options (cwd, env, user, background) as shell text in three dialects (``posix``: sh on ubuntu and macOS, ``cmd``
and ``powershell``), their checks, and :func:`run_here` for a command on this very machine (the xvfb host, or the
desktop the agent runs in). The harness actions built on them are :class:`deskctl.providers._guest.GuestActions`."""

from __future__ import annotations

from deskctl.errors import UsageError
from deskctl.platforms import Platform

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from deskctl.core.frames import ExecResult

__all__ = ["background_pid", "check_exec_options", "cmd_line", "dialect_of", "posix_line", "powershell_line",
           "run_here"]

# patterns, compiled on first use (re caches them): a `deskctl do` process imports this module and uses neither
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*\Z"
_USER_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.@-]*\Z"


def _matches(pattern: str, text: str) -> bool:
    import re

    return re.match(pattern, text) is not None


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
        if not isinstance(key, str) or not _matches(_ENV_NAME, key):
            raise UsageError(f"invalid environment variable name {key!r}", code="usage.bad_env", provider=provider,
                             remedy="names are letters, digits and _, not starting with a digit")
        if "\0" in str(value):
            raise UsageError(f"environment variable {key} holds a NUL byte", code="usage.bad_env",
                             provider=provider)
        clean[key] = str(value)
    if user is not None and not _matches(_USER_NAME, user):
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
    import shlex  # here: re and shlex load when a command line is written, not with every desktop

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
