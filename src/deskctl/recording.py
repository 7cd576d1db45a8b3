"""Trajectory recording: one JSONL row per action, with the screen before and after it.

A recording directory holds::

    trajectory.jsonl        one JSON object a line: a "step" row per action, an "annotation" row per annotate()
    000001-before.png ...   the screenshots, named by step; each row carries their sha256
    .trajectory.lock        the lock every writer takes (and the last step number handed out)

What a caller may rely on (the schema is in docs/recording.md):

- step numbers are unique and increasing within a directory, in file order, even when several processes
  act on one detached session (``deskctl up --record DIR`` then ``deskctl do ...``): a writer holds an
  exclusive ``flock`` on the lock file for the whole step (before shot, action, after shot, row);
- a failed action is recorded with its error code and still raised;
- a recording that cannot be written raises ``recording.write_failed`` (exit 20); the desktop's cleanup is
  not affected (it is the session's ``finally``, not the recorder's);
- typed text and error messages pass through :func:`deskctl.credentials.redact`, like every other output.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl import actions as act
from deskctl.errors import DeskctlError, InfrastructureError, NotFound, UsageError

if TYPE_CHECKING:
    from deskctl.ledger import Event
    from deskctl.providers.base import Screenshot
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

SCHEMA_VERSION = 1
JSONL_NAME = "trajectory.jsonl"
LOCK_NAME = ".trajectory.lock"
#: the ledger event that ties a session to its recording directory (read again by attach())
LEDGER_EVENT = "recording"
#: how often the after shot is retaken while it still equals the before shot, within ``settle`` seconds
SETTLE_POLL_SECONDS = 0.02


def _sha256(data: bytes) -> str:
    import hashlib  # here: every `deskctl do` loads this module (attach looks for a recording); a click hashes nothing

    return hashlib.sha256(data).hexdigest()


def action_fields(action: act.Action) -> dict[str, Any]:
    """The action as a JSON object in pinned coordinates: ``{"kind": "click", "x": .., "y": .., ...}``."""
    from deskctl._redact import redact

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

    def __init__(self, directory: Path, settle: float = 0.0) -> None:
        self.directory = directory
        self.settle = settle
        #: the last step this recorder wrote (None before its first)
        self.last_step: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def create(cls, directory: str | os.PathLike[str], settle: float = 0.0) -> Recorder:
        """Make ``directory`` (and parents) and its lock file; a directory that cannot be made or written is
        ``usage.bad_record_dir`` (exit 2), raised before any desktop exists."""
        from deskctl.limits import check_number

        settle = check_number("record_settle", settle)
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
        return cls(path, settle)

    @property
    def jsonl(self) -> Path:
        return self.directory / JSONL_NAME

    def ledger_data(self) -> dict[str, Any]:
        """What the session's ``recording`` ledger event stores, for later ``deskctl do`` processes."""
        return {"dir": str(self.directory), "settle": self.settle}

    def started(self, desk: Desktop) -> None:
        desk.ledger.record_event(desk.id, LEDGER_EVENT, self.ledger_data())

    # -- writing -------------------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the directory's lock (threads of this process, then other processes); yields the lock fd."""
        lock_path = self.directory / LOCK_NAME
        with self._lock:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise _write_failed("lock", lock_path, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
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

    def _save(self, step: int, which: str, shot: Screenshot, at: float) -> dict[str, Any]:
        name = f"{step:06d}-{which}.png"
        path = self.directory / name
        try:
            path.write_bytes(shot.png)
        except OSError as exc:
            raise _write_failed("screenshot", path, exc) from exc
        return {"path": name, "sha256": _sha256(shot.png), "width": shot.width,
                "height": shot.height, "bytes": len(shot.png), "monotonic": at}

    def step(self, desk: Desktop, action: act.Action, perform: Callable[[], None]) -> None:
        """Record one action: the before shot, ``perform()``, the after shot, the row. A deskctl error of the
        shots or the action is written in the row's ``error`` and raised again."""
        from deskctl._redact import redact

        with self._locked() as fd:
            step = self._next_step(fd)
            error: DeskctlError | None = None
            before = after = None
            latency_ms: float | None = None
            started_mono = time.monotonic()
            sent_wall, sent_mono = time.time(), started_mono  # until the action is sent: the step's start
            try:
                shot = desk._screenshot(count=False)
                before = self._save(step, "before", shot, time.monotonic())
                sent_wall, sent_mono = time.time(), time.monotonic()
                try:
                    perform()
                finally:
                    latency_ms = (time.monotonic() - sent_mono) * 1000.0
            except InfrastructureError as exc:
                if exc.code == "recording.write_failed":
                    raise
                error = exc
            except DeskctlError as exc:
                error = exc
            if before is not None:
                try:
                    # a failed action is not waited for: it most likely changed nothing
                    after = self._after(desk, step, before, settle=self.settle if error is None else 0.0)
                except InfrastructureError as exc:
                    if exc.code == "recording.write_failed":
                        raise
                    error = error or exc
                except DeskctlError as exc:
                    error = error or exc
            handle = desk.handle
            data = handle.data if handle is not None else {}
            image = data.get("image") or data.get("snapshot")
            width, height = desk._size or (None, None)
            self._append({
                "type": "step", "v": SCHEMA_VERSION, "session": desk.id, "step": step,
                "wall": sent_wall, "monotonic": sent_mono, "action": action_fields(action),
                "before": before, "after": after,
                "latency_ms": None if latency_ms is None else round(latency_ms, 3),
                "step_ms": round((time.monotonic() - started_mono) * 1000.0, 3),
                "error": None if error is None else {"code": error.code, "message": redact(error.message)},
                "provider": desk.provider_name, "geometry": f"{width}x{height}" if width else None,
                "image": None if image is None else str(image), "pid": os.getpid(),
            })
            self.last_step = step
        if error is not None:
            raise error

    def _after(self, desk: Desktop, step: int, before: dict[str, Any], settle: float) -> dict[str, Any]:
        deadline = time.monotonic() + settle
        shot = desk._screenshot(count=False)
        # an application redraws after it received the input: within `settle`, wait for the screen to change
        while _sha256(shot.png) == before["sha256"] and time.monotonic() < deadline:
            time.sleep(min(SETTLE_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            shot = desk._screenshot(count=False)
        return self._save(step, "after", shot, time.monotonic())

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


def recorder_from_events(events: list[Event]) -> Recorder | None:
    """The recorder of a session whose ledger events name a recording directory (the latest one), else None."""
    for event in reversed(events):
        if event.kind == LEDGER_EVENT and isinstance(event.data.get("dir"), str):
            return Recorder(Path(event.data["dir"]), float(event.data.get("settle") or 0.0))
    return None


# -- reading ---------------------------------------------------------------------------------------------
@dataclass
class Trajectory:
    """A recording read back: ``steps`` in file order, each with its ``annotations`` merged in (later fields
    win), and the line numbers that could not be read (``damaged``: e.g. a write cut short by a crash)."""

    directory: Path
    steps: list[dict[str, Any]] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)
    orphan_annotations: list[dict[str, Any]] = field(default_factory=list)

    def image_status(self, image: Mapping[str, Any] | None) -> str:
        """``ok``, ``missing`` or ``mismatch`` (the file's sha256 is not the row's); ``none`` when no shot."""
        if not image:
            return "none"
        path = self.directory / str(image.get("path", ""))
        try:
            data = path.read_bytes()
        except OSError:
            return "missing"
        return "ok" if _sha256(data) == image.get("sha256") else "mismatch"

    def bad_images(self) -> list[dict[str, Any]]:
        """Every screenshot of a step that is missing or whose sha256 is not its row's: ``{"step", "image"
        ("before"/"after"), "path", "status" ("missing"/"mismatch")}``, in file order."""
        bad: list[dict[str, Any]] = []
        for row in self.steps:
            for which in ("before", "after"):
                image = row.get(which)
                status = self.image_status(image)
                if status in ("missing", "mismatch"):
                    bad.append({"step": row.get("step"), "image": which, "path": str((image or {}).get("path")),
                                "status": status})
        return bad

    def summary(self) -> dict[str, Any]:
        """Counts and times of the whole trajectory (``deskctl trajectory show``)."""
        import statistics

        kinds: dict[str, int] = {}
        errors: dict[str, int] = {}
        images = {"ok": 0, "missing": 0, "mismatch": 0}
        latencies: list[float] = []
        changed = 0
        sessions: list[str] = []
        for row in self.steps:
            kind = str(row.get("action", {}).get("kind"))
            kinds[kind] = kinds.get(kind, 0) + 1
            if row.get("error"):
                code = str(row["error"].get("code"))
                errors[code] = errors.get(code, 0) + 1
            if row.get("session") not in sessions:
                sessions.append(str(row.get("session")))
            if isinstance(row.get("latency_ms"), int | float):
                latencies.append(float(row["latency_ms"]))
            for which in ("before", "after"):
                status = self.image_status(row.get(which))
                if status != "none":
                    images[status] += 1
            before, after = row.get("before") or {}, row.get("after") or {}
            if before and after and before.get("sha256") != after.get("sha256"):
                changed += 1
        walls = [float(r["wall"]) for r in self.steps if isinstance(r.get("wall"), int | float)]
        return {
            "dir": str(self.directory),
            "steps": len(self.steps),
            "first_step": self.steps[0]["step"] if self.steps else None,
            "last_step": self.steps[-1]["step"] if self.steps else None,
            "sessions": sessions,
            "providers": sorted({str(r.get("provider")) for r in self.steps}),
            "geometries": sorted({str(r.get("geometry")) for r in self.steps}),
            "kinds": kinds,
            "errors": errors,
            "screen_changed": changed,
            "images": images,
            "annotated_steps": sum(1 for r in self.steps if r.get("annotations")),
            "started_at": min(walls) if walls else None,
            "seconds": round(max(walls) - min(walls), 3) if walls else None,
            "latency_ms_median": round(statistics.median(latencies), 3) if latencies else None,
            "damaged_lines": list(self.damaged),
            "bad_images": self.bad_images(),
        }


def read_trajectory(directory: str | os.PathLike[str]) -> Trajectory:
    """Read ``directory/trajectory.jsonl``; a directory without one is ``usage.not_found`` (exit 2)."""
    path = Path(directory).expanduser()
    jsonl = path / JSONL_NAME
    try:
        data = jsonl.read_bytes()
    except FileNotFoundError as exc:
        raise NotFound(f"no recording in {path} (no {JSONL_NAME})",
                       remedy="record one with open_desktop(record=DIR) or deskctl up --record DIR") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {jsonl}: {exc.strerror or exc}", code="usage.bad_record_dir") from exc
    trajectory = Trajectory(directory=path.absolute())
    by_step: dict[int, dict[str, Any]] = {}
    annotations: list[dict[str, Any]] = []
    # line by line, as bytes: a line that is not UTF-8 (a torn or foreign write) is one damaged line, not the file
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is one
            trajectory.damaged.append(number)
            continue
        if not isinstance(row, dict):
            trajectory.damaged.append(number)
        elif row.get("type") == "step" and isinstance(row.get("step"), int):
            row["annotations"] = {}
            trajectory.steps.append(row)
            by_step[row["step"]] = row
        elif row.get("type") == "annotation":
            annotations.append(row)
        else:
            trajectory.damaged.append(number)
    for note in annotations:
        target = by_step.get(note.get("step"))  # type: ignore[arg-type]
        if target is None or not isinstance(note.get("fields"), dict):
            trajectory.orphan_annotations.append(note)
            continue
        target["annotations"].update(note["fields"])
    return trajectory
