"""The use.computer connection (like libcloud's connection classes): configuration, the key, the REST API's
requests with their errors mapped, and sandboxes read as handles. No lifecycle policy here (:mod:`.provider`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl._redact import register_secret
from deskctl.errors import (
    CapacityUnavailable,
    CredentialsForbidden,
    CredentialsMissing,
    DeskctlError,
    ProviderApiError,
    QuotaExceeded,
    SessionLost,
    UsageError,
)
from deskctl.platforms import Platform
from deskctl.providers._http import HttpProvider, RetryPolicy
from deskctl.providers.base import (
    LABEL_SESSION,
    RemoteHandle,
)
from deskctl.providers.use_computer._option_table import TABLE
from deskctl.providers.use_computer.handle_data import UseComputerHandleData

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

    from deskctl.ledger import SessionRecord
    from deskctl.providers.use_computer.options import Options

DEFAULT_BASE_URL: str = TABLE["base_url"][1]
#: the service removes an ephemeral sandbox after about this long without an API call (spec "pain points")
IDLE_REAP_SECONDS = 120
#: the sizes deskctl models per platform: UNVERIFIED against the live service (docs/use_computer.md). macOS is
#: lume's default VM display in points; Ubuntu the OSWorld image's 1920x1080; Windows the common KVM default.
FIXED_SIZES: dict[Platform, tuple[tuple[int, int], ...]] = {
    Platform.MACOS: ((1024, 768),),
    Platform.UBUNTU: ((1920, 1080),),
    Platform.WINDOWS: ((1024, 768),),
}
_TYPES = {Platform.MACOS: "macos", Platform.UBUNTU: "ubuntu", Platform.WINDOWS: "windows"}
_FAILED_STATES = frozenset({"error", "failed"})
#: the end of a reservation destroys its sandboxes and revokes its key (docs.use.computer concepts)
_RESERVATION_EXPIRED = "reservation_expired"
_GONE_STATES = frozenset({"deleted", "destroyed", "terminated", "reaped"})

#: deskctl canonical key names -> the service's (cua-computer-server style; UNVERIFIED beyond the spec's


class _FileBody:
    """A file's bytes for an upload, read in chunks; iterable again from the start, so a retried ``PUT`` sends
    the whole file again (a plain file object would send what is left of it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[bytes]:
        with self.path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk


class UseComputerApi(HttpProvider):
    """The wire side of :class:`~deskctl.providers.use_computer.UseComputerProvider`."""

    option_table = TABLE
    opts: Options

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._auth_headers: dict[str, str] | None = None
        self._base_url: str | None = None
        self.create_timeout = self.opts.create_timeout
        self.ephemeral = self.opts.ephemeral
        #: resource id -> (width, height, scale) from display/info, so a screenshot needs no extra call
        self._displays: dict[str, tuple[int, int, float]] = {}

    # -- configuration -------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``base_url`` option, else ``USE_COMPUTER_BASE_URL``, else the public service (resolved once)."""
        if self._base_url is None:
            url = self.opts.base_url
            self._base_url = str(url).rstrip("/")
        return self._base_url

    def _credentials_remedy(self) -> str:
        return ("export USE_COMPUTER_API_KEY=... (a key of the same environment as USE_COMPUTER_BASE_URL: prod "
                "keys fail on the dev API) or run: deskctl login use-computer --var USE_COMPUTER_API_KEY")

    def _auth(self) -> dict[str, str]:
        if self._auth_headers is not None:
            return self._auth_headers
        key = self._var("USE_COMPUTER_API_KEY")
        if not key:
            raise CredentialsMissing("use.computer requires USE_COMPUTER_API_KEY (environment or keyring)",
                                     provider=self.name, remedy=self._credentials_remedy())
        register_secret(key)
        self._auth_headers = {"Authorization": f"Bearer {key}"}
        return self._auth_headers

    # -- HTTP ----------------------------------------------------------------------------------------------
    def _classify(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        code = str(body.get("error") or "").lower()
        where = f"use-computer: {message}"
        if status == 402 or code == "billing_required":
            return QuotaExceeded(where, code="quota.billing_required", provider=self.name,
                                 remedy="add billing or credit to the use.computer account")
        if status == 409 and code == "macos_reservation_required":
            return QuotaExceeded(where, code="quota.reservation_required", provider=self.name,
                                 remedy="reserve a Mac (POST /v1/reservations, or the dashboard) and set "
                                        "-o reservation_id=... if you have several")
        if status == 403 and code == "reservation_expired":
            return CredentialsForbidden(
                f"use-computer: the reservation has expired ({message}); its key is revoked with it",
                provider=self.name, remedy="renew the reservation and use its key",
                details={"error": _RESERVATION_EXPIRED})
        if status == 429 and code == "sandbox_limit_reached":
            # a concurrency limit, not a request rate: waiting seconds does not help, ending a sandbox does
            return CapacityUnavailable(
                f"use-computer: the account's limit of concurrent sandboxes is reached ({message})",
                provider=self.name, details={"error": code},
                remedy="end a sandbox you do not need (deskctl ls, deskctl reap --provider use-computer) or ask "
                       "use.computer for a higher limit")
        if status == 503 and code == "unavailable":
            return CapacityUnavailable(f"use-computer: no sandbox available ({message}): the warm pool is "
                                       "exhausted", provider=self.name, remedy="retry later")
        if status == 501:
            return UsageError(where, code="usage.unsupported", provider=self.name)
        return None

    def _api(self, method: str, path: str, action: str, *, idempotent: bool, ok: frozenset[int] = frozenset(),
             base_url: str | None = None, deadline: float | None = None, policy: RetryPolicy | None = None,
             **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        headers.update(self._auth())
        url = f"{(base_url or self.base_url).rstrip('/')}{path}"
        return self._send(method, url, action, idempotent=idempotent, ok=ok, deadline=deadline, policy=policy,
                          headers=headers, **kwargs)

    def _sandbox(self, handle: RemoteHandle, method: str, sub: str, action: str, *, idempotent: bool,
                 deadline: float | None = None, **kwargs: Any) -> httpx.Response:
        """A data-plane call on one sandbox. A 404 there is decided by the sandbox's own ``GET``: gone (reaped)
        is :class:`SessionLost`; still there is a route the service lacks (:class:`ProviderApiError`)."""
        try:
            return self._api(method, f"/v1/sandboxes/{handle.resource_id}{sub}", action, idempotent=idempotent,
                             base_url=self._made_on(handle), deadline=deadline, **kwargs)
        except CredentialsForbidden as err:
            if not _reservation_expired(err):
                raise
            raise SessionLost(
                f"use-computer: sandbox {handle.resource_id} ended with its reservation ({err.message})",
                provider=self.name, details={"status": 403, "error": _RESERVATION_EXPIRED},
                remedy="renew the reservation (a new one comes with a new key) and open a new session",
            ) from err
        except ProviderApiError as err:
            if err.status != 404:
                raise
            # the sandbox reaped, or a route this service does not have: the sandbox's own GET says which
            try:
                alive = self._get(handle) is not None
            except DeskctlError:
                raise err from None  # cannot tell: nothing is decided on a guess
            if alive:
                raise ProviderApiError(
                    f"use-computer: sandbox {handle.resource_id} still answers GET, but {action} answered 404 "
                    f"({err.message}): the service has no such route for it", provider=self.name, status=404,
                    details=err.details,
                ) from err
            raise SessionLost(
                f"use-computer: sandbox {handle.resource_id} is gone ({err.message}); the service reaps "
                "an ephemeral sandbox after about 2 minutes without a call", provider=self.name,
                details={"status": 404},
                remedy="keep the session's process alive (it sends keepalives) or use -o ephemeral=false",
            ) from err


    @staticmethod
    def _made_on(handle: RemoteHandle) -> str | None:
        """The API the handle's sandbox was made on (None: this process's ``base_url``)."""
        return UseComputerHandleData.of(handle).base_url or None

    def _handle_from(self, sandbox: Mapping[str, Any], session_id: str, platform: Platform,
                     labels: Mapping[str, str]) -> RemoteHandle:
        said = {key: value for key in ("host", "version", "vm_ip") if isinstance(value := sandbox.get(key), str)}
        data = UseComputerHandleData(base_url=self.base_url, platform=platform.value, ephemeral=self.ephemeral,
                                     **said).to_data()
        all_labels = {str(k): str(v) for k, v in labels.items()}
        all_labels[LABEL_SESSION] = session_id
        return RemoteHandle(provider=self.name, session_id=session_id, resource_id=str(sandbox["sandbox_id"]),
                            labels=all_labels, data=data)

    # -- readiness -----------------------------------------------------------------------------------------
    def _get(self, handle: RemoteHandle, *, deadline: float | None = None,
             policy: RetryPolicy | None = None) -> dict[str, Any] | None:
        """The sandbox, or None when it is gone (404, or a state that says so)."""
        try:
            response = self._api("GET", f"/v1/sandboxes/{handle.resource_id}", "read the sandbox", idempotent=True,
                                 ok=frozenset({404}), base_url=self._made_on(handle), deadline=deadline,
                                 policy=policy)
        except CredentialsForbidden as err:
            if _reservation_expired(err):
                return None  # the reservation's end destroyed it
            raise
        if response.status_code == 404:
            return None
        sandbox = self._json(response)
        if not isinstance(sandbox, dict):
            raise ProviderApiError("use-computer: GET sandbox answered an unexpected shape", provider=self.name)
        if str(sandbox.get("status") or sandbox.get("state") or "").lower() in _GONE_STATES:
            return None
        return sandbox

    def _ledger_records(self) -> list[SessionRecord]:
        """This ledger's use-computer sessions that did not end (the API cannot list sandboxes)."""
        from deskctl.ledger import open_ledger

        with open_ledger() as book:
            records = book.sessions(active=True)
        return [r for r in records if r.provider == self.name and r.status not in ("ended", "failed")]

    def _ledger_sessions(self) -> list[RemoteHandle]:
        """Handles of this ledger's use-computer sessions that did not end."""
        return [RemoteHandle.from_dict(r.handle) for r in self._ledger_records() if r.handle]


def _reservation_expired(err: DeskctlError) -> bool:
    return err.details.get("error") == _RESERVATION_EXPIRED


def _size_of(raw: Any) -> tuple[int, int] | None:
    if isinstance(raw, dict):
        try:
            return int(raw["width"]), int(raw["height"])
        except (KeyError, TypeError, ValueError):
            return None
    if isinstance(raw, str):
        parts = raw.lower().split("x")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            return int(parts[0]), int(parts[1])
    return None


