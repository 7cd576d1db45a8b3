"""``deskctl cp``: files and directories between this machine and a desktop, with ``docker cp``'s syntax.

The copy itself is the library's (:meth:`deskctl.Desktop.upload` / :meth:`~deskctl.Desktop.download`, which
make the destination a copy of the source); this module adds docker cp's reading of the two arguments:
exactly one is ``ID:PATH``, and a destination that is a directory means "into it, under the source's name".
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any

import click

from deskctl.cli._common import echo_json, json_option, note
from deskctl.errors import UsageError

__all__ = ["Location", "cp", "into_destination", "parse_location"]


@dataclass(frozen=True)
class Location:
    """One argument of ``cp``: a path here (``session_id`` None) or on the desktop ``session_id``."""

    path: str
    session_id: str | None = None

    @property
    def remote(self) -> bool:
        return self.session_id is not None

    def __str__(self) -> str:
        return f"{self.session_id}:{self.path}" if self.session_id else self.path


def parse_location(text: str) -> Location:
    """docker cp's rule: ``ID:PATH`` is on a desktop; a path that starts with ``/``, ``.`` or ``~`` is local even
    when it holds a ``:`` (write ``./a:b`` for a local file named ``a:b``), as is one without ``:``."""
    if not text:
        raise UsageError("an empty path", code="usage.invalid", remedy="deskctl cp SRC ID:DEST or ID:SRC DEST")
    if text.startswith(("/", ".", "~")):
        return Location(text)
    head, sep, tail = text.partition(":")
    if not sep or "/" in head or "\\" in head:
        return Location(text)
    if not head:
        raise UsageError(f"{text!r} names no session before ':'", code="usage.invalid", remedy="deskctl ls")
    if not tail:
        raise UsageError(f"{text!r} names no path on the desktop after ':'", code="usage.invalid",
                         remedy=f"{head}:/absolute/path")
    return Location(tail, head)


def _windows_path(path: str) -> bool:
    """A path on the desktop written the Windows way (``C:\\Users\\me``, ``C:/x``, ``\\\\server\\share``)."""
    return "\\" in path or (len(path) >= 2 and path[1] == ":" and path[0].isalpha())


def _separators(location: Location) -> tuple[str, ...]:
    if location.remote:
        return ("/", "\\") if _windows_path(location.path) else ("/",)
    return tuple({os.sep, os.altsep or os.sep, "/"})


def _basename(location: Location) -> str:
    """The name the source's copy gets inside a destination directory ("" for a root)."""
    if not location.remote:
        return os.path.basename(os.path.normpath(os.path.abspath(os.path.expanduser(location.path))))
    if _windows_path(location.path):
        return PureWindowsPath(location.path).name
    return posixpath.basename(posixpath.normpath(location.path))


def into_destination(source: Location, dest: Location, dest_is_dir: bool) -> str:
    """The path to give the library for ``cp SOURCE DEST``: docker cp's rule that a destination which is an
    existing directory (``dest_is_dir``: known by stat on this machine) or ends with a separator (the only sign
    on the desktop, where nothing is looked up) receives the source under the source's own name; otherwise the
    destination is the copy's own path."""
    name = _basename(source)
    path = dest.path if dest.remote else os.path.expanduser(dest.path)
    if not (dest_is_dir or dest.path.endswith(_separators(dest))) or not name:
        return path
    if not dest.remote:
        return os.path.join(path, name)
    separator = "\\" if "\\" in path else "/"
    return path.rstrip("\\/") + separator + name


def _tally(path: Path) -> tuple[int, int]:
    """Regular files and their bytes under ``path`` (a file counts itself)."""
    if not path.is_dir():
        return (1, path.stat().st_size) if path.is_file() else (0, 0)
    files = total = 0
    for entry in path.rglob("*"):
        if entry.is_file() and not entry.is_symlink():
            files += 1
            total += entry.stat().st_size
    return files, total


@click.command(name="cp")
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DEST")
@json_option
def cp(source: str, destination: str, as_json: bool) -> None:
    """Copy a file or a directory (recursively) between this machine and a desktop, like docker cp.

    \b
    deskctl cp ./data ID:/home/user/data      make /home/user/data a copy of ./data
    deskctl cp report.txt ID:/tmp/            into /tmp (trailing /): /tmp/report.txt
    deskctl cp ID:/var/log/app ./logs/        into ./logs: ./logs/app
    deskctl cp ID:'C:\\Users\\me\\out.txt' .    Windows paths on a Windows desktop

    Exactly one of SRC and DEST is ID:PATH (ID as `deskctl ls` shows it). As with docker cp, a DEST that is a
    directory receives SRC under SRC's name: here that is known by looking (an existing directory), on the
    desktop only by a trailing / (or \\ on Windows); without it, DEST is the copy's own path (its parents are
    made, a file there is replaced). A local path holding ':' is written ./a:b. A missing SRC is
    usage.no_such_file (exit 2).
    """
    src, dest = parse_location(source), parse_location(destination)
    if src.remote == dest.remote:
        where = (f"{source!r} and {destination!r} are both on a desktop" if src.remote
                 else f"neither {source!r} nor {destination!r} is on a desktop")
        raise UsageError(f"{where}: exactly one must be ID:PATH",
                         code="usage.invalid", remedy="deskctl cp SRC ID:DEST, or deskctl cp ID:SRC DEST")
    if not src.remote:
        local = Path(os.path.expanduser(src.path))
        if not local.exists() and not local.is_symlink():
            raise UsageError(f"{src.path}: no such file or directory here", code="usage.no_such_file")
        target = into_destination(src, dest, dest_is_dir=False)
    else:
        target = into_destination(src, dest, dest_is_dir=Path(os.path.expanduser(dest.path)).is_dir())
        local = Path(target)
    session_id = dest.session_id if dest.remote else src.session_id
    assert session_id is not None
    from deskctl.cli._do_fast import attached as _attached

    with _attached(session_id) as desk:
        try:
            if dest.remote:
                desk.upload(local, target)
            else:
                desk.download(src.path, target)
        except (IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
            # a file onto a directory or the other way round (the desktop's side is not looked at beforehand)
            raise UsageError(f"cannot copy {src} to {target!r}: {exc.strerror}", code="usage.bad_path",
                             remedy="end DEST with / to copy into a directory on the desktop") from None
        files, size = _tally(local)
    shown = f"{session_id}:{target}" if dest.remote else target
    info: dict[str, Any] = {"id": session_id, "source": str(src), "destination": shown, "files": files,
                            "bytes": size}
    if as_json:
        echo_json(info)
    else:
        note(f"copied {src} to {shown} ({files} file{'s' if files != 1 else ''}, {size} bytes)")
