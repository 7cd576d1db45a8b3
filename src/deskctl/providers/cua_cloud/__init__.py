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

The package: :mod:`.client` (the connection: token, claims API, guest requests, errors, reads), :mod:`.guest`
(the desktop), :mod:`.input` (input programs), :mod:`.checks` (preflight), :mod:`.provider` (lifecycle policy)
and :mod:`.options` (the options, declared once). Names are re-exported here lazily, so importing
:mod:`.options` (``deskctl providers --json``) does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.providers.cua_cloud.client import DEFAULT_BASE_URL, DEFAULT_TOKEN_URL, LABEL_MANAGED, UBUNTU_SIZE
    from deskctl.providers.cua_cloud.guest import windows_background_line
    from deskctl.providers.cua_cloud.input import (
        _LINUX_INPUT,  # noqa: F401  (tests read the guest's input program)
        linux_input_ops,
        linux_pyautogui_code,
        windows_input_code,
    )
    from deskctl.providers.cua_cloud.provider import CuaCloudProvider

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_TOKEN_URL", "LABEL_MANAGED", "UBUNTU_SIZE", "CuaCloudProvider",
           "linux_input_ops", "linux_pyautogui_code", "windows_background_line", "windows_input_code"]

_WHERE = {
    "DEFAULT_BASE_URL": "client", "DEFAULT_TOKEN_URL": "client", "LABEL_MANAGED": "client", "UBUNTU_SIZE": "client",
    "CuaCloudProvider": "provider", "windows_background_line": "guest", "_LINUX_INPUT": "input",
    "linux_input_ops": "input", "linux_pyautogui_code": "input", "windows_input_code": "input",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
