"""The Daytona connection (like libcloud's connection classes): configuration, credentials, URLs, the requests
of the REST and toolbox APIs with their errors mapped, and the reads of sandboxes (one, a list) as handles.
No lifecycle policy here (rollback, leftovers, readiness: :mod:`.provider`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._redact import register_secret
from deskctl.errors import (
    CapacityUnavailable,
    CompatError,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._http import (
    HttpProvider,
    RetryPolicy,
)
from deskctl.providers.base import (
    LABEL_SESSION,
    RemoteHandle,
)
from deskctl.providers.daytona.handle_data import DaytonaHandleData

if TYPE_CHECKING:
    import httpx


from deskctl.providers.daytona._option_table import TABLE

if TYPE_CHECKING:
    from deskctl.providers.daytona.options import Options

DEFAULT_API_URL: str = TABLE["api_url"][1]
#: marks every sandbox deskctl made, so one label query finds them all
LABEL_MANAGED = "deskctl.managed"
#: the prebuilt ``windows`` snapshot: 2 vCPU, 8 GiB memory, 30 GiB disk, in region ``us`` (spec section 3)
WINDOWS_RESOURCES = {"cpu": 2.0, "memory": 8.0, "disk": 30.0}
WINDOWS_SNAPSHOT = "windows"
WINDOWS_TARGET = "us"
#: the size the ``windows`` desktop is modelled with; UNVERIFIED against the live service (docs/daytona.md)
WINDOWS_SIZE = (1024, 768)

GONE_STATES = frozenset({"destroyed"})
FAILED_STATES = frozenset({"error", "build_failed"})
WAITING_STATES = frozenset({
    "creating", "restoring", "starting", "pending_build", "building_snapshot", "pulling_snapshot", "unknown",
    "resuming", "resizing", "snapshotting", "forking",
})
STOPPED_STATES = frozenset({"stopped", "stopping", "archived", "archiving", "paused", "pausing", "destroying"})


class DaytonaApi(HttpProvider):
    """The wire side of :class:`~deskctl.providers.daytona.DaytonaProvider`."""

    option_table = TABLE
    opts: Options

    client_headers = {"X-Daytona-Source": "deskctl"}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._auth_headers: dict[str, str] | None = None
        self.create_timeout = self.opts.create_timeout
        self._api_url: str | None = None

    # -- configuration -----------------------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        """``api_url`` option, else ``DAYTONA_API_URL``, else the public service (resolved once)."""
        if self._api_url is None:
            url = self.opts.api_url or DEFAULT_API_URL
            self._api_url = str(url).rstrip("/")
        return self._api_url

    def _target(self, platform: Platform) -> str | None:
        target = self.opts.target
        if target:
            return str(target)
        return WINDOWS_TARGET if platform is Platform.WINDOWS else None

    def _snapshot(self, platform: Platform) -> str | None:
        snapshot = self.opts.snapshot
        if snapshot:
            return str(snapshot)
        return WINDOWS_SNAPSHOT if platform is Platform.WINDOWS else None

    def _credentials_remedy(self) -> str:
        return ("export DAYTONA_API_KEY=... (a key from the Daytona dashboard) or run: "
                "deskctl login daytona --var DAYTONA_API_KEY")

    def _auth(self) -> dict[str, str]:
        """The auth headers; raises :class:`CredentialsMissing` when no credential is configured."""
        if self._auth_headers is not None:
            return self._auth_headers
        api_key = self._var("DAYTONA_API_KEY")
        if api_key:
            register_secret(api_key)
            self._auth_headers = {"Authorization": f"Bearer {api_key}"}
            return self._auth_headers
        jwt = self._var("DAYTONA_JWT_TOKEN")
        if jwt:
            register_secret(jwt)
            org = self._var("DAYTONA_ORGANIZATION_ID")
            if not org:
                raise CredentialsMissing(
                    "DAYTONA_ORGANIZATION_ID is required when authenticating with DAYTONA_JWT_TOKEN",
                    provider=self.name, remedy="export DAYTONA_ORGANIZATION_ID=<your organization id>",
                )
            self._auth_headers = {"Authorization": f"Bearer {jwt}", "X-Daytona-Organization-ID": org}
            return self._auth_headers
        raise CredentialsMissing(
            "daytona needs DAYTONA_API_KEY, or DAYTONA_JWT_TOKEN with DAYTONA_ORGANIZATION_ID "
            "(environment or keyring)", provider=self.name, remedy=self._credentials_remedy(),
        )

    # -- HTTP ----------------------------------------------------------------------------------------------
    def _classify(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        low = message.lower()
        code = str(body.get("code") or "")
        # the toolbox's file errors are about the caller's path, never the sandbox or the key
        if code == "FILE_NOT_FOUND":
            return UsageError(f"daytona: {message}", code="usage.no_such_file", provider=self.name)
        if code == "FILE_ACCESS_DENIED":
            return ProviderApiError(f"daytona: permission denied on the desktop: {message}", provider=self.name,
                                    status=status)
        if status == 403 and ("not available" in low or "region" in low or "class" in low):
            return CompatError(
                f"daytona: {message}", code="compat.region_unavailable", provider=self.name,
                remedy="ask Daytona for a quota in this region and class, or set DAYTONA_TARGET to one you have",
            )
        if status == 400 and "no available runners" in low:
            return CapacityUnavailable(f"daytona: {message}", provider=self.name,
                                       remedy="retry later or choose another DAYTONA_TARGET")
        return None

    def _api(
        self, method: str, path: str, action: str, *, idempotent: bool, ok: frozenset[int] = frozenset(),
        api_url: str | None = None, deadline: float | None = None, policy: RetryPolicy | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        headers.update(self._auth())
        url = f"{(api_url or self.api_url).rstrip('/')}{path}"
        return self._send(method, url, action, idempotent=idempotent, ok=ok, deadline=deadline, policy=policy,
                          headers=headers, **kwargs)

    def _toolbox(
        self, handle: RemoteHandle, method: str, path: str, action: str, *, idempotent: bool,
        deadline: float | None = None, **kwargs: Any,
    ) -> httpx.Response:
        base = DaytonaHandleData.of(handle).toolbox_url.rstrip("/")
        if not base:
            raise ProviderApiError(f"daytona: the handle of {handle.session_id} has no toolbox URL",
                                   provider=self.name)
        headers = dict(kwargs.pop("headers", {}) or {})
        headers.update(self._auth())
        url = f"{base}/{handle.resource_id}{path}"
        try:
            return self._send(method, url, action, idempotent=idempotent, deadline=deadline, headers=headers,
                              **kwargs)
        except ProviderApiError as err:
            raise self._toolbox_lost(handle, err) from err

    def _toolbox_lost(self, handle: RemoteHandle, err: ProviderApiError) -> DeskctlError:
        """A toolbox error that could mean the sandbox no longer runs (404, 410, a 400) is decided by the
        sandbox's own state (``GET /sandbox/{id}``), never by the words of the message (a daemon's message
        names the path, which may say "sandbox" or "not found"): :class:`SessionLost` when it is gone or not
        running; otherwise the error stays the session's own, and a 404 says the toolbox lacks the route."""
        if err.status not in (400, 404, 410):
            return err
        state = self._sandbox_state(handle)
        if state is None:
            return err  # the sandbox could not be read: nothing is decided on a guess
        if state == "gone" or state in STOPPED_STATES or state in FAILED_STATES:
            return SessionLost(
                f"daytona: sandbox {handle.resource_id} is not running any more "
                f"({'gone' if state == 'gone' else f'state {state}'}; the toolbox answered: {err.message})",
                provider=self.name, details={"status": err.status, "state": state},
                remedy="it may have been auto-stopped; see deskctl ls, and deskctl reap to remove it",
            )
        if err.status == 404:
            return ProviderApiError(
                f"daytona: sandbox {handle.resource_id} is still {state}, but the service has no such route: "
                f"{err.message} (an older daemon or API?)", provider=self.name, status=404,
                details={**err.details, "state": state},
                remedy="the sandbox is still running; recreate it from a current snapshot, or report the daemon "
                       "version (GET /version on the toolbox)",
            )
        return err

    def _sandbox_state(self, handle: RemoteHandle) -> str | None:
        """The sandbox's state from the API (``"gone"`` after a 404 or ``destroyed``), None when unreadable."""
        try:
            sandbox = self._get_sandbox(handle)
        except DeskctlError:
            return None
        return "gone" if sandbox is None else str(sandbox.get("state") or "unknown")

    def _handle_from(self, sandbox: Mapping[str, Any], session_id: str, platform: Platform | None) -> RemoteHandle:
        labels = sandbox.get("labels") if isinstance(sandbox.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        sandbox_class = sandbox.get("sandboxClass")
        if platform is None:
            platform = Platform.WINDOWS if sandbox_class == "windows" or sandbox.get("snapshot") == WINDOWS_SNAPSHOT \
                else Platform.UBUNTU
        said = {key: sandbox.get(key) for key in ("name", "target", "snapshot", "cpu", "memory", "disk", "gpu")}
        data = DaytonaHandleData.from_data({
            **said, "api_url": self.api_url, "toolbox_url": str(sandbox.get("toolboxProxyUrl") or "").rstrip("/"),
            "platform": platform.value, "sandbox_class": sandbox_class, "ttl_minutes": sandbox.get("ttlMinutes"),
            "auto_destroy_at": str(sandbox["autoDestroyAt"]) if sandbox.get("autoDestroyAt") else None,
        }).to_data()
        return RemoteHandle(
            provider=self.name,
            session_id=str(labels.get(LABEL_SESSION) or session_id),
            resource_id=str(sandbox["id"]),
            labels={str(k): str(v) for k, v in labels.items()},
            data=data,
        )

    # -- readiness -----------------------------------------------------------------------------------------
    def _get_sandbox(self, handle: RemoteHandle, *, deadline: float | None = None) -> dict[str, Any] | None:
        """The sandbox, or None when it is gone (404 or ``destroyed``)."""
        response = self._api("GET", f"/sandbox/{handle.resource_id}", "read the sandbox", idempotent=True,
                             ok=frozenset({404}), api_url=DaytonaHandleData.of(handle).api_url or None,
                             deadline=deadline)
        if response.status_code == 404:
            return None
        sandbox = self._json(response)
        if not isinstance(sandbox, dict) or str(sandbox.get("state")) in GONE_STATES:
            return None
        return sandbox


    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        return self._list_owned(selector, None)

    def _list_owned(self, selector: Mapping[str, str] | None, policy: RetryPolicy | None) -> list[RemoteHandle]:
        wanted = {LABEL_MANAGED: "1", **dict(selector or {})}
        handles: list[RemoteHandle] = []
        cursor: str | None = None
        seen_cursors: set[str] = set()
        while True:
            params: dict[str, Any] = {"labels": json.dumps(wanted, sort_keys=True), "limit": 100}
            if cursor:
                params["cursor"] = cursor
            page = self._json(self._api("GET", "/sandbox", "list sandboxes", idempotent=True, params=params,
                                        policy=policy))
            items, cursor = items_of(page)
            for item in items:
                if not isinstance(item, dict) or not item.get("id"):
                    continue
                labels = item.get("labels") if isinstance(item.get("labels"), dict) else {}
                assert isinstance(labels, dict)
                if any(labels.get(k) != v for k, v in wanted.items()):
                    continue  # an old server that ignores the filter
                if str(item.get("state")) in GONE_STATES or str(item.get("desiredState")) == "destroyed":
                    continue
                session_id = str(labels.get(LABEL_SESSION) or item.get("name") or item["id"])
                handle = self._handle_from(item, session_id, None)
                # the list is eventually consistent (a deleted sandbox may show as started for a moment): only
                # the GET, authoritative and monotonic, says it is still there
                sandbox = self._get_sandbox(handle)
                if sandbox is None or str(sandbox.get("desiredState")) == "destroyed":
                    continue
                handles.append(handle)
            if not cursor or cursor in seen_cursors:
                break
            seen_cursors.add(cursor)
        return handles

    # -- snapshots (daytona-api-client 0.231: SandboxApi.create_sandbox_snapshot, SnapshotsApi) ----------------
    def _snapshot_sandbox(self, handle: RemoteHandle, name: str, *, include_memory: bool,
                          deadline: float) -> dict[str, Any]:
        """``POST /sandbox/{id}/snapshot`` ``{name, includeMemory}`` (``CreateSandboxSnapshot``): answers the
        sandbox, now ``snapshotting``. Never retried: a lost answer is settled by :meth:`_get_snapshot`."""
        response = self._api("POST", f"/sandbox/{handle.resource_id}/snapshot", "snapshot the sandbox",
                             idempotent=False, json={"name": name, "includeMemory": include_memory},
                             api_url=DaytonaHandleData.of(handle).api_url or None, deadline=deadline)
        answer = self._json(response)
        return answer if isinstance(answer, dict) else {}

    def _get_snapshot(self, id_or_name: str, *, api_url: str | None = None,
                      deadline: float | None = None) -> dict[str, Any] | None:
        """``GET /snapshots/{idOrName}`` (``SnapshotDto``), None when there is none (404)."""
        from urllib.parse import quote

        response = self._api("GET", f"/snapshots/{quote(id_or_name, safe='')}", "read the snapshot",
                             idempotent=True, ok=frozenset({404}), api_url=api_url, deadline=deadline)
        if response.status_code == 404:
            return None
        snapshot = self._json(response)
        return snapshot if isinstance(snapshot, dict) else None

    def _delete_snapshot(self, snapshot_id: str, *, api_url: str | None = None, deadline: float | None = None) -> None:
        """``DELETE /snapshots/{id}`` (``SnapshotsApi.remove_snapshot``); a 404 is success."""
        from urllib.parse import quote

        self._api("DELETE", f"/snapshots/{quote(snapshot_id, safe='')}", "delete the snapshot", idempotent=True,
                  ok=frozenset({404}), api_url=api_url, deadline=deadline)

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._get_sandbox(handle) is not None


def items_of(page: Any) -> tuple[list[Any], str | None]:
    """A list answer as (items, next cursor): both the bare array (before v0.180) and ``{items, nextCursor}``."""
    if isinstance(page, list):
        return page, None
    if isinstance(page, dict):
        items = page.get("items")
        cursor = page.get("nextCursor")
        return (list(items) if isinstance(items, list) else []), (str(cursor) if cursor else None)
    return [], None


