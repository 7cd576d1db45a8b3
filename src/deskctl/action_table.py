"""Every action a desktop offers, declared once: the CLI ``do`` commands, the MCP tools, the aio methods and
docs/actions.md are made from this table, and a test proves they all agree with it.

An entry names the :class:`deskctl.Desktop` method that performs the action (``method``), its parameters in the
method's order (name, kind, default, the :mod:`deskctl.limits` bound that checks it, doc), the capability flag a
provider must have (a field of :class:`deskctl.providers.base.Capabilities`, or None for every provider), whether
the step is recorded, and what it gives back. Surfaces differ only where a name was published before this table
(the MCP tool ``type_text`` for ``type``, ``window_titles`` for ``windows``): ``mcp_name`` / ``cli_name`` keep
those names stable.

Plain classes with ``__slots__`` (not dataclasses): the fast ``deskctl do`` path may read this module, and the
import cost of ``dataclasses`` is a measurable share of a whole-process call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ACTIONS", "REQUIRED", "ActionSpec", "Param", "by_cli_name", "by_mcp_name", "by_name"]


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


#: the default of a parameter that must be given
REQUIRED: Any = _Required()

#: parameter kinds: int, float, str, bool, strs (a list of strings), strmap (str -> str), json (any JSON value)
KINDS = frozenset({"int", "float", "str", "bool", "strs", "strmap", "json"})
#: what an action gives back: none, text (a string), json (a JSON value), image (a PNG screenshot)
RESULTS = frozenset({"none", "text", "json", "image"})


class Param:
    """One parameter of an action, in the order the Desktop method takes it.

    ``cli``: ``argument`` (positional), ``option`` (``--name``), ``variadic`` (the rest of the command line), or
    ``none`` (not on the CLI). ``bound``: a key of :data:`deskctl.limits.BOUNDS` checked by every surface.
    """

    __slots__ = ("bound", "choices", "cli", "default", "doc", "kind", "name")

    def __init__(self, name: str, kind: str, default: Any = REQUIRED, *, doc: str = "", bound: str | None = None,
                 choices: tuple[str, ...] = (), cli: str | None = None) -> None:
        assert kind in KINDS, kind
        self.name = name
        self.kind = kind
        self.default = default
        self.doc = doc
        self.bound = bound
        self.choices = choices
        self.cli = cli or ("argument" if default is REQUIRED else "option")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def __repr__(self) -> str:
        return f"Param({self.name!r}, {self.kind!r}, {self.default!r})"


class ActionSpec:
    """One action. ``name`` is snake_case; the CLI name is it with dashes unless ``cli_name`` says otherwise."""

    __slots__ = ("capability", "cli_name", "doc", "group", "mcp_name", "method", "name", "params", "recorded",
                 "result", "surfaces")

    def __init__(self, name: str, doc: str, params: tuple[Param, ...] = (), *, method: str | None = None,
                 capability: str | None = None, recorded: bool = True, result: str = "none",
                 group: str = "input", cli_name: str | None = None, mcp_name: str | None = None,
                 surfaces: frozenset[str] = frozenset({"cli", "mcp", "aio"})) -> None:
        assert result in RESULTS, result
        self.name = name
        self.doc = doc
        self.params = params
        self.method = method or name
        self.capability = capability
        self.recorded = recorded
        self.result = result
        self.group = group
        self.cli_name = cli_name or name.replace("_", "-")
        self.mcp_name = mcp_name or name
        self.surfaces = surfaces

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"ActionSpec({self.name!r})"


def _xy(doc: str = "", optional: bool = False) -> tuple[Param, Param]:
    default = None if optional else REQUIRED
    cli = "argument"
    return (Param("x", "int", default, doc=doc or "x in screenshot pixels", bound="coordinate", cli=cli),
            Param("y", "int", default, doc=doc or "y in screenshot pixels", bound="coordinate", cli=cli))


_BUTTON = Param("button", "str", "left", doc="left, middle or right", choices=("left", "middle", "right"))

ACTIONS: tuple[ActionSpec, ...] = (
    # -- observe -------------------------------------------------------------------------------------
    ActionSpec("screenshot", "Take a screenshot of the whole desktop (PNG). Its pixels are the coordinate space "
               "of every other action.", result="image", group="observe", recorded=False),
    ActionSpec("cursor_position", "Where the mouse pointer is, in screenshot pixels.", result="json",
               group="observe", capability="cursor_position", recorded=False),
    ActionSpec("windows", "List the titles of the desktop's top-level windows.", method="window_titles",
               result="json", group="observe", capability="windows", recorded=False, mcp_name="window_titles"),
    ActionSpec("wait_for", "Wait until a window whose title contains TITLE exists; gives its whole title "
               "(wait.timeout when none appears in time).",
               (Param("title", "str", doc="part of the window title"),
                Param("timeout", "float", 30.0, doc="seconds to wait", bound="wait_timeout")),
               result="text", group="observe", capability="windows", recorded=False),
    # -- pointer -------------------------------------------------------------------------------------
    ActionSpec("click", "Click at X Y (without them: where the pointer is).",
               (*_xy(optional=True), _BUTTON,
                Param("count", "int", 1, doc="1, 2 (double) or 3 (triple)", bound="click_count", cli="none"))),
    ActionSpec("double_click", "Double-click at X Y.", (*_xy(optional=True),)),
    ActionSpec("triple_click", "Triple-click at X Y (selects a line in most programs).", (*_xy(optional=True),)),
    ActionSpec("right_click", "Click the right button at X Y.", (*_xy(optional=True),)),
    ActionSpec("middle_click", "Click the middle button at X Y.", (*_xy(optional=True),)),
    ActionSpec("move", "Move the pointer to X Y without clicking.", _xy()),
    ActionSpec("drag", "Press at X1 Y1, move to X2 Y2 holding the button, release there.",
               (Param("x1", "int", bound="coordinate"), Param("y1", "int", bound="coordinate"),
                Param("x2", "int", bound="coordinate"), Param("y2", "int", bound="coordinate"), _BUTTON)),
    ActionSpec("scroll", "Scroll at X Y (or the pointer) by wheel clicks: dy > 0 down, dx > 0 right.",
               (*_xy(optional=True),
                Param("dx", "int", 0, doc="sideways wheel clicks (positive: right)", bound="scroll_clicks"),
                Param("dy", "int", 0, doc="wheel clicks (positive: down)", bound="scroll_clicks"))),
    ActionSpec("mouse_down", "Move to X Y and press a mouse button without releasing it.", (*_xy(), _BUTTON)),
    ActionSpec("mouse_up", "Move to X Y and release a mouse button.", (*_xy(), _BUTTON)),
    # -- keyboard ------------------------------------------------------------------------------------
    ActionSpec("type", "Type text (any Unicode) at the keyboard focus.",
               (Param("text", "str", doc="the text", bound="type_chars"),), mcp_name="type_text", group="keyboard"),
    ActionSpec("key", "Press and release a key or chord: enter, tab, escape, ctrl+s, ctrl+shift+t, alt+f4 ...",
               (Param("chord", "str", doc="the key or chord", bound="key_chars"),), group="keyboard"),
    ActionSpec("key_down", "Hold a key down (e.g. shift) until key_up.",
               (Param("key", "str", doc="the key", bound="key_chars"),), group="keyboard"),
    ActionSpec("key_up", "Release a key held with key_down.",
               (Param("key", "str", doc="the key", bound="key_chars"),), group="keyboard"),
    # -- clipboard and applications ------------------------------------------------------------------
    ActionSpec("clipboard_get", "Read the desktop's clipboard text.", result="text", group="app",
               capability="clipboard", recorded=False, cli_name="clipboard"),
    ActionSpec("clipboard_set", "Put text on the desktop's clipboard (paste it with key ctrl+v).",
               (Param("text", "str", doc="the text"),), group="app", capability="clipboard"),
    ActionSpec("open_url", "Open a URL in the desktop's browser.",
               (Param("url", "str", doc="the URL"),
                Param("browser", "str", None, doc="program to open it with (default: the desktop's opener)")),
               group="app", capability="windows"),
    ActionSpec("launch", "Start a program on the desktop, detached; gives its process id.",
               (Param("app", "str", doc="the program"),
                Param("args", "strs", (), doc="its arguments", cli="variadic")),
               result="json", group="app", capability="windows"),
    # -- commands and time (exec is the top-level ``deskctl exec`` on the CLI; MCP offers it with allow_exec) ---
    ActionSpec("exec", "Run a shell command on the desktop's machine (with its DISPLAY); gives exit_code, "
               "stdout, stderr, or the pid with background.",
               (Param("command", "str", doc="the shell command"),
                Param("timeout", "float", 60.0, doc="seconds before it is killed (exit code 124)",
                      bound="exec_timeout"),
                Param("cwd", "str", None, doc="directory to run it in"),
                Param("env", "strmap", None, doc="variables added to its environment"),
                Param("user", "str", None, doc="run as this user"),
                Param("background", "bool", False, doc="start it detached and give its pid at once")),
               result="json", group="exec", capability="exec", surfaces=frozenset({"mcp", "aio"})),
    ActionSpec("wait", "Wait this many seconds for the screen to settle.",
               (Param("seconds", "float", doc="seconds", bound="mcp_wait"),),
               group="observe", recorded=False, surfaces=frozenset({"mcp"})),
)

_BY_NAME = {a.name: a for a in ACTIONS}


def by_name(name: str) -> ActionSpec:
    return _BY_NAME[name]


def by_cli_name(name: str) -> ActionSpec | None:
    return next((a for a in ACTIONS if a.cli_name == name), None)


def by_mcp_name(name: str) -> ActionSpec | None:
    return next((a for a in ACTIONS if a.mcp_name == name), None)
