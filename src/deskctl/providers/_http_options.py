"""The options every cloud provider reads through :mod:`deskctl.providers._http` (retry policy, polling, request
and destroy timeouts, the lookup of a create whose answer was lost), declared once: each cloud provider's
``Options`` inherits them and restates a field only to give it its own default."""

from __future__ import annotations

from typing import Any

from deskctl.limits import BOUNDS
from deskctl.providers.options import ProviderOptions, option

__all__ = ["HttpOptions", "number"]


def number(default: float | None, doc: str, bound: str = "provider_option", **extra: Any) -> Any:
    """A number (seconds, a count, a price) within ``bound`` of :data:`deskctl.limits.BOUNDS` (finite, non-negative)."""
    limit = BOUNDS[bound]
    return option(default, doc=doc, bound=bound, ge=limit.lo, le=limit.hi, allow_inf_nan=False, **extra)


class HttpOptions(ProviderOptions):
    """Retry policy (:class:`deskctl.providers._http.RetryPolicy`), polling and timeouts of an HTTP provider."""

    retry_attempts: int = option(5, doc="tries of a request that may be retried (0 counts as 1: no retry)",
                                 bound="provider_option", ge=0, le=1000)
    retry_initial: float = number(0.5, "first backoff delay, seconds (doubled per retry)")
    retry_maximum: float = number(8.0, "longest backoff delay, seconds")
    retry_scale: float | None = number(None, "multiplies every backoff delay (default: DESKCTL_HTTP_RETRY_SCALE, "
                                              "else 1; 0 in tests)")
    poll_interval: float = number(0.2, "first pause between polls, seconds (x1.5 per poll)")
    poll_max_interval: float = number(2.0, "longest pause between polls, seconds")
    request_timeout: float = number(60.0, "timeout of one HTTP request, seconds")
    destroy_timeout: float = number(60.0, "how long a destroy waits for the service to confirm, seconds")
    create_lookup_seconds: float = number(
        45.0, "how long what a create whose answer was lost made is looked for (0 looks once)",
        bound="create_lookup_seconds")
