"""A recorded session's video (``--record DIR --video``): the file ffprobe reads has the pinned geometry and the
frame count the bounds allow, a change on the screen shows in a decoded frame, and no ffmpeg outlives the
process that owns it (down, SIGTERM, SIGKILL). Needs ffmpeg (scripts/setup.d/60-observe.sh)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl, deskctl_process
from _procs import programs_naming

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
                                  reason="ffmpeg is not installed (scripts/setup.d/60-observe.sh)")
pytestmark = [needs_ffmpeg]

RED_CHECK = (160, 120)  # the middle of a 320x240 screen


def _rows(directory: Path) -> list[dict[str, Any]]:
    path = directory / "trajectory.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _await_row(directory: Path, kind: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        rows = [r for r in _rows(directory) if r.get("type") == kind]
        if rows:
            return rows[-1]
        assert time.monotonic() < deadline, f"no {kind} row in {directory}: {_rows(directory)}"
        time.sleep(0.1)


def _probe(path: Path) -> dict[str, Any]:
    done = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                           "stream=width,height,nb_read_frames,codec_name", "-of", "json", str(path)],
                          capture_output=True, text=True, check=True, timeout=120)
    stream: dict[str, Any] = json.loads(done.stdout)["streams"][0]
    return stream


def _await_frames(path: Path, timeout: float = 90.0) -> None:
    """Until ffmpeg has written a first fragment of ``path`` (a video that plays)."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                               "stream=nb_read_frames", "-of", "csv=p=0", str(path)],
                              capture_output=True, text=True, check=False, timeout=120)
        if done.returncode == 0 and done.stdout.strip().isdigit() and int(done.stdout) >= 1:
            return
        assert time.monotonic() < deadline, f"{path} never got a frame: {done.stderr}"
        time.sleep(0.2)


def _frames_rgb(path: Path, width: int, height: int) -> list[bytes]:
    done = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                          capture_output=True, check=True, timeout=120)
    size = width * height * 3
    return [done.stdout[i:i + size] for i in range(0, len(done.stdout), size)]


def _pixel(frame: bytes, width: int, x: int, y: int) -> tuple[int, ...]:
    at = (y * width + x) * 3
    return tuple(frame[at:at + 3])


def _reddish(rgb: tuple[int, ...]) -> bool:
    return rgb[0] > 180 and rgb[1] < 80 and rgb[2] < 80


def _ffmpeg_writing(path: Path) -> list[int]:
    """The pids of ffmpeg processes writing ``path`` (by their command line)."""
    return list(programs_naming("ffmpeg", path))


def _await_gone(pids: list[int], timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()
                 and b"zombie" not in Path(f"/proc/{p}/status").read_bytes().lower()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.slow
def test_up_video_has_the_pinned_geometry_shows_the_change_and_down_stops_it(tmp_path: Path) -> None:
    record = tmp_path / "rec"
    up = deskctl("up", "--provider", "xvfb", "--geometry", "320x240", "--record", str(record), "--video",
                 "--video-fps", "5", "--json")
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    try:
        started = _await_row(record, "video")  # the first frame is taken: the screen before the change
        assert (started["width"], started["height"], started["fps"]) == (320, 240, 5)
        launched = deskctl("do", session, "launch", "xterm", "-bg", "red", "-geometry", "80x40+0+0")
        assert launched.returncode == 0, launched.stderr
        assert deskctl("do", session, "wait-for", "xterm").returncode == 0
        assert deskctl("do", session, "wait-until-stable").returncode == 0
        assert deskctl("do", session, "click", "300", "230").returncode == 0  # a recorded step, inside the video
        writers = _ffmpeg_writing(record / "video.mp4")
        assert len(writers) == 1
    finally:
        down = deskctl("down", session)
    assert down.returncode == 0, down.stderr
    # down waited for the video: it is finished, and its ffmpeg is gone
    end = _await_row(record, "video_end", timeout=0)
    assert end["reason"] == "stopped" and end["ffmpeg_exit"] == 0
    assert _await_gone(writers, timeout=0) == []
    stream = _probe(record / "video.mp4")
    assert (stream["codec_name"], stream["width"], stream["height"]) == ("h264", 320, 240)
    assert int(stream["nb_read_frames"]) == end["frames"] >= 2
    frames = _frames_rgb(record / "video.mp4", 320, 240)
    assert len(frames) == end["frames"]
    assert not _reddish(_pixel(frames[0], 320, *RED_CHECK))
    assert _reddish(_pixel(frames[-1], 320, *RED_CHECK))  # the last frame is the screen at the stop
    # the recording reads back whole: the video rows are no damaged lines, a step knows its moment in the video
    shown = deskctl("trajectory", "show", str(record), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["damaged_lines"] == []
    from deskctl.trajectory import read_trajectory

    recorded = read_trajectory(record)
    clicks = [row for row in recorded.steps if row["action"]["kind"] == "click"]
    offset = recorded.video_offset(clicks[-1])
    assert offset is not None and 0 < offset <= end["seconds"]
    page = tmp_path / "page.html"
    assert deskctl("trajectory", "html", str(record), "-o", str(page)).returncode == 0
    html = page.read_text()
    assert 'src="rec/video.mp4"' in html and f'href="rec/video.mp4#t={offset:.3f}"' in html


@pytest.mark.slow
def test_video_max_seconds_gives_exactly_its_frames_and_the_session_goes_on(tmp_path: Path) -> None:
    record = tmp_path / "rec"
    up = deskctl("up", "--provider", "xvfb", "--geometry", "320x240", "--record", str(record), "--video",
                 "--video-fps", "4", "--video-max-seconds", "2", "--json")
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    try:
        end = _await_row(record, "video_end")
        assert end["reason"] == "max_seconds reached"
        assert end["frames"] == 8
        assert int(_probe(record / "video.mp4")["nb_read_frames"]) == 8
        assert _await_gone(_ffmpeg_writing(record / "video.mp4")) == []
        # the desktop is still there and still recorded
        assert deskctl("do", session, "click", "5", "5").returncode == 0
        assert [r["step"] for r in _rows(record) if r.get("type") == "step"] == [1]
    finally:
        assert deskctl("down", session).returncode == 0


_OWNER = textwrap.dedent("""
    import sys, time
    import deskctl
    with deskctl.open_desktop("xvfb", geometry="320x240", record=sys.argv[1], video=True) as desk:
        print(desk.id, flush=True)
        while True:
            time.sleep(0.2)
""")


def _owner(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    record = tmp_path / "rec"
    script = tmp_path / "owner.py"
    script.write_text(_OWNER)
    proc = subprocess.Popen([sys.executable, str(script), str(record)], stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.PIPE, env=dict(os.environ))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("dk-"), proc.stderr.read() if proc.stderr else ""
    _await_row(record, "video")
    return proc, record


@pytest.mark.slow
def test_killing_the_owning_process_leaves_no_ffmpeg(tmp_path: Path) -> None:
    proc, record = _owner(tmp_path)
    try:
        writers = _ffmpeg_writing(record / "video.mp4")
        assert len(writers) == 1
        _await_frames(record / "video.mp4")
        proc.kill()
        proc.wait(timeout=60)
        assert _await_gone(writers) == []
        # what was written before the kill still plays
        assert int(_probe(record / "video.mp4")["nb_read_frames"]) >= 1
    finally:
        if proc.poll() is None:
            proc.kill()
        deskctl("reap")


@pytest.mark.slow
def test_sigterm_of_the_owning_process_finishes_the_video(tmp_path: Path) -> None:
    proc, record = _owner(tmp_path)
    try:
        writers = _ffmpeg_writing(record / "video.mp4")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        assert _await_gone(writers, timeout=0) == []
        end = _await_row(record, "video_end", timeout=0)
        assert end["ffmpeg_exit"] == 0
        assert int(_probe(record / "video.mp4")["nb_read_frames"]) == end["frames"]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_video_without_a_recording_or_with_a_bad_rate_is_a_usage_error(tmp_path: Path) -> None:
    for args in (["--video"], ["--record", str(tmp_path / "r"), "--video-fps", "5"],
                 ["--record", str(tmp_path / "r"), "--video", "--video-fps", "31"],
                 ["--record", str(tmp_path / "r"), "--video", "--video-max-seconds", "nan"]):
        done = deskctl("up", "--provider", "xvfb", *args, "--json")
        assert done.returncode == 2, (args, done.stderr)
        assert json.loads(done.stdout)["error"]["code"] == "usage.invalid"
    assert not (tmp_path / "r").exists()
    assert json.loads(deskctl("ls", "--all", "--json").stdout) in ([], {"sessions": []})


def test_a_provider_without_a_fast_capture_cannot_record_a_video(tmp_path: Path) -> None:
    done = deskctl_process("up", "--provider", "use_computer", "--record", str(tmp_path / "r"), "--video",
                           "--json", env={"USE_COMPUTER_API_KEY": "uc-test-not-a-real-key"})
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "usage.unsupported" and "video" in error["message"]
    assert "uc-test-not-a-real-key" not in done.stdout + done.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_desktop_video_has_its_geometry(tmp_path: Path) -> None:
    import deskctl

    record = tmp_path / "rec"
    with deskctl.open_desktop("docker", geometry="640x480", record=record, video=True, ready_timeout=120) as desk:
        started = _await_row(record, "video")
        assert (started["width"], started["height"]) == (640, 480)
        _await_frames(record / "video.mp4")
        writers = _ffmpeg_writing(record / "video.mp4")
        assert len(writers) == 1
        desk.click(5, 5)
    assert _await_gone(writers, timeout=0) == []
    end = _await_row(record, "video_end", timeout=0)
    stream = _probe(record / "video.mp4")
    assert (stream["width"], stream["height"]) == (640, 480)
    assert int(stream["nb_read_frames"]) == end["frames"] >= 2


@pytest.mark.ssh
@pytest.mark.slow
def test_an_ssh_desktop_video_has_its_geometry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames over the ssh connection (a connection of the video's own) into ffmpeg on this host."""
    import deskctl
    from observe._ssh_env import ssh_desktop_env

    with ssh_desktop_env(tmp_path, monkeypatch):
        record = tmp_path / "rec"
        with deskctl.open_desktop("ssh", geometry="320x240", record=record, video=True) as desk:
            _await_frames(record / "video.mp4")
            desk.click(5, 5)
        end = _await_row(record, "video_end", timeout=0)
        stream = _probe(record / "video.mp4")
        assert (stream["width"], stream["height"]) == (320, 240)
        assert int(stream["nb_read_frames"]) == end["frames"] >= 2
