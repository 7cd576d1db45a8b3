"""A kubernetes desktop's DevTools from the caller (issue 20 §2): the pod's agent turns a new authenticated
connection into a byte pipe to a port on the pod's loopback (its ``stream`` operation), and ``desk.browser()``
is a loopback listener here whose connections are such pipes (providers/kubernetes/browser.py). Against the
loopback fake, whose pods are real containers of the desktop image with the agent inside: a DevTools stand-in
(an HTTP server on the pod's 127.0.0.1:9222) in the minimal image, and a real Chromium in the browser image."""

from __future__ import annotations

import json
import os
import shlex
import socket
from pathlib import Path

import pytest

import deskctl
from deskctl.agent.client import AgentDriver
from deskctl.errors import DeskctlError
from fakes.kube import FakeKubernetes
from unit.test_browser import PATIENCE, _until, navigate_over_cdp

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# an HTTP server on the pod's loopback that answers /json/version and /json/list as Chromium's DevTools do, and
# echoes anything else (upper-cased) on a second port
_STAND_IN = r"""
import http.server, json, socket, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a held connection stays open
    def do_GET(self):
        doc = {"/json/version": {"Browser": "stand-in", "webSocketDebuggerUrl":
                                 "ws://127.0.0.1:9222/devtools/browser/stand-in"},
               "/json/list": [{"type": "page", "url": "http://example.test/", "title": "Stand-in page"},
                              {"type": "service_worker", "url": "http://example.test/sw.js", "title": ""}]}
        body = json.dumps(doc.get(self.path, {})).encode()
        self.send_response(200 if self.path in doc else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
def echo():
    s = socket.create_server(("127.0.0.1", 7711))
    while True:
        c, _ = s.accept()
        def serve(c=c):
            while True:
                d = c.recv(65536)
                if not d:
                    break
                c.sendall(d.upper())
            c.close()
        threading.Thread(target=serve, daemon=True).start()
threading.Thread(target=echo, daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", 9222), H).serve_forever()
"""

_ESTABLISHED_TO = r"""
import sys
port = "%04X" % int(sys.argv[1])
n = 0
for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(name).read().splitlines()[1:]
    except OSError:
        continue
    n += sum(1 for r in rows if r.split()[1].endswith(":" + port) and r.split()[3] == "01")
print(n)
"""


def _established(desk: deskctl.Desktop, port: int) -> int:
    """Connections to ``port`` in the pod that are open (the server's ends of them)."""
    result = desk.exec(f"python3 -c {shlex.quote(_ESTABLISHED_TO)} {port}", timeout=60)
    assert result.exit_code == 0, result.stderr
    return int(result.stdout.strip())


def _agent(desk: deskctl.Desktop) -> AgentDriver:
    """A new authenticated connection to the pod's agent, as the provider opens them."""
    assert desk.handle is not None
    driver = desk.provider._open_driver(desk.handle)  # type: ignore[attr-defined]
    assert isinstance(driver, AgentDriver)
    return driver


def _hold(port: int) -> socket.socket:
    """A connection to the forwarder on ``port`` that asked for the pages and holds on (HTTP keep-alive)."""
    held = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
    held.sendall(b"GET /json/list HTTP/1.1\r\nHost: x\r\n\r\n")
    assert held.recv(65536).startswith(b"HTTP/1.")
    return held


def _start_stand_in(desk: deskctl.Desktop) -> None:
    started = desk.exec(f"python3 -c {shlex.quote(_STAND_IN)} >/tmp/stand-in.log 2>&1", timeout=60, background=True)
    assert started.exit_code == 0, started.stderr
    wait = "import socket; [socket.create_connection(('127.0.0.1', p), timeout=5).close() for p in (9222, 7711)]"
    _until("the stand-in's ports", lambda: desk.exec(f"python3 -c {shlex.quote(wait)}", timeout=30).exit_code == 0)


def test_the_agent_streams_to_the_pods_loopback_and_browser_is_a_forwarder_closed_with_the_desktop(
        kube_env: FakeKubernetes, image: str, deskctl_home: Path) -> None:
    with deskctl.open_desktop(provider="kubernetes", geometry="640x480",
                              provider_options={"image": image}) as desk:
        assert desk.provider.capabilities.browser
        # nothing runs on 9222 yet: no browser, with its code
        with pytest.raises(DeskctlError) as caught:
            desk.browser_pages()
        assert caught.value.code == "usage.no_browser"
        _start_stand_in(desk)

        # the stream itself: bytes both ways to a plain TCP server on the pod's loopback
        pipe = _agent(desk).stream(7711)
        try:
            pipe.sendall(b"hello through the agent")
            got = b""
            while len(got) < 23:
                chunk = pipe.recv(65536)
                assert chunk, "the stream closed early"
                got += chunk
            assert got == b"HELLO THROUGH THE AGENT"
        finally:
            pipe.close()

        # refusals keep their codes, and the connection that asked is closed after them
        for port, code in ((0, "usage.bad_port"), (65536, "usage.bad_port"), ("9222", "usage.bad_port"),
                           (1, "provider.unreachable")):
            driver = _agent(desk)
            with pytest.raises(DeskctlError) as caught:
                driver.stream(port)  # type: ignore[arg-type]
            assert caught.value.code == code, (port, caught.value)
            assert driver.closed
        driver = _agent(desk)
        try:
            with pytest.raises(DeskctlError) as caught:  # a peer that names another host is refused by the agent
                driver._call("open a stream", {"op": "stream", "host": "10.0.0.1", "port": 7711})
            assert caught.value.code == "usage.not_loopback"
            driver.ping()  # a refusal keeps the connection in step
        finally:
            driver.close()

        # desk.browser(): a loopback listener here, each connection a stream to the pod's 127.0.0.1:9222
        endpoint = desk.browser()
        assert endpoint.desktop_port == 9222
        assert endpoint.http_url == f"http://127.0.0.1:{endpoint.port}"
        assert endpoint.ws_url == f"ws://127.0.0.1:{endpoint.port}/devtools/browser/stand-in"
        assert [tuple(p) for p in desk.browser_pages()] == [("http://example.test/", "Stand-in page")]
        # a held keep-alive connection (the stand-in, like Chromium, keeps it open) ends in the pod when either
        # end here ends: the caller hanging up, then the forwarder closing under another one. The end is
        # asynchronous by design: it crosses processes (the forwarder's shutdown, then the agent in the pod
        # reading its end and shutting the pod's side down, then the stand-in closing its own), none of which
        # this process can wait on, so the pod is polled with a bound (PATIENCE): a stream the end did not
        # reach stays open for good and fails the wait.
        held = _hold(endpoint.port)
        _until("the held stream in the pod", lambda: _established(desk, 9222) >= 1)
        held.close()  # the forwarder stays open: its pumps must tell the pod
        _until("no stream left in the pod after the caller hung up", lambda: _established(desk, 9222) == 0)
        held = _hold(endpoint.port)
        try:
            _until("the held stream in the pod", lambda: _established(desk, 9222) >= 1)
            assert desk.handle is not None
            desk.provider.close_browser(desk.handle.session_id)  # type: ignore[attr-defined]
            # the listener is gone and the agent's stream with it: nothing stays open to 9222 in the pod
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", endpoint.port), timeout=10).close()
            _until("no stream left in the pod after the forwarder closed", lambda: _established(desk, 9222) == 0)
        finally:
            held.close()
        port = desk.browser().port  # a new forwarder after a closed one; the desktop's close ends it
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


def _browser_image() -> str:
    from deskctl.providers.docker.images import connect, find_image

    client = connect(timeout=60)
    try:
        return find_image("browser", client) or ""
    finally:
        client.close()


def test_a_cdp_client_here_drives_the_pods_chromium_through_the_agent(kube_env: FakeKubernetes,
                                                                       deskctl_home: Path) -> None:
    if os.environ.get("DESKCTL_SKIP_BROWSER") == "1":
        pytest.skip("DESKCTL_SKIP_BROWSER=1: the browser image was not built")
    image = _browser_image()
    if not image:
        pytest.fail("no current browser image: run scripts/setup.d/20-docker.sh")
    start = "data:text/html,<title>Start page</title>"
    second = "data:text/html,<title>Second page</title><h1>2</h1>"
    with deskctl.open_desktop(provider="kubernetes", geometry="800x600", start_url=start,
                              provider_options={"image": image}) as desk:
        endpoint = desk.browser()
        assert endpoint.desktop_port == 9222
        assert endpoint.ws_url.startswith(f"ws://127.0.0.1:{endpoint.port}/devtools/browser/")
        _until("the start page", lambda: "Start page" in [t for _, t in desk.browser_pages()])

        navigate_over_cdp(endpoint.ws_url, lambda t: t["title"] == "Start page", second, "Second page")

        third = "http://127.0.0.1:1/third"  # nothing answers there: the page's URL is what matters
        desk.open_url(third, browser="chromium")
        _until("the third page", lambda: any(u == third for u, _ in desk.browser_pages()))
        script = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
                  "'http://127.0.0.1:9222/json/list', timeout=20).read().decode())")
        from deskctl.browser import parse_pages

        def inside() -> list[tuple[str, str]]:
            result = desk.exec(f"python3 -c {shlex.quote(script)}", timeout=60)
            assert result.exit_code == 0, result.stderr
            return sorted(tuple(p) for p in parse_pages(json.loads(result.stdout)))  # type: ignore[misc]

        # the same list inside and here; read at two moments, it may differ while the third page's load fails
        # (its title becomes the host's once Chromium shows its error page): the same list, once it settled
        _until("the same pages inside and here", lambda: inside() == sorted(tuple(p) for p in desk.browser_pages()))
        port = endpoint.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
