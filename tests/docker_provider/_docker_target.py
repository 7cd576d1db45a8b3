"""The docker provider's conformance target (tests/conformance/conftest.py appends
``Target(**DOCKER_TARGET_KWARGS)`` to TARGETS) and the helpers the docker tests share."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

import pytest

from deskctl.providers._x11 import X11Address, read_cookie
from deskctl.providers.base import LABEL_SESSION, RemoteHandle

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["DOCKER_TARGET_KWARGS", "docker_leftovers", "docker_probe_address", "sdk_client"]


def sdk_client() -> Any:
    import docker

    return docker.from_env(timeout=60)


def docker_probe_address(desk: Desktop) -> tuple[X11Address, bytes | None]:
    data = desk.handle.data if desk.handle else {}
    return X11Address(display=":0", socket_path=str(data["socket_path"])), read_cookie(str(data["xauthority"]), 0)


def docker_leftovers(handle: RemoteHandle) -> list[str]:
    """Containers of the session (by id and by label) and its host directory, if any is still there."""
    import docker.errors

    left: list[str] = []
    client = sdk_client()
    try:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.inspect_container(handle.resource_id)
            left.append(f"container {handle.resource_id[:12]}")
        for raw in client.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={handle.session_id}"}):
            if str(raw["Id"]) != handle.resource_id:
                left.append(f"container {str(raw['Id'])[:12]} labelled {handle.session_id}")
    finally:
        client.close()
    for key in ("session_dir", "fb_dir"):
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
    # commands run as the desktop user (uid 1000) by default: the other user of the exec-as-user test is root
    "extra": {"other_user": "root"},
}
