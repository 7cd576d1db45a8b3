"""Provider ``ssh``: a desktop on any Linux host you can reach over SSH (the whole story in :mod:`.provider`).

One concern per module: :mod:`.target` (``user@host:port``, the OpenSSH client config, the known_hosts policy
and the settings they make), :mod:`.connection` (the paramiko transport, its channels, the tunnel to the remote
X socket), :mod:`.scripts` (the shell scripts run on the host, kept as data files in ``sh/``), :mod:`.frames`
(screenshots by damage tracking), :mod:`.desktop` (the connections and an open desktop: display, input, exec),
:mod:`.files` (SFTP and tar streams), :mod:`.provider` (:class:`SSHProvider`: preflight and the lifecycle) and
:mod:`.options` (the options, declared once). Names are re-exported here lazily, so importing :mod:`.options`
does not load the rest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskctl.providers.ssh.provider import SSHProvider
    from deskctl.providers.ssh.target import SshTarget, host_key_fingerprint

__all__ = ["SSHProvider", "SshTarget", "host_key_fingerprint"]

_WHERE = {"SSHProvider": "provider", "SshTarget": "target", "host_key_fingerprint": "target"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
