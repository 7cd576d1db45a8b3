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
and :attr:`capacity` (a create past it answers 503 ``unavailable``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from deskctl.providers._x11 import X11Driver

__all__ = ["FakeUseComputer", "Injection", "LoggedRequest"]

_CREATE_FIELDS = frozenset({"type", "ephemeral", "reservation_id", "host", "mini_ip", "device_type", "runtime",
                            "version", "snapshot", "resources"})
_MODIFIERS = {"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "option": "alt", "shift": "shift", "cmd": "super",
              "command": "super", "win": "super", "super": "super", "meta": "super"}
_KEYS = {"enter", "return", "escape", "esc", "tab", "backspace", "delete", "space", "home", "end", "pageup",
         "pagedown", "insert", "up", "down", "left", "right", "capslock", "menu", "printscreen", "pause", "numlock",
         "scrolllock", *(f"f{i}" for i in range(1, 25))}
_KEY_CANON = {"return": "enter", "esc": "escape"}


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int
    server_seconds: float
    body: Any = None
    authorized: bool = False


@dataclass
class Injection:
    method: str
    pattern: re.Pattern[str]
    status: int
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


class _HttpError(Exception):
    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None,
                 raw: bytes | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers, self.raw = status, body, headers or {}, raw


class _Drop(Exception):
    """Close the connection without an answer."""


def _error(status: int, code: str, message: str | None = None, **extra: Any) -> _HttpError:
    body: dict[str, Any] = {"error": code, **extra}
    if message:
        body["message"] = message
    return _HttpError(status, body)


class _Desktop:
    """One Xvfb (at pixel size) and an X11 driver on it."""

    def __init__(self, width: int, height: int) -> None:
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24", "-nolisten", "tcp",
             "-noreset"],
            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        os.close(write_fd)
        try:
            data = b""
            with os.fdopen(read_fd, "rb") as pipe:
                while not data.endswith(b"\n"):
                    chunk = pipe.read(1)
                    if not chunk:
                        raise RuntimeError("Xvfb exited before it announced its display")
                    data += chunk
            self.display = f":{int(data.strip())}"
            self.driver = X11Driver.open(self.display, provider="use-computer-fake")
        except BaseException:
            self.stop()
            raise
        self.lock = threading.Lock()

    def stop(self) -> None:
        driver = getattr(self, "driver", None)
        if driver is not None:
            try:
                driver.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FakeUseComputer:
    """The fake service. Use as a context manager (or :meth:`start` / :meth:`stop` in ``finally``)."""

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
        self.api_key = api_key
        self.offered = offered
        self.capacity = capacity
        self.idle_timeout = idle_timeout
        self.macos_scale = macos_scale
        #: sizes in points per platform (what display/info reports)
        self.sizes = {"macos": (1024, 768), "ubuntu": (1920, 1080), "windows": (1024, 768), **(sizes or {})}
        #: the ``display`` each Linux/Windows image lists in /v1/platforms (None: not listed)
        self.list_display = True
        self.revoked = False
        self.create_failure: str | None = None
        self.delete_ignored = False
        self.log: list[LoggedRequest] = []
        self.reaped: list[str] = []
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self._desktops: dict[str, _Desktop] = {}
        self._injections: list[Injection] = []
        self._lock = threading.RLock()
        self._release = threading.Event()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeUseComputer:
        fake = self

        class Handler(_Handler):
            owner = fake

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        for target, name in ((lambda: server.serve_forever(poll_interval=0.05), "fake-use-computer"),
                             (self._reaper, "fake-use-computer-reaper")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._release.set()
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        with self._lock:
            desktops = list(self._desktops.values())
            self._desktops.clear()
            self.sandboxes.clear()
        for desktop in desktops:
            desktop.stop()

    def __enter__(self) -> FakeUseComputer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- test controls -----------------------------------------------------------------------------------
    def inject(self, method: str, path_regex: str, status: int, body: Any = None, *, raw: bytes | None = None,
               headers: dict[str, str] | None = None, times: int = 1) -> None:
        """Answer the next ``times`` requests matching ``method`` (or ``*``) and ``path_regex`` (searched in
        the path) with ``status`` and ``body`` (JSON) or ``raw`` bytes, before they reach the service logic."""
        with self._lock:
            self._injections.append(Injection(method.upper(), re.compile(path_regex), status, body, raw,
                                              dict(headers or {}), times))

    def revoke_key(self) -> None:
        self.revoked = True

    def restore_key(self) -> None:
        self.revoked = False

    def live(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(s) for s in self.sandboxes.values()]

    def desktop(self, sandbox_id: str) -> X11Driver:
        return self._desktops[sandbox_id].driver

    def display_of(self, sandbox_id: str) -> str:
        return self._desktops[sandbox_id].display

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

    def _take_injection(self, method: str, path: str) -> Injection | None:
        with self._lock:
            for rule in self._injections:
                if rule.method in (method, "*") and rule.pattern.search(path):
                    rule.times -= 1
                    if rule.times <= 0:
                        self._injections.remove(rule)
                    return rule
        return None

    def _authorize(self, headers: Any) -> None:
        auth = headers.get("Authorization") or ""
        if self.revoked or not auth.startswith("Bearer ") or auth[7:] != self.api_key:
            raise _error(401, "unauthorized", "invalid or missing API key")

    def _remove(self, sandbox_id: str) -> None:
        self.sandboxes.pop(sandbox_id, None)
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
        """(status, answer, content type) for one request; raises :class:`_HttpError` / :class:`_Drop`."""
        self._authorize(headers)
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
            scale = self.macos_scale if sandbox["type"] == "macos" else 1
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
        self._desktops[sandbox_id] = _Desktop(width * scale, height * scale)
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
            raise _Drop()
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
                    desktop: _Desktop, scale: int) -> tuple[int, Any, str]:
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
        if method == "POST" and sub == "/exec":
            return self._exec(body, desktop)
        raise _error(404, "not_found", f"no route {method} {sub}")

    @staticmethod
    def _exec(body: Any, desktop: _Desktop) -> tuple[int, Any, str]:
        if not isinstance(body, dict) or not isinstance(body.get("command"), str):
            raise _error(400, "invalid_request", "command must be a string")
        shell = body.get("shell", "bash")
        if shell not in ("bash", "sh", "powershell", "cmd"):
            raise _error(400, "invalid_request", f"invalid shell {shell!r}")
        timeout = body.get("timeout", 300)
        proc = subprocess.Popen(["sh" if shell == "sh" else "bash", "-c", body["command"]], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(os.environ, DISPLAY=desktop.display),
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


class _Handler(BaseHTTPRequestHandler):
    owner: FakeUseComputer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _dispatch(self) -> None:
        started = time.perf_counter()
        owner = self.owner
        split = urlsplit(self.path)
        path, query = split.path, parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        authorized = (self.headers.get("Authorization") or "").startswith("Bearer ")
        answer: Any = None
        content_type = "application/json"
        extra: dict[str, str] = {}
        raw_answer: bytes | None = None
        try:
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError:
                    raise _error(400, "invalid_request", "body is not JSON") from None
            rule = owner._take_injection(self.command, path)
            if rule is not None:
                raise _HttpError(rule.status, rule.body, rule.headers, rule.raw)
            status, answer, content_type = owner.handle(self.command, path, query, self.headers, body)
        except _Drop:
            with owner._lock:
                owner.log.append(LoggedRequest(self.command, path, query, 0, time.perf_counter() - started, body,
                                               authorized))
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        except _HttpError as err:
            status, answer, raw_answer, extra = err.status, err.body, err.raw, err.headers
        except Exception as exc:  # the fake's own bug: a 500 that names it
            status, answer = 500, {"error": "fake_error", "message": f"{type(exc).__name__}: {exc}"}
        if raw_answer is not None:
            payload = raw_answer
        elif isinstance(answer, bytes):
            payload = answer
        else:
            payload = b"" if answer is None else json.dumps(answer).encode()
            content_type = "application/json"
        elapsed = time.perf_counter() - started
        with owner._lock:
            owner.log.append(LoggedRequest(self.command, path, query, status, elapsed, body, authorized))
        self.send_response(status)
        if payload:
            self.send_header("Content-Type", content_type)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch
