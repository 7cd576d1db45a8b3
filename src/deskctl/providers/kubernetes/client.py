"""The cluster connection: the kubeconfig, the official client built from it, reads of pods and secrets, and
the one translation of the client's exceptions into deskctl errors. No lifecycle policy here (:mod:`.provider`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from deskctl.errors import (
    CapacityUnavailable,
    ConfigInvalid,
    CredentialsForbidden,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    ProviderUnreachable,
    RateLimited,
    UsageError,
)
from deskctl.providers._option_values import OptionValues
from deskctl.providers._x11provider import X11Provider
from deskctl.providers.kubernetes._option_table import TABLE

if TYPE_CHECKING:
    from deskctl.providers.kubernetes.options import Options
    from deskctl.spec import DesktopSpec


LABEL_PROVIDER = "deskctl.provider"
#: the exact deskctl labels (label values cannot hold every character a deskctl label may)
ANNOTATION_LABELS = "deskctl/labels"
CONTAINER = "desktop"
TOKEN_KEY = "token"
DEFAULT_MEMORY = "1Gi"
#: uid/gid of the desktop user in the image (data/docker/Dockerfile)
DESKTOP_UID = 1000
#: waiting reasons that do not pass by themselves: the pod will never run as asked
_STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                            "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                            "CrashLoopBackOff"})
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def label_value(value: str) -> str:
    """``value`` as a valid Kubernetes label value: at most 63 of ``[A-Za-z0-9_.-]``, starting and ending with
    an alphanumeric (``host:1234`` -> ``host_1234``). The exact value stays in the ``deskctl/labels``
    annotation."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", value)[:63]
    return cleaned.strip("_.-")


def _labels_for_kube(labels: Mapping[str, str]) -> dict[str, str]:
    return {key: label_value(str(value)) for key, value in labels.items()}


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={label_value(str(value))}" for key, value in labels.items())


class KubernetesApi(X11Provider):
    """The cluster side of :class:`~deskctl.providers.kubernetes.KubernetesProvider`: the kubeconfig, the client,
    reads and the translation of the client's errors."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        #: the options, read through the one declaration (:mod:`.options`) without loading pydantic
        self.opts = self._opts(None)
        self._api: Any = None
        self._namespace: str | None = None
        self._api_lock = threading.Lock()
        #: session id -> the token this instance made (spares wait_ready a read of the Secret)
        self._tokens: dict[str, str] = {}

    def _opts(self, spec: DesktopSpec | None) -> Options:
        """The options, those of ``spec`` over the provider's."""
        given = {**self.options, **(spec.provider_options if spec is not None else {})}
        return cast("Options", OptionValues(self.name, TABLE, given, os.environ.get))

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _kubeconfig(self) -> str:
        """The kubeconfig path (or ``:``-separated list) the client reads."""
        explicit = (self.opts.kubeconfig or "").strip()
        return str(explicit or Path("~/.kube/config").expanduser())

    def _timeout(self) -> float:
        return self.opts.api_timeout

    def _core(self) -> Any:
        """The ``CoreV1Api`` (built once per provider instance from the kubeconfig)."""
        with self._api_lock:
            if self._api is None:
                self._api, self._namespace = self._connect()
            return self._api

    @property
    def namespace(self) -> str:
        self._core()
        assert self._namespace is not None
        return self._namespace

    def _connect(self) -> tuple[Any, str]:
        path = self._kubeconfig()
        files = [p for p in path.split(os.pathsep) if p]
        if not any(os.path.exists(p) for p in files):
            raise CredentialsMissing(
                f"kubernetes: no kubeconfig at {path}", provider=self.name,
                remedy="set KUBECONFIG (or provider option kubeconfig) to a kubeconfig for the cluster")
        try:
            from kubernetes import client, config
        except ImportError as exc:  # pragma: no cover - the registry's install hint covers the module itself
            raise UsageError("the kubernetes provider needs the kubernetes client", code="usage.provider_unavailable",
                             provider=self.name, remedy="pip install 'deskctl[kubernetes]'") from exc
        context = self.opts.context
        configuration = client.Configuration()
        try:
            config.load_kube_config(config_file=path, context=context,  # type: ignore[no-untyped-call]
                                    client_configuration=configuration, persist_config=False)
            contexts, active = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
        except Exception as exc:  # ConfigException, and yaml/OSError from a malformed file
            raise ConfigInvalid(f"kubernetes: cannot use the kubeconfig {path}"
                                f"{f' (context {context})' if context else ''}: {exc}", provider=self.name,
                                remedy="check it with `kubectl config view`; name a context that exists") from exc
        from deskctl._redact import register_secret

        for value in (configuration.api_key or {}).values():
            register_secret(str(value).removeprefix("Bearer ").strip())
        chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
        namespace = str(self.opts.namespace or ((chosen or {}).get("context") or {}).get("namespace")
                        or "default")
        configuration.retries = 0  # a refused connection is said at once; deskctl never retries a create blindly
        api_client = client.ApiClient(configuration)
        return client.CoreV1Api(api_client), namespace

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Translate the client's exceptions into deskctl errors (the one place that does)."""
        import urllib3.exceptions
        from kubernetes.client.exceptions import ApiException

        try:
            yield
        except ApiException as exc:
            raise self._api_error(exc, doing) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ProviderUnreachable(f"kubernetes: the API server did not answer while trying to {doing}: "
                                      f"{_reason(exc)}", provider=self.name,
                                      remedy="check the cluster address in the kubeconfig and the network") from exc
        except (OSError, ValueError) as exc:
            raise ProviderUnreachable(f"kubernetes: cannot {doing}: {exc}", provider=self.name) from exc

    def _api_error(self, exc: Any, doing: str) -> DeskctlError:
        status = int(getattr(exc, "status", 0) or 0)
        reason, message = _status_of(exc)
        text = f"kubernetes: cannot {doing}: {message or reason or status} ({status} {reason})"
        details = {"status": status, "reason": reason}
        if status == 401:
            return CredentialsInvalid(f"kubernetes: the API server refused the kubeconfig's credentials while "
                                      f"trying to {doing} (401 Unauthorized)", provider=self.name,
                                      remedy="refresh the credentials (`kubectl get pods` must work)",
                                      details=details)
        if status == 403 and "exceeded quota" in message:
            return CapacityUnavailable(text, provider=self.name, details=details,
                                       remedy="end other desktops in the namespace, or raise its ResourceQuota")
        if status == 403:
            return CredentialsForbidden(text, provider=self.name, details=details,
                                        remedy="ask for a Role that allows pods and secrets in the namespace "
                                               "(create, get, list, watch, delete)")
        if status == 429:
            return RateLimited(text, provider=self.name, details=details)
        if status == 0:
            return ProviderUnreachable(f"kubernetes: cannot {doing}: {exc}", provider=self.name)
        return ProviderApiError(text, status=status, provider=self.name, details=details)

    def _json(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call a client method and return its answer as JSON (the raw body: no model round trip)."""
        response = call(*args, _preload_content=False, _request_timeout=self._timeout(), **kwargs)
        try:
            return json.loads(response.data or b"null")
        finally:
            response.release_conn()

    def _get(self, kind: str, name: str, doing: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The pod or secret ``name`` (in ``namespace``, default the provider's) as JSON, or None when it does not
        exist."""
        from kubernetes.client.exceptions import ApiException

        core = self._core()
        call = core.read_namespaced_pod if kind == "pod" else core.read_namespaced_secret
        with self._errors(doing):
            try:
                found: dict[str, Any] = self._json(call, name, namespace or self.namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
        return found


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None)
    return str(inner or exc)


def _running(pod: Mapping[str, Any] | None) -> bool:
    status = (pod or {}).get("status") or {}
    return status.get("phase") == "Running" and bool(status.get("podIP"))


def _status_of(exc: Any) -> tuple[str, str]:
    """(reason, message) of an ApiException's ``Status`` body (the HTTP reason when the body is not one)."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    return str(body.get("reason") or getattr(exc, "reason", "") or ""), str(body.get("message") or "")

def _describe(pod: Mapping[str, Any] | None) -> str:
    """A pod's state in a few words: phase, reason, the container's waiting/terminated reason."""
    if pod is None:
        return "gone"
    status = pod.get("status") or {}
    parts = [str(status.get("phase") or "Unknown")]
    if status.get("reason"):
        parts.append(str(status["reason"]))
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        for kind in ("waiting", "terminated"):
            if state.get(kind):
                parts.append(f"{kind} {state[kind].get('reason', '')}".strip())
    if "deletionTimestamp" in (pod.get("metadata") or {}):
        parts.append("being deleted")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            parts.append(f"not scheduled: {cond.get('reason')}")
    return ", ".join(parts)
