"""The kubernetes provider's conformance target against the loopback fake (tests/fakes/kube.py): the conformance
conftest appends ``Target(**KUBE_TARGET_KWARGS)``. Not a test module.

Every test gets a fresh fake whose pods are real containers of the current desktop image (its agent inside);
the whole contract, the harness part included, runs through the agent. The probe reaches a pod's display
through the fake's own plumbing (the pod's X socket directory, bind-mounted on this host, and the cookie the
image made, read out of the container)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

import pytest

from deskctl.providers._x11 import X11Address, read_cookie
from deskctl.providers.base import RemoteHandle
from fakes.kube import FakeKubernetes

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["KUBE_TARGET_KWARGS", "desktop_image", "kube_environment", "kube_leftovers", "kube_probe_address"]

#: where the desktop image's entrypoint keeps the cookie it makes when no host wrote one (agent mode)
IMAGE_XAUTHORITY = "/tmp/deskctl-Xauthority"

_running: list[FakeKubernetes] = []


@cache
def desktop_image(variant: str = "minimal") -> str:
    """The current desktop image of ``variant`` on the local engine (scripts/setup.d/20-docker.sh builds it); a
    placeholder when there is none, so that the pods fail with ErrImagePull and say so. (No second tag to
    protect it from other checkouts' `deskctl image prune`: a prune removes only its own installation's builds,
    and a second tag would keep every superseded build from ever being pruned.)"""
    from deskctl.providers.docker.images import connect, find_image

    try:
        client = connect(timeout=60)
        try:
            return find_image(variant, client) or "deskctl-desktop:not-built"
        finally:
            client.close()
    except Exception:
        return "deskctl-desktop:not-built"


@contextlib.contextmanager
def kube_environment() -> Iterator[Mapping[str, str]]:
    fake = FakeKubernetes().start()
    _running.append(fake)
    try:
        yield fake.env()
    finally:
        _running.remove(fake)
        fake.stop()


def current() -> FakeKubernetes:
    if not _running:
        raise RuntimeError("no kubernetes fake is running (the target's environment was not entered)")
    return _running[-1]


def kube_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    assert desk.handle is not None
    fake = current()
    pod = str(desk.handle.data["pod"])
    with tempfile.NamedTemporaryFile(prefix="kube-xauth-") as fh:
        fh.write(fake.read_file(pod, IMAGE_XAUTHORITY))
        fh.flush()
        cookie = read_cookie(fh.name, 0)
    return X11Address(display=":0", socket_path=str(fake.x11_socket_dir(pod) / "X0")), cookie


def kube_leftovers(handle: RemoteHandle) -> list[str]:
    """The session's pod, secret and container, if any is still there."""
    fake = current()
    pod, secret = str(handle.data.get("pod") or ""), str(handle.data.get("secret_name") or "")
    left = [f"pod {pod}" for name in fake.names("pods") if name == pod]
    left += [f"secret {secret}" for name in fake.names("secrets") if name == secret]
    left += [f"container {c[:12]}" for c in fake.containers()]
    return left


KUBE_TARGET_KWARGS: dict[str, Any] = {
    "name": "kubernetes",
    "open_kwargs": {"provider": "kubernetes", "provider_options": {"image": desktop_image()}},
    "probe_address": kube_probe_address,
    "leftovers": kube_leftovers,
    "environment": kube_environment,
    "marks": (pytest.mark.docker,),
    # the pod runs as the desktop user with no privilege escalation (runAsNonRoot, allowPrivilegeEscalation
    # false, every capability dropped): the agent cannot become another user, and says so (usage.unsupported)
    "extra": {"other_user": "root", "devtools_port": 9222,
              "xfail": {"test_exec_as_another_user": "a pod without privilege escalation has one user"}},
    # the browser tests' pod: the image with Chromium (DevTools on the pod's 127.0.0.1:9222)
    "browser_options": {"image": desktop_image("browser")},
}
