"""Provider ``ssh``: a desktop on any Linux host you can reach over SSH (the whole story in :mod:`.provider`).

One concern per module: :mod:`.target` (``user@host:port``, the OpenSSH client config, the known_hosts policy
and the settings they make), :mod:`.connection` (the paramiko transport, its channels, the tunnel to the remote
X socket), :mod:`.scripts` (the shell scripts run on the host, kept as data files in ``sh/``), :mod:`.frames`
(screenshots by damage tracking) and :mod:`.provider` (:class:`SSHProvider` and a desktop's state in this
process)."""

from __future__ import annotations

from deskctl.providers.ssh.provider import SSHProvider, SshTarget, host_key_fingerprint

__all__ = ["SSHProvider", "SshTarget", "host_key_fingerprint"]
