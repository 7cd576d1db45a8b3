"""The ``docker`` provider's options: the one declaration ``-o``, ``[providers.docker]``, ``deskctl providers
--json`` and docs/providers.md read. A value is checked when the spec is made (the CLI, the configuration) and
again where the provider reads it (a spec from ``open_desktop`` is not checked before)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from deskctl.providers.docker.common import (
    DEFAULT_API_TIMEOUT,
    DEFAULT_MEMORY,
    _check_engine,
    _container_env,
    _display_number,
    parse_memory,
)
from deskctl.providers.options import ProviderOptions, field_validator, model_validator, option

__all__ = ["Options"]


class Options(ProviderOptions):
    provider: ClassVar[str] = "docker"

    image: str | None = option(None, doc="the image to run (default: the current deskctl-desktop image of the "
                                         "variant; a task image gets Xvfb as a thin layer)", min_length=1)
    variant: Literal["minimal", "browser"] | None = option(
        None, doc="which deskctl-desktop image: minimal or browser (default: browser for a start URL)")
    memory: str | int | None = option(DEFAULT_MEMORY, doc='memory limit: "1g", "512m", bytes, or "none"')
    cpus: float | None = option(None, doc="CPU limit (a number of CPUs)", gt=0)
    network: str | None = option(None, doc="the container's network (default none; bridge on a remote engine)",
                                 min_length=1)
    shm_size: str | int | None = option(None, doc="size of /dev/shm (default 256m for the browser variant)")
    pids_limit: int | None = option(None, doc="most processes in the container (default 1024, 4096 for the "
                                              "browser variant; none when not hardened)", ge=-1)
    reaper: bool = option(True, doc="an owner watcher removes the container when its owner process dies")
    expiry_grace: float = option(60.0, doc="seconds after its expiry at which a desktop stops itself", ge=0)
    api_timeout: float = option(DEFAULT_API_TIMEOUT, doc="seconds an Engine API call may take", gt=0, le=3600)
    host: str | None = option(None, doc="the Docker engine's URL, as DOCKER_HOST (tcp:// is reached through the "
                                        "desktop's agent)")
    agent_host: str | None = option(None, doc="the address at which this machine reaches a remote engine's "
                                              "published ports (default: the host of its URL)", min_length=1)
    display: int = option(0, doc='the X display number in the container (1, "1" or ":1")', ge=0, le=999)
    hardened: bool = option(True, doc="no capabilities, no new privileges, a pid limit, a non-root user")
    locale: str | None = option(None, doc="a locale such as zh_CN.UTF-8 (built into a layer)")
    timezone: str | None = option(None, doc="a time zone such as Asia/Shanghai (built into a layer)")
    fonts: tuple[str, ...] | str = option((), doc="font packages to add (a list, or names separated by commas)")
    build_network: str | None = option(None, doc="the network a layer's build uses", min_length=1)
    env: dict[str, str] = option({}, doc="variables every process of the container gets")

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        parse_memory(value)
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        return _check_engine(value, "docker") if value else value

    @field_validator("display", mode="before")
    @classmethod
    def _display(cls, value: Any) -> int:
        return _display_number(value, "docker")

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> dict[str, str]:
        return _container_env({"env": value}, "docker")

    @model_validator(mode="after")
    def _extras(self) -> Options:
        from deskctl.providers.docker.layers import check_extras

        check_extras({"fonts": self.fonts, "locale": self.locale, "timezone": self.timezone}, "docker")
        return self
