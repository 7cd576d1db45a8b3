"""use.computer sandboxes as desktops (macOS first; Ubuntu and Windows are Beta on the service), over its REST API
with httpx and tenacity, without the vendor SDK (0.0.46 dropped Ubuntu and Windows; its ``close()`` ignores the
DELETE status).

The contract was read from the ``use-computer`` SDK and Harbor's ``environments/use_computer.py``
(docs/use_computer.md). What the caller may rely on:

- **Auth**: ``USE_COMPUTER_API_KEY`` as Bearer (environment, then keyring), registered for redaction and never
  stored in a handle. ``USE_COMPUTER_BASE_URL`` (default ``https://api.use.computer``) or the ``base_url``
  option. Keys are environment-scoped: a prod key is refused (401) by the dev API and the reverse.
- **Preflight** (read-only): ``GET /v1/platforms`` is the one authenticated read; it also says whether the
  account offers the platform, the macOS capacity (``max``/``used``) and, where listed, the image's display
  size. Leftovers are the ledger's live use-computer sessions (the API has no list and no labels).
- **Create**: ``POST /v1/sandboxes`` ``{"type", "ephemeral": true}`` plus the ``host``, ``version``,
  ``snapshot``, ``resources`` and ``reservation_id`` options. The API takes no labels or metadata, so the
  deskctl labels live in the handle and the ledger only. A create is never retried blindly (only a 429 or a
  connection that was never made). It blocks until the sandbox is allocated; an answer that never came (a
  timeout, a dropped connection, a 5xx, a 2xx without ``sandbox_id``) may have made a sandbox that cannot be
  found (no list API): that is raised as :class:`~deskctl.errors.CleanupIncomplete` (exit 5; the session is
  recorded ``leaked``) saying so, with the remedy of its case: the service's idle reaper removes an ephemeral
  sandbox nobody keeps alive within about two minutes; a persistent one is found in the dashboard.
- **Lifetime**: the service reaps an ephemeral sandbox after about 2 minutes without an API call. The session's
  keepalive thread calls :meth:`keepalive` (``POST .../keepalive``) every 30 s. A detached session
  (``deskctl up``) has no process to send keepalives, so it is refused with ``usage.detached_unsupported``
  unless ``-o ephemeral=false``: then the sandbox persists until ``deskctl down``, its expiry through
  ``deskctl reap``, or the end of the reservation; the API offers no longer idle timeout.
- **Geometry**: the size is the service's own (``settable_geometry=False``); the modelled sizes are in
  :data:`FIXED_SIZES` (UNVERIFIED) and preflight refuses others (``--geometry native`` accepts what the service
  gives). ``display/info`` width and height are the action space (points); a Retina screenshot at ``scale``
  times that is scaled down to it, so screenshot pixels and click coordinates are one space.
- **Actions**: ``mouse/click|move|drag|scroll``, ``keyboard/type|press``. The API has no mouse down/up and no
  key down/up: those are ``usage.unsupported``. A triple click is a double click then a click.
- **Exec**: ``POST .../exec`` returns ``stdout`` and ``stderr`` apart (``merged=False``) and the exit code
  under one of ``return_code``/``exit_code``/``returncode``. Ubuntu runs in ``bash``; Windows in
  ``powershell`` (named in the request: the lines deskctl builds are PowerShell) unless the ``shell`` option
  says ``cmd``; macOS over SSH (no ``shell`` sent). ``cwd``, ``env``, ``user`` and ``background`` become shell
  text (:mod:`deskctl.providers._guest`): ``sh`` with ``sudo -n -u`` on Ubuntu and macOS (macOS has no
  ``setsid``: a background command is only ``nohup``-ed), ``Start-Process`` on Windows (no other user there).
- **Files**: ``PUT .../files?path=`` with the file's bytes streamed from disk, ``GET .../files?path=`` streamed to
  disk; parent folders, directories (one tar) and "is it a file" go through ``exec``
  (:class:`~deskctl.providers._files.FileTransfer`). A 404 on ``/files`` is a missing file while the sandbox
  still answers ``GET`` (``usage.no_such_file``), else the sandbox is gone (``provider.session_lost``).
- **Pointer, clipboard, windows**: ``GET .../mouse/position`` (points) is :meth:`cursor_position`, so a click or
  scroll without coordinates lands where the pointer is. Clipboard, ``launch``, ``open_url`` and window titles
  are commands on the guest (:class:`~deskctl.providers._guest.GuestActions`: xclip/xwininfo on Ubuntu,
  pbcopy/osascript on macOS, Set-Clipboard/Get-Process in PowerShell).
- **Destroy**: ``DELETE`` whose status is checked (404 ``sandbox_not_found`` is success), retried on 5xx (it
  is idempotent), then ``GET`` until 404. 403 ``reservation_expired`` is gone too: the end of a reservation
  destroys its sandboxes (and revokes its key), so the session ends in the ledger instead of "leaked".
  Unconfirmed is :class:`~deskctl.errors.CleanupIncomplete`.
- **Errors**: 401 credentials.invalid, 403 credentials.forbidden (``reservation_expired`` says so; on a
  sandbox it is provider.session_lost), 402 ``billing_required`` quota.billing_required, 409
  ``macos_reservation_required`` quota.reservation_required, 503 ``unavailable`` and 429
  ``sandbox_limit_reached`` (a concurrency limit, never retried) capacity.unavailable, 501 usage.unsupported,
  404 on a sandbox provider.session_lost when the sandbox's own ``GET`` says it is gone (else a route the
  service lacks: provider.api_error; the session goes on), any other 429 provider.rate_limited (``Retry-After``
  honoured), other 5xx provider.api_error (retried only when idempotent).
- **Geometry listed by the service**: when ``GET /v1/platforms`` lists the display (per image, or at the top of
  the ``macos`` entry), preflight checks the pinned size against that listing (``geometry.listed`` /
  ``geometry.unsupported``, before any create) and the engine's modelled :data:`FIXED_SIZES` give way to it, so
  the size one check suggests is the size the other accepts.

Provider options: ``base_url``, ``ephemeral`` (default true), ``host``, ``version``, ``snapshot``,
``reservation_id``, ``resources`` (``"cpus=4,memory_mb=4096,disk_gb=40"`` or a mapping), ``shell``,
``create_timeout`` (180), ``request_timeout`` (60), ``destroy_timeout`` (60), ``poll_interval``,
``poll_max_interval``, and the retry options of :class:`deskctl.providers._http.RetryPolicy`.
"""

from __future__ import annotations

import io
import math
import os
import time
from collections.abc import Mapping
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
    ConfigInvalid,
    CredentialsForbidden,
    CredentialsMissing,
    DeskctlError,
    InfrastructureError,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    QuotaExceeded,
    RateLimited,
    ReadinessTimeout,
    SessionLost,
    UsageError,
)
from deskctl.providers._files import FileTransfer, no_such_file
from deskctl.providers._guest import (
    GuestActions,
    background_pid,
    check_exec_options,
    cmd_line,
    posix_line,
    powershell_line,
)
from deskctl.providers._http import HTTP_OPTIONS, HttpProvider, RetryPolicy
from deskctl.providers._png import png_size
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_SESSION,
    Capabilities,
    CredentialSet,
    ExecResult,
    RemoteHandle,
    Screenshot,
)
from deskctl.spec import DesktopSpec, Platform

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

    from deskctl.checks import CheckRecorder, CheckResult
    from deskctl.ledger import SessionRecord

__all__ = ["DEFAULT_BASE_URL", "FIXED_SIZES", "IDLE_REAP_SECONDS", "UseComputerProvider", "key_name"]

DEFAULT_BASE_URL = "https://api.use.computer"
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
#: ``cmd+s`` example). ``super`` is ``cmd`` on macOS, ``win`` on Windows, ``super`` on Ubuntu.
_KEY_NAMES: dict[str, str] = {
    "ctrl": "ctrl", "alt": "alt", "shift": "shift",
    "enter": "enter", "escape": "escape", "tab": "tab", "backspace": "backspace", "delete": "delete",
    "space": "space", "home": "home", "end": "end", "pageup": "pageup", "pagedown": "pagedown",
    "insert": "insert", "up": "up", "down": "down", "left": "left", "right": "right",
    "capslock": "capslock", "menu": "menu", "printscreen": "printscreen", "pause": "pause",
    "numlock": "numlock", "scrolllock": "scrolllock",
    **{f"f{i}": f"f{i}" for i in range(1, 25)},
}
_SUPER = {Platform.MACOS: "cmd", Platform.WINDOWS: "win", Platform.UBUNTU: "super"}


def key_name(canonical: str, platform: Platform = Platform.MACOS) -> str:
    """The service's name for a canonical deskctl key; a single character passes through unchanged."""
    if len(canonical) == 1:
        return canonical
    if canonical == "super":
        return _SUPER.get(platform, "cmd")
    name = _KEY_NAMES.get(canonical)
    if name is None:
        raise UsageError(f"use.computer has no key {canonical!r}", code="usage.unknown_key",
                         provider="use-computer")
    return name



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


class _FileBody:
    """A file's bytes for an upload, read in chunks; iterable again from the start, so a retried ``PUT`` sends
    the whole file again (a plain file object would send what is left of it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self) -> Iterator[bytes]:
        with self.path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                yield chunk


class UseComputerProvider(FileTransfer, GuestActions, HttpProvider):
    """use.computer sandboxes (``macos``, and the Beta ``ubuntu`` and ``windows``) through the REST API."""

    name = "use-computer"
    aliases = ("use.computer",)
    option_names = HTTP_OPTIONS | {"base_url", "ephemeral", "host", "version", "snapshot", "reservation_id",
                                   "resources", "shell", "create_timeout"}
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

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._auth_headers: dict[str, str] | None = None
        self._base_url: str | None = None
        self.create_timeout = self._number("create_timeout", 180.0)
        self.request_timeout = self._number("request_timeout", 60.0)
        self.destroy_timeout = self._number("destroy_timeout", 60.0)
        self.poll_interval = self._number("poll_interval", 0.2)
        self.poll_max_interval = self._number("poll_max_interval", 2.0)
        self.ephemeral = _flag(self.options.get("ephemeral"), True)
        #: resource id -> (width, height, scale) from display/info, so a screenshot needs no extra call
        self._displays: dict[str, tuple[int, int, float]] = {}

    # -- configuration -------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``base_url`` option, else ``USE_COMPUTER_BASE_URL``, else the public service (resolved once)."""
        if self._base_url is None:
            url = self.options.get("base_url") or self._var("USE_COMPUTER_BASE_URL") or DEFAULT_BASE_URL
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
                             base_url=handle.data.get("base_url"), deadline=deadline, **kwargs)
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

    # -- preflight -----------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        """Read-only: one authenticated ``GET /v1/platforms`` (key valid and of this environment, platform
        offered to the account, macOS capacity, the image's display size where listed), and leftovers from the
        ledger. Platform, fixed sizes and task OS are checked by the engine from :attr:`capabilities` and data."""
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)
        try:
            self._auth()
        except CredentialsMissing as err:
            checks.add_error(err)
            return checks.results
        quick = self.retry.with_attempts_at_most(2)
        params = {"reservation_id": str(self.options["reservation_id"])} if self.options.get("reservation_id") \
            else None
        try:
            platforms = self._json(self._api("GET", "/v1/platforms", "read the platforms", idempotent=True,
                                             policy=quick, params=params))
        except DeskctlError as err:
            code = err.code if isinstance(err, PreflightError | InfrastructureError) else "provider.unreachable"
            remedy = err.remedy or ("check the network and USE_COMPUTER_BASE_URL"
                                    if isinstance(err, ProviderUnreachable) else None)
            checks.add("fail", code, f"{self.base_url}: {err.message}", remedy)
            return checks.results
        checks.add("pass", "use-computer.credentials", f"{self.base_url} accepts the USE_COMPUTER_API_KEY")

        checks.start()
        wanted = _TYPES.get(spec.platform)
        offered = platforms.get(wanted) if isinstance(platforms, dict) and wanted else None
        if not isinstance(offered, dict):
            names = sorted(k for k, v in platforms.items() if isinstance(v, dict)) if isinstance(platforms, dict) \
                else []
            checks.add("fail", "compat.platform_unavailable",
                       f"the account is not offered {spec.platform.value} sandboxes "
                       f"(offered: {', '.join(names) or 'none'}; Ubuntu and Windows are Beta, admin-only)",
                       "ask use.computer for access, or --platform macos")
            return checks.results
        checks.add("pass", "use-computer.platform", f"{spec.platform.value} sandboxes are offered to the account")
        self._capacity_check(offered, checks)
        self._display_check(spec, offered, checks)

        checks.start()
        try:
            owned = self._ledger_records()
        except DeskctlError as err:
            checks.add("warn", "use-computer.leftovers", f"could not read the ledger: {err.message}")
        else:
            if owned:
                # with or without a handle: a create whose answer was lost is `leaked` with none
                ids = ", ".join(f"{r.session_id} ({r.status})" for r in owned[:5]) + (" ..." if len(owned) > 5 else "")
                checks.add("warn", "use-computer.leftovers",
                           f"{len(owned)} use-computer session(s) of this ledger are not ended ({ids}); they may still "
                           "hold sandboxes of the reservation", "deskctl reap --provider use-computer")
            else:
                checks.add("pass", "use-computer.leftovers", "no use-computer sessions are left over in the ledger")
        return checks.results

    def _capacity_check(self, offered: Mapping[str, Any], checks: CheckRecorder) -> None:
        capacity = offered.get("capacity")
        if not isinstance(capacity, dict):
            checks.add("skip", "use-computer.capacity", "the service does not show capacity for this platform")
            return
        most, used = capacity.get("max"), capacity.get("used")
        if not isinstance(most, int | float) or not isinstance(used, int | float):
            checks.add("skip", "use-computer.capacity", "the capacity answer has no max/used numbers")
            return
        if used >= most:
            checks.add("fail", "capacity.unavailable",
                       f"no free sandbox: {used:g} of {most:g} in use", "wait for one to end, reap leftovers "
                       "(deskctl reap --provider use-computer) or reserve more Macs")
            return
        checks.add("pass", "use-computer.capacity", f"{most - used:g} of {most:g} sandboxes free")

    def _display_check(self, spec: DesktopSpec, offered: Mapping[str, Any], checks: CheckRecorder) -> None:
        """The display as listed (UNVERIFIED shape: ``"WxH"`` or ``{"width", "height"}``): at the top level of
        the platform's entry (macOS, which has no images: its VMs have one display) and per image (Ubuntu,
        Windows). A listed size decides: a pinned size that is not listed is refused before any create."""
        if spec.geometry is None:
            return
        images = [i for i in (offered.get("images") or []) if isinstance(i, dict)]
        version = self._option("version") or self._option("snapshot")
        if version:
            images = [i for i in images if i.get("version") == version] or images
        sizes: set[tuple[int, int]] = set()
        for listing in (offered, *images):
            size = _size_of(listing.get("display"))
            if size is not None:
                sizes.add(size)
        if not sizes:
            return
        wanted = (spec.geometry.width, spec.geometry.height)
        if wanted in sizes:
            checks.add("pass", "geometry.listed", f"use.computer lists the {spec.platform.value} display as "
                       f"{spec.geometry}")
            return
        listed = ", ".join(f"{w}x{h}" for w, h in sorted(sizes))
        checks.add("fail", "geometry.unsupported",
                   f"use.computer lists the {spec.platform.value} display as {listed} (offered), not {spec.geometry}",
                   f"--geometry {listed.split(', ')[0]} (or native)")

    def _option(self, key: str) -> str | None:
        env = {"host": "USE_COMPUTER_HOST", "version": "USE_COMPUTER_VERSION", "snapshot": "USE_COMPUTER_SNAPSHOT",
               "reservation_id": "USE_COMPUTER_RESERVATION_ID"}[key]
        value = self.options.get(key)
        if value is None:
            value = os.environ.get(env)
        return str(value) if value else None

    # -- create --------------------------------------------------------------------------------------------
    def create_body(self, spec: DesktopSpec) -> dict[str, Any]:
        """The ``POST /v1/sandboxes`` body (the API takes no labels or metadata)."""
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        kind = _TYPES[spec.platform]
        body: dict[str, Any] = {"type": kind, "ephemeral": self.ephemeral}
        host = self._option("host")
        if host:
            body["host"] = host
        if spec.platform is Platform.MACOS:
            reservation = self._option("reservation_id")
            if reservation:
                body["reservation_id"] = reservation
            return body
        version, snapshot = self._option("version"), self._option("snapshot")
        if version and snapshot:
            raise ConfigInvalid("use-computer: version and snapshot are mutually exclusive", provider=self.name)
        if snapshot:
            body["snapshot"] = snapshot
        elif version:
            body["version"] = version
        resources = _resources(self.options.get("resources"))
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

    def _handle_from(self, sandbox: Mapping[str, Any], session_id: str, platform: Platform,
                     labels: Mapping[str, str]) -> RemoteHandle:
        data: dict[str, Any] = {
            "base_url": self.base_url,
            "platform": platform.value,
            "ephemeral": self.ephemeral,
        }
        for key in ("host", "version", "vm_ip"):
            value = sandbox.get(key)
            if isinstance(value, str) and value:
                data[key] = value
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
                                 ok=frozenset({404}), base_url=handle.data.get("base_url"), deadline=deadline,
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
                          ok=frozenset({404}), base_url=handle.data.get("base_url"), deadline=deadline)
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

    def _ledger_records(self) -> list[SessionRecord]:
        """This ledger's use-computer sessions that did not end (the API cannot list sandboxes)."""
        from deskctl.ledger import open_ledger

        with open_ledger() as book:
            records = book.sessions(active=True)
        return [r for r in records if r.provider == self.name and r.status not in ("ended", "failed")]

    def _ledger_sessions(self) -> list[RemoteHandle]:
        """Handles of this ledger's use-computer sessions that did not end."""
        return [RemoteHandle.from_dict(r.handle) for r in self._ledger_records() if r.handle]

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

    # -- the desktop ---------------------------------------------------------------------------------------
    def _display(self, handle: RemoteHandle, *, deadline: float | None = None,
                 refresh: bool = False) -> tuple[int, int, float]:
        cached = self._displays.get(handle.resource_id)
        if cached is not None and not refresh:
            return cached
        info = self._json(self._sandbox(handle, "GET", "/display/info", "read the display size", idempotent=True,
                                        deadline=deadline))
        try:
            width, height = int(info["width"]), int(info["height"])
            scale = float(info.get("scale") or 1.0)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"use-computer: display/info is malformed: {redact(str(info))[:200]}",
                                   provider=self.name) from exc
        if width <= 0 or height <= 0 or scale <= 0:
            raise ProviderApiError(f"use-computer: display/info reports {width}x{height} at scale {scale:g}",
                                   provider=self.name)
        self._displays[handle.resource_id] = (width, height, scale)
        return width, height, scale

    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        width, height, _ = self._display(handle, refresh=True)
        return width, height

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        response = self._sandbox(handle, "GET", "/screenshot", "take a screenshot", idempotent=True,
                                 params={"show_cursor": "false"}, headers={"Accept": "image/png"})
        png = response.content
        width, height = png_size(png, self.name)
        points_w, points_h, _ = self._display(handle)
        if (width, height) != (points_w, points_h):
            if abs(width / points_w - height / points_h) > 0.02:
                raise ProviderApiError(
                    f"use-computer: the screenshot is {width}x{height}, not a scale of the {points_w}x{points_h} "
                    "display", provider=self.name)
            png = _scale_png(png, (points_w, points_h))
            width, height = points_w, points_h
        return Screenshot(png=png, width=width, height=height)

    def act(self, handle: RemoteHandle, action: Action) -> None:
        platform = Platform(handle.data.get("platform") or Platform.MACOS.value)
        for path, body in self.action_requests(action, platform):
            self._sandbox(handle, "POST", path, f"send {path.strip('/').replace('/', ' ')}", idempotent=False,
                          json=body)

    @staticmethod
    def action_requests(action: Action, platform: Platform = Platform.MACOS) -> list[tuple[str, dict[str, Any]]]:
        """The data-plane requests (path under the sandbox, JSON body) that perform ``action``, in order."""
        match action:
            case Click(x=x, y=y, button=button, count=count):
                if count <= 2:
                    return [("/mouse/click", {"x": x, "y": y, "button": button, "double": count == 2})]
                return [("/mouse/click", {"x": x, "y": y, "button": button, "double": True}),
                        *[("/mouse/click", {"x": x, "y": y, "button": button, "double": False})] * (count - 2)]
            case Move(x=x, y=y):
                return [("/mouse/move", {"x": x, "y": y})]
            case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
                return [("/mouse/drag", {"startX": x1, "startY": y1, "endX": x2, "endY": y2, "button": button})]
            case Scroll(x=x, y=y, dx=dx, dy=dy):
                requests: list[tuple[str, dict[str, Any]]] = []
                if dy:
                    requests.append(("/mouse/scroll", {"x": x, "y": y, "direction": "down" if dy > 0 else "up",
                                                       "amount": abs(dy)}))
                if dx:
                    requests.append(("/mouse/scroll", {"x": x, "y": y, "direction": "right" if dx > 0 else "left",
                                                       "amount": abs(dx)}))
                return requests
            case TypeText(text=text):
                return _type_requests(text, platform)
            case KeyPress(keys=keys):
                body: dict[str, Any] = {"key": key_name(keys[-1], platform)}
                if len(keys) > 1:
                    body["modifiers"] = [key_name(k, platform) for k in keys[:-1]]
                return [("/keyboard/press", body)]
            case MouseDown() | MouseUp() | KeyDown() | KeyUp():
                raise UsageError(
                    f"use.computer has no endpoint to hold a button or key ({type(action).__name__}): it offers "
                    "click, drag, press and hotkey", code="usage.unsupported", provider="use-computer",
                    remedy="use drag instead of mouse-down/up, and a chord (key ctrl+s) instead of key-down/up")
        raise UsageError(f"use.computer cannot perform {action!r}", code="usage.unsupported",
                         provider="use-computer")

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        if not command.strip():
            raise UsageError("empty command", code="usage.empty_command", provider=self.name)
        clean_env = check_exec_options(env, user, self.name)
        seconds = max(1, math.ceil(timeout))
        dialect = self._guest_dialect(handle)
        if cwd or clean_env or user or background:
            if dialect == "posix":
                # macOS has no setsid(1); nohup alone keeps the command past the SSH session
                setsid = handle.data.get("platform") != Platform.MACOS.value
                command = posix_line(command, cwd=cwd, env=clean_env, user=user, background=background,
                                     setsid=setsid)
            else:
                build = cmd_line if dialect == "cmd" else powershell_line
                try:
                    command = build(command, cwd=cwd, env=clean_env, user=user, background=background)
                except UsageError as err:
                    raise UsageError(f"use-computer: {err.message}", code=err.code, provider=self.name) from err
        if handle.data.get("platform") == Platform.UBUNTU.value:
            # the Ubuntu desktop is DISPLAY=:0 (spec); an exec environment without it could start no GUI app
            command = f'export DISPLAY="${{DISPLAY:-:0}}"; {command}'
        body: dict[str, Any] = {"command": command, "timeout": seconds}
        shell = self._shell(handle)
        if shell:
            body["shell"] = shell
        response = self._sandbox(handle, "POST", "/exec", "run a command", idempotent=False, json=body,
                                 timeout=seconds + 15.0)
        answer = self._json(response)
        if not isinstance(answer, dict):
            raise ProviderApiError("use-computer: exec answered an unexpected shape", provider=self.name)
        code = next((answer[k] for k in ("return_code", "exit_code", "returncode") if k in answer), None)
        result = ExecResult(exit_code=int(code) if isinstance(code, int | float) else -1,
                            stdout=str(answer.get("stdout") or ""), stderr=str(answer.get("stderr") or ""),
                            merged=False)
        if background and result.exit_code == 0:
            return ExecResult(result.exit_code, result.stdout, result.stderr, pid=background_pid(result))
        return result

    def _shell(self, handle: RemoteHandle) -> str | None:
        """The ``shell`` the exec request names: the option, else ``bash`` on Ubuntu and ``powershell`` on
        Windows; none on macOS (SSH runs the user's shell)."""
        option = self.options.get("shell")
        if option:
            return str(option)
        return {Platform.UBUNTU.value: "bash", Platform.WINDOWS.value: "powershell"}.get(
            str(handle.data.get("platform") or ""))

    def _guest_dialect(self, handle: RemoteHandle) -> str:
        if handle.data.get("platform") != Platform.WINDOWS.value:
            return "posix"
        return "cmd" if self._shell(handle) == "cmd" else "powershell"

    # -- the pointer and files -----------------------------------------------------------------------------
    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        """``GET .../mouse/position``: the pointer in points, the space clicks use (UNVERIFIED on Retina)."""
        answer = self._json(self._sandbox(handle, "GET", "/mouse/position", "read the pointer position",
                                          idempotent=True))
        try:
            x, y = answer["x"], answer["y"]
            if isinstance(x, bool) or isinstance(y, bool):
                raise TypeError("a boolean is not a coordinate")
            return int(x), int(y)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"use-computer: mouse/position is malformed: {redact(str(answer))[:200]}",
                                   provider=self.name) from exc

    def _file_missing(self, handle: RemoteHandle, what: str) -> DeskctlError:
        """A 404 on ``/files``: the file when the sandbox still answers, else the sandbox itself."""
        if self._get(handle) is None:
            return SessionLost(f"use-computer: sandbox {handle.resource_id} is gone", provider=self.name,
                               details={"status": 404},
                               remedy="keep the session's process alive (it sends keepalives) or use "
                                      "-o ephemeral=false")
        return no_such_file(what, "on the desktop", self.name)

    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        response = self._sandbox(
            handle, "PUT", "/files", f"upload {remote}", idempotent=True, ok=frozenset({404}),
            params={"path": remote}, content=_FileBody(local),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(local.stat().st_size)})
        if response.status_code == 404:
            raise self._file_missing(handle, f"the folder of {remote}")

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        import httpx

        response = self._sandbox(handle, "GET", "/files", f"download {remote}", idempotent=True,
                                 ok=frozenset({404}), stream=True, params={"path": remote},
                                 headers={"Accept": "application/octet-stream"})
        try:
            if response.status_code == 404:
                raise self._file_missing(handle, remote)
            with local.open("wb") as fh:
                for chunk in response.iter_bytes(1 << 20):
                    fh.write(chunk)
        except httpx.HTTPError as exc:
            raise ProviderUnreachable(f"use-computer: download of {remote} broke off: {type(exc).__name__}",
                                      provider=self.name) from exc
        finally:
            response.close()


def _type_requests(text: str, platform: Platform) -> list[tuple[str, dict[str, Any]]]:
    """Text as ``keyboard/type``; newlines, tabs and other controls as key presses (their typing is
    UNVERIFIED on the service)."""
    requests: list[tuple[str, dict[str, Any]]] = []
    chunk: list[str] = []
    specials = {"\n": "enter", "\r": "enter", "\t": "tab", "\b": "backspace", "\x1b": "escape"}

    def flush() -> None:
        if chunk:
            requests.append(("/keyboard/type", {"text": "".join(chunk)}))
            chunk.clear()

    previous = ""
    for char in text:
        if char in specials:
            flush()
            if not (char == "\n" and previous == "\r"):
                requests.append(("/keyboard/press", {"key": key_name(specials[char], platform)}))
        elif ord(char) < 32 or ord(char) == 127:
            raise UsageError(f"cannot type the control character {char!r}; use key instead",
                             code="usage.bad_text", provider="use-computer")
        else:
            chunk.append(char)
        previous = char
    flush()
    return requests


def _reservation_expired(err: DeskctlError) -> bool:
    return err.details.get("error") == _RESERVATION_EXPIRED


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


def _scale_png(png: bytes, size: tuple[int, int]) -> bytes:
    """A HiDPI capture scaled down to the point grid the actions use."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        scaled = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    scaled.save(out, format="PNG", compress_level=1)
    return out.getvalue()
