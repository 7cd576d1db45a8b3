"""Every action a desktop offers, declared once: the CLI ``do`` commands, the MCP tools, the aio methods and
docs/actions.md are made from this table, and a test (tests/unit/test_action_surfaces.py) proves they all agree
with it and with :class:`deskctl.Desktop`.

An entry names the :class:`deskctl.Desktop` method that performs the action (``method``), its parameters in the
method's order (name, kind, default, the :mod:`deskctl.limits` bound that checks it, doc), the capability flag a
provider must have (a field of :class:`deskctl.providers.base.Capabilities`, or None for every provider), whether
the step is recorded in a trajectory, and what it gives back. Surfaces differ only where a name was published
before this table (the CLI's ``windows`` and ``clipboard``, the MCP tool ``window_titles``): ``cli_name`` /
``mcp_name`` keep those names stable.

Adding an action is one entry here and one ``Desktop`` method (a few lines that delegate to its own module):
``deskctl do ID <cli_name>``, the MCP tool, docs/actions.md (``python -m deskctl.action_table --markdown``) and
the fast ``do`` table (``python -m deskctl.cli._do_gen``) follow from it; the ``AsyncDesktop`` method is written
by hand (a static signature for mypy and IDEs) and the surfaces test says when it is missing.

Plain classes with ``__slots__`` (not dataclasses): the fast ``deskctl do`` path may read this module, and the
import cost of ``dataclasses`` is a measurable share of a whole-process call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ACTIONS", "CLI_FORMS", "KINDS", "REQUIRED", "RESULTS", "SURFACES", "ActionSpec", "Param", "by_cli_name",
           "by_mcp_name", "by_name", "cli_usage", "invoke", "jsonable", "markdown",
           "numbers_metavar"]


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


#: the default of a parameter that must be given
REQUIRED: Any = _Required()

#: parameter kinds: int, float, str, bool, strs (a list of strings), strmap (str -> str), json (any JSON value),
#: callable (a Python function: the library surfaces only, e.g. exec's on_output)
KINDS = frozenset({"int", "float", "str", "bool", "strs", "strmap", "json", "callable"})
#: what an action gives back: none, text (a string), json (a JSON value, or an object with ``to_dict()``), image
#: (a :class:`~deskctl.providers.base.Screenshot`)
RESULTS = frozenset({"none", "text", "json", "image"})
#: the surfaces made from the table: ``cli`` (``deskctl do ID ...``), ``mcp`` (the MCP tools), ``aio``
#: (:class:`deskctl.aio.AsyncDesktop`); :class:`deskctl.Desktop` itself has every action that has a ``method``
SURFACES = frozenset({"cli", "mcp", "aio"})
#: how a parameter appears on the CLI: ``argument`` (positional), ``option`` (``--name``; a bool is a flag),
#: ``variadic`` (the rest of the command line), ``numbers`` (the point-then-rest form ``[X Y] [DY]``: the
#: ``numbers`` parameters of an action are one list of whole numbers, the first two an optional point), ``none``
CLI_FORMS = frozenset({"argument", "option", "variadic", "numbers", "none"})


class Param:
    """One parameter of an action, in the order the Desktop method takes it.

    ``cli``: one of :data:`CLI_FORMS` (default: ``argument`` when required, else ``option``). ``bound``: a key
    of :data:`deskctl.limits.BOUNDS` checked by every surface (``mcp_bound``: the MCP tools' own, tighter bound,
    where a long call would hold the server: a ``wait_for`` of a day). ``py``: the Desktop method's name for it
    where the surfaces' name differs. ``surfaces``: the surfaces that take it (default: all of the action's;
    ``cli="none"`` leaves the CLI out). ``stdin``: on the CLI, ``-`` reads the value from stdin.
    """

    __slots__ = ("bound", "choices", "cli", "default", "doc", "kind", "mcp_bound", "name", "py", "stdin", "surfaces")

    def __init__(self, name: str, kind: str, default: Any = REQUIRED, *, doc: str = "", bound: str | None = None,
                 choices: tuple[str, ...] = (), cli: str | None = None, py: str | None = None,
                 mcp_bound: str | None = None, surfaces: frozenset[str] | None = None, stdin: bool = False) -> None:
        assert kind in KINDS, f"{name}: unknown parameter kind {kind!r}; known: {sorted(KINDS)}"
        self.name = name
        self.kind = kind
        self.default = default
        self.doc = doc
        self.bound = bound
        self.mcp_bound = mcp_bound or bound
        self.choices = choices
        self.cli = cli or ("argument" if default is REQUIRED else "option")
        assert self.cli in CLI_FORMS, f"{name}: unknown cli form {self.cli!r}; known: {sorted(CLI_FORMS)}"
        self.py = py or name
        self.surfaces = surfaces
        self.stdin = stdin

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def on(self, surface: str, action: ActionSpec | None = None) -> bool:
        """Whether ``surface`` takes this parameter (of ``action``, whose surfaces it is at most)."""
        if action is not None and surface not in action.surfaces:
            return False
        if surface == "cli" and self.cli == "none":
            return False
        return self.surfaces is None or surface in self.surfaces

    def __repr__(self) -> str:
        return f"Param({self.name!r}, {self.kind!r}, {self.default!r})"


_DEFAULT_RESULT_KEY = {"none": None, "text": "text", "json": "result", "image": None}


class ActionSpec:
    """One action. ``name`` is snake_case; the CLI name is it with dashes unless ``cli_name`` says otherwise.

    ``details``: more paragraphs of help (the CLI's help and docs/actions.md show them after ``doc``).
    ``result_key``: the key of the result in a JSON document (the CLI's ``--json``, the MCP structured content;
    ``mcp_result_key`` where the MCP's differs); ``result_fields``: the keys of a tuple result (``x``, ``y``).
    ``runs_code``: it runs programs of the caller's choosing (the MCP offers it only with ``--allow-exec``).
    ``surface_only``: no Desktop method; each surface that lists it does it itself (the MCP ``wait``).
    ``cli_command``: the top-level command the CLI offers it as, outside ``do`` (``deskctl exec``).
    ``open_world``: it reaches beyond the desktop (a URL): the MCP's hint to a client.
    """

    __slots__ = ("capability", "cli_command", "cli_name", "details", "doc", "group", "mcp_name", "mcp_result_key",
                 "method", "name", "open_world", "params", "recorded", "result", "result_fields", "result_key",
                 "runs_code", "surface_only", "surfaces")

    def __init__(self, name: str, doc: str, params: tuple[Param, ...] = (), *, method: str | None = None,
                 capability: str | None = None, recorded: bool = True, result: str = "none",
                 group: str = "input", cli_name: str | None = None, mcp_name: str | None = None,
                 surfaces: frozenset[str] = SURFACES, details: str = "", result_key: str | None = None,
                 mcp_result_key: str | None = None, result_fields: tuple[str, ...] = (), runs_code: bool = False,
                 surface_only: bool = False, cli_command: str | None = None, open_world: bool = False) -> None:
        assert result in RESULTS, f"{name}: unknown result {result!r}; known: {sorted(RESULTS)}"
        assert surfaces <= SURFACES, f"{name}: unknown surfaces {sorted(surfaces - SURFACES)}"
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
        self.details = details
        self.result_key = result_key or _DEFAULT_RESULT_KEY[result]
        self.mcp_result_key = mcp_result_key or self.result_key
        self.result_fields = result_fields
        self.runs_code = runs_code
        self.surface_only = surface_only
        self.cli_command = cli_command
        self.open_world = open_world

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def params_on(self, surface: str) -> tuple[Param, ...]:
        """The parameters ``surface`` takes, in order."""
        return tuple(p for p in self.params if p.on(surface, self))

    @property
    def help(self) -> str:
        """``doc`` and ``details``, as the CLI's help shows them."""
        return self.doc + (f"\n\n{self.details}" if self.details else "")

    def __repr__(self) -> str:
        return f"ActionSpec({self.name!r})"


def _xy(doc: str = "", optional: bool = False) -> tuple[Param, Param]:
    default = None if optional else REQUIRED
    cli = "argument"
    return (Param("x", "int", default, doc=doc or "x in screenshot pixels", bound="coordinate", cli=cli),
            Param("y", "int", default, doc=doc or "y in screenshot pixels", bound="coordinate", cli=cli))


_BUTTON = Param("button", "str", "left", doc="left, middle or right", choices=("left", "middle", "right"))
_AT_POINTER = " (without them: where the pointer is)"
_NO_CLI = frozenset({"mcp", "aio"})
#: the coordinate space of a pointer action: a transformed screenshot's transform (deskctl.observe.transform)
#: (the CLI's --space takes it as JSON text, as `deskctl screenshot --max-size ... --json` prints it)
_SPACE = Param("space", "json", None,
               doc='the points are in this screenshot\'s image: its transform {"region": [x, y, w, h], '
                   '"size": [w, h]}, as screenshot with max_size, scale or region gave it (docs/observation.md)')
_WINDOW = Param("window", "str", doc="the window: its id, or (part of) its title")

ACTIONS: tuple[ActionSpec, ...] = (
    # -- observe -------------------------------------------------------------------------------------
    # the CLI's screenshot is the top-level `deskctl screenshot ID -o FILE` (a PNG is a file, not a line)
    ActionSpec("screenshot", "Take a screenshot of the whole desktop (PNG). Its pixels are the coordinate space "
               "of every other action.",
               (Param("max_size", "str", None, doc="fit the image inside WIDTHxHEIGHT (aspect kept, never "
                      "enlarged); the result then carries its transform, which pointer actions take as space"),
                Param("scale", "float", None, doc="image pixels per desktop pixel (0 < scale <= 8)"),
                Param("region", "str", None, doc="only the part X,Y,WIDTH,HEIGHT of the screen (a zoom)")),
               result="image", group="observe", recorded=False, surfaces=_NO_CLI, cli_command="screenshot"),
    ActionSpec("cursor_position", "Where the mouse pointer is, in screenshot pixels.", result="json",
               result_fields=("x", "y"), group="observe", capability="cursor_position", recorded=False),
    ActionSpec("windows", "List the titles of the desktop's top-level windows.", method="window_titles",
               details="The CLI prints one per line (--json: {\"titles\": [...]}).",
               result="json", result_key="titles", group="observe", capability="windows", recorded=False,
               mcp_name="window_titles"),
    ActionSpec("wait_for", "Wait until a window whose title contains TITLE exists; gives its whole title "
               "(wait.timeout, exit 6, when none appears in time).",
               (Param("title", "str", doc="part of the window title", py="what"),
                Param("timeout", "float", 30.0, doc="Seconds to wait; then wait.timeout (exit 6 on the CLI)",
                      bound="wait_timeout", mcp_bound="mcp_wait_timeout"),
                Param("interval", "float", 0.25, doc="seconds between two looks", bound="wait_interval",
                      surfaces=frozenset({"aio"}))),
               result="text", result_key="window", mcp_result_key="title", group="observe", capability="windows",
               recorded=False),
    # desk.browser() (the DevTools endpoint for a CDP client) is library plumbing, not an action: its value is a
    # connection for the caller's own process, meaningless to print or to hand to an MCP client
    ActionSpec("browser_pages", "List the pages of the desktop's Chromium as (url, title), the most recently "
               "active first (its DevTools /json/list).",
               details="The CLI prints one URL<TAB>TITLE per line (--json: {\"pages\": [[url, title], ...]}). "
                       "usage.no_browser (exit 2) when no Chromium with DevTools runs: start it with deskctl up "
                       "--start-url URL or open-url URL --browser chromium.",
               result="json", result_key="pages", group="observe", capability="browser", recorded=False),
    ActionSpec("list_windows", "List the top-level windows: id, title, class, pid, geometry [x, y, w, h] and "
               "whether each has the focus.", method="windows", result="json", result_key="windows",
               group="observe", capability="window_management", recorded=False),
    ActionSpec("focus", "Raise a window and give it the keyboard focus; gives the window as it is then.",
               (_WINDOW,), result="json", result_key="window", group="observe", capability="window_management"),
    ActionSpec("move_window", "Move and resize a window (its client area); gives the window as it is then.",
               (_WINDOW,
                Param("x", "int", doc="left edge", bound="window_offset"),
                Param("y", "int", doc="top edge", bound="window_offset"),
                Param("width", "int", doc="width", bound="window_side"),
                Param("height", "int", doc="height", bound="window_side")),
               result="json", result_key="window", group="observe", capability="window_management"),
    ActionSpec("wait_until_stable", "Wait until the screen has not changed for quiet_ms milliseconds; gives the "
               "seconds it took (wait.timeout, exit 6, when it keeps changing).",
               (Param("region", "str", None, doc="only this part X,Y,WIDTH,HEIGHT of the screen"),
                Param("quiet_ms", "int", 500, doc="milliseconds without a change", bound="quiet_ms"),
                Param("timeout", "float", 30.0, doc="seconds to wait", bound="wait_timeout",
                      mcp_bound="mcp_wait_timeout")),
               result="json", result_key="seconds", group="observe", recorded=False),
    ActionSpec("accessibility_tree", "The accessibility tree (AT-SPI): nodes with role, name, description, value, "
               "states, bounds [x, y, w, h] in screen pixels, and children.",
               (Param("window", "str", None, doc="only the windows whose title contains this"),
                Param("max_depth", "int", 40, doc="levels below the desktop", bound="a11y_depth"),
                Param("max_nodes", "int", 5000, doc="most nodes", bound="a11y_nodes")),
               result="json", result_key="tree", group="observe", capability="accessibility", recorded=False,
               cli_name="a11y"),
    ActionSpec("find", "The nodes of the accessibility tree with this role (push button, entry ...) and name "
               "(exact, else contained).",
               (Param("role", "str", None, doc="the AT-SPI role name"), Param("name", "str", None, doc="the name"),
                Param("window", "str", None, doc="only the windows whose title contains this")),
               result="json", result_key="nodes", group="observe", capability="accessibility", recorded=False),
    ActionSpec("click_element", "Click the centre of an accessibility node's bounds (a node that find gave).",
               (Param("node", "json", doc="the node (its bounds are used)"), _BUTTON),
               group="observe", capability="accessibility", surfaces=_NO_CLI),
    # -- pointer -------------------------------------------------------------------------------------
    ActionSpec("click", "Click at X Y" + _AT_POINTER + ".",
               (*_xy(optional=True), _BUTTON,
                Param("count", "int", 1, doc="1, 2 (double) or 3 (triple)", bound="click_count", cli="none"),
                _SPACE)),
    ActionSpec("double_click", "Double-click at X Y" + _AT_POINTER + ".", (*_xy(optional=True), _BUTTON, _SPACE)),
    ActionSpec("triple_click", "Triple-click at X Y" + _AT_POINTER + "; selects a line in most programs.",
               (*_xy(optional=True), _SPACE)),
    ActionSpec("right_click", "Right-click at X Y" + _AT_POINTER + ".", (*_xy(optional=True), _SPACE)),
    ActionSpec("middle_click", "Middle-click at X Y" + _AT_POINTER + ".", (*_xy(optional=True), _SPACE)),
    ActionSpec("move", "Move the pointer to X Y without clicking.", (*_xy(), _SPACE)),
    ActionSpec("drag", "Drag from X1 Y1 to X2 Y2: press there, move holding the button, release.",
               (Param("x1", "int", bound="coordinate", doc="where the drag starts"),
                Param("y1", "int", bound="coordinate", doc="where the drag starts"),
                Param("x2", "int", bound="coordinate", doc="where it ends"),
                Param("y2", "int", bound="coordinate", doc="where it ends"), _BUTTON, _SPACE)),
    # the CLI's form is `scroll [X Y] [DY] [--dx N]`: the most common scroll is the shortest command
    ActionSpec("scroll", "Scroll at X Y (or the pointer) by wheel clicks: DY > 0 scrolls down, DX > 0 right.",
               (Param("x", "int", None, doc="x in screenshot pixels", bound="coordinate", cli="numbers"),
                Param("y", "int", None, doc="y in screenshot pixels", bound="coordinate", cli="numbers"),
                Param("dx", "int", 0, doc="Sideways wheel clicks (positive: right)", bound="scroll_clicks"),
                Param("dy", "int", 0, doc="wheel clicks (positive: down)", bound="scroll_clicks", cli="numbers"),
                _SPACE),
               details="Without X Y it scrolls where the pointer is.\n\n\b\n"
                       "scroll 100 200 -3   three clicks up at (100, 200)\n"
                       "scroll 3            three clicks down where the pointer is\n"
                       "scroll 100 200 --dx 2"),
    ActionSpec("mouse_down", "Move to X Y and press a mouse button without releasing it.",
               (*_xy(), _BUTTON, _SPACE)),
    ActionSpec("mouse_up", "Move to X Y and release a mouse button.", (*_xy(), _BUTTON, _SPACE)),
    # -- keyboard ------------------------------------------------------------------------------------
    ActionSpec("type", "Type TEXT (any Unicode) at the keyboard focus.",
               (Param("text", "str", doc="the text", bound="type_chars"),), group="keyboard"),
    ActionSpec("key", "Press and release a key or chord: enter, tab, escape, ctrl+s, ctrl+shift+t, alt+f4, f5, "
               "pageup ...", (Param("chord", "str", doc="the key or chord", bound="key_chars"),), group="keyboard"),
    ActionSpec("key_down", "Hold KEY down (e.g. shift) until key_up.",
               (Param("key", "str", doc="the key", bound="key_chars"),), group="keyboard"),
    ActionSpec("key_up", "Release a KEY held with key_down.",
               (Param("key", "str", doc="the key", bound="key_chars"),), group="keyboard"),
    # -- clipboard and applications ------------------------------------------------------------------
    ActionSpec("clipboard_get", "Read the desktop's clipboard text.", result="text", group="app",
               details="The CLI prints it as it is, with no newline added (--json: {\"text\": ...}).",
               capability="clipboard", recorded=False, cli_name="clipboard"),
    ActionSpec("clipboard_set", "Set the clipboard to TEXT (any Unicode; \"\" empties it); paste it with key "
               "ctrl+v.", (Param("text", "str", doc="the text", stdin=True),),
               details="On the CLI, TEXT - reads the text from stdin, of any size (a command-line argument holds "
                       "at most 128 KiB on Linux): deskctl do ID clipboard-set - < notes.txt.",
               group="app", capability="clipboard", recorded=False),
    ActionSpec("open_url", "Open URL in the desktop's browser; returns once it is handed over (wait_for its "
               "window's title, then take a screenshot).",
               (Param("url", "str", doc="the URL: scheme and host, a file: URL or an absolute path"),
                Param("browser", "str", None,
                      doc="Program to open it with (default: the desktop's opener, xdg-open on Linux)")),
               group="app", capability="windows", recorded=False, open_world=True),
    ActionSpec("launch", "Start APP with ARGS on the desktop, detached (a GUI app keeps running); gives its "
               "process id.",
               (Param("app", "str", doc="the program"),
                Param("args", "strs", (), doc="its arguments", cli="variadic")),
               details="On the CLI everything after APP is its arguments (--json goes before APP):\n"
                       "deskctl do ID launch xmessage -title hello \"hi there\".",
               result="json", result_key="pid", group="app", capability="windows", recorded=False, runs_code=True),
    # -- commands and time (exec is the top-level ``deskctl exec`` on the CLI; MCP offers it with allow_exec) ---
    ActionSpec("exec", "Run a shell command on the desktop's machine (with its DISPLAY); gives exit_code, "
               "stdout, stderr, or the pid with background.",
               (Param("command", "str", doc="the shell command"),
                Param("timeout", "float", 60.0, doc="seconds before it is killed (exit code 124)",
                      bound="exec_timeout"),
                Param("cwd", "str", None, doc="directory to run it in"),
                Param("env", "strmap", None, doc="variables added to its environment"),
                Param("user", "str", None, doc="run as this user"),
                Param("background", "bool", False, doc="start it detached and give its pid at once"),
                Param("on_output", "callable", None, doc="called with (text, stream) as the output comes",
                      surfaces=frozenset({"aio"}))),
               result="json", group="exec", capability="exec", recorded=False, runs_code=True, surfaces=_NO_CLI,
               cli_command="exec"),
    # -- episodes (docs/episodes.md; the CLI has them as the top-level `deskctl snapshot` / `deskctl restore`) ---
    ActionSpec("snapshot", "Keep the desktop's state as NAME (files, and the programs whose windows are open); "
               "gives the snapshot's record.",
               (Param("name", "str", doc="the snapshot's name"),
                Param("ttl", "float", None, doc="seconds before the reaper deletes it (default 7 days)"),
                Param("replace", "bool", False, doc="replace a snapshot of the same name")),
               result="json", group="episodes", capability="snapshots", recorded=False, surfaces=_NO_CLI,
               cli_command="snapshot"),
    ActionSpec("restore", "Put the desktop back as it was at the snapshot NAME; what changed since is gone.",
               (Param("name", "str", doc="the snapshot's name or id"),),
               result="json", group="episodes", capability="snapshots", recorded=False, surfaces=_NO_CLI,
               cli_command="restore"),
    ActionSpec("wait", "Wait SECONDS (at most 60) for the screen to settle, e.g. after starting a program.",
               (Param("seconds", "float", doc="seconds", bound="mcp_wait"),),
               group="observe", recorded=False, surfaces=frozenset({"mcp"}), surface_only=True),
)

_BY_NAME = {a.name: a for a in ACTIONS}


def invoke(target: Any, action: ActionSpec, values: Mapping[str, Any]) -> Any:
    """Call ``target.<action.method>`` with ``values`` (by the surfaces' names; a parameter left out keeps the
    method's default): the parameters before a ``variadic`` one positionally, it as ``*args``, the rest by their
    Desktop names as keywords."""
    args: list[Any] = []
    keywords: dict[str, Any] = {}
    variadic = next((i for i, p in enumerate(action.params) if p.cli == "variadic"), None)
    for index, p in enumerate(action.params):
        if p.name not in values:
            continue
        value = values[p.name]
        if variadic is not None and index < variadic:
            args.append(value)
        elif index == variadic:
            args.extend(value or ())
        else:
            keywords[p.py] = value
    return getattr(target, action.method)(*args, **keywords)


def jsonable(value: Any) -> Any:
    """A result as JSON data: an object with ``to_dict()`` (a window, an accessibility tree) as its dict, a list of
    them as a list of dicts; anything else as it is."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list) and any(hasattr(item, "to_dict") for item in value):
        return [item.to_dict() if hasattr(item, "to_dict") else item for item in value]
    return value


def by_name(name: str) -> ActionSpec:
    return _BY_NAME[name]


def by_cli_name(name: str) -> ActionSpec | None:
    return next((a for a in ACTIONS if a.cli_name == name and "cli" in a.surfaces), None)


def by_mcp_name(name: str) -> ActionSpec | None:
    return next((a for a in ACTIONS if a.mcp_name == name and "mcp" in a.surfaces), None)


# -- docs/actions.md -----------------------------------------------------------------------------------------------
def _shown(value: Any) -> str:
    if value is REQUIRED:
        return "required"
    if isinstance(value, tuple):
        return "`[]`" if not value else f"`{list(value)!r}`"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def cli_usage(action: ActionSpec) -> str:
    """``deskctl do ID <name> ARGS [OPTIONS]`` as the docs show it (the CLI's own help says the same)."""
    if "cli" not in action.surfaces:
        return f"`deskctl {action.cli_command} ...`" if action.cli_command else "-"
    parts = [f"deskctl do ID {action.cli_name}"]
    numbers = [p for p in action.params_on("cli") if p.cli == "numbers"]
    optional = [p.name.upper() for p in action.params_on("cli") if p.cli == "argument" and not p.required]
    for p in action.params_on("cli"):
        if p.cli == "argument" and p.required:
            parts.append(p.name.upper())
        elif p.cli == "argument" and p.name.upper() == optional[0]:
            parts.append(f"[{' '.join(optional)}]")  # given all together or not at all
        elif p.cli == "variadic":
            parts.append(f"[{p.name.upper()}...]")
        elif p.cli == "numbers" and p is numbers[0]:
            parts.append(numbers_metavar(numbers))
    for p in action.params_on("cli"):
        if p.cli == "option":
            flag = "--" + p.name.replace("_", "-")
            parts.append(f"[{flag}]" if p.kind == "bool" else f"[{flag} {p.name.upper()}]")
    return "`" + " ".join(parts) + "`"


def numbers_metavar(numbers: list[Param]) -> str:
    """``[X Y] [DY]``: the point, then the rest, each of which may be left out."""
    point, rest = numbers[:2], numbers[2:]
    return " ".join([f"[{point[0].name.upper()} {point[1].name.upper()}]", *(f"[{p.name.upper()}]" for p in rest)])


_SURFACE_NAMES = {"cli": "CLI", "mcp": "MCP", "aio": "library"}


def markdown() -> str:
    """The text of docs/actions.md (a test checks the checked-in file is this)."""
    from deskctl.limits import describe

    lines = ["# Actions", "",
             "<!-- Generated by `python -m deskctl.action_table --markdown > docs/actions.md` from",
             "     src/deskctl/action_table.py. Do not edit: change the table and regenerate. -->", "",
             "Every action a desktop offers, declared once in `deskctl/action_table.py`: the `Desktop` method, "
             "the `AsyncDesktop`", "coroutine, the CLI command (`deskctl do ID ...`) and the MCP tool of each are "
             "made from, or checked against, that", "table (tests/unit/test_action_surfaces.py). Coordinates are "
             "pixels of the screenshot (the pinned geometry). A", "number out of its range is a usage error "
             "(exit 2) with the range's code on every surface ([reliability](reliability.md#every-input-is-bounded)).",
             "`library` is `Desktop` and `AsyncDesktop` (the same parameters; `AsyncDesktop`'s are coroutines).", "",
             "To add an action: an entry in the table, a `Desktop` method (and its `AsyncDesktop` twin); then "
             "regenerate this file", "and the fast `do` table (`python -m deskctl.cli._do_gen`). The CLI command "
             "and the MCP tool need no code.", "",
             "| action | CLI | MCP tool | capability | recorded | gives |", "|---|---|---|---|---|---|"]
    for a in ACTIONS:
        method = f"`Desktop.{a.method}`" if not a.surface_only else "(MCP only)"
        mcp = f"`{a.mcp_name}`" + (" (`--allow-exec`)" if a.runs_code else "") if "mcp" in a.surfaces else "-"
        lines.append(f"| [{a.name}](#{a.name.replace('_', '-')}) {method} | {cli_usage(a)} | {mcp} | "
                     f"{a.capability or 'every provider'} | {'yes' if a.recorded else 'no'} | {a.result} |")
    for a in ACTIONS:
        lines += ["", f"## {a.name}", "", a.doc]
        for paragraph in a.details.split("\n\n") if a.details else ():
            # click's "\b" keeps a paragraph's lines as they are: in Markdown, a code block
            verbatim = paragraph.startswith("\b\n")
            lines += ["", *(["```", paragraph[2:], "```"] if verbatim else [paragraph])]
        surfaces = [_SURFACE_NAMES[s] for s in ("cli", "mcp", "aio") if s in a.surfaces]
        lines += ["", f"Surfaces: {', '.join(surfaces)}" + (f"; CLI: `deskctl {a.cli_command}`" if a.cli_command
                                                               else "") + "."]
        if a.params:
            lines += ["", "| parameter | kind | default | range | on | doc |", "|---|---|---|---|---|---|"]
            for p in a.params:
                bound = describe(p.bound) if p.bound else ""
                if p.mcp_bound != p.bound and p.mcp_bound:
                    bound += f" (MCP: {describe(p.mcp_bound)})"
                on = ", ".join(_SURFACE_NAMES[s] for s in ("cli", "mcp", "aio") if p.on(s, a))
                name = f"`{p.name}`" + (f" (Desktop: `{p.py}`)" if p.py != p.name else "")
                choices = f" ({', '.join(p.choices)})" if p.choices and not all(c in p.doc for c in p.choices) else ""
                lines.append(f"| {name} | {p.kind} | {_shown(p.default)} | {bound} | {on or '-'} | "
                             f"{p.doc}{choices} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m deskctl.action_table --markdown > docs/actions.md")
    sys.stdout.write(markdown())
