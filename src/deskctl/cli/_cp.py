"""``deskctl cp``'s work, without click: the click command (:func:`deskctl.cli.cp_cmds.cp`) and the click-free
path of ``deskctl cp SRC DEST`` (:func:`run`) both call :func:`copy`, so both print the same bytes and raise the
same errors.

A copy is a whole process per call for a script that moves files with deskctl as it would with ``docker cp``, and
click's import (with the command modules it loads) was a fifth of a 64 MiB copy. :func:`run` takes the plain form
only: two arguments and ``--json``. Anything else (``--help``, another option, ``--``, an argument that starts with
``-``, one argument too few or too many, ``[defaults]`` in a config file, shell completion) it leaves to click,
untouched: help, parse errors and their exit codes come from click alone.

docker cp's reading of the two arguments lives here too: exactly one is ``ID:PATH``, and a destination that is a
directory means "into it, under the source's name".
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path, PureWindowsPath
from typing import Any, NamedTuple

from deskctl.cli._output import echo, echo_json
from deskctl.errors import UsageError

__all__ = ["Location", "copy", "into_destination", "parse_location", "run"]


class Location(NamedTuple):
    """One argument of ``cp``: a path here (``session_id`` None) or on the desktop ``session_id``. (A named tuple,
    not a dataclass: :mod:`dataclasses` imports :mod:`inspect`, which no other module of a copy needs.)"""

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
    folders = [str(path)]
    while folders:  # the directory entries' own types: one lstat per regular file, none for the rest
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    files += 1
                    total += entry.stat(follow_symlinks=False).st_size
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
    return files, total


def copy(source: str, destination: str, *, as_json: bool) -> None:
    """``deskctl cp SOURCE DESTINATION``: see ``deskctl cp --help``."""
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
        except OSError as exc:
            # this machine's side (the providers say what goes wrong on theirs): a folder that cannot be made, a
            # file that cannot be written (/proc, a read-only mount, no space left)
            raise UsageError(f"cannot copy {src} to {target!r}: {exc.strerror or exc}", code="usage.bad_path",
                             remedy="name a path here that can be written") from None
        files, size = _tally(local)
    shown = f"{session_id}:{target}" if dest.remote else target
    info: dict[str, Any] = {"id": session_id, "source": str(src), "destination": shown, "files": files,
                            "bytes": size}
    if as_json:
        echo_json(info)
    else:
        echo(f"copied {src} to {shown} ({files} file{'s' if files != 1 else ''}, {size} bytes)", err=True)


def run(args: list[str]) -> bool:
    """Run ``deskctl cp SRC DEST [--json]`` without click; False (having done nothing) when click is to run it.
    Errors are raised, for the abort path of :func:`deskctl.cli.main`."""
    if len(args) < 3 or args[0] != "cp":
        return False
    rest = args[1:]
    as_json = "--json" in rest
    paths = [arg for arg in rest if arg != "--json"]
    if len(paths) != 2 or len(rest) - len(paths) > 1 or any(arg.startswith("-") for arg in paths):
        return False  # click's: an option, "--", a path that looks like one, a wrong count
    from deskctl.cli._do_fast import clickless

    if not clickless():
        return False
    copy(paths[0], paths[1], as_json=as_json)
    return True
