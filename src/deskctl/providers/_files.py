"""File transfer built once for every provider: a provider gives two primitives that move ONE regular file
(``put_file(handle, local_path, remote_path)``, ``get_file(handle, remote_path, local_path)``), and
:class:`FileTransfer` makes ``upload``/``download`` of files and whole directories from them, with ``exec`` on
the guest for what a file API lacks: making parent directories, telling a file from a directory, and packing a
directory into one tar (GNU tar on Linux, bsdtar on macOS and Windows 10+).

Semantics (the library's; ``deskctl cp`` adds docker-cp's "into a directory" rule on top):
``upload(local, remote)`` makes ``remote`` a copy of ``local`` (a file, or a directory with everything under
it), creating missing parents and replacing a file that is there; ``download(remote, local)`` the same the
other way. A source that does not exist is ``usage.no_such_file`` (exit 2).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, ClassVar

from deskctl._fsreplace import replace_file
from deskctl.errors import ProviderApiError, UsageError
from deskctl.providers._guest import dialect_of
from deskctl.providers._tar import extract_tar, pack_dir

if TYPE_CHECKING:
    from deskctl.providers.base import RemoteHandle

__all__ = ["FileTransfer", "copy_here", "extract_tar", "no_such_file", "pack_dir", "remote_parent"]


def remote_parent(remote: str, dialect: str) -> str:
    path = PureWindowsPath(remote) if dialect != "posix" else PurePosixPath(remote)
    return str(path.parent)


def no_such_file(path: str, where: str, provider: str) -> UsageError:
    return UsageError(f"{path}: no such file or directory {where}", code="usage.no_such_file", provider=provider)


def _q(dialect: str, path: str) -> str:
    if dialect == "posix":
        return shlex.quote(path)
    if dialect == "powershell":
        return "'" + path.replace("'", "''") + "'"
    if '"' in path:
        raise UsageError(f"a Windows path cannot hold a double quote: {path!r}", code="usage.invalid")
    return f'"{path}"'


class FileTransfer:
    """Mix in before :class:`~deskctl.providers.base.Provider`; implement ``_put_file`` and ``_get_file``.
    ``_guest_dialect(handle)`` (from :class:`~deskctl.providers._guest.GuestActions`, or here) says which shell
    ``exec`` runs; ``_guest_tmp(handle)`` where a tar may be staged."""

    name: ClassVar[str]

    # -- what a provider implements ------------------------------------------------------------------------------
    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        raise NotImplementedError

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        """Write the remote file to ``local``; raise ``usage.no_such_file`` when it does not exist."""
        raise NotImplementedError

    # -- overridable -----------------------------------------------------------------------------------------------
    def _guest_dialect(self, handle: RemoteHandle) -> str:
        return dialect_of(handle.data.get("platform"))

    def _guest_tmp(self, handle: RemoteHandle) -> str:
        return "C:\\Windows\\Temp" if self._guest_dialect(handle) != "posix" else "/tmp"

    def _files_run(self, handle: RemoteHandle, line: str, what: str) -> str:
        result = self.exec(handle, line, 300.0)  # type: ignore[attr-defined]
        if result.exit_code != 0:
            detail = (result.stderr or result.stdout).strip()[-400:]
            raise ProviderApiError(f"{self.name}: cannot {what} (exit {result.exit_code}): {detail}",
                                   provider=self.name)
        return str(result.stdout)

    def _remote_kind(self, handle: RemoteHandle, remote: str) -> str:
        """``dir``, ``file`` or ``none``."""
        dialect, path = self._guest_dialect(handle), _q(self._guest_dialect(handle), remote)
        if dialect == "posix":
            line = f"if [ -d {path} ]; then echo dir; elif [ -e {path} ]; then echo file; else echo none; fi"
        elif dialect == "powershell":
            line = (f"if (Test-Path -LiteralPath {path} -PathType Container) {{ 'dir' }} "
                    f"elseif (Test-Path -LiteralPath {path}) {{ 'file' }} else {{ 'none' }}")
        else:
            inner = remote.rstrip("\\")
            line = f'if exist "{inner}\\*" (echo dir) else if exist {path} (echo file) else (echo none)'
        kind = self._files_run(handle, line, f"look at {remote}").strip().splitlines()
        return kind[-1].strip() if kind else "none"

    def _mkdirs(self, handle: RemoteHandle, remote_dir: str) -> None:
        dialect, path = self._guest_dialect(handle), _q(self._guest_dialect(handle), remote_dir)
        if dialect == "posix":
            line = f"mkdir -p -- {path}"
        elif dialect == "powershell":
            line = f"New-Item -ItemType Directory -Force -Path {path} | Out-Null"
        else:
            line = f"if not exist {path} mkdir {path}"
        self._files_run(handle, line, f"make the folder {remote_dir}")

    def _remove(self, handle: RemoteHandle, remote: str) -> None:
        dialect, path = self._guest_dialect(handle), _q(self._guest_dialect(handle), remote)
        line = {"posix": f"rm -rf -- {path}", "powershell": f"Remove-Item -Recurse -Force -LiteralPath {path}",
                "cmd": f"del /f /q {path}"}[dialect]
        with contextlib.suppress(Exception):
            self.exec(handle, line, 60.0)  # type: ignore[attr-defined]

    def _tar(self, handle: RemoteHandle, args: str) -> str:
        return f"tar {args}"

    # -- the contract ----------------------------------------------------------------------------------------------
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        source = Path(local)
        if not source.exists():
            raise no_such_file(local, "here", self.name)
        dialect = self._guest_dialect(handle)
        if not source.is_dir():
            self._mkdirs(handle, remote_parent(remote, dialect))
            self._put_file(handle, source, remote)
            mode = source.stat().st_mode & 0o777
            if dialect == "posix" and mode & 0o111:
                # a file API writes bytes, not modes: an uploaded script must stay executable (as with docker cp)
                self._files_run(handle, f"chmod {mode:o} -- {_q(dialect, remote)}", f"make {remote} executable")
            return
        import tempfile  # here: a copy through the Docker Engine API (a CLI process) stages nothing

        staged = self._stage_name(handle)
        with tempfile.TemporaryDirectory(prefix="deskctl-cp-") as tmp:
            archive = Path(tmp) / "tree.tar"
            pack_dir(source, archive)
            self._put_file(handle, archive, staged)
        unpack = self._tar(handle, f"-xf {_q(dialect, staged)} -C {_q(dialect, remote)}")
        try:
            if dialect == "posix":
                # one call; a folder it makes goes again when the unpack fails (a full disk): no half tree stays
                path = _q(dialect, remote)
                line = (f"if [ -d {path} ]; then {unpack}; else mkdir -p -- {path} && "
                        f"{{ {unpack} || {{ rm -rf -- {path}; false; }}; }}; fi")
                self._files_run(handle, line, f"unpack into {remote}")
            else:
                self._mkdirs(handle, remote)
                self._files_run(handle, unpack, f"unpack into {remote}")
        finally:
            self._remove(handle, staged)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        target = Path(local)
        kind = self._remote_kind(handle, remote)
        if kind == "none":
            raise no_such_file(remote, "on the desktop", self.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            partial = target.with_name(f".{target.name}.deskctl-part")
            try:
                self._get_file(handle, remote, partial)
                replace_file(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            return
        import tempfile

        dialect, staged = self._guest_dialect(handle), self._stage_name(handle)
        try:
            self._files_run(handle, self._tar(handle, f"-cf {_q(dialect, staged)} -C {_q(dialect, remote)} ."),
                            f"pack {remote}")
            with tempfile.TemporaryDirectory(prefix="deskctl-cp-") as tmp:
                archive = Path(tmp) / "tree.tar"
                self._get_file(handle, staged, archive)
                extract_tar(archive, target)
        finally:
            self._remove(handle, staged)

    def _stage_name(self, handle: RemoteHandle) -> str:
        import uuid

        dialect = self._guest_dialect(handle)
        name = f"deskctl-cp-{uuid.uuid4().hex[:12]}.tar"
        base = self._guest_tmp(handle)
        return f"{base}\\{name}" if dialect != "posix" else f"{base}/{name}"


# -- a desktop whose filesystem is this host's (xvfb) ---------------------------------------------------------

def copy_here(source: str, target: str, where: str, provider: str) -> None:
    """Make ``target`` a copy of the file or directory ``source`` on this host (the desktop's filesystem is this
    host's): parents made, a file replaced whole (written beside it, then renamed over it), a directory merged
    into one that is there (a new one is removed again when the copy fails); symlinks copied as links, modes and
    times kept."""
    src, dst = Path(source), Path(target)
    if not src.exists() and not src.is_symlink():
        raise no_such_file(source, where, provider)
    _refuse_into_itself(src, dst, source, target, provider)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            from deskctl.providers._local_copy import copy_tree

            made = not dst.exists() and not dst.is_symlink()
            try:
                copy_tree(str(src), str(dst))
            except BaseException:
                if made:  # a folder this copy made goes again (a full disk): no half tree stays
                    shutil.rmtree(dst, ignore_errors=True)
                raise
            return
        partial = dst.with_name(f".{dst.name}.deskctl-part")
        try:
            shutil.copy2(src, partial, follow_symlinks=False)
            replace_file(partial, dst)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
    except (OSError, shutil.Error) as exc:
        raise UsageError(f"cannot copy {source} to {target}: {_copy_failure(exc)}", code="usage.bad_path",
                         provider=provider) from exc


def _refuse_into_itself(src: Path, dst: Path, source: str, target: str, provider: str) -> None:
    """cp -r's rule: a copy onto its own source, or of a folder into a folder under it (which would copy what it
    is making, level after level), is refused before anything is written."""
    folder = src.is_dir() and not src.is_symlink()
    # a symlink is copied as a link: its own path counts, not what it points to
    real_src = Path(os.path.realpath(src)) if folder else \
        Path(os.path.realpath(src.absolute().parent)) / src.absolute().name
    real_dst = Path(os.path.realpath(dst))
    if real_dst == real_src:
        raise UsageError(f"cannot copy {source} onto itself ({target} is the same path)", code="usage.bad_path",
                         provider=provider, remedy="name another destination")
    if folder and real_src in real_dst.parents:
        raise UsageError(f"cannot copy the folder {source} into itself ({target} is inside it)",
                         code="usage.bad_path", provider=provider, remedy="name a destination outside the folder")


def _copy_failure(exc: OSError | shutil.Error) -> str:
    """What went wrong, in words: copytree's ``shutil.Error`` holds a list of (source, destination, reason)."""
    if isinstance(exc, OSError) and not isinstance(exc, shutil.Error):
        return exc.strerror or str(exc)
    problems = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
    reasons = [str(p[2]) for p in problems if isinstance(p, tuple) and len(p) == 3]
    if not reasons:
        return str(exc.args[0]) if exc.args and isinstance(exc.args[0], str) else "the copy failed"
    more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
    return "; ".join(reasons[:3]) + more
