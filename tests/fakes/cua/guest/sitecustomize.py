"""The fake guest's Python: modules named in ``FAKE_GUEST_MISSING`` cannot be imported by the program that
``/execute`` runs (``python -c``), as on a guest image without them. The guest's own libraries (the pyautogui
stand-in and what it is built on) still import them, as a real pyautogui imports python-xlib on X11."""

from __future__ import annotations

import os
import sys
from typing import Any

_MISSING = frozenset(m for m in os.environ.get("FAKE_GUEST_MISSING", "").split(",") if m)


class _Missing:
    """A meta-path finder that refuses a missing module to the ``-c`` program only."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        top = name.partition(".")[0]
        if top not in _MISSING:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename == "<string>":
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        return None


if _MISSING:
    sys.meta_path.insert(0, _Missing())  # type: ignore[arg-type]
