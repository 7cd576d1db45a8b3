"""What a desktop gives back, as data: a screenshot (PNG), a raw frame (pixels), a command's result. Shared by the
providers and the in-desktop agent (:mod:`deskctl.providers.base` re-exports them)."""

from __future__ import annotations

from deskctl._record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ExecResult", "RawFrame", "Screenshot"]


class Screenshot(Record, frozen=True):
    """PNG bytes whose pixel grid is the action coordinate space (width x height)."""

    png: bytes
    width: int
    height: int

    def save(self, path: str) -> None:
        with open(path, "wb") as fh:
            fh.write(self.png)


class RawFrame(Record, frozen=True):
    """The screen's pixels uncompressed, in the action coordinate space: a snapshot that stays valid after the
    next capture. Pillow reads it as ``Image.frombuffer("RGB", (width, height), data, "raw", mode, stride, 1)``;
    ``mode`` is a Pillow raw mode (``BGRX``, ``BGR;16``, ``L`` or ``RGB``) and ``stride`` the bytes per row
    (0: rows are packed)."""

    data: bytes
    width: int
    height: int
    mode: str = "BGRX"
    stride: int = 0

    def image(self) -> Any:
        """The frame as an RGB ``PIL.Image`` (a copy)."""
        return self.pil_view().convert("RGB")

    def pil_view(self) -> Any:
        """The frame as a ``PIL.Image`` over ``data`` itself (no copy; grey frames stay ``L``)."""
        from PIL import Image

        inner = "L" if self.mode == "L" else "RGB"
        return Image.frombuffer(inner, (self.width, self.height), self.data, "raw", self.mode, self.stride, 1)


class ExecResult(Record, frozen=True):
    """Result of a command; ``merged`` is True when the provider can only return stdout and stderr together
    (then everything is in ``stdout`` and ``stderr`` is empty). A ``background`` command's result comes at once:
    ``exit_code`` 0 when it was started, ``pid`` its process id on the guest where the guest tells it."""

    exit_code: int
    stdout: str
    stderr: str = ""
    merged: bool = False
    pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr,
                               "merged": self.merged}
        if self.pid is not None:
            out["pid"] = self.pid
        return out
