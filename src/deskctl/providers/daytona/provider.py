"""Daytona's lifecycle policy: create (never retried blindly; what a failed create made is found and destroyed),
readiness, destroy (confirmed, or :class:`~deskctl.errors.CleanupIncomplete`) and keepalive."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._record import replace
from deskctl.errors import (
    CleanupIncomplete,
    CredentialsForbidden,
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
from deskctl.providers._http import (
    answer_lost,
    response_message,
)
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    RemoteHandle,
    lifetime_seconds,
)
from deskctl.providers.daytona.handle_data import DaytonaHandleData

if TYPE_CHECKING:
    from deskctl.spec import DesktopSpec

from deskctl.providers.daytona.checks import DaytonaChecks
from deskctl.providers.daytona.client import (
    FAILED_STATES,
    GONE_STATES,
    LABEL_MANAGED,
    STOPPED_STATES,
    WINDOWS_SIZE,
)
from deskctl.providers.daytona.toolbox import DaytonaToolbox


def _ceil_minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60.0))


class DaytonaProvider(DaytonaChecks, DaytonaToolbox):
    """Daytona sandboxes (``windows`` and ``ubuntu``) reached through the REST and toolbox APIs."""

    name = "daytona"
    options_model = "deskctl.providers.daytona.options:Options"
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
        snapshots=True,
    )
    credentials = CredentialSet(
        variables=("DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID", "DAYTONA_API_URL",
                   "DAYTONA_TARGET"),
        secret=frozenset({"DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN"}),
        required_any=(("DAYTONA_API_KEY",), ("DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID")),
        source="Daytona SDK daytona/_sync/daytona.py (github.com/daytonaio/daytona; www.daytona.io/docs/en/api-keys)",
    )


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
        auto_stop_option = self.opts.auto_stop_minutes
        if auto_stop_option is not None:
            auto_stop = int(auto_stop_option)
        elif detached and lifetime is not None:
            # nobody sends keepalives to a detached desktop: idle time up to its lifetime is expected use
            auto_stop = _ceil_minutes(lifetime)
        else:
            # an attached session sends keepalives: auto-stop fires only once its owner is gone
            auto_stop = min(15, _ceil_minutes(lifetime)) if lifetime is not None else 15
        auto_stop = max(1, auto_stop)  # 0 would mean "never stop": a cost leak
        ttl_option = self.opts.ttl_minutes
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
        # a restore names its snapshot in the spec (deskctl.providers.daytona.snapshots); else the option's
        snapshot = str(spec.provider_options.get("snapshot") or "") or self._snapshot(spec.platform)
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
        if state in FAILED_STATES:
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
                if isinstance(sandbox, dict) and sandbox.get("id") and str(sandbox.get("state")) not in GONE_STATES:
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
                    toolbox_url = str(sandbox["toolboxProxyUrl"]).rstrip("/")
                    replace(DaytonaHandleData.of(handle), toolbox_url=toolbox_url).store(handle)
                break
            if state in FAILED_STATES:
                raise ProviderApiError(
                    f"daytona: sandbox {handle.resource_id} is in state {state}: "
                    f"{sandbox.get('errorReason') or 'no reason given'}", provider=self.name,
                    details={"state": state},
                )
            if state in STOPPED_STATES:
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
                        windows = DaytonaHandleData.of(handle).platform == Platform.WINDOWS.value
                        if not windows or err.status in (502, 503, 504):
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
        api_url = DaytonaHandleData.of(handle).api_url or None
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
        if sandbox:
            ends_at, ttl = sandbox.get("autoDestroyAt"), sandbox.get("ttlMinutes")
        else:
            data = DaytonaHandleData.of(handle)
            ends_at, ttl = data.auto_destroy_at, data.ttl_minutes
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

    def keepalive(self, handle: RemoteHandle) -> None:
        response = self._api("POST", f"/sandbox/{handle.resource_id}/last-activity", "record activity",
                             idempotent=True, ok=frozenset({404}), api_url=DaytonaHandleData.of(handle).api_url or None)
        if response.status_code == 404:
            # the sandbox, or an API without the route: the sandbox's own GET says which
            lost = self._toolbox_lost(handle, ProviderApiError(
                f"daytona: record activity answered HTTP 404: {response_message(response)}", provider=self.name,
                status=404))
            raise lost

