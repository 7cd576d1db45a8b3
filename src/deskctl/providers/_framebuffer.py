"""Xvfb's framebuffer file of a local desktop (xvfb, docker), kept in a host tmpfs and read by mapping it: a capture is
one copy (:class:`~deskctl.providers._x11provider.X11Provider` reads it when its provider names the file)."""

from __future__ import annotations

import io
import os

from deskctl.providers.base import (
    RawFrame,
    Screenshot,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["_Framebuffer", "_framebuffer_root"]


def _framebuffer_root(session_dir: Path) -> Path:
    """Where Xvfb keeps its framebuffer file: a per-user 0700 directory in the host's /dev/shm (memory, no disk
    writes), or the session directory when /dev/shm is not usable or not ours."""
    from pathlib import Path  # here: only a create needs it; a capture (every `deskctl screenshot`) does not

    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = shm / f"deskctl-{os.getuid()}"
        try:
            root.mkdir(mode=0o700, exist_ok=True)
            info = root.stat()
            if info.st_uid == os.getuid() and (info.st_mode & 0o077) == 0 and not root.is_symlink():
                return root
        except OSError:
            pass
    return session_dir


class _Framebuffer:
    """Xvfb's ``-fbdir`` file (an XWD image Xvfb draws into) mapped read-only: a capture is one copy."""

    def __init__(self, path: str) -> None:
        import mmap
        import struct

        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        try:
            fields = struct.unpack_from(">25I", self._map, 0)
            header_size, depth, width, height = fields[0], fields[3], fields[4], fields[5]
            byte_order, bits_per_pixel, bytes_per_line, ncolors = fields[7], fields[11], fields[12], fields[19]
            self.offset = header_size + 12 * ncolors
            if bits_per_pixel != 32 or depth not in (24, 32) or byte_order != 0:
                raise ValueError(f"unsupported framebuffer layout {depth}/{bits_per_pixel}/{byte_order}")
            if self.offset + bytes_per_line * height > len(self._map):
                raise ValueError("framebuffer file shorter than its header says")
        except BaseException:
            self._map.close()
            raise
        self.width, self.height, self.stride = width, height, bytes_per_line

    def screenshot(self, compress_level: int = 1) -> Screenshot:
        end = self.offset + self.stride * self.height
        pixels = self._map[self.offset:end]  # one copy: Xvfb keeps drawing into the file
        if self.stride == self.width * 4:  # packed rows: the shared striped encoder (what X11 captures use)
            from deskctl.core.png import encode_png

            png = encode_png(pixels, self.width, self.height, "BGRX", level=compress_level)
            return Screenshot(png=png, width=self.width, height=self.height)
        from PIL import Image

        image = Image.frombuffer("RGB", (self.width, self.height), pixels, "raw", "BGRX", self.stride, 1)
        out = io.BytesIO()
        image.save(out, format="PNG", compress_level=compress_level)
        return Screenshot(png=out.getvalue(), width=self.width, height=self.height)

    def raw_frame(self) -> RawFrame:
        end = self.offset + self.stride * self.height
        return RawFrame(self._map[self.offset:end], self.width, self.height, "BGRX", self.stride)

    def close(self) -> None:
        try:
            self._map.close()
        except Exception:
            pass
