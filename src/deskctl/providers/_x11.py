"""The X11 driver moved to :mod:`deskctl.core.x11` (the layer below the providers and the agent); these names
stay importable from here."""

from deskctl.core.x11 import (
    COOKIE_PROTOCOL,
    X11Address,
    X11Driver,
    connect_display,
    decode_compound_text,
    keysym_for_char,
    keysym_for_key,
    new_cookie,
    read_cookie,
    wait_for_display,
    write_xauthority,
)

__all__ = ["COOKIE_PROTOCOL", "X11Address", "X11Driver", "connect_display", "decode_compound_text",
           "keysym_for_char", "keysym_for_key", "new_cookie", "read_cookie", "wait_for_display", "write_xauthority"]
