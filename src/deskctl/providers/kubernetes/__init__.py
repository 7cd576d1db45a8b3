"""The ``kubernetes`` provider: one pod per desktop on an existing cluster, driven through the in-desktop agent.

What the caller may rely on (docs/kubernetes.md says more, and what is UNVERIFIED against a real cluster):

- **Cluster and credentials**: the official ``kubernetes`` client (optional extra ``deskctl[kubernetes]``)
  reads the kubeconfig: provider option ``kubeconfig``, else ``KUBECONFIG`` (a ``:``-separated list is merged,
  as kubectl does), else ``~/.kube/config``; option ``context`` picks a context (default: the current one),
  option ``namespace`` the namespace (default: the context's, else ``default``). A bearer token in the
  kubeconfig is registered for redaction.
- **Create**: a pod named after the session id, running the desktop image (option ``image``, required: the
  cluster pulls it from a registry; build it with ``deskctl image build`` and push it), labelled with the deskctl
  labels (values made label-safe; the exact labels are kept in the annotation ``deskctl/labels``), with
  ``activeDeadlineSeconds`` = the session's lifetime plus ``expiry_grace`` (default 60 s) as a backstop,
  ``restartPolicy: Never``, no service-account token, non-root with every capability dropped, memory
  (option ``memory``, default ``1Gi``) and optional ``cpus`` as requests and limits. The agent's session token
  is a random value in a per-session Secret (``<session>-agent``, owned by the pod so the cluster's garbage
  collector removes it with the pod; deskctl deletes it too), mounted read-only where the agent reads it: it
  is never in the pod spec, an environment variable, a label, the handle, a log line or an error. A failure
  after the pod was created deletes the pod and the Secret before the error is raised.
- **Readiness**: a watch of the pod until it is ``Running`` with a pod IP, then the agent's authenticated
  ping (:func:`deskctl.agent.client.wait_ready`). While it waits: ``Unschedulable`` and an eviction are
  ``capacity.unavailable``; ``ErrImagePull``, ``ImagePullBackOff`` and other waiting reasons that do not pass
  by themselves are ``provider.api_error`` with the reason and the kubelet's message; a pod that failed or
  vanished says so.
- **Display, input, exec, files** go through :class:`deskctl.agent.client.AgentDriver` on ``podIP:agent_port``
  (deskctl must reach pod IPs: in the cluster, or on a routed pod network). The token is read back from the
  Secret when another process (``deskctl do``) reconnects.
- **Destroy**: DELETE of the pod (``gracePeriodSeconds`` from option ``grace_seconds``, default 1) and of the
  Secret; "not found" is success; the pod is then watched until it is gone. Unconfirmed is
  :class:`~deskctl.errors.CleanupIncomplete` naming what is left.
- **Reap**: :meth:`KubernetesProvider.list_owned` lists pods (and Secrets left without their pod) by label
  selector in the namespace.
- **Errors**: 401 -> ``credentials.invalid``; 403 -> ``credentials.forbidden``, except a quota refusal ->
  ``capacity.unavailable``; 429 -> ``provider.rate_limited``; another API error -> ``provider.api_error`` with the
  Status reason and message; no answer -> ``provider.unreachable``; a kubeconfig that is missing or unreadable
  -> ``credentials.missing`` / ``config.invalid``. Every ``ApiException``, urllib3 and kubeconfig error is
  translated here.
- **Cost**: option ``usd_per_hour`` (default 0: a cluster of your own), see :mod:`deskctl.metering`.

The package: :mod:`.client` (the kubeconfig, the client, reads, errors), :mod:`.desktop` (the agent of an open
desktop), :mod:`.checks` (preflight), :mod:`.provider` (lifecycle policy) and :mod:`.options` (the options,
declared once). Names are re-exported here lazily, so importing :mod:`.options` does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.providers.kubernetes.client import ANNOTATION_LABELS, label_value
    from deskctl.providers.kubernetes.provider import KubernetesProvider

__all__ = ["ANNOTATION_LABELS", "KubernetesProvider", "label_value"]

_WHERE = {"ANNOTATION_LABELS": "client", "KubernetesProvider": "provider", "label_value": "client"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
