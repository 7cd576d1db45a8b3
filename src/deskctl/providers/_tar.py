"""Tar archives, written once for every provider: a folder packed or unpacked whole (:func:`pack_dir`,
:func:`extract_tar`, for the guests' own tar), and the streaming of the Docker Engine API's archive endpoints:
a tree streamed as a tar while it is made (nothing staged on disk), an archive unpacked as it streams in (the
``data`` filter: nothing lands outside the target), and a small tar of secrets made in memory."""

from __future__ import annotations

import io
import os
import posixpath
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from deskctl.errors import (
    ProviderApiError,
    UsageError,
)

if TYPE_CHECKING:

    pass

__all__ = ["GO_MODE_DIR", "GO_MODE_SYMLINK", "FileTar", "extract_tar", "pack_dir", "tar_of_files", "tar_stream",
           "untar_stream"]


def pack_dir(local: Path, into: Path | BinaryIO) -> None:
    """``local``'s contents (not the folder itself) as an uncompressed tar at ``into`` (a path, or a stream
    written front to back); symlinks kept as links."""
    import tarfile

    with (tarfile.open(into, "w") if isinstance(into, Path) else tarfile.open(fileobj=into, mode="w|")) as tar:
        for entry in sorted(local.iterdir()):
            tar.add(entry, arcname=entry.name)


def extract_tar(archive: Path | BinaryIO, dest: Path) -> None:
    """Unpack (a file, or a stream read front to back) with the ``data`` filter: no absolute paths, no ``..``,
    no links out of ``dest``, no devices."""
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    with (tarfile.open(archive) if isinstance(archive, Path) else tarfile.open(fileobj=archive, mode="r|")) as tar:
        tar.extractall(dest, filter="data")


def tar_of_files(files: Mapping[str, bytes], uid: int, gid: int) -> bytes:
    """A tar of ``files`` (relative path -> content), each 0600 and its folders 0700, owned by ``uid:gid``."""
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({posixpath.dirname(name) for name in files} - {""})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, 0o700, uid, gid, time.time()
            tar.addfile(info)
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid, info.mtime = len(content), 0o600, uid, gid, time.time()
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


#: bits of a Go ``os.FileMode``, as the archive endpoint's stat header gives them
GO_MODE_DIR = 1 << 31
GO_MODE_SYMLINK = 1 << 27


def tar_stream(source: Path, name: str, uid: int, gid: int, *, provider: str) -> Generator[bytes, None, None]:
    """``source`` as a tar whose single top entry is ``name``, owned by ``uid:gid``, made in a thread while it
    is sent: nothing is staged on disk, and memory holds a pipe's worth."""
    import tarfile

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    read_end, write_end = os.pipe()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_end, "wb", buffering=1 << 20) as out, \
                    tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                tar.add(source, arcname=name, filter=owned)
        except BrokenPipeError:
            pass  # the request ended early: its error is the one to report
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=produce, name="deskctl-tar", daemon=True)
    worker.start()
    with os.fdopen(read_end, "rb", buffering=0) as source_pipe:
        while chunk := source_pipe.read(1 << 20):
            yield chunk
    worker.join()
    if failure:
        exc = failure[0]
        raise UsageError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}", code="usage.bad_path",
                         provider=provider) from exc


class FileTar:
    """The tar of one regular file, prepared rather than made: its header, the file's bytes as they are on disk,
    the end blocks. Its length is known before anything is sent (one request with a ``Content-Length``, no
    chunked framing) and the file's bytes go from the page cache to the socket (``sendfile``), never through
    Python: :func:`tar_stream` reads, pipes and re-frames every byte. None (:meth:`of`) for anything else."""

    def __init__(self, reader: BinaryIO, size: int, header: bytes, source: Path, provider: str) -> None:
        self.reader, self.size, self.header, self.source, self.provider = reader, size, header, source, provider
        self.tail = bytes(-size % 512) + bytes(1024)
        self.length = len(header) + size + len(self.tail)

    @classmethod
    def of(cls, source: Path, name: str, uid: int, gid: int, *, provider: str) -> FileTar | None:
        """The prepared tar of ``source`` when it is a regular file (not through a symlink), else None; a file
        that cannot be opened is ``usage.bad_path``, as :func:`tar_stream` says it."""
        import stat
        import tarfile

        try:
            if not stat.S_ISREG(source.lstat().st_mode):
                return None
            reader = open(source, "rb")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror or exc}", code="usage.bad_path",
                             provider=provider) from exc
        try:
            info = os.fstat(reader.fileno())
            entry = tarfile.TarInfo(name)
            entry.size, entry.mode, entry.mtime = info.st_size, info.st_mode & 0o7777, int(info.st_mtime)
            entry.uid, entry.gid, entry.uname, entry.gname = uid, gid, "", ""
            header = entry.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        except BaseException:
            reader.close()
            raise
        return cls(reader, info.st_size, header, source, provider)

    def send(self, sock: Any) -> None:
        """Write the whole tar to ``sock``. A file that shrank meanwhile is ``usage.bad_path`` (the request,
        cut short, must then be abandoned: the engine never sees the end blocks of a whole archive)."""
        sock.sendall(self.header)
        try:
            sent = sock.sendfile(self.reader, 0, self.size) if self.size else 0
        except OSError as exc:
            if isinstance(exc, BrokenPipeError | ConnectionResetError):
                raise
            raise UsageError(f"cannot read {self.source}: {exc.strerror or exc}", code="usage.bad_path",
                             provider=self.provider) from exc
        if sent != self.size:
            raise UsageError(f"{self.source} changed while it was copied ({sent} of {self.size} bytes read)",
                             code="usage.bad_path", provider=self.provider, remedy="copy it again")
        sock.sendall(self.tail)

    def close(self) -> None:
        self.reader.close()


class _ChunkReader(io.RawIOBase):
    """A read-only raw file over an iterator of byte chunks (the archive response), for ``tarfile``'s stream
    mode: each read copies out of the current chunk, never joins chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._chunk:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk = memoryview(chunk)
        size = min(len(buffer), len(self._chunk))
        buffer[:size] = self._chunk[:size]
        self._chunk = self._chunk[size:]
        return size


def untar_stream(chunks: Any, target: Path, *, is_dir: bool, provider: str) -> None:
    """Unpack the archive endpoint's tar (one top entry: the file or folder asked for) so that ``target`` is
    that file or folder."""
    import tarfile

    reader = io.BufferedReader(_ChunkReader(chunks), buffer_size=1 << 20)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not is_dir:
            partial = target.with_name(f".{target.name}.deskctl-part")
            try:
                with open(partial, "wb") as out:
                    mode = _copy_only_file(reader, out)
                os.chmod(partial, mode & 0o777)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            return
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            target.mkdir(exist_ok=True)
            top: list[str] = []

            def inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
                if not top:
                    top.append(member.name.rstrip("/"))
                    return None  # the folder itself: ``target``
                prefix = top[0] + "/"
                if not member.name.startswith(prefix):
                    return None
                renamed = member.replace(name=member.name[len(prefix):], deep=False)
                if member.islnk() and member.linkname.startswith(prefix):
                    renamed = renamed.replace(linkname=member.linkname[len(prefix):], deep=False)
                return tarfile.data_filter(renamed, dest)

            tar.extractall(target, filter=inside)
    except tarfile.FilterError as exc:
        raise ProviderApiError(f"{provider}: refused an archive entry that would land outside {target}: {exc}",
                               provider=provider) from exc
    except tarfile.TarError as exc:
        raise ProviderApiError(f"{provider}: the archive from the container is not readable: {exc}",
                               provider=provider) from exc


def _copy_only_file(reader: io.BufferedIOBase, out: Any) -> int:
    """Copy the one regular file of an archive of a file to ``out``; returns its mode. Headers are read here
    and the data goes straight from the response to the file: tarfile's stream mode copies every byte three
    more times (the benchmark's 64 MiB download took half as long again)."""
    import tarfile

    block = 512
    while True:
        header = reader.read(block)
        if len(header) < block or header == bytes(block):
            raise tarfile.ReadError("the archive of a file holds no file")
        info = tarfile.TarInfo.frombuf(header, tarfile.ENCODING, "surrogateescape")
        padded = -(-info.size // block) * block
        if info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
            if len(reader.read(padded)) < padded:  # extended headers (a long name): nothing we need
                raise tarfile.ReadError("the archive ends inside a header")
            continue
        if not info.isreg():
            raise tarfile.ReadError(f"the archive of a file holds a {info.type!r} entry")
        buffer = memoryview(bytearray(1 << 20))
        left = info.size
        while left:
            got = reader.readinto(buffer[:min(left, len(buffer))])
            if not got:
                raise tarfile.ReadError("the archive ends inside the file")
            out.write(buffer[:got])
            left -= got
        return info.mode
