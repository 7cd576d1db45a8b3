"""The preflight engine: runs every check concurrently, each with its own timeout, and turns results into a
report (table or JSON, exit code) or, for a session, into the most specific :mod:`deskctl.errors` error.

Two entry points:

* :func:`run_checks` / :func:`raise_for_failures`: one provider, used by the session before create.
* :func:`preflight`: many providers for one request (``deskctl preflight``, ``deskctl.preflight(spec)``).

Checks run in daemon threads: a check that hangs past its timeout is reported as failed and abandoned,
so a wedged daemon or host never holds up the answer (or the interpreter's exit).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from deskctl._record import Record, field, replace
from deskctl.checks import CheckResult, failure_from
from deskctl.errors import (
    BudgetExceeded,
    CapacityUnavailable,
    CompatError,
    ConfigInvalid,
    CredentialsForbidden,
    CredentialsInvalid,
    CredentialsMissing,
    DeskctlError,
    GeometryUnsupported,
    PreflightError,
    ProviderApiError,
    ProviderUnreachable,
    QuotaExceeded,
    RateLimited,
    UsageError,
)
from deskctl.spec import DesktopSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.providers.base import Provider

__all__ = [
    "Check",
    "PreflightReport",
    "PreflightRequest",
    "error_for",
    "preflight",
    "raise_for_failures",
    "run_checks",
    "run_concurrently",
]

#: order in which results are listed (and the first failure chosen): request, compat, geometry, credentials,
#: the provider's own checks, budget
_ORDER = ("compat.", "geometry.", "credentials.")


class Check(Record, frozen=True):
    """A unit of work for the engine: a callable returning results, its timeout, and who it belongs to.

    ``code`` names the check when it times out or raises (then it becomes one failed result with that code).
    """

    code: str
    run: Callable[[], list[CheckResult]]
    provider: str | None = None
    timeout: float = 10.0


class _Outcome:
    """What a check's thread leaves behind: its results and time, or its exception. (Not a
    ``concurrent.futures.Future``: that module imports :mod:`logging`, a cost of every ``deskctl up``.)"""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: tuple[list[CheckResult], float] | None = None
        self.error: Exception | None = None

    def result(self, timeout: float) -> tuple[list[CheckResult], float]:
        """The outcome within ``timeout`` seconds (else :class:`TimeoutError`), or the check's exception."""
        if not self.done.wait(timeout):
            raise TimeoutError
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


def _run_in_thread(check: Check) -> _Outcome:
    outcome = _Outcome()

    def target() -> None:
        started = time.monotonic()
        try:
            results = check.run()
        except BaseException as exc:  # reported as a failed check, never lost (nor re-raised as SystemExit)
            outcome.error = exc if isinstance(exc, Exception) else RuntimeError(f"{type(exc).__name__}")
        else:
            outcome.value = (results, round((time.monotonic() - started) * 1000, 1))
        outcome.done.set()

    threading.Thread(target=target, name=f"preflight:{check.code}", daemon=True).start()
    return outcome


def run_concurrently(checks: Sequence[Check]) -> list[list[CheckResult]]:
    """Run every check at once; returns one result list per check, in the order given.

    A check that exceeds its timeout gives one ``fail`` result with code ``<check.code>.timeout``
    (mapped to :class:`~deskctl.errors.ProviderUnreachable`); one that raises gives a ``fail`` result too.
    Results without ``provider`` or ``elapsed_ms`` get them filled in.
    """
    started = time.monotonic()
    futures = [_run_in_thread(check) for check in checks]
    out: list[list[CheckResult]] = []
    for check, future in zip(checks, futures, strict=True):
        remaining = max(0.0, started + check.timeout - time.monotonic())
        try:
            results, elapsed = future.result(timeout=remaining)
        except TimeoutError:
            out.append([CheckResult(
                "fail", f"{check.code}.timeout",
                f"{check.code} did not answer within {check.timeout:g}s",
                remedy="check that the daemon or host answers, or raise --timeout",
                provider=check.provider, elapsed_ms=round(check.timeout * 1000, 1),
            )])
            continue
        except Exception as exc:  # the check's own exception; Ctrl-C while waiting still propagates
            out.append([failure_from(exc, code=check.code, provider=check.provider,
                                     elapsed_ms=(time.monotonic() - started) * 1000)])
            continue
        out.append([
            replace(
                r,
                provider=r.provider if r.provider is not None else check.provider,
                elapsed_ms=r.elapsed_ms if r.elapsed_ms else elapsed,
            )
            for r in results
        ])
    return out


def _rank(result: CheckResult) -> int:
    for index, prefix in enumerate(_ORDER):
        if result.code.startswith(prefix):
            return index
    if result.code.startswith("budget."):
        return len(_ORDER) + 1
    return len(_ORDER)


def _sorted(results: Iterable[CheckResult]) -> list[CheckResult]:
    return sorted(results, key=_rank)  # stable: keeps each group's own order


# -- one provider (the session's engine) ----------------------------------------------------------------------

#: the code of the engine's own presence-only credentials check
_ENGINE_CREDENTIALS = "credentials"


def _credential_check(provider_name: str) -> list[CheckResult]:
    from deskctl.credentials import credential_set, keyring_status, presence_check

    if not credential_set(provider_name).required_any:
        return []  # nothing is required: optional variables are the provider's own business
    ok, message, remedy = presence_check(provider_name)
    results = [CheckResult("pass" if ok else "fail", "credentials.present" if ok else "credentials.missing",
                           message, remedy=remedy, provider=provider_name)]
    if not ok:
        status = keyring_status()
        if not status.usable:
            results.append(CheckResult("warn", "credentials.keyring", status.message, remedy=status.remedy,
                                       provider=provider_name))
    return results


def _provider_preflight(spec: DesktopSpec, provider: Provider) -> list[CheckResult]:
    """The provider's own checks, unless the answer is already known here: a platform the provider does not
    serve (the compat facts say so: its API would only be asked about a pool or a class that cannot exist), or
    missing required credentials (the engine's presence check already says what is missing, and a request
    without credentials only tells the network and the vendor that someone tried). Then its API is not
    dialled at all."""
    from deskctl.checks.compat import platform_check
    from deskctl.credentials import credential_set, presence_check

    name = provider.name
    if platform_check(provider, spec.platform).status == "fail":
        return [CheckResult("skip", f"{name}.api", f"{name}'s API was not contacted: it does not serve "
                            f"{spec.platform.value} desktops", provider=name)]
    if credential_set(name).required_any:
        ok, _, _ = presence_check(name)
        if not ok:
            return [CheckResult("skip", f"{name}.api", f"{name}'s API was not contacted: its credentials are missing",
                                provider=name)]
    return list(provider.preflight(spec))


def _budget_check(spec: DesktopSpec, provider_name: str) -> list[CheckResult]:
    from deskctl.metering import cost_for, rate_for

    rate = rate_for(spec)
    cap = spec.max_usd
    # the session ends at the earlier of its max minutes and its ttl (its watchdog enforces both)
    limits = [x for x in (spec.max_minutes * 60 if spec.max_minutes else None, spec.ttl_seconds) if x]
    minutes = min(limits) / 60 if limits else None
    if rate is None:
        message = f"cost: unknown (no rate for {provider_name} {spec.platform.value} {spec.geometry_label()})"
        if cap is not None:
            return [CheckResult("warn", "budget.unknown_rate", message + f"; cannot prove it stays under ${cap:g}",
                                remedy="add the rate to your price catalog override", provider=provider_name)]
        return [CheckResult("pass", "budget.projection", message, provider=provider_name)]
    per_hour = float(rate.usd_per_hour)
    source = f"{rate.source} ({rate.date})"
    if minutes is None:
        if per_hour == 0:
            return [CheckResult("pass", "budget.projection", f"cost: $0/h [{source}]", provider=provider_name)]
        message = f"rate ${per_hour:g}/h [{source}]; no --max-minutes or ttl, so the projected cost is open-ended"
        if cap is not None:
            affordable = cap / per_hour * 60
            return [CheckResult("warn", "budget.open_ended", message + f" (${cap:g} buys {affordable:.0f} min)",
                                remedy=f"--max-minutes {max(1, int(affordable))}", provider=provider_name)]
        return [CheckResult("pass", "budget.projection", message, provider=provider_name)]
    projected = cost_for(rate, minutes * 60)
    if projected is None:
        return [CheckResult("warn" if cap is not None else "pass", "budget.projection",
                            f"cost: unknown for {minutes:g} min [{source}]", provider=provider_name)]
    message = f"projected ${projected:.4f} for {minutes:g} min at ${per_hour:g}/h [{source}]"
    if cap is not None and projected > cap:
        affordable = cap / per_hour * 60 if per_hour else minutes
        return [CheckResult(
            "fail", "budget.exceeded", message + f", over the ${cap:g} cap",
            remedy=f"--max-minutes {max(1, int(affordable))} or --max-usd {projected:.2f}", provider=provider_name,
        )]
    suffix = f", within ${cap:g}" if cap is not None else ""
    return [CheckResult("pass", "budget.projection", message + suffix, provider=provider_name)]


def _provider_check_list(
    spec: DesktopSpec, provider: Provider, timeout: float, *, agent: str | None, task_os: str | None,
    include_request: bool,
) -> list[Check]:
    # The modules the checks import are imported here, on the calling thread, before the checks' threads start:
    # imported by several threads at once under pytest (deskctl's pytest plugin has pytest rewrite deskctl's
    # modules' asserts, parsing each with ast), CPython 3.11 can fail an import with "SystemError: AST
    # constructor recursion depth mismatch" (the AST converter's depth counter is shared by all threads).
    from deskctl import credentials, metering, paths  # noqa: F401
    from deskctl.checks import compat

    name = provider.name
    checks: list[Check] = []
    if include_request:
        checks.append(Check("compat.request", lambda: compat.request_checks(spec.platform, agent, task_os),
                            None, timeout))
    checks += [
        Check("compat.provider", lambda: compat.provider_checks(spec, provider), name, timeout),
        Check(_ENGINE_CREDENTIALS, lambda: _credential_check(name), name, timeout),
        Check(f"{name}.preflight", lambda: _provider_preflight(spec, provider), name, timeout),
        Check("budget", lambda: _budget_check(spec, name), name, timeout),
    ]
    return checks


def _merge(pairs: list[tuple[Check, list[CheckResult]]]) -> list[CheckResult]:
    """Flatten one provider's check groups, most decisive first. When the provider's own preflight reports
    on credentials (a real authenticated read), the engine's presence-only check is dropped; when it reports on
    the geometry from the service's own listing, the engine's check against modelled sizes is dropped."""
    own_credentials = any(
        r.code.startswith("credentials.")
        for check, group in pairs if check.code != _ENGINE_CREDENTIALS
        for r in group
    )
    # a provider that read the sizes the service lists (geometry.*) knows better than the modelled ones in its
    # capabilities: the engine's verdict on the pinned size gives way, else each would suggest what the other
    # refuses
    listed = any(
        r.code.startswith("geometry.")
        for check, group in pairs if check.code == f"{check.provider}.preflight"
        for r in group
    )
    flat = [
        r for check, group in pairs for r in group
        if not (own_credentials and check.code == _ENGINE_CREDENTIALS and r.code != "credentials.keyring")
        and not (listed and check.code == "compat.provider" and r.code in ("geometry.pinned", "geometry.unsupported"))
    ]
    return _sorted(flat)


#: seconds each check may take when nobody says otherwise
DEFAULT_TIMEOUT = 10.0


def default_timeout() -> float:
    """Seconds each preflight check may take: ``$DESKCTL_PREFLIGHT_TIMEOUT`` (the default of ``deskctl preflight
    --timeout``, and of the preflight that ``up`` and ``open_desktop`` run first: a slow network or a loaded
    machine needs more than 10 s alike), else 10. A bad value is ``usage.bad_limit``, naming the variable."""
    import os

    raw = os.environ.get("DESKCTL_PREFLIGHT_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    from deskctl.limits import check_number

    return float(check_number("preflight_timeout", raw, what="DESKCTL_PREFLIGHT_TIMEOUT"))


def run_checks(
    spec: DesktopSpec, provider: Provider, timeout: float = DEFAULT_TIMEOUT, *, agent: str | None = None,
    task_os: str | None = None,
) -> list[CheckResult]:
    """Every check for one provider: request compat (agent x task OS), platform x provider, geometry,
    credentials presence, the provider's own :meth:`~deskctl.providers.base.Provider.preflight`, and the
    budget projection; concurrently, each with ``timeout`` seconds. Never creates anything."""
    from deskctl.checks import compat

    agent = compat.normalize_agent(agent) if agent else None  # a bad name is a usage error, raised here
    task_os = compat.normalize_task_os(task_os) if task_os else None
    checks = _provider_check_list(spec, provider, timeout, agent=agent, task_os=task_os, include_request=True)
    return _merge(list(zip(checks, run_concurrently(checks), strict=True)))


def error_for(result: CheckResult, provider_name: str | None = None) -> DeskctlError:
    """The most specific deskctl error for a failed check, carrying its code, message and remedy."""
    code, provider = result.code, result.provider or provider_name
    kwargs: dict[str, Any] = {"provider": provider, "remedy": result.remedy}
    message = result.message
    if code == "credentials.missing":
        return CredentialsMissing(message, **kwargs)
    if code == "credentials.forbidden":
        return CredentialsForbidden(message, **kwargs)
    if code.startswith("credentials."):
        return CredentialsInvalid(message, code=code, **kwargs)
    if code.startswith("usage."):
        return UsageError(message, code=code, **kwargs)
    if code == "config.invalid":
        return ConfigInvalid(message, **kwargs)
    if code.startswith("quota."):
        return QuotaExceeded(message, code=code, **kwargs)
    if code.startswith("compat."):
        return CompatError(message, code=code, **kwargs)
    if code.startswith("geometry."):
        return GeometryUnsupported(message, code=code, **kwargs)
    if code.startswith("budget."):
        return BudgetExceeded(message, code=code, **kwargs)
    if code.startswith("capacity."):
        return CapacityUnavailable(message, code=code, **kwargs)
    if code == "provider.rate_limited":
        return RateLimited(message, code=code, **kwargs)
    if code == "provider.api_error":
        return ProviderApiError(message, code=code, **kwargs)
    last = code.rsplit(".", 1)[-1]
    if code == "provider.unreachable" or last in ("unreachable", "timeout", "daemon", "host", "connect"):
        # the stable code of the error is the architecture's; the check that found it stays in the details
        return ProviderUnreachable(message, details={"check": code}, **kwargs)
    return PreflightError(message, code=code, **kwargs)


def raise_for_failures(results: list[CheckResult], provider_name: str) -> None:
    """Raise :func:`error_for` the first failing result (results are ordered most decisive first);
    ``details["failures"]`` lists every failure. Returns when nothing failed."""
    failures = [r for r in results if r.status == "fail"]
    if not failures:
        return
    error = error_for(failures[0], provider_name)
    error.details["failures"] = [r.to_dict() for r in failures]
    raise error


# -- many providers (the command and deskctl.preflight) -------------------------------------------------------


class PreflightRequest(Record, frozen=True):
    """What ``deskctl preflight`` asks: the desktop (a :class:`~deskctl.spec.DesktopSpec`: platform, size, limits,
    ttl, window), and what only preflight needs: the providers to check, the Harbor agent and task OS, the
    per-check timeout and each provider's options.

    ``providers=None`` considers every installed provider that serves ``spec.platform``; each provider is checked
    with ``spec`` for that provider (``spec.provider`` and ``spec.provider_options`` are replaced by its name and
    ``provider_options[name]``)."""

    spec: DesktopSpec = field(default_factory=DesktopSpec)
    providers: tuple[str, ...] | None = None
    agent: str | None = None
    task_os: str | None = None
    timeout: float = 10.0
    provider_options: dict[str, dict[str, Any]] = field(default_factory=dict)


#: the ``[source (date)]`` a check message ends with
_CITATION = re.compile(r"\s*\[[^\[\]]*\]$")

_STATUS_LABEL = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


class PreflightReport(Record):
    """Results grouped by provider (``None``: checks of the request itself), the providers that are ready,
    and the verdict. ``exit_code`` is 0 when the request can run, 3 when it cannot."""

    request: PreflightRequest
    results: list[CheckResult]
    considered: list[str]
    ready: list[str]
    required_all: bool = False
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        if self.required_all:
            return bool(self.considered) and set(self.ready) == set(self.considered)
        return bool(self.ready)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 3

    def for_provider(self, name: str | None) -> list[CheckResult]:
        return [r for r in self.results if r.provider == name]

    @property
    def verdict(self) -> str:
        """``ready: NAMES``, or ``not ready:`` with the request's own first failure when the request itself
        cannot run, else every blocked provider's first failure (``name: reason | ...``; the bare reason when
        only one provider was considered)."""
        if self.ok:
            return "ready: " + ", ".join(self.ready)
        failing = [r for r in self.results if r.status == "fail"]
        request = next((r for r in failing if r.provider is None), None)
        if request is not None:
            return f"not ready: {request.message}"
        reasons: list[tuple[str, str]] = []
        for name in self.considered:
            if name in self.ready:
                continue
            first = next((r for r in failing if r.provider == name), None)
            reasons.append((name, first.message if first else "it cannot serve this request"))
        if not reasons:
            return f"not ready: {failing[0].message if failing else 'no provider serves this request'}"
        if len(self.considered) == 1:
            return f"not ready: {reasons[0][1]}"
        parts = []
        for name, reason in reasons:
            reason = _CITATION.sub("", reason)  # the table row keeps the source; the summary keeps to the point
            parts.append(reason if reason.startswith((f"{name} ", f"{name}:")) else f"{name}: {reason}")
        return "not ready: " + " | ".join(parts)

    def first_failure(self) -> CheckResult | None:
        return next((r for r in self.results if r.status == "fail"), None)

    def raise_for_failures(self) -> None:
        """Raise the most specific error for the first failure when the request cannot run."""
        if self.ok:
            return
        failure = self.first_failure()
        if failure is None:
            raise CompatError("no provider serves this request", code="compat.no_provider")
        raise_for_failures(self.results, failure.provider or "")

    def to_text(self) -> str:
        """The table ``deskctl preflight`` prints: results grouped by provider (the request's own first),
        a remedy under each failure or warning, and the verdict line last. Secrets are redacted."""
        from deskctl._redact import redact

        lines: list[str] = []
        groups: list[str | None] = [None, *self.considered]
        groups += sorted({r.provider for r in self.results if r.provider is not None and r.provider not in groups})
        for group in groups:
            rows = self.for_provider(group)
            if not rows:
                continue
            if group is None:
                lines.append("request")
            else:
                lines.append(f"{group}  ({'ready' if group in self.ready else 'not ready'})")
            for r in rows:
                lines.append(f"  {_STATUS_LABEL[r.status]}  {r.code:<28} {redact(r.message)}  [{r.elapsed_ms:.0f} ms]")
                if r.remedy and r.status in ("fail", "warn"):
                    lines.append(f"        remedy: {redact(r.remedy)}")
        lines.append(redact(self.verdict))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        from deskctl._redact import redact

        request, spec = self.request, self.request.spec
        return {
            "request": {
                "platform": spec.platform.value,
                "providers": list(request.providers) if request.providers else None,
                "agent": request.agent,
                "task_os": request.task_os,
                "geometry": spec.geometry_label(),
                "max_minutes": spec.max_minutes,
                "max_usd": spec.max_usd,
            },
            "considered": list(self.considered),
            "ready": list(self.ready),
            "ok": self.ok,
            "exit_code": self.exit_code,
            "verdict": redact(self.verdict),
            "elapsed_ms": self.elapsed_ms,
            "results": [
                {**r.to_dict(), "message": redact(r.message), "remedy": redact(r.remedy) if r.remedy else None}
                for r in self.results
            ],
        }


def _request_from(spec_or_request: DesktopSpec | PreflightRequest | None,
                  providers: Sequence[str] | None, **overrides: Any) -> PreflightRequest:
    if spec_or_request is None:
        request = PreflightRequest()
    elif isinstance(spec_or_request, DesktopSpec):
        spec = spec_or_request
        request = PreflightRequest(spec, providers=(spec.provider,),
                                   provider_options={spec.provider: dict(spec.provider_options)})
    else:
        request = spec_or_request
    if providers is not None:
        request = replace(request, providers=tuple(providers))
    clean = {k: v for k, v in overrides.items() if v is not None}
    return replace(request, **clean) if clean else request


def preflight(
    spec_or_request: DesktopSpec | PreflightRequest | None = None,
    providers: Sequence[str] | None = None,
    *,
    agent: str | None = None,
    task_os: str | None = None,
    timeout: float | None = None,
    instances: Sequence[Provider] | None = None,
) -> PreflightReport:
    """Check, without creating anything, which providers can serve a request.

    A :class:`~deskctl.spec.DesktopSpec` checks its own provider (unless ``providers`` names others); a
    :class:`PreflightRequest` without providers considers every installed provider that serves its platform.
    ``instances`` checks already built provider objects instead of looking names up in the registry (every
    one must be ready). Every check of every provider runs at once. Unknown names raise
    :class:`~deskctl.errors.UsageError`.
    """
    from deskctl.checks import compat
    from deskctl.providers import get_provider, resolve_name

    request = _request_from(spec_or_request, providers, agent=agent, task_os=task_os, timeout=timeout)
    if request.agent:
        request = replace(request, agent=compat.normalize_agent(request.agent))
    if request.task_os:
        request = replace(request, task_os=compat.normalize_task_os(request.task_os))
    base = request.spec
    setup_failures: list[CheckResult] = []
    built: list[tuple[DesktopSpec, Provider]] = []
    if instances is not None:
        named = True
        names = [p.name for p in instances]
        built = [(base.model_copy(update={"provider": p.name, "provider_options": dict(p.options)}), p)
                 for p in instances]
    else:
        named = request.providers is not None and len(request.providers) > 0
        names = ([resolve_name(n) for n in request.providers or ()] if named
                 else compat.providers_for(request.spec.platform))
        for name in names:
            options = dict(request.provider_options.get(name) or {})
            spec = base.model_copy(update={"provider": name, "provider_options": options})
            try:
                built.append((spec, get_provider(name, options)))
            except DeskctlError as exc:
                setup_failures.append(failure_from(exc, code=exc.code, provider=name))
    started = time.monotonic()
    checks: list[Check] = [Check(
        "compat.request", lambda: compat.request_checks(request.spec.platform, request.agent, request.task_os),
        None, request.timeout,
    )]
    for spec, provider in built:
        checks += _provider_check_list(spec, provider, request.timeout, agent=request.agent,
                                       task_os=request.task_os, include_request=False)
    groups = run_concurrently(checks)
    results = _merge_report(groups[0], list(zip(checks[1:], groups[1:], strict=True)), setup_failures)
    if not names:
        others = ", ".join(compat.serving_providers(request.spec.platform)) or "none known"
        results.append(CheckResult(
            "fail", "compat.platform_unsupported",
            f"no installed provider serves {request.spec.platform.value} desktops (providers for it: {others})",
            remedy="choose another --platform, or install a provider that serves it",
        ))
    request_ok = all(r.status != "fail" for r in results if r.provider is None)
    ready = [n for n in names if request_ok and all(r.status != "fail" for r in results if r.provider == n)]
    return PreflightReport(request=request, results=results, considered=list(names), ready=ready,
                           required_all=named, elapsed_ms=round((time.monotonic() - started) * 1000, 1))


def _merge_report(request_results: list[CheckResult], provider_groups: list[tuple[Check, list[CheckResult]]],
                  setup_failures: list[CheckResult]) -> list[CheckResult]:
    by_provider: dict[str | None, list[tuple[Check, list[CheckResult]]]] = {}
    for check, group in provider_groups:
        by_provider.setdefault(check.provider, []).append((check, group))
    merged: list[CheckResult] = []
    for pairs in by_provider.values():
        merged += _merge(pairs)
    # one keyring serves every provider: its warning is said once, for the request, naming whom it concerns
    keyring = [r for r in merged if r.code == "credentials.keyring"]
    shared: list[CheckResult] = []
    if keyring:
        names = ", ".join(sorted({r.provider for r in keyring if r.provider}))
        shared = [replace(keyring[0], provider=None,
                                      message=f"{keyring[0].message}; the credentials of {names} can only come "
                                              "from the environment")]
        merged = [r for r in merged if r.code != "credentials.keyring"]
    return list(request_results) + shared + merged + setup_failures
