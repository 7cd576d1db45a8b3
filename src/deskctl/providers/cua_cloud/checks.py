"""cua cloud's preflight: read-only checks of the credentials, the warm pool and leftovers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from deskctl.errors import (
    DeskctlError,
    InfrastructureError,
    PreflightError,
    ProviderApiError,
)
from deskctl.providers.base import past_expiry
from deskctl.providers.cua_cloud.client import (
    API_VERSION,
    LABEL_MANAGED,
    CuaCloudApi,
)

if TYPE_CHECKING:
    from deskctl.checks import CheckResult
    from deskctl.spec import DesktopSpec


class CuaChecks(CuaCloudApi):
    """The preflight of :class:`~deskctl.providers.cua_cloud.CuaCloudProvider`."""

    # -- preflight ---------------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        """Read-only checks: the client-credentials exchange (mints a token, creates nothing), one authenticated
        read of the pool's claims (``GET ...?limit=1``: credentials, permission, the namespace exists), the warm
        pool's ready sandboxes where its status shows them, and leftovers. Platform and geometry are checked by
        the engine from :attr:`capabilities`."""
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)

        quick = self.retry.with_attempts_at_most(2)
        namespace = self.namespace(spec.platform)
        warmpool = self.opts.warmpool or namespace
        checks.start()
        try:
            self._access_token(policy=quick)
            self._api("GET", self._claims_path(namespace), "list claims", idempotent=True, policy=quick,
                      params={"limit": 1, "labelSelector": f"{LABEL_MANAGED}=1"})
        except ProviderApiError as err:
            if err.status == 404:
                checks.add("fail", "compat.pool_unavailable",
                           f"the namespace {namespace} (a warm pool for {spec.platform.value}) does not exist for this "
                           f"account ({err.message})", "set CUA_CLOUD_NAMESPACE or -o namespace=... to a pool you have")
            else:
                checks.add_error(err)
            return checks.results
        except DeskctlError as err:
            code = err.code if isinstance(err, PreflightError | InfrastructureError) else "provider.unreachable"
            checks.add("fail", code, err.message, err.remedy)
            return checks.results
        checks.add("pass", "cua.credentials", f"the client credentials are accepted and may read claims in {namespace}")

        checks.start()
        try:
            pool = self._json(self._api(
                "GET", f"/api/k8s/apis/{API_VERSION}/namespaces/{namespace}/osgymsandboxwarmpools/{warmpool}",
                "read the warm pool", idempotent=True, policy=quick))
        except DeskctlError as err:
            checks.add("skip", "cua.capacity", f"the warm pool {warmpool} is not readable ({err.code})")
        else:
            status = pool.get("status") if isinstance(pool, dict) else None
            ready = next((status[k] for k in ("readyReplicas", "availableReplicas", "ready")
                          if isinstance(status, dict) and isinstance(status.get(k), int)), None)
            if ready is None:
                checks.add("skip", "cua.capacity", f"the warm pool {warmpool} does not show its ready sandboxes")
            elif ready > 0:
                checks.add("pass", "cua.capacity", f"the warm pool {warmpool} has {ready} ready sandbox(es)")
            else:
                checks.add("warn", "cua.capacity",
                           f"the warm pool {warmpool} has no ready sandbox now: a claim waits while it scales up, "
                           "or fails", "retry later, or use another pool")

        checks.start()
        try:
            owned = self._list_namespace(namespace, None, quick)
        except DeskctlError as err:
            checks.add("warn", "cua.leftovers", f"could not list deskctl claims: {err.message}")
        else:
            if owned:
                now = time.time()
                expired = [h for h in owned if past_expiry(h.labels, now)]
                ids = ", ".join(h.session_id for h in owned[:5]) + (" ..." if len(owned) > 5 else "")
                checks.add("warn", "cua.leftovers",
                           f"{len(owned)} deskctl claim(s) exist in {namespace} ({ids}), {len(expired)} past their "
                           "expiry; they hold sandboxes and may bill", "deskctl reap --provider cua-cloud")
            else:
                checks.add("pass", "cua.leftovers", "no deskctl claims are left over")
        return checks.results

