"""``deskctl view``: watch (and with --control, drive) a desktop in a web browser."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

import click

from deskctl.cli._common import Number, json_option, note
from deskctl.lifecycle import TERMINAL_STATUSES, SessionStatus

__all__ = ["view"]


class _GoneWatch:
    """Whether the viewed desktop has gone: the ledger's record (a ``deskctl down`` or a reap elsewhere ends it)
    every second, the provider's own word every few seconds (a desktop killed from outside)."""

    LEDGER_SECONDS = 1.0
    PROVIDER_SECONDS = 5.0

    def __init__(self, desk: Any, book: Any) -> None:
        self.desk = desk
        self.book = book
        self._next_ledger = self._next_provider = time.monotonic()

    def gone(self) -> Any:
        """A ``provider.session_lost`` error (exit 20) once the desktop has gone, else None."""
        from deskctl.errors import DeskctlError, SessionLost

        now = time.monotonic()
        why = None
        if now >= self._next_ledger:
            self._next_ledger = now + self.LEDGER_SECONDS
            record = self.book.get(self.desk.id)
            if record is None or record.status in (SessionStatus.DESTROYING, *TERMINAL_STATUSES):
                why = "its session ended" + (f" ({record.status}: {record.reason})" if record and record.reason
                                             else "")
        if why is None and now >= self._next_provider and self.desk.handle is not None:
            self._next_provider = now + self.PROVIDER_SECONDS
            try:
                alive = self.desk.provider.is_alive(self.desk.handle)
            except (DeskctlError, OSError):  # unreachable for a moment: ask again later
                alive = True
            if not alive:
                why = f"{self.desk.provider_name} says it no longer exists"
        if why is None:
            return None
        return SessionLost(f"the desktop {self.desk.id} is gone: {why}; the view ends",
                           provider=self.desk.provider_name, remedy="deskctl ls --all shows how it ended")


@click.command()
@click.argument("session_id")
@click.option("--control", is_flag=True,
              help="Pass clicks, drags, scrolls and keys from the page to the desktop (default: view only).")
@click.option("--takeover", is_flag=True,
              help="With --control: the page has a Take control button; while the person holds the desktop the "
                   "agent's actions wait (or fail with session.paused) and the agent's help requests show.")
@click.option("--port", type=Number("port"), default=0, show_default=True, envvar="DESKCTL_VIEW_PORT",
              show_envvar=True, help="Port on 127.0.0.1; 0 picks a free one.")
@click.option("--fps", type=Number("fps"), default=30.0, show_default=True,
              help="Most frames a second to capture (a cloud provider gives what its screenshot API allows).")
@click.option("--quality", type=Number("quality"), default=80, show_default=True, help="JPEG quality.")
@json_option
def view(session_id: str, control: bool, takeover: bool, port: int, fps: float, quality: int,
         as_json: bool) -> None:
    """Serve a live view of a desktop on 127.0.0.1 and print its URL (with its access token) on stdout.

    The page streams the screen while someone watches; with --control, input on the page goes to the desktop.
    Ctrl-C stops the view and leaves the desktop running (end it with deskctl down).
    """
    from deskctl.cli.session_cmds import _ledger
    from deskctl.session import attach
    from deskctl.view import ViewServer

    stop = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        stop.set()

    with _ledger() as book:
        desk = attach(session_id, ledger=book)
        try:
            server = ViewServer(desk, port=port, control=control, fps=fps, quality=quality,
                                takeover=takeover).start()
            previous = signal.signal(signal.SIGTERM, on_term)
            try:
                width, height = server.size
                if as_json:
                    click.echo(json.dumps({"id": desk.id, "url": server.url, "width": width, "height": height,
                                           "control": control, "takeover": takeover}, sort_keys=True))
                else:
                    click.echo(server.url)
                sys.stdout.flush()  # a reader of a pipe gets the URL now, not at exit
                note(f"viewing {desk.id} ({width}x{height} on {desk.provider_name}), "
                     + ("control ON: the page's clicks and keys reach the desktop" if control else "view only")
                     + "; Ctrl-C stops the view, the desktop stays up")
                gone = None
                try:
                    # wake now and then: a feed that failed, or a desktop that went while nobody watched (deskctl
                    # down elsewhere, its expiry, a kill from outside), ends the view
                    watch = _GoneWatch(desk, book)
                    while not stop.wait(0.5) and server.feed.error is None:
                        gone = watch.gone()
                        if gone is not None:
                            break
                except KeyboardInterrupt:
                    pass
            finally:
                signal.signal(signal.SIGTERM, previous)
                server.stop()
            if server.feed.error is not None:
                raise server.feed.error
            if gone is not None:
                raise gone
            note(f"view of {desk.id} stopped ({server.frames_sent} frames sent); the desktop is still up")
        finally:
            desk.release()
