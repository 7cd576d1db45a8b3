"""HTTP plumbing shared by the cloud providers (Daytona, cua, use.computer).

Four things, so that every cloud provider behaves the same way at its boundary:

- :class:`HttpProvider`: the base class of the cloud providers (their client, retry policy, options read
  through their declaration, credential lookup, error-mapping hooks, JSON answers and poll backoff).
- :func:`make_client`: an ``httpx.Client`` with deskctl's timeouts and headers (a transport may be injected).
- :class:`RetryPolicy`: exponential backoff (tenacity) that honours ``Retry-After`` and the throttler-named
  ``Retry-After-{throttler}`` headers; every delay is scaled by ``DESKCTL_HTTP_RETRY_SCALE`` or the policy's
  ``scale`` so tests never wait for real-world delays.
- :func:`error_from_response` / :func:`error_from_transport`: an HTTP answer or an httpx exception turned into
  the most specific :mod:`deskctl.errors` class, with secrets redacted from every message.

:func:`send` ties them together. Retries follow one rule: a request the server cannot have acted on
(a connection that was never made, a 429) may always be retried; anything else (a 5xx, a read timeout, a
dropped connection) is retried only when the caller says the call is idempotent. A create is never retried
blindly: the caller gets the error and must find out what exists.

httpx and tenacity are imported inside the functions, so importing this module costs nothing.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

from deskctl._redact import redact
from deskctl.errors import (
    CleanupIncomplete,
    ConfigInvalid,
    CredentialsForbidden,
    CredentialsInvalid,
    DeskctlError,
    GeometryMismatch,
    ProviderApiError,
    ProviderUnreachable,
    QuotaExceeded,
    RateLimited,
)
from deskctl.providers._option_values import OptionRow, OptionValues
from deskctl.providers.base import Provider, RemoteHandle

if TYPE_CHECKING:
    import httpx

    from deskctl.providers._http_options import HttpOptions

__all__ = [
    "RETRY_SCALE_ENV",
    "HttpErrorContext",
    "HttpProvider",
    "RetryPolicy",
    "answer_lost",
    "error_from_response",
    "error_from_transport",
    "make_client",
    "parse_retry_after",
    "response_message",
    "send",
]

#: multiplies every backoff delay (0 in tests); read when a policy is built, never at import
RETRY_SCALE_ENV = "DESKCTL_HTTP_RETRY_SCALE"

_QUOTA_RE = re.compile(r"(?i)(limit exceeded|quota|exceeds maximum allowed|insufficient (credit|balance))")
_RETRYABLE_STATUS = frozenset({500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. Delays are ``initial * multiplier**n`` capped at ``maximum``; a
    server-sent ``Retry-After`` replaces the computed delay (capped at ``max_retry_after``). Every delay is
    multiplied by ``scale`` before sleeping; ``sleep`` is injectable so tests can record the delays asked for.
    """

    attempts: int = 5
    initial: float = 0.5
    maximum: float = 8.0
    multiplier: float = 2.0
    max_retry_after: float = 120.0
    scale: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None, **defaults: Any) -> RetryPolicy:
        """Build from provider options ``retry_attempts``, ``retry_initial``, ``retry_maximum``,
        ``retry_scale`` and the ``DESKCTL_HTTP_RETRY_SCALE`` environment variable (options win)."""
        opts = dict(options or {})
        policy = cls(**defaults)
        env_scale = os.environ.get(RETRY_SCALE_ENV)
        scale = policy.scale
        if env_scale:
            try:
                scale = float(env_scale)
            except ValueError:
                raise ConfigInvalid(f"{RETRY_SCALE_ENV}={env_scale!r} is not a number") from None
        try:
            return replace(
                policy,
                attempts=max(1, int(opts.get("retry_attempts", policy.attempts))),
                initial=float(opts.get("retry_initial", policy.initial)),
                maximum=float(opts.get("retry_maximum", policy.maximum)),
                scale=float(opts.get("retry_scale", scale)),
            )
        except (TypeError, ValueError) as exc:
            raise ConfigInvalid(f"bad retry option: {exc}") from exc

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """The unscaled delay before retry number ``attempt`` (1-based)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        return min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds * scale`` (the one place the plumbing waits)."""
        self.sleep(max(0.0, seconds * self.scale))

    def with_attempts_at_most(self, attempts: int) -> RetryPolicy:
        """This policy with no more than ``attempts`` tries (for checks that run under their own timeout)."""
        return replace(self, attempts=min(self.attempts, attempts))


@dataclass(frozen=True)
class HttpErrorContext:
    """What the error mapper needs to word an error: the provider, what was being done, and remedies."""

    provider: str
    action: str
    credentials_remedy: str | None = None
    classify: Callable[[int, str, Mapping[str, Any]], DeskctlError | None] | None = None


def make_client(
    base_url: str = "",
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    connect_timeout: float = 10.0,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An ``httpx.Client`` for one provider instance. ``transport`` is injected per instance (tests)."""
    import httpx

    from deskctl import __version__

    all_headers = {"User-Agent": f"deskctl/{__version__}", "Accept": "application/json"}
    all_headers.update(headers or {})
    return httpx.Client(
        base_url=base_url,
        headers=all_headers,
        timeout=httpx.Timeout(timeout, connect=connect_timeout),
        transport=transport,
        follow_redirects=False,
    )


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` or any ``Retry-After-{throttler}`` header (the largest wins).

    Values are delta-seconds or an HTTP date; unparsable values are ignored.
    """
    waits: list[float] = []
    for name, value in headers.items():
        low = name.lower()
        if low != "retry-after" and not low.startswith("retry-after-"):
            continue
        value = value.strip()
        try:
            waits.append(max(0.0, float(value)))
            continue
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        waits.append(max(0.0, when.timestamp() - (time.time() if now is None else now)))
    return max(waits) if waits else None


def _body(response: httpx.Response) -> dict[str, Any]:
    try:
        raw = response.json()
    except (ValueError, UnicodeDecodeError):
        return {}
    return raw if isinstance(raw, dict) else {"message": raw}


def response_message(response: httpx.Response) -> str:
    """The server's own words: ``message`` (joined when a list), else ``error`` / ``errors``, plus ``details``;
    or the body text; or ``HTTP <status>`` for an empty body. Redacted."""
    body = _body(response)
    parts: list[str] = []
    for key in ("message", "error", "errors", "details"):
        value = body.get(key)
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        if isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        if value and str(value) not in parts:
            parts.append(str(value))
    text = ": ".join(parts)
    if not text and not body:
        try:
            text = response.text.strip()[:300]
        except UnicodeDecodeError:
            text = ""
    return redact(text) if text else f"HTTP {response.status_code} with an empty body"


def error_from_response(response: httpx.Response, context: HttpErrorContext) -> DeskctlError:
    """The deskctl error for a non-2xx answer. ``context.classify`` may claim it first (provider-specific
    wording such as regions and classes); otherwise: 401 credentials.invalid, 403 credentials.forbidden,
    400/403 quota wording quota.exceeded, 429 provider.rate_limited (with ``retry_after``), anything else
    provider.api_error (with ``status``)."""
    status = response.status_code
    message = response_message(response)
    body = _body(response)
    where = f"{context.provider}: {context.action} failed"
    details = {"status": status, "method": response.request.method, "path": redact(response.request.url.path)}
    if context.classify is not None:
        claimed = context.classify(status, message, body)
        if claimed is not None:
            claimed.details.update({k: v for k, v in details.items() if k not in claimed.details})
            return claimed
    if status == 401:
        return CredentialsInvalid(
            f"{where}: the credentials were refused (HTTP 401: {message})",
            provider=context.provider, remedy=context.credentials_remedy, details=details,
        )
    if status in (400, 403) and _QUOTA_RE.search(message):
        return QuotaExceeded(
            f"{where}: quota exceeded ({message})", provider=context.provider,
            remedy="free resources (deskctl ls / deskctl reap) or raise the account's limits", details=details,
        )
    if status == 403:
        return CredentialsForbidden(
            f"{where}: the credentials are valid but lack permission (HTTP 403: {message})",
            provider=context.provider,
            remedy="give the key the permission this call needs (see the provider's docs)", details=details,
        )
    if status == 429:
        retry_after = parse_retry_after(response.headers)
        hint = f"; retry after {retry_after:.0f}s" if retry_after is not None else ""
        return RateLimited(
            f"{where}: rate limited (HTTP 429: {message}){hint}", provider=context.provider,
            retry_after=retry_after, details=details, remedy="wait and retry, or lower the request rate",
        )
    return ProviderApiError(
        f"{where}: HTTP {status}: {message}", provider=context.provider, status=status, details=details,
    )


def error_from_transport(exc: Exception, context: HttpErrorContext) -> DeskctlError:
    """An httpx transport exception as :class:`ProviderUnreachable` (``details["sent"]`` says whether the
    request may have reached the server: False only for connection failures)."""
    import httpx

    sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "could not connect" if not sent else "failed"
    url = ""
    try:
        url = str(exc.request.url.copy_with(query=None)) if isinstance(exc, httpx.RequestError) else ""
    except RuntimeError:
        url = ""
    return ProviderUnreachable(
        f"{context.provider}: {context.action} {kind}"
        + (f" ({redact(url)})" if url else "") + f": {type(exc).__name__}: {redact(str(exc)) or 'no detail'}",
        provider=context.provider, details={"sent": sent},
        remedy="check the network and the provider's API URL",
    )


def answer_lost(error: DeskctlError) -> bool:
    """Whether the answer to a request was lost while the service may still be acting on it: a timeout or a
    connection dropped after the request was sent, or a gateway's 502/503/504 (its upstream timed out or
    crashed). A create failed so may complete later."""
    if isinstance(error, ProviderUnreachable):
        return bool(error.details.get("sent", True))
    return isinstance(error, ProviderApiError) and error.status in (502, 503, 504)


def _may_retry(error: DeskctlError, idempotent: bool) -> bool:
    if isinstance(error, RateLimited):
        return True  # refused before it was acted on
    if isinstance(error, ProviderUnreachable):
        return idempotent or not error.details.get("sent", True)
    if isinstance(error, ProviderApiError):
        return idempotent and error.status in _RETRYABLE_STATUS
    return False


def send(
    client: httpx.Client,
    method: str,
    url: str,
    context: HttpErrorContext,
    *,
    policy: RetryPolicy,
    idempotent: bool,
    deadline: float | None = None,
    ok_statuses: frozenset[int] = frozenset(),
    stream: bool = False,
    **kwargs: Any,
) -> httpx.Response:
    """Send one request with the retry rule of this module and return a 2xx answer (or one whose status is in
    ``ok_statuses``, such as 404 for a delete). Otherwise raise the mapped deskctl error (the last one, when
    retries ran out), chained to the httpx exception when there was one. ``deadline`` (``time.monotonic``)
    stops retrying early. ``stream``: the answer's body is not read yet (a large download); the caller reads
    and closes it (an error answer is read and closed here)."""
    import httpx
    import tenacity

    def attempt_once() -> httpx.Response:
        try:
            if stream:
                response = client.send(client.build_request(method, url, **kwargs), stream=True)
            else:
                response = client.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise error_from_transport(exc, context) from exc
        if response.is_success or response.status_code in ok_statuses:
            return response
        if stream:
            try:
                response.read()
            except httpx.HTTPError as exc:
                raise error_from_transport(exc, context) from exc
            finally:
                response.close()
        raise error_from_response(response, context)

    def should_retry(state: tenacity.RetryCallState) -> bool:
        outcome = state.outcome
        if outcome is None or not outcome.failed:
            return False
        error = outcome.exception()
        if not isinstance(error, DeskctlError) or not _may_retry(error, idempotent):
            return False
        if deadline is not None:
            wait = _wait(state)
            if time.monotonic() + wait * policy.scale >= deadline:
                return False
        return True

    def _wait(state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        retry_after = error.retry_after if isinstance(error, RateLimited) else None
        return policy.delay(state.attempt_number, retry_after)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(policy.attempts),
        retry=should_retry,
        wait=_wait,
        sleep=policy.pause,
        reraise=True,
    )
    result: httpx.Response = retrying(attempt_once)
    return result


class HttpProvider(Provider):
    """The plumbing the cloud providers share around :func:`send`: one ``httpx.Client`` per instance (made on
    first use, released by :meth:`close`), the retry policy of the provider options (``self.retry``), numeric
    options, credential lookup, the error-mapping hooks, JSON answers and the poll backoff.

    A subclass names its options (:attr:`option_table`) and its credentials remedy (:meth:`_credentials_remedy`),
    and may claim errors first with its own wording (:meth:`_classify`).
    """

    #: headers every request of this provider sends besides deskctl's own
    client_headers: ClassVar[Mapping[str, str]] = {}
    #: the provider's options as data (its package's ``_option_table.TABLE``, made from its ``Options``, a
    #: subclass of :class:`deskctl.providers._http_options.HttpOptions`)
    option_table: ClassVar[Mapping[str, OptionRow]]
    opts: HttpOptions

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        #: the options, read through the one declaration without loading pydantic (a bad value given is
        #: :class:`ConfigInvalid` here)
        self.opts = cast("HttpOptions", OptionValues(self.name, self.option_table, self.options, self._option_env))
        self.retry = RetryPolicy.from_options(self.options)
        self._sleep: Callable[[float], None] = time.sleep
        self.poll_interval = self.opts.poll_interval
        self.poll_max_interval = self.opts.poll_max_interval
        self.request_timeout = self.opts.request_timeout
        self.destroy_timeout = self.opts.destroy_timeout
        #: how long what an ambiguous create made is looked for (see :meth:`_look_for_created`)
        self.create_lookup_seconds = self.opts.create_lookup_seconds

    def _var(self, var: str) -> str | None:
        """A variable of this provider from the environment, then the keyring; None when neither has it."""
        from deskctl.credentials import resolve

        cred = resolve(self.name, var)
        return cred.value if cred is not None else None

    def _option_env(self, var: str) -> str | None:
        """The environment variable an option falls back to: one of :attr:`credentials`' variables from the
        environment, then the keyring (:meth:`_var`); any other from the environment only."""
        if var in self.credentials.variables:
            return self._var(var)
        return os.environ.get(var)

    @property
    def client(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = make_client(timeout=self.request_timeout, headers=self.client_headers)
            return self._client

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- error mapping -------------------------------------------------------------------------------------
    @abstractmethod
    def _credentials_remedy(self) -> str:
        """What to run or export when the credentials are missing or refused."""

    def _classify(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        """This provider's own error for an answer (see :attr:`HttpErrorContext.classify`); None by default."""
        return None

    def _context(self, action: str) -> HttpErrorContext:
        return HttpErrorContext(self.name, action, credentials_remedy=self._credentials_remedy(),
                                classify=self._classify)

    def _send(
        self, method: str, url: str, action: str, *, idempotent: bool, ok: frozenset[int] = frozenset(),
        deadline: float | None = None, policy: RetryPolicy | None = None, stream: bool = False, **kwargs: Any,
    ) -> httpx.Response:
        """:func:`send` with this provider's client, error context and retry policy (unless ``policy``)."""
        return send(self.client, method, url, self._context(action), policy=policy or self.retry,
                    idempotent=idempotent, ok_statuses=ok, deadline=deadline, stream=stream, **kwargs)

    def _json(self, response: httpx.Response) -> Any:
        """The answer's JSON, else :class:`ProviderApiError` naming the request."""
        try:
            return response.json()
        except ValueError as exc:
            raise ProviderApiError(
                f"{self.name}: {response.request.method} {redact(response.request.url.path)} answered non-JSON "
                f"(HTTP {response.status_code})", provider=self.name, status=response.status_code,
            ) from exc

    # -- readiness and cleanup -------------------------------------------------------------------------------
    def _check_screenshot_size(self, handle: RemoteHandle, screen: str = "display") -> None:
        """The last step of readiness: a test screenshot, whose size must be :meth:`display_size`, else
        :class:`GeometryMismatch` (``screen`` is the provider's word for what ``display_size`` reads)."""
        shot = self.screenshot(handle)
        size = self.display_size(handle)
        if (shot.width, shot.height) != size:
            raise GeometryMismatch(
                f"{self.name}: the screenshot is {shot.width}x{shot.height} but the {screen} is {size[0]}x{size[1]}",
                provider=self.name, details={"screenshot": f"{shot.width}x{shot.height}",
                                             "display": f"{size[0]}x{size[1]}"},
            )

    def _destroy_left_by_create(self, found: Mapping[str, RemoteHandle], session_id: str,
                                cause: DeskctlError) -> None:
        """Destroy what a failed create of ``session_id`` made; a destroy that cannot be confirmed is
        :class:`CleanupIncomplete` naming the failed create, chained to ``cause``."""
        for handle in found.values():
            try:
                self.destroy(handle)
            except CleanupIncomplete as err:
                raise CleanupIncomplete(
                    f"{self.name}: create of {session_id} failed ({cause.message}) and {err.message}",
                    provider=self.name, details=err.details, remedy=err.remedy,
                ) from cause

    # -- a create whose answer was lost ----------------------------------------------------------------------
    def _look_for_created(self, lookup: Callable[[], dict[str, RemoteHandle]],
                          cause: DeskctlError) -> dict[str, RemoteHandle]:
        """What a failed create made, by ``lookup`` (by name and label). When the create's answer was lost
        (:func:`answer_lost`: the service may still be making it) the lookup is repeated, with the poll
        backoff, until something appears or :attr:`create_lookup_seconds` have passed; otherwise the service
        has finished with the request and one lookup settles it."""
        window = self.create_lookup_seconds if answer_lost(cause) else 0.0
        found: dict[str, RemoteHandle] = {}
        for _ in self._polls(time.monotonic() + window):
            found = lookup()
            if found:
                break
        return found

    def _lost_create_cleaned(self, cause: DeskctlError, session_id: str, names: list[str], what: str,
                             verb: str = "destroyed") -> DeskctlError:
        """The create's error once what it made was found and destroyed (``verb``, confirmed): the service
        answered the lookup and the destroy, so "check the network" would mislead; the create can simply be
        tried again. Of the cause's class (its code and exit code stay); ``details[verb]`` names what went."""
        message = (f"{self.name}: the answer to the create of {session_id} was lost ({cause.message}); the {what} "
                   f"it made ({', '.join(names)}) was found and {verb}, so nothing is left")
        kwargs: dict[str, Any] = {
            "provider": self.name, "details": {**cause.details, verb: names, "answer_lost": True},
            "remedy": "try again: the service answered the lookup and the destroy; if it keeps happening, raise "
                      "-o request_timeout (or create_timeout) or report it to the provider",
        }
        if isinstance(cause, ProviderApiError):
            return ProviderApiError(message, status=cause.status, **kwargs)
        return type(cause)(message, **kwargs)

    def _lost_create_unresolved(self, cause: DeskctlError, session_id: str, what: str,
                                found_by: str) -> CleanupIncomplete:
        """The create's answer was lost and nothing appeared within :attr:`create_lookup_seconds`: the service
        may still make it. :class:`CleanupIncomplete` (the session is recorded ``leaked``) saying how it is
        found later."""
        return CleanupIncomplete(
            f"{self.name}: the answer to the create of {session_id} was lost ({cause.message}); nothing was found "
            f"within {self.create_lookup_seconds:g}s, but the service may still make the {what}: it would carry "
            f"{found_by}", provider=self.name,
            details={"left": [f"{what} {session_id} (if the service made it)"], "cause": cause.code,
                     "answer_lost": True},
            remedy=f"deskctl reap --provider {self.name} (finds it by that label and destroys it, and closes the "
                   "ledger row); raise -o create_lookup_seconds to wait longer next time",
        )

    # -- waiting -------------------------------------------------------------------------------------------
    def _polls(self, deadline: float) -> Iterator[None]:
        """Yield until ``deadline`` (``time.monotonic``), sleeping between polls from ``poll_interval`` up by
        x1.5 to ``poll_max_interval``, never past the deadline."""
        interval = self.poll_interval
        while True:
            yield
            now = time.monotonic()
            if now >= deadline:
                return
            self._sleep(min(interval, max(0.0, deadline - now)))
            interval = min(self.poll_max_interval, interval * 1.5)
