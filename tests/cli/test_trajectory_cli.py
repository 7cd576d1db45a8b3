"""Recording through the real CLI (`up --record`, `do` in separate processes, `down`) and the trajectory viewer
page opened in a real headless Chromium."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import deskctl
from _chromium import chromium  # noqa: F401
from _cli import deskctl_process as deskctl_cli  # three `do` processes: the recorded pids tell them apart
from deskctl.recording import JSONL_NAME

pytestmark = pytest.mark.skipif(shutil.which("xterm") is None, reason="xterm is not installed")


def start_xterm(sid: str, out: Path) -> None:
    """An xterm at the top left that writes the first line typed into it to ``out``; returns once it is mapped."""
    desk = deskctl.attach(sid)
    try:
        # larger than the screen, so the pointer is in it (focus follows the pointer without a window manager)
        started = desk.exec("LANG=C.UTF-8 xterm -u8 -geometry 300x100+0+0 -e sh -c "
                            f"'IFS= read -r line; printf %s \"$line\" > {out}' >/dev/null 2>&1 & echo $!")
        desk.provider._wait_on_display(  # type: ignore[attr-defined]
            desk.handle, "xterm", int(started.stdout), time.monotonic() + 30,
            lambda d, r: any(c.get_attributes().map_state == 2 for c in r.query_tree().children), "the xterm")
    finally:
        desk.release()


def load_page(driver: Any, page: Path) -> list[dict[str, Any]]:
    """Open ``page`` and return, per step section, what the browser made of it."""
    driver.get(page.as_uri())
    driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const imgs = [...document.images];
        imgs.forEach(i => { i.loading = 'eager'; });
        Promise.all(imgs.map(i => i.decode().catch(() => null))).then(() => done(true));
    """)
    found: list[dict[str, Any]] = driver.execute_script("""
        return [...document.querySelectorAll('section.step')].map(s => ({
            step: Number(s.dataset.step), kind: s.dataset.kind, title: s.querySelector('h2').textContent,
            images: [...s.querySelectorAll('img')].map(i => ({cls: i.className, complete: i.complete,
                                                              natural: [i.naturalWidth, i.naturalHeight]})),
            markers: [...s.querySelectorAll('circle.marker')].map(c => [c.getAttribute('cx'),
                                                                        c.getAttribute('cy')]),
            notes: [...s.querySelectorAll('table.annotations tr')].map(r => r.textContent),
            error: (s.querySelector('.error') || {}).textContent || null,
        }));
    """)
    return found


def test_up_record_two_do_calls_down_then_show_and_html(tmp_path: Path, chromium: Any) -> None:  # noqa: F811
    record = tmp_path / "traj"
    typed = tmp_path / "typed.txt"
    up = deskctl_cli("up", "--geometry", "640x480", "--record", str(record), "--record-settle", "20", "--json",
                     check=True)
    info = json.loads(up.stdout)
    sid = info["id"]
    assert info["record"] == str(record)
    try:
        start_xterm(sid, typed)
        assert deskctl_cli("do", sid, "type", "hi <there>", check=True).stdout == ""
        deskctl_cli("do", sid, "key", "enter", check=True)  # the xterm exits: its window goes
        annotating = deskctl.attach(sid)
        try:
            assert annotating.annotate(1, reward=1.0, model="m-1") == 1
        finally:
            annotating.release()
        bad = deskctl_cli("do", sid, "click", "700", "5")
        assert bad.returncode == 2 and "(geometry.out_of_bounds)" in bad.stderr
    finally:
        down = deskctl_cli("down", sid)
    assert down.returncode == 0, down.stderr
    assert typed.read_text(encoding="utf-8") == "hi <there>"

    rows = [json.loads(line) for line in (record / JSONL_NAME).read_text(encoding="utf-8").splitlines()]
    steps = [r for r in rows if r["type"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["action"]["kind"] for r in steps] == ["type", "key", "click"]
    assert steps[0]["action"]["text"] == "hi <there>"
    assert [r["error"] and r["error"]["code"] for r in steps] == [None, None, "geometry.out_of_bounds"]
    assert {r["session"] for r in steps} == {sid} and len({r["pid"] for r in steps}) == 3  # three `do` processes
    for row in steps:
        for which in ("before", "after"):
            data = (record / row[which]["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == row[which]["sha256"]
            assert (row[which]["width"], row[which]["height"]) == (640, 480)
    # the xterm drew the typed text, then went; the refused click changed nothing
    assert [r["before"]["sha256"] != r["after"]["sha256"] for r in steps] == [True, True, False]
    assert [(r["step"], r["fields"]) for r in rows if r["type"] == "annotation"] == [
        (1, {"reward": 1.0, "model": "m-1"})]

    shown = deskctl_cli("trajectory", "show", str(record), check=True)
    lines = shown.stdout.splitlines()
    assert re.fullmatch(rf"{re.escape(str(record))}: 3 steps \(1\.\.3\), sessions {sid}, xvfb, 640x480, "
                        r"\d+\.\ds", lines[0]), lines[0]
    assert lines[1] == ("actions: type 1, key 1, click 1; errors: geometry.out_of_bounds 1; screen changed: 2/3; "
                        "images: 6 ok, 0 missing, 0 sha256 mismatch")
    assert lines[2].split() == ["STEP", "ACTION", "LATENCY", "CHANGED", "ERROR", "ANNOTATIONS"]
    assert re.fullmatch(r"    1  type 'hi <there>' +\d+\.\dms  yes      -  +model=m-1 reward=1.0", lines[3]), lines[3]
    assert re.fullmatch(r"    2  key enter +\d+\.\dms  yes      -", lines[4]), lines[4]
    assert re.fullmatch(r"    3  click \(700, 5\) +\d+\.\dms  no       geometry.out_of_bounds", lines[5]), lines[5]
    assert len(lines) == 6 and shown.stderr == ""
    doc = json.loads(deskctl_cli("trajectory", "show", str(record), "--json", check=True).stdout)
    assert doc["steps"] == 3 and doc["sessions"] == [sid] and doc["images"]["ok"] == 6
    assert [r["annotations"] for r in doc["rows"]] == [{"model": "m-1", "reward": 1.0}, {}, {}]
    assert [r["changed"] for r in doc["rows"]] == [True, True, False]

    html = deskctl_cli("trajectory", "html", str(record), check=True)
    page = record / "index.html"
    assert html.stdout == f"{page}\n"
    linked = tmp_path / "elsewhere" / "linked.html"
    linked.parent.mkdir()
    deskctl_cli("trajectory", "html", str(record), "-o", str(linked), check=True)
    alone = tmp_path / "elsewhere" / "alone.html"
    deskctl_cli("trajectory", "html", str(record), "-o", str(alone), "--embed", check=True)
    assert "data:image/png;base64," in alone.read_text() and "data:image" not in linked.read_text()
    for each in (page, linked, alone):
        sections = load_page(chromium, each)
        assert [s["step"] for s in sections] == [1, 2, 3]
        assert [s["kind"] for s in sections] == ["type", "key", "click"]
        for section in sections:
            assert [i["cls"] for i in section["images"]] == ["before", "after"]
            assert all(i["complete"] and i["natural"] == [640, 480] for i in section["images"]), section
        assert sections[0]["title"] == "Step 1 · type 'hi <there>'"  # escaped, shown as text
        assert sections[0]["notes"] == ["modelm-1", "reward1.0"]
        assert sections[2]["markers"] == [["700", "5"], ["700", "5"]]
        assert sections[2]["error"].startswith("geometry.out_of_bounds: point (700, 5) is outside")
        items = chromium.execute_script("return [...document.querySelectorAll('#step-list a')]"
                                        ".map(a => a.getAttribute('href'))")
        assert items == ["#step-1", "#step-2", "#step-3"]


def test_show_reports_damage_and_missing_dirs_are_usage_errors(tmp_path: Path) -> None:
    missing = deskctl_cli("trajectory", "show", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "(usage.not_found)" in missing.stderr
    as_json = json.loads(deskctl_cli("trajectory", "html", str(tmp_path / "nothing"), "--json").stdout)
    assert as_json["error"]["code"] == "usage.not_found"

    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        desk.move(3, 4)
        desk.move(5, 6)
    (tmp_path / "000002-after.png").write_bytes(b"not the recorded screenshot")
    (tmp_path / "000001-before.png").unlink()
    with open(tmp_path / JSONL_NAME, "a", encoding="utf-8") as fh:
        fh.write('{"type": "step", "step": 3, "cut short')
    shown = deskctl_cli("trajectory", "show", str(tmp_path))
    # the summary, then exit 20: a recording whose screenshots are not the recorded ones fails the check
    assert shown.returncode == 20
    assert "images: 2 ok, 1 missing, 1 sha256 mismatch" in shown.stdout
    assert shown.stderr == ("warning: skipped 1 unreadable line of the JSONL (line 3)\n"
                            "step 1: the before screenshot 000001-before.png is missing\n"
                            "step 2: the after screenshot 000002-after.png is not the one recorded (sha256 mismatch)\n"
                            "error: 2 screenshots missing or not matching the sha256 in their row "
                            "(recording.damaged)\n")
    doc = deskctl_cli("trajectory", "show", str(tmp_path), "--json")
    assert doc.returncode == 20
    summary = json.loads(doc.stdout)
    assert summary["bad_images"] == [
        {"step": 1, "image": "before", "path": "000001-before.png", "status": "missing"},
        {"step": 2, "image": "after", "path": "000002-after.png", "status": "mismatch"}]
    assert summary["damaged_lines"] == [3]


def test_a_torn_or_foreign_line_is_skipped_and_the_next_row_starts_on_its_own_line(tmp_path: Path) -> None:
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        desk.move(3, 4)
        assert desk.recording is not None
        desk.recording.flush()  # step 1's row is written (off the hot path): the crash comes after it
        with open(tmp_path / JSONL_NAME, "ab") as fh:  # a crash mid-write: no newline, and bytes that are no UTF-8
            fh.write(b'{"type": "step", "step": 2, "cut \xff\xfe short')
        desk.move(5, 6)  # the writer starts its row on a fresh line: step 2 is not glued to the torn line
    shown = deskctl_cli("trajectory", "show", str(tmp_path), "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert [r["step"] for r in doc["rows"]] == [1, 2] and doc["damaged_lines"] == [2]
    assert shown.stderr == "warning: skipped 1 unreadable line of the JSONL (line 2)\n"
    page = deskctl_cli("trajectory", "html", str(tmp_path), "--json")
    assert page.returncode == 0, page.stderr
    assert json.loads(page.stdout)["steps"] == 2 and json.loads(page.stdout)["skipped_lines"] == 1
    assert "skipped 1 unreadable line of the JSONL (line 2)" in (tmp_path / "index.html").read_text()


def test_the_page_draws_each_pointer_action_where_it_acted(tmp_path: Path, chromium: Any) -> None:  # noqa: F811
    with deskctl.open_desktop("xvfb", geometry="320x240", record=tmp_path) as desk:
        desk.click(10, 20)
        desk.double_click(30, 40)
        desk.drag(50, 60, 150, 160)
        desk.scroll(70, 80, dy=3)
        desk.move(90, 100)
        desk.key("ctrl+s")
    deskctl_cli("trajectory", "html", str(tmp_path), check=True)
    sections = load_page(chromium, tmp_path / "index.html")
    assert [s["title"] for s in sections] == [
        "Step 1 · click (10, 20)", "Step 2 · click (30, 40) double", "Step 3 · drag (50, 60) -> (150, 160)",
        "Step 4 · scroll (70, 80) dy=3 dx=0", "Step 5 · move (90, 100)", "Step 6 · key ctrl+s"]
    assert [s["markers"][:1] for s in sections] == [[["10", "20"]], [["30", "40"]], [["50", "60"]], [["70", "80"]],
                                                    [["90", "100"]], []]
    ends = chromium.execute_script("return [...document.querySelectorAll('#step-3 circle.marker-end')]"
                                   ".map(c => [c.getAttribute('cx'), c.getAttribute('cy')])")
    assert ends == [["150", "160"], ["150", "160"]]
    # the ring sits on the click point as displayed: the overlay scales with the image
    placed = chromium.execute_script("""
        const img = document.querySelector('#step-1 img.before');
        const ring = document.querySelector('#step-1 figure.before circle.marker').getBoundingClientRect();
        const box = img.getBoundingClientRect();
        return [(ring.left + ring.width / 2 - box.left) * 320 / box.width,
                (ring.top + ring.height / 2 - box.top) * 240 / box.height];
    """)
    assert abs(placed[0] - 10) < 1.5 and abs(placed[1] - 20) < 1.5


def test_a_recording_that_cannot_be_written_is_exit_20_and_down_still_works(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    refused = deskctl_cli("up", "--geometry", "320x240", "--record", str(blocker / "run"))
    assert refused.returncode == 2 and "(usage.bad_record_dir)" in refused.stderr
    assert json.loads(deskctl_cli("ls", "--all", "--json", check=True).stdout)["sessions"] == []

    record = tmp_path / "run"
    up = deskctl_cli("up", "--geometry", "320x240", "--record", str(record), check=True)
    sid = up.stdout.strip()
    assert f"recording every action into {record} (deskctl trajectory show {record})\n" in up.stderr
    try:
        shutil.rmtree(record)
        record.write_text("the recording directory is gone")  # as root, only a non-directory stops writes
        failed = deskctl_cli("do", sid, "click", "5", "5", "--json")
        assert failed.returncode == 20
        assert json.loads(failed.stdout)["error"]["code"] == "recording.write_failed"
    finally:
        down = deskctl_cli("down", sid)
    assert down.returncode == 0 and down.stderr == f"{sid}: destroyed ($0.0000)\n"


def test_paths_that_cannot_be_recordings_get_the_documented_codes(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [
        (["up", "--record", ""], "usage.bad_record_dir"),  # once: recorded into the current directory
        (["up", "--record", str(a_file)], "usage.bad_record_dir"),  # once: usage.bad_value (click's own check)
        (["trajectory", "show", str(a_file)], "usage.bad_record_dir"),
        (["trajectory", "html", str(tmp_path), "-o", str(tmp_path)], "usage.bad_output"),
    ]
    (tmp_path / JSONL_NAME).write_text("")
    for args, code in cases:
        proc = deskctl_cli(*args, "--json", cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert json.loads(proc.stdout)["error"]["code"] == code, (args, proc.stdout)
    assert json.loads(deskctl_cli("ls", "--all", "--json", check=True).stdout)["sessions"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", JSONL_NAME]  # nothing recorded here
