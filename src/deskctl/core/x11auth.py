"""X authorisation cookies, Xauthority files and the address of an X display."""

from __future__ import annotations

import _socket
import os
import struct

from deskctl._record import Record
from deskctl.errors import ProviderUnreachable, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

COOKIE_PROTOCOL = "MIT-MAGIC-COOKIE-1"
_FAMILY_WILD = 0xFFFF
_FAMILY_LOCAL = 256


def new_cookie() -> bytes:
    """A fresh random 16-byte MIT-MAGIC-COOKIE-1, from the OS's random source (what ``secrets.token_bytes``
    reads, without the import of secrets: hmac, hashlib and random, a tenth of a `deskctl up`)."""
    return os.urandom(16)


def _counted(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def write_xauthority(path: str | os.PathLike[str], display_number: int | None, cookie: bytes) -> Path:
    """Write an Xauthority file (the format ``xauth`` and libXau read) holding ``cookie`` for display
    ``display_number`` (None: any display), mode 0600, replaced atomically. It has two entries with the same
    cookie: one for this host name (FamilyLocal, which python-xlib needs) and one for any host (FamilyWild, for
    clients whose host name differs, such as a container's)."""
    from pathlib import Path  # here: a `deskctl do` process reads a cookie and writes none

    target = Path(path)
    number = b"" if display_number is None else str(display_number).encode()
    entry = b"".join(
        struct.pack(">H", family) + _counted(address) + _counted(number) + _counted(COOKIE_PROTOCOL.encode())
        + _counted(cookie)
        for family, address in ((_FAMILY_LOCAL, _socket.gethostname().encode()), (_FAMILY_WILD, b""))
    )
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, entry)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def read_cookie(path: str | os.PathLike[str], display_number: int | None = None) -> bytes:
    """The MIT-MAGIC-COOKIE-1 for ``display_number`` (or the first one) in an Xauthority file.

    Raises :class:`~deskctl.errors.ProviderUnreachable` when the file is missing or holds no such cookie.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ProviderUnreachable(f"cannot read the X authority file {path}: {exc.strerror}") from exc
    offset = 0
    try:
        while offset < len(raw):
            (_family,) = struct.unpack_from(">H", raw, offset)
            offset += 2
            fields: list[bytes] = []
            for _ in range(4):
                (length,) = struct.unpack_from(">H", raw, offset)
                offset += 2
                fields.append(raw[offset : offset + length])
                offset += length
            _address, number, name, data = fields
            if name == COOKIE_PROTOCOL.encode() and (
                display_number is None or not number or number == str(display_number).encode()
            ):
                return data
    except struct.error as exc:
        raise ProviderUnreachable(f"the X authority file {path} is malformed") from exc
    raise ProviderUnreachable(f"the X authority file {path} holds no cookie for display {display_number}")


# -- connecting ------------------------------------------------------------------------------------------------


class X11Address(Record, frozen=True):
    """Where an X server listens. ``display`` is ``":N"`` (the screen is always 0)."""

    display: str = ":0"
    socket_path: str | None = None
    host: str | None = None
    port: int | None = None

    @property
    def number(self) -> int:
        text = self.display.rsplit(":", 1)[-1].split(".", 1)[0]
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"X display {self.display!r} is not of the form :N", code="usage.bad_display") from None

    def describe(self) -> str:
        if self.host is not None:
            return f"{self.host}:{self.port if self.port is not None else 6000 + self.number}"
        return self.socket_path or f"/tmp/.X11-unix/X{self.number}"

    def connect_socket(self, timeout: float) -> _socket.socket:
        """A connected stream socket to the server (no X protocol yet). A local one is made by ``_socket`` itself:
        importing :mod:`socket` (its enums) was about 7% of the instructions of a ``deskctl do`` process."""
        sock: _socket.socket
        if self.host is not None:
            port = self.port if self.port is not None else 6000 + self.number
            import socket

            sock = socket.create_connection((self.host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(self.describe())
            except OSError:
                sock.close()
                raise
        os.set_inheritable(sock.fileno(), False)
        return sock
