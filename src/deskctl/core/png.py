"""PNG code shared by the providers: the fast screenshot encoder (:func:`encode_png`, raw X11 captures to PNG
in threads, stripe by stripe), the banded encoder of a frame that changes in places (:class:`BandedPng`, the SSH
provider's incremental capture), and the PNG header helpers (:func:`png_chunk`, :func:`png_size`).

Only the standard library at import time (Pillow is imported where pixels are converted), so any provider may
import this module without slowing ``import deskctl``.
"""

from __future__ import annotations

import _thread
import os
import struct
import sys
import zlib

from deskctl.errors import ProviderApiError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PNG_SIGNATURE",
    "BandedPng",
    "adler32_combine",
    "encode_png",
    "png_chunk",
    "png_size",
]

# -- PNG chunks and headers ------------------------------------------------------------------------------------

#: the eight bytes every PNG file starts with
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk: length, type, body and CRC (for the encoders that write PNG themselves)."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_size(png: bytes, provider: str) -> tuple[int, int]:
    """(width, height) from a PNG's header chunk, without decoding the image. A screenshot that is not a PNG
    is :class:`~deskctl.errors.ProviderApiError` naming ``provider``."""
    if len(png) < 24 or png[:8] != PNG_SIGNATURE or png[12:16] != b"IHDR":
        raise ProviderApiError(f"{provider}: the screenshot is not a PNG image", provider=provider)
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


# -- the screenshot encoder ----------------------------------------------------------------------------------------

_ADLER_BASE = 65521
#: bytes per pixel of the raw modes capture_raw returns
_RAW_BYTES = {"BGRX": 4, "BGR;16": 2, "L": 1}
#: threads that encode the stripes of one picture at most (the calling thread is one of them)
_WORKERS = max(1, min(4, os.cpu_count() or 1))


def _encode_stripes(jobs: list[tuple[Any, ...]]) -> list[tuple[bytes, int, int]]:
    """Each stripe's :func:`_encode_stripe`, in order, by up to :data:`_WORKERS` threads taking the next stripe in
    turn (zlib and Pillow's converters release the GIL). Threads started per picture rather than a
    ``concurrent.futures`` pool: that module's import was a tenth of a whole ``deskctl screenshot`` process, and
    starting a thread costs far less than encoding a stripe. They are :mod:`_thread`'s, each joined by a lock it
    releases when it ends: :mod:`threading` (with functools and collections) was an eighth of that process."""
    results: list[tuple[bytes, int, int] | None] = [None] * len(jobs)
    failures: list[BaseException] = []
    taken = iter(range(len(jobs)))
    lock = _thread.allocate_lock()

    def work() -> None:
        while not failures:
            with lock:
                index = next(taken, None)
            if index is None:
                return
            try:
                results[index] = _encode_stripe(*jobs[index])
            except BaseException as exc:  # raised in the caller's thread, below
                failures.append(exc)

    def helper(ended: _thread.LockType) -> None:
        try:
            work()
        finally:
            ended.release()

    helpers: list[_thread.LockType] = []
    try:
        for _ in range(min(_WORKERS, len(jobs)) - 1):
            ended = _thread.allocate_lock()
            ended.acquire()
            _thread.start_new_thread(helper, (ended,))
            helpers.append(ended)
        work()
    finally:
        for ended in helpers:  # joined: each holds its lock until it has ended
            ended.acquire()
    if failures:
        raise failures[0]
    return [part for part in results if part is not None]


def adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """The Adler-32 of A+B from those of A and B and the length of B (zlib's adler32_combine)."""
    rem = length2 % _ADLER_BASE
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_BASE
    sum1 += (adler2 & 0xFFFF) + _ADLER_BASE - 1
    sum2 += ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + _ADLER_BASE - rem
    if sum1 >= _ADLER_BASE:
        sum1 -= _ADLER_BASE
    if sum1 >= _ADLER_BASE:
        sum1 -= _ADLER_BASE
    if sum2 >= _ADLER_BASE << 1:
        sum2 -= _ADLER_BASE << 1
    if sum2 >= _ADLER_BASE:
        sum2 -= _ADLER_BASE
    return sum1 | (sum2 << 16)


def _encode_stripe(data: memoryview, width: int, rows: int, mode: str, level: int, last: bool,
                   base: bytes | bytearray | None = None, offset: int = 0) -> tuple[bytes, int, int]:
    """Rows of one horizontal stripe, converted to RGB (or kept grey), each prefixed by filter type 0, and
    deflated as a raw stream ending on a byte boundary (or finished, for the last stripe). ``base`` and
    ``offset``: the whole capture and where ``data`` starts in it, when it is bytes (read without a copy)."""
    if mode == "L":
        pixels: bytes | bytearray | memoryview = data
        stride = width
    elif mode == "BGRX" and "PIL.Image" not in sys.modules:
        # a process that has not loaded Pillow (a CLI screenshot) does not load it for this: its import costs tens
        # of milliseconds, the strided copies about a millisecond more than Pillow's converter per 1024x768 frame
        pixels = _bgrx_to_rgb(data, mode) if base is None else _bgrx_to_rgb(base, mode, offset, len(data))
        stride = width * 3
    else:
        try:
            from PIL import Image
        except ImportError:  # the in-desktop agent (deskctl.agent) runs where only python3-xlib is installed
            pixels = _bgrx_to_rgb(data, mode)
        else:
            # via RGBX: Pillow unpacks BGRX into its 4-byte pixels and packs RGB out about 3x faster than via RGB
            inner = "RGBX" if mode == "BGRX" else "RGB"
            image = Image.frombuffer(inner, (width, rows), data, "raw", mode, 0, 1)  # type: ignore[arg-type]
            pixels = image.tobytes("raw", "RGB")
        stride = width * 3
    view = memoryview(pixels)
    # each row after a filter byte 0, in one copy: [0, row 0, 0, row 1, ...] joined
    parts: list[bytes | memoryview] = [b"\x00"] * (2 * rows)
    parts[1::2] = [view[i * stride : (i + 1) * stride] for i in range(rows)]
    filtered = b"".join(parts)
    del parts, view, pixels  # the RGB rows are in ``filtered`` now
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15, 9)
    body = compressor.compress(filtered) + compressor.flush(zlib.Z_FINISH if last else zlib.Z_FULL_FLUSH)
    return body, zlib.adler32(filtered), len(filtered)


def _bgrx_to_rgb(data: bytes | bytearray | memoryview, mode: str, offset: int = 0, length: int | None = None
                 ) -> bytearray:
    """BGRX pixels (``length`` bytes of ``data`` from ``offset``; default all) as packed RGB without Pillow: three
    strided copies, each one C loop, read from bytes in place (a memoryview is copied to bytes first)."""
    if mode != "BGRX":
        raise ProviderApiError(f"encoding a {mode} capture as PNG needs Pillow (pip install pillow)")
    if not isinstance(data, bytes | bytearray):
        data = bytes(data[offset : None if length is None else offset + length])
        offset, length = 0, None
    end = len(data) if length is None else offset + length
    rgb = bytearray((end - offset) // 4 * 3)
    rgb[0::3] = data[offset + 2 : end : 4]  # one channel at a time: one strided copy alive at once
    rgb[1::3] = data[offset + 1 : end : 4]
    rgb[2::3] = data[offset : end : 4]
    return rgb


def encode_png(data: bytes | bytearray | memoryview, width: int, height: int, mode: str = "BGRX", *, level: int = 1,
               stripes: int | None = None) -> bytes:
    """A PNG of raw pixels (``mode``: ``BGRX``, ``BGR;16`` or ``L``, as :meth:`X11Driver.capture_raw` gives).

    Fast by construction: rows use PNG filter "None" (a screen compresses well without filtering, and Pillow's
    adaptive filtering costs more than the compression), zlib runs at ``level`` 1 on horizontal stripes in a
    few threads (zlib and Pillow's converters release the GIL), and the stripes are joined pigz-style into one
    deflate stream (full flushes end each stripe on a byte boundary; the Adler-32 is combined).
    """
    bpp = _RAW_BYTES[mode]
    if len(data) < width * height * bpp:
        raise ProviderApiError(f"capture holds {len(data)} bytes, a {width}x{height} {mode} image needs "
                               f"{width * height * bpp}")
    if stripes is None:
        # about 150 rows a stripe (a few hundred KiB, cache-sized) is faster than one stripe per core
        stripes = max(1, min(16, height // 150))
    rows_per = -(-height // max(1, stripes))
    view = memoryview(data)
    base = data if isinstance(data, bytes | bytearray) else None
    jobs = []
    for top in range(0, height, rows_per):
        bottom = min(height, top + rows_per)
        jobs.append((view[top * width * bpp : bottom * width * bpp], width, bottom - top, mode, level,
                     bottom == height, base, top * width * bpp))
    parts = [_encode_stripe(*jobs[0])] if len(jobs) == 1 else _encode_stripes(jobs)
    adler = 1
    for _, part_adler, part_length in parts:
        adler = adler32_combine(adler, part_adler, part_length)
    stream = b"\x78\x01" + b"".join(body for body, _, _ in parts) + struct.pack(">I", adler)
    color_type = 0 if mode == "L" else 2
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return PNG_SIGNATURE + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", stream) + png_chunk(b"IEND", b"")


# -- the banded encoder (a frame that changes in places) -----------------------------------------------------------


class BandedPng:
    """A PNG encoder for a frame that changes in places: the picture is cut into bands of :attr:`BAND` rows,
    each deflated on its own (filter None, zlib level 1) and ended with a full flush, so the bands' compressed
    bytes concatenate into one valid zlib stream. Only bands marked by :meth:`invalidate` are re-compressed;
    the stream is closed with an empty final block and the Adler-32 of all rows."""

    BAND = 16

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        count = (height + self.BAND - 1) // self.BAND
        self._raw: list[bytes] = [b""] * count
        self._deflated: list[bytes] = [b""] * count
        self._dirty = set(range(count))
        self.bands_encoded = 0  # for tests: how much work the last encodes did
        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
        self._ihdr = png_chunk(b"IHDR", header)

    def invalidate(self, top: int, bottom: int) -> None:
        """Rows ``top`` (included) to ``bottom`` (excluded) changed."""
        first, last = max(0, top) // self.BAND, (min(self.height, bottom) - 1) // self.BAND
        self._dirty.update(range(first, last + 1))

    def encode(self, frame: bytearray) -> bytes:
        """The PNG of ``frame`` (BGRX rows of :attr:`width` pixels)."""
        from PIL import Image

        width = self.width
        for index in sorted(self._dirty):
            top = index * self.BAND
            rows = min(self.height, top + self.BAND) - top
            rgb = Image.frombuffer("RGB", (width, rows), bytes(frame[top * width * 4:(top + rows) * width * 4]),
                                   "raw", "BGRX", 0, 1).tobytes()
            stride = width * 3
            raw = b"".join(b"\x00" + rgb[r * stride:(r + 1) * stride] for r in range(rows))
            compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
            self._raw[index] = raw
            self._deflated[index] = compressor.compress(raw) + compressor.flush(zlib.Z_FULL_FLUSH)
            self.bands_encoded += 1
        self._dirty.clear()
        adler = 1
        for raw in self._raw:
            adler = zlib.adler32(raw, adler)
        # zlib header (deflate, 32K window, fastest), the bands, an empty final fixed block, the checksum
        stream = b"\x78\x01" + b"".join(self._deflated) + b"\x03\x00" + struct.pack(">I", adler)
        return PNG_SIGNATURE + self._ihdr + png_chunk(b"IDAT", stream) + png_chunk(b"IEND", b"")
