"""``deskctl screenshot ID --max-size/--scale/--region``: the image at that size and its transform, whose points
map back to the desktop; bad values are refused (exit 2) before the desktop is reached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

import deskctl
from _cli import deskctl as cli


@pytest.fixture
def session() -> Iterator[str]:
    up = cli("up", "--provider", "xvfb", "--geometry", "800x600", "--json", check=True)
    session_id = str(json.loads(up.stdout)["id"])
    try:
        yield session_id
    finally:
        cli("down", session_id)


def test_screenshot_max_size_and_region_give_the_image_and_its_transform(session: str, tmp_path: Path) -> None:
    out = tmp_path / "small.png"
    done = cli("screenshot", session, "-o", str(out), "--max-size", "400x400", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["transform"] == {"region": [0, 0, 800, 600], "size": [400, 300], "scale": [0.5, 0.5]}
    assert Image.open(out).size == (400, 300) == (document["width"], document["height"])

    zoom = tmp_path / "zoom.png"
    done = cli("screenshot", session, "-o", str(zoom), "--region", "100,50,40,30", "--scale", "4")
    assert done.returncode == 0, done.stderr
    assert Image.open(zoom).size == (160, 120)
    transform = json.loads(done.stderr.split("transform: ", 1)[1])
    with deskctl.attach(session) as desk:
        desk.move(0, 0, space=transform)
        assert desk.cursor_position() == (100, 50)
        desk.move(159, 119, space=transform)
        assert desk.cursor_position() == (139, 79)

    plain = cli("screenshot", session, "-o", str(tmp_path / "plain.png"), "--json")
    assert "transform" not in json.loads(plain.stdout)


@pytest.mark.parametrize(("flag", "value", "code"), [("--max-size", "huge", "usage.bad_space"),
                                                     ("--region", "1,2,3", "usage.bad_space"),
                                                     ("--region", "790,0,20,20", "geometry.out_of_bounds"),
                                                     ("--scale", "0", "usage.bad_space")])
def test_bad_transform_flags_are_usage_errors(session: str, tmp_path: Path, flag: str, value: str, code: str) -> None:
    done = cli("screenshot", session, "-o", str(tmp_path / "x.png"), flag, value, "--json")
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == code
    assert not (tmp_path / "x.png").exists()


def test_do_pointer_commands_take_the_screenshots_space(session: str, tmp_path: Path) -> None:
    """A point of a resized or zoomed screenshot, given to `deskctl do ... --space TRANSFORM` (a real CLI process,
    the fast path), lands on the desktop pixel that the image point shows."""
    from _cli import deskctl_process
    from deskctl.observe.transform import ImageTransform

    zoom = cli("screenshot", session, "-o", str(tmp_path / "zoom.png"), "--region", "100,50,40,30", "--scale",
               "4", "--json")
    assert zoom.returncode == 0, zoom.stderr
    small = cli("screenshot", session, "-o", str(tmp_path / "small.png"), "--max-size", "300x300", "--json")
    assert small.returncode == 0, small.stderr
    for document in (json.loads(zoom.stdout), json.loads(small.stdout)):
        space = json.dumps(document["transform"])
        mapped = ImageTransform.from_dict(document["transform"])
        width, height = document["width"], document["height"]
        for verb, x, y in (("move", 0, 0), ("click", width - 1, height - 1), ("right-click", width // 3, 7),
                           ("mouse-down", 5, height // 2), ("mouse-up", 6, height // 2)):
            done = deskctl_process("do", session, verb, str(x), str(y), "--space", space)
            assert done.returncode == 0, (verb, done.stderr)
            where = deskctl_process("do", session, "cursor-position", "--json")
            assert (json.loads(where.stdout)["x"], json.loads(where.stdout)["y"]) == mapped.to_desktop(x, y), verb
    # drag: both ends in the image's space (the pointer ends at the second)
    done = deskctl_process("do", session, "drag", "1", "2", "30", "20", "--space", json.dumps(
        json.loads(zoom.stdout)["transform"]))
    assert done.returncode == 0, done.stderr
    where = json.loads(deskctl_process("do", session, "cursor-position", "--json").stdout)
    assert (where["x"], where["y"]) == (100 + 30 // 4, 50 + 20 // 4)


@pytest.mark.parametrize(("space", "code"), [("not json", "usage.bad_space"), ('{"region": [0, 0]}', "usage.bad_space"),
                                             ('{"region": [0, 0, 40, 30], "size": [160, 120]}',
                                              "geometry.out_of_bounds")])
def test_a_bad_space_is_a_usage_error_and_nothing_moves(session: str, space: str, code: str) -> None:
    from _cli import deskctl_process

    assert deskctl_process("do", session, "move", "3", "4").returncode == 0
    done = deskctl_process("do", session, "click", "200", "5", "--space", space, "--json")
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == code
    assert "Traceback" not in done.stderr
    where = json.loads(deskctl_process("do", session, "cursor-position", "--json").stdout)
    assert (where["x"], where["y"]) == (3, 4)
