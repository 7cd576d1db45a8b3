"""How the docker provider makes a desktop: the plan (image, engine, limits), the host folders a local desktop
shares, the container's configuration (hardened profile, binds or the agent's published port), and the start,
which removes whatever it made when a step fails."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._record import Record
from deskctl.errors import (
    CapacityUnavailable,
    ProviderApiError,
    UsageError,
)
from deskctl.paths import remove_tree
from deskctl.providers._framebuffer import _framebuffer_root
from deskctl.providers._tar import tar_of_files
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_SESSION,
    RemoteHandle,
)
from deskctl.providers.docker.common import (
    _AGENT_TOKEN_FILE,
    _SECRETS_ROOT,
    DESKTOP_USER,
    LABEL_AGENT,
    LABEL_DIR,
    LABEL_DISPLAY,
    LABEL_FB_DIR,
    LABEL_PROVIDER,
    LABEL_TASK_IMAGE,
    _is_loopback,
    _lifetime,
    _mib,
    is_remote,
)
from deskctl.providers.docker.preflight import _DockerPreflight
from deskctl.providers.docker.watcher import _Watcher

if TYPE_CHECKING:
    from pathlib import Path

    from deskctl.spec import DesktopSpec, Geometry

__all__ = ["_ContainerConfig", "_DockerCreate", "_HostDirs", "_Plan"]


def _guest_script(name: str) -> str:
    """A shell script of the package's ``guest/`` folder (run in a container with ``sh -c``)."""
    from importlib.resources import files

    return files("deskctl.providers.docker").joinpath("guest", name).read_text()


class _DockerCreate(_DockerPreflight):
    """Create: plan, host folders, container configuration, start (removing what it made on failure)."""

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
        settings = self._settings(spec)
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
        network = settings.network or ("bridge" if remote else "none")
        if self._state(session_id) is not None:  # never touch (or overwrite the cookie of) someone else's desktop
            raise UsageError(f"a container named {session_id} already exists", code="usage.conflict",
                             provider=self.name)
        hardened = settings.hardened
        return _Plan(session_id=session_id, engine=engine, remote=remote, geometry=geometry, image=image,
                     variant=variant, memory=memory, cpus=settings.cpus, network=network,
                     task_image=task_image, display=settings.display,
                     hardened=hardened, user=DESKTOP_USER if hardened else None)

    def _desktop_image(self, spec: DesktopSpec, image: str, remote: bool) -> tuple[str, bool]:
        """The image to run for ``image`` and whether it is a *task image* (not a deskctl desktop image: Xvfb is
        started in it by ``docker exec``, its entrypoint and user are its own). A task image without Xvfb, or
        any image without the fonts, locale or time zones the options ask for, runs as a layer built over it
        (:mod:`.layers`, once per content)."""
        from deskctl.providers.docker.images import LABEL_VARIANT
        from deskctl.providers.docker.layers import check_extras, ensure_desktop_image

        settings = self._settings(spec)
        extras = check_extras({"fonts": settings.fonts, "locale": settings.locale, "timezone": settings.timezone},
                              self.name)
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
                                     network_mode=settings.build_network)
        return built.image, task_image

    def _host_dirs(self, session_id: str, display: int = 0) -> _HostDirs:
        """The folders a local desktop shares with this machine: its X socket's, its cookie's (written here) and
        its framebuffer file's."""
        from deskctl.core.x11 import new_cookie, write_xauthority

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
        settings = self._settings(spec)
        environment = dict(settings.env)
        environment.update(check_extras({"fonts": settings.fonts, "locale": settings.locale,
                                         "timezone": settings.timezone}, self.name).environment())
        command: list[str] | None = None
        lifetime = _lifetime(spec, labels)
        ttl = None
        if lifetime is not None:  # a backstop: the desktop stops itself a little after its expiry
            grace = settings.expiry_grace
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
        settings = self._settings(spec)
        pids = settings.pids_limit if "pids_limit" in settings.model_fields_set else \
            (4096 if plan.variant == "browser" else 1024) if plan.hardened else None
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
        shm = settings.shm_size if "shm_size" in settings.model_fields_set else \
            "256m" if plan.variant == "browser" else None
        if shm:
            host_config["shm_size"] = shm
        return _ContainerConfig(labels=config.labels, environment=config.environment, host_config=host_config,
                                ports=ports, command=config.command, user=config.user)

    def _agent_host(self, spec: DesktopSpec | None) -> str:
        """Where this machine reaches the published ports of the engine: ``agent_host``, else its URL's host."""
        host = self._settings(spec).agent_host
        if host:
            return str(host)
        from urllib.parse import urlsplit

        return urlsplit(self.engine).hostname or "127.0.0.1"

    def _start(self, spec: DesktopSpec, plan: _Plan, config: _ContainerConfig, dirs: _HostDirs | None,
               labels: Mapping[str, str]) -> RemoteHandle:
        """Create the container (registered with the owner watcher first), hand a remote desktop its secrets,
        start it. Any failure removes whatever was made (container, host folders, token) before it is raised."""
        session_id = plan.session_id
        watched = labels.get(LABEL_DETACHED) != "1" and self._settings(spec).reaper
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
            remove_tree(self._session_dir(session_id))
            if dirs is not None:
                remove_tree(dirs.fb_dir)
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
        from deskctl.core.x11 import new_cookie, write_xauthority

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
        display = self._settings(spec).display
        cookie_file = write_xauthority(session_dir / "Xauthority", display, new_cookie())
        try:
            cookie = cookie_file.read_bytes()
        finally:
            cookie_file.unlink()
        uid, gid = (int(x) for x in DESKTOP_USER.split(":"))
        archive = tar_of_files({"agent/token": token.encode(), "xauth/Xauthority": cookie}, uid, gid)
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
        argv = ["sh", "-c", _guest_script("start-xvfb.sh"), "deskctl-xvfb", str(plan.display),
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


class _Plan(Record, frozen=True):
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


class _HostDirs(Record, frozen=True):
    """The host folders of a local desktop (its X socket's, its cookie's, its framebuffer's)."""

    session_dir: Path
    x11_dir: Path
    cookie_file: Path
    fb_dir: Path


class _ContainerConfig(Record, frozen=True):
    labels: dict[str, str]
    environment: dict[str, str]
    host_config: dict[str, Any]
    ports: list[int]
    command: list[str] | None = None
    user: str | None = DESKTOP_USER
