"""deskctl.providers._procs.other_user: whom a command run on this host (xvfb, memory) runs as, and every refusal
with its code, the same for both providers."""

from __future__ import annotations

import os
import pwd
import shutil

import pytest

from deskctl.errors import ProviderUnreachable, UsageError
from deskctl.providers._procs import other_user


def _someone_else() -> str:
    me = pwd.getpwuid(os.geteuid()).pw_name
    return "nobody" if me != "nobody" else "root"


@pytest.mark.parametrize("provider", ["xvfb", "memory"])
def test_oneself_and_nobody_need_no_switch(provider: str) -> None:
    assert other_user(None, provider) is None
    assert other_user(pwd.getpwuid(os.geteuid()).pw_name, provider) is None


@pytest.mark.parametrize("provider", ["xvfb", "memory"])
def test_an_unknown_user_is_a_bad_user(provider: str) -> None:
    with pytest.raises(UsageError) as info:
        other_user("no-such-user-here", provider)
    assert (info.value.code, info.value.provider) == ("usage.bad_user", provider)


@pytest.mark.parametrize("provider", ["xvfb", "memory"])
def test_only_root_switches(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    other = _someone_else()
    monkeypatch.setattr(os, "geteuid", lambda: 4242)  # as a non-root caller sees it
    with pytest.raises(UsageError) as info:
        other_user(other, provider)
    assert info.value.code == "usage.unsupported" and "root" in info.value.message and provider in info.value.message


@pytest.mark.parametrize("provider", ["xvfb", "memory"])
def test_root_switches_with_sudo_and_says_so_without_it(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    other = _someone_else()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/sudo" if name == "sudo" else None)
    assert other_user(other, provider) == other
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ProviderUnreachable) as info:
        other_user(other, provider)
    assert "sudo" in info.value.message and info.value.remedy == "apt-get install sudo"
