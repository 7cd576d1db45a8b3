"""The desktop's Chromium through DevTools (issue 20 §2), with Debian's real ``chromium`` on a real Xvfb desktop and
a real CDP client (the ``websockets`` library speaking raw CDP to the endpoint ``desk.browser()`` gives).

What the caller sees (``browser_pages``, ``deskctl do ID browser-pages``) is compared with what a task verifier
inside the desktop reads at the DevTools port's ``/json/list``; a provider without the capability says
``usage.unsupported``, a desktop without a browser ``usage.no_browser``.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _cli import deskctl
from deskctl import open_desktop
from deskctl.browser import parse_pages
from deskctl.errors import UsageError
from deskctl.session import Desktop

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("Xvfb") is None,
                                reason="Debian's chromium and Xvfb are not installed (scripts/setup --dev does)")

#: generous: a loaded 2-core machine starts Chromium slowly; the tests wait for a state, never for a time
PATIENCE = 120.0


def _page(directory: Path, name: str, title: str) -> str:
    path = directory / f"{name}.html"
    path.write_text(f"<!doctype html><title>{title}</title><h1>{title}</h1>")
    return path.as_uri()


def _until(what: str, probe: Any) -> Any:
    deadline = time.monotonic() + PATIENCE
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


class Cdp:
    """Raw CDP over the browser's websocket: one session attached to a page target (flat mode)."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        while True:
            reply = json.loads(self._ws.recv(timeout=PATIENCE))
            if reply.get("id") == ident:
                assert "error" not in reply, reply
                return reply["result"]


def navigate_over_cdp(ws_url: str, page: Callable[[dict[str, Any]], bool], url: str, title: str) -> None:
    """A raw CDP client on the browser's websocket: attach to the page target ``page`` picks, navigate it to
    ``url`` and wait until its loaded document has ``title``."""
    from websockets.sync.client import connect

    with connect(ws_url, max_size=None, open_timeout=PATIENCE, proxy=None) as ws:
        cdp = Cdp(ws)
        targets = cdp.call("Target.getTargets")["targetInfos"]
        chosen = next(t for t in targets if t["type"] == "page" and page(t))
        session = cdp.call("Target.attachToTarget", {"targetId": chosen["targetId"], "flatten": True})["sessionId"]
        cdp.call("Page.navigate", {"url": url}, session)

        def current() -> str:
            value = cdp.call("Runtime.evaluate", {"expression": "document.readyState === 'complete' && "
                                                                "document.title", "returnByValue": True}, session)
            return str(value["result"].get("value") or "")

        assert _until(f"the title {title!r}", lambda: current() == title)


@pytest.fixture
def pages_dir(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)
    return tmp_path


@pytest.fixture
def desk(pages_dir: Path) -> Iterator[Desktop]:
    with open_desktop("xvfb", geometry="800x600", start_url=_page(pages_dir, "start", "Start page")) as desk:
        yield desk


def _inside(desk: Desktop, port: int) -> list[tuple[str, str]]:
    """What a verifier script on the desktop reads at 127.0.0.1:PORT/json/list (its own python, its own HTTP)."""
    script = ("import sys, urllib.request; o = urllib.request.build_opener(urllib.request.ProxyHandler({})); "
              f"sys.stdout.write(o.open('http://127.0.0.1:{port}/json/list', timeout=20).read().decode())")
    result = desk.exec(f"python3 -c {json.dumps(script)}", timeout=60)
    assert result.exit_code == 0, result.stderr
    return [tuple(p) for p in parse_pages(json.loads(result.stdout))]


def test_a_cdp_client_navigates_and_reads_the_title_and_the_page_list_is_what_the_desktop_sees(
        desk: Desktop, pages_dir: Path) -> None:
    endpoint = desk.browser()
    assert endpoint.http_url == f"http://127.0.0.1:{endpoint.port}"
    assert endpoint.ws_url.startswith(f"ws://127.0.0.1:{endpoint.port}/devtools/browser/")
    _until("the start page", lambda: ("Start page" in [t for _, t in desk.browser_pages()]))

    second = _page(pages_dir, "second", "Second page ✓")
    navigate_over_cdp(endpoint.ws_url, lambda t: str(t["url"]).endswith("/start.html"), second, "Second page ✓")

    # open_url hands a URL to the running Chromium (a new window of the same browser, the same endpoint)
    third = _page(pages_dir, "third", "Third page")
    desk.open_url(third)
    _until("the third page", lambda: (third, "Third page") in desk.browser_pages())
    assert desk.browser().port == endpoint.port

    seen = sorted(desk.browser_pages())
    assert (second, "Second page ✓") in seen and all(isinstance(p, tuple) and len(p) == 2 for p in seen)
    assert sorted(_inside(desk, endpoint.desktop_port)) == seen

    # the same list on the CLI (`deskctl do ID browser-pages`), from another process attached to the desktop
    listed = deskctl("do", desk.id, "browser-pages", "--json", check=True)
    doc = json.loads(listed.stdout)
    assert doc["action"] == "browser-pages" and doc["ok"] is True
    assert sorted(tuple(p) for p in doc["pages"]) == seen
    plain = deskctl("do", desk.id, "browser-pages", check=True).stdout.splitlines()
    assert sorted(tuple(line.split("\t", 1)) for line in plain) == seen


def _listeners(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* write them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_devtools_listens_on_the_loopback_only(desk: Desktop) -> None:
    port = desk.browser().desktop_port
    assert _listeners(port) == {"0100007F"}  # 127.0.0.1, and nothing else (no 0.0.0.0, no ::)


def test_a_desktop_without_a_browser_says_no_browser_and_open_url_with_chromium_starts_one(pages_dir: Path) -> None:
    with open_desktop("xvfb", geometry="640x480") as desk:
        with pytest.raises(UsageError) as caught:
            desk.browser_pages()
        assert caught.value.code == "usage.no_browser"
        proc = deskctl("do", desk.id, "browser-pages", "--json")
        assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "usage.no_browser", proc

        url = _page(pages_dir, "opened", "Opened page")
        desk.open_url(url, browser="chromium")
        _until("the opened page", lambda: (url, "Opened page") in desk.browser_pages())


def test_a_provider_without_the_capability_says_unsupported() -> None:
    with open_desktop("memory", geometry="640x480") as desk:
        assert desk.provider.capabilities.browser is False
        for call in (desk.browser, desk.browser_pages):
            with pytest.raises(UsageError) as caught:
                call()
            assert caught.value.code == "usage.unsupported"


def test_the_mcp_tool_browser_pages_lists_what_open_url_with_chromium_opened(pages_dir: Path) -> None:
    """`deskctl mcp` on an xvfb desktop, driven by the MCP SDK's client: the tool comes from the action table."""
    mcp = pytest.importorskip("mcp")
    import os
    import sys

    import anyio

    url = _page(pages_dir, "mcp", "MCP page")
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "deskctl", "mcp", "--geometry", "640x480"],
                                       env=dict(os.environ))

    async def main() -> None:
        async with mcp.Client(params, read_timeout_seconds=PATIENCE) as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "browser_pages")
            assert tool.input_schema.get("properties", {}) == {}
            none = await client.call_tool("browser_pages", {})
            assert none.is_error and none.structured_content["error"]["code"] == "usage.no_browser"
            assert not (await client.call_tool("open_url", {"url": url, "browser": "chromium"})).is_error
            deadline = time.monotonic() + PATIENCE
            while True:
                listed = await client.call_tool("browser_pages", {})
                assert not listed.is_error, listed
                if [url, "MCP page"] in listed.structured_content["pages"]:
                    break
                assert time.monotonic() < deadline, listed
                await anyio.sleep(0.2)

    anyio.run(main)


def test_the_devtools_port_option_puts_devtools_where_a_verifier_expects_it(pages_dir: Path) -> None:
    """``devtools_port`` (9222 for verifiers that expect it; here a free port, as tests run side by side): the
    desktop's own view at 127.0.0.1:PORT is the caller's."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = _page(pages_dir, "fixed", "Fixed port")
    with open_desktop("xvfb", geometry="640x480", start_url=url, provider_options={"devtools_port": port}) as desk:
        endpoint = desk.browser()
        assert endpoint.desktop_port == endpoint.port == port
        _until("the page", lambda: (url, "Fixed port") in desk.browser_pages())
        assert _inside(desk, port) == [tuple(p) for p in desk.browser_pages()]
    bad = deskctl("up", "-p", "xvfb", "-o", "devtools_port=70000", "--json")
    assert bad.returncode == 2 and "devtools_port" in bad.stdout + bad.stderr, bad
