"""One desktop as an MCP server: the tools a computer-use agent needs, over stdio or streamable HTTP.

:func:`serve` takes a :class:`~deskctl.session.Desktop` that is open and ready, and serves it until the transport
ends (stdio: the client closed our stdin), the desktop ends (its time or money limit), or the process is
signalled. It never destroys the desktop itself: the caller's ``with`` block does, so every guarantee of a
session (destroy on return, exception, SIGINT and SIGTERM; the end and the cost in the ledger) holds unchanged.

The MCP SDK (the ``mcp`` extra: ``pip install '.[mcp]'`` from a checkout) is imported only here, and this module
only by ``deskctl mcp``.

Tools (coordinates are screenshot pixels, the pinned geometry's space): ``screenshot``, ``click``,
``double_click``, ``triple_click``, ``right_click``, ``middle_click``, ``mouse_down``, ``mouse_up``, ``move``,
``drag``, ``scroll``, ``type``, ``key``, ``key_down``, ``key_up``, ``wait``; where the provider's capabilities
say so ``cursor_position``, ``clipboard_get``/``clipboard_set`` and ``window_titles``/``wait_for``/``open_url``;
and only when the server was started with ``allow_exec``, ``exec`` and ``launch`` (which runs any program).
A failed tool call is an MCP tool error (``isError``) whose structured content is deskctl's
``{"error": {"code", "message", ...}}``.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations

from deskctl.errors import DeskctlError, UsageError
from deskctl.limits import BOUNDS, check_number

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["MAX_EXEC_OUTPUT_CHARS", "MAX_WAIT_SECONDS", "HttpListener", "build_server", "listen", "new_token", "serve"]

#: the longest single ``wait`` (a longer pause is several calls, so the agent sees the screen in between): the
#: ``mcp_wait`` bound of deskctl.limits, as every bound of the tools' numbers
MAX_WAIT_SECONDS = BOUNDS["mcp_wait"].hi
#: the most characters of each of ``exec``'s stdout and stderr in one result (the first and last halves are
#: kept, the middle is cut and counted): a model's context, and the client's memory, are not a log file
MAX_EXEC_OUTPUT_CHARS = 64 * 1024
#: how often the main thread checks that the desktop is still usable (its watchdog may end it meanwhile)
_DESKTOP_CHECK_SECONDS = 1.0

_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
_INPUT = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_OPEN = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)
_EXEC = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)


def _text(text: str, structured: dict[str, Any] | None = None) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _error_parts(err: DeskctlError) -> tuple[dict[str, Any], str]:
    """deskctl's error document (redacted) and the line a model reads: ``message (code); remedy: ...``."""
    doc = err.to_dict()
    body = doc["error"]
    return doc, f"{body['message']} ({body['code']})" + (f"; remedy: {body['remedy']}" if body.get("remedy") else "")


def error_result(err: DeskctlError) -> CallToolResult:
    """A tool error carrying deskctl's error document (code, message, provider, remedy), redacted."""
    doc, text = _error_parts(err)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=doc, is_error=True)


class _ErrorCodes:
    """Server middleware: a tool error the SDK made itself (arguments that fail the input schema, an unknown tool)
    gets deskctl's error document too, so every ``isError`` result carries a code."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/call":
            return result
        # the chain hands back the wire form (a dict, camelCase); a model is turned into it the same way
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(result, CallToolResult) \
            else result
        if not isinstance(wire, dict) or not wire.get("isError") or wire.get("structuredContent") is not None:
            return result
        said = " ".join(str(block.get("text", "")) for block in wire.get("content") or []
                        if isinstance(block, dict) and block.get("type") == "text")
        name = (ctx.params or {}).get("name")
        doc, text = _error_parts(UsageError(said or f"tool {name!r} failed", code="usage.bad_tool_call",
                                            remedy="see the tool's input schema (tools/list)"))
        return {**wire, "content": [{"type": "text", "text": text}], "structuredContent": doc}


class _Tools:
    """The tool functions over one desktop. Calls are serialised: a desktop has one pointer and one keyboard, and
    an agent that pipelines calls means them in order."""

    def __init__(self, desk: Desktop) -> None:
        self.desk = desk
        self._lock = threading.Lock()

    def call(self, work: Callable[[], CallToolResult]) -> CallToolResult:
        with self._lock:
            try:
                return work()
            except DeskctlError as err:
                return error_result(err)
            except Exception as exc:  # the agent gets a tool error; the server and the desktop stay up
                from deskctl._redact import redact

                return error_result(DeskctlError(f"internal error: {type(exc).__name__}: {redact(str(exc))}"))

    def _input(self, action: Callable[[], None], said: str) -> CallToolResult:
        def work() -> CallToolResult:
            action()
            return _text(said)

        return self.call(work)

    def screenshot(self) -> CallToolResult:
        """Take a screenshot of the whole desktop (PNG). Its pixels are the coordinate space of every other tool."""

        def work() -> CallToolResult:
            shot = self.desk.screenshot()
            return CallToolResult(
                content=[ImageContent(type="image", data=base64.b64encode(shot.png).decode("ascii"),
                                      mime_type="image/png"),
                         TextContent(type="text", text=f"{shot.width}x{shot.height}")],
                structured_content={"width": shot.width, "height": shot.height},
            )

        return self.call(work)

    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> CallToolResult:
        """Move the pointer to (x, y) and click. button: left, middle or right; count: 1, 2 (double) or 3."""

        def work() -> CallToolResult:
            self.desk.click(x, y, button, count)  # count, x and y are checked against deskctl.limits there
            return _text(f"clicked {button} x{count} at ({x}, {y})")

        return self.call(work)

    def double_click(self, x: int, y: int) -> CallToolResult:
        """Double-click the left button at (x, y)."""
        return self._input(lambda: self.desk.double_click(x, y), f"double-clicked at ({x}, {y})")

    def triple_click(self, x: int, y: int) -> CallToolResult:
        """Triple-click the left button at (x, y) (selects a line in most programs)."""
        return self._input(lambda: self.desk.triple_click(x, y), f"triple-clicked at ({x}, {y})")

    def right_click(self, x: int, y: int) -> CallToolResult:
        """Click the right button at (x, y)."""
        return self._input(lambda: self.desk.right_click(x, y), f"right-clicked at ({x}, {y})")

    def middle_click(self, x: int, y: int) -> CallToolResult:
        """Click the middle button at (x, y)."""
        return self._input(lambda: self.desk.middle_click(x, y), f"middle-clicked at ({x}, {y})")

    def mouse_down(self, x: int, y: int, button: str = "left") -> CallToolResult:
        """Move to (x, y) and press a mouse button without releasing it (left, middle or right)."""
        return self._input(lambda: self.desk.mouse_down(x, y, button), f"{button} down at ({x}, {y})")

    def mouse_up(self, x: int, y: int, button: str = "left") -> CallToolResult:
        """Move to (x, y) and release a mouse button (left, middle or right)."""
        return self._input(lambda: self.desk.mouse_up(x, y, button), f"{button} up at ({x}, {y})")

    def move(self, x: int, y: int) -> CallToolResult:
        """Move the pointer to (x, y) without clicking."""
        return self._input(lambda: self.desk.move(x, y), f"pointer at ({x}, {y})")

    def drag(self, x1: int, y1: int, x2: int, y2: int, button: str = "left") -> CallToolResult:
        """Press at (x1, y1), move to (x2, y2) holding the button, release there."""
        return self._input(lambda: self.desk.drag(x1, y1, x2, y2, button), f"dragged from ({x1}, {y1}) to ({x2}, {y2})")

    def scroll(self, x: int, y: int, dy: int = 0, dx: int = 0) -> CallToolResult:
        """Scroll at (x, y) by wheel clicks: dy > 0 down, dy < 0 up; dx > 0 right, dx < 0 left."""
        return self._input(lambda: self.desk.scroll(x, y, dx=dx, dy=dy), f"scrolled dx={dx} dy={dy} at ({x}, {y})")

    def type_text(self, text: str) -> CallToolResult:
        """Type text (any Unicode) at the keyboard focus."""
        return self._input(lambda: self.desk.type(text), f"typed {len(text)} characters")

    def key(self, chord: str) -> CallToolResult:
        """Press and release a key or chord: enter, tab, escape, ctrl+s, ctrl+shift+t, alt+f4, f5, pageup, ..."""
        return self._input(lambda: self.desk.key(chord), f"pressed {chord}")

    def key_down(self, key: str) -> CallToolResult:
        """Hold a key down (e.g. shift) until key_up."""
        return self._input(lambda: self.desk.key_down(key), f"{key} down")

    def key_up(self, key: str) -> CallToolResult:
        """Release a key held with key_down."""
        return self._input(lambda: self.desk.key_up(key), f"{key} up")

    def cursor_position(self) -> CallToolResult:
        """Where the mouse pointer is, in screenshot pixels."""

        def work() -> CallToolResult:
            x, y = self.desk.cursor_position()
            return _text(f"({x}, {y})", {"x": x, "y": y})

        return self.call(work)

    def wait(self, seconds: float) -> CallToolResult:
        """Wait this many seconds (at most 60) for the screen to settle, e.g. after starting a program."""

        def work() -> CallToolResult:
            check_number("mcp_wait", seconds, what="seconds")
            _ = self.desk.size  # a desktop that ended is an error now, not after the wait
            time.sleep(seconds)
            return _text(f"waited {seconds:g}s")

        return self.call(work)

    def clipboard_get(self) -> CallToolResult:
        """Read the desktop's clipboard text."""

        def work() -> CallToolResult:
            text = self.desk.clipboard_get()
            return _text(text, {"text": text})

        return self.call(work)

    def clipboard_set(self, text: str) -> CallToolResult:
        """Put text on the desktop's clipboard (paste it with key ctrl+v)."""
        return self._input(lambda: self.desk.clipboard_set(text), f"clipboard set ({len(text)} characters)")

    def open_url(self, url: str) -> CallToolResult:
        """Open a URL in the desktop's browser; use wait_for with its page title, then take a screenshot."""
        return self._input(lambda: self.desk.open_url(url), f"opened {url}")

    def window_titles(self) -> CallToolResult:
        """List the titles of the desktop's top-level windows."""

        def work() -> CallToolResult:
            titles = self.desk.window_titles()
            return _text("\n".join(titles) if titles else "(no titled windows)", {"titles": titles})

        return self.call(work)

    def wait_for(self, title: str, timeout: float = 30.0) -> CallToolResult:
        """Wait (at most 60 s) until a window whose title contains `title` exists; returns its whole title.
        Fails with wait.timeout when none appears in time."""

        def work() -> CallToolResult:
            check_number("mcp_wait_timeout", timeout, what="timeout")
            found = self.desk.wait_for(title, timeout=timeout)
            return _text(str(found), {"title": str(found)})

        return self.call(work)

    def launch(self, app: str, args: list[str] | None = None) -> CallToolResult:
        """Start a program on the desktop, detached (a GUI app: it keeps running); returns its process id."""

        def work() -> CallToolResult:
            pid = self.desk.launch(app, *(args or []))
            return _text(f"started {app}" + (f" (pid {pid})" if pid is not None else ""), {"pid": pid})

        return self.call(work)

    def exec(self, command: str, timeout: float = 60.0, cwd: str | None = None,
             env: dict[str, str] | None = None, background: bool = False) -> CallToolResult:
        """Run a shell command on the desktop's machine (with its DISPLAY) in `cwd` with `env` added; returns
        exit_code, stdout, stderr. background: start it detached (a GUI app) and return its pid at once."""

        def work() -> CallToolResult:
            result = self.desk.exec(command, timeout=timeout, cwd=cwd, env=env, background=background)
            if background and result.exit_code == 0:
                return _text(f"started (pid {result.pid})", result.to_dict())
            doc = result.to_dict()
            notes: list[str] = []
            for stream in ("stdout", "stderr"):
                whole = len(doc[stream])
                doc[stream], cut = _cap(doc[stream])
                if cut:
                    doc[f"{stream}_cut_chars"] = cut
                    notes.append(f"{stream}: {cut} of {whole} characters cut from the middle "
                                 f"(at most {MAX_EXEC_OUTPUT_CHARS} kept)")
            text = f"exit code {doc['exit_code']}\n{doc['stdout']}" + (f"\n{doc['stderr']}" if doc["stderr"] else "")
            if notes:
                text += "\n[deskctl: output cut: " + "; ".join(notes) + "; write it to a file to read it all]"
            return _text(text, doc)

        return self.call(work)


_CUT_MARK = "\n[... cut by deskctl ...]\n"


def _cap(text: str) -> tuple[str, int]:
    """``text`` within :data:`MAX_EXEC_OUTPUT_CHARS` (its first and last halves around a mark), and how many
    characters were cut (0: none)."""
    if len(text) <= MAX_EXEC_OUTPUT_CHARS:
        return text, 0
    half = MAX_EXEC_OUTPUT_CHARS // 2
    return text[:half] + _CUT_MARK + text[-half:], len(text) - 2 * half


def build_server(desk: Desktop, *, allow_exec: bool = False) -> MCPServer[Any]:
    """The MCP server object for ``desk`` (tools registered; nothing started)."""
    from deskctl import __version__

    width, height = desk.size
    tools = _Tools(desk)
    server: MCPServer[Any] = MCPServer(
        name="deskctl",
        version=__version__,
        instructions=(
            f"One {width}x{height} {desk.spec.platform.value} desktop ({desk.provider_name}, session {desk.id}). "
            "Coordinates are pixels of the screenshot; take a screenshot to see the result of an action."
        ),
        log_level="WARNING",
        middleware=[_ErrorCodes()],
    )
    entries: list[tuple[Callable[..., CallToolResult], str, ToolAnnotations]] = [
        (tools.screenshot, "screenshot", _READ_ONLY),
        (tools.click, "click", _INPUT),
        (tools.double_click, "double_click", _INPUT),
        (tools.triple_click, "triple_click", _INPUT),
        (tools.right_click, "right_click", _INPUT),
        (tools.middle_click, "middle_click", _INPUT),
        (tools.mouse_down, "mouse_down", _INPUT),
        (tools.mouse_up, "mouse_up", _INPUT),
        (tools.move, "move", _INPUT),
        (tools.drag, "drag", _INPUT),
        (tools.scroll, "scroll", _INPUT),
        (tools.type_text, "type", _INPUT),
        (tools.key, "key", _INPUT),
        (tools.key_down, "key_down", _INPUT),
        (tools.key_up, "key_up", _INPUT),
        (tools.wait, "wait", _READ_ONLY),
    ]
    capabilities = desk.provider.capabilities
    if capabilities.cursor_position:
        entries.append((tools.cursor_position, "cursor_position", _READ_ONLY))
    if capabilities.clipboard:
        entries += [(tools.clipboard_get, "clipboard_get", _READ_ONLY), (tools.clipboard_set, "clipboard_set", _INPUT)]
    if capabilities.windows:
        entries += [(tools.window_titles, "window_titles", _READ_ONLY), (tools.wait_for, "wait_for", _READ_ONLY),
                    (tools.open_url, "open_url", _OPEN)]
    if allow_exec:
        entries.append((tools.exec, "exec", _EXEC))
        if capabilities.windows:  # any program with any arguments: as much a command as exec is
            entries.append((tools.launch, "launch", _EXEC))
    for fn, name, hints in entries:
        server.add_tool(_abandonable(fn), name=name, annotations=hints)
    return server


def _abandonable(fn: Callable[..., CallToolResult]) -> Callable[..., Any]:
    """``fn`` as an async tool whose thread the server leaves behind when the call is cancelled. The SDK runs a
    plain function in a worker thread it waits for, so a client that closed our stdin during a long call (an
    ``exec`` of hours) kept the server, and the desktop, up until the call ended; cancelled, the call now lets
    the server end at once, and the caller's ``with`` block destroys the desktop (the thread, a daemon, stops
    with the process or fails on the closed display). Same signature and doc: the tool's schema is unchanged."""
    import functools

    @functools.wraps(fn)
    async def call(**arguments: Any) -> CallToolResult:
        import anyio.to_thread

        result: CallToolResult = await anyio.to_thread.run_sync(functools.partial(fn, **arguments),
                                                               abandon_on_cancel=True)
        return result

    return call


@dataclass
class HttpListener:
    """A bound TCP socket for the streamable HTTP transport, and the URL clients use. ``loopback``: only this
    machine can reach it."""

    sock: socket.socket
    url: str
    host: str
    loopback: bool = True


def new_token() -> str:
    """A fresh bearer token for the HTTP transport (printed once, like the view's URL token)."""
    import secrets

    return secrets.token_urlsafe(32)


class _BearerAuth:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer TOKEN`` (compared in constant time), else
    401 with deskctl's error document; the lifespan passes through. The MCP endpoint runs a desktop's mouse and
    keyboard (and with allow_exec a shell): an open port on loopback is reachable by every local user and any
    web page's fetch, so the port alone is not enough."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        import hmac

        if scope.get("type") == "http":
            given = b""
            for name, value in scope.get("headers") or []:
                if name.lower() == b"authorization":
                    given = value
            scheme, _, credential = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(credential.strip(), self._token):
                import json

                doc, _ = _error_parts(DeskctlError("a valid bearer token is required", code="mcp.unauthorized",
                                                   remedy="send Authorization: Bearer TOKEN (deskctl mcp printed it)"))
                body = json.dumps(doc).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="deskctl"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def listen(host: str, port: int, path: str) -> HttpListener:
    """Bind ``host:port`` now (``port`` 0: a free one), so a port in use is a usage error before any desktop is
    made and the printed URL has the real port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"cannot resolve --bind {host!r}: {exc.strerror}", code="usage.bad_option") from exc
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}", code="usage.bad_option",
                         remedy="choose another --port (0 picks a free one)") from exc
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    import ipaddress

    loopback = ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback
    return HttpListener(sock=sock, url=f"http://{shown}:{bound_port}{path}", host=host, loopback=loopback)


@dataclass
class _Running:
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    stop: Callable[[], None] | None = None


def serve(desk: Desktop, *, transport: str = "stdio", allow_exec: bool = False,
          listener: HttpListener | None = None, path: str = "/mcp", token: str | None = None) -> None:
    """Serve ``desk`` until the transport ends (stdio: our stdin closed) or the desktop ends (raises its error).
    HTTP needs ``token``: every request must carry it as a bearer token.

    The server runs in a daemon thread with its own event loop, so this (main) thread stays where deskctl's
    SIGINT/SIGTERM handling unwinds it into the caller's ``with`` block, which destroys the desktop; a stdio
    reader blocked on a pipe cannot delay that.
    """
    server = build_server(desk, allow_exec=allow_exec)
    running = _Running()

    def run() -> None:
        import anyio

        try:
            if transport == "stdio":
                anyio.run(server.run_stdio_async)
            else:
                assert listener is not None and token
                _run_http(server, listener, path, running, token)
        except BaseException as exc:
            running.error = exc
        finally:
            running.done.set()

    thread = threading.Thread(target=run, name="deskctl-mcp", daemon=True)
    thread.start()
    try:
        while not running.done.wait(_DESKTOP_CHECK_SECONDS):
            _ = desk.size  # raises the desktop's own error (budget.exceeded, session closed) once it has ended
    finally:
        if running.stop is not None:
            running.stop()
            # short: the desktop's destroy comes after this, and an open event stream can hold uvicorn's
            # graceful shutdown for as long as the client keeps it; the daemon thread ends with the process
            thread.join(timeout=1)
    if running.error is not None:
        raise running.error


def _run_http(server: MCPServer[Any], listener: HttpListener, path: str, running: _Running, token: str) -> None:
    import uvicorn

    app = _BearerAuth(server.streamable_http_app(streamable_http_path=path, host=listener.host), token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)

    def stop() -> None:
        http.should_exit = True

    running.stop = stop
    with contextlib.closing(listener.sock):
        http.run(sockets=[listener.sock])
