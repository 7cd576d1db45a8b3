"""DevTools over the ssh provider: Chromium on the host's display listens on the host's loopback only, and
``desk.browser()`` gives a loopback port of this process whose connections are ssh ``direct-tcpip`` channels to
it; Playwright drives the page through that port, the page list equals what a verifier on the host reads, and
the forwarder ends with the desktop."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from urllib.parse import unquote

import pytest

import deskctl
from ssh._sshd import TEST_USER as SSH_USER

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
    assert _processes_naming(f"user-data-dir={remote.rsplit('/', 1)[0]}/browser-profile".encode()) == []
    # the forwarder ends with the desktop: its port no longer answers
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


def test_a_start_url_opens_in_the_hosts_chromium_and_a_chromium_that_dies_destroys_the_desktop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (scripts/setup.d/60-observe.sh)")
    import tempfile

    from observe._ssh_env import ssh_desktop_env
    from observe.test_playwright import _until

    start = "http://127.0.0.1:1/start"  # nothing answers there: the page's URL is what matters
    with ssh_desktop_env(tmp_path, monkeypatch):
        with deskctl.open_desktop("ssh", geometry="800x600", start_url=start) as desk:
            _until("the start page", lambda: any(u == start for u, _ in desk.browser_pages()))
            profile = f"{desk.handle.data['dir']}/browser-profile".encode()  # type: ignore[union-attr]
        assert _processes_naming(profile) == []
        # a "Chromium" that exits at once: the desktop is not ready, and nothing of it is left on the host
        bin_dir = Path(tempfile.mkdtemp(prefix="deskctl-fake-chromium-", dir="/tmp"))
        try:
            bin_dir.chmod(0o755)
            broken = bin_dir / "chromium"
            broken.write_text("#!/bin/sh\necho 'no display for you' >&2\nexit 1\n")
            broken.chmod(0o755)
            from deskctl.ledger import open_ledger

            with pytest.raises(deskctl.DeskctlError) as caught:
                deskctl.open_desktop("ssh", geometry="800x600", start_url=start,
                                     provider_options={"browser": str(broken)})
            assert caught.value.code == "provider.api_error", caught.value
            with open_ledger() as book:
                (failed,) = [r for r in book.sessions(active=None) if r.status != "ended"]
            assert failed.status == "failed", failed
            # its session folder is gone from the host, and so is its Xvfb
            sessions = Path(os.path.expanduser(f"~{SSH_USER}")) / os.environ["DESKCTL_SSH_REMOTE_DIR"]
            assert not (sessions / failed.session_id).exists()
            assert _processes_naming(f"{sessions / failed.session_id}/".encode()) == []
        finally:
            shutil.rmtree(bin_dir, ignore_errors=True)


def _processes_naming(text: bytes) -> list[str]:
    left = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes():
                left.append(entry.name)
        except OSError:
            continue
    return left
