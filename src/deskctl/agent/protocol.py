"""The agent's wire format, shared by server and client.

A message is a 12-byte prefix (``>IQ``: header length, body length), a UTF-8 JSON object (the header), then
the body: raw bytes of that length (PNG, pixels, file content), streamed in chunks for files so that neither
side holds a whole file. A connection carries many request/reply pairs, strictly one after the other.

A request header has ``op`` and the op's arguments; a reply header has ``ok`` (true) and the results, or ``ok``
false and ``error`` = ``{"class", "code", "message", "remedy"}`` naming a :mod:`deskctl.errors` class, which the
client raises again (:func:`error_from_wire`). The first request on a connection must be ``hello`` carrying the
session token; the server closes the connection on anything else.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO

from deskctl import errors
from deskctl.core.frames import RawFrame

__all__ = [
    "CHUNK",
    "PROTOCOL_VERSION",
    "FrameChanges",
    "Region",
    "error_from_wire",
    "error_to_wire",
    "recv_body",
    "recv_body_to",
    "recv_exactly",
    "recv_header",
    "send_message",
    "send_stream",
    "splice",
]

PROTOCOL_VERSION = 1
_PREFIX = struct.Struct(">IQ")
#: a header longer than this is refused (a peer that speaks something else, or garbage)
MAX_HEADER = 1 << 22
#: bytes per read/write of a streamed body
CHUNK = 1 << 20
#: bodies up to this size go out in the same send as their header (one syscall, one TCP segment for a click)
_INLINE_BODY = 1 << 16


class ProtocolError(Exception):
    """The peer sent something that is not this protocol, or closed the connection (``eof``)."""

    def __init__(self, message: str, *, eof: bool = False) -> None:
        super().__init__(message)
        self.eof = eof


def send_message(sock: socket.socket, header: dict[str, Any], body: bytes | memoryview = b"") -> None:
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    head = _PREFIX.pack(len(raw), len(body)) + raw
    if len(body) <= _INLINE_BODY:
        sock.sendall(head + bytes(body))
    else:
        sock.sendall(head)
        sock.sendall(body)


def send_stream(sock: socket.socket, header: dict[str, Any], size: int, source: BinaryIO) -> None:
    """A message whose body is exactly ``size`` bytes read from ``source`` in chunks. A source that ends early
    raises :class:`OSError` after the connection is already out of step: the caller must close it."""
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    sock.sendall(_PREFIX.pack(len(raw), size) + raw)
    left = size
    while left:
        chunk = source.read(min(CHUNK, left))
        if not chunk:
            raise OSError(f"the file ended {left} bytes before its announced size")
        sock.sendall(chunk)
        left -= len(chunk)


def splice(a: socket.socket, b: socket.socket) -> None:
    """Carry bytes both ways between two connected sockets until either closes (a half-close too) or fails, then
    shut both down: the other direction ends with them and both peers are told, so nothing waits on a peer that
    keeps its side open. Shut down, not closed: a socket the other thread reads stays open through a close, its
    peer never told. The caller closes them once this returns (both directions are done)."""
    import threading

    def copy(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                target.sendall(data)
        except OSError:  # either end went away
            pass
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    back = threading.Thread(target=copy, args=(b, a), daemon=True, name="deskctl-agent-stream")
    back.start()
    copy(a, b)
    back.join()


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise ProtocolError("the connection closed in the middle of a message", eof=True)
        got += n
    return bytes(buffer)


def recv_header(sock: socket.socket) -> tuple[dict[str, Any], int]:
    """The next message's header and its body length (the body is still to be read)."""
    first = sock.recv(_PREFIX.size)
    if not first:
        raise ProtocolError("the connection closed", eof=True)
    prefix = first if len(first) == _PREFIX.size else first + recv_exactly(sock, _PREFIX.size - len(first))
    header_size, body_size = _PREFIX.unpack(prefix)
    if header_size > MAX_HEADER:
        raise ProtocolError(f"a message header of {header_size} bytes is not this protocol")
    try:
        header = json.loads(recv_exactly(sock, header_size))
    except ValueError as exc:
        raise ProtocolError("a message header is not JSON") from exc
    if not isinstance(header, dict):
        raise ProtocolError("a message header is not a JSON object")
    return header, int(body_size)


def recv_body(sock: socket.socket, size: int) -> bytes:
    return recv_exactly(sock, size) if size else b""


def recv_body_to(sock: socket.socket, size: int, sink: BinaryIO | None) -> None:
    """Stream a body of ``size`` bytes into ``sink`` in chunks (None: read and drop it, to stay in step)."""
    buffer = bytearray(min(CHUNK, size) or 1)
    view = memoryview(buffer)
    left = size
    while left:
        n = sock.recv_into(view, min(len(buffer), left))
        if n == 0:
            raise ProtocolError("the connection closed in the middle of a file", eof=True)
        if sink is not None:
            sink.write(view[:n])
        left -= n


# -- errors --------------------------------------------------------------------------------------------------


def error_to_wire(exc: errors.DeskctlError) -> dict[str, Any]:
    return {"class": type(exc).__name__, "code": exc.code, "message": exc.message, "remedy": exc.remedy}


def error_from_wire(body: Any, provider: str | None) -> errors.DeskctlError:
    """The :mod:`deskctl.errors` instance a reply's ``error`` describes: its own class when deskctl has it,
    else the class of its code's family; the code travels unchanged."""
    if not isinstance(body, dict):
        return errors.ProviderApiError("the agent sent a malformed error", provider=provider)
    message = str(body.get("message") or "the agent reported an error")
    code = str(body.get("code") or "provider.api_error")
    remedy = body.get("remedy")
    cls = getattr(errors, str(body.get("class") or ""), None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DeskctlError)):
        cls = _FAMILIES.get(code.split(".", 1)[0], errors.ProviderApiError)
    try:
        return cls(message, code=code, provider=provider, remedy=str(remedy) if remedy else None)
    except ValueError:  # a code that does not belong to the class's family
        return cls(message, provider=provider, remedy=str(remedy) if remedy else None)


_FAMILIES: dict[str, type[errors.DeskctlError]] = {
    "usage": errors.UsageError,
    "config": errors.ConfigInvalid,
    "geometry": errors.InfrastructureError,
    "provider": errors.InfrastructureError,
    "readiness": errors.ReadinessTimeout,
    "capacity": errors.CapacityUnavailable,
    "wait": errors.WaitTimeout,
}


# -- changed regions -----------------------------------------------------------------------------------------

#: bytes per pixel of the raw modes a frame may have
BYTES_PER_PIXEL = {"BGRX": 4, "BGR;16": 2, "L": 1, "RGB": 3}


@dataclass(frozen=True)
class Region:
    """A rectangle of a frame and its pixels (rows packed, in the frame's mode)."""

    x: int
    y: int
    width: int
    height: int
    data: bytes


@dataclass(frozen=True)
class FrameChanges:
    """What changed on the screen since frame ``since`` (the id a previous call returned), as frame
    ``frame_id``. ``full`` is True when the agent could not diff (no or an unknown ``since``, the size or mode
    changed): then ``regions`` is one region covering the whole screen. No regions: nothing changed."""

    frame_id: int
    width: int
    height: int
    mode: str
    full: bool
    regions: tuple[Region, ...]

    def apply(self, frame: RawFrame | None) -> RawFrame:
        """``frame`` (the frame ``since`` named) brought up to date: the screen as of ``frame_id``."""
        bpp = BYTES_PER_PIXEL[self.mode]
        if self.full:
            region = self.regions[0]
            return RawFrame(region.data, self.width, self.height, self.mode)
        if frame is None or (frame.width, frame.height, frame.mode) != (self.width, self.height, self.mode):
            raise ValueError("changes apply only to the frame they were computed against")
        stride = frame.stride or self.width * bpp
        pixels = bytearray(frame.data)
        for region in self.regions:
            row = region.width * bpp
            for i in range(region.height):
                start = (region.y + i) * stride + region.x * bpp
                pixels[start : start + row] = region.data[i * row : (i + 1) * row]
        return RawFrame(bytes(pixels), self.width, self.height, self.mode, frame.stride)


def regions_to_wire(regions: Iterable[Region]) -> tuple[list[list[int]], list[bytes]]:
    boxes, bodies = [], []
    for region in regions:
        boxes.append([region.x, region.y, region.width, region.height])
        bodies.append(region.data)
    return boxes, bodies


def regions_from_wire(boxes: list[list[int]], body: bytes, bpp: int) -> tuple[Region, ...]:
    out: list[Region] = []
    offset = 0
    for x, y, width, height in boxes:
        size = width * height * bpp
        out.append(Region(int(x), int(y), int(width), int(height), body[offset : offset + size]))
        offset += size
    if offset != len(body):
        raise ProtocolError("the changed regions do not add up to their pixels")
    return tuple(out)


def changed_boxes(old: bytes, new: bytes, width: int, height: int, bpp: int, *, gap: int = 16
                  ) -> list[tuple[int, int, int, int]]:
    """Bounding boxes (x, y, width, height) of what differs between two frames of the same size: one box per
    band of changed rows (bands closer than ``gap`` rows are joined), spanning the band's changed columns.
    Pure standard library (the agent has no numpy): rows and then column bounds are found by comparing byte
    slices, which CPython compares with memcmp."""
    stride = width * bpp
    # bytes, not memoryview: bytes == bytes is one memcmp, memoryview == memoryview compares item by item
    a, b = bytes(old[: stride * height]), bytes(new[: stride * height])
    if a == b:
        return []
    rows: list[int] = []
    # bands of 16 rows first: an unchanged band costs one comparison
    for top in range(0, height, 16):
        bottom = min(height, top + 16)
        if a[top * stride : bottom * stride] == b[top * stride : bottom * stride]:
            continue
        rows.extend(y for y in range(top, bottom)
                    if a[y * stride : (y + 1) * stride] != b[y * stride : (y + 1) * stride])
    bands: list[list[int]] = []
    for y in rows:
        if bands and y - bands[-1][1] <= gap:
            bands[-1][1] = y
        else:
            bands.append([y, y])
    boxes: list[tuple[int, int, int, int]] = []
    for first, last in bands:
        left, right = width, -1
        for y in range(first, last + 1):
            base = y * stride
            ra, rb = a[base : base + stride], b[base : base + stride]
            if ra == rb:
                continue
            left = min(left, _first_difference(ra, rb, 0, left * bpp) // bpp)
            right = max(right, _last_difference(ra, rb, (right + 1) * bpp, stride) // bpp)
        boxes.append((left, first, right - left + 1, last - first + 1))
    return boxes


def _first_difference(a: bytes, b: bytes, low: int, high: int) -> int:
    """The first index < ``high`` where ``a`` and ``b`` differ, or ``high`` when they agree before it."""
    if a[:high] == b[:high]:
        return high
    while high - low > 1:  # invariant: a[:low] == b[:low] and a[:high] != b[:high]
        mid = (low + high) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid
    return low


def _last_difference(a: bytes, b: bytes, low: int, high: int) -> int:
    """The last index >= ``low`` where they differ, or ``low - 1`` when they agree from ``low`` on."""
    if a[low:] == b[low:]:
        return low - 1
    while high - low > 1:  # invariant: a[high:] == b[high:] and a[low:] != b[low:]
        mid = (low + high) // 2
        if a[mid:] == b[mid:]:
            high = mid
        else:
            low = mid
    return low


def crop(data: bytes, width: int, bpp: int, box: tuple[int, int, int, int]) -> bytes:
    """The pixels of ``box`` (rows packed) out of a frame ``width`` pixels wide."""
    x, y, w, h = box
    stride = width * bpp
    view = memoryview(data)
    if x == 0 and w == width:
        return bytes(view[y * stride : (y + h) * stride])
    return b"".join(view[(y + i) * stride + x * bpp : (y + i) * stride + (x + w) * bpp] for i in range(h))
