"""cua cloud's options: the one declaration that ``-o KEY=VALUE``, ``[providers.cua-cloud]``, the environment,
``deskctl providers --json`` and docs/providers.md read (at run time through ``_option_table.py``, made from it)."""

from __future__ import annotations

from typing import ClassVar

from deskctl.providers._http_options import HttpOptions, number
from deskctl.providers.options import option

__all__ = ["Options"]


class Options(HttpOptions):
    """Which warm pool a claim comes from, how long it lives, and how long deskctl waits for the service."""

    provider: ClassVar[str] = "cua-cloud"

    base_url: str = option("https://run.cua.ai", doc="the Fleet service", env="CUA_BASE_URL")
    token_url: str = option("https://auth.cua.ai/realms/cyclops-cs/protocol/openid-connect/token",
                            doc="where the client credentials are exchanged for a token", env="CUA_TOKEN_URL")
    namespace: str | None = option(None, doc="the pool's namespace (default: harbor-{platform})",
                                   env="CUA_CLOUD_NAMESPACE")
    warmpool: str | None = option(None, doc="the warm pool (default: the namespace)")
    template: str | None = option(None, doc="the sandbox template (default: {warmpool}-template)")
    svc_suffix: str | None = option(None, doc="suffix of the guest's service name behind the proxy")
    shutdown_policy: str = option("Retain", doc="what the pool does with a released sandbox: Retain or Delete",
                                  pattern="^(Retain|Delete)$")
    claim_ttl_seconds: float = number(600.0, "lifetime of an attached claim, renewed by every keepalive")
    detached_ttl_seconds: float = number(3600.0, "lifetime of a detached claim without a lifetime of its own")
    rebind_attempts: int = option(20, doc="claims made again while the warm pool has no sandbox",
                                  bound="provider_option", ge=0)
    create_timeout: float | None = number(None, "timeout of the claim's create (default: request_timeout)")
    poll_interval: float = number(0.5, "first pause between polls, seconds (x1.5 per poll)")
    destroy_timeout: float = number(120.0, "how long a release waits for the claim to go, seconds")
