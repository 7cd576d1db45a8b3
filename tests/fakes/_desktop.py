"""The desktop behind every cloud fake: one real Xvfb (``-displayfd``, so no display number is guessed) and an
:class:`~deskctl.providers._x11.X11Driver` on it."""

from __future__ import annotations

import os
import subprocess
import threading

from deskctl.providers._x11 import X11Driver

__all__ = ["XvfbDesktop"]


class XvfbDesktop:
    """One Xvfb at ``width`` x ``height`` pixels and an X11 driver on it; :meth:`stop` ends both.

    ``lock`` serialises the input and screenshots a fake sends to this desktop."""

    def __init__(self, width: int, height: int, *, provider: str) -> None:
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp",
             "-noreset"],
            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        os.close(write_fd)
        try:
            data = b""
            with os.fdopen(read_fd, "rb") as pipe:
                while not data.endswith(b"\n"):
                    chunk = pipe.read(1)
                    if not chunk:
                        raise RuntimeError("Xvfb exited before it announced its display")
                    data += chunk
            self.display = f":{int(data.strip())}"
            self.driver = X11Driver.open(self.display, provider=provider)
        except BaseException:
            self.stop()
            raise
        self.lock = threading.Lock()

    def stop(self) -> None:
        driver = getattr(self, "driver", None)
        if driver is not None:
            try:
                driver.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
