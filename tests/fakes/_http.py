"""What every cloud fake's HTTP side has in common: a threaded server on a loopback port 0, the request log
(with the time the server spent on each request), failure injection (an answer by method and path; a create
slower than its client, :meth:`LoopbackService.delay_create`), JSON answers, and start/stop that also ends
every desktop the fake made.

A fake subclasses :class:`LoopbackService` (its routes, state machine and strictness) and :class:`JsonHandler`
(the order in which it parses, injects and routes a request, and the body of its own-bug 500)."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from deskctl.providers._x11 import X11Driver
from fakes._desktop import XvfbDesktop

__all__ = ["Drop", "FormFile", "HttpError", "Injection", "JsonHandler", "LoggedRequest", "LoopbackService",
           "parse_form"]


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int  # 0: the connection was dropped without an answer
    server_seconds: float
    body: Any = None
    authorized: bool = False  # a Bearer header was sent (not necessarily a valid one)


@dataclass
class Injection:
    method: str
    pattern: re.Pattern[str]
    status: int
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1


class HttpError(Exception):
    """Answer with ``status`` and ``body`` (JSON) or ``raw`` bytes of ``content_type``, plus ``headers``."""

    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None,
                 raw: bytes | None = None, content_type: str = "application/json") -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.raw = raw
        self.content_type = content_type


class Drop(Exception):
    """Close the connection without an answer."""


class LoopbackService:
    """A fake service on ``127.0.0.1`` port 0. Use as a context manager (or :meth:`start` / :meth:`stop` in
    ``finally``). Subclasses set :attr:`handler_class` and :attr:`thread_name`."""

    handler_class: type[JsonHandler]
    thread_name: str

    def __init__(self) -> None:
        self.log: list[LoggedRequest] = []
        self._desktops: dict[str, XvfbDesktop] = {}
        self._injections: list[Injection] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._late_armed: int | None = None  # delay_create: lookups before the next create is made (-1: never)
        self._late: dict[str, Any] | None = None  # the delayed create waiting to be made

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> Self:
        handler = type("Handler", (self.handler_class,), {"owner": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        self._spawn(lambda: server.serve_forever(poll_interval=0.05), self.thread_name)
        return self

    def _spawn(self, target: Callable[[], object], name: str) -> None:
        """Run ``target`` in a daemon thread that :meth:`stop` joins (after the server has shut down)."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        with self._lock:  # a delayed create still held is dropped, unmade
            late, self._late = self._late, None
        if late is not None:
            late["abandoned"] = True
            late["done"].set()
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
        for desktop in desktops:
            desktop.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    # -- the desktops -------------------------------------------------------------------------------------
    def _desktop_of(self, resource_id: str) -> XvfbDesktop:
        """The desktop behind ``resource_id`` (what the client's handle names); by default the key itself."""
        return self._desktops[resource_id]

    def desktop(self, resource_id: str) -> X11Driver:
        """The X driver of a resource's desktop (to observe what clicks and keys did)."""
        return self._desktop_of(resource_id).driver

    def display_of(self, resource_id: str) -> str:
        return self._desktop_of(resource_id).display

    # -- a create slower than the client ----------------------------------------------------------------
    def delay_create(self, after_lookups: int | None) -> None:
        """The next create is slow: it is made only once ``after_lookups`` lookups (reads of the resources:
        time passes in requests) have come in after it, or at :meth:`finish_create` (``after_lookups`` None:
        only then), and it is answered only then, so a client whose timeout is shorter never sees the answer
        while the resource still comes to exist (the specs: a create waits server-side, a gateway gives up
        first)."""
        with self._lock:
            self._late_armed = after_lookups if after_lookups is not None else -1

    def finish_create(self) -> None:
        """Make the held create's resource now (and let its late answer go)."""
        with self._lock:
            late, self._late = self._late, None
            if late is not None:
                late["make"]()
                late["done"].set()

    @property
    def create_pending(self) -> bool:
        """A delayed create arrived and its resource is not made yet."""
        with self._lock:
            return self._late is not None

    def _hold_create(self, make: Callable[[], Any]) -> Any:
        """Called by a fake's create with :attr:`_lock` held once: ``make()`` now, or (after
        :meth:`delay_create`) once the lookups or :meth:`finish_create` made it, returning its result. A fake
        stopped meanwhile drops the connection, unmade."""
        armed, self._late_armed = self._late_armed, None
        if armed is None:
            return make()
        result: dict[str, Any] = {}

        def made() -> None:
            result["value"] = make()

        done = threading.Event()
        late: dict[str, Any] = {"make": made, "done": done, "remaining": armed}
        self._late = late
        self._lock.release()
        try:
            done.wait(120)
        finally:
            self._lock.acquire()
        if late.get("abandoned"):
            raise Drop()
        if "value" not in result:  # neither looked for enough nor finished in time: made now
            if self._late is late:
                self._late = None
            made()
        return result["value"]

    def _lookup(self) -> None:
        """A read of the resources came in (call with :attr:`_lock` held, before answering it): a delayed
        create whose lookups are used up is made now, so this very read sees it."""
        late = self._late
        if late is None or late["remaining"] < 0:
            return
        late["remaining"] -= 1
        if late["remaining"] <= 0:
            self._late = None
            late["make"]()
            late["done"].set()

    # -- failure injection -------------------------------------------------------------------------------
    def inject(self, method: str, path_regex: str, status: int, body: Any = None, *, raw: bytes | None = None,
               headers: dict[str, str] | None = None, times: int = 1) -> None:
        """Answer the next ``times`` requests matching ``method`` (or ``*``) and ``path_regex`` (searched in
        the path) with ``status`` and ``body`` (JSON) or ``raw`` bytes, before they reach the service logic."""
        with self._lock:
            self._injections.append(Injection(method.upper(), re.compile(path_regex), status, body, raw,
                                              dict(headers or {}), times))

    def _take_injection(self, method: str, path: str) -> Injection | None:
        with self._lock:
            for rule in self._injections:
                if rule.method in (method, "*") and rule.pattern.search(path):
                    rule.times -= 1
                    if rule.times <= 0:
                        self._injections.remove(rule)
                    return rule
        return None


class JsonHandler(BaseHTTPRequestHandler):
    """Reads a request, lets :meth:`route` answer it, logs it and writes the answer (JSON unless the route
    gives bytes). :class:`HttpError` from the route is the answer; :class:`Drop` closes the connection; any
    other exception is the fake's own bug, a 500 whose body :meth:`fake_bug` makes."""

    owner: LoopbackService
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    #: whether answers carry ``X-Fake-Server-Seconds`` (the server's own time for the request)
    server_seconds_header = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def route(self, path: str, query: dict[str, list[str]], raw: bytes) -> tuple[int, Any, str]:
        """(status, answer, content type) for one request; sets :attr:`logged_body` to what the log keeps."""
        raise NotImplementedError

    def fake_bug(self, exc: Exception) -> Any:
        return {"message": f"fake error: {type(exc).__name__}: {exc}"}

    def raise_injected(self, path: str) -> None:
        """Raise the injected answer for this request, if there is one."""
        rule = self.owner._take_injection(self.command, path)
        if rule is not None:
            raise HttpError(rule.status, rule.body, rule.headers, rule.raw)

    def _record(self, path: str, query: dict[str, list[str]], status: int, started: float) -> float:
        elapsed = time.perf_counter() - started
        authorized = (self.headers.get("Authorization") or "").startswith("Bearer ")
        with self.owner._lock:
            self.owner.log.append(LoggedRequest(self.command, path, query, status, elapsed, self.logged_body,
                                                authorized))
        return elapsed

    def dispatch(self) -> None:
        started = time.perf_counter()
        split = urlsplit(self.path)
        path, query = split.path, parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        self.logged_body: Any = None
        content_type = "application/json"
        extra: dict[str, str] = {}
        answer_raw: bytes | None = None
        try:
            status, answer, content_type = self.route(path, query, raw)
        except Drop:
            self._record(path, query, 0, started)
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        except HttpError as err:
            status, answer, answer_raw, extra, content_type = (err.status, err.body, err.raw, err.headers,
                                                               err.content_type)
        except Exception as exc:  # the fake's own bug: a 500 that names it
            status, answer = 500, self.fake_bug(exc)
        if answer_raw is not None:
            payload = answer_raw
        elif isinstance(answer, bytes):
            payload = answer
        else:
            payload = b"" if answer is None else json.dumps(answer).encode()
            content_type = "application/json"
        elapsed = self._record(path, query, status, started)
        try:
            self.send_response(status)
            if payload:
                self.send_header("Content-Type", content_type)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            if self.server_seconds_header:
                self.send_header("X-Fake-Server-Seconds", f"{elapsed:.6f}")
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # the client gave up (its own timeout) before the answer: a real server shrugs too
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = dispatch


@dataclass(frozen=True)
class FormFile:
    """One file part of a ``multipart/form-data`` body."""

    filename: str
    data: bytes
    content_type: str = "application/octet-stream"


def _header_params(value: str) -> tuple[str, dict[str, str]]:
    """A header's main value (lower case) and its parameters (``name="x"; filename*=utf-8''...`` decoded)."""
    from email.message import Message
    from email.utils import collapse_rfc2231_value

    holder = Message()
    holder["X"] = value
    params = holder.get_params(header="X") or []
    main = params[0][0].lower() if params else ""
    return main, {str(k).lower(): collapse_rfc2231_value(v) for k, v in params[1:]}


def parse_form(content_type: str, raw: bytes) -> tuple[dict[str, str], dict[str, FormFile]]:
    """The fields and the files of a form body, as a web framework (Flask/werkzeug) gives them: a
    ``multipart/form-data`` part with a ``filename`` is a file, any other part a field;
    ``application/x-www-form-urlencoded`` has fields only. Any other body, or a multipart body without its
    closing boundary, is no form at all (two empty dicts), as the framework then sees none."""
    kind, params = _header_params(content_type or "")
    if kind == "application/x-www-form-urlencoded":
        return {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()}, {}
    boundary = params.get("boundary", "").encode()
    if kind != "multipart/form-data" or not boundary:
        return {}, {}
    chunks = (b"\r\n" + raw).split(b"\r\n--" + boundary)
    if len(chunks) < 2 or not chunks[-1].startswith(b"--"):
        return {}, {}
    fields: dict[str, str] = {}
    files: dict[str, FormFile] = {}
    for chunk in chunks[1:-1]:
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep:
            return {}, {}
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", "replace").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        disposition, dparams = _header_params(headers.get("content-disposition", ""))
        if disposition != "form-data" or "name" not in dparams:
            continue
        if "filename" in dparams:
            files.setdefault(dparams["name"], FormFile(dparams["filename"], data,
                                                       headers.get("content-type", "application/octet-stream")))
        else:
            fields.setdefault(dparams["name"], data.decode("utf-8", "replace"))
    return fields, files
