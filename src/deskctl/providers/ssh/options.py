"""The ssh provider's options: the one declaration that ``-o KEY=VALUE`` (and ``--host``,
``--accept-new-host-key``), ``[providers.ssh]``, the environment, ``deskctl providers --json`` and docs/providers.md
read (at run time through ``_option_table.py``, made from it). Secrets are never options (they would be stored
with the spec): the key's passphrase, a private key and a password come from the environment or the keyring."""

from __future__ import annotations

from typing import ClassVar

from deskctl.providers._http_options import number
from deskctl.providers.options import ProviderOptions, option
from deskctl.providers.ssh.target import ENV_HOST, ENV_KEY_FILE, ENV_KNOWN_HOSTS, ENV_REMOTE_DIR

__all__ = ["Options"]


class Options(ProviderOptions):
    """Where the desktop runs, how deskctl gets in, and what runs on the host."""

    provider: ClassVar[str] = "ssh"

    host: str | None = option(None, doc="user@host[:port] or an alias of the ssh config (also --host)", env=ENV_HOST)
    port: int | None = option(None, doc="the SSH port (default: the target's, the ssh config's, else 22)",
                              bound="provider_option", ge=1, le=65535)
    user: str | None = option(None, doc="the remote user (default: the target's, the ssh config's, else yours)")
    ssh_config: bool | str = option(True, doc="the OpenSSH client config (true: ~/.ssh/config when it exists; "
                                              "false: none)")
    jump: str | None = option(None, doc="jump hosts, OpenSSH -J syntax (default: the ssh config's ProxyJump)")
    key_file: str | None = option(None, doc="the private key file (its passphrase from "
                                            "DESKCTL_SSH_KEY_PASSPHRASE)", env=ENV_KEY_FILE)
    known_hosts: str | None = option(None, doc="the known_hosts file (default ~/.ssh/known_hosts)",
                                     env=ENV_KNOWN_HOSTS)
    accept_new_host_key: bool = option(False, doc="record an unknown host's key on first use (also "
                                                  "--accept-new-host-key); a changed key is always refused")
    agent: bool = option(True, doc="try the SSH agent (SSH_AUTH_SOCK)")
    xvfb_path: str = option("Xvfb", doc="the Xvfb binary on the host (default: from the remote PATH)")
    remote_dir: str | None = option(None, doc="where session folders go on the host, relative to the remote home "
                                              "(default ~/.cache/deskctl/ssh)", env=ENV_REMOTE_DIR)
    connect_timeout: float = number(15.0, "seconds to connect and authenticate", gt=0)
    compression: bool = option(False, doc="SSH zlib compression")
    incremental_capture: bool = option(True, doc="screenshots fetch only what X DAMAGE reports changed")
    window_manager: bool = option(False, doc="start a window manager (also the spec's window_manager)")
    window_manager_command: str = option("openbox", doc="the window manager's command")
    browser: str | None = option(None, doc="the Chromium a start URL opens in on the host, a command name or path "
                                           "(default: the first of chromium, chromium-browser, google-chrome found)")
