"""The docker provider's preflight (read-only: the engine answers, the image is there, the memory suffices, the
network exists) and the resolution of image, variant and memory that create repeats."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from deskctl._redact import redact
from deskctl.errors import (
    DeskctlError,
    NotFound,
    PreflightError,
    UsageError,
)
from deskctl.providers.docker.common import (
    BASELINE_MEMORY,
    BROWSER_MEMORY,
    _host_memory,
    _mib,
    is_remote,
    parse_memory,
)
from deskctl.providers.docker.engine import _DockerBase

if TYPE_CHECKING:

    from deskctl.checks import CheckResult
    from deskctl.spec import DesktopSpec

__all__ = ["_DockerPreflight"]


class _DockerPreflight(_DockerBase):
    """Preflight and what it shares with create: the image, its variant, the memory a desktop needs."""

    def _variant(self, spec: DesktopSpec) -> str:
        variant = self._settings(spec).variant
        if variant is None:
            variant = "browser" if spec.start_url else "minimal"
        from deskctl.providers.docker.images import VARIANTS

        if variant not in VARIANTS:
            raise UsageError(f"unknown image variant {variant!r}; allowed: {', '.join(VARIANTS)}",
                             code="usage.bad_option", provider=self.name)
        if spec.start_url and variant != "browser" and not self._settings(spec).image:
            raise UsageError(f"a start URL needs the browser variant, not {variant!r}", code="usage.bad_option",
                             provider=self.name, remedy="drop the variant option, or use variant=browser")
        return str(variant)

    def _resolve_image(self, spec: DesktopSpec) -> str:
        """The image tag to run; raises ``preflight.image_missing`` with the build command when there is none."""
        image = self._settings(spec).image
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
            build = f"DOCKER_HOST={redact(self.engine)} deskctl image build" if self._host() \
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
        return parse_memory(self._settings(spec).memory)

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
            self._settings(spec)
        except UsageError as exc:  # a spec that did not come through the CLI: its options are checked here
            checks.add_error(exc, "docker.options")
            return checks.results
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

                client = connect(timeout=5, engine=self._host())
                version = client.api.version()
            # the short timeout is for this ping only: the client is kept for create, exec, copies and destroy
            client.api.timeout = int(self._api_timeout())
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

        network = self._settings(spec).network or "none"
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
        network = self._settings(spec).network or "bridge"
        if network in ("none", "host"):
            raise UsageError(f"a desktop on a remote engine needs a network with published ports, not {network!r}",
                             code="usage.bad_option", provider=self.name,
                             remedy="leave the network option out (bridge), or name a user-defined network")
