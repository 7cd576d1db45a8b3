"""The guests' clipboard (xclip): clipboard_set returns only once the clipboard holds the text. xclip's parent
exits when it has forked, and its child claims the selection a moment later; here an ``xclip`` ahead of the real one
on PATH widens that moment to half a second (the real xclip still serves the selection on the real X server)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import deskctl

pytestmark = pytest.mark.skipif(shutil.which("xclip") is None or shutil.which("Xvfb") is None,
                                reason="needs xclip and Xvfb (scripts/setup)")

#: ``xclip ... -i``: the input kept, the claim made by the real xclip half a second later, in the background
_LATE_XCLIP = """#!/bin/sh
case " $* " in
  *" -i "*|*" -i")
    kept=$(mktemp)
    cat > "$kept"
    ( sleep 0.5; {real} "$@" < "$kept"; rm -f "$kept" ) &
    exit 0 ;;
esac
exec {real} "$@"
"""


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[deskctl.Desktop]:
    real = shutil.which("xclip")
    late = tmp_path / "bin" / "xclip"
    late.parent.mkdir()
    late.write_text(_LATE_XCLIP.format(real=real))
    late.chmod(0o755)
    monkeypatch.setenv("PATH", f"{late.parent}:{__import__('os').environ['PATH']}")
    with deskctl.open_desktop("xvfb", geometry="320x240") as desk:
        yield desk


@pytest.mark.parametrize("size", [40, 200 * 1024], ids=["inline", "through-a-file"])
def test_a_late_claim_is_waited_for(desk: deskctl.Desktop, size: int) -> None:
    first, second = ("é1" * size)[:size], ("ü2" * size)[:size]
    desk.clipboard_set(first)
    assert desk.clipboard_get() == first
    desk.clipboard_set(second)  # the first text's owner still answers until the second claims the selection
    assert desk.clipboard_get() == second
