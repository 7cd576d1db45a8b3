"""The host's X server for the ``xvfb`` provider: display lock files and sockets, the window checks readiness
uses, and the owner-pid watcher script (run by path, imports nothing of deskctl)."""

from __future__ import annotations

import _socket
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.spec import Geometry

__all__ = ["BROWSERS", "WATCHER", "XVFB_DEPTHS", "claim_lock", "default_geometry", "depth_problem", "file_id",
           "has_big_window", "has_window_manager", "listening", "lock_owner", "which"]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "firefox", "firefox-esr")


def default_geometry() -> Geometry:
    from deskctl.spec import Geometry

    return Geometry(width=1024, height=768)


#: colour depths Xvfb can give a screen (it refuses 32)
XVFB_DEPTHS = (8, 16, 24)

# The owner-pid watch, written to the session directory and run by path (no deskctl import: it starts in a
# few milliseconds and holds no file of ours open).
# argv: owner pid (0 = none), expiry (epoch, 0 = none), JSON [[pid, start_ticks], ...].
WATCHER = r"""
import json, os, select, signal, sys, time
owner, expires, targets = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
def ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
def remaining():
    return None if expires <= 0 else max(0.0, expires - time.time())
if owner > 0:
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        fd = None
    if fd is not None:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll(None if remaining() is None else remaining() * 1000) and (
                remaining() is None or remaining() > 0):
            pass
elif expires > 0:
    while remaining() > 0:
        time.sleep(remaining())
else:
    sys.exit(0)
for sig in (signal.SIGTERM, signal.SIGKILL):
    live = [(p, t) for p, t in targets if ticks(p) == t]
    for pid, _ in live:
        try:
            os.killpg(pid, sig)
        except OSError:
            pass
    end = time.time() + 5
    for pid, t in live:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.poll(max(0.0, end - time.time()) * 1000)
        os.close(fd)
"""


def which(name: str) -> str | None:
    """The program ``name`` runs, as :func:`shutil.which` finds it (a name with a ``/`` as it is, else the first
    executable file of that name along ``$PATH``), without importing :mod:`shutil` (which imports bz2, lzma and
    zlib): every ``deskctl up`` of an xvfb desktop looks up Xvfb."""
    def runnable(path: str) -> bool:
        return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)

    if os.path.dirname(name):
        return name if runnable(name) else None
    seen: set[str] = set()
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if folder in seen:
            continue
        seen.add(folder)
        path = os.path.join(folder, name)
        if runnable(path):
            return path
    return None


def has_window_manager(display: Any, root: Any) -> bool:
    """An EWMH window manager (openbox) is running once it has set _NET_SUPPORTING_WM_CHECK on the root."""
    from Xlib import X

    atom = display.intern_atom("_NET_SUPPORTING_WM_CHECK")
    return root.get_full_property(atom, X.AnyPropertyType) is not None


def has_big_window(display: Any, root: Any) -> bool:
    """A viewable top-level window of useful size exists (a browser's, or its window manager frame)."""
    import Xlib.error
    from Xlib import X

    for child in root.query_tree().children:
        try:
            attrs, geom = child.get_attributes(), child.get_geometry()
        except Xlib.error.XError:
            continue  # gone meanwhile
        if attrs.map_state == X.IsViewable and geom.width >= 50 and geom.height >= 50:
            return True
    return False


def depth_problem(geometry: Geometry | None) -> str | None:
    if geometry is not None and geometry.depth not in XVFB_DEPTHS:
        allowed = ", ".join(map(str, XVFB_DEPTHS))
        return f"Xvfb cannot make a {geometry.depth}-bit screen (depths {allowed}); 24 is the usual one"
    return None


def lock_owner(lock: str | os.PathLike[str]) -> int | None:
    """The pid in an X lock file (None when there is no lock; -1 when it is unreadable)."""
    try:
        with open(lock) as text:
            return int(text.read().strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return -1


def file_id(path: str | os.PathLike[str]) -> str | None:
    """The identity of the file at ``path``: inode and change time, since a freed inode number is soon reused
    (None when there is no file)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_ino}:{info.st_ctime_ns}"


def listening(path: str | os.PathLike[str]) -> bool:
    """Whether a server accepts connections on the unix socket at ``path``."""
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        probe.connect(os.fspath(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def claim_lock(number: int, pid: int) -> None:
    """Write the classic X lock file /tmp/.XN-lock for a display Xvfb chose with -displayfd (which takes its
    number by binding the abstract socket and writes no lock), so tools that pick a display by lock files
    (xvfb-run) skip ours. A lock of a dead process is replaced; a live one is left alone. Best effort."""
    from deskctl.providers._procs import start_ticks

    lock = f"/tmp/.X{number}-lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileExistsError:
            owner = lock_owner(lock)
            if owner is not None and owner > 0 and start_ticks(owner) is not None:
                return
            try:
                os.unlink(lock)
            except OSError:
                pass
            continue
        except OSError:
            return
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{pid:>10}\n")
        return
