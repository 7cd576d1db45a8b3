"""The provider contract, through the public session API, for every target in conftest.TARGETS.

Input tests look at what a real X client (the probe window) receives; lifecycle tests look at what is left
on the machine (the target's ``leftovers``) and in the ledger.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from PIL import Image

from deskctl.errors import GeometryOutOfBounds, UsageError
from deskctl.ledger import open_ledger
from deskctl.session import Desktop

if TYPE_CHECKING:
    from conformance.conftest import Target

SHIFT, CONTROL, MOD1, MOD4 = 1, 4, 8, 64

# -- geometry ----------------------------------------------------------------------------------------------------


def test_pinned_geometry_is_the_live_size_and_the_screenshot_size(desk: Desktop, target: Target) -> None:
    width, height = (int(v) for v in target.geometry.split("x")[:2])
    assert desk.size == (width, height)
    assert desk.provider.display_size(desk.handle) == (width, height)  # type: ignore[arg-type]
    shot = desk.screenshot()
    assert (shot.width, shot.height) == (width, height)
    image = Image.open(io.BytesIO(shot.png))
    assert image.format == "PNG"
    assert image.size == (width, height)


def test_screenshot_shows_what_is_on_screen(desk: Desktop, probe: Any) -> None:
    # the probe window is white and covers the screen; the root behind it is black
    shot = Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB")
    w, h = shot.size
    for point in ((0, 0), (w // 2, h // 2), (w - 1, h - 1)):
        assert shot.getpixel(point) == (255, 255, 255)


def test_raw_frame_is_the_screenshot_without_encoding(desk: Desktop, probe: Any) -> None:
    w, h = desk.size
    probe.paint(10, 20, 30, 40, (200, 30, 60))
    probe.paint(w - 50, h - 40, 50, 40, (20, 160, 240))
    frame = desk.raw_frame()
    assert (frame.width, frame.height) == (w, h)
    assert frame.image().tobytes() == Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB").tobytes()
    assert frame.image().getpixel((25, 40)) == (200, 30, 60)
    probe.paint(10, 20, 30, 40, (0, 128, 0))  # a change after a capture is in the next one
    assert desk.raw_frame().image().getpixel((25, 40)) == (0, 128, 0)
    assert desk.raw_frame().image().getpixel((w - 1, h - 1)) == (20, 160, 240)
    # a screenshot after a raw frame shows what that frame saw (a provider that caches its last PNG must not
    # serve it again when a raw capture fetched a change)
    desk.screenshot()
    probe.paint(10, 20, 30, 40, (250, 250, 0))
    desk.raw_frame()
    assert Image.open(io.BytesIO(desk.screenshot().png)).convert("RGB").getpixel((25, 40)) == (250, 250, 0)


def test_out_of_bounds_is_a_usage_error(desk: Desktop) -> None:
    w, h = desk.size
    with pytest.raises(GeometryOutOfBounds):
        desk.click(w, h - 1)
    with pytest.raises(GeometryOutOfBounds):
        desk.move(-1, 0)


# -- pointer -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "button"), [("click", 1), ("middle_click", 2), ("right_click", 3)])
def test_click_arrives_where_it_was_sent(desk: Desktop, probe: Any, method: str, button: int) -> None:
    w, h = desk.size
    points = [(17, 23), (w // 2 + 1, h // 3), (0, 0), (w - 1, h - 1)]
    for x, y in points:
        getattr(desk, method)(x, y)
    probe.wait_for(lambda p: len(p.releases(button)) >= len(points), f"{len(points)} clicks of button {button}")
    assert [e.pos for e in probe.presses(button)] == points
    assert [e.pos for e in probe.releases(button)] == points
    assert not [e for e in probe.presses() if e.button != button]


def test_double_click_is_two_clicks_at_one_point(desk: Desktop, probe: Any) -> None:
    desk.double_click(200, 150)
    probe.wait_for(lambda p: len(p.releases(1)) >= 2, "a double click")
    probe.sync_point()
    assert [e.pos for e in probe.presses(1)] == [(200, 150), (200, 150)]
    assert len(probe.releases(1)) == 2


def test_move_and_mouse_down_up(desk: Desktop, probe: Any) -> None:
    desk.move(300, 222)
    probe.wait_for(lambda p: any(e.pos == (300, 222) for e in p.motions()), "the pointer at 300,222")
    desk.mouse_down(310, 230)
    desk.mouse_up(400, 260)
    probe.wait_for(lambda p: p.releases(1), "a button release")
    assert [e.pos for e in probe.presses(1)] == [(310, 230)]
    assert [e.pos for e in probe.releases(1)] == [(400, 260)]


def test_cursor_position_is_where_the_pointer_was_sent_or_unsupported(desk: Desktop, probe: Any) -> None:
    if not desk.provider.capabilities.cursor_position:
        with pytest.raises(UsageError) as info:
            desk.cursor_position()
        assert info.value.code == "usage.unsupported"
        return
    w, h = desk.size
    for x, y in ((123, 77), (0, 0), (w - 1, h - 1)):
        desk.move(x, y)
        assert desk.cursor_position() == (x, y)
    desk.click(40, 50)
    assert desk.cursor_position() == (40, 50)


def test_drag_presses_moves_and_releases(desk: Desktop, probe: Any) -> None:
    desk.drag(100, 100, 400, 300)
    probe.wait_for(lambda p: p.releases(1), "the end of the drag")
    assert [e.pos for e in probe.presses(1)] == [(100, 100)]
    assert [e.pos for e in probe.releases(1)] == [(400, 300)]
    press_at = probe.events.index(probe.presses(1)[0])
    release_at = probe.events.index(probe.releases(1)[0])
    moved = [e for e in probe.events[press_at:release_at] if e.kind == "motion"]
    assert moved and moved[-1].pos == (400, 300)
    assert all(e.state & 256 for e in moved), "motion during a drag must carry Button1Mask"


def test_scroll_arrives_as_wheel_buttons(desk: Desktop, probe: Any) -> None:
    desk.scroll(250, 260, dy=3)
    desk.scroll(250, 260, dy=-2)
    desk.scroll(250, 260, dx=1)
    desk.scroll(250, 260, dx=-1)
    probe.wait_for(lambda p: len(p.releases()) >= 7, "seven wheel clicks")
    assert [e.button for e in probe.presses()] == [5, 5, 5, 4, 4, 7, 6]
    assert {e.pos for e in probe.presses()} == {(250, 260)}


# -- keyboard ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Hello, World! 0123456789 ~`!@#$%^&*()_+-={}[]|\\:\";'<>?,./", id="ascii"),
        pytest.param("héllo wörld ñ ß €✓ 日本語 Ωμέγα", id="non-ascii"),
        pytest.param("line one\nline two", id="newline"),
    ],
)
def test_typed_text_arrives(desk: Desktop, probe: Any, text: str) -> None:
    desk.type(text)
    probe.wait_for(lambda p: len(p.text()) >= len(text), f"the text {text!r}")
    assert probe.text() == text


def test_typing_twice_the_same_non_ascii_text_is_stable(desk: Desktop, probe: Any) -> None:
    desk.type("çé")
    desk.type("éç")
    probe.wait_for(lambda p: len(p.text()) >= 4, "four characters")
    assert probe.text() == "çééç"


@pytest.mark.parametrize(
    ("chord", "char", "keysym", "mask"),
    [
        ("ctrl+s", "s", ord("s"), CONTROL),
        ("ctrl+shift+t", "T", ord("T"), CONTROL | SHIFT),
        ("alt+f4", "", 0xFFC1, MOD1),
        ("super+e", "e", ord("e"), MOD4),
        ("enter", "\n", 0xFF0D, 0),
        ("pageup", "", 0xFF55, 0),
        ("f12", "", 0xFFC9, 0),
        ("f20", "", 0xFFD1, 0),
        ("shift+f24", "", 0xFFD5, SHIFT),
        ("ctrl+A", "A", ord("A"), CONTROL | SHIFT),
        ("escape", "", 0xFF1B, 0),
    ],
)
def test_key_chord_arrives(desk: Desktop, probe: Any, chord: str, char: str, keysym: int, mask: int) -> None:
    desk.key(chord)
    main = probe.wait_for(lambda p: [e for e in p.key_presses() if e.keysym == keysym], f"the key of {chord!r}")[0]
    assert main.char == char
    assert main.state & (CONTROL | SHIFT | MOD1 | MOD4) == mask
    probe.sync_point()
    released = [e for e in probe.events if e.kind == "key_release"]
    assert len(released) == len(probe.key_presses()), "every key is released"


def test_key_down_holds_a_modifier_until_key_up(desk: Desktop, probe: Any) -> None:
    desk.key_down("shift")
    desk.type("ab")
    desk.key_up("shift")
    desk.type("c")
    probe.wait_for(lambda p: len(p.text()) >= 3, "three letters")
    assert probe.text() == "ABc"


# -- exec --------------------------------------------------------------------------------------------------------


def test_exec_returns_exit_code_and_output(desk: Desktop) -> None:
    result = desk.exec("echo out; echo err >&2; exit 7")
    assert result.exit_code == 7
    if result.merged:
        assert "out" in result.stdout and "err" in result.stdout
    else:
        assert result.stdout == "out\n"
        assert result.stderr == "err\n"
    assert desk.exec("true").exit_code == 0


def test_exec_runs_on_the_desktop_display(desk: Desktop) -> None:
    result = desk.exec("xdpyinfo | grep dimensions")
    w, h = desk.size
    assert result.exit_code == 0, result.stderr
    assert f"{w}x{h} pixels" in result.stdout


# -- lifecycle ---------------------------------------------------------------------------------------------------


def _ledger_record(session_id: str) -> Any:
    with open_ledger() as book:
        return book.get(session_id)


def _assert_ended_in_ledger(session_id: str, target: Target) -> None:
    record = _ledger_record(session_id)
    assert record is not None, f"{session_id} is not in the ledger"
    assert record.status == "ended", (record.status, record.reason)
    assert record.created_at is not None and record.ended_at is not None
    assert record.intent_at <= record.created_at <= record.ended_at
    assert record.billable_seconds is not None and record.billable_seconds >= 0
    if target.extra.get("cost_known", True):
        assert record.cost_usd is not None


def test_destroy_leaves_nothing_and_the_ledger_has_times_and_cost(target: Target) -> None:
    import deskctl

    desk = deskctl.open_desktop(**{**target.open_kwargs, "geometry": target.geometry})
    handle = desk.handle
    assert handle is not None
    assert target.leftovers(handle) != [], "a live desktop should show up in leftovers() (else it checks nothing)"
    assert desk.provider.is_alive(handle)
    desk.close()
    assert target.leftovers(handle) == []
    assert not desk.provider.is_alive(handle)
    record = _ledger_record(desk.id)
    _assert_ended_in_ledger(desk.id, target)
    assert record.ready_at is not None and record.created_at <= record.ready_at <= record.ended_at
    assert (record.width, record.height) == tuple(int(v) for v in target.geometry.split("x")[:2])
    desk.close()  # idempotent


_HOLDER = r"""
import json, sys, threading
import deskctl
from deskctl.errors import DeskctlError
try:
    desk = deskctl.open_desktop(**json.loads(sys.argv[1]))
    print(json.dumps({"id": desk.id, "handle": desk.handle.to_dict()}), flush=True)
    threading.Event().wait()
except DeskctlError as err:
    print(json.dumps(err.to_dict()), file=sys.stderr, flush=True)
    sys.exit(err.exit_code)
"""


def _hold_in_child(target: Target) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    kwargs = {**target.open_kwargs, "geometry": target.geometry}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, json.dumps(kwargs)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the child never opened a desktop: {err[-2000:]}")
    return proc, json.loads(line)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_holder_still_cleans_up(target: Target, signum: signal.Signals) -> None:
    from deskctl.providers.base import RemoteHandle

    proc, opened = _hold_in_child(target)
    handle = RemoteHandle.from_dict(opened["handle"])
    try:
        assert target.leftovers(handle) != []
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert code == 128 + signum  # 143 for SIGTERM, 130 for SIGINT, after the cleanup
    assert target.leftovers(handle) == []
    _assert_ended_in_ledger(opened["id"], target)


def test_sigkill_leaves_a_desktop_that_reap_removes(target: Target) -> None:
    """SIGKILL gives the holder no chance to clean up. A provider's own backstop (xvfb's owner watch) may end
    the desktop's processes first; either way ``deskctl reap`` must report the session destroyed, leave nothing
    behind and record the end in the ledger (tests/unit/test_xvfb.py covers reap of a fully live desktop)."""
    from deskctl.providers.base import RemoteHandle

    proc, opened = _hold_in_child(target)
    handle = RemoteHandle.from_dict(opened["handle"])
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    record = _ledger_record(opened["id"])
    assert record is not None and record.status not in ("ended", "failed"), "nothing ended it cleanly"
    reap = subprocess.run([sys.executable, "-m", "deskctl", "reap", "--json"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert reap.returncode == 0, reap.stdout + reap.stderr
    results = [r for r in json.loads(reap.stdout)["reaped"] if r["session_id"] == opened["id"]]
    assert [r["action"] for r in results] == ["destroyed"], results
    assert target.leftovers(handle) == []
    _assert_ended_in_ledger(opened["id"], target)


# -- the command line ---------------------------------------------------------------------------------------------


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``deskctl ARGS`` through its entry point, in this process (tests/_cli.py): each call attaches to the
    desktop anew, as a separate ``deskctl`` process would."""
    from _cli import deskctl

    done = deskctl(*args)
    if check:
        assert done.returncode == 0, f"deskctl {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def _up_args(target: Target) -> list[str]:
    kwargs = dict(target.open_kwargs)
    args = ["--provider", str(kwargs.pop("provider")), "--geometry", target.geometry]
    if "platform" in kwargs:
        args += ["--platform", str(kwargs.pop("platform"))]
    for key, value in dict(kwargs.pop("provider_options", None) or {}).items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        args += ["--option", f"{key}={text}"]
    return args


def test_cli_detached_desktop_outlives_up_and_obeys_do_screenshot_exec_down(target: Target, tmp_path: Path) -> None:
    import deskctl
    from conformance.conftest import probe_opener
    from deskctl.providers.base import RemoteHandle

    up = json.loads(_cli("up", "--json", *_up_args(target)).stdout)
    session_id = up["id"]
    width, height = (int(v) for v in target.geometry.split("x")[:2])
    assert up["geometry"] == f"{width}x{height}"
    handle: RemoteHandle | None = None
    try:
        desk = deskctl.attach(session_id)  # `up` has exited: the desktop lives on
        handle = desk.handle
        open_probe = probe_opener(target, desk)
        desk.release()
        with open_probe() as probe:
            _cli("do", session_id, "click", "33", "44")
            _cli("do", session_id, "type", "dé")
            _cli("do", session_id, "key", "ctrl+s")
            probe.wait_for(lambda p: p.releases(1) and len(p.key_presses()) >= 3, "a click, two letters, ctrl+s")
            assert probe.presses(1)[0].pos == (33, 44)
            assert probe.text().startswith("dé")
            shot_path = tmp_path / "shot.png"
            _cli("screenshot", session_id, "-o", str(shot_path))
            assert Image.open(shot_path).size == (width, height)
        ran = _cli("exec", session_id, "--", "echo hi; exit 3", check=False)
        assert (ran.returncode, ran.stdout) == (3, "hi\n")
        listed = json.loads(_cli("ls", "--json").stdout)
        assert session_id in json.dumps(listed)
    finally:
        down = _cli("down", session_id, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert handle is not None and target.leftovers(handle) == []
    _assert_ended_in_ledger(session_id, target)


def test_cli_view_serves_the_screen_and_passes_clicks_on(target: Target) -> None:
    import urllib.request

    import deskctl
    from conformance.conftest import probe_opener

    session_id = json.loads(_cli("up", "--json", *_up_args(target)).stdout)["id"]
    width, height = (int(v) for v in target.geometry.split("x")[:2])
    view: subprocess.Popen[str] | None = None
    try:
        desk = deskctl.attach(session_id)
        open_probe = probe_opener(target, desk)
        desk.release()
        with open_probe() as probe:
            probe.paint(20, 30, 100, 80, (230, 40, 20))
            view = subprocess.Popen([sys.executable, "-m", "deskctl", "view", session_id, "--control"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
            assert view.stdout is not None
            ready, _, _ = select.select([view.stdout], [], [], 120)
            url = view.stdout.readline().strip() if ready else ""
            if not url.startswith("http://127.0.0.1:"):
                view.kill()
                raise AssertionError(f"deskctl view printed no URL: {view.communicate()[1]}")
            base, token = url.split("/?token=")
            with urllib.request.urlopen(f"{base}/frame.jpg?token={token}", timeout=120) as reply:
                shown = Image.open(io.BytesIO(reply.read())).convert("RGB")
            assert shown.size == (width, height)
            pixel = shown.getpixel((70, 70))
            assert isinstance(pixel, tuple) and all(abs(a - b) <= 12 for a, b in zip(pixel, (230, 40, 20), strict=True))
            # a click on the image shown at half size lands at the desktop's own coordinates
            event = {"type": "click", "x": 50, "y": 40, "w": width / 2, "h": height / 2}
            post = urllib.request.Request(f"{base}/input?token={token}", data=json.dumps(event).encode(),
                                          method="POST", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(post, timeout=120) as reply:
                assert reply.status == 204
            probe.wait_for(lambda p: p.releases(1), "the click from the view")
            assert probe.presses(1)[0].pos == (100, 80)
        view.send_signal(signal.SIGINT)
        _, err = view.communicate(timeout=60)
        assert view.returncode == 0, err
        _cli("do", session_id, "click", "1", "1")  # the view let go; the desktop is still up
    finally:
        if view is not None and view.poll() is None:
            view.kill()
            view.communicate()
        down = _cli("down", session_id, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
