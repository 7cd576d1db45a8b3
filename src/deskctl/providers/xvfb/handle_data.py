"""The xvfb provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic)."""

from __future__ import annotations

from deskctl._record import Record
from deskctl.providers._handle_data import HandleData

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["XvfbHandleData", "XvfbProcess"]


class XvfbProcess(Record, frozen=True):
    """A process the desktop started: ``role`` (``xvfb``, ``window_manager``, ``browser``, ``watcher``), its pid
    and its start time in clock ticks (None when unknown: then the pid alone identifies it)."""

    role: str
    pid: int
    ticks: int | None = None


class XvfbHandleData(HandleData, frozen=True):
    """``display`` (``:N``, ``""`` until Xvfb announced it), ``display_number``, ``cookie_file`` (also as
    ``xauthority``: the value for XAUTHORITY; the cookie itself stays in that 0600 file), ``dir`` (the session
    directory), ``marker`` (its ``desktop.json``), ``geometry`` (``WxHxD``), ``procs`` (None in a row saved before
    the marker's last write: the marker knows them), ``socket_id`` (the X socket file's identity),
    ``devtools_port`` (0: Chromium picks one), ``framebuffer`` (the file Xvfb draws the screen into, in a host
    tmpfs; ``""`` in a row of a desktop started without one)."""

    dir: str = ""
    marker: str = ""
    cookie_file: str = ""
    xauthority: str = ""
    geometry: str = ""
    procs: tuple[XvfbProcess, ...] | None = None
    display: str = ""
    display_number: int | None = None
    socket_id: str | None = None
    devtools_port: int = 0
    framebuffer: str = ""

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        procs = values.get("procs")
        if isinstance(procs, list | tuple):
            values["procs"] = tuple(
                XvfbProcess(role=str(p.get("role") or ""), pid=int(p["pid"]),
                            ticks=None if p.get("ticks") is None else int(p["ticks"]))
                for p in procs if isinstance(p, dict) and "pid" in p)
        elif "procs" in values:
            del values["procs"]
        if not isinstance(values.get("display_number"), int):
            values.pop("display_number", None)  # as before: a number not recorded as one is not trusted
        if "devtools_port" in values:
            values["devtools_port"] = int(values["devtools_port"] or 0)
        return values

    def _dump(self, name: str, value: Any) -> Any:
        if name == "procs" and value is not None:
            return [{"role": p.role, "pid": p.pid, "ticks": p.ticks} for p in value]
        return super()._dump(name, value)

    @property
    def xvfb_pid(self) -> int | None:
        """The Xvfb server's pid (the first process started), or None before it started."""
        return next((p.pid for p in self.procs or () if p.role == "xvfb"), None)
