"""``import deskctl`` never imports an integration (Harbor's lives in deskctl.integrations.harbor and needs Harbor)."""

from __future__ import annotations

import subprocess
import sys


def test_import_deskctl_does_not_import_the_integrations() -> None:
    code = "import sys, deskctl; print(sorted(m for m in sys.modules if m.startswith(('harbor', 'deskctl.integ'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
