"""use.computer's lifecycle policy: create (never retried blindly), readiness, destroy (confirmed, or
:class:`~deskctl.errors.CleanupIncomplete`), the ledger as the list of sandboxes, and keepalive."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl.errors import (
    CapacityUnavailable,
    CleanupIncomplete,
    ConfigInvalid,
    CredentialsForbidden,
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
from deskctl.platforms import Platform
from deskctl.providers.base import (
    LABEL_DETACHED,
    Capabilities,
    CredentialSet,
    RemoteHandle,
)
from deskctl.providers.use_computer.checks import UseComputerChecks
from deskctl.providers.use_computer.client import (
    _FAILED_STATES,
    _TYPES,
    FIXED_SIZES,
    IDLE_REAP_SECONDS,
    _reservation_expired,
)
from deskctl.providers.use_computer.desktop import UseComputerDesktop

if TYPE_CHECKING:
    from deskctl.ledger import SessionRecord
    from deskctl.spec import DesktopSpec

def _flag(raw: Any, default: bool) -> bool:
    if raw is None:
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigInvalid(f"use-computer option value {raw!r} is not true or false", provider="use-computer")


class UseComputerProvider(UseComputerChecks, UseComputerDesktop):
    """use.computer sandboxes (``macos``, and the Beta ``ubuntu`` and ``windows``) through the REST API."""

    name = "use-computer"
    aliases = ("use.computer",)
    options_model = "deskctl.providers.use_computer.options:Options"
    capabilities = Capabilities(
        platforms=frozenset({Platform.MACOS, Platform.UBUNTU, Platform.WINDOWS}),
        settable_geometry=False,
        fixed_sizes=FIXED_SIZES,
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=False,
        server_ttl=True,
        isolation="vm",
        start_url=False,
        local=False,
        hidpi_scale=1.0,
        cursor_position=True,
        clipboard=True,
        windows=True,
        billing="per_hour",
    )
    credentials = CredentialSet(
        variables=("USE_COMPUTER_API_KEY", "USE_COMPUTER_BASE_URL"),
        secret=frozenset({"USE_COMPUTER_API_KEY"}),
        required_any=(("USE_COMPUTER_API_KEY",),),
        source="PyPI use-computer use_computer/core/client.py; Harbor harbor/environments/use_computer.py",
    )


    # -- create --------------------------------------------------------------------------------------------
    def create_body(self, spec: DesktopSpec) -> dict[str, Any]:
        """The ``POST /v1/sandboxes`` body (the API takes no labels or metadata)."""
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        kind = _TYPES[spec.platform]
        body: dict[str, Any] = {"type": kind, "ephemeral": self.ephemeral}
        host = self.opts.host
        if host:
            body["host"] = host
        if spec.platform is Platform.MACOS:
            reservation = self.opts.reservation_id
            if reservation:
                body["reservation_id"] = reservation
            return body
        version, snapshot = self.opts.version, self.opts.snapshot
        if version and snapshot:
            raise ConfigInvalid("use-computer: version and snapshot are mutually exclusive", provider=self.name)
        if snapshot:
            body["snapshot"] = snapshot
        elif version:
            body["version"] = version
        resources = _resources(self.opts.resources)
        if resources:
            body["resources"] = resources
        return body

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        if str(labels.get(LABEL_DETACHED, "")) == "1" and self.ephemeral:
            raise UsageError(
                "use.computer reaps an ephemeral sandbox after about 2 minutes without a call, and a detached "
                "session (deskctl up) has no process to send keepalives; nothing was created",
                code="usage.detached_unsupported", provider=self.name,
                remedy="deskctl up -o ephemeral=false (the sandbox then lives until deskctl down, its expiry via "
                       "deskctl reap, or the reservation's end), or hold the desktop from one process with "
                       "deskctl.open_desktop",
            )
        body = self.create_body(spec)
        try:
            response = self._api("POST", "/v1/sandboxes", "create the sandbox", idempotent=False, json=body,
                                 timeout=self.create_timeout)
            sandbox = self._json(response)
            if not isinstance(sandbox, dict) or not sandbox.get("sandbox_id"):
                raise ProviderApiError("use-computer: create answered without a sandbox_id", provider=self.name,
                                       status=response.status_code)
        except DeskctlError as err:
            if _create_may_have_made_something(err):
                raise self._unfindable(session_id, err, body) from err
            raise
        return self._handle_from(sandbox, session_id, spec.platform, labels)

    def _unfindable(self, session_id: str, cause: DeskctlError, body: Mapping[str, Any]) -> CleanupIncomplete:
        """A create whose answer was lost may have made a sandbox that the API cannot find again (no list, no
        labels): :class:`CleanupIncomplete`, so the session is recorded ``leaked`` (seen by ``deskctl ls`` and by
        preflight) until ``deskctl reap`` closes it; the message and remedy say how it ends or is found."""
        sent_at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        what = f"a {body.get('type')} sandbox" + (f" on host {body['host']}" if body.get("host") else "") + \
            f" created about {sent_at}"
        if self.ephemeral:
            backstop = (f"it is ephemeral and nobody keeps it alive, so the service reaps it within about "
                        f"{IDLE_REAP_SECONDS // 60} minutes")
            remedy = ("nothing to delete: wait about 2 minutes for the service's idle reaper, then run deskctl reap "
                      f"--confirmed-gone {session_id} to close the ledger row")
        else:
            backstop = ("it is NOT ephemeral: it runs (and holds the reservation's capacity) until it is deleted or "
                        "the reservation ends")
            remedy = (f"find {what} in the use.computer dashboard (the API cannot list sandboxes) and delete it, "
                      f"then run deskctl reap --confirmed-gone {session_id} to close the ledger row")
        return CleanupIncomplete(
            f"use-computer: the answer to the create of {session_id} was lost ({cause.message}); {what} may exist "
            f"that deskctl cannot find (the API has no list and no labels); {backstop}",
            provider=self.name,
            details={"left": [f"an unknown sandbox of {session_id}"], "cause": cause.code, "answer_lost": True,
                     "ephemeral": self.ephemeral, "type": body.get("type"), "host": body.get("host"),
                     "sent_at": sent_at, "backstop_seconds": IDLE_REAP_SECONDS if self.ephemeral else None},
            remedy=remedy,
        )


    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        """The sandbox exists (create blocks until it is allocated; a ``status``/``state`` field, if the
        service sends one, must not be a failure), the display answers ``display/info``, and a screenshot scaled
        to it has its size."""
        last = "not polled"
        for _ in self._polls(deadline):
            try:
                sandbox = self._get(handle, deadline=deadline)
                if sandbox is None:
                    raise SessionLost(f"use-computer: sandbox {handle.resource_id} disappeared while starting",
                                      provider=self.name)
                state = str(sandbox.get("status") or sandbox.get("state") or "").lower()
                if state in _FAILED_STATES:
                    raise ProviderApiError(f"use-computer: sandbox {handle.resource_id} is in state {state}",
                                           provider=self.name, details={"state": state})
                last = f"state {state or 'allocated'}"
                width, height, scale = self._display(handle, deadline=deadline, refresh=True)
            except ProviderApiError as err:
                if err.status not in (502, 503, 504):
                    raise
                last = f"display not answering yet (HTTP {err.status}: {err.message})"
                continue
            last = f"display {width}x{height} at scale {scale:g}"
            break
        else:
            raise ReadinessTimeout(
                f"use-computer: sandbox {handle.resource_id} was not ready in time (last: {last})",
                provider=self.name, details={"last": last}, remedy="raise ready_timeout, or retry later")
        shot = self.screenshot(handle)
        if (shot.width, shot.height) != (width, height):
            from deskctl.errors import GeometryMismatch

            raise GeometryMismatch(
                f"use-computer: the screenshot is {shot.width}x{shot.height} but display/info says "
                f"{width}x{height} at scale {scale:g}", provider=self.name,
                details={"screenshot": f"{shot.width}x{shot.height}", "display": f"{width}x{height}"})

    # -- destroy and listing -------------------------------------------------------------------------------
    def destroy(self, handle: RemoteHandle) -> None:
        deadline = time.monotonic() + self.destroy_timeout
        remedy = (f"deskctl down {handle.session_id} (or delete sandbox {handle.resource_id} in the use.computer "
                  "dashboard)")
        left = {"left": [handle.resource_id], "session": handle.session_id}
        last = ""
        try:
            try:
                self._api("DELETE", f"/v1/sandboxes/{handle.resource_id}", "delete the sandbox", idempotent=True,
                          ok=frozenset({404}), base_url=self._made_on(handle), deadline=deadline)
            except CredentialsForbidden as err:
                if not _reservation_expired(err):
                    raise
                # the reservation's end destroyed its sandboxes; the GET below confirms what it can
            for _ in self._polls(deadline):
                sandbox = self._get(handle, deadline=deadline)
                if sandbox is None:
                    self._displays.pop(handle.resource_id, None)
                    return
                last = f"still answered GET ({sandbox.get('status') or sandbox.get('state') or 'no state'})"
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"use-computer: sandbox {handle.resource_id} ({handle.session_id}) may still exist: {err.message}",
                provider=self.name, details={**left, "cause": err.code}, remedy=remedy,
            ) from err
        raise CleanupIncomplete(
            f"use-computer: sandbox {handle.resource_id} ({handle.session_id}) is still there after "
            f"{self.destroy_timeout:g}s ({last})", provider=self.name, details=left, remedy=remedy)

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        """The API has no list endpoint and takes no labels: the ledger is the label store. Its live sessions
        of this provider (optionally matching ``selector`` on their labels) that still answer ``GET``."""
        wanted = dict(selector or {})
        handles = [h for h in self._ledger_sessions() if all(h.labels.get(k) == v for k, v in wanted.items())]
        if not handles:
            return []
        return [h for h in handles if self._get(h) is not None]

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._get(handle) is not None

    def unlisted_remedy(self, record: SessionRecord) -> str:
        """The API cannot list sandboxes: a person finds it in the dashboard by its type and creation time."""
        sent = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.created_at)) if record.created_at
                else "at an unknown time")
        ephemeral = (record.spec.get("provider_options") or {}).get("ephemeral", self.ephemeral)
        backstop = (" (an ephemeral one nobody keeps alive is reaped by the service within about 2 minutes)"
                    if _flag(ephemeral, True) else "")
        return (f"find the {record.platform} sandbox created about {sent} in the use.computer dashboard (the API "
                f"cannot list sandboxes) and delete it{backstop}, then run deskctl reap --confirmed-gone "
                f"{record.session_id} to close the ledger row")

    def keepalive(self, handle: RemoteHandle) -> None:
        """Reset the service's idle timer (``POST .../keepalive``); a 404 means it was already reaped."""
        self._sandbox(handle, "POST", "/keepalive", "send a keepalive", idempotent=True)


def _create_may_have_made_something(err: DeskctlError) -> bool:
    if isinstance(err, RateLimited | PreflightError | CapacityUnavailable | UsageError):
        return False  # refused before anything was made (429, 401, 402, 403, 409, 503 unavailable, 501)
    if isinstance(err, ProviderUnreachable):
        return bool(err.details.get("sent", True))
    if isinstance(err, ProviderApiError) and err.status is not None and 400 <= err.status < 500:
        return False  # a 4xx is a refusal of the request
    return isinstance(err, InfrastructureError)


def _resources(raw: Any) -> dict[str, int] | None:
    """``resources`` as a mapping or ``"cpus=4,memory_mb=4096,disk_gb=40"`` (from ``-o``)."""
    if raw in (None, ""):
        return None
    items: dict[str, Any]
    if isinstance(raw, Mapping):
        items = dict(raw)
    else:
        items = {}
        for part in str(raw).split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise ConfigInvalid(f"use-computer resources {raw!r}: expected cpus=N,memory_mb=N,disk_gb=N",
                                    provider="use-computer")
            items[key.strip()] = value.strip()
    out: dict[str, int] = {}
    for key, value in items.items():
        if key not in ("cpus", "memory_mb", "disk_gb"):
            raise ConfigInvalid(f"use-computer resources: unknown key {key!r} (cpus, memory_mb, disk_gb)",
                                provider="use-computer")
        try:
            out[key] = int(value)
        except (TypeError, ValueError):
            raise ConfigInvalid(f"use-computer resources: {key}={value!r} is not an integer",
                                provider="use-computer") from None
    return out


