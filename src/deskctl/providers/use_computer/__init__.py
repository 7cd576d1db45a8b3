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

The package: :mod:`.client` (the connection: key, requests, errors, reads), :mod:`.desktop` (display, input,
exec, files), :mod:`.checks` (preflight), :mod:`.provider` (lifecycle policy) and :mod:`.options` (the options,
declared once). Names are re-exported here lazily, so importing :mod:`.options` does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.providers.use_computer.client import DEFAULT_BASE_URL, FIXED_SIZES, IDLE_REAP_SECONDS
    from deskctl.providers.use_computer.desktop import key_name
    from deskctl.providers.use_computer.provider import UseComputerProvider

__all__ = ["DEFAULT_BASE_URL", "FIXED_SIZES", "IDLE_REAP_SECONDS", "UseComputerProvider", "key_name"]

_WHERE = {"DEFAULT_BASE_URL": "client", "FIXED_SIZES": "client", "IDLE_REAP_SECONDS": "client",
          "UseComputerProvider": "provider", "key_name": "desktop"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
