"""The ``docker`` provider: an isolated desktop per container on a local Docker engine, driven at X11 speed.

How a desktop is made (all through the Docker Engine API with the ``docker`` SDK; no CLI output is parsed):

* the container is named after the session id and carries the deskctl labels; it runs the packaged desktop
  image (``deskctl image build``) as a non-root user, with ``network: none`` unless
  ``provider_options["network"]`` names one, and the memory/CPU limits of ``provider_options``;
* Xvfb in the container listens only on the unix socket ``/tmp/.X11-unix/X0``; that directory is a bind mount
  of ``<runtime_dir>/docker/<session>/x11`` on the host, and the server demands an MIT-MAGIC-COOKIE that the
  host wrote (``.../xauth/Xauthority``, mounted read-only). No TCP port is open anywhere;
* input and capture go through the shared X11 driver over that socket: one connection per desktop, no
  ``docker exec`` per action. :meth:`DockerProvider.exec` uses the Engine API exec, stdout and stderr apart
  (``env`` and ``user`` are its fields); ``upload``/``download`` stream tars through its archive endpoints.

On a remote engine (provider option ``host``, else ``DOCKER_HOST``, naming ``tcp://``): nothing is shared
through host directories. The container runs the in-desktop agent (``DESKCTL_SERVE_AGENT=1``, see
:mod:`deskctl.agent`) on a port the engine publishes on an ephemeral host port, and input and capture go through
:class:`deskctl.agent.client.AgentDriver`. Its session token (random, per session) and its display's cookie are
written into the created container with the archive endpoint before it starts: the token never travels in an
environment variable, a label or a log. This process keeps the token in a 0600 file of its runtime directory so
that another of its processes (``deskctl do`` after ``deskctl up``) reconnects; a machine without that file
reads it back from the container through the Engine API. ``exec`` and files use the Engine API as locally.
``ssh://`` engines are refused (``compat.docker_ssh``): the agent's port would have to be forwarded through
the SSH connection, which is not done yet.

Orphans: before a container is created, its name is registered with a watcher process (one per owner
process, testcontainers' Ryuk pattern) that holds the read end of a pipe whose write end only the owner has.
When the owner dies, even by SIGKILL, the kernel closes the pipe; the watcher then force-removes every
container still registered. A destroyed or detached (``deskctl up``) desktop is unregistered. ``deskctl reap``
finds the rest by label (:meth:`DockerProvider.list_owned`).

The desktop image (its build, the content hash of its inputs, listing and pruning) is :mod:`.images`, beside
this module.

Provider options (``provider_options``): ``image`` (a tag; default: the current ``deskctl-desktop`` image of
the variant), ``variant`` (``minimal`` | ``browser``; ``browser`` is chosen for a start URL), ``memory``
(``"1g"``, ``"512m"``, bytes, or ``"none"``; default 1g), ``cpus`` (float), ``network`` (default ``none``),
``shm_size``, ``pids_limit``, ``reaper`` (default true), ``expiry_grace`` (seconds after its expiry at which a
desktop stops itself; default 60), ``host`` (the Docker engine's URL, as ``DOCKER_HOST``), ``agent_host`` (the
address at which this machine reaches a remote engine's published ports; default: the host of its URL; the
network of a remote desktop defaults to ``bridge``, as its agent needs a published port).
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from deskctl._redact import redact
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    DeskctlError,
    InfrastructureError,
    NotFound,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_SESSION,
    Capabilities,
    ExecResult,
    RawFrame,
    RemoteHandle,
    Screenshot,
)

if TYPE_CHECKING:
    import docker

    from deskctl.agent.client import AgentDriver
    from deskctl.checks import CheckResult
    from deskctl.providers._x11 import X11Driver
    from deskctl.providers._x11provider import DisplayDriver
    from deskctl.spec import DesktopSpec, Geometry

__all__ = ["LABEL_AGENT", "DockerProvider", "is_remote", "parse_memory"]

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

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_memory(value: Any) -> int | None:
    """``"512m"``, ``"1g"``, ``"1.5GiB"`` or bytes -> bytes; ``None``/``"none"``/0 -> no limit."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "unlimited")):
        return None
    if isinstance(value, bool):
        raise UsageError(f"memory {value!r} is not a size such as 512m or 2g", code="usage.bad_option")
    if isinstance(value, int | float):
        return int(value) or None
    match = _MEMORY_RE.match(str(value))
    if not match:
        raise UsageError(f"memory {value!r} is not a size such as 512m or 2g", code="usage.bad_option",
                         provider="docker")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()]) or None


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


# -- the owner watcher (Ryuk pattern) ----------------------------------------------------------------------------


class _Watcher:
    """The per-process link to the watcher process: ``add`` before create, ``forget`` after destroy/detach."""

    _lock = threading.Lock()
    _instance: ClassVar[_Watcher | None] = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        read_end, write_end = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from deskctl.providers.docker import _watch; _watch()"],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True, env=env,
            )
        finally:
            os.close(read_end)
        self._pipe = os.fdopen(write_end, "w", buffering=1)
        self._write_lock = threading.Lock()

    @classmethod
    def get(cls) -> _Watcher:
        with cls._lock:
            current = cls._instance
            if current is None or current.pid != os.getpid() or current.process.poll() is not None:
                current = cls._instance = cls()
            return current

    def _send(self, line: str) -> None:
        with self._write_lock, contextlib.suppress(OSError, ValueError):
            self._pipe.write(line + "\n")

    def add(self, name: str, engine: str = "") -> None:
        self._send(f"+{name}\t{engine}")

    def forget(self, name: str) -> None:
        self._send(f"-{name}")

    @classmethod
    def forget_if_running(cls, name: str) -> None:
        with cls._lock:
            current = cls._instance
        if current is not None and current.pid == os.getpid():
            current.forget(name)


def _watch() -> None:
    """Body of the watcher process: keep the set of registered names until stdin closes, then remove them."""
    import signal

    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    names: dict[str, str] = {}  # name -> the engine it runs on ("": the environment's)
    for raw in sys.stdin:
        line = raw.strip()
        if line.startswith("+"):
            name, _, engine = line[1:].partition("\t")
            names[name] = engine
        elif line.startswith("-"):
            names.pop(line[1:], None)
    if not names:
        return
    provider = DockerProvider()
    try:
        for name, engine in names.items():
            with contextlib.suppress(DeskctlError):
                provider._remove_by_name(name, engine)
    finally:
        provider.close()


# -- the provider ----------------------------------------------------------------------------------------------


class DockerProvider(X11Provider):
    """Desktops in containers on the local Docker engine; see the module docstring."""

    name: ClassVar[str] = "docker"
    option_names: ClassVar[frozenset[str] | None] = frozenset({
        "image", "variant", "memory", "cpus", "network", "shm_size", "pids_limit", "reaper", "expiry_grace",
        "api_timeout", "host", "agent_host", "display", "hardened", "locale", "timezone", "fonts", "build_network",
        "env"})
    capabilities: ClassVar[Capabilities] = Capabilities(
        platforms=frozenset({Platform.UBUNTU}),
        settable_geometry=True,
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=False,  # the container stops itself after its TTL, but removal is the reaper's job
        isolation="container",
        start_url=True,
        local=True,
        billing="free",
        cursor_position=True,
        clipboard=True,
        windows=True,
    )

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        from deskctl.providers.docker.layers import check_extras

        if options.get("host"):
            _check_engine(str(options["host"]), cls.name)
        _display_number(options.get("display", 0), cls.name)
        check_extras(options, cls.name)
        _container_env(options, cls.name)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._client: docker.DockerClient | None = None
        self._client_lock = threading.Lock()
        self._engine_clients: dict[str, docker.DockerClient] = {}  # engines other than this provider's own
        self._tokens: dict[str, str] = {}  # session -> its agent's token (remote desktops), never written out
        self._framebuffers: dict[str, _Framebuffer] = {}  # guarded by the base's _drivers_lock

    # -- plumbing ------------------------------------------------------------------------------------------------
    @property
    def engine(self) -> str:
        """The Docker engine of this provider: the ``host`` option, else ``DOCKER_HOST``; ``""`` is the local
        socket. Raises ``usage.bad_option`` for a URL that names no engine."""
        return _check_engine(str(self.options.get("host") or os.environ.get("DOCKER_HOST") or ""), self.name)

    @property
    def client(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                from deskctl.providers.docker.images import connect

                self._client = connect(timeout=float(self.options.get("api_timeout", 60)),
                                       engine=self.options.get("host") or None)
            return self._client

    def _client_on(self, engine: str) -> docker.DockerClient:
        """The client of ``engine`` (a handle's: a desktop made through another engine than this provider's
        is reached where it runs, for example by the reaper or the owner watcher)."""
        if not engine or engine == self.engine:
            return self.client
        with self._client_lock:
            client = self._engine_clients.get(engine)
            if client is None:
                from deskctl.providers.docker.images import connect

                client = self._engine_clients[engine] = connect(
                    timeout=float(self.options.get("api_timeout", 60)), engine=engine)
            return client

    def _engine_of(self, handle: RemoteHandle) -> str:
        """The engine a desktop runs on: the one its handle names (a remote engine, or one given as ``host``),
        else this provider's, as before engines were recorded."""
        return str(handle.data.get("engine") or self.engine)

    @contextlib.contextmanager
    def _errors(self, doing: str, engine: str | None = None) -> Iterator[None]:
        from deskctl.providers.docker.images import docker_errors

        with docker_errors(doing, provider=self.name, engine=engine or self.options.get("host") or None):
            yield

    def _option(self, spec: DesktopSpec | None, key: str, default: Any = None) -> Any:
        if spec is not None and key in spec.provider_options:
            return spec.provider_options[key]
        return self.options.get(key, default)

    def _variant(self, spec: DesktopSpec) -> str:
        variant = self._option(spec, "variant")
        if variant is None:
            variant = "browser" if spec.start_url else "minimal"
        from deskctl.providers.docker.images import VARIANTS

        if variant not in VARIANTS:
            raise UsageError(f"unknown image variant {variant!r}; allowed: {', '.join(VARIANTS)}",
                             code="usage.bad_option", provider=self.name)
        if spec.start_url and variant != "browser" and not self._option(spec, "image"):
            raise UsageError(f"a start URL needs the browser variant, not {variant!r}", code="usage.bad_option",
                             provider=self.name, remedy="drop the variant option, or use variant=browser")
        return str(variant)

    def _resolve_image(self, spec: DesktopSpec) -> str:
        """The image tag to run; raises ``preflight.image_missing`` with the build command when there is none."""
        image = self._option(spec, "image")
        if image:
            try:
                with self._errors(f"inspect the image {image}"):
                    self.client.api.inspect_image(image)  # type: ignore[no-untyped-call]
            except (NotFound, PreflightError) as exc:
                raise PreflightError(f"the image {image} is not on this Docker engine",
                                     code="preflight.image_missing", provider=self.name,
                                     remedy=f"docker pull {image}, or build one with `deskctl image build`") from exc
            return str(image)
        from deskctl.providers.docker.images import find_image

        variant = self._variant(spec)
        found = find_image(variant, self.client)
        if found is None:
            flag = "" if variant == "minimal" else f" --variant {variant}"
            local_base = self._local_base()
            # the image is built on the engine that runs the desktop
            build = f"DOCKER_HOST={redact(self.engine)} deskctl image build" if self.options.get("host") \
                else "deskctl image build"
            if local_base is not None:
                remedy = f"{build}{flag} --base {local_base}   (the base is here: about a minute)"
            else:
                remedy = (f"{build}{flag}   (pulls debian:bookworm-slim; no registry? make a local "
                          "base first, see docs/docker.md 'Offline base')")
            raise PreflightError(
                f"no {variant} desktop image built from this version of deskctl is on this Docker engine",
                code="preflight.image_missing", provider=self.name, remedy=remedy,
            )
        return found

    def _local_base(self) -> str | None:
        """A base image ``deskctl image build`` can use without a registry, when one is here."""
        from deskctl.providers.docker.images import DEFAULT_BASE

        for base in ("deskctl-base:bookworm", DEFAULT_BASE):
            with contextlib.suppress(DeskctlError):
                with self._errors(f"inspect the image {base}"):
                    self.client.api.inspect_image(base)  # type: ignore[no-untyped-call]
                return base
        return None

    def _memory(self, spec: DesktopSpec | None) -> int | None:
        return parse_memory(self._option(spec, "memory", DEFAULT_MEMORY))

    @staticmethod
    def _needed_memory(spec: DesktopSpec, variant: str) -> int:
        geometry = spec.geometry
        width, height = (geometry.width, geometry.height) if geometry else (1024, 768)
        framebuffer = width * height * 4
        return BASELINE_MEMORY + framebuffer + (BROWSER_MEMORY if variant == "browser" else 0)

    # -- preflight -----------------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)
        # platform and geometry are checked by the preflight runner from ``capabilities``
        try:
            engine = self.engine
            if is_remote(engine):
                self._check_remote(spec, engine)
                checks.add("pass", "docker.engine", f"remote engine {redact(engine)}: the desktop is reached "
                           "through its agent on a published port")
        except DeskctlError as exc:
            checks.add_error(exc, "docker.engine")
            return checks.results
        checks.start()
        try:
            self._client = None
            with self._errors("ping the Docker daemon"):
                from deskctl.providers.docker.images import connect

                client = connect(timeout=5, engine=self.options.get("host") or None)
                version = client.api.version()
            # the short timeout is for this ping only: the client is kept for create, exec, copies and destroy
            client.api.timeout = int(self.options.get("api_timeout", 60))
            self._client = client
        except DeskctlError as exc:
            checks.add_error(exc, "docker.daemon")
            return checks.results
        checks.add("pass", "docker.daemon", f"Docker {version.get('Version', '?')} answers")

        checks.start()
        try:
            variant = self._variant(spec)
            image = self._resolve_image(spec)
            checks.add("pass", "docker.image", f"image {image}")
        except DeskctlError as exc:
            checks.add_error(exc, "docker.image")
            variant = "minimal"

        checks.start()
        try:
            limit = self._memory(spec)
            needed = self._needed_memory(spec, variant)
            total = _host_memory("MemTotal", self.engine) or 0
            if limit is not None and limit < needed:
                checks.add("fail", "docker.memory",
                           f"memory limit {_mib(limit)} is below the {_mib(needed)} a {spec.geometry_label()} "
                           f"{variant} desktop needs", f"set provider_options memory to at least {_mib(needed)}")
            elif total and (limit or needed) > total:
                checks.add("fail", "docker.memory",
                           f"the request ({_mib(limit or needed)}) is more than the Docker host has ({_mib(total)})",
                           "ask for less memory (provider_options memory)")
            else:
                available = _host_memory("MemAvailable", self.engine)
                if available is not None and needed > available:
                    checks.add("warn", "docker.memory",
                               f"only {_mib(available)} free on this host; a desktop needs about {_mib(needed)}",
                               "close other desktops or ask for a smaller geometry")
                else:
                    checks.add("pass", "docker.memory", f"limit {_mib(limit) if limit else 'none'}, needs about "
                               f"{_mib(needed)}")
        except UsageError as exc:
            checks.add("fail", "docker.memory", exc.message, "use a size such as 512m or 2g")

        network = str(self._option(spec, "network", "none"))
        if network not in ("none", "bridge", "host"):
            checks.start()
            try:
                with self._errors(f"inspect the network {network}"):
                    self.client.api.inspect_network(network)
                checks.add("pass", "docker.network", f"network {network}")
            except DeskctlError as exc:
                checks.add("fail", "docker.network", f"network {network!r}: {exc.message}",
                           f"docker network create {network}")
        return checks.results

    def _check_remote(self, spec: DesktopSpec | None, engine: str) -> None:
        """What a desktop on a remote engine cannot have: an ``ssh://`` engine, a network without ports."""
        if engine.startswith("ssh://"):
            from deskctl.errors import CompatError

            raise CompatError(
                f"docker desktops on an ssh:// engine ({redact(engine)}) are not supported: the desktop's "
                "agent port would have to be forwarded through the SSH connection", code="compat.docker_ssh",
                provider=self.name, remedy="expose the engine on tcp:// to this machine (for example `ssh -L "
                "2375:/var/run/docker.sock HOST`, then host=tcp://127.0.0.1:2375 and agent_host=HOST)")
        network = str(self._option(spec, "network", "bridge"))
        if network in ("none", "host"):
            raise UsageError(f"a desktop on a remote engine needs a network with published ports, not {network!r}",
                             code="usage.bad_option", provider=self.name,
                             remedy="leave the network option out (bridge), or name a user-defined network")

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def _session_dir(self, session_id: str) -> Path:
        from deskctl.paths import runtime_dir

        return runtime_dir() / "docker" / session_id

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        """In four steps: what to run (:meth:`_plan`), the host folders a local desktop shares with this
        machine (:meth:`_host_dirs`), the container's configuration (:meth:`_container_config`), and the
        container made and started (:meth:`_start`, which removes whatever it made when a step fails)."""
        plan = self._plan(spec, session_id)
        dirs = None if plan.remote else self._host_dirs(session_id, plan.display)
        config = self._container_config(spec, plan, labels, dirs)
        return self._start(spec, plan, config, dirs, labels)

    def _plan(self, spec: DesktopSpec, session_id: str) -> _Plan:
        """Resolve the image, the engine and the limits; nothing is made yet."""
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+", session_id):
            raise UsageError(f"session id {session_id!r} is not a valid container name", provider=self.name)
        engine = self.engine
        remote = is_remote(engine)
        if remote:
            self._check_remote(spec, engine)
        geometry = spec.geometry
        if geometry is None:
            from deskctl.spec import Geometry

            geometry = Geometry(width=1024, height=768)
        image = self._resolve_image(spec)
        variant = self._variant(spec)
        image, task_image = self._desktop_image(spec, image, remote)
        if task_image:
            variant = "minimal"  # what the memory check assumes: the task brings its own apps
        memory = self._memory(spec)
        needed = self._needed_memory(spec, variant)
        if memory is not None and memory < needed:
            raise CapacityUnavailable(
                f"memory limit {_mib(memory)} is below the {_mib(needed)} a {geometry} {variant} desktop needs",
                provider=self.name, remedy=f"set provider_options memory to at least {_mib(needed)}")
        network = str(self._option(spec, "network", "bridge" if remote else "none"))
        if self._state(session_id) is not None:  # never touch (or overwrite the cookie of) someone else's desktop
            raise UsageError(f"a container named {session_id} already exists", code="usage.conflict",
                             provider=self.name)
        hardened = _truthy(self._option(spec, "hardened", True))
        return _Plan(session_id=session_id, engine=engine, remote=remote, geometry=geometry, image=image,
                     variant=variant, memory=memory, cpus=self._option(spec, "cpus"), network=network,
                     task_image=task_image, display=_display_number(self._option(spec, "display", 0), self.name),
                     hardened=hardened, user=DESKTOP_USER if hardened else None)

    def _desktop_image(self, spec: DesktopSpec, image: str, remote: bool) -> tuple[str, bool]:
        """The image to run for ``image`` and whether it is a *task image* (not a deskctl desktop image: Xvfb is
        started in it by ``docker exec``, its entrypoint and user are its own). A task image without Xvfb, or
        any image without the fonts, locale or time zones the options ask for, runs as a layer built over it
        (:mod:`.layers`, once per content)."""
        from deskctl.providers.docker.images import LABEL_VARIANT
        from deskctl.providers.docker.layers import check_extras, ensure_desktop_image

        extras = check_extras({**self.options, **spec.provider_options}, self.name)
        with self._errors(f"inspect the image {image}"):
            info = self.client.api.inspect_image(image)  # type: ignore[no-untyped-call]
        task_image = LABEL_VARIANT not in ((info.get("Config") or {}).get("Labels") or {})
        if task_image:
            if remote:
                raise UsageError(f"the image {image} is not a deskctl desktop image: on a remote engine a desktop "
                                 "runs deskctl's own image (its agent is in it)", code="usage.bad_image",
                                 provider=self.name, remedy="use a local engine for task images")
            if spec.start_url or spec.window_manager:
                raise UsageError(f"a start URL or window manager needs deskctl's desktop image, not {image}",
                                 code="usage.bad_option", provider=self.name,
                                 remedy="start the task's own browser or window manager from the task")
        if not task_image and not extras:
            return image, False
        if remote:
            raise UsageError("fonts, locale and timezone need a local engine (a layer is built over the image)",
                             code="usage.bad_option", provider=self.name)
        built = ensure_desktop_image(self.client, image, extras,
                                     network_mode=self._option(spec, "build_network") or None)
        return built.image, task_image

    def _host_dirs(self, session_id: str, display: int = 0) -> _HostDirs:
        """The folders a local desktop shares with this machine: its X socket's, its cookie's (written here) and
        its framebuffer file's."""
        from deskctl.providers._x11 import new_cookie, write_xauthority

        session_dir = self._session_dir(session_id)
        x11_dir, auth_dir = session_dir / "x11", session_dir / "xauth"
        if len(os.fsencode(x11_dir / f"X{display}")) > 107:  # sun_path holds 108 bytes with its NUL
            from deskctl.errors import ConfigInvalid

            raise ConfigInvalid(f"the X socket path {x11_dir / f'X{display}'} is too long for a unix socket",
                                provider=self.name, remedy="set DESKCTL_HOME to a shorter directory")
        for path in (x11_dir, auth_dir):
            path.mkdir(parents=True, exist_ok=True)
        # The container user (uid 1000) makes its socket in x11/ and reads the cookie; the parent runtime
        # directory is 0700, so nobody else on the host can reach either. Not sticky: the host owner must be
        # able to delete the socket the container made.
        os.chmod(session_dir, 0o755)
        os.chmod(x11_dir, 0o777)
        os.chmod(auth_dir, 0o755)
        cookie_file = write_xauthority(auth_dir / "Xauthority", display, new_cookie())
        os.chmod(cookie_file, 0o644)
        fb_dir = _framebuffer_root(session_dir) / session_id
        fb_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(fb_dir, 0o777)
        return _HostDirs(session_dir=session_dir, x11_dir=x11_dir, cookie_file=cookie_file, fb_dir=fb_dir)

    def _container_config(self, spec: DesktopSpec, plan: _Plan, labels: Mapping[str, str],
                          dirs: _HostDirs | None) -> _ContainerConfig:
        """Labels, environment and host configuration of the container (binds for a local desktop; the agent
        and its published port for a remote one)."""
        geometry = plan.geometry
        all_labels = {str(k): str(v) for k, v in labels.items()}
        all_labels.setdefault(LABEL_SESSION, plan.session_id)
        all_labels[LABEL_PROVIDER] = self.name
        all_labels[LABEL_DISPLAY] = str(plan.display)
        from deskctl.providers.docker.layers import check_extras

        # a task image's environment is its own: only what the options ask for (LANG, TZ) is added
        environment = _container_env({**self.options, **spec.provider_options}, self.name)
        environment.update(check_extras({**self.options, **spec.provider_options}, self.name).environment())
        command: list[str] | None = None
        lifetime = _lifetime(spec, labels)
        ttl = None
        if lifetime is not None:  # a backstop: the desktop stops itself a little after its expiry
            grace = float(self._option(spec, "expiry_grace", 60))
            ttl = str(max(1, round(lifetime + grace)))
        if dirs is not None:
            all_labels[LABEL_DIR] = str(dirs.session_dir)
            all_labels[LABEL_FB_DIR] = str(dirs.fb_dir)
        if plan.task_image:
            all_labels[LABEL_TASK_IMAGE] = "1"
            # as Harbor's docker environment keeps a task's container up; Xvfb is started by exec (_start_xvfb)
            command = ["sh", "-c", f"sleep {ttl or 'infinity'}"]
            config = _ContainerConfig(labels=all_labels, environment=environment, host_config={}, ports=[],
                                      command=command, user=plan.user)
            return self._host_config(spec, plan, config, dirs)
        environment.update({"DESKCTL_GEOMETRY": f"{geometry.width}x{geometry.height}x{geometry.depth}",
                            "DESKCTL_DISPLAY": str(plan.display), "DISPLAY": f":{plan.display}"})
        if dirs is not None:
            environment["DESKCTL_FBDIR"] = "/run/deskctl/fb"
        else:
            from deskctl.agent import DEFAULT_PORT

            environment["DESKCTL_SERVE_AGENT"] = "1"
            environment["DESKCTL_AGENT_PORT"] = str(DEFAULT_PORT)
            all_labels[LABEL_AGENT] = "1"
        if spec.window_manager or spec.start_url:
            environment["DESKCTL_WM"] = "1"
        if spec.start_url:
            environment["DESKCTL_START_URL"] = spec.start_url
        if spec.window_geometry is not None:
            environment["DESKCTL_WINDOW"] = str(spec.window_geometry)
        if ttl is not None:
            environment["DESKCTL_TTL"] = ttl
        config = _ContainerConfig(labels=all_labels, environment=environment, host_config={}, ports=[],
                                  command=None, user=plan.user)
        return self._host_config(spec, plan, config, dirs)

    def _host_config(self, spec: DesktopSpec, plan: _Plan, config: _ContainerConfig,
                     dirs: _HostDirs | None) -> _ContainerConfig:
        """The host configuration: deskctl's hardened profile (no capabilities, no new privileges, a pid limit)
        unless ``hardened=false`` (Docker's defaults, as Harbor's docker environment runs a task); the binds of
        a local desktop, the agent's published port of a remote one; limits."""
        host_config: dict[str, Any] = {"network_mode": plan.network, "init": True}
        if plan.hardened:
            host_config.update(cap_drop=["ALL"], security_opt=["no-new-privileges"])
        pids = self._option(spec, "pids_limit", (4096 if plan.variant == "browser" else 1024) if plan.hardened
                            else None)
        if pids is not None:
            host_config["pids_limit"] = int(pids)
        ports: list[int] = []
        if dirs is not None:
            host_config["binds"] = {str(dirs.x11_dir): {"bind": "/tmp/.X11-unix", "mode": "rw"},
                                    str(dirs.cookie_file.parent): {"bind": "/run/deskctl/xauth", "mode": "ro"},
                                    str(dirs.fb_dir): {"bind": "/run/deskctl/fb", "mode": "rw"}}
        else:
            from deskctl.agent import DEFAULT_PORT

            # an ephemeral port of the engine's host; only its loopback when this machine reaches it there
            ports = [DEFAULT_PORT]
            host_config["port_bindings"] = {DEFAULT_PORT: ("127.0.0.1",) if _is_loopback(self._agent_host(spec))
                                            else ("",)}
        if plan.memory is not None:
            host_config["mem_limit"] = plan.memory
            host_config["memswap_limit"] = plan.memory
        if plan.cpus is not None:
            try:
                host_config["nano_cpus"] = int(float(plan.cpus) * 1e9)
            except (TypeError, ValueError):
                raise UsageError(f"cpus {plan.cpus!r} is not a number", code="usage.bad_option",
                                 provider=self.name) from None
        shm = self._option(spec, "shm_size", "256m" if plan.variant == "browser" else None)
        if shm:
            host_config["shm_size"] = shm
        return _ContainerConfig(labels=config.labels, environment=config.environment, host_config=host_config,
                                ports=ports, command=config.command, user=config.user)

    def _agent_host(self, spec: DesktopSpec | None) -> str:
        """Where this machine reaches the published ports of the engine: ``agent_host``, else its URL's host."""
        host = self._option(spec, "agent_host")
        return str(host) if host else (urlsplit(self.engine).hostname or "127.0.0.1")

    def _start(self, spec: DesktopSpec, plan: _Plan, config: _ContainerConfig, dirs: _HostDirs | None,
               labels: Mapping[str, str]) -> RemoteHandle:
        """Create the container (registered with the owner watcher first), hand a remote desktop its secrets,
        start it. Any failure removes whatever was made (container, host folders, token) before it is raised."""
        session_id = plan.session_id
        watched = labels.get(LABEL_DETACHED) != "1" and _truthy(self._option(spec, "reaper", True))
        if watched:
            _Watcher.get().add(session_id, plan.engine)
        container_id = ""
        data: dict[str, Any] = {}
        try:
            with self._errors(f"create the container {session_id}"):
                api = self.client.api
                created = api.create_container(
                    plan.image, name=session_id, labels=config.labels, environment=config.environment,
                    user=config.user, ports=config.ports or None, command=config.command,
                    host_config=api.create_host_config(**config.host_config), detach=True,
                )
                container_id = str(created["Id"])
            if plan.remote:
                data = self._hand_secrets(spec, session_id, container_id)
            with self._errors(f"start the container {session_id}"):
                api.start(container_id)
            if plan.remote:
                data["agent_port"] = self._published_port(container_id)
            if plan.task_image:
                self._start_xvfb(container_id, plan)
        except BaseException as exc:
            if isinstance(exc, ProviderApiError) and exc.status == 409 and not container_id:
                # the name was taken between our check and the create: that container is not ours
                if watched:
                    _Watcher.forget_if_running(session_id)
                raise UsageError(f"a container named {session_id} already exists", code="usage.conflict",
                                 provider=self.name) from exc
            # Ambiguous or partial: whatever exists under this name is ours; remove it before raising.
            with contextlib.suppress(Exception):
                self._remove_by_name(session_id, plan.engine)
            if watched:
                _Watcher.forget_if_running(session_id)
            self._tokens.pop(session_id, None)
            shutil.rmtree(self._session_dir(session_id), ignore_errors=True)
            if dirs is not None:
                shutil.rmtree(dirs.fb_dir, ignore_errors=True)
            raise
        data.update({
            "container": container_id,
            "name": session_id,
            "image": plan.image,
            "display": f":{plan.display}",
            "network": plan.network,
            "memory": plan.memory,
            "watched": watched,
            # who runs a command by default and owns what is copied in: the desktop user (hardened), else the
            # image's own user and root (as `docker exec` and `docker cp` do)
            "exec_user": plan.user or "",
            "file_owner": plan.user or "0:0",
            "task_image": plan.task_image,
        })
        if plan.engine:  # the environment's engine stays unnamed: a local desktop follows DOCKER_HOST as before
            data["engine"] = plan.engine
        if dirs is not None:
            data.update({
                "socket_path": str(dirs.x11_dir / f"X{plan.display}"),
                "xauthority": str(dirs.cookie_file),
                "session_dir": str(dirs.session_dir),
                "fb_dir": str(dirs.fb_dir),
                "framebuffer": str(dirs.fb_dir / "Xvfb_screen0"),
            })
        return RemoteHandle(provider=self.name, session_id=session_id, resource_id=container_id,
                            labels=config.labels, data=data)

    def _hand_secrets(self, spec: DesktopSpec, session_id: str, container: str) -> dict[str, Any]:
        """A remote desktop's agent token and display cookie, made here and written into the created (not yet
        started) container; the token also into a 0600 file of this machine's runtime directory, from which another
        process of this user reconnects. Returns the handle data that says where the agent is."""
        import secrets

        from deskctl._redact import register_secret
        from deskctl.providers._x11 import new_cookie, write_xauthority

        token = secrets.token_urlsafe(32)
        register_secret(token)
        session_dir = self._session_dir(session_id)
        session_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(session_dir, 0o700)
        token_file = session_dir / _AGENT_TOKEN_FILE
        descriptor = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(token)
        # The display's cookie, where the image's XAUTHORITY says (as a local desktop's, so that exec'd X clients
        # find it); made here but not kept: only processes in the container use the display.
        display = _display_number(self._option(spec, "display", 0), self.name)
        cookie_file = write_xauthority(session_dir / "Xauthority", display, new_cookie())
        try:
            cookie = cookie_file.read_bytes()
        finally:
            cookie_file.unlink()
        uid, gid = (int(x) for x in DESKTOP_USER.split(":"))
        archive = _secrets_tar({"agent/token": token.encode(), "xauth/Xauthority": cookie}, uid, gid)
        with self._errors(f"hand the agent of {session_id} its token"):
            if not self.client.api.put_archive(container, _SECRETS_ROOT, archive):
                raise ProviderApiError(f"docker: the engine refused the secrets of {session_id}",
                                       provider=self.name)
        self._tokens[session_id] = token
        return {"agent_host": self._agent_host(spec), "session_dir": str(session_dir),
                "agent_token_file": str(token_file)}

    def _start_xvfb(self, container: str, plan: _Plan) -> None:
        """Start Xvfb in a running task-image container, on the plan's display at its geometry, as the container's
        user, with the cookie of the bind-mounted Xauthority; returns once the server accepts connections (its
        ``-displayfd``), or raises with Xvfb's last words when it exits before that."""
        geometry = plan.geometry
        argv = ["sh", "-c", _XVFB_SCRIPT, "deskctl-xvfb", str(plan.display),
                f"{geometry.width}x{geometry.height}x{geometry.depth}"]
        with self._errors(f"start Xvfb in {plan.session_id}"):
            api = self.client.api
            exec_id = str(api.exec_create(container, argv, stdout=True, stderr=True, user=plan.user or "")["Id"])
            output = api.exec_start(exec_id)
            code = api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            text = (output or b"").decode(errors="replace").strip()[-800:]
            raise ProviderApiError(f"docker: Xvfb did not start in {plan.session_id} (exit {code}): {text}",
                                   provider=self.name, remedy="the image's Xvfb must run: try `docker run --rm "
                                   f"--entrypoint Xvfb {plan.image} -help`")

    def _published_port(self, container: str) -> int:
        """The host port the engine gave the agent's port."""
        from deskctl.agent import DEFAULT_PORT

        with self._errors("inspect the agent's port"):
            attrs = self.client.api.inspect_container(container)
        bindings = ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{DEFAULT_PORT}/tcp") or []
        for binding in bindings:
            if str(binding.get("HostPort") or "").isdigit():
                return int(binding["HostPort"])
        state = attrs.get("State") or {}
        raise ProviderApiError(f"docker: the agent's port {DEFAULT_PORT} of {container[:12]} was not published "
                               f"(container {state.get('Status', '?')})", provider=self.name)

    def _state(self, container: str, engine: str | None = None) -> dict[str, Any] | None:
        """The container's ``State`` from inspect (on ``engine``; default: this provider's), or None when it
        does not exist."""
        client = self.client if engine is None else self._client_on(engine)
        try:
            with self._errors(f"inspect the container {container}", engine):
                attrs = client.api.inspect_container(container)
        except NotFound:
            return None
        state: dict[str, Any] = attrs.get("State") or {}
        return state

    def _logs(self, container: str, lines: int = 15, engine: str | None = None) -> str:
        with contextlib.suppress(Exception):
            client = self.client if engine is None else self._client_on(engine)
            raw = client.api.logs(container, tail=lines)
            return raw.decode(errors="replace").strip() if isinstance(raw, bytes) else str(raw)
        return ""

    def _gone_error(self, handle: RemoteHandle, state: dict[str, Any] | None, doing: str) -> DeskctlError:
        """The error for a desktop whose container stopped or vanished: OOM is said as such."""
        name = handle.data.get("name", handle.session_id)
        if state is None:
            return SessionLost(f"the container {name} no longer exists (removed from outside) while we tried to "
                               f"{doing}", provider=self.name, details={"container": name, "state": "gone"})
        details = {"container": name, "state": state.get("Status"), "exit_code": state.get("ExitCode"),
                   "oom_killed": bool(state.get("OOMKilled"))}
        if state.get("OOMKilled"):
            memory = handle.data.get("memory")
            limit = _mib(int(memory)) if memory else "the host's memory"
            return SessionLost(f"the desktop {name} ran out of memory (limit {limit}) and was killed",
                               provider=self.name, details=details,
                               remedy="raise provider_options memory, or ask for a smaller geometry")
        logs = redact(self._logs(str(handle.data.get("container", handle.resource_id)),
                                 engine=self._engine_of(handle)))
        tail = f"; last log lines:\n{logs}" if logs else ""
        return SessionLost(f"the container {name} is {state.get('Status')} (exit code {state.get('ExitCode')}) "
                           f"while we tried to {doing}{tail}", provider=self.name, details=details)

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        if _via_agent(handle):
            self._wait_agent(handle, deadline)
            return
        from deskctl.providers._x11 import X11Address, connect_display, read_cookie

        address = X11Address(display=_display_of(handle), socket_path=str(handle.data["socket_path"]))
        cookie = read_cookie(str(handle.data["xauthority"]), _display_number(_display_of(handle)[1:], self.name))
        container = str(handle.data.get("container", handle.resource_id))
        last = "the X socket does not exist yet"
        delay = 0.005
        while True:
            if os.path.exists(address.socket_path or ""):
                try:
                    display = connect_display(address, cookie, timeout=max(0.2, deadline - time.monotonic()))
                except ProviderUnreachable as err:
                    last = err.message
                else:
                    display.close()
                    return
            state = self._state(container, self._engine_of(handle))
            self._raise_if_stopped(handle, state)
            if time.monotonic() >= deadline:
                logs = self._logs(container)
                raise ReadinessTimeout(
                    f"the display of {handle.session_id} did not answer in time; last: {last}"
                    + (f"; last log lines:\n{logs}" if logs else ""),
                    provider=self.name, remedy="look at `docker logs " + handle.session_id + "`")
            # Xvfb gives the host no event to wait on: back off between attempts, bounded by the deadline.
            threading.Event().wait(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.1)

    def _raise_if_stopped(self, handle: RemoteHandle, state: dict[str, Any] | None) -> None:
        """While waiting for readiness: a container that is gone or stopped ends the wait at once (out of memory
        is capacity.unavailable)."""
        if state is not None and state.get("Running"):
            return
        gone = self._gone_error(handle, state, "wait for the display")
        if state is not None and state.get("OOMKilled"):
            raise CapacityUnavailable(gone.message, provider=self.name, remedy=gone.remedy, details=gone.details)
        raise gone

    def _wait_agent(self, handle: RemoteHandle, deadline: float) -> None:
        """Until the desktop's agent answers an authenticated ping; the container's state is looked at between
        attempts, so a desktop that died is told at once, not at the deadline."""
        from deskctl.agent.client import wait_ready

        container = str(handle.data.get("container", handle.resource_id))
        engine = self._engine_of(handle)
        token = self._token(handle)
        last = "the agent did not answer yet"
        while True:
            try:
                wait_ready(str(handle.data["agent_host"]), int(handle.data["agent_port"]), token,
                           provider=self.name, deadline=min(deadline, time.monotonic() + 3.0))
                return
            except (ReadinessTimeout, ProviderUnreachable, SessionLost) as err:
                last = err.message
            state = self._state(container, engine)
            self._raise_if_stopped(handle, state)
            if time.monotonic() >= deadline:
                logs = redact(self._logs(container, engine=engine))
                raise ReadinessTimeout(
                    f"the agent of {handle.session_id} did not answer in time; last: {last}"
                    + (f"; last log lines:\n{logs}" if logs else ""),
                    provider=self.name, remedy="look at `docker logs " + handle.session_id + "` on its engine")

    def _token(self, handle: RemoteHandle) -> str:
        """A remote desktop's agent token: this process's, else the 0600 file its creator wrote on this
        machine, else read from the container through the Engine API (a process on another machine)."""
        token = self._tokens.get(handle.session_id)
        if token:
            return token
        path = str(handle.data.get("agent_token_file") or "")
        with contextlib.suppress(OSError):
            token = Path(path).read_text().strip() if path else ""
        if not token:
            token = self._read_container_token(handle)
        from deskctl._redact import register_secret

        register_secret(token)
        self._tokens[handle.session_id] = token
        return token

    def _read_container_token(self, handle: RemoteHandle) -> str:
        import tarfile

        from deskctl.agent import TOKEN_FILE

        container = str(handle.data.get("container") or handle.resource_id)
        client = self._client_on(self._engine_of(handle))
        try:
            with self._errors("read the agent's token", self._engine_of(handle)):
                stream, _ = client.api.get_archive(container, TOKEN_FILE)
                raw = b"".join(stream)
        except NotFound as exc:
            raise self._lost(handle, "read the agent's token", exc) from exc
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            member = next((m for m in tar.getmembers() if m.isreg()), None)
            extracted = tar.extractfile(member) if member is not None else None
            token = extracted.read().decode().strip() if extracted is not None else ""
        if not token:
            raise SessionLost(f"the agent token of {handle.session_id} is empty", provider=self.name)
        return token

    def destroy(self, handle: RemoteHandle) -> None:
        self._drop_driver(handle.session_id)
        self._tokens.pop(handle.session_id, None)
        name = str(handle.data.get("name") or handle.session_id)
        container = str(handle.data.get("container") or handle.resource_id or name)
        self._remove(container, name, self._engine_of(handle))
        _Watcher.forget_if_running(name)
        for key, label in (("session_dir", LABEL_DIR), ("fb_dir", LABEL_FB_DIR)):
            path = handle.data.get(key) or handle.labels.get(label)
            if path:
                shutil.rmtree(str(path), ignore_errors=True)

    def _remove(self, container: str, name: str, engine: str | None = None) -> None:
        """Force-remove and confirm (inspect answers 404); conflicts ("removal in progress") are retried."""
        deadline = time.monotonic() + 30
        last = ""
        while True:
            try:
                with self._errors(f"remove the container {name}", engine):
                    client = self.client if engine is None else self._client_on(engine)
                    client.api.remove_container(container, force=True, v=True)
            except NotFound:
                pass
            except InfrastructureError as exc:
                if isinstance(exc, ProviderUnreachable):
                    raise CleanupIncomplete(f"cannot remove {name}: {exc.message}", provider=self.name,
                                            remedy=exc.remedy, details={"left": [name]}) from exc
                last = exc.message
            try:
                if self._state(container, engine) is None:
                    return
            except DeskctlError as exc:
                raise CleanupIncomplete(f"cannot confirm that {name} is gone: {exc.message}", provider=self.name,
                                        remedy=exc.remedy or f"docker rm -f {name}",
                                        details={"left": [name]}) from exc
            if time.monotonic() >= deadline:
                raise CleanupIncomplete(f"the container {name} is still there after removal ({last})",
                                        provider=self.name, remedy=f"docker rm -f {name}",
                                        details={"left": [name]})
            # removal in progress on the daemon's side: wait for its destroy event instead of polling blindly
            with contextlib.suppress(Exception):
                events = client.api.events(
                    filters={"container": container, "event": "destroy"}, decode=True,
                    until=int(time.time()) + 2,
                )
                for _ in events:
                    break

    def _remove_by_name(self, name: str, engine: str | None = None) -> None:
        """Remove the container named ``name`` (and anything labelled with that session), with its directory,
        on ``engine`` (default: this provider's)."""
        client = self.client if engine is None else self._client_on(engine)
        with self._errors("list containers", engine):
            found = client.api.containers(all=True, filters={"label": f"{LABEL_SESSION}={name}"})
        ids = {str(c["Id"]): c for c in found}
        if not ids:
            state = self._state(name, engine)
            if state is not None:
                ids[name] = {}
        for container_id, raw in ids.items():
            self._remove(container_id, name, engine)
            labels = (raw.get("Labels") or {}) if raw else {}
            for label in (LABEL_DIR, LABEL_FB_DIR):
                if labels.get(label):
                    shutil.rmtree(labels[label], ignore_errors=True)

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        filters = [LABEL_SESSION, f"{LABEL_PROVIDER}={self.name}"]
        filters += [f"{k}={v}" for k, v in (selector or {}).items()]
        with self._errors("list deskctl containers"):
            found = self.client.api.containers(all=True, filters={"label": filters})
        handles = []
        for raw in found:
            labels = dict(raw.get("Labels") or {})
            session_id = labels.get(LABEL_SESSION, "")
            session_dir = labels.get(LABEL_DIR, "")
            names = [n.lstrip("/") for n in raw.get("Names") or []]
            number = labels.get(LABEL_DISPLAY, "0")
            display = f":{number}"
            if labels.get(LABEL_AGENT) == "1":
                handles.append(RemoteHandle(
                    provider=self.name, session_id=session_id, resource_id=str(raw["Id"]), labels=labels,
                    data={"container": str(raw["Id"]), "name": names[0] if names else session_id,
                          "image": raw.get("Image"), "display": display, "engine": self.engine,
                          "state": raw.get("State"), **self._agent_address(raw, session_id)},
                    created_at=float(raw.get("Created") or time.time()),
                ))
                continue
            handles.append(RemoteHandle(
                provider=self.name, session_id=session_id, resource_id=str(raw["Id"]), labels=labels,
                data={
                    "container": str(raw["Id"]),
                    "name": names[0] if names else session_id,
                    "image": raw.get("Image"),
                    "display": display,
                    "socket_path": str(Path(session_dir) / "x11" / f"X{number}") if session_dir else "",
                    "xauthority": str(Path(session_dir) / "xauth" / "Xauthority") if session_dir else "",
                    "session_dir": session_dir,
                    "fb_dir": labels.get(LABEL_FB_DIR, ""),
                    "framebuffer": str(Path(labels[LABEL_FB_DIR]) / "Xvfb_screen0") if labels.get(LABEL_FB_DIR)
                    else "",
                    "state": raw.get("State"),
                },
                created_at=float(raw.get("Created") or time.time()),
            ))
        return handles

    def _agent_address(self, raw: Mapping[str, Any], session_id: str) -> dict[str, Any]:
        """Where the agent of a listed remote desktop answers (a stopped one publishes no port)."""
        from deskctl.agent import DEFAULT_PORT

        data: dict[str, Any] = {"agent_host": self._agent_host(None)}
        for port in raw.get("Ports") or []:
            if port.get("PrivatePort") == DEFAULT_PORT and port.get("PublicPort"):
                data["agent_port"] = int(port["PublicPort"])
        token_file = self._session_dir(session_id) / _AGENT_TOKEN_FILE
        if token_file.exists():
            data.update(session_dir=str(token_file.parent), agent_token_file=str(token_file))
        return data

    def is_alive(self, handle: RemoteHandle) -> bool:
        state = self._state(str(handle.data.get("container") or handle.resource_id), self._engine_of(handle))
        return bool(state and state.get("Running"))

    def detach(self, handle: RemoteHandle) -> None:
        _Watcher.forget_if_running(str(handle.data.get("name") or handle.session_id))

    # -- while open ----------------------------------------------------------------------------------------------
    def _open_driver(self, handle: RemoteHandle) -> DisplayDriver:
        return self._agent_driver(handle) if _via_agent(handle) else self._x11_driver(handle)

    def _x11_driver(self, handle: RemoteHandle) -> X11Driver:
        from deskctl.providers._x11 import X11Driver, read_cookie

        socket_path = str(handle.data.get("socket_path") or "")
        try:
            display = _display_of(handle)
            cookie = read_cookie(str(handle.data["xauthority"]), _display_number(display[1:], self.name))
            # MIT-SHM crosses the container's IPC namespace as a file descriptor (see _x11._Shm)
            return X11Driver.open(display, socket_path=socket_path, cookie=cookie, provider=self.name)
        except (ProviderUnreachable, KeyError) as exc:
            raise self._lost(handle, "connect to the display", exc) from exc

    def _agent_driver(self, handle: RemoteHandle) -> AgentDriver:
        """One authenticated connection to the desktop's agent (a remote engine's desktop)."""
        from deskctl.agent.client import AgentDriver

        try:
            return AgentDriver.connect(str(handle.data["agent_host"]), int(handle.data["agent_port"]),
                                       self._token(handle), provider=self.name)
        except (ProviderUnreachable, SessionLost, KeyError) as exc:
            raise self._lost(handle, "connect to the desktop's agent", exc) from exc

    def _drop_driver(self, session_id: str, driver: DisplayDriver | None = None) -> None:
        super()._drop_driver(session_id, driver)
        with self._drivers_lock:
            framebuffer = self._framebuffers.pop(session_id, None)
        if framebuffer is not None:
            framebuffer.close()

    def _lost(self, handle: RemoteHandle, doing: str, cause: BaseException) -> DeskctlError:
        """After a failed X call: a precise error when the container is gone or stopped, else the cause."""
        self._drop_driver(handle.session_id)
        container = str(handle.data.get("container") or handle.resource_id)
        engine = self._engine_of(handle)
        try:
            state = self._state(container, engine)
            if state is not None and state.get("Running"):
                # The display went away a moment before the container stops (its init still reaps): wait for
                # the stop, briefly, so that the reason (out of memory, exit code) can be told.
                with contextlib.suppress(Exception):
                    self._client_on(engine).api.wait(container, timeout=5)
                state = self._state(container, engine)
        except DeskctlError:
            state = {"Running": True}
        if state is None or not state.get("Running"):
            return self._gone_error(handle, state, doing)
        if isinstance(cause, DeskctlError):
            return cause
        return SessionLost(f"lost the display of {handle.session_id}: {cause}", provider=self.name)

    def _screenshot_with(self, handle: RemoteHandle, driver: DisplayDriver) -> Screenshot:
        """Pixels read straight from the framebuffer file Xvfb keeps in a host tmpfs (after one X round trip,
        so every request sent before is drawn), else by GetImage over the socket."""
        framebuffer = self._framebuffer(handle)
        if framebuffer is None:
            return driver.screenshot()
        driver.ping()
        return framebuffer.screenshot()

    def _raw_frame_with(self, handle: RemoteHandle, driver: DisplayDriver) -> RawFrame:
        """As :meth:`_screenshot_with`, without the PNG: the framebuffer file's pixels, else the driver's capture."""
        framebuffer = self._framebuffer(handle)
        if framebuffer is None:
            return driver.raw_frame()
        driver.ping()
        return framebuffer.raw_frame()

    def _framebuffer(self, handle: RemoteHandle) -> _Framebuffer | None:
        with self._drivers_lock:
            cached = self._framebuffers.get(handle.session_id)
        if cached is not None:
            return cached
        path = str(handle.data.get("framebuffer") or "")
        if not path or not os.path.exists(path):
            return None
        try:
            framebuffer = _Framebuffer(path)
        except (OSError, ValueError):
            return None
        with self._drivers_lock:
            self._framebuffers[handle.session_id] = framebuffer
        return framebuffer

    #: :meth:`exec` hands output to ``on_output`` as it comes (see Desktop.exec)
    exec_streams_output: ClassVar[bool] = True

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False, on_output: Callable[[str, str], None] | None = None) -> ExecResult:
        """Run ``command`` with ``sh -c`` through the Engine API exec, as the desktop user (DISPLAY set) or as
        ``user``, with ``env`` added (both passed to the API as they are: no quoting), in ``cwd`` (a ``cd`` in
        the shell line, so that a missing folder fails as on every provider: exit 2, the shell's message).
        ``background``: detached from the exec's streams, its pid (in the container) returned at once.

        The command is killed after ``timeout`` seconds (exit code 124, as coreutils ``timeout`` says).
        """
        from deskctl.providers._guest import background_pid, check_exec_options, posix_line

        extra = check_exec_options(env, user, self.name)
        if handle.data.get("task_image") and not _via_agent(handle):
            # the display's cookie for every X client a command starts (DISPLAY alone reaches the display); the
            # task image's own environment is otherwise left as it is
            extra.setdefault("XAUTHORITY", _XAUTHORITY)
        container = str(handle.data.get("container") or handle.resource_id)
        seconds = max(1, round(timeout))
        line = posix_line(command, cwd=cwd, background=background) if cwd or background else command
        argv = ["timeout", "-k", "5", str(seconds), "sh", "-c", line]
        engine = self._engine_of(handle)
        client = self._client_on(engine) if timeout + 10 <= 60 else self._connect(engine, timeout + 15)
        try:
            with self._errors("run a command"):
                exec_id = str(client.api.exec_create(container, argv, stdout=True, stderr=True,
                                                     user=user or _exec_user(handle),
                                                     environment=extra or None)["Id"])
                if on_output is None:
                    out, err = client.api.exec_start(exec_id, demux=True)
                else:
                    out, err = _stream_exec(client, exec_id, on_output)
                code = client.api.exec_inspect(exec_id).get("ExitCode")
        except (NotFound, InfrastructureError) as exc:
            if isinstance(exc, ProviderUnreachable):
                raise
            state = self._state(container, engine)
            if state is None or not state.get("Running"):
                raise self._gone_error(handle, state, "run a command") from exc
            raise
        finally:
            if client is not self._client and client not in self._engine_clients.values():
                with contextlib.suppress(Exception):
                    client.close()
        result = ExecResult(exit_code=int(code if code is not None else -1),
                            stdout=(out or b"").decode(errors="replace"),
                            stderr=(err or b"").decode(errors="replace"))
        if background and result.exit_code == 0:
            return ExecResult(0, result.stdout, result.stderr, pid=background_pid(result))
        if user and result.exit_code == 126 and not result.stderr and (
                not result.stdout or "unable to find user" in result.stdout):
            # the engine could not start the process: its message (sometimes none at all) comes on stdout
            known = self.exec(handle, f"id -u -- {shlex.quote(user.split(':')[0])}", 30.0)
            if known.exit_code != 0 and not user.split(":")[0].isdigit():
                raise UsageError(f"no user {user!r} in the container {handle.data.get('name', container)}",
                                 code="usage.bad_user", provider=self.name)
        return result

    # -- files: the Engine API's archive endpoints (what `docker cp` uses), streamed both ways -------------------
    def _remote_path(self, handle: RemoteHandle, remote: str) -> str:
        """``remote`` as an absolute path in the container; a relative one is taken from the desktop user's
        working directory, as ``exec`` does."""
        if not remote:
            raise UsageError("an empty path on the desktop", code="usage.bad_path", provider=self.name)
        if remote.startswith("/"):
            return posixpath.normpath(remote)
        here = self.exec(handle, "pwd", 30.0)
        return posixpath.normpath(posixpath.join(here.stdout.strip() or "/", remote))

    def _connect(self, engine: str, timeout: float) -> docker.DockerClient:
        """A new client of ``engine`` (a handle's), for a call longer than the kept clients' timeout."""
        from deskctl.providers.docker.images import connect

        return connect(timeout=timeout, engine=engine or self.options.get("host") or None)

    @contextlib.contextmanager
    def _bulk_client(self, engine: str) -> Iterator[docker.DockerClient]:
        """A client for one copy, closed afterwards: the daemon answers a PUT only once it has unpacked
        everything, which for a large tree takes longer than any API call (hence an hour's read timeout)."""
        client = self._connect(engine, float(self.options.get("api_timeout", 60)))
        client.api.timeout = 3600
        try:
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        """One ``PUT /containers/{id}/archive`` of a tar streamed as it is made (the desktop user owns what
        arrives). When the parent folder is missing, it is made (``mkdir -p``, as the desktop user) and the PUT
        sent again."""
        from deskctl.providers._files import no_such_file

        source = Path(local)
        if not source.exists() and not source.is_symlink():
            raise no_such_file(local, "here", self.name)
        path = self._remote_path(handle, remote)
        parent, name = posixpath.split(path)
        if not name:
            raise UsageError(f"cannot replace {path} on the desktop", code="usage.bad_path", provider=self.name)
        # the engine's archive PUT replaces a folder by a file (and the other way) without a word: refuse, as
        # the other providers do, rather than lose the folder. The same look names the file system the copy
        # lands on: the PUT writes the image's file system, under a tmpfs or kernel mount (/proc, /sys, /dev,
        # /dev/shm) where nobody sees it, and answers 200
        seen = self.exec(handle, f"if [ -d {shlex.quote(path)} ]; then echo dir; "
                                 f"elif [ -e {shlex.quote(path)} ]; then echo file; else echo none; fi; "
                                 # the nearest folder that exists (no dirname: any image may be a desktop)
                                 f"d={shlex.quote(parent or '/')}; case \"$d\" in /*) ;; *) d=/ ;; esac; "
                                 'while [ ! -e "$d" ] && [ "$d" != / ]; do d=${d%/*}; d=${d:-/}; done; '
                                 'echo "$d"; stat -f -c %T "$d" 2>/dev/null || echo unknown',
                         60.0).stdout.strip().splitlines()
        there = seen[0].strip() if seen and seen[0].strip() in ("dir", "file") else ""
        if len(seen) >= 3 and seen[2].strip() in _MOUNTS_THE_ARCHIVE_MISSES:
            raise UsageError(f"cannot copy to {path}: {seen[1].strip()} on the desktop is a {seen[2].strip()} mount, "
                             "which the engine's archive copy does not write (it would report success and leave "
                             "nothing there)", code="usage.bad_path", provider=self.name,
                             remedy="copy to a path on the desktop's own file system (under /tmp or the home "
                                    "folder, say)")
        if there and (there == "dir") != source.is_dir():
            what = "folder" if there == "dir" else "file"
            raise UsageError(f"{path} on the desktop is a {what}: a {'folder' if source.is_dir() else 'file'} "
                             "cannot replace it", code="usage.bad_path", provider=self.name,
                             remedy="copy into it with a path under it, or remove it first")
        container = str(handle.data.get("container") or handle.resource_id)
        uid, gid = _owner_ids(str(handle.data.get("file_owner") or DESKTOP_USER))
        engine = self._engine_of(handle)
        with self._bulk_client(engine) as client:
            for attempt in range(2):
                stream = _tar_stream(source, name, uid, gid)
                try:
                    with self._errors(f"copy {local} to {path}", engine):
                        client.api.put_archive(container, parent, stream)
                    return
                except NotFound as exc:
                    state = self._state(container, engine)
                    if state is None or not state.get("Running"):
                        raise self._gone_error(handle, state, "copy files") from exc
                    if attempt:
                        raise ProviderApiError(f"docker: the folder {parent} vanished while copying into it",
                                               provider=self.name) from exc
                finally:
                    stream.close()
                made = self.exec(handle, f"mkdir -p -- {shlex.quote(parent)}", 60.0)
                if made.exit_code != 0:
                    raise ProviderApiError(f"docker: cannot make the folder {parent}: "
                                           f"{made.stderr.strip()[-300:]}", provider=self.name)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        """One ``GET /containers/{id}/archive``, unpacked as it streams in (the ``data`` filter: nothing lands
        outside ``local``); a file is written beside ``local`` and renamed over it."""
        path = self._remote_path(handle, remote)
        container = str(handle.data.get("container") or handle.resource_id)
        target = Path(local)
        with self._bulk_client(self._engine_of(handle)) as client:
            self._download(handle, client, container, path, remote, target)

    def _download(self, handle: RemoteHandle, client: docker.DockerClient, container: str, path: str, remote: str,
                  target: Path) -> None:
        from deskctl.providers._files import no_such_file

        for _ in range(8):  # a symlink is followed (to its target, as the other providers' tar -C does)
            try:
                with self._errors(f"copy {path} from the desktop", self._engine_of(handle)):
                    stream, stat = client.api.get_archive(container, path, chunk_size=None)
            except NotFound as exc:
                state = self._state(container, self._engine_of(handle))
                if state is None or not state.get("Running"):
                    raise self._gone_error(handle, state, "copy files") from exc
                raise no_such_file(remote, "on the desktop", self.name) from exc
            mode = int((stat or {}).get("mode") or 0)
            link = str((stat or {}).get("linkTarget") or "")
            if mode & _GO_MODE_SYMLINK and link:
                stream.close()
                path = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
                continue
            break
        try:
            _untar_stream(stream, target, is_dir=bool(mode & _GO_MODE_DIR), provider=self.name)
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    def close(self) -> None:
        super().close()
        with self._drivers_lock:
            framebuffers = list(self._framebuffers.values())
            self._framebuffers.clear()
        for framebuffer in framebuffers:
            framebuffer.close()
        with self._client_lock:
            clients = [self._client, *self._engine_clients.values()]
            self._client = None
            self._engine_clients.clear()
        for client in clients:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()


@dataclass(frozen=True)
class _Plan:
    """What :meth:`DockerProvider.create` will make, resolved before anything is made."""

    session_id: str
    engine: str
    remote: bool
    geometry: Geometry
    image: str
    variant: str
    memory: int | None
    cpus: Any
    network: str
    task_image: bool = False
    display: int = 0
    hardened: bool = True
    user: str | None = DESKTOP_USER  # the container's user; None: the image's own


@dataclass(frozen=True)
class _HostDirs:
    """The host folders of a local desktop (its X socket's, its cookie's, its framebuffer's)."""

    session_dir: Path
    x11_dir: Path
    cookie_file: Path
    fb_dir: Path


@dataclass(frozen=True)
class _ContainerConfig:
    labels: dict[str, str]
    environment: dict[str, str]
    host_config: dict[str, Any]
    ports: list[int]
    command: list[str] | None = None
    user: str | None = DESKTOP_USER


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _secrets_tar(files: Mapping[str, bytes], uid: int, gid: int) -> bytes:
    """A tar of ``files`` (relative path -> content), each 0600 and its folders 0700, owned by ``uid:gid``."""
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folders = sorted({posixpath.dirname(name) for name in files} - {""})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, 0o700, uid, gid, time.time()
            tar.addfile(info)
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid, info.mtime = len(content), 0o600, uid, gid, time.time()
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


#: run by ``docker exec`` in a task-image container (as the desktop's entrypoint does in deskctl's image): Xvfb on
#: display $1 at $2, only on the unix socket /tmp/.X11-unix/X$1 (the host's bind mount), demanding the cookie of the
#: bind-mounted Xauthority, keeping its framebuffer in the host's tmpfs; exits 0 once the server answers
_XVFB_SCRIPT = r"""
set -u
d=$1; g=$2; log=/tmp/.deskctl-xvfb-$d.log; ready=/tmp/.deskctl-xready-$d
rm -f "$ready"; mkfifo "$ready" || exit 97
Xvfb ":$d" -screen 0 "$g" -nolisten tcp -nolisten local -auth /run/deskctl/xauth/Xauthority -noreset -dpi 96 \
    -fbdir /run/deskctl/fb -displayfd 3 3>"$ready" </dev/null >"$log" 2>&1 &
x=$!
if read -r _ <"$ready"; then rm -f "$ready"; exit 0; fi
rm -f "$ready"; wait "$x"; status=$?
echo "Xvfb exited with $status:"; tail -n 15 "$log"
exit 1
"""


def _stream_exec(client: docker.DockerClient, exec_id: str,
                 on_output: Callable[[str, str], None]) -> tuple[bytes, bytes]:
    """Start an exec and hand each chunk of its output to ``on_output(text, "stdout" | "stderr")`` as it comes
    (decoded incrementally: a character split between chunks is not mangled); returns all of it."""
    import codecs

    parts: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in parts}
    for out, err in client.api.exec_start(exec_id, stream=True, demux=True):
        for name, chunk in (("stdout", out), ("stderr", err)):
            if chunk:
                parts[name].append(chunk)
                text = decoders[name].decode(chunk)
                if text:
                    on_output(text, name)
    for name, decoder in decoders.items():
        rest = decoder.decode(b"", final=True)
        if rest:
            on_output(rest, name)
    return b"".join(parts["stdout"]), b"".join(parts["stderr"])


def _container_env(options: Mapping[str, Any], provider: str) -> dict[str, str]:
    """The ``env`` option: variables every process of the container gets (Harbor's task environment)."""
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
    return str(handle.data.get("display") or ":0")


def _exec_user(handle: RemoteHandle) -> str:
    """Who runs a command by default: the desktop user, or ``""`` (the container's own user)."""
    return str(handle.data.get("exec_user", DESKTOP_USER))


def _owner_ids(owner: str) -> tuple[int, int]:
    uid, _, gid = owner.partition(":")
    return int(uid), int(gid or uid)


def _via_agent(handle: RemoteHandle) -> bool:
    """A desktop on a remote engine: reached through its agent, nothing shared through host folders."""
    return handle.labels.get(LABEL_AGENT) == "1" or "agent_host" in handle.data


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
        with contextlib.suppress(ValueError):
            return max(0.0, float(expires) - time.time())
    return spec.ttl_seconds or None


def _framebuffer_root(session_dir: Path) -> Path:
    """Where Xvfb keeps its framebuffer file: a per-user 0700 directory in the host's /dev/shm (memory, no disk
    writes), or the session directory when /dev/shm is not usable or not ours."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = shm / f"deskctl-{os.getuid()}"
        with contextlib.suppress(OSError):
            root.mkdir(mode=0o700, exist_ok=True)
            info = root.stat()
            if info.st_uid == os.getuid() and (info.st_mode & 0o077) == 0 and not root.is_symlink():
                return root
    return session_dir


class _Framebuffer:
    """Xvfb's ``-fbdir`` file (an XWD image Xvfb draws into) mapped read-only: a capture is one copy."""

    def __init__(self, path: str) -> None:
        import mmap
        import struct

        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        try:
            fields = struct.unpack_from(">25I", self._map, 0)
            header_size, depth, width, height = fields[0], fields[3], fields[4], fields[5]
            byte_order, bits_per_pixel, bytes_per_line, ncolors = fields[7], fields[11], fields[12], fields[19]
            self.offset = header_size + 12 * ncolors
            if bits_per_pixel != 32 or depth not in (24, 32) or byte_order != 0:
                raise ValueError(f"unsupported framebuffer layout {depth}/{bits_per_pixel}/{byte_order}")
            if self.offset + bytes_per_line * height > len(self._map):
                raise ValueError("framebuffer file shorter than its header says")
        except BaseException:
            self._map.close()
            raise
        self.width, self.height, self.stride = width, height, bytes_per_line

    def screenshot(self, compress_level: int = 1) -> Screenshot:
        end = self.offset + self.stride * self.height
        pixels = self._map[self.offset:end]  # one copy: Xvfb keeps drawing into the file
        if self.stride == self.width * 4:  # packed rows: the shared striped encoder (what X11 captures use)
            from deskctl.providers._png import encode_png

            png = encode_png(pixels, self.width, self.height, "BGRX", level=compress_level)
            return Screenshot(png=png, width=self.width, height=self.height)
        from PIL import Image

        image = Image.frombuffer("RGB", (self.width, self.height), pixels, "raw", "BGRX", self.stride, 1)
        out = io.BytesIO()
        image.save(out, format="PNG", compress_level=compress_level)
        return Screenshot(png=out.getvalue(), width=self.width, height=self.height)

    def raw_frame(self) -> RawFrame:
        end = self.offset + self.stride * self.height
        return RawFrame(self._map[self.offset:end], self.width, self.height, "BGRX", self.stride)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._map.close()


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


#: bits of a Go ``os.FileMode``, as the archive endpoint's stat header gives them
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27


def _tar_stream(source: Path, name: str, uid: int, gid: int) -> Generator[bytes, None, None]:
    """``source`` as a tar whose single top entry is ``name``, owned by ``uid:gid``, made in a thread while it
    is sent: nothing is staged on disk, and memory holds a pipe's worth."""
    import tarfile

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info

    read_end, write_end = os.pipe()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_end, "wb", buffering=1 << 20) as out, \
                    tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                tar.add(source, arcname=name, filter=owned)
        except BrokenPipeError:
            pass  # the request ended early: its error is the one to report
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=produce, name="deskctl-tar", daemon=True)
    worker.start()
    with os.fdopen(read_end, "rb", buffering=0) as source_pipe:
        while chunk := source_pipe.read(1 << 20):
            yield chunk
    worker.join()
    if failure:
        exc = failure[0]
        raise UsageError(f"cannot read {source}: {getattr(exc, 'strerror', None) or exc}", code="usage.bad_path",
                         provider="docker") from exc


class _ChunkReader(io.RawIOBase):
    """A read-only raw file over an iterator of byte chunks (the archive response), for ``tarfile``'s stream
    mode: each read copies out of the current chunk, never joins chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._chunk:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._chunk = memoryview(chunk)
        size = min(len(buffer), len(self._chunk))
        buffer[:size] = self._chunk[:size]
        self._chunk = self._chunk[size:]
        return size


#: file systems (``stat -f -c %T``) mounted in a container whose contents the archive endpoint does not reach
_MOUNTS_THE_ARCHIVE_MISSES = frozenset({"proc", "sysfs", "tmpfs", "ramfs", "devpts", "mqueue", "cgroupfs",
                                        "cgroup2fs", "debugfs", "securityfs", "tracefs", "pstorefs", "bpf_fs"})


def _untar_stream(chunks: Any, target: Path, *, is_dir: bool, provider: str) -> None:
    """Unpack the archive endpoint's tar (one top entry: the file or folder asked for) so that ``target`` is
    that file or folder."""
    import tarfile

    reader = io.BufferedReader(_ChunkReader(chunks), buffer_size=1 << 20)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not is_dir:
            partial = target.with_name(f".{target.name}.deskctl-part")
            try:
                with open(partial, "wb") as out:
                    mode = _copy_only_file(reader, out)
                os.chmod(partial, mode & 0o777)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            return
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            target.mkdir(exist_ok=True)
            top: list[str] = []

            def inside(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
                if not top:
                    top.append(member.name.rstrip("/"))
                    return None  # the folder itself: ``target``
                prefix = top[0] + "/"
                if not member.name.startswith(prefix):
                    return None
                renamed = member.replace(name=member.name[len(prefix):], deep=False)
                if member.islnk() and member.linkname.startswith(prefix):
                    renamed = renamed.replace(linkname=member.linkname[len(prefix):], deep=False)
                return tarfile.data_filter(renamed, dest)

            tar.extractall(target, filter=inside)
    except tarfile.FilterError as exc:
        raise ProviderApiError(f"docker: refused an archive entry that would land outside {target}: {exc}",
                               provider=provider) from exc
    except tarfile.TarError as exc:
        raise ProviderApiError(f"docker: the archive from the container is not readable: {exc}",
                               provider=provider) from exc


def _copy_only_file(reader: io.BufferedIOBase, out: Any) -> int:
    """Copy the one regular file of an archive of a file to ``out``; returns its mode. Headers are read here
    and the data goes straight from the response to the file: tarfile's stream mode copies every byte three
    more times (the benchmark's 64 MiB download took half as long again)."""
    import tarfile

    block = 512
    while True:
        header = reader.read(block)
        if len(header) < block or header == bytes(block):
            raise tarfile.ReadError("the archive of a file holds no file")
        info = tarfile.TarInfo.frombuf(header, tarfile.ENCODING, "surrogateescape")
        padded = -(-info.size // block) * block
        if info.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
            if len(reader.read(padded)) < padded:  # extended headers (a long name): nothing we need
                raise tarfile.ReadError("the archive ends inside a header")
            continue
        if not info.isreg():
            raise tarfile.ReadError(f"the archive of a file holds a {info.type!r} entry")
        buffer = memoryview(bytearray(1 << 20))
        left = info.size
        while left:
            got = reader.readinto(buffer[:min(left, len(buffer))])
            if not got:
                raise tarfile.ReadError("the archive ends inside the file")
            out.write(buffer[:got])
            left -= got
        return info.mode
