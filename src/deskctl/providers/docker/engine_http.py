"""HTTP/1.1 as :class:`~deskctl.providers.docker.engine_api.EngineApi` speaks it to a Docker engine: one
connection (:class:`_Connection`: a request written whole, a response read by its framing), and the URL helpers of
its requests. ``quote``, ``urlencode`` and ``urlsplit`` give what :mod:`urllib.parse`'s do; they leave the plain
cases (a container's id or name, ``force=1&v=1``, ``unix:///var/run/docker.sock``) to a few string operations, so
that a ``deskctl down`` does not import :mod:`urllib.parse` (and its :mod:`ipaddress`), and hand every other
input to :mod:`urllib.parse` itself.
"""

from __future__ import annotations

import io
from _socket import socket as _plain_socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Iterator, Mapping
    from typing import Any
    from urllib.parse import SplitResult

__all__ = ["quote", "urlencode", "urlsplit"]

#: the characters :func:`urllib.parse.quote` never changes (``safe=""``), nor ``quote_plus`` with its default "/"
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def quote(text: str, safe: str = "") -> str:
    """:func:`urllib.parse.quote` of ``text``."""
    if _UNRESERVED.issuperset(text):
        return text
    from urllib.parse import quote as full

    return full(text, safe=safe)


def urlencode(query: Mapping[str, Any]) -> str:
    """:func:`urllib.parse.urlencode` of ``query`` (a mapping of str keys)."""
    pairs = [(k, str(v)) for k, v in query.items() if not isinstance(k, bytes) and not isinstance(v, bytes)]
    if len(pairs) == len(query) and all(_UNRESERVED.issuperset(k) and _UNRESERVED.issuperset(v) for k, v in pairs):
        return "&".join(f"{k}={v}" for k, v in pairs)
    from urllib.parse import urlencode as full

    return full(query)


class _UnixUrl:
    """What :func:`urllib.parse.urlsplit` says of ``unix:///PATH`` (no query, no fragment): the parts read."""

    scheme = "unix"
    hostname = None
    port = None

    def __init__(self, path: str) -> None:
        self.path = path


def urlsplit(url: str) -> SplitResult | _UnixUrl:
    """:func:`urllib.parse.urlsplit` of ``url`` (its ``scheme``, ``path``, ``hostname`` and ``port``)."""
    if url.startswith("unix:///") and not any(c in url for c in "?#\t\r\n"):
        return _UnixUrl(url[len("unix://"):])
    from urllib.parse import urlsplit as full

    return full(url)


class _Closed(ConnectionError):
    """The engine closed the connection before a response began."""


class _BadResponse(Exception):
    """A response that is not HTTP/1.x as the engine writes it."""


class _Received(io.RawIOBase):
    """A plain socket's input under a :class:`io.BufferedReader`: ``makefile("rb")`` without socket.py."""

    def __init__(self, sock: _plain_socket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.recv_into(buffer)


class _Connection:
    """One HTTP/1.1 connection: a request written whole, a response read by its framing."""

    MAX_LINE = 65536

    def __init__(self, sock: socket.socket | _plain_socket) -> None:
        self.sock: Any = sock  # a socket.socket (sendfile) on bulk calls, TCP and TLS
        self._reader: io.BufferedReader = (sock.makefile("rb") if hasattr(sock, "makefile")
                                           else io.BufferedReader(_Received(sock)))

    def close(self) -> None:
        self._reader.close()
        self.sock.close()

    def send_request(self, method: str, target: str, body: bytes | None,
                     headers: Mapping[str, str] | None, *, length: bool = True, version: str = "1.1") -> None:
        lines = [f"{method} {target} HTTP/{version}", "Host: docker", "User-Agent: deskctl"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if length and (body is not None or method in ("POST", "PUT")):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.sock.sendall(head + body if body is not None and len(body) < 65536 else head)
        if body is not None and len(body) >= 65536:
            self.sock.sendall(body)

    def read_line(self) -> bytes:
        line = self._reader.readline(self.MAX_LINE)
        if not line:
            raise _Closed("the engine closed the connection")
        return line

    def read_head(self) -> tuple[int, bool, int | None]:
        """The status line and headers: ``(status, chunked, content length or None)``; the connection is kept
        only when the engine does not say ``Connection: close``."""
        parts = self.read_line().split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _BadResponse("not an HTTP/1.x status line")
        status = int(parts[1])
        chunked, length = False, None
        self.keep = parts[0] != b"HTTP/1.0"
        self.headers: dict[bytes, bytes] = {}
        while True:
            line = self.read_line()
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.partition(b":")
            key, value = name.strip().lower(), value.strip()
            self.headers[key] = value
            if key == b"content-length" and value.isdigit():
                length = int(value)
            elif key == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif key == b"connection" and value.lower() == b"close":
                self.keep = False
        self.last_head = (status, chunked, length)
        return status, chunked, length

    def read_response(self, *, head: bool = False) -> tuple[int, bool, bytes]:
        """``(status, connection kept, body)``; ``head``: the answer to a HEAD request, which has no body."""
        status, chunked, length = self.read_head()
        body = b"" if head else self.read_body(chunked, length, status)
        return status, self.keep, body

    def read_body(self, chunked: bool, length: int | None, status: int) -> bytes:
        if not chunked and length is None and (status in (204, 304) or 100 <= status < 200):
            return b""
        return b"".join(self.iter_body(chunked, length))

    def _counted(self, size: int) -> Iterator[bytes]:
        """The next ``size`` bytes of the body as they arrive; the engine closing before is :class:`_BadResponse`."""
        while size:
            data = self._reader.read1(min(size, 1 << 20))
            if not data:
                raise _BadResponse("the engine closed the connection in the middle of a response")
            size -= len(data)
            yield data

    def iter_body(self, chunked: bool, length: int | None) -> Iterator[bytes]:
        """The body as it arrives, by its framing (chunked, a length, or up to the close)."""
        if chunked:
            while True:
                size = int(self.read_line().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.read_line() not in (b"\r\n", b"\n"):
                        pass  # trailers
                    return
                yield from self._counted(size)
                self.read_line()
        elif length is not None:
            yield from self._counted(length)
        else:  # neither framing: the body runs to the close
            self.keep = False
            while data := self._reader.read1(1 << 20):
                yield data

    def body_into(self, chunked: bool, length: int | None, data: bytearray) -> Iterator[list[memoryview]]:
        """The body as it arrives, received into ``data`` (one receive per step): each step the body's next bytes
        as views of ``data``, the chunked framing left out, valid until the next step."""
        buffer = memoryview(data)
        first = self._reader.read1(len(buffer)) if length != 0 else b""  # what the head's read took of the body
        filled = len(first)
        buffer[:filled] = first
        if not chunked:
            left = length  # None: the body runs to the close
            while True:
                take = filled if left is None else min(filled, left)
                if take:
                    yield [buffer[:take]]
                if left is not None:
                    left -= take
                    if not left:
                        return
                filled = self.sock.recv_into(buffer[:len(buffer) if left is None else min(left, len(buffer))])
                if not filled:
                    if left is None:
                        self.keep = False
                        return
                    raise _BadResponse("the engine closed the connection in the middle of a response")
        pos, left, after_data, trailers = 0, 0, False, False
        while True:
            views: list[memoryview] = []
            while pos < filled:
                if left:  # a chunk's data: all that has come of it, as it lies in the buffer
                    take = min(left, filled - pos)
                    views.append(buffer[pos:pos + take])
                    pos, left = pos + take, left - take
                    after_data = not left
                    continue
                end = data.find(b"\n", pos, filled)
                if end < 0:
                    break  # a line not yet whole
                line, pos = bytes(buffer[pos:end + 1]), end + 1
                if after_data or trailers:  # the CRLF after a chunk's data; a trailer, or the blank line that ends
                    if after_data and line.strip():
                        raise _BadResponse("a chunk longer than its size")
                    if trailers and line in (b"\r\n", b"\n"):
                        if views:
                            yield views
                        return
                    after_data = False
                    continue
                left = int(line.split(b";")[0].strip() or b"0", 16)
                trailers = not left
            if views:
                yield views
            tail = bytes(buffer[pos:filled])  # part of a line: kept at the front
            if len(tail) > self.MAX_LINE:
                raise _BadResponse("a chunk size line too long")
            buffer[:len(tail)] = tail
            pos, filled = 0, len(tail)
            got = self.sock.recv_into(buffer[filled:])
            if not got:
                raise _BadResponse("the engine closed the connection in the middle of a response")
            filled += got

    def read_upto(self, size: int) -> bytes:
        """Up to ``size`` bytes: fewer only at the end of the stream."""
        return self._reader.read(size)

    def _read_exact(self, size: int) -> bytes:
        data = self._reader.read(size)
        if len(data) != size:
            raise _BadResponse("the engine closed the connection in the middle of a response")
        return data
