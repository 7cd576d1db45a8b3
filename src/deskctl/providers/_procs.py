"""Processes deskctl started for a desktop on this host, found and ended safely: shared by the providers whose
desktop's programs run here (``xvfb``, ``memory``).

A process is named by its pid and its start time in clock ticks since boot (``/proc/PID/stat``), so a recycled pid
is never taken for it; everything started on a desktop carries ``DESKCTL_SESSION=<id>`` in its environment, so
what left its process group is still found (:func:`tagged_processes`).
"""

from __future__ import annotations

import os
import time

__all__ = ["SESSION_ENV", "alive", "other_user", "start_ticks", "tagged_processes", "wait_gone"]

#: environment variable set for every program deskctl starts on a desktop (window manager, browser, exec)
SESSION_ENV = "DESKCTL_SESSION"


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields and fields[0] == "Z":
        return None  # a zombie has exited
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def alive(pid: int, ticks: int | None) -> bool:
    return ticks is not None and start_ticks(pid) == ticks


def wait_gone(procs: list[tuple[int, int | None]], deadline: float) -> list[int]:
    """Wait (on pidfds, no polling) until every process is gone or the deadline passes; the pids still alive."""
    from deskctl._fds import wait_readable  # here: a `deskctl do` reads start times, it waits for nothing

    left: list[int] = []
    for pid, ticks in procs:
        if not alive(pid, ticks):
            continue
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            if alive(pid, ticks):
                wait_readable([fd], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)
        if alive(pid, ticks):
            left.append(pid)
    return left


#: PF_KTHREAD in /proc/PID/stat's flags: a kernel thread, whose environment and command line are always empty
_KERNEL_THREAD = 0x00200000
#: how long a process caught in the middle of execve (its new memory has no environment yet) is read again
_EXEC_SETTLE = 1.0


def _between_exec(pid: str) -> bool:
    """True when ``pid`` showed an empty environment *and* command line while it is neither a kernel thread nor a
    zombie: a process inside execve, whose new memory has no arguments yet. It is read again, not skipped: under
    load that window is long enough for a desktop's freshly started daemon to escape a scan."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if fh.read(1):
                return False
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z" and not int(fields[6]) & _KERNEL_THREAD
    except (OSError, IndexError, ValueError):
        return False


def tagged_processes(session_id: str, directory: str | None = None) -> list[tuple[int, int | None]]:
    """Processes whose environment carries ``DESKCTL_SESSION=<session_id>`` (everything the desktop's programs
    and exec'd commands started, whatever group they moved to), or whose command line names a path under
    ``directory`` (the session's own folder: Chromium's helpers, started with a scrubbed environment in a session of
    their own, name its profile there), except this process and its parent. A process caught inside execve is
    read again for up to a second."""
    needle = f"{SESSION_ENV}={session_id}\0".encode()
    folder = (directory.rstrip("/") + "/").encode() if directory else None
    spared = {os.getpid(), os.getppid()}
    found: list[tuple[int, int | None]] = []
    try:
        entries = [name for name in os.listdir("/proc") if name.isdigit() and int(name) not in spared]
    except OSError:
        return found
    deadline = time.monotonic() + _EXEC_SETTLE
    while entries:
        unsettled: list[str] = []
        for name in entries:
            tagged = _tagged(name, needle, folder)
            if tagged is None:
                unsettled.append(name)
            elif tagged:
                ticks = start_ticks(int(name))
                if ticks is not None:
                    found.append((int(name), ticks))
        if not unsettled or time.monotonic() >= deadline:
            break
        entries = unsettled
        time.sleep(0.01)
    return found


def _tagged(name: str, needle: bytes, folder: bytes | None) -> bool | None:
    """Whether process ``name`` belongs to the session; None while it is inside execve (see :func:`_between_exec`)."""
    try:
        with open(f"/proc/{name}/environ", "rb") as fh:
            environ = fh.read()
    except OSError:
        return False
    if environ.startswith(needle) or b"\0" + needle in environ:
        return True
    if not environ and _between_exec(name):
        return None
    if folder is None:
        return False
    try:
        with open(f"/proc/{name}/cmdline", "rb") as fh:
            return folder in fh.read()
    except OSError:
        return False


def other_user(user: str | None, provider: str) -> str | None:
    """``user`` when it is not the one deskctl runs as (then ``sudo`` switches to it for a command run on this
    host), else None. Only root may switch here: anyone else gets ``usage.unsupported`` rather than a sudo password
    prompt that fails; without sudo installed, :class:`~deskctl.errors.ProviderUnreachable`. An unknown user is
    ``usage.bad_user``."""
    if user is None:
        return None
    import pwd

    from deskctl.errors import ProviderUnreachable, UsageError

    try:
        wanted = pwd.getpwnam(user)
    except KeyError:
        raise UsageError(f"no user {user!r} on this host", code="usage.bad_user", provider=provider) from None
    if wanted.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise UsageError(f"{provider} runs commands as another user ({user}) only when deskctl runs as root",
                         code="usage.unsupported", provider=provider, remedy="run deskctl as root, or leave user unset")
    import shutil  # here: only a command run as another user looks for sudo

    if shutil.which("sudo") is None:
        raise ProviderUnreachable("running a command as another user needs sudo, which is not installed",
                                  provider=provider, remedy="apt-get install sudo")
    return user
