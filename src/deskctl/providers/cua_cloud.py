"""cua cloud desktops through the Fleet claims API (``run.cua.ai``), the control plane Harbor's
``cua_cloud.py`` uses, and the OSWorld guest server behind the per-sandbox service proxy, with httpx and tenacity.

The contract was read from github.com/trycua/cua (Fleet claims) and Harbor's ``environments/cua_cloud.py``, with
the OSWorld guest server as data plane (docs/cua.md). What the caller may rely on:

- **Auth**: OAuth2 client credentials ``CUA_CLIENT_ID`` + ``CUA_CLIENT_SECRET`` (environment, then keyring)
  exchanged at ``CUA_TOKEN_URL`` for a bearer token, re-minted when less than 30 s is left. A 401 or a 3xx
  (the service redirects an expired token to its login page; redirects are never followed) mints a new token
  and sends the request once more; a second refusal is ``credentials.invalid``. ``CUA_BASE_URL`` overrides
  the service URL. The client secret and every token are registered for redaction and never stored in a handle.
  The legacy VM API (``CUA_API_KEY``, ``api.cua.ai``) is not driven by this version: see docs/cua.md.
- **Create**: one ``OSGymSandboxClaim`` named after the session id (so an ambiguous failure is resolved by a
  GET of that name, and by the ``deskctl.session`` label), labelled ``deskctl.session`` and
  ``deskctl.managed=1``, every deskctl label kept as an annotation (label values cannot hold ``host:pid``).
  The lifetime backstop is the claim's ``lifecycle.shutdownTime``: the pool's reaper releases a claim past it.
  An attached session renews it on every keepalive; a detached one gets its whole lifetime (plus a margin).
  A create is never retried blindly: after a 5xx, a dropped connection or a timeout what was made is found and
  released before the error is raised; when the answer was lost the lookup is repeated over
  ``create_lookup_seconds``, and nothing found is :class:`~deskctl.errors.CleanupIncomplete` (``leaked``).
- **Readiness**: the claim's ``status.phase`` until ``Bound``. ``Failed`` means the warm pool had no sandbox:
  as Harbor does, the claim is released (confirmed) and made again, since a pending claim is what makes the
  pool scale up, up to ``rebind_attempts`` times within the deadline; then
  :class:`~deskctl.errors.CapacityUnavailable`. Then the guest's ``GET /platform`` (502/503/504 while the
  guest resets are waited out), then ``POST /screen_size`` and a screenshot whose size must agree.
- **Desktop**: screenshots are the guest's ``GET /screenshot`` PNG. The guest has no input endpoints: input is
  a short pyautogui program run by ``POST /execute``, as the guest contract documents. On a Linux guest the
  program falls back to python-xlib + XTEST only when pyautogui is absent or cannot express the action (text
  beyond its ASCII key table, a key it has no name for), so any character can still be typed there; a Windows
  guest types ASCII only.
  ``exec`` runs ``bash -lc`` (``cmd.exe`` on Windows) with separate stdout and stderr, with the options
  (``cwd``, ``env``, ``user``, ``background``) as the shared guest lines of :mod:`deskctl.providers._guest`; the
  guest caps a command at 120 s, and a command that outlives its timeout reports exit code 124.
- **Harness**: files through the guest's ``POST /setup/upload`` and ``POST /file`` (one request per file where
  that settles it, else :class:`~deskctl.providers._files.FileTransfer`'s way: parents, folders as one tar);
  the pointer from ``GET /cursor_position``; clipboard, launch, ``open_url`` and window titles as commands
  (:class:`~deskctl.providers._guest.GuestActions`).
- **Destroy**: DELETE of the claim, then GET until 404; a 404 is success. Unconfirmed is
  :class:`~deskctl.errors.CleanupIncomplete` naming the claim.

Provider options (``provider_options``): ``base_url``, ``token_url``, ``namespace`` (default
``CUA_CLOUD_NAMESPACE``, else ``harbor-{platform}``), ``warmpool`` (default: the namespace), ``template``
(default ``{warmpool}-template``), ``svc_suffix``, ``shutdown_policy`` (``Retain``), ``claim_ttl_seconds``
(600), ``detached_ttl_seconds`` (3600, for a detached session without a lifetime), ``rebind_attempts`` (20),
``create_timeout`` (``request_timeout``), ``create_lookup_seconds`` (45, at most 600), ``poll_interval``,
``poll_max_interval``, ``destroy_timeout``, ``request_timeout``, and the retry options of
:class:`deskctl.providers._http.RetryPolicy`.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
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
    ConfigInvalid,
    CredentialsInvalid,
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
from deskctl.providers._guest import (
    GuestActions,
    background_pid,
    check_exec_options,
    cmd_line,
    posix_line,
    powershell_line,
)
from deskctl.providers._http import (
    HTTP_OPTIONS,
    HttpErrorContext,
    HttpProvider,
    RetryPolicy,
    answer_lost,
    error_from_response,
    error_from_transport,
    send,
)
from deskctl.providers._png import png_size
from deskctl.providers.base import (
    LABEL_DETACHED,
    LABEL_EXPIRES,
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

    from deskctl.checks import CheckResult

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_TOKEN_URL",
    "LABEL_MANAGED",
    "UBUNTU_SIZE",
    "CuaCloudProvider",
    "linux_input_ops",
    "windows_background_line",
    "windows_input_code",
]

DEFAULT_BASE_URL = "https://run.cua.ai"
DEFAULT_TOKEN_URL = "https://auth.cua.ai/realms/cyclops-cs/protocol/openid-connect/token"
API_VERSION = "osgym.cua.ai/v1alpha1"
LABEL_MANAGED = "deskctl.managed"
#: the size of the OSWorld Ubuntu guest (its /screen_size; the source is compat.json's row "cua-cloud ubuntu")
UBUNTU_SIZE = (1920, 1080)
#: a token with less than this many seconds left is replaced before use (Harbor does the same)
TOKEN_MARGIN = 30.0
#: the guest's /execute kills a command after 120 s (OSWorld main.py)
GUEST_EXEC_CAP = 120
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_GUEST_BUSY = frozenset({502, 503, 504})
_PLATFORM_NAMES = {"linux": Platform.UBUNTU, "windows": Platform.WINDOWS, "darwin": Platform.MACOS}

# A Linux guest's input program. The guest contract is pyautogui (OSWorld's own clients send
# `python -c "import pyautogui; ..."`), so the pyautogui program (argv[2]) runs whenever pyautogui imports and
# can express the action. Only without pyautogui, or for what pyautogui cannot type (characters outside its key
# table, keys it has no name for), the fallback drives XTEST through python-xlib (argv[1]: operations). Keysyms
# the keymap lacks are bound to an unused keycode and left bound, so that the receiving client translates the
# events with the mapping they were sent with, and a later character finds its keycode again.
_LINUX_INPUT = r"""
import json, sys
try:
    import pyautogui
except ImportError:
    pyautogui = None
if pyautogui is not None and sys.argv[2]:
    exec(sys.argv[2])
    sys.exit(0)
try:
    from Xlib import X, display
    from Xlib.ext import xtest
except ImportError:
    sys.exit("the guest has " + ("pyautogui, which cannot send this input," if pyautogui else "no pyautogui")
             + " and no python-xlib for XTEST")
d = display.Display()
first = d.display.info.min_keycode
keymap = [list(r) for r in d.get_keyboard_mapping(first, d.display.info.max_keycode - first + 1)]
def code_for(sym):
    for idx in (0, 1):
        for i, row in enumerate(keymap):
            if len(row) > idx and row[idx] == sym:
                return first + i, idx == 1
    for i in range(len(keymap) - 1, -1, -1):
        if not any(keymap[i]):
            row = [sym, sym] + [0] * (len(keymap[i]) - 2)
            d.change_keyboard_mapping(first + i, [row])
            d.sync()
            keymap[i] = row
            return first + i, False
    sys.exit("no unused keycode left for keysym %#x" % sym)
shift = code_for(0xFFE1)[0]
def fake(kind, detail=0, x=0, y=0):
    xtest.fake_input(d, kind, detail, x=x, y=y)
def press(syms):
    held = []
    for sym in syms:
        code, shifted = code_for(sym)
        if shifted and shift not in held:
            fake(X.KeyPress, shift)
            held.append(shift)
        fake(X.KeyPress, code)
        held.append(code)
    for code in reversed(held):
        fake(X.KeyRelease, code)
for op in json.loads(sys.argv[1]):
    kind = op[0]
    if kind == "move":
        fake(X.MotionNotify, 0, op[1], op[2])
    elif kind == "button":
        fake(X.ButtonPress if op[2] else X.ButtonRelease, op[1])
    elif kind == "chord":
        press(op[1])
    elif kind == "key":
        code, shifted = code_for(op[1])
        fake(X.KeyPress if op[2] else X.KeyRelease, code)
    d.sync()
d.close()
"""

_BUTTONS = {"left": 1, "middle": 2, "right": 3}
_SCROLL = {"up": 4, "down": 5, "left": 6, "right": 7}

#: deskctl canonical key names -> pyautogui names (its key table is the same on Windows and X11)
_PYAUTOGUI_KEYS: dict[str, str] = {
    "ctrl": "ctrl", "shift": "shift", "alt": "alt", "super": "win", "enter": "enter", "escape": "esc",
    "tab": "tab", "backspace": "backspace", "delete": "delete", "space": "space", "home": "home", "end": "end",
    "pageup": "pageup", "pagedown": "pagedown", "insert": "insert", "up": "up", "down": "down", "left": "left",
    "right": "right", "capslock": "capslock", "menu": "apps",
    **{f"f{i}": f"f{i}" for i in range(1, 25)},
}


def _keysym(name: str) -> int:
    from deskctl.providers._x11 import keysym_for_key

    try:
        return keysym_for_key(name)
    except KeyError:
        raise UsageError(f"no X keysym for key {name!r}", code="usage.unknown_key", provider="cua-cloud") from None


def linux_input_ops(action: Action) -> list[list[Any]]:
    """The operations of the Linux guest's input program for ``action`` (keysyms are numbers)."""
    from deskctl.providers._x11 import keysym_for_char

    match action:
        case Click(x=x, y=y, button=button, count=count):
            number = _BUTTONS[button]
            return [["move", x, y], *([["button", number, 1], ["button", number, 0]] * max(1, count))]
        case Move(x=x, y=y):
            return [["move", x, y]]
        case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
            number = _BUTTONS[button]
            steps = [["move", x1 + (x2 - x1) * i // 8, y1 + (y2 - y1) * i // 8] for i in range(1, 9)]
            return [["move", x1, y1], ["button", number, 1], *steps, ["button", number, 0]]
        case Scroll(x=x, y=y, dx=dx, dy=dy):
            ops: list[list[Any]] = [["move", x, y]]
            for amount, negative, positive in ((dy, "up", "down"), (dx, "left", "right")):
                number = _SCROLL[positive if amount > 0 else negative]
                ops += [["button", number, 1], ["button", number, 0]] * abs(amount)
            return ops
        case MouseDown(x=x, y=y, button=button):
            return [["move", x, y], ["button", _BUTTONS[button], 1]]
        case MouseUp(x=x, y=y, button=button):
            return [["move", x, y], ["button", _BUTTONS[button], 0]]
        case TypeText(text=text):
            out: list[list[Any]] = []
            previous = ""
            for char in text:
                if not (char == "\n" and previous == "\r"):
                    if (ord(char) < 32 and char not in "\n\r\t\b\x1b") or ord(char) == 127:
                        raise UsageError(f"cannot type the control character {char!r}; use key instead",
                                         code="usage.bad_text", provider="cua-cloud")
                    out.append(["chord", [keysym_for_char(char)]])
                previous = char
            return out
        case KeyPress(keys=keys):
            return [["chord", [_keysym(k) for k in keys]]]
        case KeyDown(key=key):
            return [["key", _keysym(key), 1]]
        case KeyUp(key=key):
            return [["key", _keysym(key), 0]]
    raise UsageError(f"cua-cloud cannot perform {action!r}", code="usage.unsupported", provider="cua-cloud")


def _pyautogui_key(name: str, keep_case: bool = False) -> str:
    if len(name) == 1:
        # pyautogui presses shift for an upper-case letter itself (isShiftCharacter)
        return name if keep_case or not name.isalpha() else name.lower()
    key = _PYAUTOGUI_KEYS.get(name)
    if key is None:
        raise UsageError(f"pyautogui has no key {name!r}", code="usage.unknown_key", provider="cua-cloud")
    return key


def windows_input_code(action: Action) -> str:
    """The pyautogui program a Windows guest runs for ``action`` (pyautogui types ASCII only)."""
    return pyautogui_code(action)


def linux_pyautogui_code(action: Action) -> str:
    """The pyautogui program a Linux guest runs for ``action``, or ``""`` when pyautogui cannot express it
    (text beyond its key table, a key it has no name for): the input program then falls back to XTEST."""
    try:
        return pyautogui_code(action, keep_case=True)
    except UsageError as err:
        if err.code in ("usage.bad_text", "usage.unknown_key"):
            return ""
        raise


def pyautogui_code(action: Action, *, keep_case: bool = False) -> str:
    """The pyautogui program for ``action`` (pyautogui types printable ASCII, newline and tab only).
    ``keep_case`` sends an upper-case letter of a chord as such (pyautogui adds shift for it)."""
    lines = ["import pyautogui", "pyautogui.FAILSAFE = False", "pyautogui.PAUSE = 0"]
    match action:
        case Click(x=x, y=y, button=button, count=count):
            lines.append(f"pyautogui.click({x}, {y}, clicks={max(1, count)}, interval=0, button={button!r})")
        case Move(x=x, y=y):
            lines.append(f"pyautogui.moveTo({x}, {y})")
        case Drag(x1=x1, y1=y1, x2=x2, y2=y2, button=button):
            lines += [f"pyautogui.moveTo({x1}, {y1})", f"pyautogui.mouseDown(button={button!r})",
                      f"pyautogui.moveTo({x2}, {y2})", f"pyautogui.mouseUp(button={button!r})"]
        case Scroll(x=x, y=y, dx=dx, dy=dy):
            lines.append(f"pyautogui.moveTo({x}, {y})")
            if dy:
                lines.append(f"pyautogui.scroll({-dy})")  # pyautogui: positive is up
            if dx:
                lines.append(f"pyautogui.hscroll({dx})")
        case MouseDown(x=x, y=y, button=button):
            lines.append(f"pyautogui.mouseDown({x}, {y}, button={button!r})")
        case MouseUp(x=x, y=y, button=button):
            lines.append(f"pyautogui.mouseUp({x}, {y}, button={button!r})")
        case TypeText(text=text):
            bad = sorted({c for c in text if not (32 <= ord(c) < 127 or c in "\n\t")})
            if bad:
                raise UsageError(
                    f"pyautogui cannot type {''.join(bad)!r} (ASCII only)",
                    code="usage.bad_text", provider="cua-cloud", remedy="type ASCII, or paste through exec",
                )
            lines.append(f"pyautogui.write({text!r})")
        case KeyPress(keys=keys):
            lines.append("pyautogui.hotkey(" + ", ".join(repr(_pyautogui_key(k, keep_case)) for k in keys) + ")")
        case KeyDown(key=key):
            lines.append(f"pyautogui.keyDown({_pyautogui_key(key, keep_case)!r})")
        case KeyUp(key=key):
            lines.append(f"pyautogui.keyUp({_pyautogui_key(key, keep_case)!r})")
        case _:
            raise UsageError(f"cua-cloud cannot perform {action!r}", code="usage.unsupported",
                             provider="cua-cloud")
    return "\n".join(lines)



def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dns_label(value: str) -> str:
    """A Kubernetes-valid label value (<= 63 of ``[A-Za-z0-9._-]``, alphanumeric at both ends), or ""."""
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in value)[:63]
    return cleaned.strip("._-")


class CuaCloudProvider(FileTransfer, GuestActions, HttpProvider):
    """cua cloud sandboxes claimed from a Fleet warm pool, driven through the OSWorld guest server."""

    name = "cua-cloud"
    aliases = ("cua",)
    option_names = HTTP_OPTIONS | {"base_url", "token_url", "namespace", "warmpool", "template", "svc_suffix",
                                   "shutdown_policy", "claim_ttl_seconds", "detached_ttl_seconds", "rebind_attempts",
                                   "create_timeout", "create_lookup_seconds"}
    capabilities = Capabilities(
        platforms=frozenset({Platform.UBUNTU, Platform.WINDOWS}),
        settable_geometry=False,
        fixed_sizes={Platform.UBUNTU: (UBUNTU_SIZE,)},
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=True,
        isolation="vm",
        start_url=False,
        local=False,
        cursor_position=True,
        clipboard=True,
        windows=True,
        billing="per_hour",
    )
    credentials = CredentialSet(
        variables=("CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY", "CUA_BASE_URL", "CUA_TOKEN_URL",
                   "CUA_API_BASE", "CUA_CLOUD_NAMESPACE"),
        # the client id is "a per-user key" (Harbor): treated as a secret too
        secret=frozenset({"CUA_CLIENT_ID", "CUA_CLIENT_SECRET", "CUA_API_KEY"}),
        required_any=(("CUA_CLIENT_ID", "CUA_CLIENT_SECRET"), ("CUA_API_KEY",)),
        source="Harbor harbor/environments/cua_cloud.py; cua.ai/docs (github.com/trycua/cua)",
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._lock = threading.Lock()  # guards the cached token
        self._token: tuple[str, float] | None = None  # (access token, monotonic expiry)
        self.poll_interval = self._number("poll_interval", 0.5)
        self.poll_max_interval = self._number("poll_max_interval", 2.0)
        self.destroy_timeout = self._number("destroy_timeout", 120.0)
        self.request_timeout = self._number("request_timeout", 60.0)
        self.create_timeout = self._number("create_timeout", self.request_timeout)
        self.claim_ttl = self._number("claim_ttl_seconds", 600.0)
        self.detached_ttl = self._number("detached_ttl_seconds", 3600.0)
        self.rebind_attempts = int(self._number("rebind_attempts", 20))
        self.shutdown_policy = str(self.options.get("shutdown_policy") or "Retain")
        if self.shutdown_policy not in ("Retain", "Delete"):
            raise ConfigInvalid(f"cua-cloud option shutdown_policy={self.shutdown_policy!r} is not Retain or Delete",
                                provider=self.name)
        self._sandboxes: dict[str, str] = {}
        self._settings: dict[str, str | None] = {}

    # -- configuration ---------------------------------------------------------------------------------------
    def _setting(self, option: str, var: str) -> str | None:
        """``option`` from the provider options, else ``var`` (environment, then keyring), resolved once."""
        if option not in self._settings:
            value = self.options.get(option) or self._var(var)
            self._settings[option] = str(value) if value else None
        return self._settings[option]

    @property
    def base_url(self) -> str:
        return (self._setting("base_url", "CUA_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")

    @property
    def token_url(self) -> str:
        return self._setting("token_url", "CUA_TOKEN_URL") or DEFAULT_TOKEN_URL

    def namespace(self, platform: Platform) -> str:
        """The pool of ``platform``: ``namespace`` option, else ``CUA_CLOUD_NAMESPACE``, else Harbor's default."""
        return self._setting("namespace", "CUA_CLOUD_NAMESPACE") or f"harbor-{platform.value}"

    def _claims_path(self, namespace: str) -> str:
        return f"/api/k8s/apis/{API_VERSION}/namespaces/{namespace}/osgymsandboxclaims"

    def _credentials_remedy(self) -> str:
        return ("export CUA_CLIENT_ID=ukey-... and CUA_CLIENT_SECRET=... (a per-user key from your Cua Cloud "
                "account) or run: deskctl login cua-cloud")

    # -- auth --------------------------------------------------------------------------------------------------
    def _client_credentials(self) -> tuple[str, str]:
        client_id, secret = self._var("CUA_CLIENT_ID"), self._var("CUA_CLIENT_SECRET")
        if client_id and secret:
            register_secret(client_id)
            register_secret(secret)
            return client_id, secret
        legacy = " (CUA_API_KEY is set, but it is the legacy VM API's key, which this version does not drive)" \
            if self._var("CUA_API_KEY") else ""
        missing = " and ".join(v for v, x in (("CUA_CLIENT_ID", client_id), ("CUA_CLIENT_SECRET", secret)) if not x)
        raise CredentialsMissing(
            f"cua-cloud requires CUA_CLIENT_ID (a per-user key from your Cua Cloud account) alongside "
            f"CUA_CLIENT_SECRET; {missing} missing (environment or keyring){legacy}",
            provider=self.name, remedy=self._credentials_remedy(),
        )

    def _access_token(self, *, fresh: bool = False, policy: RetryPolicy | None = None) -> str:
        """A bearer token from the client-credentials exchange, cached until 30 s before it expires."""
        with self._lock:
            cached = self._token
        if cached is not None and not fresh and cached[1] - time.monotonic() > TOKEN_MARGIN:
            return cached[0]
        client_id, secret = self._client_credentials()
        context = HttpErrorContext(self.name, "obtain an access token", credentials_remedy=self._credentials_remedy(),
                                   classify=self._classify_token)
        response = send(self.client, "POST", self.token_url, context, policy=policy or self.retry, idempotent=True,
                        data={"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
        body = self._json(response)
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise ProviderApiError("cua-cloud: the token endpoint answered without an access_token",
                                   provider=self.name, status=response.status_code)
        register_secret(token)
        expires_in = body.get("expires_in", 300)
        lifetime = float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else 300.0
        with self._lock:
            self._token = (token, time.monotonic() + lifetime)
        return token

    def _classify_token(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        error = str(body.get("error") or "")
        if status in (400, 401) and error in ("invalid_client", "unauthorized_client", "invalid_grant"):
            description = redact(str(body.get("error_description") or error))
            return CredentialsInvalid(
                f"cua-cloud: the token endpoint refused the client credentials ({error}: {description})",
                provider=self.name, remedy=self._credentials_remedy(),
            )
        return None

    # -- HTTP --------------------------------------------------------------------------------------------------
    def _classify(self, status: int, message: str, body: Mapping[str, Any]) -> DeskctlError | None:
        low = message.lower()
        if "no_capacity" in low or (status == 503 and "capacity" in low):
            return CapacityUnavailable(f"cua-cloud: no sandbox available ({message})", provider=self.name,
                                       remedy="retry later: the warm pool is drained")
        return None

    def _request(
        self, method: str, url: str, action: str, *, idempotent: bool, ok: frozenset[int] = frozenset(),
        deadline: float | None = None, policy: RetryPolicy | None = None, **kwargs: Any,
    ) -> httpx.Response:
        """One authenticated request. A 401 or a redirect (an expired token) mints a new token and sends the
        request once more: the service acted on neither, so this is no blind retry."""
        extra = dict(kwargs.pop("headers", {}) or {})
        response: httpx.Response | None = None
        for attempt in (0, 1):
            headers = {**extra, "Authorization": f"Bearer {self._access_token(fresh=attempt == 1, policy=policy)}"}
            response = self._send(method, url, action, idempotent=idempotent, ok=ok | _REDIRECTS | {401},
                                  deadline=deadline, policy=policy, headers=headers, **kwargs)
            if response.status_code not in _REDIRECTS and response.status_code != 401:
                return response
            if kwargs.get("stream"):
                response.read()  # a streamed refusal: read (and so release) its short body
        assert response is not None
        if response.status_code == 401 and 401 in ok:
            return response
        if response.status_code == 401:
            raise error_from_response(response, self._context(action))
        raise CredentialsInvalid(
            f"cua-cloud: {action} failed: a freshly minted token was redirected to the login page "
            f"(HTTP {response.status_code})", provider=self.name, remedy=self._credentials_remedy(),
            details={"status": response.status_code},
        )

    def _api(self, method: str, path: str, action: str, *, base_url: str | None = None, **kwargs: Any
             ) -> httpx.Response:
        return self._request(method, f"{(base_url or self.base_url).rstrip('/')}{path}", action, **kwargs)

    # -- preflight ---------------------------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        """Read-only checks: the client-credentials exchange (mints a token, creates nothing), one authenticated
        read of the pool's claims (``GET ...?limit=1``: credentials, permission, the namespace exists), the warm
        pool's ready sandboxes where its status shows them, and leftovers. Platform and geometry are checked by
        the engine from :attr:`capabilities`."""
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)

        quick = self.retry.with_attempts_at_most(2)
        namespace = self.namespace(spec.platform)
        warmpool = str(self.options.get("warmpool") or namespace)
        checks.start()
        try:
            self._access_token(policy=quick)
            self._api("GET", self._claims_path(namespace), "list claims", idempotent=True, policy=quick,
                      params={"limit": 1, "labelSelector": f"{LABEL_MANAGED}=1"})
        except ProviderApiError as err:
            if err.status == 404:
                checks.add("fail", "compat.pool_unavailable",
                           f"the namespace {namespace} (a warm pool for {spec.platform.value}) does not exist for this "
                           f"account ({err.message})", "set CUA_CLOUD_NAMESPACE or -o namespace=... to a pool you have")
            else:
                checks.add_error(err)
            return checks.results
        except DeskctlError as err:
            code = err.code if isinstance(err, PreflightError | InfrastructureError) else "provider.unreachable"
            checks.add("fail", code, err.message, err.remedy)
            return checks.results
        checks.add("pass", "cua.credentials", f"the client credentials are accepted and may read claims in {namespace}")

        checks.start()
        try:
            pool = self._json(self._api(
                "GET", f"/api/k8s/apis/{API_VERSION}/namespaces/{namespace}/osgymsandboxwarmpools/{warmpool}",
                "read the warm pool", idempotent=True, policy=quick))
        except DeskctlError as err:
            checks.add("skip", "cua.capacity", f"the warm pool {warmpool} is not readable ({err.code})")
        else:
            status = pool.get("status") if isinstance(pool, dict) else None
            ready = next((status[k] for k in ("readyReplicas", "availableReplicas", "ready")
                          if isinstance(status, dict) and isinstance(status.get(k), int)), None)
            if ready is None:
                checks.add("skip", "cua.capacity", f"the warm pool {warmpool} does not show its ready sandboxes")
            elif ready > 0:
                checks.add("pass", "cua.capacity", f"the warm pool {warmpool} has {ready} ready sandbox(es)")
            else:
                checks.add("warn", "cua.capacity",
                           f"the warm pool {warmpool} has no ready sandbox now: a claim waits while it scales up, "
                           "or fails", "retry later, or use another pool")

        checks.start()
        try:
            owned = self._list_namespace(namespace, None, quick)
        except DeskctlError as err:
            checks.add("warn", "cua.leftovers", f"could not list deskctl claims: {err.message}")
        else:
            if owned:
                now = time.time()
                expired = [h for h in owned if past_expiry(h.labels, now)]
                ids = ", ".join(h.session_id for h in owned[:5]) + (" ..." if len(owned) > 5 else "")
                checks.add("warn", "cua.leftovers",
                           f"{len(owned)} deskctl claim(s) exist in {namespace} ({ids}), {len(expired)} past their "
                           "expiry; they hold sandboxes and may bill", "deskctl reap --provider cua-cloud")
            else:
                checks.add("pass", "cua.leftovers", "no deskctl claims are left over")
        return checks.results

    # -- create ------------------------------------------------------------------------------------------------
    def _ttl(self, spec: DesktopSpec, labels: Mapping[str, str]) -> float:
        lifetime = lifetime_seconds(spec, labels)
        if str(labels.get(LABEL_DETACHED, "")) == "1":
            # nobody renews a detached claim: it must last the session's whole life (and a little more)
            return lifetime + 300.0 if lifetime is not None else self.detached_ttl
        return min(self.claim_ttl, lifetime + 300.0) if lifetime is not None else self.claim_ttl

    def claim_body(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> dict[str, Any]:
        """The ``POST`` body of the session's claim."""
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        namespace = self.namespace(spec.platform)
        warmpool = str(self.options.get("warmpool") or namespace)
        annotations = {str(k): str(v) for k, v in labels.items()}
        annotations[LABEL_SESSION] = session_id
        k8s_labels = {LABEL_SESSION: _dns_label(session_id), LABEL_MANAGED: "1",
                      "app.kubernetes.io/created-by": "deskctl"}
        return {
            "apiVersion": API_VERSION,
            "kind": "OSGymSandboxClaim",
            "metadata": {"name": session_id, "labels": k8s_labels, "annotations": annotations},
            "spec": {
                "sandboxTemplateRef": {"name": str(self.options.get("template") or f"{warmpool}-template")},
                "warmpool": warmpool,
                "lifecycle": {"shutdownTime": _rfc3339(time.time() + self._ttl(spec, labels)),
                              "shutdownPolicy": self.shutdown_policy},
            },
        }

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        namespace = self.namespace(spec.platform)
        claim = self._post_claim(namespace, session_id, self.claim_body(spec, session_id, labels))
        handle = self._handle_from(claim, namespace, session_id)
        handle.data["platform"] = spec.platform.value
        handle.data["claim_ttl"] = self._ttl(spec, labels)
        expires = _float(labels.get(LABEL_EXPIRES))
        if math.isfinite(expires):
            handle.data["expires_at"] = expires
        return handle

    def _post_claim(self, namespace: str, session_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST one claim, once; after an ambiguous failure, release what it made before raising."""
        try:
            response = self._api("POST", self._claims_path(namespace), "create the claim", idempotent=False,
                                 json=body, timeout=self.create_timeout)
            claim = self._json(response)
            if not isinstance(claim, dict) or not (claim.get("metadata") or {}).get("name"):
                raise ProviderApiError("cua-cloud: create answered without a claim name", provider=self.name,
                                       status=response.status_code)
        except DeskctlError as err:
            if self._create_may_have_made_something(err):
                self._sweep(namespace, session_id, err)
            raise
        return claim

    def _rebind(self, handle: RemoteHandle, failed: Mapping[str, Any]) -> None:
        """Replace a claim that failed to bind (the warm pool was drained; a new pending claim is what makes it
        scale up, as Harbor does): release it (confirmed), then create it again from its own metadata and spec."""
        self.destroy(handle)
        metadata = failed.get("metadata") if isinstance(failed.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        body = {
            "apiVersion": API_VERSION, "kind": "OSGymSandboxClaim",
            "metadata": {"name": handle.resource_id, "labels": dict(metadata.get("labels") or {}),
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": dict(failed.get("spec") or {}),
        }
        self._post_claim(str(handle.data.get("namespace")), handle.session_id, body)

    @staticmethod
    def _create_may_have_made_something(err: DeskctlError) -> bool:
        if isinstance(err, RateLimited | PreflightError):
            return False  # refused before anything was made (429, 401, 403)
        if isinstance(err, ProviderUnreachable):
            return bool(err.details.get("sent", True))
        if isinstance(err, ProviderApiError) and err.status is not None and 400 <= err.status < 500:
            return False  # 409 AlreadyExists, 422 Invalid: refused
        return isinstance(err, InfrastructureError)

    def _sweep(self, namespace: str, session_id: str, cause: DeskctlError) -> None:
        """Release whatever a failed create made, found by name (authoritative) and by label. When the create's
        answer was lost the service may still be making the claim: it is looked for again over
        ``create_lookup_seconds``. A claim released (confirmed) is said so in the error of the cause's class;
        nothing found after a lost answer is :class:`CleanupIncomplete` saying how ``deskctl reap`` finds it."""

        def lookup() -> dict[str, RemoteHandle]:
            found: dict[str, RemoteHandle] = {}
            response = self._api("GET", f"{self._claims_path(namespace)}/{session_id}", "find the claim by name",
                                 idempotent=True, ok=frozenset({404}))
            if response.status_code != 404:
                claim = self._json(response)
                if isinstance(claim, dict):
                    found[session_id] = self._handle_from(claim, namespace, session_id)
            for handle in self._list_namespace(namespace, {LABEL_SESSION: session_id}, None):
                found.setdefault(handle.resource_id, handle)
            return found

        try:
            found = self._look_for_created(lookup, cause)
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"cua-cloud: create of {session_id} failed ({cause.message}) and what it made could not be "
                f"looked up: {err.message}", provider=self.name, details={"left": [session_id]},
                remedy="deskctl reap --provider cua-cloud (the claim's shutdownTime releases it at the latest)",
            ) from cause
        self._destroy_left_by_create(found, session_id, cause)
        if found:
            raise self._lost_create_cleaned(cause, session_id, sorted(found), "claim", "released") from cause
        if answer_lost(cause):
            raise self._lost_create_unresolved(
                cause, session_id, "claim",
                f"the name {session_id} in namespace {namespace} and the label "
                f"{LABEL_SESSION}={_dns_label(session_id)} (its shutdownTime releases it at the latest)",
            ) from cause

    def _handle_from(self, claim: Mapping[str, Any], namespace: str, session_id: str) -> RemoteHandle:
        metadata = claim.get("metadata") if isinstance(claim.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else {}
        assert isinstance(annotations, dict)
        spec = claim.get("spec") if isinstance(claim.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        name = str(metadata.get("name") or session_id)
        data: dict[str, Any] = {"base_url": self.base_url, "namespace": namespace, "warmpool": spec.get("warmpool"),
                                "svc_suffix": str(self.options.get("svc_suffix") or "")}
        sandbox = _bound_sandbox(claim)
        if sandbox:
            data["sandbox"] = sandbox
        platform = next((p.value for p in Platform if namespace.endswith(f"-{p.value}")), None)
        if platform:
            data["platform"] = platform
        return RemoteHandle(provider=self.name, session_id=str(annotations.get(LABEL_SESSION) or session_id),
                            resource_id=name, labels={str(k): str(v) for k, v in annotations.items()}, data=data)

    # -- readiness -----------------------------------------------------------------------------------------
    def _claim_url(self, handle: RemoteHandle) -> str:
        namespace = str(handle.data.get("namespace") or self.namespace(Platform.UBUNTU))
        return f"{self._claims_path(namespace)}/{handle.resource_id}"

    def _get_claim(self, handle: RemoteHandle, *, deadline: float | None = None) -> dict[str, Any] | None:
        """The claim, or None when it is gone (404)."""
        response = self._api("GET", self._claim_url(handle), "read the claim", idempotent=True, ok=frozenset({404}),
                             base_url=handle.data.get("base_url"), deadline=deadline)
        if response.status_code == 404:
            return None
        claim = self._json(response)
        return claim if isinstance(claim, dict) else None

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        last = "not polled"
        rebinds = 0
        for _ in self._polls(deadline):
            claim = self._get_claim(handle, deadline=deadline)
            if claim is None:
                raise SessionLost(f"cua-cloud: claim {handle.resource_id} disappeared while binding",
                                  provider=self.name)
            status = claim.get("status") if isinstance(claim.get("status"), dict) else {}
            assert isinstance(status, dict)
            phase = str(status.get("phase") or "Pending")
            last = f"phase {phase}"
            if phase == "Bound" and _bound_sandbox(claim):
                handle.data["sandbox"] = _bound_sandbox(claim)
                break
            if phase == "Failed":
                conditions = [c for c in (status.get("conditions") or []) if isinstance(c, dict)]
                reason = str(conditions[-1].get("message") or conditions[-1].get("reason")) if conditions else \
                    "no reason given"
                if rebinds < self.rebind_attempts and time.monotonic() < deadline:
                    rebinds += 1
                    self._rebind(handle, claim)
                    last = f"phase Failed ({redact(reason)}), claim made again ({rebinds} of {self.rebind_attempts})"
                    continue
                raise CapacityUnavailable(
                    f"cua-cloud: claim {handle.resource_id} failed to bind a sandbox from pool "
                    f"{handle.data.get('warmpool')}: {redact(reason)} (claims made: {rebinds + 1})", provider=self.name,
                    remedy="retry later: the warm pool is drained (a pending claim makes it scale up)",
                    details={"phase": phase},
                )
        else:
            raise self._timeout(handle, last)

        for _ in self._polls(deadline):
            try:
                response = self._guest(handle, "GET", "/platform", "read the guest platform", idempotent=True,
                                       deadline=deadline)
            except ProviderApiError as err:
                if err.status not in _GUEST_BUSY:
                    raise
                last = f"guest server not answering yet (HTTP {err.status})"
                continue
            reported = _PLATFORM_NAMES.get(response.text.strip().lower())
            wanted = handle.data.get("platform")
            if reported is not None and wanted and reported.value != wanted:
                raise CompatError(f"cua-cloud: pool {handle.data.get('warmpool')} gave a {reported.value} guest, "
                                  f"not {wanted}", code="compat.platform_mismatch", provider=self.name,
                                  remedy="choose the pool of this platform with -o namespace=...")
            break
        else:
            raise self._timeout(handle, last)

        self._check_screenshot_size(handle, "screen")

    def _timeout(self, handle: RemoteHandle, last: str) -> ReadinessTimeout:
        return ReadinessTimeout(
            f"cua-cloud: claim {handle.resource_id} was not ready in time (last: {last})", provider=self.name,
            remedy="raise ready_timeout; a pool scaling up from zero takes minutes", details={"last": last},
        )

    # -- destroy and listing -----------------------------------------------------------------------------------
    def destroy(self, handle: RemoteHandle) -> None:
        deadline = time.monotonic() + self.destroy_timeout
        base_url = handle.data.get("base_url")
        left = {"left": [f"claim {handle.data.get('namespace')}/{handle.resource_id}"], "session": handle.session_id}
        remedy = f"deskctl down {handle.session_id} (the claim's shutdownTime releases it at the latest)"
        last = ""
        try:
            self._api("DELETE", self._claim_url(handle), "release the claim", idempotent=True, ok=frozenset({404}),
                      base_url=base_url, deadline=deadline)
            for _ in self._polls(deadline):
                claim = self._get_claim(handle, deadline=deadline)
                if claim is None:
                    self._sandboxes.pop(handle.resource_id, None)
                    return
                metadata = claim.get("metadata") if isinstance(claim.get("metadata"), dict) else {}
                assert isinstance(metadata, dict)
                last = "terminating" if metadata.get("deletionTimestamp") else "present"
                if not metadata.get("deletionTimestamp"):
                    self._api("DELETE", self._claim_url(handle), "release the claim", idempotent=True,
                              ok=frozenset({404}), base_url=base_url, deadline=deadline)
        except DeskctlError as err:
            raise CleanupIncomplete(
                f"cua-cloud: claim {handle.resource_id} ({handle.session_id}) may still exist: {err.message}",
                provider=self.name, details={**left, "cause": err.code}, remedy=remedy,
            ) from err
        raise CleanupIncomplete(
            f"cua-cloud: claim {handle.resource_id} ({handle.session_id}) is still there after "
            f"{self.destroy_timeout:g}s ({last})", provider=self.name, details=left, remedy=remedy,
        )

    def _namespaces(self) -> list[str]:
        configured = self._setting("namespace", "CUA_CLOUD_NAMESPACE")
        if configured:
            return [configured]
        return [self.namespace(p) for p in sorted(self.capabilities.platforms, key=lambda p: p.value)]

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        handles: list[RemoteHandle] = []
        for namespace in self._namespaces():
            try:
                handles += self._list_namespace(namespace, selector, None)
            except ProviderApiError as err:
                if err.status != 404:  # a pool this account does not have holds nothing of ours
                    raise
        return handles

    def _list_namespace(self, namespace: str, selector: Mapping[str, str] | None,
                        policy: RetryPolicy | None) -> list[RemoteHandle]:
        wanted = {LABEL_MANAGED: "1", **{k: _dns_label(v) if k == LABEL_SESSION else v
                                         for k, v in (selector or {}).items()}}
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(wanted.items()) if k in (LABEL_MANAGED, LABEL_SESSION))
        handles: list[RemoteHandle] = []
        token: str | None = None
        seen: set[str] = set()
        while True:
            params: dict[str, Any] = {"labelSelector": label_selector, "limit": 100}
            if token:
                params["continue"] = token
            page = self._json(self._api("GET", self._claims_path(namespace), "list claims", idempotent=True,
                                        params=params, policy=policy))
            items = page.get("items") if isinstance(page, dict) else None
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, dict):
                    continue
                metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
                assert isinstance(metadata, dict)
                if not metadata.get("name") or metadata.get("deletionTimestamp"):
                    continue
                handle = self._handle_from(item, namespace, str(metadata["name"]))
                merged = {**(metadata.get("labels") or {}), **handle.labels}
                if any(merged.get(k) != v for k, v in (selector or {}).items()):
                    continue  # a server that ignores the selector, or a selector on an annotation
                handles.append(handle)
            meta = page.get("metadata") if isinstance(page, dict) else None
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token or token in seen:
                return handles
            seen.add(token)

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._get_claim(handle) is not None

    def keepalive(self, handle: RemoteHandle) -> None:
        """Move the claim's ``shutdownTime`` forward by its TTL, never past the session's own expiry."""
        ttl = float(handle.data.get("claim_ttl") or self.claim_ttl)
        until = time.time() + ttl
        expires = _float(handle.data.get("expires_at"))
        if math.isfinite(expires):
            until = min(until, max(time.time() + 60.0, expires + 300.0))
        response = self._api(
            "PATCH", self._claim_url(handle), "renew the claim", idempotent=True, ok=frozenset({404}),
            base_url=handle.data.get("base_url"), headers={"Content-Type": "application/merge-patch+json"},
            content=json.dumps({"spec": {"lifecycle": {"shutdownTime": _rfc3339(until)}}}).encode(),
        )
        if response.status_code == 404:
            raise SessionLost(f"cua-cloud: claim {handle.resource_id} is gone (released or reaped)",
                              provider=self.name)

    # -- the guest (OSWorld server on port 5000 behind the service proxy) -------------------------------------
    def _sandbox_name(self, handle: RemoteHandle) -> str:
        name = handle.data.get("sandbox") or self._sandboxes.get(handle.resource_id)
        if name:
            return str(name)
        claim = self._get_claim(handle)
        name = _bound_sandbox(claim) if claim is not None else None
        if not name:
            raise SessionLost(f"cua-cloud: claim {handle.resource_id} has no bound sandbox (gone or not bound)",
                              provider=self.name)
        self._sandboxes[handle.resource_id] = name
        return name

    def _guest(self, handle: RemoteHandle, method: str, path: str, action: str, *, idempotent: bool,
               deadline: float | None = None, **kwargs: Any) -> httpx.Response:
        base = str(handle.data.get("base_url") or self.base_url).rstrip("/")
        url = (f"{base}/api/svc/{handle.data.get('namespace')}/{self._sandbox_name(handle)}-server"
               f"{handle.data.get('svc_suffix') or ''}{path}")
        try:
            return self._request(method, url, action, idempotent=idempotent, deadline=deadline, **kwargs)
        except ProviderApiError as err:
            if err.status == 404 and deadline is None and self._get_claim(handle) is None:
                raise SessionLost(f"cua-cloud: claim {handle.resource_id} is gone (released or reaped)",
                                  provider=self.name, details={"status": 404},
                                  remedy="see deskctl ls; the claim's shutdownTime may have passed") from err
            raise

    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        body = self._json(self._guest(handle, "POST", "/screen_size", "read the screen size", idempotent=True))
        try:
            return int(body["width"]), int(body["height"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderApiError(f"cua-cloud: /screen_size is malformed: {redact(str(body))[:200]}",
                                   provider=self.name) from exc

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        png = self._guest(handle, "GET", "/screenshot", "take a screenshot", idempotent=True).content
        width, height = png_size(png, self.name)
        return Screenshot(png=png, width=width, height=height)

    def _execute(self, handle: RemoteHandle, command: list[str] | str, action: str, timeout: float,
                 runs_for: float | None = None) -> dict[str, Any]:
        """``runs_for``: how long the guest may take to answer (default ``timeout``), never past its cap."""
        body: dict[str, Any] = {"command": command, "shell": isinstance(command, str),
                                "timeout": max(1, math.ceil(timeout))}
        response = self._guest(handle, "POST", "/execute", action, idempotent=False, json=body,
                               timeout=min(timeout if runs_for is None else runs_for, GUEST_EXEC_CAP) + 30.0)
        result = self._json(response)
        if not isinstance(result, dict):
            raise ProviderApiError("cua-cloud: /execute answered an unexpected shape", provider=self.name)
        return result

    def act(self, handle: RemoteHandle, action: Action) -> None:
        if handle.data.get("platform") == Platform.WINDOWS.value:
            command = ["python", "-c", windows_input_code(action)]
        else:
            command = ["python3", "-c", _LINUX_INPUT, json.dumps(linux_input_ops(action)),
                       linux_pyautogui_code(action)]
        result = self._execute(handle, command, f"send {type(action).__name__.lower()}", 30.0)
        code = result.get("returncode", result.get("return_code"))
        if code != 0:
            error = redact(str(result.get("error") or result.get("stderr") or result.get("message") or ""))
            raise ProviderApiError(f"cua-cloud: the guest's input program failed (exit {code}): {error[-300:]}",
                                   provider=self.name, details={"exit_code": code})

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        if not command.strip():
            raise UsageError("empty command", code="usage.empty_command", provider=self.name)
        clean_env = check_exec_options(env, user, self.name)
        seconds = max(1, math.ceil(min(timeout, GUEST_EXEC_CAP - 5)))
        wrapped: list[str] | str
        runs_for: float | None = None
        if handle.data.get("platform") == Platform.WINDOWS.value:
            # nothing on the guest ends a Windows command at its timeout: only the guest's cap does, so the
            # answer is awaited that long (a shorter wait would fail a command that is still running there)
            runs_for = float(GUEST_EXEC_CAP)
            if user:
                raise UsageError("cua-cloud: running a command as another user is not supported on Windows",
                                 code="usage.unsupported", provider=self.name)
            # cmd.exe through shell=True; the guest's 120 s cap is the timeout
            wrapped = windows_background_line(command, cwd, clean_env) if background else \
                cmd_line(command, cwd=cwd, env=clean_env)
        else:
            # a login bash around the line (the guest user's profile, as Harbor runs it), and bash, not sh, for
            # the command itself: tasks written for Harbor's cua environment use bash syntax
            line = posix_line(command, cwd=cwd, env=clean_env, user=user, background=background, shell="bash")
            wrapped = ["timeout", "-k", "5", str(seconds), "bash", "-lc", line]
        try:
            result = self._execute(handle, wrapped, "run a command", float(seconds), runs_for)
        except ProviderApiError as err:
            # the guest answers 500 {"status": "error", "message": ...} when its own 120 s cap kills the command
            if err.status == 500 and "timed out" in err.message.lower():
                return ExecResult(exit_code=124, stdout="", stderr="")
            raise
        code = result.get("returncode", result.get("return_code"))
        ran = ExecResult(exit_code=int(code) if isinstance(code, int) else -1,
                         stdout=str(result.get("output", result.get("stdout")) or ""),
                         stderr=str(result.get("error", result.get("stderr")) or ""))
        if background and ran.exit_code == 0:
            return ExecResult(ran.exit_code, ran.stdout, ran.stderr, pid=background_pid(ran))
        return ran

    # -- files: the guest's /setup/upload and /file, one regular file each (FileTransfer does the rest) -------
    def _put_file(self, handle: RemoteHandle, local: Path, remote: str, policy: RetryPolicy | None = None) -> None:
        # the multipart body is streamed from the file (and rewound by httpx if a retry sends it again): an
        # upload replaces the file, so sending it twice is harmless
        with local.open("rb") as fh:
            self._guest(handle, "POST", "/setup/upload", f"upload {remote}", idempotent=True, policy=policy,
                        data={"file_path": remote},
                        files={"file_data": (local.name, fh, "application/octet-stream")})

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path, policy: RetryPolicy | None = None) -> None:
        import httpx

        action = f"download {remote}"
        try:
            response = self._guest(handle, "POST", "/file", action, idempotent=True, stream=True, policy=policy,
                                   data={"file_path": remote})
        except ProviderApiError as err:
            if err.status == 404 and "file not found" in err.message.lower():
                raise no_such_file(remote, "on the desktop", self.name) from err
            raise
        try:
            with local.open("wb") as fh:
                for chunk in response.iter_bytes(1 << 20):
                    fh.write(chunk)
        except httpx.HTTPError as exc:
            raise error_from_transport(exc, self._context(action)) from exc
        finally:
            response.close()

    # One file in one request where that settles it; else the shared way, whose exec round trips (make the
    # parent folder, tell a file from a folder) would otherwise precede every file. The guest answers 500 when
    # it cannot write the file (no parent folder) or read it (a folder): those, and only those, take the
    # shared way; a first try is never retried (a 500 there is expected), the shared way retries as usual.
    def upload(self, handle: RemoteHandle, local: str, remote: str) -> None:
        source = Path(local)
        if source.is_file() and not source.stat().st_mode & 0o111:  # an executable needs its chmod
            try:
                self._put_file(handle, source, remote, self.retry.with_attempts_at_most(1))
                return
            except (ProviderApiError, ProviderUnreachable) as err:
                if not _worth_the_shared_way(err):
                    raise
        super().upload(handle, local, remote)

    def download(self, handle: RemoteHandle, remote: str, local: str) -> None:
        target = Path(local)
        if target.parent.is_dir() and not target.is_dir():
            partial = target.with_name(f".{target.name}.deskctl-part")
            try:
                self._get_file(handle, remote, partial, self.retry.with_attempts_at_most(1))
                os.replace(partial, target)
                return
            except (ProviderApiError, ProviderUnreachable, UsageError) as err:
                # "File not found" too: the shared way tells a missing path from a folder a guest calls so
                if not (_worth_the_shared_way(err) or err.code == "usage.no_such_file"):
                    raise
            finally:
                partial.unlink(missing_ok=True)
        super().download(handle, remote, local)

    # -- the pointer ----------------------------------------------------------------------------------------
    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        """The guest's ``GET /cursor_position`` (pyautogui's position, in screenshot pixels). OSWorld answers
        ``[x, y]``; ``{"x": .., "y": ..}`` is taken too."""
        body = self._json(self._guest(handle, "GET", "/cursor_position", "read the pointer position",
                                      idempotent=True))
        pair = [body.get("x"), body.get("y")] if isinstance(body, dict) else body
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int | float) for v in pair):
            return int(pair[0]), int(pair[1])
        raise ProviderApiError(f"cua-cloud: /cursor_position is malformed: {redact(str(body))[:200]}",
                               provider=self.name)


def windows_background_line(command: str, cwd: str | None, env: Mapping[str, str]) -> str:
    """The cmd.exe line that starts ``command`` detached on a Windows guest and prints its process id.

    Not ``start /b``: a process cmd.exe starts inherits its handles, the guest server's output pipes among
    them, and the server's ``/execute`` waits for those pipes to close, so it would answer only when the app
    exits (or at its 120 s cap). PowerShell's ``Start-Process`` shell-executes the program without inheriting
    them and tells its id; the script travels base64-encoded (``-EncodedCommand``), so no quoting of cmd.exe's
    can break it."""
    import base64

    script = powershell_line(command, cwd=cwd, env=env, background=True)
    encoded = base64.b64encode(script.encode("utf-16-le")).decode()
    return f"powershell -NoProfile -NonInteractive -EncodedCommand {encoded}"


def _worth_the_shared_way(err: DeskctlError) -> bool:
    """Whether a one-request transfer's failure leaves the shared way worth taking: the guest's 500 (no parent
    folder, a folder where a file was meant) or what the shared way retries (a busy proxy, a dropped line)."""
    return isinstance(err, ProviderUnreachable) or (isinstance(err, ProviderApiError) and err.status in
                                                    (500, 502, 503, 504))


def _bound_sandbox(claim: Mapping[str, Any]) -> str | None:
    status = claim.get("status") if isinstance(claim.get("status"), dict) else None
    sandbox = status.get("sandbox") if isinstance(status, dict) else None
    name = sandbox.get("name") if isinstance(sandbox, dict) else None
    return str(name) if name and isinstance(status, dict) and status.get("phase") == "Bound" else None


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.inf
