"""The kubernetes provider's options: the one declaration that ``-o KEY=VALUE``, ``[providers.kubernetes]``, the
environment, ``deskctl providers --json`` and docs/providers.md read (at run time through ``_option_table.py``,
made from it)."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from deskctl.providers._http_options import number
from deskctl.providers.options import ProviderOptions, field_validator, option

__all__ = ["Options"]

#: a Kubernetes cpu quantity in millicores or cores ("500m", "2", "0.5")
CPU_QUANTITY = r"^[0-9]+(\.[0-9]+)?m?$"


class Options(ProviderOptions):
    """Which cluster, namespace and image, what a pod may use, and how long deskctl waits for the API server."""

    provider: ClassVar[str] = "kubernetes"

    kubeconfig: str | None = option(None, doc="the kubeconfig (a :-separated list is merged; default "
                                              "~/.kube/config)", env="KUBECONFIG")
    context: str | None = option(None, doc="the kubeconfig's context (default: the current one)")
    namespace: str | None = option(None, doc="the namespace (default: the context's, else default)")
    image: str | None = option(None, doc="the desktop image the cluster pulls (required to create: deskctl image "
                                         "build, then push it)")
    image_pull_policy: str = option("IfNotPresent", doc="Always, IfNotPresent or Never",
                                    pattern="^(Always|IfNotPresent|Never)$")
    memory: str = option("1Gi", doc="the pod's memory request and limit (a Kubernetes quantity)")
    cpus: float | str | None = option(
        None, doc='the pod\'s cpu request and limit, cores or a quantity ("1", "0.5", "500m"; default: none)')
    agent_port: int | None = option(None, doc="the in-desktop agent's port (default: the agent's, 7390)",
                                    bound="provider_option", ge=1, le=65535)
    expiry_grace: float = number(60.0, "seconds past the session's lifetime before activeDeadlineSeconds stops "
                                        "the pod")
    grace_seconds: float = number(1.0, "gracePeriodSeconds of the pod's delete")
    destroy_timeout: float = number(60.0, "how long a destroy waits for the pod to go, seconds")
    api_timeout: float = number(30.0, "timeout of one API request, seconds")
    usd_per_hour: float = number(0.0, "what a desktop costs per hour (0: a cluster of your own)")

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus(cls, value: Any) -> Any:
        """Cores as a number (finite, not negative; not a flag) or a quantity as a string; nothing converted."""
        if value is None or (isinstance(value, str) and re.match(CPU_QUANTITY, value)):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ValueError("Input should be a finite number")
            if value < 0:
                raise ValueError("Input should be greater than or equal to 0")
            return float(value)
        raise ValueError('Input should be a number of cores or a quantity such as "500m"')
