"""Trajectory recording: one JSONL row per action, with the screen before and after it.

A recording directory holds::

    trajectory.jsonl        one JSON object a line: a "step" row per action, an "annotation" row per annotate()
    000001-before.png ...   the screenshots, named by step; each row carries their sha256
    .trajectory.lock        the lock every writer takes (and the last step number handed out)

What a caller may rely on (the schema is in docs/recording.md):

- step numbers are unique and increasing within a directory, in file order, even when several processes
  act on one detached session (``deskctl up --record DIR`` then ``deskctl do ...``): a writer holds an
  exclusive ``flock`` on the lock file from its step's before shot until that step's row is written;
- a step costs the action plus two raw captures: the PNGs are encoded, hashed and written, and the row
  appended, by a background worker (a bounded queue of :data:`QUEUE_STEPS` steps; a full queue makes the next
  step wait). :meth:`Recorder.flush` / :meth:`Recorder.close` wait for it (``Desktop.close`` and ``release`` do).
  A crash loses at most the steps in flight, and a row is appended only after both its PNGs were written, so
  the JSONL never names a PNG that was not written;
- a failed action is recorded with its error code and still raised;
- a recording that cannot be written raises ``recording.write_failed`` (exit 20): at once when the lock cannot
  be taken, else (a PNG or the row, written by the worker) from the next step, ``flush`` or ``close``; the
  desktop's cleanup is not affected (it is the session's ``finally``, not the recorder's);
- typed text and error messages pass through :func:`deskctl._redact.redact`, like every other output.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl import actions as act
from deskctl.episodes.takeover import ACTOR as _ACTOR
from deskctl.errors import DeskctlError, InfrastructureError, UsageError
from deskctl.trajectory import JSONL_NAME, SCHEMA_VERSION, Trajectory, _sha256, read_trajectory

if TYPE_CHECKING:
    from deskctl.ledger import Event
    from deskctl.providers.base import Provider, RawFrame, Screenshot
    from deskctl.recording_video import VideoOptions, VideoThread
    from deskctl.session import Desktop

__all__ = [
    "JSONL_NAME",
    "LEDGER_EVENT",
    "SCHEMA_VERSION",
    "Recorder",
    "Trajectory",
    "action_fields",
    "read_trajectory",
    "recorder_from_events",
]

LOCK_NAME = ".trajectory.lock"
#: the ledger event that ties a session to its recording directory (read again by attach())
LEDGER_EVENT = "recording"
#: how often the after shot is retaken while it still equals the before shot, within ``settle`` seconds
SETTLE_POLL_SECONDS = 0.02
#: steps captured but not yet written that a recorder holds before the next step waits (two raw frames each)
QUEUE_STEPS = 4

#: recorders with a worker, flushed at interpreter exit (a script that never closes its desktop)
_live: weakref.WeakSet[Recorder] = weakref.WeakSet()


@atexit.register
def _flush_all_at_exit() -> None:
    for recorder in list(_live):
        try:
            recorder.close()
        except Exception:  # nothing is left to report to at exit
            pass


def action_fields(action: act.Action | dict[str, Any]) -> dict[str, Any]:
    """The action as a JSON object in pinned coordinates: ``{"kind": "click", "x": .., "y": .., ...}``."""
    from deskctl._redact import redact

    if isinstance(action, dict):  # a step that is no input action (focus, move_window) comes as its fields
        return dict(action)
    fields: dict[str, Any] = {"kind": act.action_kind(action)}
    for key, value in act.action_values(action).items():
        if isinstance(value, tuple):
            value = list(value)
        if key == "text":
            value = redact(value)
        fields[key] = value
    return fields


def _write_failed(what: str, path: Path, exc: OSError) -> InfrastructureError:
    return InfrastructureError(
        f"could not write the recording {what} {path}: {exc.strerror or exc}", code="recording.write_failed",
        remedy="free disk space or fix the recording directory; the desktop itself is unaffected",
    )


class Recorder:
    """Writes the trajectory of one :class:`~deskctl.session.Desktop` into ``directory``.

    Build with :meth:`create` (validates and prepares the directory before anything is paid for) or
    :func:`recorder_from_events` (a detached session reached again by ``attach``).
    """

    def __init__(self, directory: Path, settle: float = 0.0, video: VideoOptions | None = None,
                 video_process: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.settle = settle
        #: the session's video (:mod:`deskctl.recording_video`), None without one
        self.video = video
        self._video_process = video_process  # a detached session's video process: pid and start time
        self._video_thread: VideoThread | None = None
        #: the last step this recorder handed out (None before its first)
        self.last_step: int | None = None
        self._lock = threading.Lock()  # one step (or annotation) of this process at a time
        # the worker's state, under _cond: the flock'ed lock file, held while a step is on the hot path or queued
        self._cond = threading.Condition()
        self._fd: int | None = None
        self._pending = 0
        self._active = False
        self._error: DeskctlError | None = None
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=QUEUE_STEPS)
        self._worker: threading.Thread | None = None

    @classmethod
    def create(cls, directory: str | os.PathLike[str], settle: float = 0.0, *, video: Any = None,
               provider: Provider | None = None) -> Recorder:
        """Make ``directory`` (and parents) and its lock file; a directory that cannot be made or written is
        ``usage.bad_record_dir`` (exit 2), raised before any desktop exists; so is a ``video`` (True or
        :class:`~deskctl.recording_video.VideoOptions`) that ``provider`` cannot make (``usage.unsupported``)."""
        from deskctl.limits import check_number

        settle = check_number("record_settle", settle)
        options = None
        if video is not None and video is not False:
            from deskctl.recording_video import VideoOptions, check_supported

            options = VideoOptions.build(video)
            if provider is not None:
                check_supported(type(provider), provider.name)
        if not str(os.fspath(directory)).strip():  # Path("") is the current directory: never meant
            raise UsageError("an empty recording directory", code="usage.bad_record_dir",
                             remedy="name the directory to record into (it is made when missing)")
        path = Path(directory).expanduser().absolute()
        if path.exists() and not path.is_dir():
            raise UsageError(f"cannot record into {path}: it is not a directory", code="usage.bad_record_dir",
                             remedy="name a directory you can write (it is made when missing)")
        try:
            path.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644))
        except OSError as exc:
            raise UsageError(f"cannot record into {path}: {exc.strerror or exc}", code="usage.bad_record_dir",
                             remedy="name a directory you can write (it is made when missing)") from exc
        return cls(path, settle, options)

    @property
    def jsonl(self) -> Path:
        return self.directory / JSONL_NAME

    def ledger_data(self) -> dict[str, Any]:
        """What the session's ``recording`` ledger event stores, for later ``deskctl do`` processes."""
        data: dict[str, Any] = {"dir": str(self.directory), "settle": self.settle}
        if self.video is not None:
            from deskctl.recording_video import VIDEO_NAME

            data["video"] = {**self.video.to_data(), "path": str(self.directory / VIDEO_NAME),
                             "process": self._video_process}
        return data

    def started(self, desk: Desktop) -> None:
        """The desktop is ready: start its video (if any), then name the recording in the ledger."""
        if self.video is not None:
            from deskctl.recording_video import VideoThread, start_video_process

            if desk.detached:  # this process goes away: a video process of its own, stopped at teardown
                self._video_process = start_video_process(desk, self)
            else:
                self._video_thread = VideoThread(desk, self, self.video)
        desk.ledger.record_event(desk.id, LEDGER_EVENT, self.ledger_data())

    def stop_video(self) -> None:
        """End the session's video (the file finished, ffmpeg gone); at the session's teardown. Idempotent."""
        thread, self._video_thread = self._video_thread, None
        if thread is not None:
            thread.stop()
        process, self._video_process = self._video_process, None
        if process is not None:
            from deskctl.recording_video import stop_video_process

            stop_video_process(process)

    def append_row(self, row: Mapping[str, Any]) -> None:
        """Append a row that is no step (the video's) under the directory's lock, after this process's steps."""
        with self._locked():
            self._append({"v": SCHEMA_VERSION, **row})

    # -- writing -------------------------------------------------------------------------------------
    def _open_lock(self) -> int:
        """The lock file, opened and ``flock``-ed (waiting for another process's steps to be written)."""
        lock_path = self.directory / LOCK_NAME
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _write_failed("lock", lock_path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the directory's lock with nothing of this process in flight (after :meth:`flush`); yields its fd."""
        with self._lock:
            self._wait_idle()
            fd = self._open_lock()
            try:
                yield fd
            finally:
                os.close(fd)  # closing the only descriptor of this open file releases the flock

    @staticmethod
    def _read_counter(fd: int) -> int:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 64).strip()
        return int(raw) if raw.isdigit() else 0

    def _next_step(self, fd: int) -> int:
        step = self._read_counter(fd) + 1
        data = str(step).encode()
        # handed out before the row is written: a step whose row never made it is skipped, never reused
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, data)
            os.ftruncate(fd, len(data))
        except OSError as exc:
            raise _write_failed("lock", self.directory / LOCK_NAME, exc) from exc
        return step

    def _append(self, row: Mapping[str, Any]) -> None:
        line = (json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
        try:
            with open(self.jsonl, "a+b") as fh:
                # a row cut short by a crash has no newline: this row starts on a line of its own, else the
                # reader would see the two as one unreadable line and lose this one too
                if fh.seek(0, os.SEEK_END) > 0:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        line = b"\n" + line
                fh.write(line)
        except OSError as exc:
            raise _write_failed("file", self.jsonl, exc) from exc

    def _save(self, step: int, which: str, shot: _Shot) -> dict[str, Any]:
        name = f"{step:06d}-{which}.png"
        path = self.directory / name
        png = shot.png()
        try:
            path.write_bytes(png)
        except OSError as exc:
            raise _write_failed("screenshot", path, exc) from exc
        return {"path": name, "sha256": _sha256(png), "width": shot.width,
                "height": shot.height, "bytes": len(png), "monotonic": shot.at}

    def _take_lock(self) -> None:
        """Mark a step on the hot path and hold the directory's flock for it (kept from the last step while
        that one is still queued: another process's step waits until ours are written, so rows stay in order)."""
        with self._cond:
            self._active = True
            if self._fd is not None:
                return
        try:
            fd = self._open_lock()
        except BaseException:
            self._end_hot_path(queued=False)
            raise
        with self._cond:
            self._fd = fd

    def _end_hot_path(self, *, queued: bool) -> None:
        with self._cond:
            self._active = False
            if queued:
                self._pending += 1
            self._release_if_idle()

    def _release_if_idle(self) -> None:  # under _cond
        if self._pending == 0 and not self._active and self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._cond.notify_all()

    def _raise_error(self) -> None:
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="deskctl-recorder", daemon=True)
            self._worker.start()
            _live.add(self)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                job.write(self)
            except DeskctlError as exc:
                with self._cond:
                    self._error = self._error or exc
            except Exception as exc:  # an encoder failure: the step is lost, the recording says so
                with self._cond:
                    self._error = self._error or InfrastructureError(
                        f"could not write step {job.step} of the recording {self.directory}: {exc}",
                        code="recording.write_failed")
            finally:
                with self._cond:
                    self._pending -= 1
                    self._release_if_idle()
                    self._cond.notify_all()

    def _wait_idle(self) -> None:
        with self._cond:
            while self._pending and self._worker is not None and self._worker.is_alive():
                self._cond.wait(0.5)

    def flush(self) -> None:
        """Wait until every step handed to the worker is written; raise the first error writing one met
        (``recording.write_failed``), once."""
        self._wait_idle()
        self._raise_error()

    def close(self) -> None:
        """:meth:`flush`, then stop the worker (the next step starts a new one). Idempotent."""
        try:
            self.flush()
        finally:
            worker = self._worker
            if worker is not None and worker.is_alive():
                self._queue.put(None)
                worker.join()
            self._worker = None
            _live.discard(self)

    def _capture(self, desk: Desktop) -> _Shot:
        """The screen now: raw pixels where the provider captures them fast, else its PNG."""
        from deskctl.providers.base import Provider

        if type(desk.provider).raw_frame is Provider.raw_frame:  # its raw frame is a decoded PNG: keep the PNG
            return _Shot(time.monotonic(), shot=desk._screenshot(count=False))
        return _Shot(time.monotonic(), frame=desk.raw_frame())

    def step(self, desk: Desktop, action: act.Action | dict[str, Any], perform: Callable[[], None]) -> None:
        """Record one action: the before capture, ``perform()``, the after capture; the PNGs and the row are
        written by the worker. A deskctl error of the captures or the action is written in the row's ``error``
        and raised again."""
        from deskctl._redact import redact

        with self._lock:
            self._raise_error()  # a step the worker could not write fails the next one
            self._take_lock()
            queued = False
            try:
                fd = self._fd
                assert fd is not None
                step = self._next_step(fd)
                error: DeskctlError | None = None
                before = after = None
                latency_ms: float | None = None
                started_mono = time.monotonic()
                sent_wall, sent_mono = time.time(), started_mono  # until the action is sent: the step's start
                try:
                    before = self._capture(desk)
                    sent_wall, sent_mono = time.time(), time.monotonic()
                    try:
                        perform()
                    finally:
                        latency_ms = (time.monotonic() - sent_mono) * 1000.0
                except DeskctlError as exc:
                    error = exc
                if before is not None:
                    try:
                        # a failed action is not waited for: it most likely changed nothing
                        after = self._after(desk, before, settle=self.settle if error is None else 0.0)
                    except DeskctlError as exc:
                        error = error or exc
                handle = desk.handle
                data = handle.data if handle is not None else {}
                image = data.get("image") or data.get("snapshot")
                width, height = desk._size or (None, None)
                row = {
                    "type": "step", "v": SCHEMA_VERSION, "session": desk.id, "step": step,
                    "wall": sent_wall, "monotonic": sent_mono, "action": action_fields(action),
                    "before": None, "after": None,
                    "latency_ms": None if latency_ms is None else round(latency_ms, 3),
                    "step_ms": round((time.monotonic() - started_mono) * 1000.0, 3),
                    "error": None if error is None else {"code": error.code, "message": redact(error.message)},
                    "provider": desk.provider_name, "geometry": f"{width}x{height}" if width else None,
                    "image": None if image is None else str(image), "pid": os.getpid(),
                    # agent, or human: a person's input passed on by `deskctl view --control`
                    "actor": _ACTOR.get(),
                }
                self._ensure_worker()
                self._end_hot_path(queued=True)
                queued = True
                self._queue.put(_Job(step, row, before, after))  # waits while QUEUE_STEPS steps are queued
                self.last_step = step
            finally:
                if not queued:
                    self._end_hot_path(queued=False)
        if error is not None:
            raise error

    def _after(self, desk: Desktop, before: _Shot, settle: float) -> _Shot:
        deadline = time.monotonic() + settle
        shot = self._capture(desk)
        # an application redraws after it received the input: within `settle`, wait for the screen to change
        while shot.same_pixels(before) and time.monotonic() < deadline:
            time.sleep(min(SETTLE_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            shot = self._capture(desk)
        return shot

    def annotate(self, session_id: str, step: int | None, fields: Mapping[str, Any]) -> int:
        """Append harness fields (model tokens, reward, ...) to ``step`` (default: this recorder's last)."""
        if step is None:
            step = self.last_step
            if step is None:
                raise UsageError("nothing recorded yet to annotate", code="usage.bad_step",
                                 remedy="annotate after an action, or name the step")
        if not fields:
            raise UsageError("annotate needs at least one field", code="usage.bad_annotation")
        try:
            encoded = json.loads(json.dumps(dict(fields)))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"annotation fields must be JSON values: {exc}", code="usage.bad_annotation") from exc
        with self._locked() as fd:
            last = self._read_counter(fd)
            if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= last:
                raise UsageError(f"no step {step!r} in {self.directory} (steps 1..{last})", code="usage.bad_step")
            self._append({"type": "annotation", "v": SCHEMA_VERSION, "session": session_id, "step": step,
                          "wall": time.time(), "fields": encoded})
        return step


class _Shot:
    """One capture of a step: raw pixels (encoded by the worker) or a provider's PNG, and when it was taken."""

    __slots__ = ("_png", "at", "frame", "height", "width")

    def __init__(self, at: float, *, frame: RawFrame | None = None, shot: Screenshot | None = None) -> None:
        self.at = at
        self.frame = frame
        self._png = shot.png if shot is not None else None
        source = frame if frame is not None else shot
        assert source is not None
        self.width, self.height = source.width, source.height

    def same_pixels(self, other: _Shot) -> bool:
        if self.frame is not None and other.frame is not None:
            return self.frame.data == other.frame.data
        return self._png is not None and self._png == other._png

    def png(self) -> bytes:
        if self._png is None:
            assert self.frame is not None
            self._png = frame_png(self.frame)
            self.frame = None  # the pixels are no longer needed
        return self._png


def frame_png(frame: RawFrame) -> bytes:
    """The PNG of a raw frame, as the X11 providers' ``screenshot()`` encodes it (:func:`encode_png`)."""
    from deskctl.providers._png import encode_png

    bpp = {"BGRX": 4, "BGR;16": 2, "L": 1}.get(frame.mode)
    if bpp is not None and frame.stride in (0, frame.width * bpp):
        return encode_png(frame.data, frame.width, frame.height, frame.mode)
    if bpp is not None:  # rows padded (a framebuffer file): packed first
        row = frame.width * bpp
        view = memoryview(frame.data)
        packed = b"".join(view[y * frame.stride: y * frame.stride + row] for y in range(frame.height))
        return encode_png(packed, frame.width, frame.height, frame.mode)
    import io

    out = io.BytesIO()
    frame.image().save(out, format="PNG", compress_level=1)
    return out.getvalue()


@dataclass
class _Job:
    """A captured step for the worker: its PNGs to write, then its row."""

    step: int
    row: dict[str, Any]
    before: _Shot | None
    after: _Shot | None

    def write(self, recorder: Recorder) -> None:
        row = self.row
        if self.before is not None:
            row["before"] = recorder._save(self.step, "before", self.before)
        if self.after is not None:
            row["after"] = recorder._save(self.step, "after", self.after)
        recorder._append(row)


def recorder_from_events(events: list[Event]) -> Recorder | None:
    """The recorder of a session whose ledger events name a recording directory (the latest one), else None."""
    for event in reversed(events):
        if event.kind == LEDGER_EVENT and isinstance(event.data.get("dir"), str):
            video = event.data.get("video")
            options = process = None
            if isinstance(video, dict):
                from deskctl.recording_video import VideoOptions

                options, process = VideoOptions.from_data(video), video.get("process")
            return Recorder(Path(event.data["dir"]), float(event.data.get("settle") or 0.0), options,
                            process if isinstance(process, dict) else None)
    return None
