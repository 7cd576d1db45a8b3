"""A live view of a desktop in a web browser, with optional input passthrough (``deskctl view ID``).

:class:`ViewServer` serves one small page on ``127.0.0.1`` (never another interface) and a
``multipart/x-mixed-replace`` stream of JPEG frames that browsers show natively in an ``<img>``. Frames come
from :meth:`deskctl.session.Desktop.raw_frame`: the X11 providers' fast capture (MIT-SHM, Xvfb's framebuffer
file, or the SSH provider's damage-tracked frame), a cloud provider's screenshot as fast as it answers.

What a caller may rely on:

* every request needs the token (``?token=...``; compared in constant time), else 403. The token lives only in
  the URL printed to the person who started the view: never in the ledger or a log line (request logging is
  off);
* input (``POST /input``) is refused with 403 unless the server was started with ``control=True``; a point on
  the page is converted from the size the image is shown at to the desktop's pinned coordinates;
* frames are captured only while someone watches, at most ``fps`` a second, and a frame equal to the last one
  is not sent again;
* stopping the server never touches the desktop: the view does not own the session.

Endpoints (all need ``token``): ``GET /`` the page, ``GET /stream`` the live stream, ``GET /frame.jpg`` one fresh
frame, ``GET /info`` JSON about the desktop, ``POST /input`` one input event as JSON (see :func:`input_action`).

The parts: :mod:`deskctl.view_feed` (capture and encoding), :mod:`deskctl.view_page` (the HTML page) and this
module (input events, the HTTP server); every name stays importable from here.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from deskctl import actions as act
from deskctl._fds import wait_readable
from deskctl.errors import DeskctlError, UsageError
from deskctl.view_feed import DEFAULT_FPS, DEFAULT_QUALITY, EncodedFrame, FrameFeed, encode_jpeg
from deskctl.view_page import render_page

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["BOUNDARY", "DEFAULT_FPS", "DEFAULT_QUALITY", "EncodedFrame", "FrameFeed", "ViewServer", "encode_jpeg",
           "input_action", "render_page", "to_desktop"]

#: the part separator of the multipart stream
BOUNDARY = "deskctl-frame"
#: largest input request body accepted (a typed text of a few thousand characters fits)
MAX_INPUT_BYTES = 64 * 1024

def to_desktop(x: float, y: float, shown_width: float, shown_height: float, size: tuple[int, int]) -> tuple[int, int]:
    """A point on the image as the page shows it (``shown_width`` x ``shown_height`` CSS pixels) -> the
    desktop pixel under it, clamped to the screen (a pointer on the image's last pixel edge stays inside)."""
    if not (shown_width > 0 and shown_height > 0):
        raise UsageError("the shown size of the view must be positive", code="usage.bad_input")
    width, height = size
    return (min(width - 1, max(0, int(x * width / shown_width))),
            min(height - 1, max(0, int(y * height / shown_height))))


def _number(event: Mapping[str, Any], key: str, bound: str) -> Any:
    """``event[key]`` checked against ``bound`` of :data:`deskctl.limits.BOUNDS` (JSON brings NaN, 1e308, "3")."""
    from deskctl.limits import check_number

    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):  # a JSON string is no number here, even "3"
        raise UsageError(f"input field {key!r} must be a number", code="usage.bad_input")
    return check_number(bound, value, what=f"input field {key!r}")


def input_action(event: Mapping[str, Any], size: tuple[int, int]) -> act.Action:
    """The desktop action for one input event from the page.

    ``event["type"]`` is ``down``, ``up``, ``click``, ``move`` or ``scroll`` (with ``x``, ``y`` on the image as
    shown, ``w``, ``h`` its shown size, and ``button``, ``count``, ``dx``, ``dy`` where they apply), ``type``
    (``text``) or ``key`` (``chord``, e.g. ``ctrl+s``). Anything else is a :class:`~deskctl.errors.UsageError`.
    """
    kind = event.get("type")
    if kind in ("down", "up", "click", "move", "scroll"):
        x, y = to_desktop(_number(event, "x", "view_point"), _number(event, "y", "view_point"),
                          _number(event, "w", "view_shown_side"), _number(event, "h", "view_shown_side"), size)
        button = act.validate_button(str(event.get("button", "left")))
        if kind == "down":
            return act.MouseDown(x, y, button)
        if kind == "up":
            return act.MouseUp(x, y, button)
        if kind == "click":
            count = _number(event, "count", "click_count") if "count" in event else 1
            return act.Click(x, y, button, count)
        if kind == "move":
            return act.Move(x, y)
        dx = _number(event, "dx", "scroll_clicks") if "dx" in event else 0
        dy = _number(event, "dy", "scroll_clicks") if "dy" in event else 0
        from deskctl.limits import VIEW_WHEEL_STEP as step
        return act.Scroll(x, y, max(-step, min(step, dx)), max(-step, min(step, dy)))
    if kind == "type":
        text = event.get("text")
        if not isinstance(text, str) or not text:
            raise UsageError("input field 'text' must be a non-empty string", code="usage.bad_input")
        return act.TypeText(text)  # its length is bounded by the view's body size (MAX_INPUT_BYTES)
    if kind == "key":
        chord = event.get("chord")
        if not isinstance(chord, str) or not chord:
            raise UsageError("input field 'chord' must be a non-empty string", code="usage.bad_input")
        return act.KeyPress(act.normalize_chord(chord))
    raise UsageError(f"unknown input type {kind!r}; allowed: down, up, click, move, scroll, type, key",
                     code="usage.bad_input")


# -- the server ---------------------------------------------------------------------------------------------------


class _Http(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    view: ViewServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a browser that closes a stream mid-frame is normal; anything else must not print the request line
        # (it holds the token) as the default handler would
        pass


class _Handler(BaseHTTPRequestHandler):
    server: _Http
    server_version = "deskctl-view"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """No request log: every request line holds the token."""

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _headers(self, status: int, content_type: str, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Content-Type-Options", "nosniff")
        # with --control a framed page could be made to click for someone: never in a frame
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Content-Security-Policy",
                         "default-src 'none'; img-src 'self' data:; connect-src 'self'; script-src 'unsafe-inline'; "
                         "style-src 'unsafe-inline'; frame-ancestors 'none'")
        self.end_headers()

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self._headers(status, content_type, len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._reply(status, json.dumps(data).encode(), "application/json")

    def _error(self, status: int, code: str, message: str) -> None:
        self._json(status, {"error": {"code": code, "message": message}})

    def _route(self) -> tuple[str, bool]:
        """(path, whether the token matched)."""
        parts = urlsplit(self.path)
        given = parse_qs(parts.query).get("token", [""])[0]
        return parts.path, self.server.view.token_matches(given)

    # -- verbs -------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        path, allowed = self._route()
        if not allowed:
            self._error(403, "view.forbidden", "a valid token is required")
            return
        view = self.server.view
        if path == "/":
            self._reply(200, view.page, "text/html; charset=utf-8")
        elif path == "/info":
            self._json(200, view.info())
        elif path == "/takeover":
            self._json(200, view.takeover_state())
        elif path == "/frame.jpg":
            self._one_frame()
        elif path == "/stream":
            self._stream()
        else:
            self._error(404, "view.not_found", f"no such page: {path}")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        path, allowed = self._route()
        if not allowed:
            self._error(403, "view.forbidden", "a valid token is required")
            return
        if path not in ("/input", "/takeover"):
            self._error(404, "view.not_found", f"no such endpoint: {path}")
            return
        view = self.server.view
        if path == "/takeover" and not view.takeover_enabled:
            self._error(403, "view.takeover_off", "this view does not take over (start it with --takeover)")
            return
        if not view.control:
            self._error(403, "view.control_off", "this view does not pass input on (start it with --control)")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_INPUT_BYTES:
            self._skip_body(length)
            self._error(413 if length > 0 else 400, "usage.bad_input", "an input event is a small JSON object")
            return
        try:
            event = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            self._error(400, "usage.bad_input", "the body is not JSON")
            return
        if not isinstance(event, dict):
            self._error(400, "usage.bad_input", "an input event is a JSON object")
            return
        if path == "/takeover":
            self._set_takeover(event)
            return
        try:
            view.send_input(event)
        except UsageError as exc:
            self._error(400, exc.code, exc.message)
            return
        except DeskctlError as exc:
            self._error(502, exc.code, exc.message)
            return
        self.send_response(204)
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _set_takeover(self, event: Mapping[str, Any]) -> None:
        hold = event.get("hold")
        if not isinstance(hold, bool):
            self._error(400, "usage.bad_input", "a takeover request is {\"hold\": true|false}")
            return
        try:
            self.server.view.hold(hold, reason=str(event.get("reason") or ""))
        except UsageError as exc:
            self._error(409, exc.code, exc.message)
            return
        self._json(200, self.server.view.takeover_state())

    def _skip_body(self, length: int) -> None:
        """Read past a refused body (up to a few MiB, for a few seconds) before answering and closing: a server that
        closes with unread data makes the kernel reset the connection, and the client may never see the 413."""
        self.close_connection = True
        left = min(length, 4 << 20)
        with contextlib.suppress(OSError):
            self.connection.settimeout(5)
            while left > 0:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)

    # -- frames ------------------------------------------------------------------------------------------------
    def _one_frame(self) -> None:
        feed = self.server.view.feed
        with feed.watching():
            frame = feed.wait(after_capture=feed.captures(), timeout=30.0)
        if frame is None:
            self._view_unavailable()
            return
        self._reply(200, frame.jpeg, "image/jpeg")

    def _view_unavailable(self) -> None:
        feed = self.server.view.feed
        error = feed.error or feed.last_transient  # the reason the capture fails, if it does
        if error is not None:
            self._error(503, error.code, error.message)
        else:
            self._error(503, "view.no_frame", "no frame could be captured in time")

    def _client_gone(self) -> bool:
        """Whether the browser closed the connection (readable with nothing to read), checked without sending."""
        sock = self.connection
        try:
            return bool(wait_readable([sock.fileno()], 0)) and sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _stream(self) -> None:
        feed = self.server.view.feed
        self._headers(200, f"multipart/x-mixed-replace; boundary={BOUNDARY}")
        if self.command == "HEAD":
            return
        with feed.watching():
            # the first frame is one captured after the viewer came: a stale one may be minutes old
            frame = feed.wait(after_capture=feed.captures(), timeout=30.0)
            sent = 0
            # Chromium shows a part only once the next part's headers have arrived: each image is followed at
            # once by the boundary and the headers of the part to come (so no Content-Length: it is not known)
            part_head = f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\n\r\n".encode()
            self.wfile.write(part_head)
            while frame is not None:
                self.wfile.write(frame.jpeg + b"\r\n" + part_head)
                self.wfile.flush()
                sent = frame.seq
                self.server.view.count_frame()
                frame = None
                while frame is None and not feed.stopped:
                    if self._client_gone():
                        return
                    frame = feed.wait(after_seq=sent, timeout=1.0)


class ViewServer:
    """The view of one desktop: an HTTP server on ``127.0.0.1`` in a thread, and its :class:`FrameFeed`.

    ``start()`` then :attr:`url`; ``stop()`` ends the server and the capture and leaves the desktop alone.
    """

    def __init__(self, desk: Desktop, *, port: int = 0, control: bool = False, fps: float = DEFAULT_FPS,
                 quality: int = DEFAULT_QUALITY, token: str | None = None, takeover: bool = False) -> None:
        from deskctl.limits import check_number

        port = check_number("port", port)
        fps = check_number("fps", fps)
        quality = check_number("quality", quality)
        self.desk = desk
        self.control = control
        self.size = desk.size
        self.token = token or secrets.token_urlsafe(24)
        self.feed = FrameFeed(desk.raw_frame, fps=fps, quality=quality)
        if takeover and not control:
            raise UsageError("--takeover needs --control (a person takes over by driving the desktop)",
                             code="usage.bad_option", remedy="deskctl view ID --control --takeover")
        self.takeover_enabled = takeover
        self._takeover: Any = None
        if takeover:
            from deskctl.episodes.takeover import Takeover

            self._takeover = Takeover(desk)
        self.page = render_page(desk.id, desk.provider_name, self.size, control, takeover)
        self._input_lock = threading.Lock()
        self._port = port
        self._httpd: _Http | None = None
        self._thread: threading.Thread | None = None
        self.frames_sent = 0
        self._count_lock = threading.Lock()

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def info(self) -> dict[str, Any]:
        return {"id": self.desk.id, "provider": self.desk.provider_name, "width": self.size[0],
                "height": self.size[1], "control": self.control}

    def takeover_state(self) -> dict[str, Any]:
        """Whether a person holds the desktop through this view, and the agent's open help request."""
        from deskctl.episodes.takeover import pending_request

        held = self._takeover is not None and self._takeover.held
        return {"enabled": self.takeover_enabled, "held": held, "request": pending_request(self.desk.id)}

    def hold(self, hold: bool, reason: str = "") -> None:
        """Take the desktop from the agent (``hold``) or give it back (with ``takeover`` only)."""
        if self._takeover is None:
            raise UsageError("this view does not take over", code="usage.bad_option")
        if hold:
            self._takeover.take(reason=reason)
        else:
            self._takeover.release()

    def send_input(self, event: Mapping[str, Any]) -> None:
        from deskctl.episodes.takeover import acting_as

        action = input_action(event, self.size)
        if self._takeover is not None and not self._takeover.held:
            raise UsageError("take control first (the page's Take control button): the agent has it",
                             code="usage.not_holding")
        with self._input_lock, acting_as("human"):  # one action at a time, in arrival order; a person's input
            self.desk.act(action)

    def count_frame(self) -> None:
        with self._count_lock:
            self.frames_sent += 1

    def start(self) -> ViewServer:
        try:
            httpd = _Http(("127.0.0.1", self._port), _Handler)
        except OSError as exc:
            raise UsageError(f"cannot listen on 127.0.0.1:{self._port}: {exc.strerror or exc}",
                             code="usage.bad_port", remedy="choose another --port, or 0 for any free one") from exc
        httpd.view = self
        self._httpd = httpd
        self.feed.start()
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="deskctl-view-http", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() first"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The page's address, token included: give it only to whom may see (or, with control, drive) the desktop."""
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def stop(self) -> None:
        """Stop serving and capturing (idempotent); the desktop is not touched (a person's hold is released)."""
        if self._takeover is not None:
            self._takeover.release()
        self.feed.stop()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ViewServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
