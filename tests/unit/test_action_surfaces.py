"""Every surface agrees with the action table (deskctl/action_table.py): the Desktop methods, the AsyncDesktop
coroutines, the `deskctl do` commands, the MCP tools (listed by the official MCP client from a real `deskctl mcp`
process) and docs/actions.md; and no surface has an action the table lacks. An action added to one surface only,
or a parameter whose order, default or bound differs on one, fails here."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import click
import pytest

from deskctl import aio, session
from deskctl.action_table import ACTIONS, REQUIRED, SURFACES, ActionSpec, by_cli_name, by_mcp_name, markdown
from deskctl.errors import WaitTimeout
from deskctl.limits import BOUNDS

ROOT = Path(__file__).resolve().parents[2]

#: the public Desktop methods that are not actions an agent takes: the session's lifecycle and library plumbing
#: (files are `deskctl cp`, `meter` and `annotate` are the harness's; `browser` gives a DevTools endpoint for a CDP
#: client in the caller's process; `request_takeover` blocks until a person has helped: plumbing of the episodes).
#: A new public method must be one or the other.
NOT_ACTIONS = {"open", "close", "release", "act", "annotate", "meter", "raw_frame", "labels", "upload", "download",
               "browser", "request_takeover"}


def _capability_flags() -> set[str]:
    import dataclasses

    from deskctl.providers.base import Capabilities

    return {f.name for f in dataclasses.fields(Capabilities) if f.type in ("bool", bool)}


_CAPABILITY_FLAGS = _capability_flags()


def _public_methods(cls: type) -> dict[str, Any]:
    return {name: value for name, value in vars(cls).items()
            if not name.startswith("_") and inspect.isfunction(value)}


def _desktop_specs() -> list[ActionSpec]:
    return [spec for spec in ACTIONS if not spec.surface_only]


# -- the table itself ----------------------------------------------------------------------------------------------
def test_the_table_is_consistent() -> None:
    names = [spec.name for spec in ACTIONS]
    assert len(names) == len(set(names))
    for surface, attr in (("cli", "cli_name"), ("mcp", "mcp_name")):
        published = [getattr(spec, attr) for spec in ACTIONS if surface in spec.surfaces]
        assert len(published) == len(set(published)), f"two actions share a {surface} name"
    for spec in ACTIONS:
        assert spec.surfaces <= SURFACES and spec.doc.strip(), spec
        assert by_cli_name(spec.cli_name) is (spec if "cli" in spec.surfaces else None)
        assert by_mcp_name(spec.mcp_name) is (spec if "mcp" in spec.surfaces else None)
        assert spec.capability is None or spec.capability in _CAPABILITY_FLAGS, f"{spec}: not a Capabilities flag"
        if spec.surface_only:
            assert not hasattr(session.Desktop, spec.method) and "aio" not in spec.surfaces, spec
        for param in spec.params:
            for bound in (param.bound, param.mcp_bound):
                assert bound is None or bound in BOUNDS, (spec, param)
            if param.kind == "callable":
                assert not param.on("cli") and not param.on("mcp"), "a Python function is for the library only"


# -- Desktop and AsyncDesktop --------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", _desktop_specs(), ids=lambda spec: spec.name)
def test_each_action_is_a_desktop_method_with_the_tables_parameters(spec: ActionSpec) -> None:
    method = getattr(session.Desktop, spec.method, None)
    assert callable(method), f"Desktop has no method {spec.method}"
    taken = list(inspect.signature(method).parameters.values())[1:]  # self
    assert [p.name for p in taken] == [p.py for p in spec.params], spec
    for declared, real in zip(spec.params, taken, strict=True):
        if declared.cli == "variadic":
            assert real.kind is inspect.Parameter.VAR_POSITIONAL, (spec, declared)
            continue
        expected = inspect.Parameter.empty if declared.default is REQUIRED else declared.default
        assert real.default == expected, (spec, declared, real.default)


def test_every_public_desktop_method_is_an_action_of_the_table_or_plumbing() -> None:
    methods = set(_public_methods(session.Desktop))
    actions = {spec.method for spec in _desktop_specs()}
    assert methods - NOT_ACTIONS == actions, "a Desktop method the table lacks (or an entry without its method)"


def test_the_async_desktop_has_each_aio_action_with_the_same_signature() -> None:
    """AsyncDesktop's action methods are written out, not generated: a static signature is what mypy --strict
    and an IDE's help read. This is what keeps them from drifting."""
    methods = _public_methods(aio.AsyncDesktop)
    for spec in ACTIONS:
        if "aio" not in spec.surfaces:
            assert spec.method not in methods, f"AsyncDesktop has {spec.method}, which the table keeps off aio"
            continue
        coroutine = methods.get(spec.method)
        assert coroutine is not None, f"AsyncDesktop has no {spec.method}"
        assert inspect.iscoroutinefunction(coroutine), spec
        mine = str(inspect.signature(coroutine)).replace("AsyncDesktop", "Desktop")
        assert mine == str(inspect.signature(getattr(session.Desktop, spec.method))), spec
    aio_actions = {spec.method for spec in ACTIONS if "aio" in spec.surfaces}
    assert set(methods) - NOT_ACTIONS - {"sync"} == aio_actions, "an AsyncDesktop action the table lacks"


# -- the CLI -------------------------------------------------------------------------------------------------------
def _do_commands() -> dict[str, click.Command]:
    from deskctl.cli.do_cmds import do

    return dict(do.commands)


def test_every_do_command_is_a_table_action_and_back() -> None:
    assert set(_do_commands()) == {spec.cli_name for spec in ACTIONS if "cli" in spec.surfaces}


@pytest.mark.parametrize("spec", [s for s in ACTIONS if "cli" in s.surfaces], ids=lambda spec: spec.name)
def test_each_do_command_takes_the_tables_parameters(spec: ActionSpec) -> None:
    from deskctl.cli._common import Number

    command = _do_commands()[spec.cli_name]
    params = {p.name: p for p in command.params if p.name != "as_json"}
    declared = spec.params_on("cli")
    numbers = [p for p in declared if p.cli == "numbers"]
    expected = [p.name for p in declared if p.cli != "numbers"] + (["numbers"] if numbers else [])
    assert sorted(params) == sorted(expected), spec
    assert (command.help or "").startswith(spec.doc)
    for p in declared:
        if p.cli == "numbers":
            continue
        real = params[p.name]
        if p.cli == "option":
            assert isinstance(real, click.Option) and real.opts == ["--" + p.name.replace("_", "-")], (spec, p)
            assert real.default == (False if p.kind == "bool" else p.default), (spec, p)
            if p.bound is not None:
                assert isinstance(real.type, Number) and real.type.bound == p.bound, (spec, p)
        else:
            assert isinstance(real, click.Argument), (spec, p)
            assert real.required == (p.required and p.cli == "argument"), (spec, p)
            assert (real.nargs == -1) == (p.cli == "variadic"), (spec, p)


def test_the_top_level_commands_of_actions_take_the_same_bounds() -> None:
    """exec and screenshot are `deskctl exec` and `deskctl screenshot` on the CLI: exec's --timeout is checked
    against the table's bound there too (the MCP's is the same: test below)."""
    from deskctl.cli._common import Number
    from deskctl.cli.session_cmds import exec_cmd, screenshot
    from deskctl.cli.snapshot_cmds import create, restore

    commands = {"exec": exec_cmd, "screenshot": screenshot, "snapshot": create, "restore": restore}
    for spec in ACTIONS:
        if spec.cli_command is None:
            continue
        command = commands[spec.cli_command]
        options = {p.name: p for p in command.params}
        for p in spec.params:
            if p.kind == "callable":
                continue
            name = "env_pairs" if p.kind == "strmap" else p.name
            assert name in options, (spec, p)
            if p.bound is not None:
                real = options[name].type
                assert isinstance(real, Number) and real.bound == p.bound, (spec, p)


def test_the_fast_do_table_is_made_from_the_table() -> None:
    from deskctl.cli._do_gen import build_table
    from deskctl.cli._do_table import VERBS

    verbs, skipped = build_table()
    assert verbs == VERBS
    for name, verb in VERBS.items():
        spec = by_cli_name(name)
        assert spec is not None and spec.result == "none" and verb["method"] == spec.method
    assert set(VERBS) | set(skipped) == {spec.cli_name for spec in ACTIONS if "cli" in spec.surfaces}


# -- the MCP tools, through the official client --------------------------------------------------------------------
def _listed_tools(provider: str = "memory") -> list[Any]:
    mcp = pytest.importorskip("mcp")
    params = mcp.StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                       args=["-m", "deskctl", "mcp", "--provider", provider, "--geometry", "320x240",
                                             "--allow-exec"])
    tools: list[Any] = []

    async def main() -> None:
        async with mcp.Client(params, read_timeout_seconds=120) as client:
            tools.extend((await client.list_tools()).tools)

    anyio.run(main)
    return tools


@pytest.fixture(scope="module")
def mcp_tools() -> dict[str, Any]:
    """The memory provider's tools, and those of the actions whose capability it lacks from an Xvfb desktop's
    server (window management, the accessibility tree)."""
    tools = {tool.name: tool for tool in _listed_tools()}
    return {**{tool.name: tool for tool in _listed_tools("xvfb")}, **tools}


def test_the_mcp_tools_are_the_tables_mcp_actions(mcp_tools: dict[str, Any]) -> None:
    # --allow-exec offers the tools that run programs; the rest is the memory provider's capabilities (all of
    # those of the actions this table was written with)
    from deskctl.providers.memory import MemoryProvider
    from deskctl.providers.xvfb import XvfbProvider

    has = MemoryProvider.capabilities
    assert has.cursor_position and has.clipboard and has.windows and has.exec
    memory = {tool.name for tool in _listed_tools()}
    assert memory == {spec.mcp_name for spec in ACTIONS if "mcp" in spec.surfaces
                      and (spec.capability is None or getattr(has, spec.capability))}
    xvfb = XvfbProvider.capabilities
    assert set(mcp_tools) == {spec.mcp_name for spec in ACTIONS if "mcp" in spec.surfaces
                              and (spec.capability is None or getattr(xvfb, spec.capability)
                                   or getattr(has, spec.capability))}


def _memory_has(spec: ActionSpec) -> bool:
    from deskctl.providers.memory import MemoryProvider

    return spec.capability is None or bool(getattr(MemoryProvider.capabilities, spec.capability))


# the tools the memory provider's server lists (browser_pages, for a capability it lacks: tests/unit/test_browser.py)
@pytest.mark.parametrize("spec", [s for s in ACTIONS if "mcp" in s.surfaces and _memory_has(s)],
                         ids=lambda spec: spec.name)
def test_each_mcp_tools_schema_is_the_tables(spec: ActionSpec, mcp_tools: dict[str, Any]) -> None:
    tool = mcp_tools[spec.mcp_name]
    assert tool.description == spec.doc
    schema = tool.input_schema
    declared = spec.params_on("mcp")
    assert list(schema.get("properties", {})) == [p.name for p in declared], "the parameters, in the table's order"
    assert sorted(schema.get("required", [])) == sorted(p.name for p in declared if p.required)
    for p in declared:
        prop = schema["properties"][p.name]
        if not p.required:
            assert prop["default"] == (list(p.default) if isinstance(p.default, tuple) else p.default), p
        bound = BOUNDS[p.mcp_bound] if p.mcp_bound else None
        if bound is not None and p.kind in ("int", "float"):
            low = "exclusiveMinimum" if bound.lo_open else "minimum"
            assert (prop.get(low), prop.get("maximum")) == (bound.lo, bound.hi), p
        elif bound is not None:
            assert prop.get("maxLength") == bound.hi, p
        else:
            assert not {"minimum", "maximum", "exclusiveMinimum", "maxLength"} & set(prop), p
        if p.choices:
            assert prop["enum"] == list(p.choices)


def test_scroll_and_exec_agree_across_surfaces(mcp_tools: dict[str, Any]) -> None:
    """The drifts this table ended: the MCP scroll took (dy, dx) where Desktop.scroll takes (dx, dy), and the MCP
    exec's timeout had no bound where the CLI's --timeout has limits' exec_timeout."""
    from deskctl.cli.session_cmds import exec_cmd

    assert list(mcp_tools["scroll"].input_schema["properties"]) == ["x", "y", "dx", "dy", "space"]
    assert list(inspect.signature(session.Desktop.scroll).parameters)[1:] == ["x", "y", "dx", "dy", "space"]
    timeout = mcp_tools["exec"].input_schema["properties"]["timeout"]
    cli_timeout = next(p for p in exec_cmd.params if p.name == "timeout")
    bound = BOUNDS[cli_timeout.type.bound]  # type: ignore[attr-defined]
    assert (timeout["exclusiveMinimum"], timeout["maximum"], timeout["default"]) == (bound.lo, bound.hi,
                                                                                      cli_timeout.default)


# -- docs ----------------------------------------------------------------------------------------------------------
def test_docs_actions_md_is_generated_from_the_table() -> None:
    assert (ROOT / "docs" / "actions.md").read_text() == markdown(), \
        "stale: python -m deskctl.action_table --markdown > docs/actions.md"


# -- recorded ------------------------------------------------------------------------------------------------------
def _sample(spec: ActionSpec) -> dict[str, Any]:
    """Arguments a fresh 320x240 memory desktop takes for ``spec``: its required parameters by kind."""
    by_name = {"url": "https://example.invalid/", "app": "true", "command": "true", "key": "shift", "chord": "a"}
    by_kind: dict[str, Any] = {"int": 5, "float": 0.5, "str": "a", "strs": [], "bool": False, "strmap": {}}
    return {p.name: by_name.get(p.name, by_kind.get(p.kind)) for p in spec.params if p.required}


def test_an_action_is_a_step_of_the_trajectory_exactly_when_the_table_says_recorded(tmp_path: Path) -> None:
    import deskctl
    from deskctl.action_table import invoke
    from deskctl.recording import read_trajectory

    run = tmp_path / "run"

    def steps() -> int:
        return len(read_trajectory(run).steps) if (run / "trajectory.jsonl").exists() else 0

    with deskctl.open_desktop("memory", geometry="320x240", record=str(run)) as desk:
        for spec in _desktop_specs():
            if spec.capability is not None and not getattr(desk.provider.capabilities, spec.capability):
                continue
            before = steps()
            arguments = _sample(spec)
            if spec.name == "wait_for":  # whether a window comes or not, soon
                arguments.update(timeout=0.5)
            with contextlib.suppress(WaitTimeout):
                invoke(desk, spec, arguments)
            assert desk.recording is not None
            desk.recording.flush()  # the recorder's worker writes the row off the action's path
            assert steps() - before == (1 if spec.recorded else 0), spec


# -- a new entry ---------------------------------------------------------------------------------------------------
def test_a_new_entry_gets_its_cli_command_and_mcp_tool_with_no_code_and_a_new_kind_is_refused_clearly() -> None:
    """What the helpers adding actions rely on: an entry of known kinds is a `do` command and a tool as it is; a
    result or parameter kind no surface knows stops the surface with a message that says where to teach it."""
    pytest.importorskip("mcp")
    from deskctl.action_table import Param
    from deskctl.cli.do_cmds import command_for
    from deskctl.mcp_server import tool_function

    spec = ActionSpec("zoom_to", "Zoom to LEVEL at X Y.", (Param("x", "int", bound="coordinate"),
                                                          Param("y", "int", bound="coordinate"),
                                                          Param("level", "float", 1.0, doc="how far",
                                                                bound="record_settle")),
                      result="json", result_key="zoom")
    command = command_for(spec)
    assert command.name == "zoom-to" and [p.name for p in command.params] == ["x", "y", "level", "as_json"]
    level = command.params[2]
    assert isinstance(level, click.Option) and level.opts == ["--level"] and level.default == 1.0
    signature = inspect.signature(tool_function(None, spec))  # type: ignore[arg-type]
    assert list(signature.parameters) == ["x", "y", "level"] and signature.parameters["level"].default == 1.0

    with pytest.raises(AssertionError, match="unknown result 'video'"):
        ActionSpec("record_video", "Record.", result="video")
    odd = ActionSpec("set_env", "Set variables.", (Param("env", "strmap"),))
    with pytest.raises(AssertionError, match=r"the CLI has no form for a 'strmap' parameter .*do_cmds"):
        command_for(odd)
