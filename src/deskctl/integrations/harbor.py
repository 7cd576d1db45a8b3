"""A Harbor environment whose sandbox is a deskctl desktop, on any deskctl provider.

    harbor run -p TASK -a oracle -e deskctl.integrations.harbor:DeskctlEnvironment \\
        --ek provider=docker --ek geometry=1280x800

Harbor (``harbor`` 0.26, Python >= 3.12) imports this module; deskctl never does (``import deskctl`` does not
touch ``deskctl.integrations``). Every Harbor call maps onto deskctl's public async API (:mod:`deskctl.aio`):

* ``start`` opens the desktop with :func:`deskctl.aio.open_desktop` (preflight, ledger row, labels, pinned
  geometry, readiness), then makes Harbor's folders (``/logs/*``, ``/tests``, ``/solution``) as root;
* ``exec`` is :meth:`AsyncDesktop.exec` with ``cwd``/``env``/``user``/``timeout`` (a command runs under ``bash -c``
  on Linux and macOS guests, as Harbor's own environments run it; ``user=None`` is the desktop's user);
* ``upload_file``/``upload_dir``/``download_file``/``download_dir`` are :meth:`AsyncDesktop.upload` and
  :meth:`AsyncDesktop.download` (a folder's contents merge into the target, as ``docker cp`` does);
* ``stop`` destroys the desktop, confirmed, whatever ``delete`` says: deskctl never leaves a desktop behind. A
  process that dies before ``stop`` leaves a labelled desktop (``harbor.session``, ``harbor.task`` besides
  deskctl's own labels) that ``deskctl reap`` finds; the docker provider's watcher removes it even sooner.

With ``provider=docker`` a task's ``environment/Dockerfile`` is built FROM the deskctl desktop image (the
Dockerfile starts ``ARG DESKCTL_IMAGE`` / ``FROM ${DESKCTL_IMAGE}``) and the desktop runs that image, so it is
still deskctl's desktop (Xvfb, the pinned geometry, input over X11) with the task's files on it. A built image
that is not derived from the desktop image is refused. docs/harbor.md has the options and what is tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import shlex
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode, TaskOS
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import Field, PrivateAttr, model_validator

from deskctl.errors import DeskctlError, PreflightError, ProviderApiError, UsageError

if TYPE_CHECKING:
    from deskctl.aio import AsyncDesktop
    from deskctl.spec import DesktopSpec

__all__ = ["DeskctlEnvironment", "DeskctlOptions"]

#: the build argument a task's Dockerfile takes its base from: the deskctl desktop image
BASE_ARG = "DESKCTL_IMAGE"
#: repository of the images built from tasks' Dockerfiles
TASK_REPOSITORY = "deskctl-harbor"
LABEL_HARBOR_SESSION = "harbor.session"
LABEL_HARBOR_TASK = "harbor.task"


class DeskctlOptions(EnvironmentOptions):  # type: ignore[misc]  # harbor is not installed where mypy runs
    """``--ek`` options of :class:`DeskctlEnvironment` (``harbor environment schema`` prints them)."""

    provider: str = Field(default="docker", description="deskctl provider: docker, xvfb, ssh, daytona, ...")
    platform: str = Field(default="ubuntu", description="ubuntu, windows or macos (what the provider offers)")
    geometry: str = Field(default="1024x768", description="screen size WxH, or 'native'")
    window_manager: bool = False
    start_url: str | None = None
    ttl: str | float | None = Field(default=None, description="desktop lifetime backstop: 90s, 15m, 2h")
    max_minutes: float | None = None
    max_usd: float | None = None
    budget: str | None = None
    ready_timeout: float = 120.0
    provider_options: dict[str, Any] = Field(default_factory=dict,
                                             description="the provider's options (deskctl -o KEY=VALUE)")
    labels: dict[str, str] = Field(default_factory=dict)
    exec_timeout: float = Field(default=24 * 3600.0, gt=0,
                                description="seconds allowed to a command Harbor runs without a timeout")
    build_network: str | None = Field(default=None, description="network of the task image build's RUN steps")
    ignore_dockerfile: bool = Field(default=False,
                                    description="run a task that has a Dockerfile on a provider that cannot "
                                                "build it, without building it")

    _spec: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _deskctl_spec(self) -> DeskctlOptions:
        # deskctl's own checks (provider name, platform, geometry, option names) as Harbor's option errors
        try:
            self._spec = self.spec()
        except DeskctlError as exc:
            raise ValueError(_explain(exc)) from None
        return self

    @property
    def base_spec(self) -> DesktopSpec:
        """The spec of the options alone (checked once, when they were validated)."""
        spec: DesktopSpec | None = self._spec
        if spec is None:
            spec = self._spec = self.spec()
        return spec

    def spec(self, **overrides: Any) -> DesktopSpec:
        """The deskctl spec these options ask for; ``overrides`` replace provider options (the task image)."""
        from deskctl.spec import DesktopSpec

        name = DesktopSpec.build(provider=self.provider).provider
        return DesktopSpec.build(
            provider=name, platform=self.platform, geometry=self.geometry, window_manager=self.window_manager,
            start_url=self.start_url, ttl_seconds=self.ttl, max_minutes=self.max_minutes, max_usd=self.max_usd,
            budget=self.budget, labels=dict(self.labels),
            provider_options={**_provider_options(name, self.provider_options), **overrides},
        )


def _provider_options(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """deskctl's configuration for the provider (``[providers.NAME]``) under the ``--ek provider_options``, names
    and values checked as ``deskctl up`` checks its ``-o`` flags."""
    from deskctl.cli._spec import check_option_names
    from deskctl.config import load_config
    from deskctl.providers import load_provider_class

    config = load_config()
    merged = config.provider_options(name)
    if merged:
        check_option_names(name, merged, where=config.provider_source(name), config=True)
    check_option_names(name, given, where="--ek provider_options")
    merged.update(given)
    if merged:
        load_provider_class(name).check_options(merged)
    return merged


def _explain(exc: DeskctlError) -> str:
    text = f"deskctl: {exc.message} [{exc.code}]"
    return f"{text}; {exc.remedy}" if exc.remedy else text


class DeskctlEnvironment(BaseEnvironment):  # type: ignore[misc]  # harbor is not installed where mypy runs
    """Harbor's sandbox on a deskctl desktop; see the module docstring."""

    options_model: ClassVar[type[DeskctlOptions]] = DeskctlOptions
    options: DeskctlOptions
    # one build per image tag at a time, across the trials of a job
    _build_locks: ClassVar[dict[str, asyncio.Lock]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._desk: AsyncDesktop | None = None
        super().__init__(*args, **kwargs)

    # -- what Harbor asks of an environment type -----------------------------------------------------------
    @staticmethod
    def type() -> str:
        return "deskctl"

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        """Harbor's check before any trial is queued: the options, then deskctl's own preflight of the provider
        (read-only; nothing is created). Not ready is the SystemExit Harbor expects, with deskctl's remedy."""
        super().preflight(kwargs)
        options = DeskctlOptions.model_validate(kwargs or {})
        import deskctl

        try:
            deskctl.preflight(options.spec()).raise_for_failures()
        except UsageError as exc:  # bad input: Harbor's option errors are ValueError
            raise ValueError(_explain(exc)) from None
        except DeskctlError as exc:  # not ready (credentials, engine down, no image): Harbor's is SystemExit
            raise SystemExit(_explain(exc)) from None

    @property
    def _provider(self) -> str:
        return self.options.base_spec.provider

    @property
    def _windows(self) -> bool:
        return self.options.base_spec.platform.value == "windows"

    @property
    def _offline_by_choice(self) -> bool:
        """The docker provider's desktop network is ``none`` unless a network is named."""
        network = self.options.provider_options.get("network")
        return self._provider == "docker" and network in (None, "none")

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(windows=self._windows, mounted=False,
                                       disable_internet=self._offline_by_choice)

    def _validate_definition(self) -> None:
        windows_task = self.task_env_config.os == TaskOS.WINDOWS
        if self._windows != windows_task:
            raise ValueError(
                f"deskctl platform={self.options.platform!r} and the task's [environment].os="
                f"{self.task_env_config.os.value!r} do not match: a Windows task needs platform=windows, "
                "and platform=windows needs a Windows task")
        if (self.environment_dir / "docker-compose.yaml").exists():
            raise ValueError("deskctl runs one desktop per trial, not a docker-compose project: this task's "
                             "environment needs Harbor's docker environment")
        if self._provider != "docker" and self._image_definition() and not self.options.ignore_dockerfile:
            raise ValueError(
                f"deskctl provider {self._provider!r} does not build images: this task's environment "
                "(Dockerfile or docker_image) applies with provider=docker only; pass --ek ignore_dockerfile=true "
                "to run the task on the provider's stock desktop without it")

    def _image_definition(self) -> str | None:
        if (self.environment_dir / "Dockerfile").is_file():
            return "Dockerfile"
        if self.task_env_config.docker_image:
            return "docker_image"
        return None

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def start(self, force_build: bool) -> None:
        if self._desk is not None:
            return
        from deskctl import aio

        overrides: dict[str, Any] = {}
        if self._provider == "docker":
            overrides.update(self._docker_overrides())
            if self._image_definition():
                overrides["image"] = await self._task_image(force_build)
        spec = self.options.spec(**overrides)
        labels = {**spec.labels, LABEL_HARBOR_SESSION: _label_value(self.session_id),
                  LABEL_HARBOR_TASK: _label_value(self.environment_name)}
        spec = spec.model_copy(update={"labels": labels})
        self.logger.info("deskctl: opening a %s desktop (%s, %s)", spec.provider, spec.platform.value,
                         spec.geometry_label())
        self._desk = await aio.open_desktop(spec=spec, ready_timeout=self.options.ready_timeout)
        try:
            paths = EnvironmentPaths.for_os(self.os)
            dirs = [paths.agent_dir, paths.verifier_dir, paths.artifacts_dir, paths.tests_dir, paths.solution_dir,
                    paths.default_skills_dir]
            made = await self.ensure_dirs(dirs, chmod=not self._windows)
            if made is not None and made.return_code != 0:
                raise ProviderApiError(f"deskctl: cannot make Harbor's folders on the desktop: "
                                       f"{(made.stderr or made.stdout or '').strip()[-300:]}",
                                       provider=spec.provider)
            await self._upload_environment_dir_after_start()
        except BaseException:
            await self.stop(delete=True)
            raise
        self.logger.info("deskctl: desktop %s ready", self._desk.id)

    async def stop(self, delete: bool) -> None:
        desk, self._desk = self._desk, None
        if desk is None:
            return
        if not delete:
            self.logger.warning("deskctl: --no-delete is not honoured; deskctl always destroys its desktops "
                                "(use `deskctl up` for a desktop that outlives a run)")
        await desk.close()  # confirmed destroy, shielded from cancellation; CleanupIncomplete names what is left

    def _require(self) -> AsyncDesktop:
        if self._desk is None:
            raise UsageError("the deskctl environment is not started", code="usage.session_state")
        return self._desk

    # -- commands --------------------------------------------------------------------------------------------
    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        desk = self._require()
        who = _user_name(self._resolve_user(user))
        pidfile: str | None = None
        if self._windows:
            line = command
        else:
            # the shell writes down its pid so that a cancelled call can end the command (_end_command): the
            # desktop runs one call at a time, and a command left running would hold every later call back
            pidfile = f"/tmp/.deskctl-harbor-{uuid.uuid4().hex[:16]}.pid"
            line = (f"echo $$ > {pidfile}; trap 'rm -f {pidfile}' EXIT; trap 'exit 143' TERM; "
                    f"bash -c {shlex.quote(command)}")
        options: dict[str, Any] = {"cwd": cwd or self.task_env_config.workdir, "env": self._merge_env(env),
                                   "user": who}
        timeout = float(timeout_sec) if timeout_sec else self.options.exec_timeout
        try:
            result = await desk.exec(line, timeout, **options)
        except asyncio.CancelledError:  # Harbor's agent or verifier timeout
            if pidfile is not None:
                await asyncio.shield(asyncio.to_thread(_end_command, desk, pidfile, who))
            raise
        if result.exit_code not in (0, 124) and who == "root" and _owner_may_retry(command):
            # Files deskctl copies in belong to the desktop user, and a desktop's root may hold no capabilities
            # (the docker provider drops them all): Harbor's `chmod` of a script it uploaded then needs the owner.
            retry = await desk.exec(line, timeout, **{**options, "user": None})
            if retry.exit_code == 0:
                result = retry
        return ExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.exit_code)

    # -- files -----------------------------------------------------------------------------------------------
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await self._require().upload(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await self._require().upload(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await self._require().download(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self._require().download(source_dir, target_dir)

    # -- the docker provider: the task's image, resources, network -------------------------------------------
    def _docker_overrides(self) -> dict[str, Any]:
        given = self.options.provider_options
        out: dict[str, Any] = {}
        if "network" not in given:
            # deskctl's docker desktops are offline by default; a task that asks for the network gets a bridge
            wants = self.network_policy.network_mode
            out["network"] = "none" if wants == NetworkMode.NO_NETWORK else "bridge"
        # the task's resources, as Harbor's enforcement policy leaves them (None when told to ignore them)
        if "memory" not in given and self._effective_memory_mb:
            out["memory"] = f"{int(self._effective_memory_mb)}m"
        if "cpus" not in given and self._effective_cpus:
            out["cpus"] = float(self._effective_cpus)
        return out

    async def _task_image(self, force_build: bool) -> str:
        """The image the desktop runs: the task's Dockerfile built FROM the desktop image (once per content), or
        the task's ``docker_image``; either must derive from a deskctl desktop image."""
        lock = self._build_locks.setdefault(self.environment_id, asyncio.Lock())
        async with lock:
            return await asyncio.to_thread(self._task_image_sync, force_build)

    def _task_image_sync(self, force_build: bool) -> str:
        from deskctl.providers.docker.images import VARIANTS, connect, docker_errors, find_image

        client = connect(timeout=600)
        try:
            given = self.options.provider_options
            variant = str(given.get("variant") or ("browser" if self.options.start_url else "minimal"))
            if variant not in VARIANTS:
                raise UsageError(f"unknown image variant {variant!r}; allowed: {', '.join(VARIANTS)}",
                                 code="usage.bad_variant", provider="docker")
            base = str(given.get("image") or "") or find_image(variant, client)
            if not base:
                raise PreflightError(f"no {variant} deskctl desktop image is on this Docker engine",
                                     code="preflight.image_missing", provider="docker",
                                     remedy=f"deskctl image build --variant {variant}")
            with docker_errors(f"inspect the desktop image {base}"):
                base_info = client.api.inspect_image(base)  # type: ignore[no-untyped-call]
            if not (self.environment_dir / "Dockerfile").is_file():
                image = str(self.task_env_config.docker_image)
                _check_derived(client, image, base_info, what=f"the task's docker_image {image}")
                return image
            digest = hashlib.sha256(f"{self.environment_id}\0{base_info['Id']}".encode()).hexdigest()[:16]
            tag = f"{TASK_REPOSITORY}:{_tag_part(self.environment_name)}-{digest}"
            if not force_build and _image_exists(client, tag):
                return tag
            self.logger.info("deskctl: building %s from %s FROM %s", tag, self.environment_dir, base)
            log: list[str] = []
            with docker_errors(f"build {tag}"):
                stream = client.api.build(
                    path=str(self.environment_dir), dockerfile="Dockerfile", tag=tag, buildargs={BASE_ARG: base},
                    labels={LABEL_HARBOR_TASK: _label_value(self.environment_name)}, rm=True, forcerm=True,
                    pull=False, decode=True, network_mode=self.options.build_network, nocache=force_build,
                )
                for chunk in stream:
                    if "error" in chunk:
                        tail = "\n".join(log[-15:])
                        raise ProviderApiError(f"building the task image {tag} failed: "
                                               f"{str(chunk['error']).strip()}\n{tail}", provider="docker",
                                               remedy="fix the task's Dockerfile (it must start "
                                                      f"`ARG {BASE_ARG}` / `FROM ${{{BASE_ARG}}}`)")
                    line = str(chunk.get("stream") or "").rstrip()
                    if line:
                        log.append(line)
                        self.logger.debug("build: %s", line)
            try:
                _check_derived(client, tag, base_info, what=f"the image built from {self.environment_dir}/Dockerfile")
            except DeskctlError:
                with docker_errors(f"remove {tag}"):
                    client.api.remove_image(tag, force=True)
                raise
            return tag
        finally:
            client.close()


def _check_derived(client: Any, image: str, base_info: Mapping[str, Any], *, what: str) -> None:
    """Refuse an image that is not a deskctl desktop: it must carry the desktop image's files label (inherited
    from ``FROM ${DESKCTL_IMAGE}``) and keep its entrypoint (which starts Xvfb at the pinned size)."""
    from deskctl.providers.docker.images import LABEL_FILES, docker_errors

    with docker_errors(f"inspect {image}"):
        info = client.api.inspect_image(image)
    labels = (info.get("Config") or {}).get("Labels") or {}
    base_config = base_info.get("Config") or {}
    if labels.get(LABEL_FILES) != (base_config.get("Labels") or {}).get(LABEL_FILES):
        raise UsageError(f"{what} is not built FROM the deskctl desktop image", code="usage.bad_image",
                         provider="docker",
                         remedy=f"start the Dockerfile with `ARG {BASE_ARG}` and `FROM ${{{BASE_ARG}}}`")
    if (info.get("Config") or {}).get("Entrypoint") != base_config.get("Entrypoint"):
        raise UsageError(f"{what} replaces the desktop image's ENTRYPOINT, which starts the desktop",
                         code="usage.bad_image", provider="docker", remedy="remove ENTRYPOINT from the Dockerfile")


def _image_exists(client: Any, tag: str) -> bool:
    from deskctl.errors import NotFound
    from deskctl.providers.docker.images import docker_errors

    try:
        with docker_errors(f"inspect {tag}"):
            client.api.inspect_image(tag)
    except (NotFound, PreflightError):
        return False
    return True


def _end_command(desk: AsyncDesktop, pidfile: str, user: str | None) -> None:
    """End the command whose shell wrote ``pidfile``, children first, as the user it runs as. Called from a thread
    while the desktop's worker is still inside that command's exec (the sync session takes calls from threads)."""
    line = (f"p=$(cat {pidfile} 2>/dev/null) || exit 0; "
            '_k() { for c in $(pgrep -P "$1"); do _k "$c"; done; kill -TERM "$1" 2>/dev/null; }; '
            f'_k "$p"; rm -f {pidfile}')
    with contextlib.suppress(Exception):  # best effort: the call's own timeout still ends it
        desk.sync.exec(line, 30.0, user=user)


def _user_name(user: str | int | None) -> str | None:
    """Harbor's user (a name or a uid) as deskctl's: uid 0 is ``root``."""
    if user is None:
        return None
    if isinstance(user, int) or str(user).isdigit():
        return "root" if int(user) == 0 else str(user)
    return str(user)


def _owner_may_retry(command: str) -> bool:
    """Harbor's own permission fix-ups (``chmod +x`` of a script, ``chmod -R a+rX`` of skills), which change
    nothing but modes and are safe to run a second time."""
    return bool(re.match(r"\s*chmod\s", command)) and not re.search(r"[;&|`$<>\n]", command)


def _label_value(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", value)[:63] or "-"


def _tag_part(value: str) -> str:
    part = re.sub(r"[^a-z0-9_.-]", "-", value.lower()).strip(".-")[:60]
    return part or "task"
