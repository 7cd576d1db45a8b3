"""One byte pump for the tests' socket relays (an engine socket seen by a test, a proxy in the middle)."""

from __future__ import annotations

import socket
from collections.abc import Callable


def pump(source: socket.socket, sink: socket.socket, seen: Callable[[bytes], object] | None = None) -> None:
    """Carry what ``source`` sends to ``sink`` (each chunk shown to ``seen`` first) until either ends or fails,
    then shut both down, so the other direction's pump and both peers are told."""
    try:
        while data := source.recv(1 << 16):
            if seen is not None:
                seen(data)
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
