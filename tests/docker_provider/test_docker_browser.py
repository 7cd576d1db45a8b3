"""The DevTools of a docker desktop's Chromium (issue 20 §2) from the host, with no port published: Chromium listens
on the container's 127.0.0.1:9222 (where a verifier inside reads it), and ``desk.browser()`` gives a loopback
endpoint of this process whose connections the engine's exec carries (providers/docker/devtools.py). A real CDP
client (``websockets``, raw CDP) navigates through it and reads the title; the page list equals the verifier's."""

from __future__ import annotations

import json
import os
import socket

import pytest

import deskctl
from unit.test_browser import PATIENCE, _until, navigate_over_cdp

pytestmark = pytest.mark.slow


def _inside(desk: deskctl.Desktop) -> list[tuple[str, str]]:
    """What a verifier script in the container reads at 127.0.0.1:9222/json/list."""
    from deskctl.browser import parse_pages

    script = ("import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
              "'http://127.0.0.1:9222/json/list', timeout=20).read().decode())")
    result = desk.exec(f"python3 -c {json.dumps(script)}", timeout=60)
    assert result.exit_code == 0, result.stderr
    return [tuple(p) for p in parse_pages(json.loads(result.stdout))]


def _relays(desk: deskctl.Desktop) -> int:
    """The DevTools relays (providers/docker/devtools.py RELAY) running in the container."""
    listed = desk.exec("ps -eo args", timeout=60)
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    return sum(1 for line in lines if line.startswith("python3 -c") and "create_connection" in line)


def test_a_cdp_client_on_the_host_drives_the_containers_chromium_through_the_engine() -> None:
    if os.environ.get("DESKCTL_SKIP_BROWSER") == "1":
        pytest.skip("DESKCTL_SKIP_BROWSER=1: the browser image was not built")
    start = "data:text/html,<title>Start page</title>"
    second = "data:text/html,<title>Second page</title><h1>2</h1>"
    with deskctl.open_desktop("docker", geometry="800x600", start_url=start) as desk:
        endpoint = desk.browser()
        assert endpoint.desktop_port == 9222
        assert endpoint.ws_url.startswith(f"ws://127.0.0.1:{endpoint.port}/devtools/browser/")
        # nothing published: the container has no port bindings
        container = desk.handle.data.get("container") or desk.handle.resource_id  # type: ignore[union-attr]
        import docker

        client = docker.from_env()
        try:
            assert not client.api.inspect_container(container)["HostConfig"].get("PortBindings")
        finally:
            client.close()
        _until("the start page", lambda: ("Start page" in [t for _, t in desk.browser_pages()]))

        navigate_over_cdp(endpoint.ws_url, lambda t: t["title"] == "Start page", second, "Second page")

        # open_url hands the URL to the running browser (the same DevTools endpoint): named, or the image's own
        third = "http://127.0.0.1:1/third"  # nothing answers there: the page's URL is what matters
        desk.open_url(third, browser="chromium")
        _until("the third page", lambda: any(u == third for u, _ in desk.browser_pages()))
        fourth = "http://127.0.0.1:1/fourth"
        desk.open_url(fourth)
        _until("the fourth page", lambda: any(u == fourth for u, _ in desk.browser_pages()))
        assert ("data:text/html,<title>Second page</title><h1>2</h1>", "Second page") in desk.browser_pages()
        # what the verifier inside sees is what the host sees (an error page's title changes once, from '' to the
        # host's name, while Chromium shows it: compared until both reads agree)
        assert _until("the same page list inside and out",
                      lambda: sorted(_inside(desk)) == sorted(desk.browser_pages()))
        # a caller that hangs up on a kept-alive connection ends its relay in the container
        held = socket.create_connection(("127.0.0.1", endpoint.port), timeout=PATIENCE)
        held.sendall(b"GET /json/version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n")
        assert held.recv(65536).startswith(b"HTTP/1.1 200")
        assert _until("the held connection's relay", lambda: _relays(desk) >= 1)
        held.close()
        assert _until("no relay left", lambda: _relays(desk) == 0)
        port = endpoint.port
    # the forwarder ends with the desktop: its port no longer answers
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=10).close()


def test_no_browser_in_the_container_is_no_browser() -> None:
    with deskctl.open_desktop("docker", geometry="640x480") as desk:
        with pytest.raises(deskctl.DeskctlError) as caught:
            desk.browser_pages()
        assert caught.value.code == "usage.no_browser"

