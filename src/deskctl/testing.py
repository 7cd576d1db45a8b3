"""What a provider outside this repository needs to run deskctl's conformance suite on itself.

The suite is one contract every provider passes (``tests/conformance/`` of deskctl's source tree: geometry,
screenshots, every input action seen by a probe window, exec, files, clipboard, windows, screenshot transforms
mapped back by clicks, window management and the accessibility tree, destroy leaves nothing,
the ledger's times and cost, SIGTERM/SIGINT/SIGKILL then ``deskctl reap``, the CLI's ``up``/``do``/``down``,
``deskctl view``, recording, the browser's DevTools). It is not shipped in the wheel yet; until it is, a third
party runs it from a checkout of deskctl at the version it depends on:

1. register the provider through the ``deskctl.providers`` entry-point group of its own distribution and
   install it (``deskctl providers`` lists it);
2. write a module that names the target: a dict (or a list of dicts) of :class:`TargetKwargs`, for example::

       # acme_conformance.py
       from acme_desktops.testing import acme_leftovers, acme_probe_address

       TARGET = {"name": "acme", "open_kwargs": {"provider": "acme"},
                 "probe_address": acme_probe_address, "leftovers": acme_leftovers}

3. in the deskctl checkout, with that module importable::

       DESKCTL_CONFORMANCE_TARGET=acme_conformance:TARGET pytest tests/conformance -k acme

``DESKCTL_CONFORMANCE_TARGET`` takes several ``module:attribute`` names separated by commas. A desktop that is an
X display gives ``probe_address``; one that is not gives ``open_probe``, a probe window with the interface of
deskctl's X probe (``tests/probe``). The ``memory`` provider's target (``tests/memory_provider/_memory_target.py``)
is the example of both the fields and such a probe; ``tests/memory_provider/test_third_party_conformance.py``
runs the whole suite on a provider installed this way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from deskctl.core.x11 import X11Address
    from deskctl.providers.base import RemoteHandle
    from deskctl.session import Desktop

__all__ = ["CAPABILITY_TESTS", "TARGET_ENV", "TargetKwargs", "load_targets", "unsupported_by"]

#: the contract tests that need an ability a provider declares as a capability flag
#: (:class:`~deskctl.providers.base.Capabilities`): test name -> flag. A provider whose flag is False must fail
#: them with ``usage.unsupported`` (a strict xfail), so the suite needs no per-target list of what it cannot do.
CAPABILITY_TESTS: dict[str, str] = {
    "test_move_and_mouse_down_up": "hold_input",
    "test_key_down_holds_a_modifier_until_key_up": "hold_input",
    "test_exec_as_another_user": "exec_as_user",
    "test_upload_and_download_a_directory_tree": "files",
    "test_upload_and_download_one_file": "files",
    "test_clipboard_set_then_get_and_seen_by_the_desktop": "clipboard",
    "test_clipboard_of_a_mebibyte_round_trips": "clipboard",
    "test_launch_then_wait_for_its_window": "windows",
    "test_open_url_hands_the_url_to_the_browser": "windows",
    "test_windows_list_focus_and_move": "window_management",
    "test_a_gtk_dialog_is_driven_through_the_accessibility_tree": "accessibility",
    "test_restore_brings_back_a_file_and_drops_a_later_one": "snapshots",
    "test_a_chromium_page_is_seen_by_devtools_inside_by_a_cdp_client_and_on_screen": "browser",
}

#: names the modules of extra conformance targets: ``module:attribute[,module:attribute...]``
TARGET_ENV = "DESKCTL_CONFORMANCE_TARGET"


class TargetKwargs(TypedDict):
    """The fields of one conformance target (``tests/conformance/conftest.py``'s ``Target``)."""

    #: the test id (``acme``); select it with ``pytest -k``
    name: str
    #: keyword arguments of :func:`deskctl.open_desktop` (the suite sets ``geometry``)
    open_kwargs: Mapping[str, Any]
    #: whatever of a destroyed desktop still exists, in words (processes, files, sandboxes): must be empty
    leftovers: Callable[[RemoteHandle], list[str]]
    #: the X display behind a desktop and its MIT-MAGIC-COOKIE-1, where the suite's probe window opens
    probe_address: NotRequired[Callable[[Desktop], tuple[X11Address, bytes | None]]]
    #: for a desktop that is no X display: a probe window of its own (a context manager)
    open_probe: NotRequired[Callable[[Desktop], Any]]
    #: pytest marks (skip-able groups)
    marks: NotRequired[tuple[Any, ...]]
    #: a context manager yielding environment variables for each test (a fake server's URL)
    environment: NotRequired[Callable[[], contextlib.AbstractContextManager[Mapping[str, str]]]]
    #: the size the suite pins (default 1024x768)
    geometry: NotRequired[str]
    #: ``guest``, ``other_user``, ``cost_known``, ``xfail`` (test name -> why; must fail with usage.unsupported),
    #: ``devtools_port`` (the port a provider promises DevTools on inside the desktop: a container's 9222)
    extra: NotRequired[Mapping[str, Any]]
    #: provider options the browser tests' desktop adds (where the provider claims ``browser``): what gives it
    #: a Chromium (docker: ``{"variant": "browser"}``); none for a desktop that has one anyway
    browser_options: NotRequired[Mapping[str, Any]]


def load_targets(value: str | None) -> list[TargetKwargs]:
    """The targets named by ``value`` (the :data:`TARGET_ENV` syntax; None or empty: none). A name that does
    not import, or an attribute that is not a target's fields, is :class:`~deskctl.errors.ConfigInvalid`."""
    import importlib

    from deskctl.errors import ConfigInvalid

    found: list[TargetKwargs] = []
    for spec in filter(None, (part.strip() for part in (value or "").split(","))):
        module_name, _, attribute = spec.partition(":")
        if not module_name or not attribute:
            raise ConfigInvalid(f"{TARGET_ENV}: {spec!r} is not module:attribute")
        try:
            named = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigInvalid(f"{TARGET_ENV}: cannot load {spec!r}: {exc}") from exc
        for target in named if isinstance(named, list | tuple) else [named]:
            if not isinstance(target, Mapping) or not {"name", "open_kwargs", "leftovers"} <= set(target):
                raise ConfigInvalid(f"{TARGET_ENV}: {spec!r} is not a target's fields "
                                    "(a dict with name, open_kwargs and leftovers, or a list of them)")
            found.append(target)  # type: ignore[arg-type]
    return found


def unsupported_by(provider: str, test_name: str) -> str | None:
    """Why the provider named ``provider`` cannot pass the contract test ``test_name``, when its capabilities
    say it cannot (see :data:`CAPABILITY_TESTS`); None when it must pass it."""
    flag = CAPABILITY_TESTS.get(test_name)
    if flag is None:
        return None
    from deskctl.providers import load_provider_class

    if getattr(load_provider_class(provider).capabilities, flag):
        return None
    return f"{provider}'s capabilities say {flag}=False (usage.unsupported)"
