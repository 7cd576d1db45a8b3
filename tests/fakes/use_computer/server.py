"""A loopback fake of the use.computer REST API, written from ``shared/specs/use_computer.md``, backed by one
real Xvfb per sandbox (screenshots and input are real).

Strict where the service is documented strict, and conservative where it is not: Bearer auth (401
``{"error": "unauthorized"}``), create-body validation (unknown fields, ``type`` not offered to the account,
``version`` with ``snapshot``, ``reservation_id`` off macOS, ``resources`` shape), typed errors as JSON
``{"error": code, "message"}``, 404 ``sandbox_not_found`` for anything about a sandbox that does not exist,
``{"status": "ok"}`` for actions, integer coordinates. A Retina macOS (:attr:`FakeUseComputer.macos_scale`)
runs its Xvfb at ``scale`` times the points that ``display/info`` reports and takes clicks in points.

The idle reaper (spec "pain points") removes an *ephemeral* sandbox after :attr:`idle_timeout` seconds without
a call about it (default 120; tests set it short). Non-ephemeral sandboxes are not reaped (UNVERIFIED on the
service). Every request is logged (:attr:`log`); :attr:`reaped` lists the ids the reaper removed.

Injectable failures: :meth:`inject` (any status, JSON body or raw bytes and headers on a method and path
pattern: 401, 403 ``reservation_expired``, 402, 409, 429 with ``Retry-After``, 503 ``unavailable``, DELETE
failures ...), :attr:`create_failure` (the sandbox is made, then the answer fails: ``"error_500"``, ``"drop"``,
``"hang"``, ``"no_id"``), :attr:`delete_ignored` (DELETE answers 200 but the sandbox stays), :meth:`revoke_key`,
and :attr:`capacity` (a create past it answers 503 ``unavailable``), :meth:`expire_reservation` (sandboxes
destroyed, the key answers 403 ``reservation_expired``), :attr:`keepalive_hold` (keepalives wait for an event).

Each sandbox has a real home directory on this host (:meth:`home_of`, removed with the sandbox): ``exec`` runs
there with ``HOME`` set to it, and ``/files`` resolves a relative path against it (an absolute path is this
host's, as in ``exec``). ``PUT /files?path=`` takes the raw body and needs the parent directory to exist (404
``{"error": "not_found"}`` otherwise: the spec says the parent must exist but not which error a missing one
gives, UNVERIFIED); ``GET /files?path=`` answers the bytes, or 404 ``{"error": "not_found"}`` for a missing
file (UNVERIFIED code; the sandbox's own 404 stays ``sandbox_not_found``). The log keeps ``{"bytes": n}`` for a
file body, not the bytes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fakes._desktop import XvfbDesktop
from fakes._http import Drop, HttpError, Injection, JsonHandler, LoggedRequest, LoopbackService

__all__ = ["FakeUseComputer", "Injection", "LoggedRequest"]

_CREATE_FIELDS = frozenset({"type", "ephemeral", "reservation_id", "host", "mini_ip", "device_type", "runtime",
                            "version", "snapshot", "resources"})
_MODIFIERS = {"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "option": "alt", "shift": "shift", "cmd": "super",
              "command": "super", "win": "super", "super": "super", "meta": "super"}
_KEYS = {"enter", "return", "escape", "esc", "tab", "backspace", "delete", "space", "home", "end", "pageup",
         "pagedown", "insert", "up", "down", "left", "right", "capslock", "menu", "printscreen", "pause", "numlock",
         "scrolllock", *(f"f{i}" for i in range(1, 25))}
_KEY_CANON = {"return": "enter", "esc": "escape"}


def _error(status: int, code: str, message: str | None = None, **extra: Any) -> HttpError:
    body: dict[str, Any] = {"error": code, **extra}
    if message:
        body["message"] = message
    return HttpError(status, body)


class _Handler(JsonHandler):
    owner: FakeUseComputer
    server_seconds_header = False

    def route(self, path: str, query: dict[str, list[str]], raw: bytes) -> tuple[int, Any, str]:
        if path.endswith("/files"):
            # a file's bytes, not JSON: the log keeps only their size
            self.logged_body = {"bytes": len(raw)} if self.command == "PUT" else None
            self.raise_injected(path)
            return self.owner.handle(self.command, path, query, self.headers, raw)
        if raw:
            try:
                self.logged_body = json.loads(raw)
            except ValueError:
                raise _error(400, "invalid_request", "body is not JSON") from None
        self.raise_injected(path)
        return self.owner.handle(self.command, path, query, self.headers, self.logged_body)

    def fake_bug(self, exc: Exception) -> Any:
        return {"error": "fake_error", "message": f"{type(exc).__name__}: {exc}"}


class FakeUseComputer(LoopbackService):
    """The fake service. Use as a context manager (or :meth:`start` / :meth:`stop` in ``finally``)."""

    handler_class = _Handler
    thread_name = "fake-use-computer"
    #: every variable of the vendor's (none may leak into a test from the machine)
    vendor_vars = ("USE_COMPUTER_API_KEY", "USE_COMPUTER_BASE_URL", "USE_COMPUTER_HOST", "USE_COMPUTER_VERSION",
                   "USE_COMPUTER_SNAPSHOT", "USE_COMPUTER_RESERVATION_ID")

    def __init__(
        self,
        *,
        api_key: str = "uc_live_fake_0123456789abcdef",
        offered: frozenset[str] = frozenset({"macos", "ubuntu", "windows"}),
        capacity: int = 2,
        idle_timeout: float = 120.0,
        macos_scale: int = 1,
        sizes: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.offered = offered
        self.capacity = capacity
        self.idle_timeout = idle_timeout
        self.macos_scale = macos_scale
        #: sizes in points per platform (what display/info reports)
        self.sizes = {"macos": (1024, 768), "ubuntu": (1920, 1080), "windows": (1024, 768), **(sizes or {})}
        #: whether /v1/platforms lists the display: per image (Ubuntu, Windows) and at the top level of the macOS
        #: entry (UNVERIFIED shapes: the spec's inner shapes of /v1/platforms are partly unverified)
        self.list_display = True
        self.revoked = False
        #: the reservation ended: its sandboxes are destroyed and its key answers 403 ``reservation_expired``
        self.reservation_expired = False
        #: set to hold every keepalive (before it looks at its sandbox) until the event is set
        self.keepalive_hold: threading.Event | None = None
        #: set when a held keepalive has arrived
        self.keepalive_held = threading.Event()
        self.create_failure: str | None = None
        self.delete_ignored = False
        self.reaped: list[str] = []
        #: whether exec's environment names the sandbox's display (False: a service whose exec has no DISPLAY)
        self.exec_display = True
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self._homes: dict[str, Path] = {}
        self._release = threading.Event()
        self._stopping = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeUseComputer:
        super().start()
        self._spawn(self._reaper, "fake-use-computer-reaper")
        return self

    def stop(self) -> None:
        self._release.set()  # a create held by create_failure="hang" answers now
        if self.keepalive_hold is not None:
            self.keepalive_hold.set()
        self._stopping.set()  # the reaper ends
        super().stop()
        with self._lock:
            self.sandboxes.clear()
            homes = list(self._homes.values())
            self._homes.clear()
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The vendor's variables that point a client at this fake."""
        return {"USE_COMPUTER_API_KEY": self.api_key, "USE_COMPUTER_BASE_URL": self.base_url}

    # -- test controls -----------------------------------------------------------------------------------
    def revoke_key(self) -> None:
        self.revoked = True

    def restore_key(self) -> None:
        self.revoked = False

    def expire_reservation(self) -> None:
        """The reservation ends: every sandbox is destroyed and the key is revoked with it (docs.use.computer
        concepts: "end of reservation destroys sandboxes and revokes the key"; cookbook: 403
        ``reservation_expired``)."""
        with self._lock:
            self.reservation_expired = True
            for sandbox_id in list(self.sandboxes):
                self._remove(sandbox_id)

    def live(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(s) for s in self.sandboxes.values()]

    def requests(self, pattern: str = "") -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if re.search(pattern, r.path)]

    def wait_until(self, condition: Any, timeout: float = 30.0, what: str = "a condition") -> None:
        """Wait for ``condition()`` (polled every 10 ms); raise AssertionError naming ``what`` at ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"the fake never reached {what} within {timeout:g}s")
            self._stopping.wait(0.01)

    # -- internals ---------------------------------------------------------------------------------------
    def _reaper(self) -> None:
        while not self._stopping.wait(min(0.05, max(0.005, self.idle_timeout / 10))):
            now = time.monotonic()
            with self._lock:
                idle = [sid for sid, s in self.sandboxes.items()
                        if s["ephemeral"] and now - s["_last_activity"] > self.idle_timeout]
                for sandbox_id in idle:
                    self.reaped.append(sandbox_id)
                    self._remove(sandbox_id)

    def _authorize(self, headers: Any) -> None:
        auth = headers.get("Authorization") or ""
        if self.reservation_expired and auth == f"Bearer {self.api_key}":
            raise _error(403, "reservation_expired", "the reservation has ended")
        if self.revoked or not auth.startswith("Bearer ") or auth[7:] != self.api_key:
            raise _error(401, "unauthorized", "invalid or missing API key")

    def home_of(self, sandbox_id: str) -> Path:
        """The sandbox's home directory on this host."""
        return self._homes[sandbox_id]

    def _remove(self, sandbox_id: str) -> None:
        self.sandboxes.pop(sandbox_id, None)
        home = self._homes.pop(sandbox_id, None)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)
        desktop = self._desktops.pop(sandbox_id, None)
        if desktop is not None:
            desktop.stop()  # synchronously: a 404 means nothing of the sandbox is left

    def _public(self, sandbox: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in sandbox.items() if not k.startswith("_")}

    def _platforms(self) -> dict[str, Any]:
        used = sum(1 for s in self.sandboxes.values() if s["type"] == "macos")
        out: dict[str, Any] = {}
        if "macos" in self.offered:
            out["macos"] = {"capacity": {"max": self.capacity, "used": used}}
            if self.list_display:  # a Mac VM has one display: listed at the platform's top level, in points
                out["macos"]["display"] = "{}x{}".format(*self.sizes["macos"])
        for kind, version in (("ubuntu", "ubuntu-24.04"), ("windows", "windows-11")):
            if kind in self.offered:
                image: dict[str, Any] = {"version": version,
                                         "resources": {"cpus": 4, "memory_mb": 4096, "disk_gb": 40}}
                if self.list_display:
                    image["display"] = "{}x{}".format(*self.sizes[kind])
                out[kind] = {"images": [image]}
        return out

    # -- the API -------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, list[str]], headers: Any,
               body: Any) -> tuple[int, Any, str]:
        """(status, answer, content type) for one request; raises :class:`HttpError` / :class:`Drop`."""
        self._authorize(headers)
        hold = self.keepalive_hold
        if hold is not None and method == "POST" and path.endswith("/keepalive"):
            self.keepalive_held.set()
            hold.wait(60)
        with self._lock:
            if path == "/v1/platforms" and method == "GET":
                return 200, self._platforms(), "application/json"
            if path == "/v1/sandboxes" and method == "POST":
                return self._create(body)
            match = re.fullmatch(r"/v1/sandboxes/([^/]+)(/.*)?", path)
            if match is None:
                raise _error(404, "not_found", f"no route {method} {path}")
            sandbox_id, sub = match.group(1), match.group(2) or ""
            sandbox = self.sandboxes.get(sandbox_id)
            if sandbox is None:
                raise _error(404, "sandbox_not_found")
            sandbox["_last_activity"] = time.monotonic()
            if sub == "" and method == "GET":
                return 200, self._public(sandbox), "application/json"
            if sub == "" and method == "DELETE":
                if not self.delete_ignored:
                    self._remove(sandbox_id)
                return 200, {"status": "ok"}, "application/json"
            if sub == "/keepalive" and method == "POST":
                return 200, {"status": "ok"}, "application/json"
            desktop = self._desktops[sandbox_id]
            home = self._homes[sandbox_id]
            scale = self.macos_scale if sandbox["type"] == "macos" else 1
        if sub == "/files":
            return self._files(method, query, body, home)
        if method == "POST" and sub == "/exec":
            return self._exec(body, desktop, home)
        return self._data_plane(method, sub, query, body, sandbox, desktop, scale)

    def _create(self, body: Any) -> tuple[int, Any, str]:
        if not isinstance(body, dict):
            raise _error(400, "invalid_request", "body must be a JSON object")
        unknown = sorted(set(body) - _CREATE_FIELDS)
        if unknown:
            raise _error(400, "invalid_request", f"unknown field(s): {', '.join(unknown)}")
        kind = body.get("type", "macos")
        if kind not in ("macos", "ios", "ubuntu", "windows"):
            raise _error(400, "invalid_request", f"invalid type {kind!r}")
        if kind not in self.offered:
            raise _error(403, "forbidden", f"{kind} sandboxes are not enabled for this account")
        if kind == "ios":
            raise _error(400, "invalid_request", "the fake has no iOS simulators")
        if not isinstance(body.get("ephemeral", True), bool):
            raise _error(400, "invalid_request", "ephemeral must be a boolean")
        if body.get("version") and body.get("snapshot"):
            raise _error(400, "invalid_request", "version and snapshot are mutually exclusive")
        if body.get("reservation_id") and kind not in ("macos", "ios"):
            raise _error(400, "invalid_request", "reservation_id applies to macos and ios only")
        if kind == "macos" and any(body.get(k) for k in ("version", "snapshot", "resources")):
            raise _error(400, "invalid_request", "version, snapshot and resources apply to ubuntu and windows")
        resources = body.get("resources")
        if resources is not None and (not isinstance(resources, dict) or set(resources) - {"cpus", "memory_mb",
                                                                                           "disk_gb"}
                                      or not all(isinstance(v, int) for v in resources.values())):
            raise _error(400, "invalid_request", "resources takes integer cpus, memory_mb, disk_gb")
        if kind == "macos" and sum(1 for s in self.sandboxes.values() if s["type"] == "macos") >= self.capacity:
            raise _error(503, "unavailable", "warm pool exhausted")
        sandbox_id = "sb_" + uuid.uuid4().hex[:12]
        width, height = self.sizes[kind]
        scale = self.macos_scale if kind == "macos" else 1
        self._desktops[sandbox_id] = XvfbDesktop(width * scale, height * scale, provider="use-computer-fake")
        self._homes[sandbox_id] = Path(tempfile.mkdtemp(prefix=f"fake-uc-{sandbox_id}-"))
        sandbox: dict[str, Any] = {
            "sandbox_id": sandbox_id, "type": kind, "vnc_url": f"/v1/sandboxes/{sandbox_id}/vnc",
            "vm_ip": "192.168.64.2", "host": body.get("host") or "mm001",
            "version": body.get("version") or body.get("snapshot") or ("macos-15" if kind == "macos" else kind),
            "ephemeral": body.get("ephemeral", True), "_last_activity": time.monotonic(),
        }
        if kind == "macos":
            sandbox["ssh_url"] = f"/v1/sandboxes/{sandbox_id}/ssh"
        self.sandboxes[sandbox_id] = sandbox
        failure = self.create_failure
        if failure == "error_500":
            raise _error(500, "internal", "allocation timed out")
        if failure == "drop":
            raise Drop()
        if failure == "no_id":
            return 200, {"status": "ok"}, "application/json"
        if failure == "hang":
            self._lock.release()
            try:
                self._release.wait(60)
            finally:
                self._lock.acquire()
        return 200, self._public(sandbox), "application/json"

    def _data_plane(self, method: str, sub: str, query: dict[str, list[str]], body: Any, sandbox: dict[str, Any],
                    desktop: XvfbDesktop, scale: int) -> tuple[int, Any, str]:
        driver = desktop.driver
        ok = {"status": "ok"}

        def need(*keys: str) -> dict[str, Any]:
            if not isinstance(body, dict):
                raise _error(400, "invalid_request", "body must be a JSON object")
            for key in keys:
                value = body.get(key)
                if not isinstance(value, int) or isinstance(value, bool):
                    raise _error(400, "invalid_request", f"{key} must be an integer")
            return body

        def button() -> str:
            raw = str((body or {}).get("button") or "left")
            if raw not in ("left", "right", "middle"):
                raise _error(400, "invalid_request", f"invalid button {raw!r}")
            return raw

        with desktop.lock:
            if method == "GET" and sub == "/display/info":
                width, height = self.sizes[sandbox["type"]]
                return 200, {"width": width, "height": height, "scale": float(scale), "platform": sandbox["type"],
                             "device_type": None, "runtime": None}, "application/json"
            if method == "GET" and sub == "/screenshot":
                return 200, driver.screenshot().png, "image/png"
            if method == "POST" and sub == "/mouse/click":
                b = need("x", "y")
                double = b.get("double", False)
                if not isinstance(double, bool):
                    raise _error(400, "invalid_request", "double must be a boolean")
                driver.click(b["x"] * scale, b["y"] * scale, button(), 2 if double else 1)
                return 200, ok, "application/json"
            if method == "POST" and sub == "/mouse/move":
                b = need("x", "y")
                driver.move(b["x"] * scale, b["y"] * scale)
                return 200, ok, "application/json"
            if method == "POST" and sub == "/mouse/drag":
                b = need("startX", "startY", "endX", "endY")
                driver.drag(b["startX"] * scale, b["startY"] * scale, b["endX"] * scale, b["endY"] * scale,
                            button())
                return 200, ok, "application/json"
            if method == "POST" and sub == "/mouse/scroll":
                b = need("x", "y")
                deltas = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
                direction = b.get("direction", "down")
                amount = b.get("amount", 3)
                if direction not in deltas or not isinstance(amount, int) or amount < 1:
                    raise _error(400, "invalid_request", "direction up|down|left|right and amount >= 1")
                dx, dy = deltas[direction]
                driver.scroll(b["x"] * scale, b["y"] * scale, dx * amount, dy * amount)
                return 200, ok, "application/json"
            if method == "POST" and sub == "/keyboard/type":
                text = (body or {}).get("text") if isinstance(body, dict) else None
                if not isinstance(text, str):
                    raise _error(400, "invalid_request", "text must be a string")
                driver.type_text(text)
                return 200, ok, "application/json"
            if method == "POST" and sub == "/keyboard/press":
                if not isinstance(body, dict):
                    raise _error(400, "invalid_request", "body must be a JSON object")
                modifiers = body.get("modifiers") or []
                if not isinstance(modifiers, list):
                    raise _error(400, "invalid_request", "modifiers must be a list")
                driver.key(*[_modifier(m) for m in modifiers], _key(body.get("key")))
                return 200, ok, "application/json"
            if method == "POST" and sub == "/keyboard/hotkey":
                parts = [p.strip() for p in str((body or {}).get("keys") or "").split("+") if p.strip()]
                if not parts:
                    raise _error(400, "invalid_request", "keys must be a chord such as cmd+s")
                driver.key(*[_modifier(p) for p in parts[:-1]], _key(parts[-1]))
                return 200, ok, "application/json"
            if method == "GET" and sub == "/mouse/position":
                x, y = driver.cursor_position()
                return 200, {"x": x // scale, "y": y // scale}, "application/json"
        raise _error(404, "not_found", f"no route {method} {sub}")

    @staticmethod
    def _files(method: str, query: dict[str, list[str]], body: Any, home: Path) -> tuple[int, Any, str]:
        """``PUT``/``GET /files?path=``: the raw bytes of one regular file."""
        raw_path = (query.get("path") or [""])[0]
        if not raw_path:
            raise _error(400, "invalid_request", "path is required")
        path = home / raw_path  # an absolute path replaces home
        if method == "PUT":
            if not isinstance(body, bytes):
                raise _error(400, "invalid_request", "the body must be the file's bytes")
            if not path.parent.is_dir():
                raise _error(404, "not_found", f"parent directory of {raw_path} does not exist")
            if path.is_dir():
                raise _error(400, "invalid_request", f"{raw_path} is a directory")
            path.write_bytes(body)
            return 200, {"status": "ok"}, "application/json"
        if method == "GET":
            if path.is_dir():
                raise _error(400, "invalid_request", f"{raw_path} is a directory")
            try:
                return 200, path.read_bytes(), "application/octet-stream"
            except FileNotFoundError:
                raise _error(404, "not_found", f"no such file: {raw_path}") from None
        raise _error(405, "method_not_allowed", f"{method} /files")

    def _exec_env(self, desktop: XvfbDesktop, home: Path) -> dict[str, str]:
        env = dict(os.environ, HOME=str(home))
        env.pop("DISPLAY", None)
        if self.exec_display:
            env["DISPLAY"] = desktop.display
        return env

    def _exec(self, body: Any, desktop: XvfbDesktop, home: Path) -> tuple[int, Any, str]:
        if not isinstance(body, dict) or not isinstance(body.get("command"), str):
            raise _error(400, "invalid_request", "command must be a string")
        shell = body.get("shell", "bash")
        if shell not in ("bash", "sh", "powershell", "cmd"):
            raise _error(400, "invalid_request", f"invalid shell {shell!r}")
        timeout = body.get("timeout", 300)
        proc = subprocess.Popen(["sh" if shell == "sh" else "bash", "-c", body["command"]], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=home,
                                env=self._exec_env(desktop, home),
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return 200, {"return_code": 124, "stdout": out.decode("utf-8", "replace"),
                         "stderr": err.decode("utf-8", "replace") + "timed out"}, "application/json"
        return 200, {"return_code": proc.returncode, "stdout": out.decode("utf-8", "replace"),
                     "stderr": err.decode("utf-8", "replace")}, "application/json"


def _modifier(raw: Any) -> str:
    low = str(raw).strip().lower()
    if low not in _MODIFIERS:
        raise _error(400, "invalid_request", f"invalid modifier {raw!r}")
    return _MODIFIERS[low]


def _key(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise _error(400, "invalid_request", "key must be a string")
    if len(raw) == 1:
        return raw
    low = raw.lower()
    if low in _MODIFIERS:
        return _MODIFIERS[low]
    if low not in _KEYS:
        raise _error(400, "invalid_request", f"invalid key {raw!r}")
    return _KEY_CANON.get(low, low)
