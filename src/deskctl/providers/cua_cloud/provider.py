"""cua cloud's lifecycle policy: claims made (never retried blindly; what a failed create made is found and
released), rebound while the warm pool has no sandbox, awaited, renewed by keepalives and released."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._record import replace
from deskctl._redact import redact
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CompatError,
    DeskctlError,
    InfrastructureError,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    RateLimited,
    ReadinessTimeout,
    SessionLost,
)
from deskctl.platforms import Platform
from deskctl.providers._http import answer_lost
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_EXPIRES,
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    RemoteHandle,
    lifetime_seconds,
)
from deskctl.providers.cua_cloud.checks import CuaChecks
from deskctl.providers.cua_cloud.client import (
    _GUEST_BUSY,
    _PLATFORM_NAMES,
    API_VERSION,
    LABEL_MANAGED,
    UBUNTU_SIZE,
    _bound_sandbox,
    _dns_label,
    _float,
    _rfc3339,
)
from deskctl.providers.cua_cloud.guest import CuaGuest
from deskctl.providers.cua_cloud.handle_data import CuaHandleData

if TYPE_CHECKING:
    from deskctl.spec import DesktopSpec


class CuaCloudProvider(CuaChecks, CuaGuest):
    """cua cloud sandboxes claimed from a Fleet warm pool, driven through the OSWorld guest server."""

    name = "cua-cloud"
    aliases = ("cua",)
    options_model = "deskctl.providers.cua_cloud.options:Options"
    capabilities = Capabilities(
        platforms=frozenset({Platform.UBUNTU, Platform.WINDOWS}),
        settable_geometry=False,
        fixed_sizes={Platform.UBUNTU: (UBUNTU_SIZE,)},
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=True,
        isolation="vm",
        start_url=False,
        local=False,
        cursor_position=True,
        clipboard=True,
        windows=True,
        billing="per_hour",
    )
    credentials = CredentialSet(
        variables=("CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY", "CUA_BASE_URL", "CUA_TOKEN_URL",
                   "CUA_API_BASE", "CUA_CLOUD_NAMESPACE"),
        # the client id is "a per-user key" (Harbor): treated as a secret too
        secret=frozenset({"CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY"}),
        required_any=(("CUA_CLIENT_ID", "CUA_CLIENT_SECRET"), ("CUA_API_KEY",)),
        source="Harbor harbor/environments/cua_cloud.py; cua.ai/docs (github.com/trycua/cua)",
    )


    # -- create ------------------------------------------------------------------------------------------------
    def _ttl(self, spec: DesktopSpec, labels: Mapping[str, str]) -> float:
        lifetime = lifetime_seconds(spec, labels)
        if str(labels.get(LABEL_DETACHED, "")) == "1":
            # nobody renews a detached claim: it must last the session's whole life (and a little more)
            return lifetime + 300.0 if lifetime is not None else self.detached_ttl
        return min(self.claim_ttl, lifetime + 300.0) if lifetime is not None else self.claim_ttl

    def claim_body(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> dict[str, Any]:
        """The ``POST`` body of the session's claim."""
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        namespace = self.namespace(spec.platform)
        warmpool = self.opts.warmpool or namespace
        annotations = {str(k): str(v) for k, v in labels.items()}
        annotations[LABEL_SESSION] = session_id
        k8s_labels = {LABEL_SESSION: _dns_label(session_id), LABEL_MANAGED: "1",
                      "app.kubernetes.io/created-by": "deskctl"}
        return {
            "apiVersion": API_VERSION,
            "kind": "OSGymSandboxClaim",
            "metadata": {"name": session_id, "labels": k8s_labels, "annotations": annotations},
            "spec": {
                "sandboxTemplateRef": {"name": self.opts.template or f"{warmpool}-template"},
                "warmpool": warmpool,
                "lifecycle": {"shutdownTime": _rfc3339(time.time() + self._ttl(spec, labels)),
                              "shutdownPolicy": self.shutdown_policy},
            },
        }

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        namespace = self.namespace(spec.platform)
        claim = self._post_claim(namespace, session_id, self.claim_body(spec, session_id, labels))
        handle = self._handle_from(claim, namespace, session_id)
        expires = _float(labels.get(LABEL_EXPIRES))
        replace(CuaHandleData.of(handle), platform=spec.platform.value, claim_ttl=self._ttl(spec, labels),
                expires_at=expires if math.isfinite(expires) else None).store(handle)
        return handle

    def _post_claim(self, namespace: str, session_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST one claim, once; after an ambiguous failure, release what it made before raising."""
        try:
            response = self._api("POST", self._claims_path(namespace), "create the claim", idempotent=False,
                                 json=body, timeout=self.create_timeout)
            claim = self._json(response)
            if not isinstance(claim, dict) or not (claim.get("metadata") or {}).get("name"):
                raise ProviderApiError("cua-cloud: create answered without a claim name", provider=self.name,
                                       status=response.status_code)
        except DeskctlError as err:
            if self._create_may_have_made_something(err):
                self._sweep(namespace, session_id, err)
            raise
        return claim

    def _rebind(self, handle: RemoteHandle, failed: Mapping[str, Any]) -> None:
        """Replace a claim that failed to bind (the warm pool was drained; a new pending claim is what makes it
        scale up, as Harbor does): release it (confirmed), then create it again from its own metadata and spec."""
        self.destroy(handle)
        metadata = failed.get("metadata") if isinstance(failed.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        body = {
            "apiVersion": API_VERSION, "kind": "OSGymSandboxClaim",
            "metadata": {"name": handle.resource_id, "labels": dict(metadata.get("labels") or {}),
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": dict(failed.get("spec") or {}),
        }
        self._post_claim(CuaHandleData.of(handle).namespace, handle.session_id, body)

    @staticmethod
    def _create_may_have_made_something(err: DeskctlError) -> bool:
        if isinstance(err, RateLimited | PreflightError):
            return False  # refused before anything was made (429, 401, 403)
        if isinstance(err, ProviderUnreachable):
            return bool(err.details.get("sent", True))
        if isinstance(err, ProviderApiError) and err.status is not None and 400 <= err.status < 500:
            return False  # 409 AlreadyExists, 422 Invalid: refused
        return isinstance(err, InfrastructureError)

    def _sweep(self, namespace: str, session_id: str, cause: DeskctlError) -> None:
        """Release whatever a failed create made, found by name (authoritative) and by label. When the create's
        answer was lost the service may still be making the claim: it is looked for again over
        ``create_lookup_seconds``. A claim released (confirmed) is said so in the error of the cause's class;
        nothing found after a lost answer is :class:`CleanupIncomplete` saying how ``deskctl reap`` finds it."""

        def lookup() -> dict[str, RemoteHandle]:
            found: dict[str, RemoteHandle] = {}
            response = self._api("GET", f"{self._claims_path(namespace)}/{session_id}", "find the claim by name",
                                 idempotent=True, ok=frozenset({404}))
            if response.status_code != 404:
                claim = self._json(response)
                if isinstance(claim, dict):
                    found[session_id] = self._handle_from(claim, namespace, session_id)
            for handle in self._list_namespace(namespace, {LABEL_SESSION: session_id}, None):
                found.setdefault(handle.resource_id, handle)
            return found

        try:
            found = self._look_for_created(lookup, cause)
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"cua-cloud: create of {session_id} failed ({cause.message}) and what it made could not be "
                f"looked up: {err.message}", provider=self.name, details={"left": [session_id]},
                remedy="deskctl reap --provider cua-cloud (the claim's shutdownTime releases it at the latest)",
            ) from cause
        self._destroy_left_by_create(found, session_id, cause)
        if found:
            raise self._lost_create_cleaned(cause, session_id, sorted(found), "claim", "released") from cause
        if answer_lost(cause):
            raise self._lost_create_unresolved(
                cause, session_id, "claim",
                f"the name {session_id} in namespace {namespace} and the label "
                f"{LABEL_SESSION}={_dns_label(session_id)} (its shutdownTime releases it at the latest)",
            ) from cause

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        last = "not polled"
        rebinds = 0
        for _ in self._polls(deadline):
            claim = self._get_claim(handle, deadline=deadline)
            if claim is None:
                raise SessionLost(f"cua-cloud: claim {handle.resource_id} disappeared while binding",
                                  provider=self.name)
            status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
            assert isinstance(status, dict)
            phase = str(status.get("phase") or "Pending")
            last = f"phase {phase}"
            if phase == "Bound" and _bound_sandbox(claim):
                replace(CuaHandleData.of(handle), sandbox=_bound_sandbox(claim) or "").store(handle)
                break
            if phase == "Failed":
                conditions = [c for c in (status.get("conditions") or []) if isinstance(c, dict)]
                reason = str(conditions[-1].get("message") or conditions[-1].get("reason")) if conditions else \
                    "no reason given"
                if rebinds < self.rebind_attempts and time.monotonic() < deadline:
                    rebinds += 1
                    self._rebind(handle, claim)
                    last = f"phase Failed ({redact(reason)}), claim made again ({rebinds} of {self.rebind_attempts})"
                    continue
                raise CapacityUnavailable(
                    f"cua-cloud: claim {handle.resource_id} failed to bind a sandbox from pool "
                    f"{CuaHandleData.of(handle).warmpool}: {redact(reason)} (claims made: {rebinds + 1})",
                    provider=self.name,
                    remedy="retry later: the warm pool is drained (a pending claim makes it scale up)",
                    details={"phase": phase},
                )
        else:
            raise self._timeout(handle, last)

        for _ in self._polls(deadline):
            try:
                response = self._guest(handle, "GET", "/platform", "read the guest platform", idempotent=True,
                                       deadline=deadline)
            except ProviderApiError as err:
                if err.status not in _GUEST_BUSY:
                    raise
                last = f"guest server not answering yet (HTTP {err.status})"
                continue
            reported = _PLATFORM_NAMES.get(response.text.strip().lower())
            wanted = CuaHandleData.of(handle).platform
            if reported is not None and wanted and reported.value != wanted:
                raise CompatError(f"cua-cloud: pool {CuaHandleData.of(handle).warmpool} gave a {reported.value} guest, "
                                  f"not {wanted}", code="compat.platform_mismatch", provider=self.name,
                                  remedy="choose the pool of this platform with -o namespace=...")
            break
        else:
            raise self._timeout(handle, last)

        self._check_screenshot_size(handle, "screen")

    def _timeout(self, handle: RemoteHandle, last: str) -> ReadinessTimeout:
        return ReadinessTimeout(
            f"cua-cloud: claim {handle.resource_id} was not ready in time (last: {last})", provider=self.name,
            remedy="raise ready_timeout; a pool scaling up from zero takes minutes", details={"last": last},
        )

    # -- destroy and listing -----------------------------------------------------------------------------------
    def destroy(self, handle: RemoteHandle) -> None:
        deadline = time.monotonic() + self.destroy_timeout
        data = CuaHandleData.of(handle)
        base_url = data.base_url or None
        left = {"left": [f"claim {data.namespace}/{handle.resource_id}"], "session": handle.session_id}
        remedy = f"deskctl down {handle.session_id} (the claim's shutdownTime releases it at the latest)"
        last = ""
        try:
            self._api("DELETE", self._claim_url(handle), "release the claim", idempotent=True, ok=frozenset({404}),
                      base_url=base_url, deadline=deadline)
            for _ in self._polls(deadline):
                claim = self._get_claim(handle, deadline=deadline)
                if claim is None:
                    self._sandboxes.pop(handle.resource_id, None)
                    return
                metadata = claim.get("metadata") if isinstance(claim.get("metadata"), dict) else {}
                assert isinstance(metadata, dict)
                last = "terminating" if metadata.get("deletionTimestamp") else "present"
                if not metadata.get("deletionTimestamp"):
                    self._api("DELETE", self._claim_url(handle), "release the claim", idempotent=True,
                              ok=frozenset({404}), base_url=base_url, deadline=deadline)
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"cua-cloud: claim {handle.resource_id} ({handle.session_id}) may still exist: {err.message}",
                provider=self.name, details={**left, "cause": err.code}, remedy=remedy,
            ) from err
        raise CleanupIncomplete(
            f"cua-cloud: claim {handle.resource_id} ({handle.session_id}) is still there after "
            f"{self.destroy_timeout:g}s ({last})", provider=self.name, details=left, remedy=remedy,
        )

    def keepalive(self, handle: RemoteHandle) -> None:
        """Move the claim's ``shutdownTime`` forward by its TTL, never past the session's own expiry."""
        data = CuaHandleData.of(handle)
        until = time.time() + float(data.claim_ttl or self.claim_ttl)
        if data.expires_at is not None:
            until = min(until, max(time.time() + 60.0, data.expires_at + 300.0))
        response = self._api(
            "PATCH", self._claim_url(handle), "renew the claim", idempotent=True, ok=frozenset({404}),
            base_url=data.base_url or None, headers={"Content-Type": "application/merge-patch+json"},
            content=json.dumps({"spec": {"lifecycle": {"shutdownTime": _rfc3339(until)}}}).encode(),
        )
        if response.status_code == 404:
            raise SessionLost(f"cua-cloud: claim {handle.resource_id} is gone (released or reaped)",
                              provider=self.name)

