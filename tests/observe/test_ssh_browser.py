"""DevTools over the ssh provider: Chromium on the host's display listens on the host's loopback only, and
``desk.browser()`` gives a loopback port of this process whose connections are ssh ``direct-tcpip`` channels to
it; Playwright drives the page through that port, the page list equals what a verifier on the host reads, and
the forwarder ends with the desktop."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from urllib.parse import unquote

import pytest

import deskctl

pytestmark = [pytest.mark.ssh, pytest.mark.slow]


def test_playwright_drives_the_ssh_desktops_chromium_through_a_forwarded_channel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (scripts/setup.d/60-observe.sh)")
    from deskctl.browser import parse_pages
    from observe._ssh_env import ssh_desktop_env
    from observe.test_playwright import PAGE, TITLE, _drive, _until

    with ssh_desktop_env(tmp_path, monkeypatch), deskctl.open_desktop("ssh", geometry="800x600") as desk:
        with pytest.raises(deskctl.DeskctlError) as caught:
            desk.browser()
        assert caught.value.code == "usage.no_browser"
        # a page file on the host (open_url takes URLs with a host, file: URLs and paths, no data: URL)
        page = tmp_path / "page.html"
        page.write_text(unquote(PAGE.split(",", 1)[1]))
        remote = f"{desk.handle.data['dir']}/page.html"  # type: ignore[union-attr]
        desk.upload(str(page), remote)
        url = f"file://{remote}"
        desk.open_url(url, browser="chromium")
        endpoint = desk.browser()
        assert endpoint.port != endpoint.desktop_port
        assert endpoint.ws_url.startswith(f"ws://127.0.0.1:{endpoint.port}/devtools/browser/")
        # Chromium listens on the host's loopback only
        listening = desk.exec(f"ss -Hltn 'sport = :{endpoint.desktop_port}'", timeout=30)
        assert listening.exit_code == 0, listening.stderr
        addresses = {line.split()[3].rsplit(":", 1)[0] for line in listening.stdout.splitlines() if line.strip()}
        assert addresses == {"127.0.0.1"}, listening.stdout
        _drive(desk, url)
        _until("the page list", lambda: any(t == TITLE for _, t in desk.browser_pages()))
        script = ("import sys, urllib.request; o = urllib.request.build_opener(urllib.request.ProxyHandler({}));"
                  f" sys.stdout.write(o.open('http://127.0.0.1:{endpoint.desktop_port}/json/list',"
                  " timeout=20).read().decode())")
        inside = desk.exec(f"python3 -c {json.dumps(script)}", timeout=60)
        assert inside.exit_code == 0, inside.stderr
        assert sorted(parse_pages(json.loads(inside.stdout))) == sorted(desk.browser_pages())
        # with no browser named, the running Chromium (found by its profile) takes the next URL
        second = f"{url}#again"
        desk.open_url(second)
        _until("the second page", lambda: any(u == second for u, _ in desk.browser_pages()))
        port = endpoint.port
    # no process of that Chromium is left (its renderers carry no session marker: destroy finds them by profile)
    profile = f"user-data-dir={remote.rsplit('/', 1)[0]}/browser-profile".encode()
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and profile in (entry / "cmdline").read_bytes():
                left.append(entry.name)
        except OSError:
            continue
    assert left == []
    # the forwarder ends with the desktop: its port no longer answers
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
