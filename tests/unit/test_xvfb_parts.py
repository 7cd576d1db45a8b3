"""The xvfb provider's class takes the methods of its other parts (preflight.py, browser.py, create.py, commands.py)
when they are first looked up (provider.py's ``_LATER``, providers/_later.py): the list must name every one of them,
and each must work bound to an XvfbProvider (no ``super()``, whose check of the instance's class would fail)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from deskctl.errors import UsageError
from deskctl.providers.base import RemoteHandle
from deskctl.providers.xvfb import XvfbProvider
from deskctl.providers.xvfb.provider import _LATER
from unit._parts import check_parts

_PARTS = ["deskctl.providers.xvfb.preflight", "deskctl.providers.xvfb.browser", "deskctl.providers.xvfb.create",
          "deskctl.providers.xvfb.commands", "deskctl.providers.xvfb.spawn", "deskctl.providers.xvfb.display",
          "deskctl.providers._procs", "deskctl.core.shell"]


def test_the_list_names_every_method_of_the_other_parts_once() -> None:
    # create and wait_ready, written out on the class (the base declares them abstract), call create.py's
    # _create and _wait_ready, which are in the list
    check_parts(XvfbProvider, _LATER, set())
    assert {"create", "wait_ready"} <= set(vars(XvfbProvider))


def test_the_methods_are_the_parts_own_once_looked_up() -> None:
    from deskctl.providers.xvfb.browser import _XvfbBrowser
    from deskctl.providers.xvfb.commands import _XvfbCommands
    from deskctl.providers.xvfb.create import _XvfbCreate
    from deskctl.providers.xvfb.preflight import _XvfbPreflight

    provider = XvfbProvider({"owner_watch": False})
    try:
        assert provider.exec.__func__ is _XvfbCommands.exec  # type: ignore[attr-defined]
        assert provider._settings.__func__ is _XvfbPreflight._settings  # type: ignore[attr-defined]
        assert XvfbProvider._browser_runs is _XvfbBrowser.__dict__["_browser_runs"].__func__
        assert XvfbProvider._log_tail is _XvfbCreate.__dict__["_log_tail"].__func__
    finally:
        provider.close()


def test_a_part_s_method_works_bound_to_the_provider() -> None:
    """Methods of two parts calling each other and the base (commands' _other_user, preflight's _settings)."""
    provider = XvfbProvider({"browser": "no-such-browser-here"})
    try:
        assert provider._settings().browser == "no-such-browser-here"
        assert provider._browser() is None
        assert provider._other_user(None) is None
        with pytest.raises(UsageError) as raised:
            provider._other_user("no-such-user-here")
        assert raised.value.code == "usage.bad_user"
        handle = RemoteHandle("xvfb", "dk-parts", "xvfb:dk-parts", data={"dir": "/nonexistent"})
        assert provider._env(handle)["DESKCTL_SESSION"] == "dk-parts"
    finally:
        provider.close()


def test_importing_the_provider_imports_none_of_the_other_parts() -> None:
    """A fresh process: the class is whole (instantiable: create and wait_ready are not abstract) without those
    modules, and the package's re-exports come on first use."""
    code = ("import json, sys\nfrom deskctl.providers.xvfb import XvfbProvider\n"
            "XvfbProvider({}).close()\n"
            f"print(json.dumps(sorted(set({_PARTS!r}) & set(sys.modules))))\n"
            "import deskctl.providers.xvfb as package\n"
            "print(json.dumps([package.SESSION_ENV, callable(package._tagged_processes), callable(package._file_id),"
            " callable(package._listening), callable(package._lock_owner)]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded, exported = proc.stdout.splitlines()
    assert json.loads(loaded) == []
    assert json.loads(exported) == ["DESKCTL_SESSION", True, True, True, True]


def test_the_package_has_no_other_names() -> None:
    import deskctl.providers.xvfb as package

    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        package.nothing_here  # noqa: B018
