"""The accessibility tree of a desktop: ``Desktop.accessibility_tree()``, ``find`` and ``click_element``.

On a Linux desktop the tree comes from AT-SPI, walked inside the desktop by :mod:`deskctl.observe._atspi_guest`
(run over exec with the desktop's system ``python3``), so it works alike on ``xvfb``, ``docker``, ``ssh`` and
through the agent. The desktop needs ``at-spi2-core``, ``dbus-x11``, ``python3-gi`` and ``gir1.2-atspi-2.0``
(the deskctl desktop image has them); applications must start after the accessibility bus exists:
:func:`enable` starts it where the desktop did not (the image starts it at boot), and the first tree starts it too.
Chromium shows its pages' content only with ``--force-renderer-accessibility``. A provider without the
``accessibility`` capability refuses with ``usage.unsupported``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskctl.errors import UsageError

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["AccessibilityTree", "AccessibleNode", "center_of", "enable", "find", "tree"]


@dataclass(frozen=True)
class AccessibleNode:
    """One element: AT-SPI role name (``push button``, ``entry``, ``frame`` ...), name, description, value (an
    entry's text, a slider's number), states (``focused``, ``checked``, ``showing`` ...), bounds (x, y, width,
    height) in the pinned screen's pixels (None: not on screen), and children."""

    role: str
    name: str
    description: str = ""
    value: Any = None
    states: tuple[str, ...] = ()
    bounds: tuple[int, int, int, int] | None = None
    children: tuple[AccessibleNode, ...] = ()

    @property
    def center(self) -> tuple[int, int] | None:
        if self.bounds is None:
            return None
        x, y, w, h = self.bounds
        return x + w // 2, y + h // 2

    def walk(self) -> Iterator[AccessibleNode]:
        """This node and every node below it, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "name": self.name, "description": self.description, "value": self.value,
                "states": list(self.states), "bounds": None if self.bounds is None else list(self.bounds),
                "children": [c.to_dict() for c in self.children]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> AccessibleNode:
        bounds = raw.get("bounds")
        return cls(str(raw.get("role", "")), str(raw.get("name", "")), str(raw.get("description") or ""),
                   raw.get("value"), tuple(str(s) for s in raw.get("states") or ()),
                   None if bounds is None else (int(bounds[0]), int(bounds[1]), int(bounds[2]), int(bounds[3])),
                   tuple(cls.from_dict(c) for c in raw.get("children") or ()))


@dataclass(frozen=True)
class AccessibilityTree:
    """The tree under a ``desktop`` root (its children: the applications, or the windows asked for), how many
    nodes it has, and whether ``max_depth`` or ``max_nodes`` cut it."""

    root: AccessibleNode
    nodes: int
    truncated: bool

    def walk(self) -> Iterator[AccessibleNode]:
        return self.root.walk()

    def to_dict(self) -> dict[str, Any]:
        return {"tree": self.root.to_dict(), "nodes": self.nodes, "truncated": self.truncated}


def _check(desk: Desktop) -> None:
    if not getattr(desk.provider.capabilities, "accessibility", False):
        raise UsageError(f"provider {desk.provider_name!r} cannot read an accessibility tree",
                         code="usage.unsupported", provider=desk.provider_name,
                         remedy="use a provider whose capabilities include accessibility (deskctl providers --json)")


def enable(desk: Desktop) -> bool:
    """Make sure the desktop has an accessibility bus; True when it was started now (applications already
    running are not in the tree: start them after this)."""
    from deskctl.observe.windows import guest_call

    _check(desk)
    return bool(guest_call(desk, "_atspi_guest", {"op": "enable"}, "start the accessibility bus")["started"])


def tree(desk: Desktop, window: str | None = None, max_depth: int = 40, max_nodes: int = 5000) -> AccessibilityTree:
    """The tree (of the windows whose title contains ``window``, or of every application)."""
    from deskctl.limits import check_number
    from deskctl.observe.windows import guest_call

    max_depth = check_number("a11y_depth", max_depth, what="max_depth", strings=False)
    max_nodes = check_number("a11y_nodes", max_nodes, what="max_nodes", strings=False)
    if window is not None and (not isinstance(window, str) or not window):
        raise UsageError("window is (part of) a window title", code="usage.invalid")
    _check(desk)
    raw = guest_call(desk, "_atspi_guest", {"op": "tree", "window": window, "max_depth": max_depth,
                                            "max_nodes": max_nodes}, "read the accessibility tree")
    return AccessibilityTree(AccessibleNode.from_dict(raw["tree"]), int(raw["nodes"]), bool(raw["truncated"]))


def find(found: AccessibilityTree, role: str | None = None, name: str | None = None) -> list[AccessibleNode]:
    """The nodes of ``found`` whose role is ``role`` (case-insensitive) and whose name is ``name`` (or, when no
    name is exactly it, contains it), in tree order."""
    if role is None and name is None:
        raise UsageError("find needs a role, a name or both", code="usage.invalid")
    nodes = [n for n in found.walk() if role is None or n.role.lower() == role.lower()]
    if name is None:
        return nodes
    exact = [n for n in nodes if n.name == name]
    return exact or [n for n in nodes if name.lower() in n.name.lower()]


def center_of(desk: Desktop, node: Any) -> tuple[int, int]:
    """The screen point at the centre of ``node``'s bounds (an :class:`AccessibleNode` or its dict);
    ``usage.not_visible`` when it has none or they are off the screen."""
    if isinstance(node, Mapping):
        node = AccessibleNode.from_dict(node)
    if not isinstance(node, AccessibleNode):
        raise UsageError("click_element takes a node of the accessibility tree", code="usage.invalid")
    point = node.center
    width, height = desk.size
    if point is None or not (0 <= point[0] < width and 0 <= point[1] < height):
        raise UsageError(f"the {node.role} {node.name!r} is not on the screen (bounds {node.bounds})",
                         code="usage.not_visible", remedy="scroll it into view or raise its window, then look again")
    return point
