"""Provider ``memory``: a reference desktop that is a pixel buffer in a folder, for the fast inner test loop.

It runs deskctl's real session, ledger, recording, CLI, MCP and view code over a desktop that needs nothing
installed: no X server, no engine, no network. It is also the smallest complete provider, the one to copy
(docs/providers.md, "The smallest provider"): every contract method is here, in order, and short.

What a desktop is here: one folder per desktop, ``runtime_dir()/memory/<session>/`` (``memory`` is the provider's
name: a subclass under another name has its own), so that ``deskctl up`` in one process and ``deskctl
do``/``down``/``reap`` in another reach the same desktop:

* ``desktop.json``: the marker, written before anything else (a create that dies is still found by its
  ``deskctl.session`` label): the handle with its labels, the size and the owner;
* ``screen``: the frame buffer, ``width * height`` pixels of 4 bytes (B, G, R, 0), black when made. A click
  leaves a small mark at its point (left red, middle green, right blue) so a screenshot shows it;
* ``events.jsonl``: every input event the screen received, one JSON object a line, as an X server reports it
  to the window under the pointer: ``kind`` (``motion``, ``press``, ``release``, ``key``, ``key_release``),
  ``x``, ``y``, ``button``, ``keysym`` (X keysym numbers) and ``state`` (X modifier and button masks);
* ``state.json``: the pointer, the buttons and keys held; ``typed.txt``: the text typed so far (what a focused
  text field would hold), readable through ``exec`` as ``$DESKCTL_MEMORY_DESKTOP/typed.txt``;
* ``clipboard`` and ``windows/<pid>.json`` (a window's title and the process that owns it);
* ``bin/``: the desktop's own tools, first on ``exec``'s PATH: ``xdpyinfo`` (the screen's size), ``xclip``
  (the clipboard file) and ``xmessage -title T`` (a window that lives as long as its process).

:class:`MemoryScreen` reads and writes that folder (under ``flock``); tests use it as their probe window.

Destroyed means the folder is gone and no process carrying ``DESKCTL_SESSION=<session>`` (what ``exec``
started) is alive. There is no backend-side backstop to set: nothing runs or bills while a desktop exists; after
its owner dies (SIGKILL) the folder, and whatever ``exec`` left running, stay until ``deskctl reap`` (owner gone,
or expired) destroys them. The event log grows by one line per input event for the desktop's life.

Harness: ``exec`` runs ``sh -c`` on this host (no isolation, as the ``xvfb`` provider) with the desktop's tools
first on PATH and no DISPLAY; ``user`` through sudo, only when deskctl runs as root. ``upload``/``download`` copy
files on this host's filesystem (the shared :class:`~deskctl.providers._files.FileTransfer`). Provider options:
none.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from deskctl.core.png import encode_png
from deskctl.errors import CleanupIncomplete, ProviderApiError, ReadinessTimeout, SessionLost, UsageError
from deskctl.platforms import Platform
from deskctl.providers._files import FileTransfer
from deskctl.providers._guest import GuestActions, background_pid, check_exec_options, posix_line, run_here
from deskctl.providers._procs import SESSION_ENV, alive, other_user, tagged_processes, wait_gone
from deskctl.providers.base import (
    LABEL_CREATED,
    LABEL_OWNER,
    LABEL_SESSION,
    Capabilities,
    ExecResult,
    Provider,
    RawFrame,
    RemoteHandle,
    Screenshot,
)
from deskctl.providers.memory.handle_data import MemoryHandleData
from deskctl.providers.memory.screen import DESKTOP_ENV, MARKS, Input, MemoryScreen

if TYPE_CHECKING:
    from deskctl.actions import Action
    from deskctl.checks import CheckResult
    from deskctl.spec import DesktopSpec

__all__ = ["DESKTOP_ENV", "MemoryProvider", "MemoryScreen"]

_DEFAULT_SIZE = (1024, 768)


def _tools() -> str:
    from importlib.resources import files

    return files("deskctl.providers.memory").joinpath("guest", "tools.py.in").read_text()


class MemoryProvider(GuestActions, FileTransfer, Provider):
    """Desktops that are a pixel buffer in a folder. ``handle.data``: :class:`MemoryHandleData`."""

    name = "memory"
    options_model = "deskctl.providers.memory.options:Options"
    capabilities = Capabilities(
        platforms=frozenset({Platform.UBUNTU}),
        settable_geometry=True,
        min_size=(64, 64),
        max_size=(8192, 8192),
        exec=True,
        exec_streams_separate=True,
        files=True,
        labels=True,
        server_ttl=False,
        isolation="none",
        start_url=False,
        local=True,
        billing="free",
        cursor_position=True,
        clipboard=True,
        windows=True,
        snapshots=True,
    )

    # -- before anything is paid for -------------------------------------------------------------------------
    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        from deskctl.checks import CheckRecorder

        checks = CheckRecorder(self.name)
        checks.add("pass", "memory.ready", "the memory provider needs nothing installed")
        return checks.results

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _base(self) -> Path:
        """The folder of this provider's desktops (by name: a subclass registered under another name keeps its
        own, so neither lists nor reaps the other's)."""
        from deskctl.paths import runtime_dir

        base = runtime_dir() / self.name
        base.mkdir(mode=0o700, exist_ok=True)
        return base

    def _dir(self, handle: RemoteHandle) -> Path:
        """The desktop's folder (the provider's folder for the session in a row that does not name it)."""
        return Path(MemoryHandleData.of(handle).dir or self._base() / handle.session_id)

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        from deskctl.checks.compat import require_platform

        require_platform(self, spec.platform)
        if spec.start_url:
            raise self._unsupported("open a start URL (it has no browser)")
        width, height = (spec.geometry.width, spec.geometry.height) if spec.geometry else _DEFAULT_SIZE
        directory = self._base() / session_id
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            raise ProviderApiError(f"a desktop for session {session_id} already exists in {directory}",
                                   provider=self.name) from None
        except OSError as exc:
            raise ProviderApiError(f"cannot make {directory}: {exc.strerror}", provider=self.name) from exc
        labels = {LABEL_SESSION: session_id, LABEL_OWNER: f"{socket.gethostname()}:{os.getpid()}",
                  LABEL_CREATED: str(int(time.time())), **labels}
        handle = RemoteHandle(provider=self.name, session_id=session_id, resource_id=f"memory:{session_id}",
                              labels=labels, data=MemoryHandleData(dir=str(directory), geometry=f"{width}x{height}",
                                                                    platform=spec.platform.value).to_data())
        screen = MemoryScreen(directory)
        try:
            # the marker first: from here on, a crash leaves a desktop list_owned finds by its labels
            screen.write_json("desktop.json", {"handle": handle.to_dict(), "size": [width, height]})
            (directory / "lock").touch(mode=0o600)
            (directory / "windows").mkdir()
            (directory / "clipboard").write_bytes(b"")
            (directory / "events.jsonl").write_bytes(b"")
            screen.write_json("state.json", {"pointer": [width // 2, height // 2], "buttons": [], "keys": []})
            self._install_tools(directory / "bin")
            (directory / "screen").write_bytes(bytes(width * height * 4))
        except OSError as exc:
            with contextlib.suppress(Exception):
                self.destroy(handle)
            raise ProviderApiError(f"cannot make the memory desktop in {directory}: {exc}",
                                   provider=self.name) from exc
        return handle

    @staticmethod
    def _install_tools(bin_dir: Path) -> None:
        import shlex

        bin_dir.mkdir()
        (bin_dir / "tools.py").write_text(_tools())
        for tool in ("xdpyinfo", "xclip", "xmessage"):
            path = bin_dir / tool
            path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S "
                            f"{shlex.quote(str(bin_dir / 'tools.py'))} {tool} \"$@\"\n")
            path.chmod(0o755)

    def _screen(self, handle: RemoteHandle) -> MemoryScreen:
        screen = MemoryScreen(self._dir(handle))
        if not screen.exists():
            raise SessionLost(f"the memory desktop of {handle.session_id} is gone", provider=self.name)
        return screen

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        """Ready as soon as create returned: the folder holds a whole frame buffer of the asked size."""
        screen = MemoryScreen(self._dir(handle))
        width, height = screen.size if screen.exists() else (0, 0)
        if not screen.exists() or (screen.dir / "screen").stat().st_size != width * height * 4:
            raise ReadinessTimeout(f"the memory desktop in {screen.dir} is incomplete", provider=self.name)

    def destroy(self, handle: RemoteHandle) -> None:
        """End what ``exec`` started on the desktop, then remove its folder. Idempotent."""
        left = [f"process {pid}" for pid in self._end_processes(handle.session_id)]
        directory = self._dir(handle)
        shutil.rmtree(directory, ignore_errors=True)
        if directory.exists():
            left.append(str(directory))
        if left:
            raise CleanupIncomplete(f"memory desktop {handle.session_id} is not fully gone: {', '.join(left)}",
                                    provider=self.name, remedy="deskctl reap",
                                    details={"left": left, "session_id": handle.session_id})

    @staticmethod
    def _end_processes(session_id: str) -> list[int]:
        """SIGTERM, then SIGKILL, every process carrying the session's tag; the pids still alive after that."""
        live = tagged_processes(session_id)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid, ticks in live:
                if alive(pid, ticks):
                    with contextlib.suppress(OSError):
                        os.kill(pid, sig)
            still = set(wait_gone(live, time.monotonic() + 5.0))
            live = [(pid, ticks) for pid, ticks in live if pid in still]
        return [pid for pid, _ in live]

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        from deskctl.paths import runtime_dir

        found: list[RemoteHandle] = []
        base = runtime_dir() / self.name
        if not base.is_dir():
            return found
        for directory in sorted(p for p in base.iterdir() if p.is_dir()):
            marker = MemoryScreen(directory).read_marker()
            try:  # a folder without marker: a create that died at once
                handle = RemoteHandle.from_dict(marker["handle"]) if marker else RemoteHandle(
                    self.name, directory.name, f"memory:{directory.name}", labels={LABEL_SESSION: directory.name},
                    data=MemoryHandleData(dir=str(directory)).to_data())
            except (KeyError, TypeError, ValueError):
                continue
            if selector and any(handle.labels.get(k) != v for k, v in selector.items()):
                continue
            found.append(handle)
        return found

    def is_alive(self, handle: RemoteHandle) -> bool:
        return self._dir(handle).exists()

    # -- while open ------------------------------------------------------------------------------------------
    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        return self._screen(handle).size

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        frame = self.raw_frame(handle)
        return Screenshot(encode_png(frame.data, frame.width, frame.height, frame.mode), frame.width, frame.height)

    def raw_frame(self, handle: RemoteHandle) -> RawFrame:
        screen = self._screen(handle)
        width, height = screen.size
        return RawFrame(screen.frame(), width, height, "BGRX")

    def act(self, handle: RemoteHandle, action: Action) -> None:
        screen = self._screen(handle)
        with screen.locked():
            change = Input(screen)
            change.apply(action)
            change.commit()
        for x, y, button in change.marks:
            screen.fill(x - 1, y - 1, 3, 3, MARKS[button])

    def cursor_position(self, handle: RemoteHandle) -> tuple[int, int]:
        x, y = self._screen(handle).state()["pointer"]
        return int(x), int(y)

    def exec(self, handle: RemoteHandle, command: str, timeout: float = 60.0, *, cwd: str | None = None,
             env: Mapping[str, str] | None = None, user: str | None = None,
             background: bool = False) -> ExecResult:
        """Run ``command`` with ``sh -c`` on this host, the desktop's tools first on PATH, tagged with the
        session (destroy ends what it left running). 124 on timeout; ``background`` returns its pid at once."""
        extra = check_exec_options(env, user, self.name)
        other = self._other_user(user)
        screen = self._screen(handle)
        tags = {SESSION_ENV: handle.session_id, DESKTOP_ENV: str(screen.dir),
                "PATH": f"{screen.dir / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        if other is not None:
            extra = {**tags, **extra}  # sudo resets the environment: the tags go in explicitly
        base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY")}
        line = posix_line(command, cwd=cwd, env=extra, user=other, background=background)
        exit_code, out, err = run_here(line, timeout, env={**base, **tags}, provider=self.name)
        result = ExecResult(exit_code, out.decode(errors="replace"), err.decode(errors="replace"))
        if background and result.exit_code == 0:
            return ExecResult(0, result.stdout, result.stderr, pid=background_pid(result))
        return result

    def _other_user(self, user: str | None) -> str | None:
        return other_user(user, self.name)

    # -- files (FileTransfer: one regular file at a time, on this host) --------------------------------------
    def _put_file(self, handle: RemoteHandle, local: Path, remote: str) -> None:
        self._copy(str(local), remote)

    def _get_file(self, handle: RemoteHandle, remote: str, local: Path) -> None:
        self._copy(remote, str(local))

    def _copy(self, source: str, target: str) -> None:
        try:
            shutil.copyfile(source, target)
        except FileNotFoundError as exc:
            from deskctl.providers._files import no_such_file

            raise no_such_file(source, "on the desktop", self.name) from exc
        except OSError as exc:
            raise UsageError(f"cannot copy {source} to {target}: {exc.strerror}", code="usage.bad_path",
                             provider=self.name) from exc

    # -- clipboard and windows: the desktop's own files ------------------------------------------------------
    def clipboard_get(self, handle: RemoteHandle) -> str:
        screen = self._screen(handle)
        try:
            return (screen.dir / "clipboard").read_bytes().decode(errors="replace")
        except OSError as exc:
            raise SessionLost(f"the memory desktop of {handle.session_id} is gone", provider=self.name) from exc

    def clipboard_set(self, handle: RemoteHandle, text: str) -> None:
        screen = self._screen(handle)
        tmp = screen.dir / f".clipboard.{os.getpid()}"
        try:
            tmp.write_bytes(text.encode())
            os.replace(tmp, screen.dir / "clipboard")
        except OSError as exc:
            raise SessionLost(f"the memory desktop of {handle.session_id} is gone", provider=self.name) from exc

    def window_titles(self, handle: RemoteHandle) -> list[str]:
        return [str(w["title"]) for w in self._screen(handle).windows() if w.get("title")]

