"""The cua cloud connection (like libcloud's connection classes): configuration, the OAuth2 token, the Fleet
claims API and the guest server behind the service proxy, with their errors mapped, and claims read as
handles. No lifecycle policy here (rollback, rebinding, readiness: :mod:`.provider`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from deskctl._redact import redact, register_secret
from deskctl.errors import (
    CapacityUnavailable,
    ConfigInvalid,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    SessionLost,
)
from deskctl.platforms import Platform
from deskctl.providers._http import (
    HttpErrorContext,
    HttpProvider,
    RetryPolicy,
    error_from_response,
    send,
)
from deskctl.providers.base import (
    LABEL_SESSION,
    RemoteHandle,
)
from deskctl.providers.cua_cloud._option_table import TABLE
from deskctl.providers.cua_cloud.handle_data import CuaHandleData

if TYPE_CHECKING:
    import httpx

    from deskctl.providers.cua_cloud.options import Options

DEFAULT_BASE_URL: str = TABLE["base_url"][1]
DEFAULT_TOKEN_URL: str = TABLE["token_url"][1]
API_VERSION = "osgym.cua.ai/v1alpha1"
LABEL_MANAGED = "deskctl.managed"
#: the size of the OSWorld Ubuntu guest (its /screen_size; the source is compat.json's row "cua-cloud ubuntu")
UBUNTU_SIZE = (1920, 1080)
#: a token with less than this many seconds left is replaced before use (Harbor does the same)
TOKEN_MARGIN = 30.0
#: the guest's /execute kills a command after 120 s (OSWorld main.py)
GUEST_EXEC_CAP = 120
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_GUEST_BUSY = frozenset({502, 503, 504})
_PLATFORM_NAMES = {"linux": Platform.UBUNTU, "windows": Platform.WINDOWS, "darwin": Platform.MACOS}


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dns_label(value: str) -> str:
    """A Kubernetes-valid label value (<= 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends), or ""."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in value)[:63]
    return cleaned.strip("._-")


class CuaCloudApi(HttpProvider):
    """The wire side of :class:`~deskctl.providers.cua_cloud.CuaCloudProvider`: the Fleet claims API and the
    guest server behind the service proxy."""

    option_table = TABLE
    opts: Options

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._lock = threading.Lock()  # guards the cached token
        self._token: tuple[str, float] | None = None  # (access token, monotonic expiry)
        create_timeout = self.opts.create_timeout
        self.create_timeout = self.request_timeout if create_timeout is None else create_timeout
        self.claim_ttl = self.opts.claim_ttl_seconds
        self.detached_ttl = self.opts.detached_ttl_seconds
        self.rebind_attempts = self.opts.rebind_attempts
        self.shutdown_policy = self.opts.shutdown_policy
        if self.shutdown_policy not in ("Retain", "Delete"):
            raise ConfigInvalid(f"cua-cloud option shutdown_policy={self.shutdown_policy!r} is not Retain or Delete",
                                provider=self.name)
        self._sandboxes: dict[str, str] = {}

    # -- configuration ---------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.opts.base_url.rstrip("/")

    @property
    def token_url(self) -> str:
        return self.opts.token_url

    def namespace(self, platform: Platform) -> str:
        """The pool of ``platform``: ``namespace`` option, else ``CUA_CLOUD_NAMESPACE``, else Harbor's default."""
        return self.opts.namespace or f"harbor-{platform.value}"

    def _claims_path(self, namespace: str) -> str:
        return f"/api/k8s/apis/{API_VERSION}/namespaces/{namespace}/osgymsandboxclaims"

    def _credentials_remedy(self) -> str:
        return ("export CUA_CLIENT_ID=ukey-... and CUA_CLIENT_SECRET=... (a per-user key from your Cua Cloud "
                "account) or run: deskctl login cua-cloud")

    # -- auth --------------------------------------------------------------------------------------------------
    def _client_credentials(self) -> tuple[str, str]:
        client_id, secret = self._var("CUA_CLIENT_ID"), self._var("CUA_CLIENT_SECRET")
        if client_id and secret:
            register_secret(client_id)
            register_secret(secret)
            return client_id, secret
        legacy = " (CUA_API_KEY is set, but it is the legacy VM API's key, which this version does not drive)" \
            if self._var("CUA_API_KEY") else ""
        missing = " and ".join(v for v, x in (("CUA_CLIENT_ID", client_id), ("CUA_CLIENT_SECRET", secret)) if not x)
        raise CredentialsMissing(
            f"cua-cloud requires CUA_CLIENT_ID (a per-user key from your Cua Cloud account) alongside "
            f"CUA_CLIENT_SECRET; {missing} missing (environment or keyring){legacy}",
            provider=self.name, remedy=self._credentials_remedy(),
        )

    def _access_token(self, *, fresh: bool = False, policy: RetryPolicy | None = None) -> str:
        """A bearer token from the client-credentials exchange, cached until 30 s before it expires."""
        with self._lock:
            cached = self._token
        if cached is not None and not fresh and cached[1] - time.monotonic() > TOKEN_MARGIN:
            return cached[0]
        client_id, secret = self._client_credentials()
        context = HttpErrorContext(self.name, "obtain an access token", credentials_remedy=self._credentials_remedy(),
                                   classify=self._classify_token)
        response = send(self.client, "POST", self.token_url, context, policy=policy or self.retry, idempotent=True,
                        data={"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
        body = self._json(response)
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise ProviderApiError("cua-cloud: the token endpoint answered without an access_token",
                                   provider=self.name, status=response.status_code)
        register_secret(token)
        expires_in = body.get("expires_in", 300)
        lifetime = float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else 300.0
        with self._lock:
            self._token = (token, time.monotonic() + lifetime)
        return token

    def _classify_token(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        error = str(body.get("error") or "")
        if status in (400, 401) and error in ("invalid_client", "unauthorized_client", "invalid_grant"):
            description = redact(str(body.get("error_description") or error))
            return CredentialsInvalid(
                f"cua-cloud: the token endpoint refused the client credentials ({error}: {description})",
                provider=self.name, remedy=self._credentials_remedy(),
            )
        return None

    # -- HTTP --------------------------------------------------------------------------------------------------
    def _classify(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        low = message.lower()
        if "no_capacity" in low or (status == 503 and "capacity" in low):
            return CapacityUnavailable(f"cua-cloud: no sandbox available ({message})", provider=self.name,
                                       remedy="retry later: the warm pool is drained")
        return None

    def _request(
        self, method: str, url: str, action: str, *, idempotent: bool, ok: frozenset[int] = frozenset(),
        deadline: float | None = None, policy: RetryPolicy | None = None, **kwargs: Any,
    ) -> httpx.Response:
        """One authenticated request. A 401 or a redirect (an expired token) mints a new token and sends the
        request once more: the service acted on neither, so this is no blind retry."""
        extra = dict(kwargs.pop("headers", {}) or {})
        response: httpx.Response | None = None
        for attempt in (0, 1):
            headers = {**extra, "Authorization": f"Bearer {self._access_token(fresh=attempt == 1, policy=policy)}"}
            response = self._send(method, url, action, idempotent=idempotent, ok=ok | _REDIRECTS | {401},
                                  deadline=deadline, policy=policy, headers=headers, **kwargs)
            if response.status_code not in _REDIRECTS and response.status_code != 401:
                return response
            if kwargs.get("stream"):
                response.read()  # a streamed refusal: read (and so release) its short body
        assert response is not None
        if response.status_code == 401 and 401 in ok:
            return response
        if response.status_code == 401:
            raise error_from_response(response, self._context(action))
        raise CredentialsInvalid(
            f"cua-cloud: {action} failed: a freshly minted token was redirected to the login page "
            f"(HTTP {response.status_code})", provider=self.name, remedy=self._credentials_remedy(),
            details={"status": response.status_code},
        )

    def _api(self, method: str, path: str, action: str, *, base_url: str | None = None, **kwargs: Any
             ) -> httpx.Response:
        return self._request(method, f"{(base_url or self.base_url).rstrip('/')}{path}", action, **kwargs)

    def _handle_from(self, claim: Mapping[str, Any], namespace: str, session_id: str) -> RemoteHandle:
        metadata = claim.get("metadata") if isinstance(claim.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else {}
        assert isinstance(annotations, dict)
        spec = claim.get("spec") if isinstance(claim.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        name = str(metadata.get("name") or session_id)
        warmpool = spec.get("warmpool")
        data = CuaHandleData(
            base_url=self.base_url, namespace=namespace, warmpool=None if warmpool is None else str(warmpool),
            svc_suffix=self.opts.svc_suffix or "", sandbox=_bound_sandbox(claim) or "",
            platform=next((p.value for p in Platform if namespace.endswith(f"-{p.value}")), ""),
        ).to_data()
        return RemoteHandle(provider=self.name, session_id=str(annotations.get(LABEL_SESSION) or session_id),
                            resource_id=name, labels={str(k): str(v) for k, v in annotations.items()}, data=data)

    def _claim_url(self, handle: RemoteHandle) -> str:
        namespace = CuaHandleData.of(handle).namespace or self.namespace(Platform.UBUNTU)
        return f"{self._claims_path(namespace)}/{handle.resource_id}"

    def _get_claim(self, handle: RemoteHandle, *, deadline: float | None = None) -> dict[str, Any] | None:
        """The claim, or None when it is gone (404)."""
        response = self._api("GET", self._claim_url(handle), "read the claim", idempotent=True, ok=frozenset({404}),
                             base_url=CuaHandleData.of(handle).base_url or None, deadline=deadline)
        if response.status_code == 404:
            return None
        claim = self._json(response)
        return claim if isinstance(claim, dict) else None


    def _namespaces(self) -> list[str]:
        configured = self.opts.namespace
        if configured:
            return [configured]
        return [self.namespace(p) for p in sorted(self.capabilities.platforms, key=lambda p: p.value)]

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        handles: list[RemoteHandle] = []
        for namespace in self._namespaces():
            try:
                handles += self._list_namespace(namespace, selector, None)
            except ProviderApiError as err:
                if err.status != 404:  # a pool this account does not have holds nothing of ours
                    raise
        return handles

    def _list_namespace(self, namespace: str, selector: Mapping[str, str] | None,
                        policy: RetryPolicy | None) -> list[RemoteHandle]:
        wanted = {LABEL_MANAGED: "1", **{k: _dns_label(v) if k == LABEL_SESSION else v
                                         for k, v in (selector or {}).items()}}
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()) if k in (LABEL_MANAGED, LABEL_SESSION))
        handles: list[RemoteHandle] = []
        token: str | None = None
        seen: set[str] = set()
        while True:
            params: dict[str, Any] = {"labelSelector": label_selector, "limit": 100}
            if token:
                params["continue"] = token
            page = self._json(self._api("GET", self._claims_path(namespace), "list claims", idempotent=True,
                                        params=params, policy=policy))
            items = page.get("items") if isinstance(page, dict) else None
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, dict):
                    continue
                metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
                assert isinstance(metadata, dict)
                if not metadata.get("name") or metadata.get("deletionTimestamp"):
                    continue
                handle = self._handle_from(item, namespace, str(metadata["name"]))
                merged = {**(metadata.get("labels") or {}), **handle.labels}
                if any(merged.get(k) != v for k, v in (selector or {}).items()):
                    continue  # a server that ignores the selector, or a selector on an annotation
                handles.append(handle)
            meta = page.get("metadata") if isinstance(page, dict) else None
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token or token in seen:
                return handles
            seen.add(token)

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._get_claim(handle) is not None

    def _sandbox_name(self, handle: RemoteHandle) -> str:
        name = CuaHandleData.of(handle).sandbox or self._sandboxes.get(handle.resource_id)
        if name:
            return str(name)
        claim = self._get_claim(handle)
        name = _bound_sandbox(claim) if claim is not None else None
        if not name:
            raise SessionLost(f"cua-cloud: claim {handle.resource_id} has no bound sandbox (gone or not bound)",
                              provider=self.name)
        self._sandboxes[handle.resource_id] = name
        return name

    def _guest(self, handle: RemoteHandle, method: str, path: str, action: str, *, idempotent: bool,
               deadline: float | None = None, **kwargs: Any) -> httpx.Response:
        data = CuaHandleData.of(handle)
        base = (data.base_url or self.base_url).rstrip("/")
        url = f"{base}/api/svc/{data.namespace}/{self._sandbox_name(handle)}-server{data.svc_suffix}{path}"
        try:
            return self._request(method, url, action, idempotent=idempotent, deadline=deadline, **kwargs)
        except ProviderApiError as err:
            if err.status == 404 and deadline is None and self._get_claim(handle) is None:
                raise SessionLost(f"cua-cloud: claim {handle.resource_id} is gone (released or reaped)",
                                  provider=self.name, details={"status": 404},
                                  remedy="see deskctl ls; the claim's shutdownTime may have passed") from err
            raise


def _bound_sandbox(claim: Mapping[str, Any]) -> str | None:
    status = claim.get("status") if isinstance(claim.get("status"), dict) else None
    sandbox = status.get("sandbox") if isinstance(status, dict) else None
    name = sandbox.get("name") if isinstance(sandbox, dict) else None
    return str(name) if name and isinstance(status, dict) and status.get("phase") == "Bound" else None


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.inf
