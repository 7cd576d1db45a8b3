"""``python -m deskctl.agent``: the same as the ``deskctl-agent`` console script."""

from __future__ import annotations

from deskctl.agent.server import main

if __name__ == "__main__":
    raise SystemExit(main())
