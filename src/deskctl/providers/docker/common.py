"""What every part of the docker provider shares: label names, the desktop user, memory sizes, and the small
readers of options and handle data (no Docker SDK, no pydantic: ``deskctl do`` and ``down`` import this)."""

from __future__ import annotations

import os
import time

from deskctl._record import Record, record_fields
from deskctl.errors import (
    ProviderUnreachable,
    UsageError,
)
from deskctl.providers.base import (
    RemoteHandle,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping
    from typing import Any

    from deskctl.spec import DesktopSpec

__all__ = [
    "BASELINE_MEMORY",
    "BROWSER_MEMORY",
    "DEFAULT_API_TIMEOUT",
    "DEFAULT_MEMORY",
    "DESKTOP_USER",
    "LABEL_AGENT",
    "LABEL_DIR",
    "LABEL_DISPLAY",
    "LABEL_FB_DIR",
    "LABEL_PROVIDER",
    "LABEL_TASK_IMAGE",
    "_AGENT_TOKEN_FILE",
    "_SECRETS_ROOT",
    "_XAUTHORITY",
    "DockerHandleData",
    "_check_engine",
    "_container_env",
    "_display_number",
    "_display_of",
    "_exec_user",
    "_host_memory",
    "_is_loopback",
    "_lifetime",
    "_mib",
    "_owner_ids",
    "_truthy",
    "_via_agent",
    "is_remote",
    "parse_memory",
    "tls_context",
]

LABEL_PROVIDER = "deskctl.provider"
LABEL_DIR = "deskctl.docker.dir"
LABEL_FB_DIR = "deskctl.docker.fb"
#: on a desktop reached through its agent (a remote engine's): "1"
LABEL_AGENT = "deskctl.docker.agent"
#: the X display number of the desktop in its container
LABEL_DISPLAY = "deskctl.docker.display"
#: on a desktop that runs a task image (not deskctl's desktop image): "1"
LABEL_TASK_IMAGE = "deskctl.docker.task_image"
#: container uid of the desktop user (see data/docker/Dockerfile)
DESKTOP_USER = "1000:1000"
DEFAULT_MEMORY = "1g"
#: seconds an Engine API call may take (the ``api_timeout`` option's default)
DEFAULT_API_TIMEOUT = 60.0
#: what Xvfb, a window manager and the X client libraries need besides the framebuffer
BASELINE_MEMORY = 48 * 2**20
BROWSER_MEMORY = 512 * 2**20
#: where the display's cookie is in the container (a read-only bind of the host's file)
_XAUTHORITY = "/run/deskctl/xauth/Xauthority"
#: where a remote desktop's secrets go in the container (the agent reads agent/token, Xvfb xauth/Xauthority)
_SECRETS_ROOT = "/run/deskctl"
_AGENT_TOKEN_FILE = "agent-token"  # beside the session's other files on this machine


def _check_engine(engine: str, provider: str) -> str:
    if engine and not engine.startswith(("unix://", "tcp://", "ssh://")):
        raise UsageError(f"the Docker engine {engine!r} is not a unix://, tcp:// or ssh:// URL",
                         code="usage.bad_option", provider=provider,
                         remedy="name it as DOCKER_HOST does, for example tcp://10.0.0.5:2375")
    return engine


def is_remote(engine: str) -> bool:
    """Whether desktops on ``engine`` are reached through their agent (nothing shared through host folders)."""
    return engine.startswith(("tcp://", "ssh://"))


#: a memory size (matched case-insensitively; `re` is imported where a size is parsed: `deskctl do` never is)
_MEMORY_PATTERN = r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$"
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_memory(value: Any) -> int | None:
    """``"512m"``, ``"1g"``, ``"1.5GiB"`` or bytes -> bytes; ``None``/``"none"``/0 -> no limit."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "unlimited")):
        return None
    if isinstance(value, bool):
        raise UsageError(f"memory {value!r} is not a size such as 512m or 2g", code="usage.bad_option")
    if isinstance(value, int | float):
        return int(value) or None
    import re

    match = re.match(_MEMORY_PATTERN, str(value), re.IGNORECASE)
    if not match:
        raise UsageError(f"memory {value!r} is not a size such as 512m or 2g", code="usage.bad_option",
                         provider="docker")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()]) or None


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _container_env(options: Mapping[str, Any], provider: str) -> dict[str, str]:
    """The ``env`` option: variables every process of the container gets (Harbor's task environment)."""
    from collections.abc import Mapping

    from deskctl.providers._guest import check_exec_options

    env = options.get("env") or {}
    if not isinstance(env, Mapping):
        raise UsageError(f"env {env!r} is not a mapping of variable names to values", code="usage.bad_option",
                         provider=provider, remedy='env={"LANG": "zh_CN.UTF-8"}')
    return check_exec_options(env, None, provider)


def _display_number(value: Any, provider: str) -> int:
    """The ``display`` option (``1``, ``"1"`` or ``":1"``) as the X display number."""
    text = str(value).strip().lstrip(":") if not isinstance(value, bool) else ""
    if not text.isdigit() or int(text) > 999:
        raise UsageError(f"display {value!r} is not an X display number such as 0 or 1", code="usage.bad_option",
                         provider=provider, remedy="display=1 is the display Harbor's computer-1 agent uses")
    return int(text)


def _display_of(handle: RemoteHandle) -> str:
    """The desktop's display as ``:N`` (``:0`` for handles made before the number was recorded)."""
    return DockerHandleData.of(handle).display


def _exec_user(handle: RemoteHandle) -> str:
    """Who runs a command by default: the desktop user, or ``""`` (the container's own user)."""
    return DockerHandleData.of(handle).exec_user


def _owner_ids(owner: str) -> tuple[int, int]:
    uid, _, gid = owner.partition(":")
    return int(uid), int(gid or uid)


def _via_agent(handle: RemoteHandle) -> bool:
    """A desktop on a remote engine: reached through its agent, nothing shared through host folders."""
    return handle.labels.get(LABEL_AGENT) == "1" or DockerHandleData.of(handle).via_agent


def _truthy(value: Any) -> bool:
    """An option that may come from the command line as text (``-o reaper=false``)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def _lifetime(spec: DesktopSpec, labels: Mapping[str, str]) -> float | None:
    """Seconds until the session's expiry (its ``deskctl.expires`` label, else its TTL), or None."""
    from deskctl.providers.base import LABEL_EXPIRES

    expires = labels.get(LABEL_EXPIRES)
    if expires:
        try:
            return max(0.0, float(expires) - time.time())
        except ValueError:
            pass
    return spec.ttl_seconds or None


def _host_memory(field: str, engine: str) -> int | None:
    """``MemTotal`` or ``MemAvailable`` of this host (where the local daemon runs its containers), or None."""
    if is_remote(engine):
        return None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class DockerHandleData(Record, frozen=True):
    """The docker provider's ``handle.data``, typed (a record, :mod:`deskctl._record`: ``deskctl do`` and ``down``
    read it, and they import neither pydantic nor dataclasses). A row written by an older deskctl loads too: each
    field it may lack has the value that version meant (display ``:0``, the desktop user runs commands and owns
    copied files, the environment's engine), and keys this version does not know are ignored."""

    container: str = ""
    name: str = ""
    image: str | None = None
    display: str = ":0"
    network: str | None = None
    memory: int | None = None
    watched: bool = False
    exec_user: str = DESKTOP_USER
    file_owner: str = DESKTOP_USER
    task_image: bool = False
    #: the engine it runs on when not the environment's (``""``: ``DOCKER_HOST`` or the local socket)
    engine: str = ""
    # a local desktop: the host folders it shares
    socket_path: str = ""
    xauthority: str = ""
    session_dir: str = ""
    fb_dir: str = ""
    framebuffer: str = ""
    # a remote engine's desktop: where its agent answers
    agent_host: str = ""
    agent_port: int | None = None
    agent_token_file: str = ""
    #: the container's state when listed (``list_owned``)
    state: str | None = None

    @classmethod
    def of(cls, handle: RemoteHandle) -> DockerHandleData:
        """The handle's data; the container and its name default to the handle's ids (the oldest rows)."""
        known = set(record_fields(cls))
        values = {k: v for k, v in handle.data.items() if k in known and v is not None}
        values.setdefault("container", handle.resource_id)
        values.setdefault("name", handle.session_id)
        values["display"] = str(values.get("display") or ":0")
        return cls(**values)

    @property
    def via_agent(self) -> bool:
        """Reached through its agent (a remote engine's desktop): nothing is shared through host folders."""
        return bool(self.agent_host)

    def agent_endpoint(self) -> tuple[str, int]:
        """Where its agent answers; :class:`~deskctl.errors.ProviderUnreachable` when the row records none."""
        if not self.agent_host or self.agent_port is None:
            raise ProviderUnreachable(f"the handle of {self.name} records no agent address (host and port)")
        return self.agent_host, int(self.agent_port)

    def x11_files(self) -> tuple[str, str]:
        """(X socket, Xauthority file) of a local desktop; :class:`~deskctl.errors.ProviderUnreachable` when the
        row records none (a remote engine's desktop has neither)."""
        if not self.socket_path or not self.xauthority:
            raise ProviderUnreachable(f"the handle of {self.name} records no X socket or X authority file")
        return self.socket_path, self.xauthority


def tls_context(cert_path: str, verify: bool) -> ssl.SSLContext:
    """The Docker CLI's TLS to an engine (:class:`~.engine_api.EngineApi`'s): the engine checked against ``ca.pem``
    (when verifying), ``cert.pem``/``key.pem`` sent when present."""
    import ssl

    ca = os.path.join(cert_path, "ca.pem")
    if verify:
        context = ssl.create_default_context(cafile=ca if os.path.exists(ca) else None)
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert, key = os.path.join(cert_path, "cert.pem"), os.path.join(cert_path, "key.pem")
    if os.path.exists(cert) and os.path.exists(key):
        context.load_cert_chain(cert, key)
    return context
