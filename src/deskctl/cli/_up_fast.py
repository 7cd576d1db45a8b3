"""``deskctl up``'s work, without click: the click command (:func:`deskctl.cli.session_cmds.up`) and the click-free
path of the plain forms of ``deskctl up`` (:func:`run`) both call :func:`bring_up`, so both print the same bytes
and raise the same errors.

``deskctl up`` is a whole process per desktop (a CI job's, a fleet's, a shell loop's), and click's import was a
third of its instructions. :func:`run` takes the plain forms only: ``--provider``/``-p``, ``--geometry``/``-g``,
``--ttl`` (each at most once; ``--name VALUE`` or ``--name=VALUE``), ``--label`` and ``--option``/``-o``
(repeatable) and ``--json``. Anything else (another flag, ``--help``, a value that starts with ``-``, an option
given twice, an argument, one of the flags' environment variables set, ``[defaults]`` in a config file, shell
completion) it leaves to click, untouched.
"""

from __future__ import annotations

import os
import time

from deskctl.cli._output import echo, echo_json
from deskctl.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from deskctl.config import Config
    from deskctl.session import Desktop

__all__ = ["bring_up", "parse", "run"]


def bring_up(config: Config, *, provider: str, platform: str, geometry: str, window_geometry: str | None,
             start_url: str | None, window_manager: bool, ttl: str | None, max_minutes: float | None,
             max_usd: float | None, budget: str | None, unknown_cost: str | None, labels: tuple[str, ...],
             options: tuple[str, ...], host: str | None, accept_new_host_key: bool, ready_timeout: float,
             record: str | None, record_settle: float, video: bool, video_fps: int | None,
             video_max_seconds: float | None, video_max_mb: float | None, wait_title: str | None,
             wait_url: str | None, wait_command: str | None, as_json: bool) -> None:
    """Bring a detached desktop up (preflight, create, wait, verify geometry) and print its id; see
    ``deskctl up --help``."""
    from deskctl.cli._spec import check_environment, spec_from_flags
    from deskctl.session import Desktop

    def note(message: str) -> None:
        echo(message, err=True)

    waits = [w for w in ({"title": wait_title}, {"url": wait_url}, {"command": wait_command})
             if next(iter(w.values())) is not None]
    if len(waits) > 1:
        raise UsageError("give one of --wait-for, --wait-for-url and --wait-for-command", code="usage.invalid")
    ready_when = waits[0] if waits else None
    if ready_when is not None:
        from deskctl.observe.readiness import condition

        condition(ready_when)

    spec = spec_from_flags(
        config, provider=provider, options=options, host=host, accept_new_host_key=accept_new_host_key,
        labels=labels, platform=platform, geometry=geometry, window_geometry=window_geometry,
        start_url=start_url, window_manager=window_manager, ttl_seconds=ttl, max_minutes=max_minutes,
        max_usd=max_usd, budget=budget, unknown_cost=unknown_cost,
    )
    check_environment()  # DESKCTL_HOME, DESKCTL_LEDGER_URL: refused before the preflight and the intent row
    started = time.monotonic()
    note(f"bringing up a {spec.geometry_label()} {spec.platform.value} desktop on {spec.provider} ...")

    def progress(step: str) -> None:
        note(f"  {time.monotonic() - started:6.2f}s  {step}")

    video_options = None
    if video or (video_fps, video_max_seconds, video_max_mb) != (None, None, None):
        from deskctl.recording_video import VideoOptions  # here: an `up` without a video does not load it

        video_options = VideoOptions.from_flags(video, video_fps, video_max_seconds, video_max_mb)
    desk = Desktop(spec, ready_timeout=ready_timeout, detached=True, progress=None if as_json else progress,
                   record=record, record_settle=record_settle, video=video_options)
    from deskctl.core.x11wire import prefer_wire

    prefer_wire()  # this process pings the display and reads its size: over the X11 wire, without python-xlib
    try:
        desk.open()
    finally:
        prefer_wire(False)  # a process that goes on (a harness calling main()) gets full drivers again
    if ready_when is not None:
        from deskctl.observe.readiness import ready_or_destroyed

        progress(f"waiting for {next(iter(ready_when.values()))!r}")
        ready_or_destroyed(desk, ready_when, ready_timeout)
    try:
        info = describe(desk)
        if desk.recording is not None:
            info["record"] = str(desk.recording.directory)
        info["seconds_to_ready"] = round(time.monotonic() - started, 3)
    finally:
        desk.release()
    if as_json:
        echo_json(info)
        return
    echo(info["id"])
    note(f"{info['id']} is up on {info['provider']}: {info['geometry']}"
         + (f", DISPLAY={info['display']}" if info.get("display") else "")
         + f" ({info['seconds_to_ready']}s); end it with: deskctl down {info['id']}")
    if info.get("record"):
        note(f"recording every action into {info['record']} (deskctl trajectory show {info['record']})")


def describe(desk: Desktop) -> dict[str, Any]:
    """What ``deskctl up`` prints of a desktop that is up."""
    handle = desk.handle
    width, height = desk.size
    info: dict[str, Any] = {
        "id": desk.id,
        "provider": desk.provider_name,
        "platform": desk.spec.platform.value,
        "geometry": f"{width}x{height}",
        "expires_at": desk.expires_at,
    }
    if handle is not None:
        info["resource_id"] = handle.resource_id
        for key in ("display", "xauthority"):
            if key in handle.data:
                info[key] = handle.data[key]
    return info


#: flag -> (parameter, repeatable) of the plain forms :func:`parse` takes
_FLAGS: dict[str, tuple[str, bool]] = {
    "--provider": ("provider", False), "-p": ("provider", False),
    "--geometry": ("geometry", False), "-g": ("geometry", False),
    "--ttl": ("ttl", False),
    "--label": ("labels", True),
    "--option": ("options", True), "-o": ("options", True),
}
#: the environment variables click reads for `up`'s flags (desktop_options): when one is set, click's call
_ENVVARS = ("DESKCTL_PROVIDER", "DESKCTL_PLATFORM", "DESKCTL_GEOMETRY", "DESKCTL_TTL", "DESKCTL_MAX_MINUTES",
            "DESKCTL_MAX_USD", "DESKCTL_BUDGET", "DESKCTL_UNKNOWN_COST", "DESKCTL_SSH_HOST")


def parse(args: list[str]) -> dict[str, Any] | None:
    """The parameters of ``up`` that click would parse ``args`` into, for the plain forms; else None."""
    if not args or args[0] != "up" or any(name in os.environ for name in _ENVVARS):
        return None
    given: dict[str, Any] = {"labels": [], "options": []}
    as_json = False
    rest = args[1:]
    index = 0
    while index < len(rest):
        token = rest[index]
        index += 1
        if token == "--json" and not as_json:
            as_json = True
            continue
        name, value = token, None
        if token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
        if name not in _FLAGS:
            return None  # an argument, another flag, --help, `--`, -pVALUE: click's call
        if value is None:
            if index >= len(rest) or rest[index].startswith("-"):
                return None  # no value, or an option where click may see one
            value = rest[index]
            index += 1
        key, repeatable = _FLAGS[name]
        if repeatable:
            given[key].append(value)
        elif key in given:
            return None  # given twice: click's call
        else:
            given[key] = value
    from deskctl.providers import DEFAULT_PROVIDER

    return {
        "provider": given.get("provider", DEFAULT_PROVIDER), "platform": "ubuntu",
        "geometry": given.get("geometry", "1024x768"), "window_geometry": None, "start_url": None,
        "window_manager": False, "ttl": given.get("ttl"), "max_minutes": None, "max_usd": None, "budget": None,
        "unknown_cost": None, "labels": tuple(given["labels"]), "options": tuple(given["options"]), "host": None,
        "accept_new_host_key": False, "ready_timeout": 120.0, "record": None, "record_settle": 0.0,
        "video": False, "video_fps": None, "video_max_seconds": None, "video_max_mb": None, "wait_title": None,
        "wait_url": None, "wait_command": None, "as_json": as_json,
    }


def run(args: list[str]) -> bool:
    """Run ``deskctl up`` for ``args`` without click; False (having done nothing) when click is to run it. Errors
    are raised, for the abort path of :func:`deskctl.cli.main`."""
    from deskctl.cli._do_fast import clickless

    params = parse(args)
    if params is None or not clickless():  # [defaults] may set any of up's options: click applies them
        return False
    from deskctl.config import load_config

    bring_up(load_config(), **params)
    return True
