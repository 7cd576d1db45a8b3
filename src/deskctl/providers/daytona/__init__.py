"""Daytona sandboxes as desktops: Windows (the ``windows`` snapshot) and Linux (the default snapshot with
computer use), over Daytona's classic REST API and the toolbox computer-use API, with httpx and tenacity.

The contract was read from github.com/daytonaio/daytona (v0.190.0) and the generated ``daytona-api-client``
(docs/daytona.md). What the caller may rely on:

- **Auth**: ``DAYTONA_API_KEY`` as Bearer, or ``DAYTONA_JWT_TOKEN`` plus ``X-Daytona-Organization-ID`` from
  ``DAYTONA_ORGANIZATION_ID``; each from the environment, then the keyring (:func:`deskctl.credentials.resolve`).
  ``DAYTONA_API_URL`` (default ``https://app.daytona.io/api``) and ``DAYTONA_TARGET`` (region) are read too.
  Secrets are registered for redaction and never stored in a handle.
- **Create**: the session id is the sandbox name; the deskctl labels plus ``deskctl.managed=1``; backstops
  ``autoStopInterval`` (idle minutes, from the session's limits), ``autoDeleteInterval=0`` (delete on stop) and
  ``ttlMinutes`` (wall-clock). Never cpu, memory or disk (the service rejects them with a snapshot). A create
  is never retried blindly: after a timeout, a 5xx or 400 "Sandbox failed to start", what was made is found by
  name and by label and destroyed before the error is raised; when the answer was lost the lookup is repeated
  over ``create_lookup_seconds``, and nothing found is :class:`~deskctl.errors.CleanupIncomplete` (``leaked``).
- **Gone**: decided by ``GET /sandbox/{id}`` (404, ``destroyed``, stopped, archived, errored), never by a
  toolbox message's words; a 404 while the sandbox runs is a route the service lacks.
- **Readiness**: state ``started`` (``error``/``build_failed`` fail at once with ``errorReason``), computer use
  started and ``active`` (503 while the plugin loads is retried until the deadline), then a test screenshot
  whose size must equal ``display/info``.
- **Preflight** (read-only, nothing dialled without credentials): ``GET /config``, one authenticated list,
  ``GET /api-keys/current`` (a key without ``write:sandboxes`` or ``delete:sandboxes`` is
  ``credentials.forbidden``; its ``organizationId`` lets the quota be read without ``DAYTONA_ORGANIZATION_ID``),
  the region quota, and leftovers.
- **Destroy**: DELETE, retried on 409 while a transition runs, then GET until 404 or ``destroyed``; a 404 is
  success. Unconfirmed is :class:`~deskctl.errors.CleanupIncomplete` naming the sandbox; a 403 (the key lacks
  ``delete:sandboxes``) says so and names the TTL that will end the sandbox.
- **Listing** (reap, preflight leftovers): the list is eventually consistent, so every listed sandbox is
  confirmed by ``GET`` before it is called a leftover.
- **Exec**: ``process/execute`` with its own ``cwd`` and ``envs`` fields; another user through ``sudo -n`` and
  a detached start through :func:`~deskctl.providers._guest.posix_line` (``cmd.exe`` lines from
  :func:`~deskctl.providers._guest.cmd_line` on Windows). The service merges stdout and stderr; on Linux the
  line sends stderr to an unlinked temp file and prints it after a random marker, so the two come back apart;
  on Windows the result has ``merged=True``. A command that outlives its timeout is killed by the service and
  reported as exit code 124 (as GNU ``timeout`` does).
- **Files**: ``files/bulk-upload`` (multipart, the file streamed from disk) and ``files/bulk-download`` (a
  multipart answer streamed to disk; an ``error`` part for a missing file is ``usage.no_such_file``),
  ``files/info``, ``files/folder`` and ``files/permissions``; directories as one tar unpacked by ``exec``
  (:class:`~deskctl.providers._files.FileTransfer`). Relative paths resolve against the sandbox's work dir.
- **Snapshots**: ``POST /sandbox/{id}/snapshot`` (with memory on a VM class), waited until ``active``; a restore is
  a sandbox created from it under the same name (:mod:`.snapshots`, docs/episodes.md).
- **Pointer**: ``computeruse/mouse/position``. Clipboard, launch, open_url and window titles are commands on
  the guest (:class:`~deskctl.providers._guest.GuestActions`).


The package: :mod:`.client` (the connection: auth, URLs, requests, errors, reads), :mod:`.toolbox` (the
desktop: display, input, exec, files), :mod:`.checks` (preflight), :mod:`.provider` (lifecycle policy) and
:mod:`.options` (the options, declared once). Names are re-exported here lazily, so importing
:mod:`.options` (``deskctl providers --json``) does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.providers._multipart import MultipartReader
    from deskctl.providers.daytona.client import DEFAULT_API_URL, LABEL_MANAGED, WINDOWS_RESOURCES
    from deskctl.providers.daytona.provider import DaytonaProvider
    from deskctl.providers.daytona.toolbox import toolbox_key_name

__all__ = ["DEFAULT_API_URL", "LABEL_MANAGED", "WINDOWS_RESOURCES", "DaytonaProvider", "MultipartReader",
           "toolbox_key_name"]

_WHERE = {
    "DEFAULT_API_URL": "deskctl.providers.daytona.client",
    "LABEL_MANAGED": "deskctl.providers.daytona.client",
    "WINDOWS_RESOURCES": "deskctl.providers.daytona.client",
    "DaytonaProvider": "deskctl.providers.daytona.provider",
    "MultipartReader": "deskctl.providers._multipart",
    "toolbox_key_name": "deskctl.providers.daytona.toolbox",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
