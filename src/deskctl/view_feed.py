"""The frames of :mod:`deskctl.view`: :class:`FrameFeed` captures the screen while someone watches, encodes a
JPEG (:func:`encode_jpeg`) only when the pixels changed, and hands the latest :class:`EncodedFrame` to every viewer.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deskctl.errors import DeskctlError, ProviderApiError, ProviderUnreachable, RateLimited

if TYPE_CHECKING:
    from deskctl.providers.base import RawFrame

__all__ = ["DEFAULT_FPS", "DEFAULT_QUALITY", "EncodedFrame", "FrameFeed", "encode_jpeg"]

DEFAULT_FPS = 30.0
DEFAULT_QUALITY = 80
#: errors after which capturing again may succeed (a cloud API that throttles or hiccups): keep the last frame
_TRANSIENT = (RateLimited, ProviderUnreachable, ProviderApiError)


def encode_jpeg(frame: RawFrame, quality: int = DEFAULT_QUALITY) -> bytes:
    """A baseline JPEG of ``frame`` (4:2:0 chroma, as video does: a third faster to encode than 4:4:4 at 1024x900,
    and text in a screen's usual dark-on-light stays sharp; only coloured text softens)."""
    image = frame.pil_view()
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=quality, subsampling=2)
    return out.getvalue()


@dataclass(frozen=True)
class EncodedFrame:
    """One JPEG of the stream; ``seq`` grows by one with every frame that differs from the one before."""

    seq: int
    jpeg: bytes
    width: int
    height: int


class FrameFeed:
    """Captures the screen while at least one viewer watches (at most ``fps`` times a second), encodes a frame
    only when its pixels changed, and hands the latest to every viewer.

    ``grab`` raises deskctl errors: a transient one (rate limit, an unreachable or failing API) keeps the last
    frame and retries with back-off; any other ends the feed, and :attr:`error` holds it.
    """

    def __init__(self, grab: Callable[[], RawFrame], *, fps: float = DEFAULT_FPS,
                 quality: int = DEFAULT_QUALITY) -> None:
        self._grab = grab
        self.interval = 1.0 / fps if fps > 0 else 0.0
        self.quality = quality
        self._cond = threading.Condition()
        self._viewers = 0
        self._stopped = False
        self._latest: EncodedFrame | None = None
        self._last_data: bytes | None = None
        self._captures = 0
        self.error: DeskctlError | None = None
        self.last_transient: DeskctlError | None = None
        self._thread: threading.Thread | None = None

    # -- the capture loop ------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="deskctl-view-capture", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while self._viewers == 0 and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            started = time.monotonic()
            try:
                frame = self._grab()
            except _TRANSIENT as exc:
                failures += 1
                self.last_transient = exc
                retry_after = getattr(exc, "retry_after", None)
                self._pause(float(retry_after) if retry_after is not None else min(5.0, 0.25 * 2 ** min(failures, 5)))
                continue
            except DeskctlError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # a bug must end the view visibly, not freeze it
                self._fail(DeskctlError(f"capture failed: {type(exc).__name__}: {exc}"))
                return
            failures = 0
            data = frame.data
            changed = self._last_data is None or data != self._last_data or self._latest is None or (
                (frame.width, frame.height) != (self._latest.width, self._latest.height))
            encoded = None
            if changed:
                try:
                    jpeg = encode_jpeg(frame, self.quality)
                except (ValueError, OSError) as exc:
                    self._fail(DeskctlError(f"cannot encode a {frame.width}x{frame.height} {frame.mode} frame: {exc}"))
                    return
                seq = self._latest.seq + 1 if self._latest is not None else 1
                encoded = EncodedFrame(seq, jpeg, frame.width, frame.height)
            with self._cond:
                if encoded is not None:
                    self._latest = encoded
                    self._last_data = bytes(data)
                self._captures += 1
                self._cond.notify_all()
            self._pause(self.interval - (time.monotonic() - started))

    def _pause(self, seconds: float) -> None:
        if seconds <= 0:
            return
        with self._cond:
            deadline = time.monotonic() + seconds
            while not self._stopped and (remaining := deadline - time.monotonic()) > 0:
                self._cond.wait(remaining)

    def _fail(self, error: DeskctlError) -> None:
        with self._cond:
            self.error = error
            self._stopped = True
            self._cond.notify_all()

    # -- viewers ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Count a viewer in while the block runs (capture runs only while someone watches)."""
        with self._cond:
            self._viewers += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._viewers -= 1

    @property
    def viewers(self) -> int:
        return self._viewers

    def captures(self) -> int:
        with self._cond:
            return self._captures

    def wait(self, *, after_seq: int = 0, after_capture: int | None = None, timeout: float) -> EncodedFrame | None:
        """The latest frame once it is newer than ``after_seq`` and was captured after capture number
        ``after_capture`` (None: any); None when ``timeout`` passes first or the feed stopped. Call it inside
        :meth:`watching`, else nothing is captured."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                latest = self._latest
                if latest is not None and latest.seq > after_seq and (
                        after_capture is None or self._captures > after_capture):
                    return latest
                remaining = deadline - time.monotonic()
                if self._stopped or remaining <= 0:
                    return None
                self._cond.wait(remaining)
