"""Provider ``ssh``: a desktop on any Linux host you can reach over SSH (see :mod:`.provider`)."""

from __future__ import annotations

from deskctl.providers.ssh.provider import SSHProvider, SshTarget, host_key_fingerprint

__all__ = ["SSHProvider", "SshTarget", "host_key_fingerprint"]
