"""A Harbor environment whose sandbox is a deskctl desktop, on any deskctl provider.

    harbor run -p TASK -a oracle -e deskctl.integrations.harbor:DeskctlEnvironment \\
        --ek provider=docker --ek geometry=1280x800

Harbor (``harbor`` 0.26, Python >= 3.12) imports this module; deskctl never does (``import deskctl`` does not
touch ``deskctl.integrations``). Every Harbor call maps onto deskctl's public async API (:mod:`deskctl.aio`):

* ``start`` opens the desktop with :func:`deskctl.aio.open_desktop` (preflight, ledger row, labels, pinned
  geometry, readiness), then makes Harbor's folders (``/logs/*``, ``/tests``, ``/solution``) as root;
* ``exec`` is :meth:`AsyncDesktop.exec` with ``cwd``/``env``/``user``/``timeout`` (a command runs under ``bash -c``
  on Linux and macOS guests, as Harbor's own environments run it; ``user=None`` is the container's user: the
  image's own in Harbor mode, the desktop user with ``hardened=true``; output reaches Harbor's log callback as
  it comes);
* ``upload_file``/``upload_dir``/``download_file``/``download_dir`` are :meth:`AsyncDesktop.upload` and
  :meth:`AsyncDesktop.download` (a folder's contents merge into the target, as ``docker cp`` does);
* ``stop`` destroys the desktop, confirmed, whatever ``delete`` says: deskctl never leaves a desktop behind. A
  process that dies before ``stop`` leaves a labelled desktop (``harbor.session``, ``harbor.task`` besides
  deskctl's own labels) that ``deskctl reap`` finds; the docker provider's watcher removes it even sooner.

With ``provider=docker`` a task's ``environment/Dockerfile`` is built as Harbor's docker environment builds it
(its folder as the context, no build arguments but ``DESKCTL_IMAGE`` for a Dockerfile that asks for deskctl's
desktop image), once per content, and the desktop runs that image: deskctl starts Xvfb in it on display ``:1``
(where Harbor's computer-1 agent looks), adding a thin layer with Xvfb through the image's package manager when it
has none (:mod:`deskctl.providers.docker.layers`). The container runs as Harbor runs a task (the image's user,
Docker's default capabilities) unless ``hardened=true``. docs/harbor.md has the options and what is tested.

Model spend: Harbor stops the environment before the trial's agent context is final, so the agent's token use is
recorded by a trial hook, :func:`meter_trial` (``job.on_trial_ended(meter_trial)``): it reads the trial's
``AgentContext`` (per model from ``model_usage``, else the totals ``n_input_tokens``/``n_output_tokens``/
``cost_usd``) and adds it to the ledger row of the trial's desktop (found by its ``harbor.session`` label) with
role ``agent``, beside the desktop's cost (``deskctl cost --by role``). Spend recorded after the trial cannot
stop it: budgets count it for the next sessions.
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
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode, TaskOS
from harbor.models.trial.paths import EnvironmentPaths
from pydantic import Field, PrivateAttr, field_validator, model_validator

from deskctl.errors import DeskctlError, PreflightError, ProviderApiError, UsageError
from deskctl.integrations.harbor_compose import ComposeMixin
from deskctl.integrations.harbor_dockerfile import _declares_arg, _dockerfile_problem, _from_images
from deskctl.integrations.harbor_spend import (
    LABEL_HARBOR_SESSION,
    _label_value,
    agent_usage,
    meter_trial,
    record_agent_context,
)

if TYPE_CHECKING:
    from deskctl.aio import AsyncDesktop
    from deskctl.spec import DesktopSpec

__all__ = ["DeskctlEnvironment", "DeskctlOptions", "agent_usage", "meter_trial", "record_agent_context"]

#: the build argument a task's Dockerfile takes its base from: the deskctl desktop image
BASE_ARG = "DESKCTL_IMAGE"
#: repository of the images built from tasks' Dockerfiles
TASK_REPOSITORY = "deskctl-harbor"
LABEL_HARBOR_TASK = "harbor.task"
#: the X display of a desktop in Harbor mode: where Harbor's computer-1 agent looks (/tmp/.X11-unix/X1)
HARBOR_DISPLAY = 1


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
    exec_timeout: float = Field(default=24 * 3600.0,
                                description="seconds allowed to a command Harbor runs without a timeout")
    build_network: str | None = Field(default=None, description="network of the task image build's RUN steps")
    ignore_dockerfile: bool = Field(default=False,
                                    description="run the task on deskctl's own desktop image, without building "
                                                "its Dockerfile or using its docker_image")
    hardened: bool = Field(default=False,
                           description="docker: deskctl's hardened container (no capabilities, no new privileges, "
                                       "the desktop user 1000) instead of Harbor's (the image's user, Docker's "
                                       "default capabilities)")
    compose_desktop: str = Field(default="main", description="the service of a docker-compose task that is the "
                                                             "deskctl desktop (main, or a sidecar's name)")

    _spec: Any = PrivateAttr(default=None)

    @field_validator("ready_timeout", "exec_timeout", mode="before")
    @classmethod
    def _bounded(cls, value: Any, info: Any) -> float:
        # deskctl.limits' bounds (NaN, inf, 0 and 1e308 are refused as `deskctl up` refuses them)
        from deskctl.limits import check_number

        try:
            number: float = check_number(info.field_name, value)
        except DeskctlError as exc:
            raise ValueError(_explain(exc)) from None
        return number

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


class DeskctlEnvironment(ComposeMixin, BaseEnvironment):  # type: ignore[misc]  # harbor is not installed where mypy runs
    """Harbor's sandbox on a deskctl desktop; see the module docstring."""

    options_model: ClassVar[type[DeskctlOptions]] = DeskctlOptions
    options: DeskctlOptions
    # one build per image tag at a time, across the trials of a job
    _build_locks: ClassVar[dict[str, asyncio.Lock]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._desk: AsyncDesktop | None = None
        self._start_failed = False
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

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        """The task's cpus and memory become the docker desktop's limits (fractions of a CPU too), so Harbor's
        resource preflight runs; the other providers' sizes are their own (docs/harbor.md)."""
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    def _validate_definition(self) -> None:
        windows_task = self.task_env_config.os == TaskOS.WINDOWS
        if self._windows != windows_task:
            raise ValueError(
                f"deskctl platform={self.options.platform!r} and the task's [environment].os="
                f"{self.task_env_config.os.value!r} do not match: a Windows task needs platform=windows, "
                "and platform=windows needs a Windows task")
        self._compose_check(self._provider)  # a docker-compose task: provider docker (harbor_compose.py)
        if self._provider != "docker" and self._image_definition() and not self.options.ignore_dockerfile:
            raise ValueError(
                f"deskctl provider {self._provider!r} does not build images: this task's environment "
                "(Dockerfile or docker_image) applies with provider=docker only; pass --ek ignore_dockerfile=true "
                "to run the task on the provider's stock desktop without it")
        if self._image_definition() == "Dockerfile" and not self.options.ignore_dockerfile:
            problem = _dockerfile_problem((self.environment_dir / "Dockerfile").read_text(errors="replace"))
            if problem:
                raise ValueError(_explain(UsageError(
                    f"the task's Dockerfile ({self.environment_dir / 'Dockerfile'}) {problem}",
                    code="usage.bad_image", provider="docker",
                    remedy="base the task on a Linux image with a shell (Debian, Ubuntu, Alpine, Fedora), or pass "
                           "--ek ignore_dockerfile=true to run it on deskctl's own desktop image")))

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
        try:
            await self._start(force_build)
        except DeskctlError as exc:
            # Harbor records str(exception) in result.json and prints only its class: make it carry deskctl's
            # code and remedy (the exception keeps its class, which Harbor's retry policy looks at), and say it
            exc.message = _explain(exc)
            self._start_failed = True
            self.logger.error("%s", exc.message)
            raise

    async def _start(self, force_build: bool) -> None:
        from deskctl import aio

        overrides: dict[str, Any] = {}
        if self._provider == "docker":
            overrides.update(self._docker_overrides())
            sidecar_image = await self._compose_prepare()  # a compose task whose desktop is a sidecar: its image
            if sidecar_image:
                overrides["image"] = sidecar_image
            elif self._image_definition() and not self.options.ignore_dockerfile:
                overrides["image"] = await self._task_image(force_build, overrides)
            elif self._image_definition():
                self.logger.warning("deskctl: ignore_dockerfile: the task runs on deskctl's own desktop image, "
                                    "without its %s", self._image_definition())
        spec = self.options.spec(**overrides)
        labels = {**spec.labels, LABEL_HARBOR_SESSION: _label_value(self.session_id),
                  LABEL_HARBOR_TASK: _label_value(self.environment_name)}
        spec = spec.model_copy(update={"labels": labels})
        self.logger.info("deskctl: opening a %s desktop (%s, %s)", spec.provider, spec.platform.value,
                         spec.geometry_label())
        self._desk = await aio.open_desktop(spec=spec, ready_timeout=self.options.ready_timeout)
        try:
            await self._compose_up(self._desk)  # the other services of a compose task, beside the desktop
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
        try:
            await self._compose_down()
        finally:
            await self._stop_desktop(delete)

    async def _stop_desktop(self, delete: bool) -> None:
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
        if self._compose_main_is_container:  # a compose task whose desktop is a sidecar: main is a container
            return await self._compose_main_exec(command, cwd or self.task_env_config.workdir, self._merge_env(env),
                                                 float(timeout_sec or self.options.exec_timeout),
                                                 _user_name(self._resolve_user(user)))
        return await self._desktop_exec(command, cwd, env, timeout_sec, user)

    async def _desktop_exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                            timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        desk = self._require()
        callback = self._output_callback()
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
        # Harbor's own timeout is checked as deskctl exec checks --timeout (desk.exec does it; a huge one refuses)
        timeout = float(timeout_sec) if timeout_sec else self.options.exec_timeout
        relay = _OutputRelay(callback) if callback is not None else None
        if relay is not None:
            options["on_output"] = relay.put
        try:
            result = await desk.exec(line, timeout, **options)
        except asyncio.CancelledError:  # Harbor's agent or verifier timeout
            if pidfile is not None:
                await asyncio.shield(asyncio.to_thread(_end_command, desk, pidfile, who))
            raise
        finally:
            if relay is not None:
                await relay.close()
        if result.exit_code not in (0, 124) and who == "root" and _owner_may_retry(command):
            # Files deskctl copies in belong to the desktop user, and a desktop's root may hold no capabilities
            # (the docker provider drops them all): Harbor's `chmod` of a script it uploaded then needs the owner.
            retry = await desk.exec(line, timeout, **{**options, "user": None, "on_output": None})
            if retry.exit_code == 0:
                result = retry
        return ExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.exit_code)

    # -- files -----------------------------------------------------------------------------------------------
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        if self._compose is not None and self._compose_main_is_container:
            return await self._compose.upload("main", source_path, target_path)
        await self._require().upload(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        if self._compose is not None and self._compose_main_is_container:
            return await self._compose.upload("main", source_dir, target_dir)
        await self._require().upload(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        if self._never_started():
            return
        if self._compose is not None and self._compose_main_is_container:
            return await self._compose.download("main", source_path, target_path, folder=False)
        await self._require().download(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        if self._never_started():
            return
        if self._compose is not None and self._compose_main_is_container:
            return await self._compose.download("main", source_dir, target_dir, folder=True)
        await self._require().download(source_dir, target_dir)

    def _never_started(self) -> bool:
        """After a failed start Harbor still fetches the logs: there are none, and its error is already said."""
        if self._desk is None and self._start_failed:
            self.logger.debug("deskctl: nothing to download: the desktop never started")
            return True
        return False

    # -- the docker provider: the task's image, resources, network -------------------------------------------
    def _docker_overrides(self) -> dict[str, Any]:
        """What Harbor's docker environment would give the task's container, where the user's provider options
        do not say otherwise: the network of the task's mode, its cpus and memory, its environment, the display
        computer-1 uses, Harbor's user and capabilities (unless ``hardened``), and the locale and time zone of
        its environment (LANG, LC_ALL, TZ) made to exist in the image."""
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
        if "hardened" not in given:
            out["hardened"] = self.options.hardened
        if "display" not in given:
            out["display"] = HARBOR_DISPLAY
        env = self._startup_env()
        if env and "env" not in given:
            out["env"] = dict(env)
        locale = env.get("LC_ALL") or env.get("LANG")
        if locale and "locale" not in given and locale not in ("C", "POSIX"):
            out["locale"] = locale
        if env.get("TZ") and "timezone" not in given:
            out["timezone"] = env["TZ"]
        return out

    async def _task_image(self, force_build: bool, overrides: Mapping[str, Any]) -> str:
        """The image the desktop runs: the task's Dockerfile built as Harbor builds it (once per content), or the
        task's ``docker_image``; then, when it lacks Xvfb or what the options ask for, the layer over it."""
        lock = self._build_locks.setdefault(self.environment_id, asyncio.Lock())
        async with lock:
            return await asyncio.to_thread(self._task_image_sync, force_build, overrides)

    def _task_image_sync(self, force_build: bool, overrides: Mapping[str, Any]) -> str:
        from deskctl.providers.docker.images import connect, docker_errors, image_exists
        from deskctl.providers.docker.layers import check_extras, ensure_desktop_image

        client = connect(timeout=600)
        try:
            options = {**self.options.provider_options, **overrides}
            extras = check_extras(options, "docker")
            network = self.options.build_network or options.get("build_network") or None
            if not (self.environment_dir / "Dockerfile").is_file():
                image = str(self.task_env_config.docker_image)
                if not image_exists(client, image):
                    self.logger.info("deskctl: pulling %s", image)
                    with docker_errors(f"pull the task's docker_image {image}"):
                        client.images.pull(image)
            else:
                image = self._build_task_dockerfile(client, force_build, network)
            built = ensure_desktop_image(client, image, extras, network_mode=network, force=force_build,
                                         progress=lambda line: self.logger.debug("layer: %s", line))
            if built.layer:
                self.logger.info("deskctl: the desktop runs %s (%s with Xvfb and the options' extras)", built.image,
                                 image)
            return built.image
        finally:
            client.close()

    def _build_task_dockerfile(self, client: Any, force_build: bool, network: str | None) -> str:
        """The task's Dockerfile built as Harbor's docker environment builds it: its folder as the context, no
        build arguments (but the desktop image for a Dockerfile that declares ``ARG DESKCTL_IMAGE``), the
        engine's own platform; tagged by the content, a failure remembered (:func:`layers.build_cached`)."""
        from deskctl.providers.docker.images import VARIANTS, docker_errors, find_image
        from deskctl.providers.docker.layers import build_cached, run_build

        dockerfile = (self.environment_dir / "Dockerfile").read_text(errors="replace")
        buildargs: dict[str, str] = {}
        base_id = ""
        if _declares_arg(dockerfile, BASE_ARG):  # a task written for deskctl: FROM ${DESKCTL_IMAGE}
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
                base_id = str(client.api.inspect_image(base)["Id"])
            buildargs[BASE_ARG] = base
        digest = hashlib.sha256(f"{self.environment_id}\0{base_id}".encode()).hexdigest()[:16]
        tag = f"{TASK_REPOSITORY}:{_tag_part(self.environment_name)}-{digest}"

        def build() -> None:
            missing = _missing_images(client, _from_images(dockerfile, buildargs))
            self.logger.info("deskctl: building %s from %s", tag, self.environment_dir)
            try:
                run_build(client, tag=tag, what=f"the task image {tag}", network_mode=network,
                          labels={LABEL_HARBOR_TASK: _label_value(self.environment_name)},
                          progress=lambda line: self.logger.debug("build: %s", line),
                          context=str(self.environment_dir), buildargs=buildargs, nocache=force_build,
                          remedy="fix the task's Dockerfile (read the build log above)")
            except ProviderApiError as exc:
                if not missing:
                    raise
                raise ProviderApiError(
                    f"the task's Dockerfile starts FROM {', '.join(missing)}, which is not on this Docker engine, "
                    f"and the engine could not get it: {exc.message}", provider="docker",
                    remedy=f"`docker pull {missing[0]}` where a registry is reachable (or `docker load` it), then "
                           "run again with `harbor run --force-build`") from exc

        build_cached(client, tag, f"task-{digest}", build, force=force_build,
                     retry_hint="fix the task, then run again with `harbor run --force-build`")
        return tag

def _end_command(desk: AsyncDesktop, pidfile: str, user: str | None) -> None:
    """End the command whose shell wrote ``pidfile``, children first, as the user it runs as. Called from a thread
    while the desktop's worker is still inside that command's exec (the sync session takes calls from threads)."""
    # the kernel's list of a process's children, not pgrep: a stock task image (debootstrap's minbase, ubuntu)
    # has no procps, and a command left running would hold every later call back
    line = (f"p=$(cat {pidfile} 2>/dev/null) || exit 0; "
            '_c() { if [ -r "/proc/$1/task/$1/children" ]; then cat "/proc/$1/task/$1/children"; '
            'else pgrep -P "$1"; fi; }; '
            '_k() { for c in $(_c "$1" 2>/dev/null); do _k "$c"; done; kill -TERM "$1" 2>/dev/null; }; '
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


def _tag_part(value: str) -> str:
    part = re.sub(r"[^a-z0-9_.-]", "-", value.lower()).strip(".-")[:60]
    return part or "task"


def _missing_images(client: Any, images: list[str]) -> list[str]:
    from deskctl.providers.docker.images import image_exists

    return [image for image in images if not image_exists(client, image)]


class _OutputRelay:
    """Hands the output of a command (chunks from the desktop's worker thread) to Harbor's async output callback,
    in order, on the event loop."""

    def __init__(self, callback: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self._callback = callback
        self._task = self._loop.create_task(self._drain())

    def put(self, text: str, stream: str) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (text, stream))

    async def _drain(self) -> None:
        while (item := await self._queue.get()) is not None:
            with contextlib.suppress(Exception):  # a failing log callback must not fail the command
                await self._callback(item[0], item[1])

    async def close(self) -> None:
        # after the command's last chunk (put from the worker thread before exec returned)
        self._loop.call_soon(self._queue.put_nowait, None)
        with contextlib.suppress(Exception):
            await asyncio.shield(self._task)
