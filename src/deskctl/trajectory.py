"""Reading a trajectory back (:func:`read_trajectory`): the rows of a recording directory with their
annotations merged and their screenshots checked. The writer is :mod:`deskctl.recording`; the schema is in
docs/recording.md."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl.errors import NotFound, UsageError

if TYPE_CHECKING:
    pass

__all__ = ["JSONL_NAME", "SCHEMA_VERSION", "Trajectory", "read_trajectory"]

SCHEMA_VERSION = 1
JSONL_NAME = "trajectory.jsonl"


def _sha256(data: bytes) -> str:
    import hashlib  # here: every `deskctl do` loads this module (attach looks for a recording); a click hashes nothing

    return hashlib.sha256(data).hexdigest()


# -- reading ---------------------------------------------------------------------------------------------
@dataclass
class Trajectory:
    """A recording read back: ``steps`` in file order, each with its ``annotations`` merged in (later fields
    win), and the line numbers that could not be read (``damaged``: e.g. a write cut short by a crash)."""

    directory: Path
    steps: list[dict[str, Any]] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)
    orphan_annotations: list[dict[str, Any]] = field(default_factory=list)
    #: the session video's rows (``video`` when it started, ``video_end`` when it ended), in file order
    videos: list[dict[str, Any]] = field(default_factory=list)

    def video_offset(self, row: Mapping[str, Any]) -> float | None:
        """Seconds into the video (``video.mp4``) where step ``row`` was sent, or None (no video then)."""
        started = [v for v in self.videos if v.get("type") == "video" and v.get("session") == row.get("session")
                   and isinstance(v.get("monotonic"), int | float)]
        when = row.get("monotonic")
        if not started or not isinstance(when, int | float) or when < started[-1]["monotonic"]:
            return None
        return round(float(when) - float(started[-1]["monotonic"]), 3)

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
        elif row.get("type") in ("video", "video_end"):
            trajectory.videos.append(row)
        else:
            trajectory.damaged.append(number)
    for note in annotations:
        target = by_step.get(note.get("step"))  # type: ignore[arg-type]
        if target is None or not isinstance(note.get("fields"), dict):
            trajectory.orphan_annotations.append(note)
            continue
        target["annotations"].update(note["fields"])
    return trajectory
