"""The harness part of the contract (issue 14): exec options, files, clipboard, launch/open_url/wait_for,
actions at the pointer's position and the browser's DevTools (``browser_desk``), for every target whose guest
is Linux (``extra["guest"]``, default ``linux``). Targets whose loopback fake cannot be the guest's real OS (a
Windows or macOS sandbox backed by an Xvfb here) check their shell dialect in their own provider tests instead.

Everything is checked on the desktop itself: files by their sha256 computed there, the clipboard by ``xclip``
run there, windows by the X server's tree, clicks by the probe window.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from PIL import Image, ImageChops

from _procs import wait_until
from deskctl.errors import UsageError, WaitTimeout

if TYPE_CHECKING:
    from conformance.conftest import Target
    from deskctl.session import Desktop

linux = pytest.mark.linux_guest  # the conformance conftest leaves the other targets out of these tests


def _scratch(desk: Desktop) -> str:
    """A fresh folder on the desktop that its user can write."""
    path = f"/tmp/deskctl-conf-{uuid.uuid4().hex[:10]}"
    result = desk.exec(f"mkdir -p {path} && chmod 777 {path}")
    assert result.exit_code == 0, result.stderr or result.stdout
    return path


# -- exec options -------------------------------------------------------------------------------------------------
@linux
def test_exec_runs_in_cwd_with_env(desk: Desktop) -> None:
    where = _scratch(desk)
    result = desk.exec('pwd; printf "%s|%s\\n" "$DK_A" "$DK_B"', cwd=where,
                       env={"DK_A": "two words", "DK_B": "it's $HOME `x`"})
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == where
    assert lines[1] == "two words|it's $HOME `x`"


@linux
def test_exec_in_a_missing_cwd_fails_without_running(desk: Desktop) -> None:
    where = _scratch(desk)
    result = desk.exec(f"touch {where}/ran", cwd=f"{where}/missing")
    assert result.exit_code == 2  # the same on every provider (`cd DIR || exit 2`; Daytona says so too)
    assert desk.exec(f"test -e {where}/ran").exit_code == 1


@linux
@pytest.mark.parametrize("env", [{"1BAD": "x"}, {"A-B": "x"}, {"": "x"}, {"A": "nul\0byte"}])
def test_exec_refuses_bad_env_before_running(desk: Desktop, env: dict[str, str]) -> None:
    with pytest.raises(UsageError) as info:
        desk.exec("true", env=env)
    assert info.value.code == "usage.bad_env"
    assert info.value.exit_code == 2


@linux
def test_exec_as_another_user(desk: Desktop, target: Target) -> None:
    me = desk.exec("id -un").stdout.strip()
    assert desk.exec("id -un", user=me).stdout.strip() == me
    other = target.extra.get("other_user", "nobody")
    result = desk.exec("id -un", user=other)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == other


@linux
def test_exec_background_returns_at_once_with_a_live_pid(desk: Desktop) -> None:
    # the timeout is shorter than the command: a foreground run would end with 124
    result = desk.exec("sleep 120", timeout=20, background=True)
    assert result.exit_code == 0, result.stderr
    assert result.pid is not None and result.pid > 1
    try:
        assert desk.exec(f"kill -0 {result.pid}").exit_code == 0
        assert "sleep" in desk.exec(f"cat /proc/{result.pid}/cmdline").stdout
    finally:
        desk.exec(f"kill {result.pid}")


@linux
def test_exec_timeout_is_124(desk: Desktop) -> None:
    assert desk.exec("sleep 30", timeout=1).exit_code == 124


# -- files --------------------------------------------------------------------------------------------------------
def _tree(root: Path) -> dict[str, bytes | None]:
    """relative path -> content (None for a directory)."""
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = None if path.is_dir() else path.read_bytes()
    return out


def _make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "all-bytes.bin").write_bytes(bytes(range(256)) * 16)
    (root / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (root / "sub" / "ünïcode name ✓.txt").write_text("héllo\n", encoding="utf-8")
    (root / "sub" / "deeper" / "empty").write_bytes(b"")
    (root / "with space's.txt").write_text("quoted\n")


@linux
def test_upload_and_download_a_directory_tree(desk: Desktop, tmp_path: Path) -> None:
    source = tmp_path / "src"
    _make_tree(source)
    remote = f"{_scratch(desk)}/a/b/tree"  # parents do not exist yet
    desk.upload(source, remote)
    # what arrived, checked on the desktop itself
    big = hashlib.sha256((source / "big.bin").read_bytes()).hexdigest()
    result = desk.exec(f"sha256sum {shlex.quote(remote + '/big.bin')}")
    assert result.stdout.split()[0] == big, result.stderr
    listed = desk.exec(f"cd {shlex.quote(remote)} && find . -mindepth 1 | sort").stdout.splitlines()
    assert sorted(p[2:] for p in listed) == sorted(_tree(source))
    back = tmp_path / "back"
    desk.download(remote, back)
    assert _tree(back) == _tree(source)


@linux
def test_upload_and_download_one_file(desk: Desktop, tmp_path: Path) -> None:
    local = tmp_path / "one.bin"
    local.write_bytes(os.urandom(70_000))
    remote = f"{_scratch(desk)}/new/parent/one.bin"
    desk.upload(local, remote)
    assert desk.exec(f"sha256sum {remote}").stdout.split()[0] == hashlib.sha256(local.read_bytes()).hexdigest()
    # a second upload replaces the file
    local.write_bytes(b"second\n")
    desk.upload(local, remote)
    assert desk.exec(f"cat {remote}").stdout == "second\n"
    out = tmp_path / "out" / "copy.bin"
    desk.download(remote, out)
    assert out.read_bytes() == b"second\n"


@linux
def test_missing_sources_are_usage_errors(desk: Desktop, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        desk.upload(tmp_path / "nope", f"{_scratch(desk)}/x")
    assert info.value.code == "usage.no_such_file"
    with pytest.raises(UsageError) as info:
        desk.download(f"{_scratch(desk)}/nope", tmp_path / "x")
    assert info.value.code == "usage.no_such_file"
    assert not (tmp_path / "x").exists()


# -- clipboard, launch, open_url, wait_for ------------------------------------------------------------------------
@linux
def test_clipboard_set_then_get_and_seen_by_the_desktop(desk: Desktop) -> None:
    text = "héllo\nwörld ✓ 'q' \"d\" $x"
    desk.clipboard_set(text)
    assert desk.clipboard_get() == text
    seen = desk.exec("xclip -selection clipboard -o")
    assert seen.stdout == text, seen.stderr


@linux
def test_clipboard_of_a_mebibyte_round_trips(desk: Desktop) -> None:
    # more than one command-line argument may hold (128 KiB on Linux): it goes to the desktop as a file
    text = ("héllo wörld ✓ 'q' \"d\" $x\n" * 40000)[: 1024 * 1024]
    desk.clipboard_set(text)
    assert desk.clipboard_get() == text
    seen = desk.exec("xclip -selection clipboard -o | sha256sum")
    assert seen.stdout.split()[0] == hashlib.sha256(text.encode()).hexdigest(), seen.stderr


@linux
@pytest.mark.parametrize("app", ["no-such-program-deskctl", "/no/such/dir/app", "", "  "])
def test_launch_of_a_program_the_desktop_lacks_is_a_usage_error(desk: Desktop, app: str) -> None:
    with pytest.raises(UsageError) as info:
        desk.launch(app, "--flag")
    assert info.value.code == "usage.no_such_program" and info.value.exit_code == 2


@linux
def test_launch_then_wait_for_its_window(desk: Desktop) -> None:
    title = f"deskctl-launch-{uuid.uuid4().hex[:8]}"
    pid = desk.launch("xmessage", "-title", title, "hello from deskctl")
    try:
        assert desk.wait_for(title, timeout=60) == title
        assert title in desk.window_titles()
    finally:
        if pid is not None:
            desk.exec(f"kill {pid}")
        else:
            desk.exec(f"pkill -f {shlex.quote(title)}")


@linux
def test_wait_for_times_out_with_its_code(desk: Desktop) -> None:
    with pytest.raises(WaitTimeout) as info:
        desk.wait_for(f"no-such-window-{uuid.uuid4().hex}", timeout=1.5)
    assert info.value.code == "wait.timeout" and info.value.exit_code == 6
    calls: list[int] = []
    assert desk.wait_for(lambda d: len(calls) > 2 or calls.append(1), timeout=30, interval=0.01) is True


@linux
def test_open_url_hands_the_url_to_the_browser(desk: Desktop, tmp_path: Path) -> None:
    where = _scratch(desk)
    browser = tmp_path / "browser.sh"
    browser.write_text('#!/bin/sh\nprintf "%s" "$1" > "$(dirname "$0")/opened"\n'
                       'exec xmessage -title "opened $1" "$1"\n')
    browser.chmod(0o755)
    desk.upload(browser, f"{where}/browser.sh")
    url = f"https://example.invalid/path?q={uuid.uuid4().hex[:6]}&x=1"
    desk.open_url(url, browser=f"{where}/browser.sh")
    assert desk.wait_for(f"opened {url}", timeout=60)
    assert desk.exec(f"cat {where}/opened").stdout == url
    desk.exec(f"pkill -f {shlex.quote('opened ' + url)}")


# -- actions at the pointer's position ---------------------------------------------------------------------------
def test_click_and_scroll_at_the_pointer(desk: Desktop, probe: Any) -> None:
    desk.move(123, 145)
    desk.click()
    desk.scroll(dy=2)
    probe.wait_for(lambda p: len(p.releases()) >= 3, "a click and two wheel clicks")
    assert [e.button for e in probe.presses()] == [1, 5, 5]
    assert {e.pos for e in probe.presses()} == {(123, 145)}
    with pytest.raises(UsageError):
        desk.click(10, None)


# -- the browser's DevTools (capability ``browser``) -------------------------------------------------------------
#: the page's background: a colour nothing else on a desktop shows
_PAGE_COLOUR = (23, 201, 117)
#: what a task's verifier inside the desktop does: read the DevTools target list on the desktop's loopback
_VERIFIER = ("import sys, urllib.request\n"
             "opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
             "print(opener.open('http://127.0.0.1:%s/json/list' % sys.argv[1], timeout=30).read().decode())\n")


def _pixels_of(png: bytes, colour: tuple[int, int, int], tolerance: int = 6) -> int:
    """How many pixels of the screenshot ``png`` are ``colour`` (each channel within ``tolerance``)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    bands = ImageChops.difference(image, Image.new("RGB", image.size, colour)).split()
    masks = [band.point(lambda v: 255 if v <= tolerance else 0) for band in bands]
    return ImageChops.darker(ImageChops.darker(masks[0], masks[1]), masks[2]).histogram()[255]


@linux
@pytest.mark.slow  # a Chromium starting on a loaded machine
def test_a_chromium_page_is_seen_by_devtools_inside_by_a_cdp_client_and_on_screen(browser_desk: Desktop,
                                                                                target: Target) -> None:
    """``open_url(url, browser="chromium")`` opens a page; ``browser_pages()`` is what a verifier inside the
    desktop reads at its loopback DevTools port (``/json/list``: one page target of that URL, with its title); a
    real CDP client (Playwright's ``connect_over_cdp``) reads the title through ``desk.browser()``; the page's
    colour is on the screenshot."""
    from deskctl.browser import NO_BROWSER, Page, parse_pages

    desk = browser_desk
    # a provider without the capability refuses here with usage.unsupported (its strict xfail); one with it says
    # usage.no_browser while no Chromium runs
    try:
        desk.browser()
    except UsageError as exc:
        if exc.code != NO_BROWSER:
            raise
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                                   "(pip install -e '.[test]')")
    where = _scratch(desk)
    title = f"deskctl conformance {uuid.uuid4().hex[:8]}"
    html = f"<!doctype html><title>{title}</title><body style='margin:0;background:rgb{_PAGE_COLOUR}'></body>"
    written = desk.exec(f"printf '%s' {shlex.quote(html)} > {where}/page.html")
    assert written.exit_code == 0, written.stderr or written.stdout
    url = f"file://{where}/page.html"
    desk.open_url(url, browser="chromium")
    mine = Page(url, title)
    wait_until(lambda: mine in desk.browser_pages(), f"{mine} among the browser's pages", timeout=90)

    endpoint = desk.browser()
    if "devtools_port" in target.extra:
        assert endpoint.desktop_port == target.extra["devtools_port"]
    pages = desk.browser_pages()
    inside = desk.exec(f"python3 -c {shlex.quote(_VERIFIER)} {endpoint.desktop_port}")
    assert inside.exit_code == 0, inside.stderr or inside.stdout
    assert parse_pages(json.loads(inside.stdout)) == pages
    assert pages == [mine]  # one page target: the browser desktop of the module held no other page

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.connect_over_cdp(endpoint.http_url, timeout=60_000)
        try:
            def opened() -> list[Any]:
                return [page for context in browser.contexts for page in context.pages if page.url == url]

            wait_until(opened, "the page in the CDP client", timeout=60)
            assert [page.title() for page in opened()] == [title]
        finally:
            browser.close()  # the CDP connection; the desktop's Chromium stays

    wait_until(lambda: _pixels_of(desk.screenshot().png, _PAGE_COLOUR) >= 100 * 100,
               f"the page's colour {_PAGE_COLOUR} on the screen", timeout=60)
