"""The in-desktop agent: one authenticated TCP connection (TLS optional) that serves a desktop's screen, input,
commands and files from inside it, for desktops deskctl cannot reach over X11 (a remote Docker engine, a
Kubernetes pod). ``server`` runs in the desktop (``deskctl-agent``), ``client`` is its provider-side
:class:`~deskctl.agent.client.AgentDriver`, ``protocol`` the framing both speak. See docs/agent.md.

This package imports nothing outside the standard library and the few deskctl modules the desktop image copies
(:data:`deskctl.providers.docker.images.AGENT_FILES`), so the image needs only python3 and python3-xlib.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PORT", "TOKEN_FILE"]

#: the TCP port the agent listens on in a desktop image (``DESKCTL_AGENT_PORT`` overrides it)
DEFAULT_PORT = 7390
#: where the agent reads its session token inside a desktop (written by the provider after create)
TOKEN_FILE = "/run/deskctl/agent/token"
