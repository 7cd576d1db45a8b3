"""The ssh provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic). It holds no
secret: the key is a path, the X cookie stays on the host (read again over SSH by another process)."""

from __future__ import annotations

from typing import Any

from deskctl.providers._handle_data import HandleData

__all__ = ["SshHandleData"]


def _bool(value: Any) -> bool:
    """A flag as stored, or as text (``"false"``) from an older row or an option."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class SshHandleData(HandleData, frozen=True):
    """How to reach the host again (``host``, ``port``, ``user``, ``key_file``, ``known_hosts``, ``agent``,
    ``identity_files``, ``jump`` as ``user@host:port,...``, ``compression``; ``connect_timeout`` only in rows of
    older versions) and the desktop there: ``dir`` (its remote folder), ``display`` (the X display number),
    ``xvfb_pid``, ``watcher_pid``, ``detached``, ``geometry``, ``window_manager``; ``alive`` when listed."""

    host: str = ""
    port: int = 22
    user: str = ""
    key_file: str | None = None
    known_hosts: str | None = None
    agent: bool = True
    xvfb_path: str = "Xvfb"
    remote_dir: str = ""
    compression: bool = False
    identity_files: tuple[str, ...] = ()
    jump: str = ""
    connect_timeout: float | None = None
    dir: str = ""
    display: int | None = None
    xvfb_pid: int | None = None
    watcher_pid: int | None = None
    detached: bool = False
    geometry: str | None = None
    window_manager: bool = False
    alive: bool | None = None

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in ("agent", "compression", "detached", "window_manager"):
            if key in values:
                values[key] = _bool(values[key])
        if "port" in values:
            values["port"] = int(values["port"])
        if "identity_files" in values:
            values["identity_files"] = tuple(str(p) for p in values["identity_files"] or ())
        for key in ("host", "user", "xvfb_path", "remote_dir", "jump", "dir"):
            if key in values:
                values[key] = str(values[key])
        if values.get("connect_timeout") is not None:
            values["connect_timeout"] = float(values["connect_timeout"]) or None
        return values
