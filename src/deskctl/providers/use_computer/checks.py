"""use.computer's preflight: read-only checks of the key, the platforms offered, capacity and the display."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deskctl.errors import (
    CredentialsMissing,
    DeskctlError,
    InfrastructureError,
    PreflightError,
    ProviderUnreachable,
)
from deskctl.providers.use_computer.client import (
    _TYPES,
    UseComputerApi,
    _size_of,
)

if TYPE_CHECKING:
    from deskctl.checks import CheckRecorder, CheckResult
    from deskctl.spec import DesktopSpec


class UseComputerChecks(UseComputerApi):
    """The preflight of :class:`~deskctl.providers.use_computer.UseComputerProvider`."""

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
        reservation = self.opts.reservation_id
        params = {"reservation_id": reservation} if reservation else None
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
        version = self.opts.version or self.opts.snapshot
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

