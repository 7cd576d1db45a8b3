"""bench/run_all.py collects every ratio the benchmarks print, in each of the forms they print it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from run_all import label_of, ratios_of


def test_each_form_of_a_ratio_is_collected_with_what_it_compares() -> None:
    paren = "do click    deskctl    38.10 ms  xdotool     3.36 ms (x   0.1)  import deskctl    25.32 ms (x   0.7)"
    assert ratios_of(paren) == ["xdotool x0.1", "import deskctl x0.7"]
    assert ratios_of("  raw frame  deskctl 0.18 ms  python-mss 0.28 ms  (deskctl/mss x0.66)") == ["deskctl/mss x0.66"]
    assert ratios_of("click   12.0 ms   10.0 ms   1.20x") == ["x1.20"]
    named = ("docker-cli download 64 MiB file    deskctl     235.8 ms    271.4 MiB/s   docker cp     290.9 ms    "
             "220.0 MiB/s   deskctl/naive 0.81 (target 1.1)")
    assert ratios_of(named) == ["deskctl/naive x0.81"]
    assert label_of(named, "") == "docker-cli download 64 MiB file"
    assert ratios_of("upload and download medians over 3 rounds; load average 2.5 on 2 cores") == []
