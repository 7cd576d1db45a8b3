"""The DevTools forwarder of a docker desktop (providers/docker/devtools.py) on a remote engine (the second dockerd,
TLS on loopback TCP): every connection carried by an exec over the engine's TLS connection, byte for byte."""

from __future__ import annotations

import json
import shlex
import time

import pytest

import deskctl
from docker_provider.test_remote import engine, engine_tls, sdk2, sweep_remote

pytestmark = pytest.mark.docker

# the second engine's fixtures (its URL, its TLS client variables, the sweep of what a failed test left there)
__all__ = ["engine", "engine_tls", "sdk2", "sweep_remote"]


def test_browser_endpoint_reaches_the_remote_containers_loopback_over_tls(engine: str) -> None:
    """The DevTools forwarder (providers/docker/devtools.py) over the remote engine's TLS connection, byte for
    byte: a stand-in for Chromium's DevTools (Python's http.server on the container's 127.0.0.1:9222, serving a
    /json/version, a /json/list and a mebibyte of random bytes) is read through ``desk.browser()``'s endpoint
    on this machine's loopback, with nothing published for it."""
    import hashlib
    import urllib.request

    with deskctl.open_desktop("docker", geometry="640x480", provider_options={"host": engine}) as desk:
        pages = [{"type": "page", "url": "https://example.invalid/a", "title": "A"},
                 {"type": "service_worker", "url": "https://example.invalid/sw.js", "title": ""}]
        version = {"webSocketDebuggerUrl": "ws://127.0.0.1:9222/devtools/browser/x-1"}
        setup = (f"mkdir -p /tmp/dt/json && cd /tmp/dt && printf %s {shlex.quote(json.dumps(version))} > json/version"
                 f" && printf %s {shlex.quote(json.dumps(pages))} > json/list && head -c 1048576 /dev/urandom > blob"
                 " && sha256sum blob | cut -d' ' -f1")
        made = desk.exec(setup, timeout=60)
        assert made.exit_code == 0, made.stderr
        digest = made.stdout.strip()
        desk.exec("cd /tmp/dt && python3 -m http.server 9222 --bind 127.0.0.1", background=True)

        deadline = time.monotonic() + 120
        while True:
            try:
                endpoint = desk.browser()
                break
            except deskctl.DeskctlError as exc:
                assert exc.code == "usage.no_browser" and time.monotonic() < deadline, exc
                time.sleep(0.5)
        assert endpoint.desktop_port == 9222 and endpoint.port != 9222
        assert endpoint.ws_url == f"ws://127.0.0.1:{endpoint.port}/devtools/browser/x-1"
        assert desk.browser_pages() == [("https://example.invalid/a", "A")]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{endpoint.http_url}/blob", timeout=120) as response:
            assert hashlib.sha256(response.read()).hexdigest() == digest
