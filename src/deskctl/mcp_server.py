"""One desktop as an MCP server: the tools a computer-use agent needs, over stdio or streamable HTTP.

:func:`serve` takes a :class:`~deskctl.session.Desktop` that is open and ready, and serves it until the transport
ends (stdio: the client closed our stdin), the desktop ends (its time or money limit), or the process is
signalled. It never destroys the desktop itself: the caller's ``with`` block does, so every guarantee of a
session (destroy on return, exception, SIGINT and SIGTERM; the end and the cost in the ledger) holds unchanged.

The MCP SDK (the ``mcp`` extra: ``pip install '.[mcp]'`` from a checkout) is imported only here, and this module
only by ``deskctl mcp``.

The tools are the MCP actions of :mod:`deskctl.action_table` (docs/actions.md), made from it: the tool's name,
description and input schema (types, defaults, the :mod:`deskctl.limits` bounds as ``minimum``/``maximum``/
``maxLength``) are the table's, the call is the entry's Desktop method, the result is as its ``result`` says (a
PNG image, text, a JSON object). A tool is offered where the provider has the entry's capability; those that run
programs (``exec``, ``launch``) only when the server was started with ``allow_exec``. Coordinates are
screenshot pixels, the pinned geometry's space.
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

from deskctl.action_table import ACTIONS, ActionSpec, Param, invoke, jsonable
from deskctl.errors import DeskctlError, UsageError
from deskctl.limits import BOUNDS, check_number

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["MAX_EXEC_OUTPUT_CHARS", "MAX_WAIT_SECONDS", "HttpListener", "build_server", "input_schema_extra", "listen",
           "new_token", "offered", "serve", "tool_function"]

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
    """The tool calls over one desktop. Calls are serialised: a desktop has one pointer and one keyboard, and an
    agent that pipelines calls means them in order."""

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

    def run(self, spec: ActionSpec, arguments: dict[str, Any]) -> CallToolResult:
        """One tool call: the arguments checked against their bounds (the MCP's own where the table says so),
        then the Desktop method (or the surface's own action), then the result as the table says it is."""

        def work() -> CallToolResult:
            for param in spec.params_on("mcp"):
                value = arguments.get(param.name)
                if param.mcp_bound is not None and value is not None and param.kind in ("int", "float"):
                    check_number(param.mcp_bound, value, what=param.name, strings=False)
            value = _OWN[spec.name](self.desk, **arguments) if spec.surface_only else invoke(self.desk, spec, arguments)
            return _PRESENT.get(spec.name, _RESULTS[spec.result])(spec, value, arguments)

        return self.call(work)


def _wait(desk: Desktop, seconds: float) -> None:
    _ = desk.size  # a desktop that ended is an error now, not after the wait
    time.sleep(seconds)


#: the actions the MCP does itself (``surface_only`` in the table): no Desktop method
_OWN: dict[str, Callable[..., Any]] = {"wait": _wait}


def _said(spec: ActionSpec, arguments: dict[str, Any]) -> str:
    """``click x=10 y=20 button='left'``: what was done, a long text by its length only."""
    shown = []
    for param in spec.params_on("mcp"):
        value = arguments.get(param.name)
        if value is None or value == param.default:
            continue
        shown.append(f"{param.name}=({len(value)} characters)" if isinstance(value, str) and len(value) > 40
                     else f"{param.name}={value!r}")
    return " ".join([spec.mcp_name, *shown])


def _none(spec: ActionSpec, value: Any, arguments: dict[str, Any]) -> CallToolResult:
    return _text(f"done: {_said(spec, arguments)}")


def _image(spec: ActionSpec, value: Any, arguments: dict[str, Any]) -> CallToolResult:
    import json

    structured: dict[str, Any] = {"width": value.width, "height": value.height}
    text = f"{value.width}x{value.height}"
    transform = getattr(value, "transform", None)
    if transform is not None:  # a resized or cropped shot: the space its points are in (pass it as space)
        structured["transform"] = transform.to_dict()
        text += f"; transform (pass as space to pointer tools): {json.dumps(structured['transform'])}"
    return CallToolResult(
        content=[ImageContent(type="image", data=base64.b64encode(value.png).decode("ascii"), mime_type="image/png"),
                 TextContent(type="text", text=text)],
        structured_content=structured,
    )


def _value(spec: ActionSpec, value: Any, arguments: dict[str, Any]) -> CallToolResult:
    """A text or JSON result: the structured content is an object (a tuple by ``result_fields``, anything else
    under ``mcp_result_key``); the text is the value as a person reads it."""
    import json

    value = jsonable(value)
    if spec.result_fields:
        structured = dict(zip(spec.result_fields, value, strict=True))
        return _text(json.dumps(structured), structured)
    assert spec.mcp_result_key is not None
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        text = "\n".join(json.dumps(item) if isinstance(item, dict) else str(item) for item in value) or "(none)"
    else:
        text = json.dumps(value)
    return _text(text, value if isinstance(value, dict) else {spec.mcp_result_key: value})


def _exec_result(spec: ActionSpec, result: Any, arguments: dict[str, Any]) -> CallToolResult:
    """exec's result: the pid of a background command; else exit code and output, each stream capped."""
    if arguments.get("background") and result.exit_code == 0:
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


_Present = Callable[[ActionSpec, Any, dict[str, Any]], CallToolResult]
#: a result as a tool result, by the table's ``result``
_RESULTS: dict[str, _Present] = {"none": _none, "image": _image, "text": _value, "json": _value}
#: the one action whose result is not the default of its kind: a command's output can be of any size
_PRESENT: dict[str, _Present] = {"exec": _exec_result}


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
    for spec in offered(desk, allow_exec=allow_exec):
        server.add_tool(tool_function(tools, spec), name=spec.mcp_name, description=spec.doc,
                        annotations=_hints(spec))
    return server


def offered(desk: Desktop, *, allow_exec: bool) -> list[ActionSpec]:
    """The actions this desktop's server offers as tools: the table's MCP actions the provider has the capability
    for; those that run programs (exec, launch) only with ``allow_exec``."""
    capabilities = desk.provider.capabilities
    return [spec for spec in ACTIONS if "mcp" in spec.surfaces
            and (spec.capability is None or getattr(capabilities, spec.capability))
            and (allow_exec or not spec.runs_code)]


def _hints(spec: ActionSpec) -> ToolAnnotations:
    if spec.runs_code:
        return _EXEC
    if spec.surface_only or spec.result != "none":
        return _READ_ONLY
    return _OPEN if spec.open_world else _INPUT


#: a parameter's Python type, which the SDK turns into its JSON schema and checks the arguments against
_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool, "strs": list[str],
                          "strmap": dict[str, str], "json": Any}


def input_schema_extra(param: Param) -> dict[str, Any]:
    """What the JSON schema says of ``param`` beyond its type: its bound (``minimum``/``exclusiveMinimum`` and
    ``maximum``, or ``minLength``/``maxLength``) and its choices. Advertised, not enforced by the SDK: the call
    checks the bound itself, so a refused value gets the bound's own error code, as on every surface."""
    extra: dict[str, Any] = {}
    if param.mcp_bound is not None:
        bound = BOUNDS[param.mcp_bound]
        if param.kind in ("int", "float"):
            extra["exclusiveMinimum" if bound.lo_open else "minimum"] = _number(bound.lo, param.kind)
            extra["maximum"] = _number(bound.hi, param.kind)
        else:
            assert param.kind == "str", f"{param.name}: a bound on a {param.kind} parameter"
            if bound.lo > 0:
                extra["minLength"] = int(bound.lo)
            extra["maxLength"] = int(bound.hi)
    if param.choices:
        extra["enum"] = list(param.choices)
    return extra


def _number(value: float, kind: str) -> float | int:
    return int(value) if kind == "int" or float(value).is_integer() else value


def tool_function(tools: _Tools, spec: ActionSpec) -> Callable[..., Any]:
    """``spec`` as an async tool function whose signature is the table's (the SDK makes the input schema from it).
    Its thread is left behind when the call is cancelled: the SDK runs a plain function in a worker thread it
    waits for, so a client that closed our stdin during a long call (an ``exec`` of hours) kept the server, and
    the desktop, up until the call ended; cancelled, the call now lets the server end at once, and the caller's
    ``with`` block destroys the desktop (the thread, a daemon, stops with the process or fails on the closed
    display)."""
    import functools
    import inspect
    from typing import Annotated

    from pydantic import Field

    assert spec.result in _RESULTS or spec.name in _PRESENT, \
        f"{spec.name}: the MCP has no tool result for a {spec.result!r} result; teach deskctl.mcp_server"
    assert not spec.surface_only or spec.name in _OWN, f"{spec.name}: the MCP does not do it itself"
    parameters = []
    for param in spec.params_on("mcp"):
        assert param.kind in _TYPES, \
            f"{spec.name}.{param.name}: the MCP has no type for a {param.kind!r} parameter; teach deskctl.mcp_server"
        kind = _TYPES[param.kind] | None if param.default is None else _TYPES[param.kind]
        default = inspect.Parameter.empty if param.required else \
            list(param.default) if isinstance(param.default, tuple) else param.default
        field = Field(description=param.doc, json_schema_extra=input_schema_extra(param) or None)
        parameters.append(inspect.Parameter(param.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=Annotated[kind, field]))

    async def call(**arguments: Any) -> CallToolResult:
        import anyio.to_thread

        result: CallToolResult = await anyio.to_thread.run_sync(functools.partial(tools.run, spec, arguments),
                                                               abandon_on_cancel=True)
        return result

    call.__name__ = call.__qualname__ = spec.mcp_name
    call.__doc__ = spec.doc
    call.__signature__ = inspect.Signature(parameters, return_annotation=CallToolResult)  # type: ignore[attr-defined]
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
