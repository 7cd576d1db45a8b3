"""The ssh provider's files: SFTP for one file, a tar stream for a tree, both on the session's connection."""

from __future__ import annotations

import contextlib
import functools
import posixpath
import stat
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from deskctl._fsreplace import replace_file
from deskctl.errors import (
    ProviderApiError,
    UsageError,
)
from deskctl.providers.base import RemoteHandle
from deskctl.providers.ssh.connection import _BULK_PACKET, _BULK_WINDOW
from deskctl.providers.ssh.desktop import (
    _SFTP_READ_AHEAD,
    SshDesktops,
    _Desktop,
    _home_relative,
    _pack,
    _sftp_request_size,
)
from deskctl.providers.ssh.scripts import (
    _NOT_A_FOLDER,
    _UNPACK_SCRIPT,
    _sh,
)
from deskctl.providers.ssh.sftp import download_to, open_sftp, upload_from
from deskctl.providers.ssh.target import PROVIDER

#: how long removing a stopped upload's partial file waits for each answer of the host
_REMOVE_SECONDS = 10.0
#: how long a transfer that broke off waits for the connection's end to show, before it takes the connection for
#: alive (a send can fail on the broken socket before the transport's reader sees the end)
_NOTICE_SECONDS = 1.0


class SshFiles(SshDesktops):
    """Upload and download of :class:`~deskctl.providers.ssh.SSHProvider`."""

    # -- files: SFTP for one file, a tar stream for a tree, both on the session's connection -------------------
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        """Make ``remote`` a copy of ``local``. A file goes over SFTP (pipelined writes, streamed from disk) to a
        temporary name beside ``remote``, gets the local file's mode, and takes its place by a rename
        (``posix-rename@openssh.com``; an old file there is removed just before, as ``docker cp`` does): a reader
        never sees half a file. A directory goes as one tar stream
        into ``tar -x`` on the host (no staged archive on either side). Missing parents are made. A relative
        ``remote`` (or ``~/...``) is in the login user's home directory."""
        from deskctl.providers._files import no_such_file

        source = Path(local)
        if not source.exists():
            raise no_such_file(local, "here", PROVIDER)
        path = _home_relative(remote)
        desk = self._desktop(handle)
        if source.is_dir():
            self._tree_call(desk, _sh(_UNPACK_SCRIPT, path), f"unpack into {remote}",
                            send=functools.partial(_pack, source))
            return
        with self._sftp(desk, f"copy {local} to {remote}") as sftp:
            self._sftp_makedirs(sftp, posixpath.dirname(path) or ".", remote)
            try:
                kind = sftp.stat(path).st_mode
            except FileNotFoundError:
                kind = None
            if kind is not None and stat.S_ISDIR(kind):
                raise UsageError(f"{remote} is a directory on the desktop; name the file to write",
                                 code="usage.bad_path", provider=PROVIDER)
            name = f".{posixpath.basename(path)}.deskctl-{uuid.uuid4().hex[:8]}"
            partial = posixpath.join(posixpath.dirname(path), name)
            request = _sftp_request_size(desk.conn)
            try:
                with source.open("rb", buffering=0) as reader:
                    # permission bits only: a setuid or sticky bit is not the guest user's to set (as _files)
                    upload_from(sftp, partial, reader, source.stat().st_mode & 0o777, request, _SFTP_READ_AHEAD)
                if kind is not None:
                    # the old file goes first: renaming over it made the host's ext4 (auto_da_alloc) write the new
                    # one out inside the rename, 30-50 ms of a 64 MiB copy (as deskctl._fsreplace, here remotely)
                    with contextlib.suppress(FileNotFoundError):
                        sftp.remove(path)
                try:
                    sftp.posix_rename(partial, path)
                except OSError as exc:
                    if exc.errno is not None or "unsupported" not in str(exc).lower():
                        raise
                    # a server without the posix-rename extension: its plain rename does not replace a file, and
                    # the old one was removed above
                    sftp.rename(partial, path)
                partial = ""
            finally:
                if partial:
                    self._remove_partial(desk, sftp, partial)

    @staticmethod
    def _remove_partial(desk: _Desktop, sftp: Any, partial: str) -> None:
        """Remove a stopped upload's partial file: on a new SFTP session when the upload gave its own up (an
        interrupt in the middle of a request), each wait for the host bounded. A host that is gone, or does not
        answer, keeps it (a hidden name beside the target)."""
        with contextlib.suppress(Exception):
            if sftp.get_channel().closed:
                if not desk.conn.alive:
                    return
                sftp = desk.sftp = open_sftp(desk.conn.transport, _BULK_WINDOW, _BULK_PACKET, _REMOVE_SECONDS)
            sftp.get_channel().settimeout(_REMOVE_SECONDS)
            try:
                sftp.remove(partial)
            finally:
                sftp.get_channel().settimeout(None)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        """Make ``local`` a copy of ``remote``: a file over SFTP (pipelined reads) into a partial file renamed
        into place, a directory as one ``tar -c`` stream unpacked here as it arrives (no absolute paths, no
        ``..``, no links out of ``local``). ``usage.no_such_file`` when ``remote`` does not exist."""
        from deskctl.providers._files import extract_tar, no_such_file

        target = Path(local)
        path = _home_relative(remote)
        desk = self._desktop(handle)
        with self._sftp(desk, f"copy {remote} to {local}") as sftp:
            try:
                mode = sftp.stat(path).st_mode
            except FileNotFoundError:
                raise no_such_file(remote, "on the desktop", PROVIDER) from None
            if not stat.S_ISDIR(mode or 0):
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.deskctl-part")
                try:
                    with open(partial, "wb", buffering=0) as writer:
                        download_to(sftp, path, writer.fileno(), _sftp_request_size(desk.conn), _SFTP_READ_AHEAD)
                    replace_file(partial, target)
                finally:
                    partial.unlink(missing_ok=True)
                return
        self._tree_call(desk, _sh('LC_ALL=C; export LC_ALL; exec tar -cf - -C "$1" .', path), f"pack {remote}",
                        receive=functools.partial(extract_tar, dest=target))

    @contextlib.contextmanager
    def _sftp(self, desk: _Desktop, doing: str) -> Iterator[Any]:
        """The desktop's SFTP session (opened once, on the session's connection), for one transfer at a time;
        SFTP and OS errors become deskctl errors."""
        import paramiko

        with desk.sftp_lock:
            try:
                if desk.sftp is None or desk.sftp.get_channel().closed:  # none yet, or closed by a failed download
                    if not desk.conn.alive:
                        raise desk.conn.lost(doing)
                    try:
                        desk.sftp = open_sftp(desk.conn.transport, _BULK_WINDOW, _BULK_PACKET)
                    except (paramiko.SSHException, OSError, EOFError) as exc:
                        if not desk.conn.alive:
                            raise desk.conn.lost(doing) from exc
                        raise ProviderApiError(
                            f"{desk.conn.settings.target.host} refused an SFTP session: {exc}", provider=PROVIDER,
                            remedy="the host's sshd needs its sftp subsystem (Subsystem sftp internal-sftp)",
                        ) from exc
                yield desk.sftp
            except (paramiko.SSHException, EOFError) as exc:
                broken, desk.sftp = desk.sftp, None  # the next transfer opens a new SFTP session
                with contextlib.suppress(Exception):
                    broken.close()
                if desk.conn.gone_within(_NOTICE_SECONDS):
                    raise desk.conn.lost(doing) from exc
                raise ProviderApiError(f"cannot {doing}: {exc or 'the SFTP session ended'}",
                                       provider=PROVIDER) from exc
            except PermissionError as exc:
                raise UsageError(f"cannot {doing}: permission denied ({exc.filename or exc})",
                                 code="usage.permission_denied", provider=PROVIDER) from exc
            except OSError as exc:
                if not desk.conn.alive:
                    desk.sftp = None
                    raise desk.conn.lost(doing) from exc
                raise ProviderApiError(f"cannot {doing}: {exc.strerror or exc}", provider=PROVIDER) from exc

    @staticmethod
    def _sftp_makedirs(sftp: Any, path: str, remote: str) -> None:
        """``mkdir -p`` over SFTP (a directory made meanwhile by someone else is fine)."""
        try:
            mode = sftp.stat(path).st_mode
        except FileNotFoundError:
            parent = posixpath.dirname(path.rstrip("/"))
            if parent and parent != path:
                SshFiles._sftp_makedirs(sftp, parent, remote)
            try:
                sftp.mkdir(path)
            except OSError:
                if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                    raise
            return
        if not stat.S_ISDIR(mode or 0):
            raise UsageError(f"cannot copy to {remote}: {path} is not a directory on the desktop",
                             code="usage.bad_path", provider=PROVIDER)

    @staticmethod
    def _tree_call(desk: _Desktop, command: str, doing: str, *, send: Callable[[BinaryIO], None] | None = None,
                   receive: Callable[[BinaryIO], None] | None = None) -> None:
        status, err, failure = desk.conn.stream(command, send=send, receive=receive)
        if isinstance(failure, tarfile.TarError):  # what the host sent is refused here (a link out of the tree...)
            raise ProviderApiError(f"cannot {doing}: {failure}", provider=PROVIDER) from failure
        if status != 0:
            detail = err.decode(errors="replace").strip()[-400:]
            if status == 127:
                detail = f"the host has no tar ({detail})"
            elif "Permission denied" in detail:
                raise UsageError(f"cannot {doing}: {detail}", code="usage.permission_denied",
                                 provider=PROVIDER) from failure
            elif status == _NOT_A_FOLDER or "Not a directory" in detail:
                raise UsageError(f"cannot {doing}: {detail}", code="usage.bad_path", provider=PROVIDER) from failure
            raise ProviderApiError(f"cannot {doing} on {desk.conn.settings.target.host} (exit {status}): {detail}",
                                   provider=PROVIDER) from failure
        if failure is not None:
            if isinstance(failure, PermissionError):
                raise UsageError(f"cannot {doing}: permission denied ({failure.filename or failure})",
                                 code="usage.permission_denied", provider=PROVIDER) from failure
            raise ProviderApiError(f"cannot {doing}: {failure}", provider=PROVIDER) from failure
