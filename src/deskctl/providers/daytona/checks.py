"""Daytona's preflight: read-only checks of the service, the key's scopes, the region quota and leftovers."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from deskctl.errors import (
    CredentialsMissing,
    DeskctlError,
    InfrastructureError,
    PreflightError,
)
from deskctl.platforms import Platform
from deskctl.providers._http import RetryPolicy
from deskctl.providers.base import past_expiry

if TYPE_CHECKING:
    from deskctl.checks import CheckRecorder, CheckResult
    from deskctl.spec import DesktopSpec

from deskctl.providers.daytona.client import WINDOWS_RESOURCES, DaytonaApi, items_of

#: what deskctl needs of an API key: create (and labels, activity) and delete (cleanup)
_NEEDED_SCOPES = ("write:sandboxes", "delete:sandboxes")


class DaytonaChecks(DaytonaApi):
    """The preflight of :class:`~deskctl.providers.daytona.DaytonaProvider`."""

    # -- preflight -----------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        """Read-only checks: ``GET /config`` (reachable, maintenance), one authenticated read
        (``GET /sandbox?limit=1``), room in the region quota where the API shows it, and leftovers.
        Platform and geometry (fixed Windows size) are checked by the engine from :attr:`capabilities`."""
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)

        quick = self.retry.with_attempts_at_most(2)  # preflight runs under a per-check timeout
        checks.start()
        try:
            self._auth()  # nothing is dialled without credentials
        except CredentialsMissing as err:
            checks.add_error(err)
            return checks.results
        try:
            config = self._json(self._send("GET", f"{self.api_url}/config", "GET /config", idempotent=True,
                                           policy=quick))
        except DeskctlError as err:
            checks.add("fail", err.code if isinstance(err, InfrastructureError) else "provider.unreachable",
                       f"{self.api_url}/config: {err.message}", "check the network and DAYTONA_API_URL")
            return checks.results
        if isinstance(config, dict) and (config.get("maintananceMode") or config.get("maintenanceMode")):
            checks.add("fail", "provider.maintenance", "Daytona reports maintenance mode", "retry later")
        else:
            version = config.get("version") if isinstance(config, dict) else None
            checks.add("pass", "daytona.reachable", f"{self.api_url} answers (version {version or 'unknown'})")

        checks.start()
        try:
            first = self._json(self._api("GET", "/sandbox", "list sandboxes", idempotent=True,
                                         params={"limit": 1}, policy=quick))
        except DeskctlError as err:
            code = err.code if isinstance(err, PreflightError | InfrastructureError) else "provider.unreachable"
            checks.add("fail", code, err.message, err.remedy)
            return checks.results
        checks.add("pass", "daytona.credentials", "the Daytona credentials are accepted")

        checks.start()
        key = self._key_check(checks, quick)

        checks.start()
        self._quota_check(spec, first, checks, quick, org=key.get("organizationId") if key else None)

        checks.start()
        try:
            owned = self._list_owned(None, quick)
        except DeskctlError as err:
            checks.add("warn", "daytona.leftovers", f"could not list deskctl sandboxes: {err.message}")
        else:
            if owned:
                now = time.time()
                expired = [h for h in owned if past_expiry(h.labels, now)]
                ids = ", ".join(h.session_id for h in owned[:5]) + (" ..." if len(owned) > 5 else "")
                checks.add("warn", "daytona.leftovers",
                           f"{len(owned)} deskctl sandbox(es) exist ({ids}), {len(expired)} past their expiry; "
                           "they count against the quota and may bill", "deskctl reap --provider daytona")
            else:
                checks.add("pass", "daytona.leftovers", "no deskctl sandboxes are left over")
        return checks.results

    def _key_check(self, checks: CheckRecorder, policy: RetryPolicy) -> dict[str, Any] | None:
        """``GET /api-keys/current``: the key's scopes (a read-only key can list but not create, a key without
        ``delete:sandboxes`` creates what deskctl then cannot delete) and its organization. None when the
        answer is not available (a JWT, or a server without the route)."""
        if not self._var("DAYTONA_API_KEY"):
            checks.add("skip", "daytona.permissions", "signed in with a JWT: the scopes of the organization role are "
                       "not readable; create and delete are tried only when needed")
            return None
        try:
            answer = self._json(self._api("GET", "/api-keys/current", "read the key's permissions",
                                          idempotent=True, policy=policy))
        except DeskctlError as err:
            checks.add("skip", "daytona.permissions", f"the key's permissions are not readable ({err.code})")
            return None
        key: dict[str, Any] = dict(answer) if isinstance(answer, dict) else {}
        permissions = key.get("permissions")
        if not isinstance(permissions, list):
            checks.add("skip", "daytona.permissions", "the key's permissions are not in the answer")
            return key
        missing = [scope for scope in _NEEDED_SCOPES if scope not in {str(p) for p in permissions}]
        if missing:
            why = ("a read-only key: it may list sandboxes but not create them" if "write:sandboxes" in missing
                   else "deskctl could create sandboxes that this key cannot delete")
            checks.add("fail", "credentials.forbidden", f"the API key lacks {' and '.join(missing)} ({why})",
                       "create a key with write:sandboxes and delete:sandboxes (Daytona dashboard, Keys) and set "
                       "DAYTONA_API_KEY to it")
        else:
            checks.add("pass", "daytona.permissions", "the key may create (write:sandboxes) and delete "
                       "(delete:sandboxes) sandboxes")
        return key

    def _quota_check(self, spec: DesktopSpec, first_page: Any, checks: CheckRecorder,
                     policy: RetryPolicy, *, org: str | None = None) -> None:
        org = self._var("DAYTONA_ORGANIZATION_ID") or org
        if not org:
            items = items_of(first_page)[0]
            org = next((str(i["organizationId"]) for i in items if isinstance(i, dict) and i.get("organizationId")),
                       None)
        if not org:
            checks.add("skip", "daytona.quota", "the organization id is unknown (set DAYTONA_ORGANIZATION_ID to check "
                       "the quota before creating)")
            return
        try:
            usage = self._json(self._api("GET", f"/organizations/{org}/usage", "read the quota",
                                         idempotent=True, policy=policy))
        except DeskctlError as err:
            checks.add("skip", "daytona.quota", f"the quota is not readable with these credentials ({err.code})")
            return
        need = WINDOWS_RESOURCES if spec.platform is Platform.WINDOWS else {"cpu": 1.0, "memory": 1.0, "disk": 3.0}
        wanted_class = "windows" if spec.platform is Platform.WINDOWS else "container"
        target = self._target(spec.platform)
        rows = [r for r in (usage.get("regionUsage") or []) if isinstance(r, dict)] if isinstance(usage, dict) else []
        rows = [r for r in rows if target is None or r.get("regionId") in (None, target)]
        classed = [r for r in rows if r.get("sandboxClass") in (None, wanted_class)]
        if rows and not classed and spec.platform is Platform.WINDOWS:
            checks.add("fail", "compat.region_unavailable",
                       f"the organization has no {wanted_class} quota in region {target}",
                       "ask Daytona for Windows access in this region, or set DAYTONA_TARGET")
            return
        if not classed:
            checks.add("skip", "daytona.quota", "the usage answer has no row for this region and class")
            return
        row = classed[0]
        short: list[str] = []
        for resource, quota_key, used_key in (("cpu", "totalCpuQuota", "currentCpuUsage"),
                                              ("memory", "totalMemoryQuota", "currentMemoryUsage"),
                                              ("disk", "totalDiskQuota", "currentDiskUsage")):
            total, used = row.get(quota_key), row.get(used_key)
            if isinstance(total, int | float) and isinstance(used, int | float) and total - used < need[resource]:
                short.append(f"{resource} {total - used:g} free of {total:g}, needs {need[resource]:g}")
        if short:
            checks.add("fail", "quota.exceeded", "no room for this sandbox: " + "; ".join(short),
                       "destroy sandboxes you do not need (deskctl reap, the Daytona dashboard) or raise the tier")
        else:
            checks.add("pass", "daytona.quota",
                       f"room for {need['cpu']:g} vCPU / {need['memory']:g} GiB / {need['disk']:g} GiB in "
                       f"{row.get('regionId') or 'the default region'}")

