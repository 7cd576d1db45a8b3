"""Harbor tasks with ``environment/docker-compose.yaml`` on a deskctl docker desktop (used by
:mod:`deskctl.integrations.harbor`; Harbor imports it, deskctl never does).

One compose service is the deskctl desktop: ``main`` (Harbor's agent service) by default, or the sidecar the task
names with ``--ek compose_desktop=NAME`` (as in Harbor's cookbook, where a desktop service sits beside the agent's
container). deskctl opens that desktop as usual (preflight, pinned geometry, ledger row, labels); the other
services run through the real ``docker compose`` (v2) as one project per trial:

* the project is ``docker compose config`` of Harbor's base definition of ``main`` (built from the environment's
  ``Dockerfile``, kept up with ``sleep infinity``) and the task's file, with the desktop service taken out;
* every other service joins the desktop's network namespace (``network_mode: container:<desktop>``): they reach
  each other and the desktop on loopback, by name through the desktop's ``/etc/hosts``, and the task's network
  mode stays the desktop's (``no-network`` is loopback only, for all of them);
* every container carries the desktop's deskctl labels (session, provider, owner, expiry) plus
  ``deskctl.compose.service``: the per-process watcher removes them with the desktop when the process dies,
  ``deskctl reap`` destroys them with their session, and they live and are metered inside that session's row;
* ``exec`` and file transfers for a service that is not the desktop go through ``docker compose exec``/``cp``;
  ``stop_service`` stops one service; ``down`` (before the desktop is closed) removes the project, confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deskctl.errors import ProviderApiError, UsageError

__all__ = ["COMPOSE_FILE", "LABEL_COMPOSE_SERVICE", "MAIN_SERVICE", "ComposeProject", "compose_version"]

COMPOSE_FILE = "docker-compose.yaml"
MAIN_SERVICE = "main"
LABEL_COMPOSE_SERVICE = "deskctl.compose.service"
#: keys of a service that name its own network: it shares the desktop's network namespace instead
_NETWORK_KEYS = ("networks", "ports", "expose", "hostname", "domainname", "dns", "dns_search", "dns_opt",
                 "extra_hosts", "mac_address", "links", "network_mode")
_SERVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


def compose_version() -> str | None:
    """The ``docker compose`` (v2) version, or None when the plugin is missing (scripts/setup.d/22-compose.sh)."""
    import subprocess

    docker = shutil.which("docker")
    if docker is None:
        return None
    try:
        proc = subprocess.run([docker, "compose", "version", "--short"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = proc.stdout.strip().lstrip("v")
    return version if proc.returncode == 0 and version.startswith("2.") else None


class ComposeProject:
    """The compose project of one trial: every service but the desktop, in the desktop's network namespace."""

    def __init__(self, environment_dir: Path, session_id: str, *, desktop_service: str = MAIN_SERVICE,
                 image_prefix: str = "deskctl-harbor-compose:task", env: Mapping[str, str] | None = None,
                 logger: Any = None) -> None:
        if not _SERVICE_NAME.match(desktop_service):
            raise UsageError(f"compose_desktop {desktop_service!r} is not a service name",
                             code="usage.bad_option", provider="docker")
        self.environment_dir = environment_dir.resolve()
        self.desktop_service = desktop_service
        self.name = "deskctl-" + re.sub(r"[^a-z0-9_-]", "-", session_id.lower())[:50]
        #: the services' images are tagged ``<image_prefix>-<service>``: one per task content, shared by its trials
        self.image_prefix = image_prefix
        self._env = {**os.environ, **(env or {})}
        self._logger = logger
        self._tmp = Path(tempfile.mkdtemp(prefix="deskctl-compose-"))
        self._config: dict[str, Any] | None = None
        self._file: Path | None = None
        self._up = False

    # -- the definition ---------------------------------------------------------------------------------------
    @property
    def main_is_desktop(self) -> bool:
        return self.desktop_service == MAIN_SERVICE

    async def load(self) -> dict[str, Any]:
        """The task's project as ``docker compose config`` resolves it (with Harbor's base ``main``); checks that
        the desktop service is in it."""
        if self._config is not None:
            return self._config
        if compose_version() is None:
            raise UsageError("this task's environment is a docker-compose project, and `docker compose` (v2) is "
                             "not installed here", code="usage.compose_missing", provider="docker",
                             remedy="install Docker Compose v2 (in a checkout: bash scripts/setup.d/22-compose.sh)")
        base: dict[str, Any] = {"services": {MAIN_SERVICE: {"command": ["sh", "-c", "sleep infinity"]}}}
        if (self.environment_dir / "Dockerfile").is_file():
            base["services"][MAIN_SERVICE]["build"] = {"context": str(self.environment_dir)}
        base_file = self._tmp / "base.json"
        base_file.write_text(json.dumps(base))
        # relative paths (build contexts) resolve against the environment folder, as Harbor's docker environment has it
        out = await self._compose("--project-directory", str(self.environment_dir), "config", "--format", "json",
                                  files=[base_file, self.environment_dir / COMPOSE_FILE], timeout=120,
                                  what="read the task's docker-compose.yaml")
        try:
            config = dict(json.loads(out))
        except ValueError as exc:
            raise ProviderApiError(f"docker compose config printed no JSON: {out[:200]}", provider="docker") from exc
        services = dict(config.get("services") or {})
        if self.desktop_service not in services:
            raise UsageError(f"the task's compose project has no service {self.desktop_service!r} to be the "
                             f"desktop (services: {', '.join(sorted(services))})", code="usage.bad_option",
                             provider="docker")
        self._config = config
        return config

    def desktop_definition(self) -> dict[str, Any]:
        """The desktop service's definition (its ``build`` or ``image``)."""
        if self._config is None:
            raise RuntimeError("load() first")
        return dict(self._config["services"][self.desktop_service])

    def desktop_command(self) -> str | None:
        """A sidecar desktop's ``entrypoint`` + ``command`` as one shell line (None for ``main``, kept up by
        Harbor's ``sleep infinity``, and for a service with neither)."""
        if self.main_is_desktop:
            return None
        service = self.desktop_definition()
        argv: list[str] = []
        for key in ("entrypoint", "command"):
            value = service.get(key)
            if isinstance(value, str):
                argv += ["sh", "-c", value]
            elif isinstance(value, list):
                argv += [str(v) for v in value]
        return " ".join(shlex.quote(a) for a in argv) if argv else None

    def image(self, service: str) -> str:
        return f"{self.image_prefix}-{re.sub(r'[^a-z0-9_.-]', '-', service.lower())}"

    async def desktop_image(self) -> str | None:
        """For a sidecar desktop: its image, built by ``docker compose build`` when the service has ``build``
        (None for ``main``, whose image the environment builds from the task's Dockerfile)."""
        if self.main_is_desktop:
            return None
        service = self.desktop_definition()
        if service.get("build"):
            tag = self.image(self.desktop_service)
            single = {"services": {self.desktop_service: {"build": service["build"], "image": tag}}}
            path = self._tmp / "desktop-build.json"
            path.write_text(json.dumps(single))
            await self._compose("build", self.desktop_service, files=[path], timeout=3600,
                                what=f"build the desktop service {self.desktop_service}")
            return tag
        image = service.get("image")
        return str(image) if image else None

    def _project(self, container: str, labels: Mapping[str, str]) -> dict[str, Any]:
        config = dict(self._config or {})
        services: dict[str, Any] = {}
        for name, raw in dict(config.get("services") or {}).items():
            if name == self.desktop_service:
                continue
            service = {k: v for k, v in dict(raw).items() if k not in _NETWORK_KEYS}
            service["network_mode"] = f"container:{container}"
            depends = service.get("depends_on")
            if isinstance(depends, dict):
                service["depends_on"] = {k: v for k, v in depends.items() if k != self.desktop_service}
                if not service["depends_on"]:
                    service.pop("depends_on")
            own = dict(service.get("labels") or {})
            service["labels"] = {**own, **labels, LABEL_COMPOSE_SERVICE: name}
            if service.get("build") and "image" not in service:
                service["image"] = self.image(name)  # shared by the task's trials, not one image per project
            services[name] = service
        config["services"] = services
        config.pop("networks", None)
        config["name"] = self.name
        return config

    # -- lifecycle --------------------------------------------------------------------------------------------
    async def up(self, container: str, labels: Mapping[str, str], desktop_exec: Any) -> None:
        """Start every service but the desktop in the desktop's network namespace, labelled as its session; names
        resolve through the desktop's ``/etc/hosts``. ``desktop_exec(command, user)`` runs on the desktop."""
        project = self._project(container, labels)
        self._file = self._tmp / "project.json"
        self._file.write_text(json.dumps(project))
        names = sorted([*project["services"], self.desktop_service])
        hosts = "127.0.0.1 " + " ".join(names)
        await desktop_exec(f"grep -qxF {shlex.quote(hosts)} /etc/hosts || echo {shlex.quote(hosts)} >> /etc/hosts",
                           "root")
        command = self.desktop_command()
        if command:  # a sidecar desktop's own command (a VNC server, ...) runs on the desktop, in the background
            log = f"/tmp/.deskctl-compose-{self.desktop_service}.log"
            await desktop_exec(f"setsid nohup {command} >{log} 2>&1 </dev/null &",
                               str(self.desktop_definition().get("user") or "") or None)
        if not project["services"]:
            return
        self._up = True  # from here on, down() has something to remove
        await self._compose("up", "-d", "--build", "--wait", "--no-color", timeout=3600,
                            what="start the task's compose services")

    async def down(self) -> None:
        """Remove the project's containers (and volumes), confirmed by listing them; keeps no temp files."""
        try:
            if self._up and self._file is not None:
                await self._compose("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout=300,
                                    what="remove the task's compose services")
                left = await self._compose("ps", "--all", "--quiet", timeout=60, what="list the compose services")
                if left.strip():
                    raise ProviderApiError(f"compose services of {self.name} are still there after down: "
                                           f"{left.split()}", provider="docker",
                                           remedy=f"docker compose -p {self.name} down")
                self._up = False
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- per-service operations -------------------------------------------------------------------------------
    def _check_service(self, service: str) -> None:
        if self._config is None or service not in (self._config.get("services") or {}):
            from harbor.environments.base import ServiceOperationsUnsupportedError

            raise ServiceOperationsUnsupportedError(f"the task's compose project has no service {service!r}")

    async def exec(self, service: str, command: str, *, cwd: str | None, env: Mapping[str, str] | None,
                   timeout: float, user: str | None) -> tuple[str, str, int]:
        """``docker compose exec`` of ``bash -c command`` in ``service``: (stdout, stderr, exit code; 124 on a
        timeout, after which the command is ended)."""
        self._check_service(service)
        args = ["exec", "-T"]
        if user is not None:
            args += ["--user", user]
        if cwd:
            args += ["--workdir", cwd]
        for key, value in (env or {}).items():
            args += ["--env", f"{key}={value}"]
        args += [service, "bash", "-c", command]
        return await self._run(args, timeout)

    async def stop_service(self, service: str) -> None:
        self._check_service(service)
        await self._compose("stop", "--timeout", "5", service, timeout=120, what=f"stop the service {service}")

    async def stop_container(self, container: str) -> None:
        out, err, code = await _docker("stop", "--time", "5", container, timeout=120, env=self._env)
        if code != 0:
            raise ProviderApiError(f"docker could not stop the desktop's container: {(err or out).strip()[-500:]}",
                                   provider="docker")

    async def download(self, service: str, source: str, target: Path | str, *, folder: bool) -> None:
        self._check_service(service)
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if folder:
            target.mkdir(parents=True, exist_ok=True)
            await self._compose("cp", f"{service}:{source.rstrip('/')}/.", str(target), timeout=600,
                                what=f"copy {source} out of {service}")
        else:
            await self._compose("cp", f"{service}:{source}", str(target), timeout=600,
                                what=f"copy {source} out of {service}")

    async def upload(self, service: str, source: Path | str, target: str) -> None:
        self._check_service(service)
        source = Path(source)
        parent = target if source.is_dir() else str(Path(target).parent)
        await self.exec(service, f"mkdir -p {shlex.quote(parent)}", cwd=None, env=None, timeout=60, user="root")
        src = f"{source}/." if source.is_dir() else str(source)
        await self._compose("cp", src, f"{service}:{target}", timeout=600, what=f"copy {source} into {service}")

    # -- the docker compose CLI -------------------------------------------------------------------------------
    async def _compose(self, *args: str, files: list[Path] | None = None, timeout: float, what: str) -> str:
        out, err, code = await self._run(list(args), timeout, files=files)
        if code != 0:
            raise ProviderApiError(f"docker compose could not {what} (exit {code}): {(err or out).strip()[-1500:]}",
                                   provider="docker")
        return out

    async def _run(self, args: list[str], timeout: float, files: list[Path] | None = None) -> tuple[str, str, int]:
        argv = ["compose", "--project-name", self.name]
        for path in files if files is not None else [self._file] if self._file is not None else []:
            argv += ["--file", str(path)]
        if files is None and self._file is not None:
            argv += ["--project-directory", str(self.environment_dir)]
        return await _docker(*argv, *args, timeout=timeout, env=self._env)


async def _docker(*args: str, timeout: float, env: Mapping[str, str]) -> tuple[str, str, int]:
    """The docker CLI: (stdout, stderr, exit code); 124 after ``timeout`` seconds, the process killed."""
    proc = await asyncio.create_subprocess_exec("docker", *args, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=dict(env), start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        if isinstance(exc, asyncio.CancelledError):
            raise
        return "", f"timed out after {timeout:g}s", 124
    return out.decode(errors="replace"), err.decode(errors="replace"), int(proc.returncode or 0)


class ComposeMixin:
    """What :class:`~deskctl.integrations.harbor.DeskctlEnvironment` does for a compose task: the hooks its
    ``start``/``stop``/``exec``/file methods call, and Harbor's per-service operations (``service_exec``,
    ``service_download_*``, ``stop_service``). Everything is a no-op for a task without a compose file."""

    _compose: ComposeProject | None = None
    _desktop_container: str | None = None
    environment_dir: Path
    environment_name: str
    environment_id: str
    session_id: str
    logger: Any
    options: Any

    @property
    def _is_compose_task(self) -> bool:
        return (self.environment_dir / COMPOSE_FILE).exists()

    def _compose_check(self, provider: str) -> None:
        if self._is_compose_task and provider != "docker":
            raise ValueError(f"deskctl runs a docker-compose task on provider=docker only (not {provider!r})")

    @property
    def _compose_main_is_container(self) -> bool:
        """Harbor's ``main`` is a compose container (the desktop is a sidecar): main's calls go to it."""
        return self._compose is not None and not self._compose.main_is_desktop

    async def _compose_prepare(self) -> str | None:
        """Before the desktop opens: read the project; the image of a sidecar desktop (None: the environment's own
        image logic applies, for a desktop that is ``main``)."""
        if not self._is_compose_task:
            return None
        task = re.sub(r"[^a-z0-9_.-]", "-", str(self.environment_name).lower()).strip(".-")[:40] or "task"
        self._compose = ComposeProject(self.environment_dir, self.session_id,
                                       desktop_service=str(self.options.compose_desktop or MAIN_SERVICE),
                                       image_prefix=f"deskctl-harbor-compose:{task}-{self.environment_id[:12]}",
                                       logger=self.logger)
        await self._compose.load()
        return await self._compose.desktop_image()

    async def _compose_up(self, desk: Any) -> None:
        """After the desktop opened: the other services, labelled with the desktop's deskctl labels."""
        if self._compose is None:
            return
        handle = desk.handle
        # the session's labels (not the docker provider's own: its folders and display are the desktop's alone)
        labels = {k: v for k, v in dict(handle.labels).items()
                  if k.startswith(("deskctl.", "harbor.")) and not k.startswith("deskctl.docker.")}
        container = self._desktop_container = str(handle.data.get("container") or handle.resource_id)

        async def on_desktop(command: str, user: str | None) -> None:
            result = await desk.exec(f"bash -c {shlex.quote(command)}", 60.0, user=user)
            if result.exit_code != 0:
                raise ProviderApiError(f"cannot name the compose services on the desktop: {result.stderr.strip()}",
                                       provider="docker")

        self.logger.info("deskctl: starting compose project %s beside desktop %s", self._compose.name, desk.id)
        await self._compose.up(container, labels, on_desktop)

    async def _compose_down(self) -> None:
        compose, self._compose = self._compose, None
        if compose is not None:
            await asyncio.shield(compose.down())

    async def _compose_main_exec(self, command: str, cwd: str | None, env: dict[str, str] | None,
                                 timeout: float, user: str | None) -> Any:
        from harbor.environments.base import ExecResult

        assert self._compose is not None
        out, err, code = await self._compose.exec(MAIN_SERVICE, command, cwd=cwd, env=env, timeout=timeout,
                                                  user=user)
        return ExecResult(stdout=out, stderr=err, return_code=code)

    def _is_desktop_service(self, service: str | None) -> bool:
        if service is None or service == MAIN_SERVICE:
            return not self._compose_main_is_container
        return self._compose is not None and service == self._compose.desktop_service

    # -- Harbor's per-service operations -------------------------------------------------------------------------
    async def _desktop_exec(self, command: str, cwd: str | None, env: dict[str, str] | None,
                            timeout_sec: int | None, user: str | int | None) -> Any:
        """``exec`` on the desktop itself (DeskctlEnvironment's, bypassing the route of ``main`` to a container)."""
        raise NotImplementedError

    def _require(self) -> Any:
        """The open desktop (DeskctlEnvironment's)."""
        raise NotImplementedError

    async def service_exec(self, command: str, *, service: str | None = None, cwd: str | None = None,
                           env: dict[str, str] | None = None, timeout_sec: int | None = None,
                           user: str | int | None = None) -> Any:
        if self._is_desktop_service(service):
            return await self._desktop_exec(command, cwd, env, timeout_sec, user)
        if self._compose is None:
            return await super().service_exec(command, service=service, cwd=cwd,  # type: ignore[misc]
                                               env=env, timeout_sec=timeout_sec, user=user)
        from harbor.environments.base import ExecResult

        out, err, code = await self._compose.exec(str(service or MAIN_SERVICE), command, cwd=cwd, env=env,
                                                  timeout=float(timeout_sec or 86400),
                                                  user=None if user is None else _user(user))
        return ExecResult(stdout=out, stderr=err, return_code=code)

    async def service_download_file(self, source_path: str, target_path: Path | str, *,
                                    service: str | None = None) -> None:
        if self._compose is None:
            await super().service_download_file(source_path, target_path, service=service)  # type: ignore[misc]
        elif self._is_desktop_service(service):
            await self._require().download(source_path, target_path)
        else:
            await self._compose.download(str(service or MAIN_SERVICE), source_path, target_path, folder=False)

    async def service_download_dir(self, source_dir: str, target_dir: Path | str, *,
                                   service: str | None = None) -> None:
        if self._compose is None:
            await super().service_download_dir(source_dir, target_dir, service=service)  # type: ignore[misc]
        elif self._is_desktop_service(service):
            await self._require().download(source_dir, target_dir)
        else:
            await self._compose.download(str(service or MAIN_SERVICE), source_dir, target_dir, folder=True)

    async def stop_service(self, service: str) -> None:
        if self._compose is None:
            await super().stop_service(service)  # type: ignore[misc]
            return
        if self._is_desktop_service(service):
            # the desktop's container is stopped now (nothing runs on in it); stop() removes it with its session
            await self._compose.stop_container(str(self._desktop_container))
            return
        await self._compose.stop_service(service)


def _user(user: str | int) -> str:
    return "root" if str(user) == "0" else str(user)
