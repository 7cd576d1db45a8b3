"""Where deskctl keeps its files. ``DESKCTL_HOME`` overrides the user data directory; read at call time."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["home_dir", "home_path", "pure_path_str", "remove_tree", "runtime_dir", "runtime_path"]


def home_dir() -> Path:
    """``$DESKCTL_HOME``, else the platform's user data directory for deskctl. Created on first use.

    A path that is not a directory and cannot become one (a file, a folder under a file, no permission) is
    :class:`~deskctl.errors.ConfigInvalid` (exit 2), never an internal error."""
    from pathlib import Path

    return Path(home_path())


def home_path() -> str:
    """:func:`home_dir` as a string, made without :mod:`pathlib` (which imports urllib.parse and ipaddress: about
    9% of the instructions of a ``deskctl do`` process), for the modules of the per-call CLI paths."""
    env = os.environ.get("DESKCTL_HOME")
    # what Path(...) made of it: expanded, with no trailing or doubled separators and no "." parts
    path = pure_path_str(os.path.expanduser(env)) if env else pure_path_str(_user_data_dir())
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        from deskctl.errors import ConfigInvalid

        what = "DESKCTL_HOME" if env else "the deskctl data directory"
        raise ConfigInvalid(
            f"{what} {str(path)!r} is not a usable directory: {exc.strerror or exc}",
            remedy="set DESKCTL_HOME to a directory deskctl may create and write",
        ) from None
    return path


def takeover_lock(session_id: str) -> str:
    """The file a person's takeover of ``session_id`` holds locked (:mod:`deskctl.episodes.takeover`); here so that
    an agent's action can see that there is none without importing that module."""
    return os.path.join(home_path(), "run", "takeover", f"{session_id}.lock")


def _user_data_dir() -> str:
    """platformdirs' ``user_data_dir("deskctl")``. On Linux, worked out here as platformdirs does (an absolute
    ``$XDG_DATA_HOME``, else ``~/.local/share``, a relative ``HOME`` counting as unset), because importing
    platformdirs costs every CLI call about 14% of a ``deskctl do`` (tempfile, random, shutil, bz2, lzma);
    tests/unit/test_paths.py holds the two equal. Elsewhere, platformdirs itself."""
    import sys

    if not sys.platform.startswith("linux"):
        from platformdirs import user_data_dir

        return user_data_dir("deskctl", appauthor=False)
    xdg = os.environ.get("XDG_DATA_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "deskctl")
    home = os.environ.get("HOME", "")
    if not os.path.isabs(home):
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(home, ".local", "share", "deskctl")


def pure_path_str(name: str) -> str:
    """``str(pathlib.PurePosixPath(name))`` without pathlib: separators collapsed, "." parts and a trailing
    separator dropped (".." kept, as pathlib keeps it); "." for an empty path."""
    if not name:
        return "."
    lead = "//" if name.startswith("//") and not name.startswith("///") else "/" if name.startswith("/") else ""
    parts = [part for part in name.split("/") if part and part != "."]
    return (lead + "/".join(parts)) or "."


def runtime_dir() -> Path:
    """Per-user directory for sockets, cookies and pid files (mode 0700), under :func:`home_dir`."""
    from pathlib import Path

    return Path(runtime_path())


def runtime_path() -> str:
    """:func:`runtime_dir` as a string (see :func:`home_path`)."""
    path = os.path.join(home_path(), "run")
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def remove_tree(path: str | os.PathLike[str]) -> None:
    """``shutil.rmtree(path, ignore_errors=True)`` without :mod:`shutil`, whose import brings ``bz2``, ``lzma`` and
    ``zlib`` (a twentieth of the instructions of a whole ``deskctl down`` process, which removes a desktop's
    small directories). Nothing is followed: a symbolic link is removed as a link (``path`` itself being one, as
    rmtree, nothing is done); what cannot be removed is left, silently."""
    if os.path.islink(path):
        return
    for root, dirs, files in os.walk(path, topdown=False):  # a link to a folder is listed in dirs, never entered
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            inner = os.path.join(root, name)
            try:
                os.unlink(inner) if os.path.islink(inner) else os.rmdir(inner)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass
