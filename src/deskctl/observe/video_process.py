"""The video process of a detached session (``deskctl up --record DIR --video``; see
:mod:`deskctl.recording_video`): ``python -m deskctl.observe.video_process SESSION DIR FPS MAX_SECONDS MAX_MB``
captures until SIGTERM/SIGINT/SIGHUP, the session's end, or the bounds, then finishes the file and exits."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from pathlib import Path

from deskctl.recording_video import VideoOptions, capture


def main(session_id: str, directory: str, fps: str, max_seconds: str, max_mb: str) -> int:
    """The detached video process: capture until SIGTERM/SIGINT, the session's end or the bounds."""
    from deskctl.ledger import open_ledger
    from deskctl.lifecycle import TERMINAL_STATUSES
    from deskctl.providers import get_provider
    from deskctl.providers.base import RemoteHandle
    from deskctl.recording import Recorder

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    ledger = open_ledger()
    try:
        record = ledger.get(session_id)
        if record is None or record.handle is None:
            return 1
        stored = record.spec or {}
        options = VideoOptions(fps=int(fps), max_seconds=float(max_seconds), max_mb=float(max_mb))
        provider = get_provider(record.provider, dict(stored.get("provider_options") or {}))

        def still_on() -> bool:
            now = ledger.get(session_id)
            return now is not None and now.status not in TERMINAL_STATUSES and now.status != "destroying"

        try:
            capture(provider, RemoteHandle.from_dict(record.handle), Recorder(Path(directory)), session_id,
                    options, stop, still_on)
        finally:
            with contextlib.suppress(Exception):
                provider.close()
    finally:
        ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
