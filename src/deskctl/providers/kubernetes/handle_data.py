"""The kubernetes provider's ``handle.data``, typed (read by ``deskctl do`` and ``down``: no pydantic). It holds
no secret: the agent's token stays in the session's Kubernetes secret (named here) and in this home's 0600
memory file."""

from __future__ import annotations

from typing import Any

from deskctl.providers._handle_data import HandleData

__all__ = ["KubernetesHandleData"]


class KubernetesHandleData(HandleData, frozen=True):
    """``pod`` (its name; ``""`` for a secret left without its pod), ``namespace`` (``""``: the provider's),
    ``uid`` (the pod's), ``secret_name`` (``""``: the session's default name), ``agent_port`` (None: the
    default), ``pod_ip`` (once known), ``image``, ``context``, ``resource_version``, ``platform``; ``phase``
    when listed."""

    pod: str = ""
    namespace: str = ""
    uid: str | None = None
    secret_name: str = ""
    agent_port: int | None = None
    pod_ip: str = ""
    image: str = ""
    context: str | None = None
    resource_version: str | None = None
    platform: str = ""
    phase: str | None = None

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in ("pod", "namespace", "secret_name", "pod_ip", "image", "platform"):
            if key in values:
                values[key] = str(values[key])
        if values.get("agent_port") is not None:
            values["agent_port"] = int(values["agent_port"]) or None
        return values
