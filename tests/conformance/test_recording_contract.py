"""Recording on every provider target: a recorded step carries the provider's screenshots (hashed, at the pinned
size), the provider, the geometry and the desktop image, through the same session code as every other action."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from deskctl.recording import JSONL_NAME, read_trajectory

if TYPE_CHECKING:
    from conformance.conftest import Target


def test_recorded_steps_carry_hashed_shots_provider_geometry_and_image(target: Target, tmp_path: Path) -> None:
    import deskctl

    width, height = (int(v) for v in target.geometry.split("x")[:2])
    desk = deskctl.open_desktop(**{**target.open_kwargs, "geometry": target.geometry, "record": tmp_path})
    handle = desk.handle
    try:
        desk.click(width // 2, height // 2)
        desk.type("ok")
        assert desk.annotate(reward=1) == 2
    finally:
        desk.close()
    assert handle is not None and target.leftovers(handle) == []
    rows = [json.loads(line) for line in (tmp_path / JSONL_NAME).read_text(encoding="utf-8").splitlines()]
    steps = [r for r in rows if r["type"] == "step"]
    assert [(r["step"], r["action"]["kind"], r["error"]) for r in steps] == [(1, "click", None), (2, "type", None)]
    image = handle.data.get("image") or handle.data.get("snapshot")
    if target.name == "docker":
        assert image, "the docker handle names its image"
    for row in steps:
        assert (row["provider"], row["geometry"], row["session"]) == (desk.provider_name, f"{width}x{height}",
                                                                      desk.id)
        assert row["image"] == (None if image is None else str(image))
        for which in ("before", "after"):
            path = tmp_path / row[which]["path"]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == row[which]["sha256"]
            with Image.open(path) as png:
                assert png.format == "PNG" and png.size == (width, height)
    assert read_trajectory(tmp_path).steps[1]["annotations"] == {"reward": 1}
