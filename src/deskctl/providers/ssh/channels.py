"""What runs on one channel of an ssh connection: a command's output read apart from its errors (:func:`_collect`),
the lines a script prints (:func:`_lines`), a command's stdin and stdout as files for a tar stream
(:class:`ChannelWriter`, :func:`channel_reader`), and a ``direct-streamlocal`` channel bridged to a local socket
(:func:`_bridge`: python-xlib needs a real socket)."""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.providers.ssh.connection import _Connection

__all__ = ["ChannelWriter", "_bridge", "_collect", "_lines", "channel_reader"]

#: what a ChannelWriter gathers before it sends (a tar's 512-byte headers go out together)
_GATHER = 1 << 16


class ChannelWriter:
    """A command's stdin as a file for ``write``: small writes gathered into sends of up to 64 KiB, a large one
    sent as it is. Not paramiko's ``makefile("wb")``: its file flushes from ``__del__``, and one collected in a
    cycle (a failed send's error holds the frame that has it) after its own buffer was closed printed an ignored
    exception when the process ended."""

    def __init__(self, chan: Any) -> None:
        self.chan = chan
        self.pending: list[bytes] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        if len(data) >= _GATHER:
            self.flush()
            self.chan.sendall(data)
            return len(data)
        self.pending.append(bytes(data))
        self.size += len(data)
        if self.size >= _GATHER:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.pending:
            data, self.pending, self.size = b"".join(self.pending), [], 0
            self.chan.sendall(data)


class _ChannelRaw(io.RawIOBase):
    def __init__(self, chan: Any) -> None:
        self.chan = chan

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.chan.recv(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def channel_reader(chan: Any) -> io.BufferedReader:
    """A command's stdout as a buffered file (``read(n)`` gives n bytes unless the output ends first)."""
    return io.BufferedReader(_ChannelRaw(chan), buffer_size=1 << 20)


def _collect(chan: Any, timeout: float, conn: _Connection) -> tuple[int, bytes, bytes]:
    """Read stdout and stderr of a channel apart (stderr in a helper thread so neither can stall the window)
    until it exits. Raises TimeoutError when ``timeout`` passes first."""
    err_chunks: list[bytes] = []

    def read_stderr() -> None:
        with contextlib.suppress(Exception):
            while True:
                data = chan.recv_stderr(65536)
                if not data:
                    return
                err_chunks.append(data)

    reader = threading.Thread(target=read_stderr, name="deskctl-ssh-stderr", daemon=True)
    reader.start()
    out_chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    chan.settimeout(max(0.01, timeout))
    while True:
        try:
            data = chan.recv(65536)
        except TimeoutError:
            raise TimeoutError(f"no exit after {timeout:g}s") from None
        if not data:
            break
        out_chunks.append(data)
        chan.settimeout(max(0.01, deadline - time.monotonic()))
    if not chan.status_event.wait(max(0.01, deadline - time.monotonic())):
        raise TimeoutError(f"no exit status after {timeout:g}s")
    reader.join(max(0.01, deadline - time.monotonic()))
    status = chan.exit_status
    if status == -1 and not conn.alive:
        raise conn.lost("run a command")
    return int(status), b"".join(out_chunks), b"".join(err_chunks)


def _lines(chan: Any, deadline: float) -> Iterator[str]:
    """Lines a channel prints, until it closes or ``deadline`` (monotonic) passes (then TimeoutError)."""
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode(errors="replace")
        chan.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = chan.recv(4096)
        except TimeoutError:
            raise TimeoutError("no answer in time") from None
        if not data:
            if buffer:
                yield buffer.decode(errors="replace")
            return
        buffer += data


def _bridge(chan: Any, name: str) -> socket.socket:
    """A local socket whose peer is ``chan``: two pump threads copy bytes both ways (python-xlib needs a real
    socket to select on). Closing either side closes both."""
    ours, theirs = socket.socketpair()
    for end in (ours, theirs):  # a whole frame in few reads: python-xlib re-joins its buffer on every read
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, option, 4 << 20)
    closed = threading.Event()

    def shut() -> None:
        if closed.is_set():
            return
        closed.set()
        with contextlib.suppress(Exception):
            chan.close()
        with contextlib.suppress(OSError):
            theirs.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            theirs.close()

    def down() -> None:  # channel -> local
        with contextlib.suppress(Exception):
            while True:
                data = chan.recv(1 << 20)
                if not data:
                    break
                theirs.sendall(data)
        shut()

    def up() -> None:  # local -> channel
        with contextlib.suppress(Exception):
            while True:
                data = theirs.recv(1 << 16)
                if not data:
                    break
                chan.sendall(data)
        shut()

    threading.Thread(target=down, name=f"{name}-down", daemon=True).start()
    threading.Thread(target=up, name=f"{name}-up", daemon=True).start()
    return ours

