"""The bad-input sweep (docs/reliability.md, "Every input is bounded"): hundreds of bad values through every
surface a user reaches - the CLI (flags, arguments, environment; its entry point run in this process,
tests/_cli.py), `[defaults]` of a deskctl.toml, the MCP tools through the SDK's own client, the view's HTTP
endpoints - and each must be a usage error with a stable code:
no `internal`, no traceback, and nothing left behind (no desktop, no Xvfb, no ledger row still open).

One desktop serves the CLI and the view, one `deskctl mcp` serves the MCP tools, so the sweep stays fast. The
table of what each surface answered (surface x input class -> codes) is printed with ``-s`` and kept in the docs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from _cli import deskctl
from _procs import ledger_sessions, xvfb_leftovers

mcp = pytest.importorskip("mcp")

MEGABYTE = "x" * (1 << 20)
#: the longest argument Linux passes to a process (MAX_ARG_STRLEN is 128 KiB): over the 100000-character bound
LONG_ARG = "x" * 120_000
#: usage-error codes a bad input may get (exit 2)
USAGE_PREFIXES = ("usage.", "geometry.out_of_bounds", "config.invalid")


@dataclass
class Outcome:
    surface: str
    kind: str  # the input class: nan, inf, huge, negative, zero, text, empty, long, bytes, control, type ...
    what: str
    code: str | None
    ok: bool
    detail: str = ""


def _cli_outcome(kind: str, args: Sequence[str | bytes], *, cwd: Path | None = None,
                 env: dict[str, str] | None = None, surface: str = "cli") -> Outcome:
    # deskctl's entry point in this process (tests/_cli.py), with the arguments a process gets in sys.argv (bytes
    # that are not UTF-8 as surrogate escapes)
    proc = deskctl(*(a.decode("utf-8", "surrogateescape") if isinstance(a, bytes) else a for a in args), cwd=cwd,
                   env=env)
    out = proc.stdout.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    err = proc.stderr.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    code: str | None = None
    try:
        code = json.loads(out)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        # click's own parse errors (a missing argument, "-inf" read as an option) print no JSON: exit 2 still
        code = "click.usage" if proc.returncode == 2 and "Usage:" in err else None
    what = " ".join(a.decode("utf-8", "replace") if isinstance(a, bytes) else a for a in args)
    what = what if len(what) < 80 else what[:77] + "..."
    ok = (proc.returncode == 2 and "Traceback" not in out + err and code is not None and code != "internal"
          and (code == "click.usage" or code.startswith(USAGE_PREFIXES)))
    return Outcome(surface, kind, what, code, ok, f"exit {proc.returncode}: {err[-300:]}")


# -- the CLI -------------------------------------------------------------------------------------------------------
#: the classes of bad numbers, as a flag or argument spells them
NUMBERS = {"nan": "nan", "inf": "inf", "-inf": "-inf", "huge": "1e308", "2**63": str(2**63), "text": "abc",
           "empty": "", "control": "\x01\x02", "long": "9" * 5000}
POSITIVE = {**NUMBERS, "negative": "-1", "zero": "0"}
WHOLE = {**POSITIVE, "fraction": "1.5"}


def _cli_cases(session_id: str) -> list[tuple[str, list[str | bytes]]]:
    cases: list[tuple[str, list[str | bytes]]] = []
    for flag in ("--max-minutes", "--max-usd", "--ready-timeout"):
        cases += [(kind, ["up", flag, value, "--json"]) for kind, value in POSITIVE.items()]
    cases += [(kind, ["up", "--record-settle", value, "--json"]) for kind, value in NUMBERS.items()]
    cases += [(kind, ["up", "--record-settle", "61", "--json"]) for kind in ("huge",)]
    cases += [(kind, ["up", "--ttl", value, "--json"]) for kind, value in
              {**POSITIVE, "huge": "99999999999999h", "2**63": f"{2**63}s"}.items()]
    cases += [(kind, ["up", "--geometry", value, "--json"]) for kind, value in
              {"zero": "0x0", "huge": "99999x99999", "long": "9" * 5000 + "x10", "depth": "1024x768x99999",
               "nan": "nanxnan", "empty": "", "negative": "-1x-1", "control": "\x01x\x02"}.items()]
    cases += [(kind, ["up", "--window-geometry", value, "--start-url", "http://x.invalid", "--json"])
              for kind, value in {"zero": "0x0", "huge": "99999999999x1", "offset": "10x10+99999999+0"}.items()]
    cases += [(kind, ["preflight", "--timeout", value, "--json"]) for kind, value in POSITIVE.items()]
    cases += [(kind, ["budget", "check", "--max-usd", value, "--json"]) for kind, value in NUMBERS.items()]
    cases += [(kind, ["budget", "check", "--max-usd", "1", "--default-minutes", value, "--json"])
              for kind, value in POSITIVE.items()]
    cases += [(kind, ["budget", "set", "ci", "--max-usd", value, "--json"]) for kind, value in NUMBERS.items()]
    for command in (["cost"], ["ls"]):
        cases += [(kind, [*command, "--since", value, "--json"]) for kind, value in
                  {"nan": "nan", "negative": "-1h", "huge": "99999999999999d", "text": "soon", "inf": "inf"}.items()]
    for flag, values in (("--fps", POSITIVE), ("--quality", WHOLE), ("--port", {**NUMBERS, "negative": "-1",
                                                                                "huge": "65536"})):
        cases += [(kind, ["view", session_id, flag, value, "--json"]) for kind, value in values.items()]
    cases += [(kind, ["mcp", "--port", value, "--json"]) for kind, value in {**NUMBERS, "negative": "-1"}.items()]
    points = {**NUMBERS, "negative": "-1", "outside": "99999", "fraction": "1.5"}
    cases += [(kind, ["do", session_id, "click", value, "10", "--json"]) for kind, value in points.items()]
    cases += [(kind, ["do", session_id, "drag", "1", "1", value, "10", "--json"]) for kind, value in points.items()]
    wheel = {**NUMBERS, "huge-int": "100000", "negative": "-100000", "fraction": "1.5"}
    cases += [(kind, ["do", session_id, "scroll", "10", "10", value, "--json"]) for kind, value in wheel.items()]
    cases += [(kind, ["do", session_id, "scroll", "10", "10", "--dx", value, "--json"]) for kind, value in
              wheel.items()]
    cases += [(kind, ["do", session_id, "wait-for", "t", "--timeout", value, "--json"])
              for kind, value in POSITIVE.items()]
    cases += [(kind, ["exec", session_id, "--timeout", value, "--json", "--", "true"])
              for kind, value in POSITIVE.items()]
    cases += [("long", ["do", session_id, "type", LONG_ARG, "--json"]),
              ("long", ["do", session_id, "key", "a" * 1000, "--json"]),
              ("control", ["do", session_id, "key", "\x01\x02", "--json"]),
              ("empty", ["do", session_id, "key", "", "--json"]),
              ("bytes", ["do", session_id, "key", b"\xff\xfe", "--json"]),
              ("bytes", ["do", session_id, "click", b"\xff", b"1", "--json"]),
              ("bytes", ["up", "--ttl", b"\xff\xfe", "--json"]),
              ("bytes", ["exec", session_id, "--timeout", b"\xff", "--json", "--", "true"])]
    return cases


def _env_cases() -> list[tuple[str, dict[str, str], list[str]]]:
    return [(kind, {name: value}, ["up", "--json"]) for name in ("DESKCTL_MAX_USD", "DESKCTL_MAX_MINUTES")
            for kind, value in {"nan": "nan", "inf": "inf", "huge": "1e308", "negative": "-1", "zero": "0"}.items()] \
        + [(kind, {"DESKCTL_TTL": value}, ["up", "--json"]) for kind, value in
           {"huge": "99999999999999h", "nan": "nan", "zero": "0"}.items()] \
        + [(kind, {"DESKCTL_PREFLIGHT_TIMEOUT": value}, [command, "--json"]) for kind, value in
           {"nan": "nan", "inf": "inf", "zero": "0", "text": "soon"}.items() for command in ("preflight", "up")]


#: [defaults] of a deskctl.toml: key, TOML value, the command that reads it
CONFIG_CASES = [
    ("nan", "max_minutes", "nan", ["up", "--json"]), ("inf", "max_minutes", "inf", ["up", "--json"]),
    ("negative", "max_usd", "-1.0", ["up", "--json"]), ("zero", "max_usd", "0", ["up", "--json"]),
    ("huge", "max_usd", "1e308", ["up", "--json"]), ("huge", "ttl", '"99999999999999h"', ["up", "--json"]),
    ("-inf", "ready_timeout", "-inf", ["up", "--json"]), ("huge", "record_settle", "1e308", ["up", "--json"]),
    ("type", "max_minutes", '"ten"', ["up", "--json"]), ("type", "ready_timeout", "[1, 2]", ["up", "--json"]),
    ("zero", "geometry", '"0x0"', ["up", "--json"]), ("zero", "timeout", "0", ["preflight", "--json"]),
    ("nan", "timeout", "nan", ["preflight", "--json"]),
]
VIEW_CONFIG_CASES = [("nan", "fps", "nan"), ("huge", "quality", "1e308"), ("negative", "port", "-1"),
                     ("type", "fps", '"fast"'), ("2**63", "port", str(2**63))]


# -- the view ------------------------------------------------------------------------------------------------------
def _view_bodies() -> list[tuple[str, str, bytes]]:
    """(input class, what, body) for POST /input."""
    bad = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "huge": "1e308", "overflow": "1e999",
           "2**63": str(2**63), "text": '"abc"', "empty": '""', "null": "null", "list": "[]", "object": "{}",
           "bool": "true"}
    bodies: list[tuple[str, str, bytes]] = []
    base = {"type": "click", "x": 1, "y": 1, "w": 100, "h": 100}
    for field in ("x", "y", "w", "h"):
        extra = {"zero": "0", "negative": "-1"} if field in ("w", "h") else {}
        for kind, literal in {**bad, **extra}.items():
            doc = json.dumps({k: v for k, v in base.items() if k != field})[:-1] + f', "{field}": {literal}}}'
            bodies.append((kind, f"click {field}={literal}", doc.encode()))
    for field, event in (("count", base), ("dx", {**base, "type": "scroll"}), ("dy", {**base, "type": "scroll"})):
        extra = {"zero": "0", "negative": "-1", "fraction": "1.5"} if field == "count" else {"huge-int": "100000"}
        for kind, literal in {**bad, **extra}.items():
            doc = json.dumps(event)[:-1] + f', "{field}": {literal}}}'
            bodies.append((kind, f"{event['type']} {field}={literal}", doc.encode()))
    for kind, doc in (("empty", {"type": "type", "text": ""}), ("type", {"type": "type", "text": 5}),
                      ("null", {"type": "type"}), ("empty", {"type": "key", "chord": ""}),
                      ("control", {"type": "key", "chord": "\x01\x02"}), ("long", {"type": "key", "chord": "a" * 1000}),
                      ("type", {"type": "key", "chord": ["ctrl"]}), ("type", {"type": 5}),
                      ("unknown", {"type": "teleport"})):
        bodies.append((kind, json.dumps(doc)[:60], json.dumps(doc).encode()))
    bodies += [("bytes", "non-UTF-8 body", b"\xff\xfe\xfd"), ("text", "not JSON", b"click here"),
               ("type", "a JSON list", b"[1, 2]"), ("empty", "no body", b""), ("type", "a JSON number", b"5"),
               ("long", "1 MB body", json.dumps({"type": "type", "text": MEGABYTE}).encode())]
    return bodies


def _post(url: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _view_outcomes(session_id: str) -> list[Outcome]:
    proc = subprocess.Popen([sys.executable, "-m", "deskctl", "view", session_id, "--control", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outcomes: list[Outcome] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.communicate()[1]
        url = json.loads(line)["url"]
        base, token = url.split("/?", 1)[0], url.split("token=", 1)[1]
        for kind, what, body in _view_bodies():
            try:
                status, reply = _post(f"{base}/input?token={token}", body)
            except (urllib.error.URLError, ConnectionError) as exc:  # a 413 may close before the body is sent
                outcomes.append(Outcome("view", kind, what, None, False, f"no answer: {exc}"))
                continue
            code = None
            try:
                code = json.loads(reply)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                pass
            ok = status in (400, 413) and code is not None and code.startswith("usage.")
            outcomes.append(Outcome("view", kind, what, code, ok, f"HTTP {status}: {reply[:200]!r}"))
        # bad query strings: a token that is no UTF-8, control characters, a megabyte
        for kind, query in (("bytes", "token=%FF%FE"), ("control", "token=%01%02"), ("long", "token=" + "a" * 60000)):
            try:
                status, reply = _post(f"{base}/input?{query}", b"{}")
            except (urllib.error.URLError, ConnectionError) as exc:
                outcomes.append(Outcome("view", kind, f"query {query[:20]}", None, False, f"no answer: {exc}"))
                continue
            code = json.loads(reply)["error"]["code"] if reply.startswith(b"{") else None
            outcomes.append(Outcome("view", kind, f"query {query[:20]}", code, status in (400, 403, 414) and
                                    code is not None and code != "internal", f"HTTP {status}"))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    return outcomes


# -- MCP -----------------------------------------------------------------------------------------------------------
def _mcp_cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(input class, tool, arguments). NaN and infinities are not JSON: the SDK's client sends them as null."""
    bad: dict[str, Any] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "huge": 1e308,
                           "2**63": 2**63, "-2**63": -(2**63) - 1, "text": "abc", "empty": "", "null": None,
                           "list": [], "object": {}, "long": MEGABYTE}
    cases: list[tuple[str, str, dict[str, Any]]] = []
    point = {"x": 10, "y": 10}
    for tool, field, args in (("click", "x", point), ("click", "count", point), ("move", "y", point),
                              ("scroll", "dy", point), ("scroll", "dx", point), ("drag", "x2", {"x1": 1, "y1": 1,
                                                                                                "x2": 5, "y2": 5}),
                              ("mouse_down", "x", point), ("wait", "seconds", {}), ("wait_for", "timeout",
                                                                                     {"title": "t"}),
                              ("exec", "timeout", {"command": "true"})):
        extra: dict[str, Any] = {"negative": -1, **{
            "count": {"zero": 0, "over": 4, "fraction": 1.5}, "seconds": {"over": 61},
            "timeout": {"zero": 0, "over": 7 * 86400 + 1 if tool == "exec" else 61},
            "dx": {"huge-int": 1_000_000, "negative": -1_000_000},
            "dy": {"huge-int": 1_000_000, "negative": -1_000_000},
        }.get(field, {"outside": 99999, "fraction": 1.5})}
        for kind, value in {**bad, **extra}.items():
            cases.append((kind, tool, {**args, field: value}))
    for tool, field in (("type", "text"), ("key", "chord"), ("key_down", "key"), ("key_up", "key")):
        for kind, value in {"long": MEGABYTE if tool == "type" else "a" * 1000, "null": None, "number": 5,
                            "list": ["a"], "control": "\x01\x02" if tool != "type" else None}.items():
            if value is not None or kind == "null":
                cases.append((kind, tool, {field: value}))
    cases += [("empty", "key", {"chord": ""}), ("empty", "key_down", {"key": ""}), ("unknown", "teleport", {})]
    return cases


def _mcp_outcomes() -> list[Outcome]:
    params = mcp.StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                       args=["-m", "deskctl", "mcp", "--geometry", "320x240", "--allow-exec"])
    outcomes: list[Outcome] = []

    async def main() -> None:
        async with mcp.Client(params, read_timeout_seconds=120) as client:
            for kind, tool, arguments in _mcp_cases():
                result = await client.call_tool(tool, arguments)
                what = f"{tool} {json.dumps(arguments, default=str)[:60]}"
                code = (result.structured_content or {}).get("error", {}).get("code") if result.is_error else None
                text = " ".join(getattr(block, "text", "") for block in result.content)
                ok = (result.is_error and code is not None and code.startswith(USAGE_PREFIXES)
                      and "Traceback" not in text)
                outcomes.append(Outcome("mcp", kind, what, code, ok, text[:200]))
            assert not (await client.call_tool("screenshot", {})).is_error  # still serving after all of them

    anyio.run(main)
    return outcomes


# -- the sweep -----------------------------------------------------------------------------------------------------
def test_hundreds_of_bad_inputs_on_every_surface_are_usage_errors_with_no_internal_no_traceback_no_leak(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    up = subprocess.run([sys.executable, "-m", "deskctl", "up", "--geometry", "320x240", "--ttl", "30m", "--json"],
                        capture_output=True, text=True, timeout=120, check=True)
    session_id = json.loads(up.stdout)["id"]
    outcomes: list[Outcome] = []
    try:
        outcomes += [_cli_outcome(kind, args) for kind, args in _cli_cases(session_id)]
        outcomes += [_cli_outcome(kind, args, env=env, surface="env") for kind, env, args in _env_cases()]
        monkeypatch.delenv("DESKCTL_PREFLIGHT_TIMEOUT")  # the environment beats deskctl.toml's `timeout`
        for index, (kind, key, value, args) in enumerate(CONFIG_CASES):
            project = tmp_path / f"config-{index}"
            project.mkdir()
            (project / "deskctl.toml").write_text(f"[defaults]\n{key} = {value}\n")
            outcomes.append(_cli_outcome(kind, args, cwd=project, surface="config"))
        for index, (kind, key, value) in enumerate(VIEW_CONFIG_CASES):
            project = tmp_path / f"view-config-{index}"
            project.mkdir()
            (project / "deskctl.toml").write_text(f"[defaults]\n{key} = {value}\n")
            outcomes.append(_cli_outcome(kind, ["view", session_id, "--json"], cwd=project, surface="config"))
        outcomes += _view_outcomes(session_id)
        # the shared desktop survived every refusal
        shot = subprocess.run([sys.executable, "-m", "deskctl", "do", session_id, "move", "5", "5"],
                              capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0, shot.stderr
    finally:
        subprocess.run([sys.executable, "-m", "deskctl", "down", session_id], capture_output=True, timeout=120)
    outcomes += _mcp_outcomes()

    table: dict[tuple[str, str], set[str]] = defaultdict(set)
    for outcome in outcomes:
        table[(outcome.surface, outcome.kind)].add(str(outcome.code))
    print(f"\n{len(outcomes)} bad inputs")
    for (surface, kind), codes in sorted(table.items()):
        print(f"| {surface} | {kind} | {', '.join(sorted(codes))} |")
    failures = [o for o in outcomes if not o.ok]
    assert failures == [], "\n".join(f"{o.surface} {o.what!r}: {o.code} ({o.detail})" for o in failures)
    assert len(outcomes) >= 200
    # nothing leaked: every desktop ever made here is ended and gone (the shared one, the MCP one, no other)
    records = ledger_sessions()
    assert len(records) == 2, [(r.session_id, r.status) for r in records]
    for record in records:
        assert record.status == "ended", record
        assert xvfb_leftovers(record) == []
