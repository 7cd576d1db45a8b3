"""Multipart bodies read as they stream (a download of any size never held in memory): shared plumbing of the
providers whose file APIs answer ``multipart/form-data``."""

from __future__ import annotations

__all__ = ["MultipartReader", "form_name", "multipart_boundary"]

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from deskctl.errors import ProviderApiError

if TYPE_CHECKING:

    pass

_FORM_NAME = re.compile(r'(?:^|;)\s*name="((?:[^"\\]|\\.)*)"', re.IGNORECASE)
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)


def form_name(disposition: str) -> str:
    """The ``name`` of a part's ``Content-Disposition`` ('' when it has none)."""
    match = _FORM_NAME.search(disposition)
    return match.group(1) if match else ""


def multipart_boundary(content_type: str, provider: str, what: str = "bulk-download") -> bytes:
    """The boundary of a ``multipart/*`` answer's ``Content-Type``, else :class:`ProviderApiError` naming
    ``what`` answered something else."""
    match = _BOUNDARY.search(content_type)
    if not content_type.lower().startswith("multipart/") or match is None:
        raise ProviderApiError(f"{provider}: {what} answered {content_type or 'no content type'}, not multipart",
                               provider=provider)
    return match.group(1).strip().encode("latin-1")


class MultipartReader:
    """A multipart body fed in chunks of any size: for each part ``on_part(headers)`` (lower-case names) says
    where its bytes go. Only the tail that could begin a boundary is held back, so a part of any size streams
    through. ``done`` once the closing boundary was read."""

    def __init__(self, boundary: bytes, on_part: Callable[[Mapping[str, str]], Callable[[bytes], object]]) -> None:
        self._delimiter = b"\r\n--" + boundary
        self._buffer = b"\r\n"  # the first boundary then looks like every other one
        self._state = "preamble"
        self._on_part = on_part
        self._sink: Callable[[bytes], object] | None = None
        self.done = False

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while not self.done:
            if self._state in ("preamble", "body"):
                at = self._buffer.find(self._delimiter)
                if at < 0:
                    keep = len(self._delimiter) - 1
                    if self._sink is not None and self._state == "body" and len(self._buffer) > keep:
                        self._sink(self._buffer[:-keep])
                        self._buffer = self._buffer[-keep:]
                    return
                if self._sink is not None and self._state == "body":
                    self._sink(self._buffer[:at])
                self._buffer = self._buffer[at + len(self._delimiter):]
                self._state = "boundary"
            elif self._state == "boundary":
                if len(self._buffer) < 2:
                    return
                if self._buffer.startswith(b"--"):
                    self.done, self._buffer = True, b""
                    return
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    return
                self._buffer = self._buffer[end + 2:]
                self._state = "headers"
            else:  # headers
                if self._buffer.startswith(b"\r\n"):
                    end, header_block = 0, b""
                else:
                    end = self._buffer.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    header_block = self._buffer[:end]
                    end += 2
                headers: dict[str, str] = {}
                for raw in header_block.split(b"\r\n"):
                    name, colon, value = raw.decode("utf-8", "replace").partition(":")
                    if colon:
                        headers[name.strip().lower()] = value.strip()
                self._buffer = self._buffer[end + 2:]
                self._sink = self._on_part(headers)
                self._state = "body"


