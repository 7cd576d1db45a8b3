"""A recorded session's video: ``record=DIR, video=True`` / ``deskctl up --record DIR --video``.

The screen is captured with deskctl's own raw capture (the provider's fast ``raw_frame``, through a provider
connection of its own, so the agent's actions never share it) at ``fps`` frames a second and piped as raw
pixels into the ``ffmpeg`` program, which writes ``video.mp4`` (H.264, fragmented MP4: a video cut short by a
crash still plays up to its last second) into the recording directory. A frame that is late is repeated, so
frame ``k`` shows the screen at ``monotonic + k / fps`` of the ``video`` row: a step's place in the video is
its row's ``monotonic`` minus that.

Who runs it:

- a session owned by this process (``with open_desktop(..., record=DIR, video=True)``): a thread of this
  process; ``ffmpeg`` is its child, told by the kernel to stop when the thread that started it goes away
  (``PR_SET_PDEATHSIG``), and its input pipe closes with this process, so a killed process leaves no ffmpeg;
- a detached session (``deskctl up --record DIR --video``): a video process of its own
  (``python -m deskctl.observe.video_process``), named with its start time in the session's ``recording``
  ledger event; ``deskctl down`` (any teardown) stops it with SIGTERM and waits for the file to be finished
  before the desktop is destroyed. It also stops by itself when the session is over or the screen is gone.

Bounded: ``max_seconds`` of video and ``max_mb`` of file (then the video ends; the session goes on). A provider
without a fast raw capture (the clouds: every frame would be a screenshot call) is ``usage.unsupported``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from deskctl.errors import UsageError

if TYPE_CHECKING:
    from deskctl.providers.base import Provider, RawFrame, RemoteHandle
    from deskctl.recording import Recorder
    from deskctl.session import Desktop

__all__ = ["VIDEO_NAME", "VideoOptions", "check_supported", "stop_video_process"]

VIDEO_NAME = "video.mp4"
LOG_NAME = "video.log"
MAX_FPS = 30
#: how often the detached video process looks whether its session is still on
STATUS_POLL_SECONDS = 2.0
#: how long a stop waits for ffmpeg (or the video process) to finish the file before it is killed
STOP_SECONDS = 30.0
_PIX_FMT = {"BGRX": "bgr0", "L": "gray"}
_BPP = {"BGRX": 4, "L": 1}


@dataclass(frozen=True)
class VideoOptions:
    """``fps`` (1..30), and the bounds: ``max_seconds`` of video, ``max_mb`` of file."""

    fps: int = 10
    max_seconds: float = 3600.0
    max_mb: float = 1024.0

    @classmethod
    def build(cls, value: bool | VideoOptions | None, *, fps: Any = None, max_seconds: Any = None,
              max_mb: Any = None) -> VideoOptions | None:
        """``video=`` of the library and the CLI as options (None: no video); bad values are ``usage.invalid``."""
        if value is None or value is False:
            return None
        base = value if isinstance(value, VideoOptions) else cls()
        fps = base.fps if fps is None else fps
        max_seconds = base.max_seconds if max_seconds is None else max_seconds
        max_mb = base.max_mb if max_mb is None else max_mb
        if isinstance(fps, bool) or not isinstance(fps, int) or not 1 <= fps <= MAX_FPS:
            raise UsageError(f"video fps must be a whole number from 1 to {MAX_FPS}, not {fps!r}",
                             code="usage.invalid")
        for name, number in (("video max_seconds", max_seconds), ("video max_mb", max_mb)):
            if isinstance(number, bool) or not isinstance(number, int | float) or not 0 < number < 1e9:
                raise UsageError(f"{name} must be a positive number, not {number!r}", code="usage.invalid")
        return cls(fps=fps, max_seconds=float(max_seconds), max_mb=float(max_mb))

    @classmethod
    def from_flags(cls, video: bool, fps: int | None, max_seconds: float | None,
                   max_mb: float | None) -> VideoOptions | None:
        """The CLI's ``--video --video-fps --video-max-seconds --video-max-mb``."""
        if not video and (fps, max_seconds, max_mb) != (None, None, None):
            raise UsageError("--video-fps, --video-max-seconds and --video-max-mb go with --video",
                             code="usage.invalid", remedy="add --video (and --record DIR)")
        return cls.build(video, fps=fps, max_seconds=max_seconds, max_mb=max_mb)

    def to_data(self) -> dict[str, Any]:
        return {"fps": self.fps, "max_seconds": self.max_seconds, "max_mb": self.max_mb}

    @classmethod
    def from_data(cls, data: Any) -> VideoOptions:
        data = data if isinstance(data, dict) else {}
        return cls(fps=int(data.get("fps") or 10), max_seconds=float(data.get("max_seconds") or 3600.0),
                   max_mb=float(data.get("max_mb") or 1024.0))


def ffmpeg_program() -> str:
    found = shutil.which("ffmpeg")
    if found is None:
        raise UsageError("recording a video needs the ffmpeg program, which is not on PATH",
                         code="usage.unsupported",
                         remedy="install ffmpeg (Debian: apt-get install ffmpeg), or record without --video")
    return found


def check_supported(provider_class: type[Provider], provider_name: str) -> None:
    """Refuse (``usage.unsupported``, exit 2) a video where it cannot be made, before anything is created."""
    from deskctl.providers.base import Provider

    if provider_class.raw_frame is Provider.raw_frame:
        raise UsageError(f"provider {provider_name!r} cannot record a video: it has no fast screen capture "
                         "(every frame would be a screenshot call)", code="usage.unsupported",
                         provider=provider_name, remedy="record without --video (the PNG per step is kept)")
    ffmpeg_program()


# -- the capture loop ---------------------------------------------------------------------------------------
def _packed(frame: RawFrame) -> tuple[bytes | memoryview, str]:
    """The frame's pixels as tightly packed rows, and ffmpeg's name for their format."""
    bpp = _BPP.get(frame.mode)
    if bpp is None:  # another layout (a 16-bit screen): through Pillow
        return frame.image().convert("RGB").tobytes(), "rgb24"
    row = frame.width * bpp
    if frame.stride in (0, row):
        return memoryview(frame.data)[: row * frame.height], _PIX_FMT[frame.mode]
    view = memoryview(frame.data)
    return b"".join(view[y * frame.stride: y * frame.stride + row] for y in range(frame.height)), _PIX_FMT[frame.mode]


def _die_with_parent() -> None:  # in the child, before exec: the kernel ends it when its parent thread ends
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _start_ffmpeg(path: Path, width: int, height: int, pix_fmt: str, options: VideoOptions) -> subprocess.Popen[bytes]:
    command = [ffmpeg_program(), "-hide_banner", "-loglevel", "error", "-y",
               "-f", "rawvideo", "-pix_fmt", pix_fmt, "-video_size", f"{width}x{height}",
               "-framerate", str(options.fps), "-i", "pipe:0", "-an",
               "-c:v", "libx264", "-preset", "ultrafast", "-crf", "26", "-pix_fmt", "yuv420p",
               # a fragment a second, written out at once: a video cut short still plays up to its last second
               "-g", str(options.fps), "-movflags", "+frag_keyframe+empty_moov+default_base_moof",
               "-flush_packets", "1",
               "-fs", str(int(options.max_mb * 1024 * 1024))]
    if width % 2 or height % 2:  # yuv420p needs even sides: one black column or row is added
        command += ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]
    log = open(path.parent / LOG_NAME, "ab")  # noqa: SIM115 (handed to the child, closed below)
    try:
        return subprocess.Popen([*command, str(path)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=log, preexec_fn=_die_with_parent)
    except OSError as exc:
        raise UsageError(f"could not start ffmpeg: {exc.strerror or exc}", code="usage.unsupported") from exc
    finally:
        log.close()


def _finish_ffmpeg(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        assert proc.stdin is not None
        proc.stdin.close()  # end of input: ffmpeg writes the last fragment and exits
    try:
        proc.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def capture(provider: Provider, handle: RemoteHandle, recorder: Recorder, session_id: str, options: VideoOptions,
            stop: threading.Event, still_on: Any = None) -> None:
    """Capture ``fps`` frames a second into the recording's video until ``stop`` is set, the bounds are reached,
    ``still_on()`` says False, or the screen cannot be captured; the ``video`` row, then the ``video_end`` row,
    go into the recording. ffmpeg never outlives this call."""
    path = recorder.directory / VIDEO_NAME
    proc: subprocess.Popen[bytes] | None = None
    frames, reason, started, final = 0, "stopped", 0.0, False
    next_poll = time.monotonic() + STATUS_POLL_SECONDS
    try:
        while True:
            try:
                frame = provider.raw_frame(handle)
            except Exception as exc:  # the desktop is gone (or going): the video ends with it
                reason = f"capture failed: {getattr(exc, 'code', type(exc).__name__)}"
                break
            now = time.monotonic()
            data, pix_fmt = _packed(frame)
            if proc is None:
                proc = _start_ffmpeg(path, frame.width, frame.height, pix_fmt, options)
                started, size = now, (frame.width, frame.height)
                recorder.append_row({"type": "video", "session": session_id, "path": VIDEO_NAME,
                                     "fps": options.fps, "width": frame.width, "height": frame.height,
                                     "monotonic": started, "wall": time.time(),
                                     "max_seconds": options.max_seconds, "max_mb": options.max_mb})
            elif (frame.width, frame.height) != size:
                reason = "the screen size changed"
                break
            limit = int(options.max_seconds * options.fps)
            due = min(limit, max(int((now - started) * options.fps) + 1, frames + final))
            stdin: IO[bytes] | None = proc.stdin
            assert stdin is not None
            try:
                while frames < due:  # a late frame is repeated: frame k shows the screen at started + k / fps
                    stdin.write(data)
                    frames += 1
            except (BrokenPipeError, ValueError):
                reason = "ffmpeg stopped (max_mb reached, or see video.log)"
                break
            if frames >= limit:
                reason = "max_seconds reached"
                break
            if still_on is not None and now >= next_poll:
                next_poll = now + STATUS_POLL_SECONDS
                if not still_on():
                    reason = "the session ended"
                    break
            if final:
                break
            if stop.wait(max(0.0, started + frames / options.fps - time.monotonic())):
                final = True  # one more frame: the video ends with the screen as it was at the stop
    finally:
        if proc is not None:
            _finish_ffmpeg(proc)
            with contextlib.suppress(Exception):
                recorder.append_row({"type": "video_end", "session": session_id, "path": VIDEO_NAME,
                                     "frames": frames, "seconds": round(frames / options.fps, 3),
                                     "bytes": path.stat().st_size if path.exists() else 0, "reason": reason,
                                     "ffmpeg_exit": proc.returncode, "wall": time.time()})


# -- who runs it ---------------------------------------------------------------------------------------------
class VideoThread:
    """The video of a session owned by this process: a thread with a provider connection of its own."""

    def __init__(self, desk: Desktop, recorder: Recorder, options: VideoOptions) -> None:
        from deskctl.providers import get_provider

        self._stop = threading.Event()
        provider = get_provider(desk.provider_name, dict(desk._provider_options))
        self._provider = provider
        self._thread = threading.Thread(
            target=capture, args=(provider, desk._require_handle(), recorder, desk.id, options, self._stop),
            name="deskctl-video", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(Exception):
            self._provider.close()


def start_video_process(desk: Desktop, recorder: Recorder) -> dict[str, Any]:
    """Start the video process of a detached session; what names it (pid, start time) for the ledger."""
    from deskctl.providers._procs import start_ticks

    with open(recorder.directory / LOG_NAME, "ab") as log:
        options = recorder.video or VideoOptions()
        command = [sys.executable, "-m", "deskctl.observe.video_process", desk.id, str(recorder.directory),
                   str(options.fps), str(options.max_seconds), str(options.max_mb)]
        proc = subprocess.Popen(command,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                close_fds=True)
    return {"pid": proc.pid, "ticks": start_ticks(proc.pid)}


def stop_video_process(data: dict[str, Any]) -> None:
    """Stop a detached session's video process (SIGTERM; it finishes the file) and wait for it; killed when it
    does not end within :data:`STOP_SECONDS`."""
    from deskctl.providers._procs import alive, wait_gone

    pid, ticks = data.get("pid"), data.get("ticks")
    if not isinstance(pid, int) or not isinstance(ticks, int) or not alive(pid, ticks):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_gone([(pid, ticks)], time.monotonic() + STOP_SECONDS) and alive(pid, ticks):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
