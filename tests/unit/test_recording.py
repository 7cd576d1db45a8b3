"""Trajectory recording through the library, on real Xvfb desktops: rows, PNG hashes, before/after, annotations,
errors, several writer processes, and write failures that must not cost the desktop its cleanup."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import deskctl
from _procs import alive
from deskctl.credentials import register_secret
from deskctl.errors import GeometryOutOfBounds, InfrastructureError, UsageError
from deskctl.ledger import open_ledger
from deskctl.recording import JSONL_NAME, read_trajectory

needs_xterm = pytest.mark.skipif(shutil.which("xterm") is None, reason="xterm is not installed")


def rows(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (directory / JSONL_NAME).read_text(encoding="utf-8").splitlines()]


def check_image(directory: Path, image: dict[str, Any], size: tuple[int, int]) -> bytes:
    from PIL import Image

    data = (directory / image["path"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == image["sha256"] and len(data) == image["bytes"]
    with Image.open(directory / image["path"]) as img:
        assert img.size == size == (image["width"], image["height"])
    return data


def start_xterm(desk: deskctl.Desktop, out: Path) -> int:
    """An xterm at the top left that writes the first line typed into it to ``out``; returns once it is mapped."""
    # larger than the screen: the pointer is inside it wherever it is, and no window manager is needed for
    # focus (it follows the pointer); typing and the exit after enter each change the screen
    started = desk.exec("LANG=C.UTF-8 xterm -u8 -geometry 300x100+0+0 -e sh -c "
                        f"'IFS= read -r line; printf %s \"$line\" > {out}' >/dev/null 2>&1 & echo $!")
    pid = int(started.stdout)
    desk.provider._wait_on_display(  # type: ignore[attr-defined]
        desk.handle, "xterm", pid, time.monotonic() + 30,
        lambda d, r: any(c.get_attributes().map_state == 2 for c in r.query_tree().children), "the xterm window")
    return pid


def wait_for_file(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.02)
    return path.read_text(encoding="utf-8")


@needs_xterm
def test_every_action_is_a_row_with_hashed_before_and_after_shots(tmp_path: Path) -> None:
    record = tmp_path / "run"  # made by open_desktop
    typed = tmp_path / "typed.txt"
    with deskctl.open_desktop("xvfb", geometry="640x480", record=record, record_settle=20) as desk:
        start_xterm(desk, typed)
        desk.type("héllo")
        assert desk.annotate(reward=0.5, tokens={"in": 812, "out": 9}) == 1
        desk.key("enter")  # the xterm exits: its window goes
        assert desk.annotate(1, reward=0.0) == 1
        assert desk.recording is not None and desk.recording.last_step == 2
        desk.recording.settle = 0.0  # a click on the bare root window changes nothing: do not wait for it
        desk.click(100, 100)
        assert desk.recording.last_step == 3
        sid = desk.id
    assert wait_for_file(typed) == "héllo"

    written = rows(record)
    steps = [r for r in written if r["type"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["action"] for r in steps] == [
        {"kind": "type", "text": "héllo"},
        {"kind": "key", "keys": ["enter"]},
        {"kind": "click", "x": 100, "y": 100, "button": "left", "count": 1},
    ]
    for row in steps:
        assert row["session"] == sid and row["provider"] == "xvfb" and row["geometry"] == "640x480"
        assert row["image"] is None and row["error"] is None and row["v"] == 1 and row["pid"] == os.getpid()
        assert row["before"]["path"] == f"{row['step']:06d}-before.png"
        assert row["after"]["path"] == f"{row['step']:06d}-after.png"
        check_image(record, row["before"], (640, 480))
        check_image(record, row["after"], (640, 480))
        assert row["before"]["monotonic"] <= row["monotonic"] <= row["after"]["monotonic"]
        assert row["latency_ms"] >= 0 and row["step_ms"] >= row["latency_ms"]
    # the xterm draws the typed text, then its window goes: each changed the screen; the click did not
    assert [r["before"]["sha256"] != r["after"]["sha256"] for r in steps] == [True, True, False]
    assert steps[0]["wall"] <= steps[1]["wall"] <= steps[2]["wall"]

    notes = [r for r in written if r["type"] == "annotation"]
    assert [(n["step"], n["fields"]) for n in notes] == [(1, {"reward": 0.5, "tokens": {"in": 812, "out": 9}}),
                                                        (1, {"reward": 0.0})]
    recorded = read_trajectory(record)  # later fields win
    assert [s["annotations"] for s in recorded.steps] == [{"reward": 0.0, "tokens": {"in": 812, "out": 9}}, {}, {}]
    summary = recorded.summary()
    assert summary["images"] == {"ok": 6, "missing": 0, "mismatch": 0} and summary["screen_changed"] == 2
    with open_ledger() as book:
        events = [e for e in book.events(sid) if e.kind == "recording"]
    assert [e.data for e in events] == [{"dir": str(record), "settle": 20.0}]


def test_a_failed_action_is_recorded_with_its_code_and_still_raised(tmp_path: Path) -> None:
    register_secret("sk-live-recording-7f3a")
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        with pytest.raises(GeometryOutOfBounds):
            desk.click(320, 10)
        desk.type("token sk-live-recording-7f3a")
        desk.move(5, 5)
    failed, typed, moved = rows(tmp_path)
    assert failed["error"] == {"code": "geometry.out_of_bounds",
                               "message": "point (320, 10) is outside the 320x240 screen"}
    assert failed["action"] == {"kind": "click", "x": 320, "y": 10, "button": "left", "count": 1}
    assert failed["before"] is not None and failed["after"] is not None
    assert typed["action"] == {"kind": "type", "text": "token ***"}
    assert "sk-live-recording-7f3a" not in (tmp_path / JSONL_NAME).read_text(encoding="utf-8")
    assert (moved["step"], moved["error"]) == (3, None)
    with open_ledger() as book:
        record = book.get(desk.id)
    # the recorder's before/after shots are deskctl's own, not the caller's screenshots
    assert record is not None and record.action_counts == {"type": 1, "move": 1}


def test_a_session_that_is_not_recorded_writes_nothing_and_cannot_be_annotated(tmp_path: Path) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        desk.click(1, 1)
        assert desk.recording is None
        with pytest.raises(UsageError) as info:
            desk.annotate(1, reward=1)
    assert info.value.code == "usage.not_recording"


def test_bad_annotations_are_usage_errors(tmp_path: Path) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        with pytest.raises(UsageError) as nothing_yet:
            desk.annotate(reward=1)
        desk.move(1, 1)
        with pytest.raises(UsageError) as future:
            desk.annotate(2, reward=1)
        with pytest.raises(UsageError) as zero:
            desk.annotate(0, reward=1)
        with pytest.raises(UsageError) as no_fields:
            desk.annotate(1)
        with pytest.raises(UsageError) as not_json:
            desk.annotate(1, model=object())
    assert [e.value.code for e in (nothing_yet, future, zero, no_fields, not_json)] == [
        "usage.bad_step", "usage.bad_step", "usage.bad_step", "usage.bad_annotation", "usage.bad_annotation"]
    assert [r["type"] for r in rows(tmp_path)] == ["step"]


def test_a_record_dir_that_cannot_be_written_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(UsageError) as info:
        deskctl.open_desktop("xvfb", geometry="320x240", record=blocker / "run")
    assert info.value.code == "usage.bad_record_dir" and info.value.exit_code == 2
    with open_ledger() as book:
        assert book.sessions() == []


def test_a_recording_that_cannot_be_written_raises_and_the_desktop_is_still_destroyed(tmp_path: Path) -> None:
    record = tmp_path / "run"
    with pytest.raises(InfrastructureError) as info, \
            deskctl.open_desktop("xvfb", geometry="320x240", record=record) as desk:
        desk.move(1, 1)
        handle = desk.handle
        assert handle is not None
        shutil.rmtree(record)
        record.write_text("the recording directory is gone")  # as root, only a non-directory stops writes
        desk.move(2, 2)
    assert info.value.code == "recording.write_failed" and info.value.exit_code == 20
    assert desk.state.value == "failed"
    pids = [int(p["pid"]) for p in handle.data["procs"]]
    assert pids and not any(alive(pid) for pid in pids)
    with open_ledger() as book:
        ended = book.get(desk.id)
    assert ended is not None and ended.status == "failed" and ended.reason == "recording.write_failed"


def test_an_after_shot_that_cannot_be_saved_fails_at_the_flush_and_its_row_is_never_written(tmp_path: Path) -> None:
    (tmp_path / "000001-after.png").mkdir()  # the after shot's file cannot be written
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        desk.move(1, 1)  # captured; the worker writes its PNGs and row off the hot path
        recorder = desk.recording
        assert recorder is not None
        with pytest.raises(InfrastructureError) as info:
            recorder.flush()
        assert info.value.code == "recording.write_failed" and "000001-after.png" in info.value.message
        recorder.flush()  # raised once
        desk.move(2, 2)  # the next step gets the next number; the lost one is never reused
    (only,) = rows(tmp_path)  # the row of step 1 never names a PNG that was not written: it is not there
    assert only["step"] == 2 and (tmp_path / "000001-before.png").is_file()
    check_image(tmp_path, only["before"], (320, 240))
    check_image(tmp_path, only["after"], (320, 240))


def test_a_step_the_worker_could_not_write_fails_the_next_step_before_its_action(tmp_path: Path) -> None:
    (tmp_path / "000001-before.png").mkdir()
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        desk.move(1, 1)
        recorder = desk.recording
        assert recorder is not None
        recorder._wait_idle()  # the worker met the error
        with pytest.raises(InfrastructureError) as info:
            desk.move(7, 7)
        assert info.value.code == "recording.write_failed" and "000001-before.png" in info.value.message
        assert desk.cursor_position() == (1, 1)  # the failing step did not act
        desk.move(3, 3)
    assert [r["step"] for r in rows(tmp_path)] == [2]
    assert not (tmp_path / "000001-after.png").exists()  # a step's row and PNGs are written in order


def test_close_writes_every_captured_step_and_a_new_process_continues_the_numbers(tmp_path: Path) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        for i in range(12):  # more than the queue holds: later steps wait for room
            desk.move(i, i)
    written = rows(tmp_path)
    assert [r["step"] for r in written] == list(range(1, 13))
    assert [r["action"]["x"] for r in written] == list(range(12))
    for row in written:
        check_image(tmp_path, row["before"], (320, 240))
        check_image(tmp_path, row["after"], (320, 240))


def test_processes_acting_on_one_detached_session_get_unique_increasing_steps(tmp_path: Path) -> None:
    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True, record=tmp_path)
    sid = desk.id
    desk.release()
    script = ("import sys, deskctl\n"
              "desk = deskctl.attach(sys.argv[1])\n"
              "for i in range(6):\n"
              "    desk.move(int(sys.argv[2]), i)\n"
              "desk.release()\n")
    try:
        workers = [subprocess.Popen([sys.executable, "-c", script, sid, str(10 + n)], env=os.environ.copy())
                   for n in range(3)]
        assert [w.wait(timeout=120) for w in workers] == [0, 0, 0]
    finally:
        closing = deskctl.attach(sid)
        closing.close()
    written = rows(tmp_path)
    assert [r["step"] for r in written] == list(range(1, 19))
    assert sorted((r["action"]["x"], r["action"]["y"]) for r in written) == sorted(
        (10 + n, i) for n in range(3) for i in range(6))
    assert len({r["pid"] for r in written}) == 3 and {r["session"] for r in written} == {sid}
    for row in written:  # each step's shots are its own, written whole
        check_image(tmp_path, row["before"], (320, 240))
        check_image(tmp_path, row["after"], (320, 240))


def test_a_crash_loses_only_steps_in_flight_and_no_row_names_a_png_not_written(tmp_path: Path) -> None:
    desk = deskctl.open_desktop("xvfb", geometry="320x240", detached=True, record=tmp_path)
    sid = desk.id
    desk.release()
    # a process that dies (os._exit: no finally, no atexit) right after handing steps to the worker
    script = ("import os, sys, deskctl\n"
              "desk = deskctl.attach(sys.argv[1])\n"
              "for i in range(10):\n"
              "    desk.move(i, i)\n"
              "os._exit(0)\n")
    try:
        subprocess.run([sys.executable, "-c", script, sid], env=os.environ.copy(), timeout=120, check=True)
        after_crash = read_trajectory(tmp_path)
        assert after_crash.bad_images() == [] and after_crash.damaged == []
        steps = [r["step"] for r in after_crash.steps]
        assert steps == list(range(1, len(steps) + 1))  # a prefix: what was lost is the steps in flight
        for row in after_crash.steps:
            check_image(tmp_path, row["before"], (320, 240))
            check_image(tmp_path, row["after"], (320, 240))
        again = deskctl.attach(sid)  # the lock was released by the crash: another process records on
        again.move(50, 50)
        again.release()
        assert [r["step"] for r in rows(tmp_path)][-1] == 11
    finally:
        deskctl.attach(sid).close()
