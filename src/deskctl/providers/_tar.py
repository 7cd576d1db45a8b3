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
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from deskctl._fsreplace import replace_file
from deskctl.errors import (
    ProviderApiError,
    UsageError,
)

__all__ = ["GO_MODE_DIR", "GO_MODE_SYMLINK", "FileTar", "OnlyFile", "extract_tar", "file_header", "pack_dir",
           "peer_closed", "tar_of_files", "tar_stream", "unpack_only_file", "untar_stream", "write_tree",
           "write_views"]


if TYPE_CHECKING:
    from pathlib import Path  # at run time only where a file is packed: not on the per-call CLI paths


def pack_dir(local: Path, into: Path | BinaryIO) -> None:
    """``local``'s contents (not the folder itself) as an uncompressed tar at ``into`` (a path, or a stream
    written front to back); symlinks kept as links."""
    import tarfile
    from pathlib import Path

    with (tarfile.open(into, "w") if isinstance(into, Path) else tarfile.open(fileobj=into, mode="w|")) as tar:
        for entry in sorted(local.iterdir()):
            tar.add(entry, arcname=entry.name)


def extract_tar(archive: Path | BinaryIO, dest: Path) -> None:
    """Unpack (a file, or a stream read front to back) with the ``data`` filter: no absolute paths, no ``..``,
    no links out of ``dest``, no devices. Plain files and folders by :class:`~._untar.FastUntar`, the rest (from
    the first entry it leaves) by :mod:`tarfile`. A ``dest`` this makes is removed again when the unpacking
    fails: no half tree."""
    import contextlib
    from pathlib import Path

    from deskctl.providers._untar import FastUntar

    made = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with open(archive, "rb") if isinstance(archive, Path) else contextlib.nullcontext(archive) as stream:
            fast = FastUntar(str(dest))
            if not fast.run(stream) or fast.empty:
                import tarfile

                if fast.empty:
                    raise tarfile.ReadError("empty file")  # as tarfile says it
                with tarfile.open(fileobj=fast.rest, mode="r|*") as tar:  # type: ignore[call-overload]
                    tar.extractall(dest, filter="data")
            fast.finish()
    except BaseException:
        if made:
            _remove_tree(dest)
        raise


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


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

_BLOCK = 512
_RECORD = 20 * _BLOCK  # tarfile's RECORDSIZE: a tar's length is a multiple of it
#: the widest number each ustar field holds in octal (its width less the NUL): past it, a PAX header says it
_USTAR_LIMITS = {"mode": 8**7, "uid": 8**7, "gid": 8**7, "size": 8**11, "mtime": 8**11}


def file_header(name: str, size: int, mode: int, mtime: int, uid: int, gid: int, *, kind: bytes = b"0",
                link: str = "") -> bytes:
    """The tar header of a regular file ``name`` (or of the entry type ``kind``: ``5`` a folder, ``2`` a
    symlink and ``1`` a hard link to ``link``), no user or group name, as :mod:`tarfile` writes it in PAX
    format, built here for what a ustar header holds (an ASCII name and link of up to 100 bytes, numbers that
    fit their octal fields) so that a copy does not load :mod:`tarfile` (with :mod:`shutil` and the
    compressors); anything else (a long or non-ASCII name, an 8 GiB file) is left to :mod:`tarfile`, which
    adds the PAX header it needs."""
    values = {"mode": mode, "uid": uid, "gid": gid, "size": size, "mtime": mtime}
    raw = name.encode("ascii", "surrogateescape") if name.isascii() else b""
    raw_link = link.encode("ascii", "surrogateescape") if link.isascii() else None
    if not raw or len(raw) > 100 or raw_link is None or len(raw_link) > 100 \
            or any(not 0 <= values[k] < limit for k, limit in _USTAR_LIMITS.items()):
        import tarfile

        entry = tarfile.TarInfo(name)
        entry.size, entry.mode, entry.mtime, entry.uid, entry.gid, entry.uname, entry.gname = \
            size, mode, mtime, uid, gid, "", ""
        entry.type, entry.linkname = kind, link
        return entry.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    header = bytearray(_BLOCK)
    header[0:len(raw)] = raw
    for offset, width, value in ((100, 8, mode), (108, 8, uid), (116, 8, gid), (124, 12, size), (136, 12, mtime)):
        header[offset:offset + width] = b"%0*o\0" % (width - 1, value)
    header[148:156] = b" " * 8  # the checksum's own field counts as spaces
    header[156:157] = kind
    header[157:157 + len(raw_link)] = raw_link
    header[257:265] = b"ustar\x0000"
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header)


def _number(field: bytes | bytearray) -> int:
    """A header's number: octal text, or GNU's base-256 (the first byte's top bit set) for what octal cannot hold."""
    if field[:1] and field[0] & 0x80:
        value = int.from_bytes(bytes([field[0] & 0x7F]) + bytes(field[1:]), "big")
        return value - (1 << (8 * len(field) - 1)) if field[0] & 0x40 else value
    digits = bytes(field).split(b"\0", 1)[0].strip()
    return int(digits, 8) if digits else 0


class OnlyFile:
    """The one regular file of the archive endpoint's tar of a file, written to the file descriptor ``fd`` as
    the response arrives: :meth:`feed` takes the response's next bytes (views of the reader's buffer) and writes
    the file's part of them with one ``writev``, never copying them in Python; the headers before the file (a
    PAX or GNU header for a long name or a large size) are read here, without :mod:`tarfile`. :attr:`mode` is the
    file's mode once its header has been read; :meth:`finish` raises when the archive ended before the file did.
    """

    def __init__(self, fd: int, provider: str) -> None:
        self.fd, self.provider = fd, provider
        self.mode: int | None = None
        self._held = bytearray()  # a header, or an extended header's data, while it arrives
        self._need = _BLOCK  # bytes of it still to come
        self._kind = b"header"  # what is arriving: header, extended (its data, then a header), data, rest
        self._extended_type = b""
        self._size_from_pax: int | None = None
        self._left = 0  # of the file's data

    @property
    def data_left(self) -> int:
        """Bytes of the file's data still to come, once its header has been read (0 before, and after)."""
        return self._left if self._kind == b"data" else 0

    def data_written(self, count: int) -> None:
        """``count`` bytes of the file's data (at most :attr:`data_left`) were written to the file by the caller."""
        self._left -= count
        if not self._left:
            self._kind = b"rest"

    def _fail(self, problem: str) -> ProviderApiError:
        return ProviderApiError(f"{self.provider}: the archive from the container is not readable: {problem}",
                                provider=self.provider)

    def feed(self, views: list[memoryview]) -> None:
        out: list[memoryview] = []
        for view in views:
            while view:
                if self._kind == b"rest":  # the file's padding and the end blocks
                    break
                if self._kind == b"data":
                    take = min(self._left, len(view))
                    out.append(view[:take])
                    view, self._left = view[take:], self._left - take
                    if not self._left:
                        self._kind = b"rest"
                    continue
                take = min(self._need, len(view))
                self._held += view[:take]
                view, self._need = view[take:], self._need - take
                if not self._need:
                    self._complete()
        write_views(self.fd, out)

    def _complete(self) -> None:
        held, self._held = self._held, bytearray()
        if self._kind == b"extended":
            if self._extended_type in (b"x", b"g"):
                self._size_from_pax = _pax_size(held, self._size_from_pax)
            self._kind, self._need = b"header", _BLOCK
            return
        if held == bytes(_BLOCK):
            raise self._fail("the archive of a file holds no file")
        stored = _number(held[148:156])
        checked = sum(held[:148]) + 8 * 32 + sum(held[156:])
        if stored not in (checked, checked - 256 * sum(1 for b in held[:148] + held[156:] if b > 127)):
            raise self._fail("bad checksum in a header")  # (the second: a signed sum, as some old tars made)
        kind, size = bytes(held[156:157]), _number(held[124:136])
        if kind in (b"x", b"g", b"L", b"K"):  # PAX, or GNU's long name / long link: read, then the next header
            self._kind, self._need, self._extended_type = b"extended", -(-size // _BLOCK) * _BLOCK, kind
            if not self._need:
                self._kind, self._need = b"header", _BLOCK
            return
        if kind not in (b"0", b"\0", b"7"):
            raise self._fail(f"the archive of a file holds a {kind!r} entry")
        self.mode = _number(held[100:108])
        self._left = size if self._size_from_pax is None else self._size_from_pax
        self._kind = b"data" if self._left else b"rest"

    def finish(self) -> int:
        """The file's mode, once the whole archive has been fed; raises when it ended before the file did."""
        if self._kind == b"data":
            raise self._fail("the archive ends inside the file")
        if self.mode is None:
            raise self._fail("the archive of a file holds no file" if self._kind == b"header" and
                             not self._held else "the archive ends inside a header")
        return self.mode


def _pax_size(data: bytes | bytearray, size: int | None) -> int | None:
    """The ``size`` record of PAX extended header data (``"LEN KEY=VALUE\\n"`` records), else ``size``."""
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        if space < 0 or not data[pos:space].isdigit():
            break
        length = int(data[pos:space])
        if length <= 0:
            break
        key, _, value = bytes(data[space + 1:pos + length]).rstrip(b"\n").partition(b"=")
        if key == b"size" and value.isdigit():
            size = int(value)
        pos += length
    return size


def write_views(fd: int, views: list[memoryview]) -> None:
    """``views`` written to ``fd`` in order: a ``writev`` per 512 of them, a short write finished one by one."""
    for start in range(0, len(views), 512):
        group = views[start:start + 512]
        written = os.writev(fd, group) if group else 0
        for view in group:
            if written >= len(view):
                written -= len(view)
                continue
            rest = view[written:]
            written = 0
            while rest:
                rest = rest[os.write(fd, rest):]


def unpack_only_file(steps: Iterable[list[memoryview]], target: Path, *, provider: str,
                     splice: Callable[[int, int], int | None] | None = None) -> None:
    """Make ``target`` the one regular file of the archive endpoint's tar of a file, as it streams in (``steps``:
    the response's bytes, as views of the reader's buffer): written beside ``target`` and renamed over it, with
    the archive's mode. ``splice(fd, count)``, when given, moves up to ``count`` of the response's next bytes to
    ``fd`` without reading them here and says how many (None: it cannot): the file's data, once its header is
    read, goes that way."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.deskctl-part")
    try:
        with open(partial, "wb", buffering=0) as out:
            only = OnlyFile(out.fileno(), provider)
            for views in steps:
                only.feed(views)
                if splice is not None and only.data_left:
                    moved = splice(out.fileno(), only.data_left)
                    if moved is None:
                        splice = None  # read as it comes
                    else:
                        only.data_written(moved)
            mode = only.finish()
        os.chmod(partial, mode & 0o777)
        replace_file(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def write_tree(out: BinaryIO, source: Path | str, name: str, uid: int, gid: int, *, contents: bool = False) -> None:
    """Write ``source`` (a folder with everything under it, or one entry) to ``out`` as the tar that
    ``tarfile.add(source, arcname=name)`` makes in PAX format, each entry owned by ``uid:gid`` (no user or
    group name) and its time in whole seconds, as ``docker cp`` sends them: folders' entries sorted, symlinks
    kept as links, a second name of a file already sent as a hard link to the first, sockets left out.
    ``contents``: the folder's entries under their own names, without the folder itself (``name`` unused).

    Written here, not by :mod:`tarfile`: for each entry ``tarfile.add`` looks up the owner's and group's names
    (read from /etc/passwd and /etc/group), copies the entry's record for the filter, and with a fractional time
    adds a PAX header of its own (1 KiB more an entry): 2000 small files took 490 ms to pack, this takes a
    fraction of that (bench/bench_files.py, ``docker-cli``). A FIFO or a device, rare in a copy, goes through
    :mod:`tarfile`'s own record of it."""
    import stat

    written = 0
    first_names: dict[tuple[int, int], str] = {}

    def entry(path: str, arcname: str) -> None:
        nonlocal written
        info = os.lstat(path)
        mode, mtime = info.st_mode, int(info.st_mtime)
        size = 0
        if stat.S_ISREG(mode):
            key = (info.st_dev, info.st_ino)
            if info.st_nlink > 1 and key in first_names:
                header = file_header(arcname, 0, mode & 0o7777, mtime, uid, gid, kind=b"1", link=first_names[key])
            else:
                first_names.setdefault(key, arcname)
                size = info.st_size
                header = file_header(arcname, size, mode & 0o7777, mtime, uid, gid)
        elif stat.S_ISDIR(mode):
            header = file_header(f"{arcname}/", 0, mode & 0o7777, mtime, uid, gid, kind=b"5")  # as tarfile names it
        elif stat.S_ISLNK(mode):
            header = file_header(arcname, 0, mode & 0o7777, mtime, uid, gid, kind=b"2", link=os.readlink(path))
        elif stat.S_ISSOCK(mode):
            return
        else:
            import tarfile

            with tarfile.open(fileobj=io.BytesIO(), mode="w") as scratch:  # only for its gettarinfo
                record = scratch.gettarinfo(path, arcname)
            record.uid, record.gid, record.uname, record.gname, record.mtime = uid, gid, "", "", mtime
            header = record.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        out.write(header)
        written += len(header)
        if size:
            with open(path, "rb", buffering=0) as source_file:
                left = size
                while left:
                    chunk = source_file.read(min(left, 1 << 20))
                    if not chunk:
                        raise OSError(f"{path} got shorter while it was read")
                    out.write(chunk)
                    left -= len(chunk)
            out.write(bytes(-size % _BLOCK))
            written += size + (-size % _BLOCK)
        if stat.S_ISDIR(mode):
            for child in sorted(os.listdir(path)):
                entry(os.path.join(path, child), f"{arcname}/{child}")

    if contents:
        for child in sorted(os.listdir(source)):
            entry(os.path.join(source, child), child)
    else:
        entry(os.fspath(source), name)
    written += 2 * _BLOCK  # the end: two empty blocks, then the record's rest, as tarfile pads it
    out.write(bytes(2 * _BLOCK + (-written % _RECORD)))


def tar_stream(source: Path, name: str, uid: int, gid: int, *, provider: str) -> Generator[bytes, None, None]:
    """``source`` as a tar whose single top entry is ``name``, owned by ``uid:gid``, made in a thread while it
    is sent (:func:`write_tree`): nothing is staged on disk, and memory holds a pipe's worth."""
    read_end, write_end = os.pipe()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_end, "wb", buffering=1 << 20) as out:
                write_tree(out, source, name, uid, gid)
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

        try:
            if not stat.S_ISREG(source.lstat().st_mode):
                return None
            reader = open(source, "rb")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror or exc}", code="usage.bad_path",
                             provider=provider) from exc
        try:
            info = os.fstat(reader.fileno())
            header = file_header(name, info.st_size, info.st_mode & 0o7777, int(info.st_mtime), uid, gid)
        except BaseException:
            reader.close()
            raise
        return cls(reader, info.st_size, header, source, provider)

    def send(self, sock: Any) -> None:
        """Write the whole tar to ``sock``. A file that shrank meanwhile is ``usage.bad_path`` (the request,
        cut short, must then be abandoned: the engine never sees the end blocks of a whole archive); the engine's
        end of the connection (:func:`peer_closed`) is raised as it is, never as a file that cannot be read."""
        sock.sendall(self.header)
        try:
            sent = sock.sendfile(self.reader, 0, self.size) if self.size else 0
        except OSError as exc:
            if peer_closed(exc):
                raise
            raise UsageError(f"cannot read {self.source}: {exc.strerror or exc}", code="usage.bad_path",
                             provider=self.provider) from exc
        if sent != self.size:
            raise UsageError(f"{self.source} changed while it was copied ({sent} of {self.size} bytes read)",
                             code="usage.bad_path", provider=self.provider, remedy="copy it again")
        sock.sendall(self.tail)

    def close(self) -> None:
        self.reader.close()


def peer_closed(exc: BaseException) -> bool:
    """Whether ``exc`` says the other end closed the connection while a request was being sent (the engine
    answered, a refusal, before it read the whole body): a broken pipe or a reset, or on TLS the end of the
    session (``SSLEOFError``, which a plain socket would have given as a broken pipe)."""
    if isinstance(exc, BrokenPipeError | ConnectionResetError):
        return True
    import sys

    ssl = sys.modules.get("ssl")  # loaded when the connection is TLS; otherwise no TLS error can occur
    return ssl is not None and isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError)


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
    that file or folder (plain files and folders by :class:`~._untar.FastUntar`, the rest by :mod:`tarfile`;
    a ``target`` this makes is removed again when the unpacking fails)."""
    import tarfile

    from deskctl.providers._untar import FastUntar

    if not is_dir:
        unpack_only_file(([memoryview(chunk)] for chunk in chunks), target, provider=provider)
        return
    reader = io.BufferedReader(_ChunkReader(chunks), buffer_size=1 << 20)
    target.parent.mkdir(parents=True, exist_ok=True)
    top: list[str] = []

    def rename(name: str) -> str | None:
        """The name under ``target``: the top entry (the folder itself, which is ``target``) and anything not
        under it are skipped."""
        if not top:
            top.append(name.rstrip("/"))
            return None
        prefix = top[0] + "/"
        return name[len(prefix):] if name.startswith(prefix) else None

    def inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        name = rename(member.name)
        if name is None:
            return None
        renamed = member.replace(name=name, deep=False)
        if member.islnk() and member.linkname.startswith(top[0] + "/"):
            renamed = renamed.replace(linkname=member.linkname[len(top[0]) + 1:], deep=False)
        return tarfile.data_filter(renamed, dest)

    made = not target.exists()
    target.mkdir(exist_ok=True)
    try:
        fast = FastUntar(str(target), rename)
        ended = fast.run(reader) and fast.ended  # type: ignore[arg-type]
        if fast.rest is not None:
            with tarfile.open(fileobj=fast.rest, mode="r|") as tar:  # type: ignore[call-overload]
                tar.extractall(target, filter=inside)
                # the end as the archive marks it (a block of zeros, which the reading stopped after), not merely
                # the end of the bytes: a response that ends without framing (HTTP/1.0) ends the same way when the
                # connection drops between two entries
                ended = tar.fileobj.tell() - tar.offset == tarfile.BLOCKSIZE  # type: ignore[union-attr]
        fast.finish()
        if not ended:
            raise ProviderApiError(f"{provider}: the archive from the container ended before its end (the "
                                   "connection closed in the middle)", provider=provider)
    except BaseException as exc:
        if made:
            _remove_tree(target)
        if isinstance(exc, tarfile.FilterError):
            raise ProviderApiError(f"{provider}: refused an archive entry that would land outside {target}: "
                                   f"{exc}", provider=provider) from exc
        if isinstance(exc, tarfile.TarError):
            raise ProviderApiError(f"{provider}: the archive from the container is not readable: {exc}",
                                   provider=provider) from exc
        raise
