"""The docker provider's conformance target (tests/conformance/conftest.py appends
``Target(**DOCKER_TARGET_KWARGS)`` to TARGETS) and the helpers the docker tests share."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from deskctl.providers._x11 import X11Address, read_cookie
from deskctl.providers.base import LABEL_SESSION, RemoteHandle

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = [
    "DOCKER_REMOTE_TARGET_KWARGS",
    "DOCKER_TARGET_KWARGS",
    "docker2_client",
    "docker2_tls_env",
    "docker2_url",
    "docker_leftovers",
    "docker_probe_address",
    "docker_remote_leftovers",
    "sdk_client",
]


def sdk_client() -> Any:
    import docker

    return docker.from_env(timeout=60)


def docker_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    data = desk.handle.data if desk.handle else {}
    return X11Address(display=":0", socket_path=str(data["socket_path"])), read_cookie(str(data["xauthority"]), 0)


def docker_leftovers(handle: RemoteHandle) -> list[str]:
    """Containers of the session (by id and by label) and its host directory, if any is still there."""
    return _leftovers(handle, sdk_client(), ("session_dir", "fb_dir"))


def _leftovers(handle: RemoteHandle, client: Any, paths: tuple[str, ...]) -> list[str]:
    """The session's containers on ``client``'s engine (by id and by label), and the host paths under ``paths``
    in its handle that are still there."""
    import docker.errors

    left: list[str] = []
    try:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.inspect_container(handle.resource_id)
            left.append(f"container {handle.resource_id[:12]}")
        for raw in client.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={handle.session_id}"}):
            if str(raw["Id"]) != handle.resource_id:
                left.append(f"container {str(raw['Id'])[:12]} labelled {handle.session_id}")
    finally:
        client.close()
    for key in paths:
        path = handle.data.get(key)
        if path and os.path.exists(path):
            left.append(str(path))
    return left


DOCKER_TARGET_KWARGS: dict[str, Any] = {
    "name": "docker",
    "open_kwargs": {"provider": "docker"},
    "probe_address": docker_probe_address,
    "leftovers": docker_leftovers,
    "marks": (pytest.mark.docker,),
    # commands run as the desktop user (uid 1000) by default: the other user of the exec-as-user test is root;
    # Chromium's DevTools answer on the container's own 127.0.0.1:9222, where task verifiers look
    "extra": {"other_user": "root", "devtools_port": 9222},
    # the browser tests' desktop: the image with Chromium (scripts/setup.d/20-docker.sh builds it)
    "browser_options": {"variant": "browser"},
}


# -- docker-remote: the same provider on the second engine (scripts/setup.d/25-docker-remote.sh), through the agent --
DOCKER2_ENV_FILE = "/run/deskctl-docker2.env"


def _docker2_setting(key: str) -> str | None:
    """A fact of the second engine: from the environment (scripts/test exports them), else from the file
    25-docker-remote.sh wrote, else None."""
    value = os.environ.get(key)
    if value:
        return value
    with contextlib.suppress(OSError):
        for line in Path(DOCKER2_ENV_FILE).read_text().splitlines():
            name, _, value = line.partition("=")
            if name.strip() == key and value.strip():
                return value.strip()
    return None


def docker2_url() -> str | None:
    """The second engine's address: ``DESKCTL_TEST_DOCKER2``, else what 25-docker-remote.sh wrote, else None."""
    return _docker2_setting("DESKCTL_TEST_DOCKER2")


def docker2_tls_env() -> dict[str, str]:
    """What a Docker client needs in its environment to be let in by the second engine, which demands a client
    certificate (``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``: a root-only folder 25-docker-remote.sh filled); empty
    for an engine started without TLS by an older setup."""
    cert_path = _docker2_setting("DESKCTL_TEST_DOCKER2_CERT_PATH")
    return {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": cert_path} if cert_path else {}


def docker2_client() -> Any:
    """A plain SDK client of the second engine (to look at what deskctl did there, never to drive it), let in with
    its client certificate; deskctl's connect only for the engine's CA (``REQUESTS_CA_BUNDLE`` would replace it)."""
    from deskctl.providers.docker.images import connect

    url = docker2_url()
    if url is None:
        pytest.skip("no second Docker engine: run scripts/setup.d/25-docker-remote.sh")
    return connect(timeout=60, engine=url, environment={**os.environ, **docker2_tls_env()})


@contextlib.contextmanager
def docker2_environment() -> Any:
    """The target's environment: the engine's TLS settings (the engine itself is a provider option), and a clear
    skip (a failure under CI) when the second engine is not there."""
    client = docker2_client()
    try:
        client.ping()
    except Exception as exc:
        pytest.skip(f"the second Docker engine at {docker2_url()} does not answer ({exc}): run "
                    "scripts/setup.d/25-docker-remote.sh")
    finally:
        client.close()
    yield docker2_tls_env()


# The test's eyes inside a remote desktop: the probe window needs the display itself, which listens only on the
# container's unix socket. A relay (python3 is in the image for the agent), started through the Engine API's exec,
# forwards TCP port 6000 of the container's address on the engine's bridge (this machine's) to that socket.
_RELAY = r"""
import socket, threading
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", 6000))
server.listen(16)
def pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
while True:
    client, _ = server.accept()
    display = socket.socket(socket.AF_UNIX)
    display.connect("/tmp/.X11-unix/X0")
    threading.Thread(target=pump, args=(client, display), daemon=True).start()
    threading.Thread(target=pump, args=(display, client), daemon=True).start()
"""
_relays: dict[str, tuple[X11Address, bytes | None]] = {}


def docker_remote_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    import io
    import socket
    import tarfile
    import tempfile
    import time

    data = desk.handle.data if desk.handle else {}
    container = str(data["container"])
    if container in _relays:
        return _relays[container]
    client = docker2_client()
    try:
        ip = client.api.inspect_container(container)["NetworkSettings"]["IPAddress"]
        exec_id = client.api.exec_create(container, ["python3", "-c", _RELAY])["Id"]
        client.api.exec_start(exec_id, detach=True)
        stream, _ = client.api.get_archive(container, "/run/deskctl/xauth/Xauthority")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = next(m for m in tar.getmembers() if m.isreg())
            extracted = tar.extractfile(member)
            assert extracted is not None
            xauthority = extracted.read()
    finally:
        client.close()
    with tempfile.NamedTemporaryFile() as out:
        out.write(xauthority)
        out.flush()
        cookie = read_cookie(out.name, 0)
    deadline = time.monotonic() + 30
    while True:  # the relay listens a moment after its exec starts
        try:
            socket.create_connection((ip, 6000), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    _relays[container] = (X11Address(display=":0", host=ip, port=6000), cookie)
    return _relays[container]


def docker_remote_leftovers(handle: RemoteHandle) -> list[str]:
    """The session's containers on the second engine (by id and by label) and its folder here (the token)."""
    return _leftovers(handle, docker2_client(), ("session_dir", "agent_token_file"))


DOCKER_REMOTE_TARGET_KWARGS: dict[str, Any] = {
    "name": "docker-remote",
    "open_kwargs": {"provider": "docker", "provider_options": {"host": docker2_url() or "tcp://127.0.0.1:23751"}},
    "probe_address": docker_remote_probe_address,
    "leftovers": docker_remote_leftovers,
    "marks": (pytest.mark.docker,),
    "environment": docker2_environment,
    "extra": {"other_user": "root", "devtools_port": 9222},
    # the image with Chromium on the second engine too (scripts/setup.d/25-docker-remote.sh)
    "browser_options": {"variant": "browser"},
}
