"""The answer of the Engine API's archive download (``GET /containers/{id}/archive``) as a file's copy reads it:
the body's bytes as views of one buffer, and between them, where nothing frames the body, the kernel moving the
file's data from the socket to the file (``splice`` through a pipe): the bytes of a large file never enter this
process, which reads the tar's headers only."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, suppress

__all__ = ["ArchiveBody"]

#: the pipe between the socket and the file: 1 MiB (Linux's default limit for a pipe's size) per pair of calls
_PIPE_SIZE = 1 << 20


class ArchiveBody:
    """The tar of :meth:`~deskctl.providers.docker.engine_api.EngineApi.get_archive_into`: iterated, the body's
    bytes as views of the buffer (each step valid until the next); between steps, :meth:`splice_to` may move the
    body's next bytes from the socket to a file. ``close`` ends the response (and its connection)."""

    def __init__(self, sock: socket.socket, framing: tuple[bool, int | None],
                 steps: Generator[list[memoryview], None, None],
                 errors: Callable[[], AbstractContextManager[None]]) -> None:
        """``framing``: (chunked, content length) of the response; ``errors``: the client's translation of a
        failure into deskctl's errors, as a context manager."""
        self._sock, self._steps, self._errors = sock, steps, errors
        chunked, length = framing
        # the kernel can move the bytes when nothing frames them (no chunks, no length to count down) and the
        # socket is a plain one (a TLS socket's bytes are decrypted here)
        self._spliceable = not chunked and length is None and type(sock) is socket.socket and hasattr(os, "splice")

    def __iter__(self) -> Iterator[list[memoryview]]:
        return self._steps

    def close(self) -> None:
        self._steps.close()

    def splice_to(self, fd: int, count: int) -> int | None:
        """Move up to ``count`` of the body's next bytes to the file descriptor ``fd`` (at its position); how
        many moved (fewer: the body ended), or None where that cannot be done (nothing moved: iterate). A failure
        to read the socket is the client's error, as when iterating; one to write ``fd`` is the ``OSError`` a
        write would raise."""
        if not self._spliceable or count <= 0:
            return None
        import fcntl

        moved = 0
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            with suppress(OSError):  # a bigger pipe: fewer calls (the default 64 KiB works too)
                fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
            while moved < count:
                got = self._from_socket(write_end, min(count - moved, _PIPE_SIZE))
                if got is None:  # this socket cannot be spliced from: read it
                    self._spliceable = False
                    return moved or None
                if not got:
                    break  # the close: the body ended
                moved += got
                _to_file(read_end, fd, got)
        finally:
            os.close(read_end)
            os.close(write_end)
        return moved

    def _from_socket(self, pipe: int, most: int) -> int | None:
        """Up to ``most`` bytes from the socket into ``pipe`` (0: the close), waiting for them as long as the
        socket's timeout says; None when the kernel cannot splice from it."""
        import errno
        import select

        with self._errors():
            while True:
                try:  # the socket is non-blocking (it has a timeout): an empty one says so at once
                    return os.splice(self._sock.fileno(), pipe, most)
                except BlockingIOError:
                    timeout = self._sock.gettimeout()
                    poller = select.poll()
                    poller.register(self._sock.fileno(), select.POLLIN)
                    if not poller.poll(None if timeout is None else int(timeout * 1000)):
                        raise TimeoutError("the engine sent nothing in time") from None
                except OSError as exc:
                    if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        return None
                    raise


def _to_file(pipe: int, fd: int, count: int) -> None:
    """``count`` bytes from ``pipe`` to ``fd``: spliced, or read and written where ``fd``'s file system cannot
    take a splice."""
    import errno

    while count:
        try:
            count -= os.splice(pipe, fd, count)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            while count:
                data = os.read(pipe, count)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                count -= len(data)
