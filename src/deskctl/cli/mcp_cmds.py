"""``deskctl mcp``: one desktop served to an MCP client (stdio or streamable HTTP) for as long as it is connected."""

from __future__ import annotations

import json
import sys
import time

import click

from deskctl.cli._common import Number, desktop_options, json_option, note
from deskctl.errors import UsageError

__all__ = ["mcp"]


def _require_sdk() -> None:
    try:
        import mcp.server.mcpserver  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"deskctl mcp needs the MCP SDK, which is not installed ({exc})",
                         code="usage.missing_extra",
                         remedy="pip install 'mcp>=2.3,<3' (the mcp extra: pip install '.[mcp]' in a deskctl checkout)",
                         ) from exc


@click.command(name="mcp")
@desktop_options
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio (the client starts this process) or http (streamable HTTP at --bind:--port --path).")
@click.option("--bind", default="127.0.0.1", show_default=True, help="http: address to listen on.")
@click.option("--port", type=Number("port"), default=8000, show_default=True,
              help="http: port to listen on (0: a free one; the URL is printed on stderr).")
@click.option("--path", "http_path", default="/mcp", show_default=True, help="http: the endpoint's path.")
@click.option("--allow-exec", is_flag=True, help="Offer the exec tool (shell commands on the desktop's machine).")
@json_option
def mcp(provider: str, platform: str, geometry: str, window_geometry: str | None, start_url: str | None,
        window_manager: bool, ttl: str | None, max_minutes: float | None, max_usd: float | None,
        budget: str | None, unknown_cost: str | None, labels: tuple[str, ...], options: tuple[str, ...],
        host: str | None, accept_new_host_key: bool, ready_timeout: float, record: str | None,
        record_settle: float, video: bool, video_fps: int | None, video_max_seconds: float | None,
        video_max_mb: float | None, transport: str, bind: str, port: int,
        http_path: str, allow_exec: bool, as_json: bool) -> None:
    """Serve one desktop to an MCP client: screenshot, clicks, move, drag, scroll, type, keys, cursor position,
    wait (and exec with --allow-exec).

    The desktop is preflighted and made at start, and destroyed when the client disconnects (stdio: our stdin
    closes), on SIGTERM or Ctrl-C, or at its --max-minutes / --max-usd limit; the ledger records it as for any
    session. stdout carries the protocol (stdio); messages go to stderr.

    HTTP needs a bearer token, made afresh for each run and printed on stdout when the server listens: the URL,
    then the header line "Authorization: Bearer TOKEN" (with --json, one line {"id", "provider", "geometry",
    "url", "token"}). A request without it gets 401. A --bind that is not a loopback address is warned about.
    """
    _require_sdk()
    from deskctl.cli._app import current_app
    from deskctl.cli._spec import check_environment, spec_from_flags
    from deskctl.providers import load_provider_class
    from deskctl.session import Desktop

    if not http_path.startswith("/"):
        raise UsageError(f"--path {http_path!r} must start with '/'", code="usage.bad_option")
    config = current_app().config
    spec = spec_from_flags(
        config, provider=provider, options=options, host=host, accept_new_host_key=accept_new_host_key,
        labels=labels, platform=platform, geometry=geometry, window_geometry=window_geometry,
        start_url=start_url, window_manager=window_manager, ttl_seconds=ttl, max_minutes=max_minutes,
        max_usd=max_usd, budget=budget, unknown_cost=unknown_cost,
    )
    check_environment()
    if allow_exec and not load_provider_class(spec.provider).capabilities.exec:
        raise UsageError(f"provider {spec.provider!r} cannot run commands: drop --allow-exec",
                         code="usage.unsupported", provider=spec.provider)

    from deskctl import mcp_server

    # bound before the desktop is made: a port in use costs nothing
    listener = mcp_server.listen(bind, port, http_path) if transport == "http" else None
    token = mcp_server.new_token() if listener is not None else None
    if listener is not None and not listener.loopback:
        note(f"WARNING: --bind {bind} serves this desktop beyond this machine, over plain HTTP: whoever can reach "
             f"{listener.url} and read the token (on the network path, too) drives its mouse and keyboard"
             + (" and runs commands on it (--allow-exec)" if allow_exec else "")
             + ". Prefer the default 127.0.0.1 with an SSH tunnel or a TLS proxy in front.")
    started = time.monotonic()
    note(f"bringing up a {spec.geometry_label()} {spec.platform.value} desktop on {spec.provider} ...")
    try:
        from deskctl.recording_video import VideoOptions

        with Desktop(spec, ready_timeout=ready_timeout, record=record, record_settle=record_settle,
                     video=VideoOptions.from_flags(video, video_fps, video_max_seconds, video_max_mb),
                     progress=lambda step: note(f"  {time.monotonic() - started:6.2f}s  {step}")) as desk:
            width, height = desk.size
            where = listener.url if listener is not None else "stdio"
            note(f"{desk.id} is up on {desk.provider_name}: {width}x{height}; serving MCP on {where}"
                 + (" (exec allowed)" if allow_exec else ""))
            if listener is not None:
                # the token goes where the view's URL token goes: stdout, for whoever started this server
                if as_json:
                    click.echo(json.dumps({"id": desk.id, "provider": desk.provider_name,
                                           "geometry": f"{width}x{height}", "url": listener.url, "token": token}))
                else:
                    click.echo(f"{listener.url}\nAuthorization: Bearer {token}")
                sys.stdout.flush()
            mcp_server.serve(desk, transport=transport, allow_exec=allow_exec, listener=listener, path=http_path,
                             token=token)
            note(f"{desk.id}: the MCP transport ended (client gone); destroying the desktop")
    finally:
        if listener is not None:
            listener.sock.close()
