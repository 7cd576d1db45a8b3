"""The ssh provider's SFTP session and its file transfers, on the session's connection.

:func:`open_sftp` gives paramiko's ``SFTPClient`` a channel whose incoming bytes are a :class:`PiecePipe`, and
:func:`download_to` reads a file over it: read requests pipelined by this module (SFTP version 3, draft-ietf-
secsh-filexfer-02 section 6.4: ``SSH_FXP_READ``, answered by ``SSH_FXP_DATA`` or ``SSH_FXP_STATUS``) and the
answers' data written to the file straight from the pieces the channel received. :func:`upload_from` writes one
(``SSH_FXP_WRITE``, answered by ``SSH_FXP_STATUS``), each request read from the file into one reused buffer
behind its header and handed to the channel as it is.

Why not paramiko's own ``readv``/prefetch: sampled with py-spy on the 64 MiB benchmark file, most of a download's
Python CPU went to paramiko's channel buffer (one ``array`` that each read copies the front of twice and shifts
the rest of, up to 16 MiB, to the front) and to copying each answer four more times (the packet, its message, the
prefetch buffer, the file's read buffer); its prefetch thread polls every 10 ms, and once it ran ahead of a slow
reader it held the rest of the file in memory. Here the bytes are copied by paramiko's transport once (the
decrypted packet's payload) and then only by the kernel (``writev``), and what is held is bounded by the read
requests in flight and the channel's window.

Why not paramiko's own pipelined ``write`` for an upload: each 255 KiB request was built in a ``Message``, copied
whole three more times (the message's bytes, the length in front, each 32 KiB sent off the front of the rest),
every copy a fresh buffer past malloc's mmap threshold: 43-52 thousand page faults and ~200 ms of kernel time for
64 MiB, which took 1.2-1.8 times ``scp``. Here nothing bigger than one SSH packet (32 KiB) is allocated.
"""

from __future__ import annotations

import errno
import struct
import threading
import time
from collections import deque
from typing import Any

from deskctl.providers._tar import write_views

__all__ = ["PiecePipe", "download_to", "open_sftp", "upload_from"]

_FXP_READ = 5
_FXP_WRITE = 6
_FXP_STATUS = 101
_FXP_DATA = 103
_FX_OK, _FX_EOF, _FX_NO_SUCH_FILE, _FX_PERMISSION_DENIED = 0, 1, 2, 3
#: request ids of this module's reads: the upper half of the 32-bit space, apart from paramiko's (from 1 up), so
#: that an answer left unread after a failed download is one paramiko skips ("unexpected response"), never one
#: it takes for the answer to its own request
_FIRST_ID = 1 << 31
#: the biggest answer header this reader takes whole (a status with its message): more is not SFTP
_MAX_HEADER = 64 * 1024


class PiecePipe:
    """What paramiko's ``Channel`` calls on its ``in_buffer`` (``feed`` from the transport's thread; ``read``,
    ``read_ready``, ``empty``, ``close``, ``set_event``, ``len``), with the semantics of its ``BufferedPipe``:
    ``read`` waits for at least one byte (``PipeTimeout`` after ``timeout`` seconds) and returns ``b""`` once
    closed and drained; the event, when set, tells whether a read would return at once.

    The bytes are held as the pieces that came (one SSH packet's data each), and a read returns at most one piece
    (up to ``nbytes`` of it), as a socket's ``recv`` may: a whole piece is handed out as it is, without a copy.
    paramiko's pipe keeps one ``array`` instead, which each read copies the front of twice and shifts the rest of.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._pieces: deque[bytes] = deque()
        self._offset = 0  # bytes of the first piece already read
        self._size = 0  # bytes held, not yet read
        self._closed = False
        self._event: Any = None

    def set_event(self, event: Any) -> None:
        with self._lock:
            self._event = event
            if self._closed or self._size:
                event.set()
            else:
                event.clear()

    def feed(self, data: bytes | str) -> None:
        piece = data.encode() if isinstance(data, str) else bytes(data)  # bytes(a bytes) is that same object
        with self._lock:
            if self._event is not None:
                self._event.set()
            if piece:
                self._pieces.append(piece)
                self._size += len(piece)
            self._arrived.notify_all()

    def read_ready(self) -> bool:
        with self._lock:
            return self._size > 0

    def read(self, nbytes: int, timeout: float | None = None) -> bytes:
        with self._lock:
            if not self._size:
                if self._closed:
                    return b""
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._size and not self._closed:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        from paramiko.buffered_pipe import PipeTimeout

                        raise PipeTimeout()
                    self._arrived.wait(left)
            out = self._take(nbytes)
            if not self._size and self._event is not None and not self._closed:
                self._event.clear()
            return out

    def _take(self, nbytes: int) -> bytes:
        """Up to ``nbytes`` of the first piece (the lock held)."""
        if not self._pieces or nbytes <= 0:
            return b""
        piece, start = self._pieces[0], self._offset
        end = min(len(piece), start + nbytes)
        if end == len(piece):
            self._pieces.popleft()
            self._offset = 0
        else:
            self._offset = end
        self._size -= end - start
        return piece if start == 0 and end == len(piece) else piece[start:end]

    def empty(self) -> bytes:
        with self._lock:
            out = bytearray()
            while self._size:
                out += self._take(self._size)
            if self._event is not None and not self._closed:
                self._event.clear()
            return bytes(out)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._arrived.notify_all()
            if self._event is not None:
                self._event.set()

    def __len__(self) -> int:
        with self._lock:
            return self._size


def open_sftp(transport: Any, window_size: int, max_packet_size: int, timeout: float | None = None) -> Any:
    """paramiko's ``SFTPClient`` on a new session channel of ``transport`` (with that window and packet size)
    whose incoming bytes go to a :class:`PiecePipe`, given before anything can arrive; ``timeout`` bounds each
    wait for the host while it opens (``socket.timeout``)."""
    import paramiko

    channel = transport.open_session(window_size=window_size, max_packet_size=max_packet_size, timeout=timeout)
    try:
        channel.in_buffer = PiecePipe()
        channel.settimeout(timeout)
        channel.invoke_subsystem("sftp")
        client = paramiko.SFTPClient(channel)
        channel.settimeout(None)
        return client
    except BaseException:
        channel.close()
        raise


def download_to(sftp: Any, path: str, fd: int, request: int, ahead: int) -> None:
    """Write the remote file ``path`` to the file descriptor ``fd`` (from its start, in order): ``ahead`` read
    requests of ``request`` bytes in flight, the file's handle opened and closed by paramiko. Raises ``EOFError``
    when the session ends before the file did, ``OSError`` for an error status the host answers a read with (or
    a failed write here). After a failure between the first read and the last answer, ``sftp`` is closed (its
    channel may stop in the middle of an answer, where no other answer can be read): open another.
    Not thread-safe: one transfer at a time on ``sftp`` (its caller's lock), while no paramiko request is
    outstanding on it."""
    remote = sftp.open(path, "rb")
    try:
        _Download(sftp.get_channel(), bytes(remote.handle), fd, request, ahead).run()
    except BaseException:
        sftp.close()
        raise
    remote.close()


class _Download:
    """The state of one pipelined download (see :func:`download_to`)."""

    def __init__(self, channel: Any, handle: bytes, fd: int, request: int, ahead: int) -> None:
        self.channel, self.handle, self.fd, self.request, self.ahead = channel, handle, fd, request, ahead
        self.asked: dict[int, tuple[int, int]] = {}  # request id -> (offset, length) of a read in flight
        self.next_id = _FIRST_ID
        self.read_format = struct.Struct(f">IBII{len(handle)}sQI")  # SSH_FXP_READ: length, type, id, handle, ...
        self.ask_at = 0  # the offset the next new read asks for
        self.written = 0  # the offset the file is written up to
        self.early: dict[int, bytes] = {}  # offset -> data that came before the data in front of it
        self.end: int | None = None  # the offset a read found the end of the file at
        self.head = bytearray()  # an answer's header while it arrives
        #: the answer whose data is arriving: its read's id, offset and length, the data's length, what is to come
        self.data: tuple[int, int, int, int, int] | None = None
        self.out: list[memoryview] = []  # what the piece at hand writes, in order

    def run(self) -> None:
        self._ask([])
        while self.asked:
            piece = self.channel.recv(1 << 22)
            if not piece:
                raise EOFError("the SFTP session ended in the middle of a download")
            self._take(memoryview(piece))
            write_views(self.fd, self.out)
            self.out = []
            self._ask([])

    def _ask(self, extra: list[tuple[int, int]]) -> None:
        """Send the reads ``extra`` (a short answer's rest) and new ones, up to ``ahead`` in flight, in one go."""
        wanted = list(extra)
        while self.end is None and len(self.asked) + len(wanted) < self.ahead:
            wanted.append((self.ask_at, self.request))
            self.ask_at += self.request
        if not wanted:
            return
        packets = []
        handle, size = self.handle, 1 + 4 + 4 + len(self.handle) + 8 + 4
        for offset, length in wanted:
            self.asked[self.next_id] = (offset, length)
            packets.append(self.read_format.pack(size, _FXP_READ, self.next_id, len(handle), handle, offset, length))
            self.next_id = _FIRST_ID + (self.next_id + 1 - _FIRST_ID) % _FIRST_ID
        self.channel.sendall(b"".join(packets))

    def _take(self, view: memoryview) -> None:
        """The answers' bytes in ``view``, whatever their framing: data in place, headers gathered."""
        while view:
            if self.data is not None:
                num, offset, length, got, left = self.data
                take = min(left, len(view))
                self._data(offset + got - left, view[:take])
                view, left = view[take:], left - take
                self.data = (num, offset, length, got, left)
                if not left:
                    self.data = None
                    self._answered(num, offset, length, got)
                continue
            need = self._header_size()
            take = min(need - len(self.head), len(view))
            self.head += view[:take]
            view = view[take:]
            if len(self.head) == self._header_size():
                self._header()

    def _header_size(self) -> int:
        """How much of the answer at hand is its header: length, type and id first; for data, its length too;
        for anything else the whole answer."""
        if len(self.head) < 9:
            return 9
        size, kind = (int(n) for n in struct.unpack_from(">IB", self.head))
        if kind == _FXP_DATA:
            return 13
        if not 5 <= size <= _MAX_HEADER:
            raise OSError(errno.EPROTO, "a garbled SFTP answer")
        return 4 + size

    def _header(self) -> None:
        size, kind, num = struct.unpack_from(">IBI", self.head)
        asked = self.asked.get(num)
        if asked is None:
            raise OSError(errno.EPROTO, f"an SFTP answer to no read (#{num})")
        offset, length = asked
        if kind == _FXP_DATA:
            got = struct.unpack_from(">I", self.head, 9)[0]
            if got != size - 9 or got > length:
                raise OSError(errno.EPROTO, "a garbled SFTP answer")
            self.head = bytearray()
            if got:
                self.data = (num, offset, length, got, got)
            else:  # nothing: the end, as paramiko's read takes it
                self._answered(num, offset, length, 0)
            return
        message, self.head = bytes(self.head[9:]), bytearray()
        if kind != _FXP_STATUS:
            raise OSError(errno.EPROTO, f"an SFTP answer of type {kind} to a read")
        code = struct.unpack_from(">I", message)[0] if len(message) >= 4 else -1
        if code == _FX_EOF:
            self._answered(num, offset, length, 0)
            return
        raise _status_error(code, message, "the host refused the read")

    def _data(self, at: int, view: memoryview) -> None:
        if at == self.written:
            self.out.append(view)
            self.written += len(view)
            while self.written in self.early:  # what came early and is next now
                data = self.early.pop(self.written)
                self.out.append(memoryview(data))
                self.written += len(data)
        else:  # an answer that overtook one before it (the protocol allows it; OpenSSH's server answers in order)
            self.early[at] = bytes(view)

    def _answered(self, num: int, offset: int, length: int, got: int) -> None:
        """The read ``num`` (``length`` bytes at ``offset``) done with ``got`` bytes: fewer is the end of the file
        when none came, else a short read whose rest is asked for."""
        del self.asked[num]
        if got == 0:
            self.end = offset if self.end is None else min(self.end, offset)
        elif got < length:
            self._ask([(offset + got, length - got)])


def _status_error(code: int, message: bytes, otherwise: str) -> OSError:
    """The error of a status answer: ``message`` is its code and text (and language tag), ``otherwise`` says what
    failed when it has no text."""
    text = otherwise
    if len(message) >= 8:
        size = struct.unpack_from(">I", message, 4)[0]
        text = message[8:8 + size].decode(errors="replace") or otherwise
    if code == _FX_NO_SUCH_FILE:
        return OSError(errno.ENOENT, text)
    if code == _FX_PERMISSION_DENIED:
        return OSError(errno.EACCES, text)
    return OSError(text)


def upload_from(sftp: Any, path: str, reader: Any, mode: int, request: int, ahead: int) -> None:
    """Write what ``reader`` (a raw binary file: ``readinto``) holds from where it stands to its end to the remote
    file ``path`` (created, or truncated), then give it the permission bits ``mode``: ``ahead`` write requests of
    up to ``request`` bytes in flight; paramiko opens, sets and closes the handle. Raises ``OSError`` for an error
    status the host answers a write with, or a read here that fails. Whatever stops it (an interrupt too), the
    writes in flight are answered and the handle closed first (for up to :data:`_SETTLE_SECONDS`), so ``sftp``
    stays usable and the partial file can be removed; when that fails (the session ended: ``EOFError``), or it
    stopped in the middle of sending a request, ``sftp`` is closed: open another. Not thread-safe, as
    :func:`download_to`."""
    remote = sftp.open(path, "wb")
    upload = _Upload(sftp.get_channel(), bytes(remote.handle), request, ahead)
    try:
        upload.run(reader)
    except BaseException:
        if not _settled(sftp, remote, upload):
            sftp.close()
        raise
    remote.chmod(mode)
    remote.close()


#: how long a stopped upload waits for the answers to its writes in flight before it gives the SFTP session up
_SETTLE_SECONDS = 10.0


def _settled(sftp: Any, remote: Any, upload: _Upload) -> bool:
    """Whether the writes in flight of a stopped upload were all answered and its handle closed (never when it
    stopped in the middle of sending a request: the host waits for the rest of it)."""
    if upload.sending:
        return False
    channel = sftp.get_channel()
    try:
        channel.settimeout(_SETTLE_SECONDS)
        try:
            upload.drain()
        finally:
            channel.settimeout(None)
        remote.close()
    except Exception:
        return False
    return True


class _Upload:
    """The state of one pipelined upload (see :func:`upload_from`)."""

    def __init__(self, channel: Any, handle: bytes, request: int, ahead: int) -> None:
        self.channel, self.handle, self.request, self.ahead = channel, handle, request, ahead
        self.head = struct.Struct(f">IBII{len(handle)}sQI")  # SSH_FXP_WRITE: length, type, id, handle, offset, data
        self.asked: set[int] = set()  # request ids of the writes in flight
        self.next_id = _FIRST_ID
        self.answers = bytearray()  # answers' bytes not yet taken whole
        self.error: OSError | None = None  # the first error status, raised once every write is answered
        self.sending = False  # while a request is handed to the channel

    def run(self, reader: Any) -> None:
        buffer = memoryview(bytearray(self.head.size + self.request))
        data, offset = buffer[self.head.size:], 0
        while True:
            got = 0
            while got < self.request:
                n = reader.readinto(data[got:])
                if not n:
                    break
                got += n
            if not got:
                break
            size = self.head.size - 4 + got
            self.head.pack_into(buffer, 0, size, _FXP_WRITE, self.next_id, len(self.handle), self.handle, offset, got)
            self.asked.add(self.next_id)
            self.next_id = _FIRST_ID + (self.next_id + 1 - _FIRST_ID) % _FIRST_ID
            self.sending = True  # a request cut in the middle leaves the session's stream unreadable
            self.channel.sendall(buffer[:self.head.size + got])  # paramiko takes a view: one packet's slice a copy
            self.sending = False
            offset += got
            self._collect(block=len(self.asked) >= self.ahead)
            if self.error is not None:
                break
        self.drain()
        if self.error is not None:
            raise self.error

    def drain(self) -> None:
        """Wait for the answers to every write in flight."""
        while self.asked:
            self._collect(block=True)

    def _collect(self, block: bool) -> None:
        """Take the answers that came (waiting for one when ``block``)."""
        while block or self.channel.recv_ready():
            piece = self.channel.recv(1 << 16)
            if not piece:
                raise EOFError("the SFTP session ended in the middle of an upload")
            self.answers += piece
            block = False
            while len(self.answers) >= 4:
                size = struct.unpack_from(">I", self.answers)[0]
                if not 9 <= size <= _MAX_HEADER:
                    raise OSError(errno.EPROTO, "a garbled SFTP answer")
                if len(self.answers) < 4 + size:
                    break
                self._answer(bytes(self.answers[4:4 + size]))
                del self.answers[:4 + size]

    def _answer(self, message: bytes) -> None:
        kind, num = struct.unpack_from(">BI", message)
        if kind != _FXP_STATUS or num not in self.asked:
            raise OSError(errno.EPROTO, f"an SFTP answer of type {kind} to no write (#{num})")
        self.asked.discard(num)
        code = struct.unpack_from(">I", message, 5)[0] if len(message) >= 9 else -1
        if code != _FX_OK and self.error is None:
            error = _status_error(code, message[5:], "no reason given")
            # SFTP version 3 has no code for a full disk or a quota: OpenSSH answers those "Failure"
            self.error = error if error.errno else OSError(f"the host could not write the file ({error})")
