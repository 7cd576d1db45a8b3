"""Daytona sandboxes as desktops: Windows (the ``windows`` snapshot) and Linux (the default snapshot with
computer use), over Daytona's classic REST API and the toolbox computer-use API, with httpx and tenacity.

The contract was read from github.com/daytonaio/daytona (v0.190.0) and the generated ``daytona-api-client``
(docs/daytona.md). What the caller may rely on:

- **Auth**: ``DAYTONA_API_KEY`` as Bearer, or ``DAYTONA_JWT_TOKEN`` plus ``X-Daytona-Organization-ID`` from
  ``DAYTONA_ORGANIZATION_ID``; each from the environment, then the keyring (:func:`deskctl.credentials.resolve`).
  ``DAYTONA_API_URL`` (default ``https://app.daytona.io/api``) and ``DAYTONA_TARGET`` (region) are read too.
  Secrets are registered for redaction and never stored in a handle.
- **Create**: the session id is the sandbox name; the deskctl labels plus ``deskctl.managed=1``; backstops
  ``autoStopInterval`` (idle minutes, from the session's limits), ``autoDeleteInterval=0`` (delete on stop) and
  ``ttlMinutes`` (wall-clock). Never cpu, memory or disk (the service rejects them with a snapshot). A create
  is never retried blindly: after a timeout, a 5xx or 400 "Sandbox failed to start", what was made is found by
  name and by label and destroyed before the error is raised; when the answer was lost the lookup is repeated
  over ``create_lookup_seconds``, and nothing found is :class:`~deskctl.errors.CleanupIncomplete` (``leaked``).
- **Gone**: decided by ``GET /sandbox/{id}`` (404, ``destroyed``, stopped, archived, errored), never by a
  toolbox message's words; a 404 while the sandbox runs is a route the service lacks.
- **Readiness**: state ``started`` (``error``/``build_failed`` fail at once with ``errorReason``), computer use
  started and ``active`` (503 while the plugin loads is retried until the deadline), then a test screenshot
  whose size must equal ``display/info``.
- **Preflight** (read-only, nothing dialled without credentials): ``GET /config``, one authenticated list,
  ``GET /api-keys/current`` (a key without ``write:sandboxes`` or ``delete:sandboxes`` is
  ``credentials.forbidden``; its ``organizationId`` lets the quota be read without ``DAYTONA_ORGANIZATION_ID``),
  the region quota, and leftovers.
- **Destroy**: DELETE, retried on 409 while a transition runs, then GET until 404 or ``destroyed``; a 404 is
  success. Unconfirmed is :class:`~deskctl.errors.CleanupIncomplete` naming the sandbox; a 403 (the key lacks
  ``delete:sandboxes``) says so and names the TTL that will end the sandbox.
- **Listing** (reap, preflight leftovers): the list is eventually consistent, so every listed sandbox is
  confirmed by ``GET`` before it is called a leftover.
- **Exec**: ``process/execute`` with its own ``cwd`` and ``envs`` fields; another user through ``sudo -n`` and
  a detached start through :func:`~deskctl.providers._guest.posix_line` (``cmd.exe`` lines from
  :func:`~deskctl.providers._guest.cmd_line` on Windows). The service merges stdout and stderr; on Linux the
  line sends stderr to an unlinked temp file and prints it after a random marker, so the two come back apart;
  on Windows the result has ``merged=True``. A command that outlives its timeout is killed by the service and
  reported as exit code 124 (as GNU ``timeout`` does).
- **Files**: ``files/bulk-upload`` (multipart, the file streamed from disk) and ``files/bulk-download`` (a
  multipart answer streamed to disk; an ``error`` part for a missing file is ``usage.no_such_file``),
  ``files/info``, ``files/folder`` and ``files/permissions``; directories as one tar unpacked by ``exec``
  (:class:`~deskctl.providers._files.FileTransfer`). Relative paths resolve against the sandbox's work dir.
- **Pointer**: ``computeruse/mouse/position``. Clipboard, launch, open_url and window titles are commands on
  the guest (:class:`~deskctl.providers._guest.GuestActions`).

Provider options (``provider_options``): ``api_url``, ``target``, ``snapshot``, ``auto_stop_minutes``
(default 15), ``ttl_minutes`` (default from the session's limits, else 1440; 0 disables), ``poll_interval``,
``poll_max_interval``, ``destroy_timeout``, ``create_timeout``, ``create_lookup_seconds`` (45, at most 600),
``request_timeout``, and the retry options of
:class:`deskctl.providers._http.RetryPolicy` (``retry_attempts``, ``retry_initial``, ``retry_maximum``,
``retry_scale``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import stat
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskctl._redact import redact, register_secret
from deskctl.actions import (
    Action,
    Click,
    Drag,
    KeyDown,
    KeyPress,
    KeyUp,
    MouseDown,
    MouseUp,
    Move,
    Scroll,
    TypeText,
)
from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    CompatError,
    CredentialsForbidden,
    CredentialsMissing,
    DeskctlError,
    InfrastructureError,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    RateLimited,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.providers._files import FileTransfer, no_such_file
from deskctl.providers._guest import GuestActions, background_pid, check_exec_options, cmd_line, posix_line
from deskctl.providers._http import (
    HTTP_OPTIONS,
    HttpProvider,
    RetryPolicy,
    answer_lost,
    error_from_transport,
    response_message,
)
from deskctl.providers._png import png_size
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    ExecResult,
    RemoteHandle,
    Screenshot,
    lifetime_seconds,
    past_expiry,
)
from deskctl.spec import DesktopSpec, Platform

if TYPE_CHECKING:
    import httpx

    from deskctl.checks import CheckRecorder, CheckResult

__all__ = ["DEFAULT_API_URL", "LABEL_MANAGED", "WINDOWS_RESOURCES", "DaytonaProvider", "MultipartReader",
           "toolbox_key_name"]

DEFAULT_API_URL = "https://app.daytona.io/api"
#: marks every sandbox deskctl made, so one label query finds them all
LABEL_MANAGED = "deskctl.managed"
#: the prebuilt ``windows`` snapshot: 2 vCPU, 8 GiB memory, 30 GiB disk, in region ``us`` (spec section 3)
WINDOWS_RESOURCES = {"cpu": 2.0, "memory": 8.0, "disk": 30.0}
WINDOWS_SNAPSHOT = "windows"
WINDOWS_TARGET = "us"
#: the size the ``windows`` desktop is modelled with; UNVERIFIED against the live service (docs/daytona.md)
WINDOWS_SIZE = (1024, 768)

_GONE_STATES = frozenset({"destroyed"})
_FAILED_STATES = frozenset({"error", "build_failed"})
_WAITING_STATES = frozenset({
    "creating", "restoring", "starting", "pending_build", "building_snapshot", "pulling_snapshot", "unknown",
    "resuming", "resizing", "snapshotting", "forking",
})
_STOPPED_STATES = frozenset({"stopped", "stopping", "archived", "archiving", "paused", "pausing", "destroying"})

#: deskctl canonical key names (deskctl.actions) -> toolbox names (spec section 4 "Keys")
_KEY_NAMES: dict[str, str] = {
    "ctrl": "ctrl", "alt": "alt", "shift": "shift", "super": "cmd",
    "enter": "enter", "escape": "escape", "tab": "tab", "backspace": "backspace", "delete": "delete",
    "space": "space", "home": "home", "end": "end", "pageup": "pageup", "pagedown": "pagedown",
    "insert": "insert", "up": "up", "down": "down", "left": "left", "right": "right",
    "capslock": "capslock", "menu": "menu",
    **{f"f{i}": f"f{i}" for i in range(1, 25)},
}


def toolbox_key_name(canonical: str) -> str:
    """The toolbox's name for a canonical deskctl key; a single character passes through unchanged."""
    if len(canonical) == 1:
        return canonical
    name = _KEY_NAMES.get(canonical)
    if name is None:
        raise UsageError(
            f"the Daytona toolbox has no key {canonical!r} (it offers: {', '.join(sorted(_KEY_NAMES))} "
            "and single characters)", code="usage.unknown_key", provider="daytona",
        )
    return name



def _ceil_minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60.0))


class DaytonaProvider(FileTransfer, GuestActions, HttpProvider):
    """Daytona sandboxes (``windows`` and ``ubuntu``) reached through the REST and toolbox APIs."""

    name = "daytona"
    option_names = HTTP_OPTIONS | {"api_url", "target", "snapshot", "auto_stop_minutes", "ttl_minutes",
                                   "create_timeout", "create_lookup_seconds"}
    capabilities = Capabilities(
        platforms=frozenset({Platform.UBUNTU, Platform.WINDOWS}),
        settable_geometry=True,
        min_size=(640, 480),
        max_size=(3840, 2160),
        fixed_sizes={Platform.WINDOWS: (WINDOWS_SIZE,)},
        exec=True,
        # apart on Linux (see exec), merged on Windows: ExecResult.merged tells for each result
        exec_streams_separate=False,
        files=True,
        labels=True,
        server_ttl=True,
        isolation="vm",
        start_url=False,
        local=False,
        cursor_position=True,
        clipboard=True,
        windows=True,
        billing="per_second",
    )
    credentials = CredentialSet(
        variables=("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_API_URL",
                   "DAYTONA_TARGET"),
        secret=frozenset({"DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN"}),
        required_any=(("DAYTONA_API_KEY",), ("DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID")),
        source="Daytona SDK daytona/_sync/daytona.py (github.com/daytonaio/daytona; www.daytona.io/docs/en/api-keys)",
    )
    client_headers = {"X-Daytona-Source": "deskctl"}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._auth_headers: dict[str, str] | None = None
        self.poll_interval = self._number("poll_interval", 0.2)
        self.poll_max_interval = self._number("poll_max_interval", 2.0)
        self.destroy_timeout = self._number("destroy_timeout", 300.0)
        self.create_timeout = self._number("create_timeout", 120.0)
        self.request_timeout = self._number("request_timeout", 60.0)
        self._api_url: str | None = None

    # -- configuration -----------------------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        """``api_url`` option, else ``DAYTONA_API_URL``, else the public service (resolved once)."""
        if self._api_url is None:
            url = self.options.get("api_url") or self._var("DAYTONA_API_URL") or DEFAULT_API_URL
            self._api_url = str(url).rstrip("/")
        return self._api_url

    def _target(self, platform: Platform) -> str | None:
        target = self.options.get("target") or self._var("DAYTONA_TARGET")
        if target:
            return str(target)
        return WINDOWS_TARGET if platform is Platform.WINDOWS else None

    def _snapshot(self, platform: Platform) -> str | None:
        snapshot = self.options.get("snapshot")
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
        base = str(handle.data.get("toolbox_url") or "").rstrip("/")
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
        if state == "gone" or state in _STOPPED_STATES or state in _FAILED_STATES:
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
            items = _items(first_page)[0]
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

    # -- create ------------------------------------------------------------------------------------------
    def create_body(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> dict[str, Any]:
        """The ``POST /sandbox`` body for a session (never cpu, memory, disk or gpu)."""
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        all_labels = {str(k): str(v) for k, v in labels.items()}
        all_labels[LABEL_SESSION] = session_id
        all_labels[LABEL_MANAGED] = "1"
        lifetime = lifetime_seconds(spec, labels)
        detached = str(labels.get(LABEL_DETACHED, "")) == "1"
        auto_stop_option = self.options.get("auto_stop_minutes")
        if auto_stop_option is not None:
            auto_stop = int(auto_stop_option)
        elif detached and lifetime is not None:
            # nobody sends keepalives to a detached desktop: idle time up to its lifetime is expected use
            auto_stop = _ceil_minutes(lifetime)
        else:
            # an attached session sends keepalives: auto-stop fires only once its owner is gone
            auto_stop = min(15, _ceil_minutes(lifetime)) if lifetime is not None else 15
        auto_stop = max(1, auto_stop)  # 0 would mean "never stop": a cost leak
        ttl_option = self.options.get("ttl_minutes")
        if ttl_option is not None:
            ttl = int(ttl_option)
        elif lifetime is not None:
            # the server-side backstop fires a little after the session's own expiry, never before
            ttl = _ceil_minutes(lifetime) + 5
        else:
            ttl = 1440
        body: dict[str, Any] = {
            "name": session_id,
            "labels": all_labels,
            "autoStopInterval": auto_stop,
            "autoDeleteInterval": 0,
            "ttlMinutes": ttl,
        }
        snapshot = self._snapshot(spec.platform)
        if snapshot:
            body["snapshot"] = snapshot
        target = self._target(spec.platform)
        if target:
            body["target"] = target
        if spec.platform is Platform.UBUNTU and spec.geometry is not None:
            body["env"] = {"VNC_RESOLUTION": f"{spec.geometry.width}x{spec.geometry.height}"}
        return body

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        body = self.create_body(spec, session_id, labels)
        try:
            response = self._api("POST", "/sandbox", "create the sandbox", idempotent=False, json=body,
                                 timeout=self.create_timeout)
            sandbox = self._json(response)
            if not isinstance(sandbox, dict) or not sandbox.get("id"):
                raise ProviderApiError("daytona: create answered without a sandbox id", provider=self.name)
        except DeskctlError as err:
            if self._create_may_have_made_something(err):
                self._sweep(session_id, err)
            raise
        handle = self._handle_from(sandbox, session_id, spec.platform)
        state = str(sandbox.get("state") or "")
        if state in _FAILED_STATES:
            failure = ProviderApiError(
                f"daytona: sandbox {handle.resource_id} failed to start: {sandbox.get('errorReason') or state}",
                provider=self.name,
            )
            self._sweep(session_id, failure)
            raise failure
        return handle

    @staticmethod
    def _create_may_have_made_something(err: DeskctlError) -> bool:
        if isinstance(err, RateLimited | PreflightError):
            return False  # refused before anything was made (429, 401, 403, quota)
        if isinstance(err, ProviderUnreachable):
            return bool(err.details.get("sent", True))
        if isinstance(err, ProviderApiError) and err.status == 400:
            return "failed to start" in err.message.lower()
        return isinstance(err, InfrastructureError)

    def _sweep(self, session_id: str, cause: DeskctlError) -> None:
        """Destroy whatever a failed create made, found by name (authoritative) and by label. When the create's
        answer was lost the service may still be making the sandbox: it is looked for again over
        ``create_lookup_seconds``; then the error says what was found and destroyed, or (nothing appeared)
        :class:`CleanupIncomplete` says how ``deskctl reap`` finds it later."""

        def lookup() -> dict[str, RemoteHandle]:
            found: dict[str, RemoteHandle] = {}
            response = self._api("GET", f"/sandbox/{session_id}", "find the sandbox by name", idempotent=True,
                                 ok=frozenset({404}))
            if response.status_code != 404:
                sandbox = self._json(response)
                if isinstance(sandbox, dict) and sandbox.get("id") and str(sandbox.get("state")) not in _GONE_STATES:
                    found[str(sandbox["id"])] = self._handle_from(sandbox, session_id, None)
            for handle in self.list_owned({LABEL_SESSION: session_id}):
                found.setdefault(handle.resource_id, handle)
            return found

        try:
            found = self._look_for_created(lookup, cause)
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"daytona: create of {session_id} failed ({cause.message}) and what it made could not be "
                f"looked up: {err.message}", provider=self.name, details={"left": [session_id]},
                remedy=f"deskctl reap --provider daytona (or delete the sandbox named {session_id})",
            ) from cause
        self._destroy_left_by_create(found, session_id, cause)
        if answer_lost(cause):
            if found:
                raise self._lost_create_cleaned(cause, session_id, sorted(found), "sandbox") from cause
            raise self._lost_create_unresolved(
                cause, session_id, "sandbox", f"the name {session_id} and the label {LABEL_SESSION}={session_id}",
            ) from cause

    def _handle_from(self, sandbox: Mapping[str, Any], session_id: str, platform: Platform | None) -> RemoteHandle:
        labels = sandbox.get("labels") if isinstance(sandbox.get("labels"), dict) else {}
        assert isinstance(labels, dict)
        sandbox_class = sandbox.get("sandboxClass")
        if platform is None:
            platform = Platform.WINDOWS if sandbox_class == "windows" or sandbox.get("snapshot") == WINDOWS_SNAPSHOT \
                else Platform.UBUNTU
        data: dict[str, Any] = {
            "api_url": self.api_url,
            "toolbox_url": str(sandbox.get("toolboxProxyUrl") or "").rstrip("/"),
            "name": sandbox.get("name"),
            "platform": platform.value,
            "target": sandbox.get("target"),
            "snapshot": sandbox.get("snapshot"),
            "sandbox_class": sandbox_class,
        }
        for key in ("cpu", "memory", "disk", "gpu"):
            value = sandbox.get(key)
            if isinstance(value, int | float):
                data[key] = value
        if isinstance(sandbox.get("ttlMinutes"), int | float):
            data["ttl_minutes"] = sandbox["ttlMinutes"]
        if sandbox.get("autoDestroyAt"):
            data["auto_destroy_at"] = str(sandbox["autoDestroyAt"])
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
                             ok=frozenset({404}), api_url=handle.data.get("api_url"), deadline=deadline)
        if response.status_code == 404:
            return None
        sandbox = self._json(response)
        if not isinstance(sandbox, dict) or str(sandbox.get("state")) in _GONE_STATES:
            return None
        return sandbox

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        last = "not polled"
        for _ in self._polls(deadline):
            sandbox = self._get_sandbox(handle, deadline=deadline)
            if sandbox is None:
                raise SessionLost(f"daytona: sandbox {handle.resource_id} disappeared while starting",
                                  provider=self.name)
            state = str(sandbox.get("state") or "unknown")
            last = f"state {state}"
            if state == "started":
                if sandbox.get("toolboxProxyUrl"):
                    handle.data["toolbox_url"] = str(sandbox["toolboxProxyUrl"]).rstrip("/")
                break
            if state in _FAILED_STATES:
                raise ProviderApiError(
                    f"daytona: sandbox {handle.resource_id} is in state {state}: "
                    f"{sandbox.get('errorReason') or 'no reason given'}", provider=self.name,
                    details={"state": state},
                )
            if state in _STOPPED_STATES:
                raise SessionLost(f"daytona: sandbox {handle.resource_id} went to {state} while starting",
                                  provider=self.name)
        else:
            raise self._timeout(handle, last)
        if time.monotonic() >= deadline:
            raise self._timeout(handle, last)

        started = False
        for _ in self._polls(deadline):
            try:
                if not started:
                    try:
                        self._toolbox(handle, "POST", "/computeruse/start", "start computer use",
                                      idempotent=True, deadline=deadline)
                    except ProviderApiError as err:
                        # on Windows the desktop is always there and start is a no-op: its answer is advisory
                        if handle.data.get("platform") != Platform.WINDOWS.value or err.status in (502, 503, 504):
                            raise
                        last = f"computer use start answered HTTP {err.status} (advisory on windows)"
                    started = True
                status = self._json(self._toolbox(handle, "GET", "/computeruse/status", "read computer use status",
                                                  idempotent=True, deadline=deadline))
            except ProviderApiError as err:
                if err.status not in (502, 503, 504):
                    raise
                last = f"computer use not available yet (HTTP {err.status}: {err.message})"
                continue
            value = str(status.get("status") if isinstance(status, dict) else status)
            last = f"computer use status {value}"
            if value == "active":
                break
            if value == "error":
                raise ProviderApiError(f"daytona: computer use of {handle.resource_id} reports status error",
                                       provider=self.name)
        else:
            raise self._timeout(handle, last)

        self._check_screenshot_size(handle)

    def _timeout(self, handle: RemoteHandle, last: str) -> ReadinessTimeout:
        return ReadinessTimeout(
            f"daytona: sandbox {handle.resource_id} was not ready in time (last: {last})", provider=self.name,
            remedy="raise ready_timeout; Windows sandboxes can take minutes to boot", details={"last": last},
        )

    # -- destroy and listing -------------------------------------------------------------------------------
    def destroy(self, handle: RemoteHandle) -> None:
        deadline = time.monotonic() + self.destroy_timeout
        api_url = handle.data.get("api_url")
        left = {"left": [handle.resource_id], "session": handle.session_id}
        remedy = f"deskctl down {handle.session_id} (or delete sandbox {handle.resource_id} in the Daytona dashboard)"
        last = ""
        try:
            for _ in self._polls(deadline):
                try:
                    self._api("DELETE", f"/sandbox/{handle.resource_id}", "delete the sandbox", idempotent=True,
                              ok=frozenset({404}), api_url=api_url, deadline=deadline)
                    break
                except CredentialsForbidden as err:
                    raise self._delete_forbidden(handle, err, left) from err
                except ProviderApiError as err:
                    if err.status != 409:
                        raise
                    last = err.message  # a state change in progress: wait for it and delete again
            else:
                raise CleanupIncomplete(
                    f"daytona: sandbox {handle.resource_id} could not be deleted in time (last: {last})",
                    provider=self.name, details=left, remedy=remedy)
            for _ in self._polls(deadline):
                sandbox = self._get_sandbox(handle, deadline=deadline)
                if sandbox is None:
                    return
                last = f"state {sandbox.get('state')}"
                if str(sandbox.get("desiredState")) != "destroyed" and str(sandbox.get("state")) != "destroying":
                    # a delete that did not take (the list is eventually consistent; the GET is not): again
                    self._api("DELETE", f"/sandbox/{handle.resource_id}", "delete the sandbox", idempotent=True,
                              ok=frozenset({404, 409}), api_url=api_url, deadline=deadline)
        except CleanupIncomplete:
            raise
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"daytona: sandbox {handle.resource_id} ({handle.session_id}) may still exist: {err.message}",
                provider=self.name, details={**left, "cause": err.code}, remedy=remedy,
            ) from err
        raise CleanupIncomplete(
            f"daytona: sandbox {handle.resource_id} ({handle.session_id}) is still there after "
            f"{self.destroy_timeout:g}s ({last})", provider=self.name, details=left, remedy=remedy,
        )

    def _delete_forbidden(self, handle: RemoteHandle, cause: CredentialsForbidden,
                          left: Mapping[str, Any]) -> CleanupIncomplete:
        """A DELETE refused with 403: the key lacks ``delete:sandboxes``. Says so, and which backstop ends the
        sandbox without it (its TTL, read back from the sandbox where the key may still read it)."""
        sandbox: dict[str, Any] | None = None
        with contextlib.suppress(DeskctlError):
            sandbox = self._get_sandbox(handle)
        source: Mapping[str, Any] = sandbox or handle.data
        ends_at = source.get("autoDestroyAt") or source.get("auto_destroy_at")
        ttl = source.get("ttlMinutes") if sandbox else source.get("ttl_minutes")
        if ends_at:
            backstop = f"its TTL destroys it at {ends_at}"
        elif isinstance(ttl, int | float) and ttl > 0:
            backstop = f"its TTL ({ttl:g} min from its creation) destroys it"
        else:
            backstop = "it has no TTL: it stops when idle (auto-stop) and is deleted on stop only if auto-delete is 0"
        return CleanupIncomplete(
            f"daytona: sandbox {handle.resource_id} ({handle.session_id}) was not deleted: the key lacks the "
            f"delete:sandboxes scope (HTTP 403: {cause.message}); {backstop}", provider=self.name,
            details={**left, "cause": cause.code, "missing_scope": "delete:sandboxes",
                     "auto_destroy_at": ends_at, "ttl_minutes": ttl},
            remedy=f"give the key delete:sandboxes (Daytona dashboard, Keys), then deskctl down {handle.session_id}; "
                   "or wait for the TTL",
        )

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
            items, cursor = _items(page)
            for item in items:
                if not isinstance(item, dict) or not item.get("id"):
                    continue
                labels = item.get("labels") if isinstance(item.get("labels"), dict) else {}
                assert isinstance(labels, dict)
                if any(labels.get(k) != v for k, v in wanted.items()):
                    continue  # an old server that ignores the filter
                if str(item.get("state")) in _GONE_STATES or str(item.get("desiredState")) == "destroyed":
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

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._get_sandbox(handle) is not None

    def keepalive(self, handle: RemoteHandle) -> None:
        response = self._api("POST", f"/sandbox/{handle.resource_id}/last-activity", "record activity",
                             idempotent=True, ok=frozenset({404}), api_url=handle.data.get("api_url"))
        if response.status_code == 404:
            # the sandbox, or an API without the route: the sandbox's own GET says which
            lost = self._toolbox_lost(handle, ProviderApiError(
                f"daytona: record activity answered HTTP 404: {response_message(response)}", provider=self.name,
                status=404))
            raise lost

    # -- the desktop ---------------------------------------------------------------------------------------
    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        info = self._json(self._toolbox(handle, "GET", "/computeruse/display/info", "read the display size",
                                        idempotent=True))
        displays = [d for d in (info.get("displays") or []) if isinstance(d, dict)] if isinstance(info, dict) else []
        if not displays:
            raise ProviderApiError(f"daytona: sandbox {handle.resource_id} reports no display", provider=self.name)
        primary = next((d for d in displays if d.get("x", 0) == 0 and d.get("y", 0) == 0), displays[0])
        try:
            return int(primary["width"]), int(primary["height"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"daytona: display/info is malformed: {redact(str(info))[:200]}",
                                   provider=self.name) from exc

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        body = self._json(self._toolbox(handle, "GET", "/computeruse/screenshot", "take a screenshot",
                                        idempotent=True, params={"showCursor": "false"}))
        raw = body.get("screenshot") if isinstance(body, dict) else None
        if not isinstance(raw, str):
            raise ProviderApiError("daytona: the screenshot answer has no image", provider=self.name)
        try:
            png = base64.b64decode(raw, validate=False)
        except ValueError as exc:
            raise ProviderApiError("daytona: the screenshot is not base64", provider=self.name) from exc
        width, height = png_size(png, self.name)
        return Screenshot(png=png, width=width, height=height)

    def act(self, handle: RemoteHandle, action: Action) -> None:
        for path, body in self.action_requests(action):
            self._toolbox(handle, "POST", path, f"send {path.rsplit('/', 2)[-2]} {path.rsplit('/', 1)[-1]}",
                          idempotent=False, json=body)

    @staticmethod
    def action_requests(action: Action) -> list[tuple[str, dict[str, Any]]]:
        """The toolbox requests (path, JSON body) that perform ``action``, in order."""
        match action:
            case Click(x=x, y=y, button=button, count=count):
                body: dict[str, Any] = {"x": x, "y": y, "button": button, "double": count == 2}
                if count > 2:
                    body["clicks"] = count
                return [("/computeruse/mouse/click", body)]
            case Move(x=x, y=y):
                return [("/computeruse/mouse/move", {"x": x, "y": y})]
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                return [("/computeruse/mouse/drag",
                         {"startX": x1, "startY": y1, "endX": x2, "endY": y2, "button": button})]
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                requests = []
                if dy:
                    requests.append(("/computeruse/mouse/scroll",
                                     {"x": x, "y": y, "direction": "down" if dy > 0 else "up", "amount": abs(dy)}))
                if dx:
                    requests.append(("/computeruse/mouse/scroll",
                                     {"x": x, "y": y, "direction": "right" if dx > 0 else "left",
                                      "amount": abs(dx)}))
                return requests
            case MouseDown(x=x, y=y, button=button):
                return [("/computeruse/mouse/down", {"x": x, "y": y, "button": button})]
            case MouseUp(x=x, y=y, button=button):
                return [("/computeruse/mouse/up", {"x": x, "y": y, "button": button})]
            case TypeText(text=text):
                return _type_requests(text)
            case KeyPress(keys=keys):
                modifiers = [toolbox_key_name(k) for k in keys[:-1]]
                body = {"key": toolbox_key_name(keys[-1])}
                if modifiers:
                    body["modifiers"] = modifiers
                return [("/computeruse/keyboard/key", body)]
            case KeyDown(key=key):
                return [("/computeruse/keyboard/down", {"key": toolbox_key_name(key)})]
            case KeyUp(key=key):
                return [("/computeruse/keyboard/up", {"key": toolbox_key_name(key)})]
        raise UsageError(f"daytona cannot perform {action!r}", code="usage.unsupported")

    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        body = self._json(self._toolbox(handle, "GET", "/computeruse/mouse/position", "read the pointer position",
                                        idempotent=True))
        try:
            return int(body["x"]), int(body["y"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"daytona: mouse/position is malformed: {redact(str(body))[:200]}",
                                   provider=self.name) from exc

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        if not command.strip():
            raise UsageError("empty command", code="usage.empty_command", provider=self.name)
        clean_env = check_exec_options(env, user, self.name)
        seconds = max(1, math.ceil(timeout))
        request: dict[str, Any] = {"timeout": seconds}
        if cwd:
            request["cwd"] = cwd
        marker: str | None = None
        if self._guest_dialect(handle) == "posix":
            # sudo starts the other user with a clean environment: env then travels inside the line
            line = posix_line(command, env=clean_env if user else None, user=user, background=background)
            if clean_env and not user:
                request["envs"] = clean_env
            if not background:
                marker = f"--deskctl-stderr-{uuid.uuid4().hex}--"
                line = _stderr_apart(line, marker)
        else:
            line = cmd_line(command, user=user, background=background)
            if clean_env:
                request["envs"] = clean_env
        request["command"] = line
        try:
            response = self._toolbox(handle, "POST", "/process/execute", "run a command", idempotent=False,
                                     json=request, timeout=seconds + 5.0)
        except ProviderApiError as err:
            if err.status == 408:
                return ExecResult(exit_code=124, stdout="", stderr="", merged=marker is None)
            raise
        body = self._json(response)
        if not isinstance(body, dict):
            raise ProviderApiError("daytona: process/execute answered an unexpected shape", provider=self.name)
        raw_code = body.get("exitCode", body.get("code"))
        exit_code = int(raw_code) if isinstance(raw_code, int | float) else -1
        text = str(body.get("result") or "")
        if exit_code == -1 and cwd and self._remote_kind(handle, cwd) != "dir":
            # the service could not start the shell in a cwd that is no folder: exit 2 with its message, as the
            # other providers' `cd DIR || exit 2` does (the command did not run)
            return ExecResult(exit_code=2, stdout="", stderr=text or f"cd: {cwd}: No such file or directory\n",
                              merged=False)
        if background:  # the line printed the new process's id (posix) or nothing (cmd.exe's start)
            pid = background_pid(ExecResult(exit_code, text)) if exit_code == 0 else None
            return ExecResult(exit_code=exit_code, stdout=text, stderr="", merged=False, pid=pid)
        if marker is not None:
            out, found, errors = text.partition(marker)
            if found:
                return ExecResult(exit_code=exit_code, stdout=out, stderr=errors, merged=False)
            if exit_code == -1:
                # the service could not start the shell (a cwd that does not exist): its message is the error
                return ExecResult(exit_code=exit_code, stdout="", stderr=text, merged=False)
        return ExecResult(exit_code=exit_code, stdout=text, stderr="", merged=True)

    # -- files (FileTransfer's primitives, over the toolbox's file API) ---------------------------------------
    def _mkdirs(self, handle: RemoteHandle, remote_dir: str) -> None:
        self._toolbox(handle, "POST", "/files/folder", f"make the folder {remote_dir}", idempotent=True,
                      params={"path": remote_dir, "mode": "755"})

    def _remote_kind(self, handle: RemoteHandle, remote: str) -> str:
        response = self._toolbox(handle, "GET", "/files/info", f"look at {remote}", idempotent=True,
                                 params={"path": remote}, ok=frozenset({404}))
        body = _json_or_empty(response)
        if response.status_code == 404:
            if body.get("code") == "FILE_NOT_FOUND":
                return "none"
            # the file, or the sandbox itself (archived: "sandbox container not found"): its own state says which
            lost = self._toolbox_lost(handle, ProviderApiError(
                f"daytona: files/info about {remote} answered HTTP 404", provider=self.name, status=404))
            if isinstance(lost, SessionLost):
                raise lost
            return "none"
        if not isinstance(body, dict) or not isinstance(body.get("isDir"), bool):
            raise ProviderApiError(f"daytona: files/info about {remote} is malformed", provider=self.name)
        return "dir" if body["isDir"] else "file"

    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        size = local.stat().st_size
        with local.open("rb") as stream:
            # httpx streams the open file in chunks (and rewinds it for a retry): never all in memory
            response = self._toolbox(
                handle, "POST", "/files/bulk-upload", f"upload {remote}", idempotent=True,
                data={"files[0].path": remote},
                files={"files[0].file": (local.name or "file", stream, "application/octet-stream")},
            )
        body = self._json(response) if response.content else {}
        files = body.get("files") if isinstance(body, dict) else None
        written = files[0].get("bytes") if isinstance(files, list) and files and isinstance(files[0], dict) else None
        if written is not None and written != size:
            raise ProviderApiError(f"daytona: {remote} arrived with {written} of {size} bytes", provider=self.name)
        mode = stat.S_IMODE(local.stat().st_mode)
        if mode != 0o644 and self._guest_dialect(handle) == "posix":
            # the daemon writes every upload 0644: a script must stay executable, a key private
            self._toolbox(handle, "POST", "/files/permissions", f"set the mode of {remote}", idempotent=True,
                          params={"path": remote, "mode": f"{mode:04o}"})

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        import httpx

        response = self._toolbox(handle, "POST", "/files/bulk-download", f"download {remote}", idempotent=True,
                                 json={"paths": [remote]}, stream=True)
        error = bytearray()
        parts: list[str] = []
        with contextlib.closing(response), local.open("wb") as out:
            def on_part(headers: Mapping[str, str]) -> Callable[[bytes], object]:
                name = _form_name(headers.get("content-disposition", ""))
                # the current daemon names a file's part "file" (older ones: the path) and an error's "error"
                parts.append("error" if name == "error" else "file")
                if name == "error":
                    return error.extend
                if parts.count("file") > 1:
                    raise ProviderApiError(f"daytona: bulk-download of {remote} answered several files",
                                           provider=self.name)
                return out.write

            reader = MultipartReader(_boundary(response.headers.get("content-type", ""), self.name), on_part)
            try:
                for chunk in response.iter_bytes(256 * 1024):
                    reader.feed(chunk)
            except httpx.HTTPError as exc:  # the connection broke mid-body
                raise error_from_transport(exc, self._context(f"download {remote}")) from exc
        if error:
            raise self._download_error(remote, bytes(error))
        if not reader.done or "file" not in parts:
            raise ProviderApiError(f"daytona: the download of {remote} ended early (no complete file part)",
                                   provider=self.name)

    def _download_error(self, remote: str, payload: bytes) -> DeskctlError:
        text = payload.decode("utf-8", "replace").strip()
        try:
            detail = json.loads(text)
        except ValueError:
            detail = {"message": text}
        if not isinstance(detail, dict):
            detail = {"message": text}
        code = str(detail.get("code") or detail.get("error_code") or "")
        status = detail.get("statusCode", detail.get("status_code"))
        message = str(detail.get("message") or text)
        if code == "FILE_NOT_FOUND" or status == 404 or "not found" in message.lower():
            return no_such_file(remote, "on the desktop", self.name)
        return ProviderApiError(f"daytona: cannot download {remote}: {redact(message)[:300]}", provider=self.name,
                                status=status if isinstance(status, int) else None)


def _json_or_empty(response: httpx.Response) -> dict[str, Any]:
    """A JSON object answer, else ``{}`` (an empty or non-JSON body, or another shape)."""
    try:
        body = response.json() if response.content else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _stderr_apart(line: str, marker: str) -> str:
    """``line`` with its stderr kept apart: in a temp file unlinked at once (a killed command leaves nothing),
    printed after ``marker`` once the line is done; exit status kept. One line: the service feeds it to the
    shell on stdin, and the command must not read the rest of it."""
    return (f'__dk_e=$(mktemp) || exit 125; exec 3>"$__dk_e" 4<"$__dk_e"; rm -f "$__dk_e"; '
            f"{line} 2>&3 3>&- 4<&- </dev/null; __dk_rc=$?; exec 3>&-; printf %s {marker}; cat <&4; "
            "exit $__dk_rc")


_FORM_NAME = re.compile(r'(?:^|;)\s*name="((?:[^"\\]|\\.)*)"', re.IGNORECASE)
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)


def _form_name(disposition: str) -> str:
    match = _FORM_NAME.search(disposition)
    return match.group(1) if match else ""


def _boundary(content_type: str, provider: str) -> bytes:
    match = _BOUNDARY.search(content_type)
    if not content_type.lower().startswith("multipart/") or match is None:
        raise ProviderApiError(f"daytona: bulk-download answered {content_type or 'no content type'}, not multipart",
                               provider=provider)
    return match.group(1).strip().encode("latin-1")


class MultipartReader:
    """A multipart body fed in chunks of any size: for each part ``on_part(headers)`` (lower-case names) says
    where its bytes go. Only the tail that could begin a boundary is held back, so a part of any size streams
    through. ``done`` once the closing boundary was read."""

    def __init__(self, boundary: bytes, on_part: Callable[[Mapping[str, str]], Callable[[bytes], object]]) -> None:
        self._delimiter = b"\r\n--" + boundary
        self._buffer = b"\r\n"  # the first boundary then looks like every other one
        self._state = "preamble"
        self._on_part = on_part
        self._sink: Callable[[bytes], object] | None = None
        self.done = False

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while not self.done:
            if self._state in ("preamble", "body"):
                at = self._buffer.find(self._delimiter)
                if at < 0:
                    keep = len(self._delimiter) - 1
                    if self._sink is not None and self._state == "body" and len(self._buffer) > keep:
                        self._sink(self._buffer[:-keep])
                        self._buffer = self._buffer[-keep:]
                    return
                if self._sink is not None and self._state == "body":
                    self._sink(self._buffer[:at])
                self._buffer = self._buffer[at + len(self._delimiter):]
                self._state = "boundary"
            elif self._state == "boundary":
                if len(self._buffer) < 2:
                    return
                if self._buffer.startswith(b"--"):
                    self.done, self._buffer = True, b""
                    return
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    return
                self._buffer = self._buffer[end + 2:]
                self._state = "headers"
            else:  # headers
                if self._buffer.startswith(b"\r\n"):
                    end, header_block = 0, b""
                else:
                    end = self._buffer.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    header_block = self._buffer[:end]
                    end += 2
                headers: dict[str, str] = {}
                for raw in header_block.split(b"\r\n"):
                    name, colon, value = raw.decode("utf-8", "replace").partition(":")
                    if colon:
                        headers[name.strip().lower()] = value.strip()
                self._buffer = self._buffer[end + 2:]
                self._sink = self._on_part(headers)
                self._state = "body"


def _type_requests(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``keyboard/type`` rejects control characters: newlines and tabs become key presses."""
    requests: list[tuple[str, dict[str, Any]]] = []
    chunk: list[str] = []
    specials = {"\n": "enter", "\r": "enter", "\t": "tab", "\b": "backspace", "\x1b": "escape"}

    def flush() -> None:
        if chunk:
            requests.append(("/computeruse/keyboard/type", {"text": "".join(chunk), "delay": 0}))
            chunk.clear()

    previous = ""
    for char in text:
        if char in specials:
            flush()
            if not (char == "\n" and previous == "\r"):
                requests.append(("/computeruse/keyboard/key", {"key": specials[char]}))
        elif ord(char) < 32 or ord(char) == 127:
            raise UsageError(f"cannot type the control character {char!r}; use key instead",
                             code="usage.bad_text", provider="daytona")
        else:
            chunk.append(char)
        previous = char
    flush()
    return requests


#: what deskctl needs of an API key: create (and labels, activity) and delete (cleanup)
_NEEDED_SCOPES = ("write:sandboxes", "delete:sandboxes")


def _items(page: Any) -> tuple[list[Any], str | None]:
    """A list answer as (items, next cursor): both the bare array (before v0.180) and ``{items, nextCursor}``."""
    if isinstance(page, list):
        return page, None
    if isinstance(page, dict):
        items = page.get("items")
        cursor = page.get("nextCursor")
        return (list(items) if isinstance(items, list) else []), (str(cursor) if cursor else None)
    return [], None


