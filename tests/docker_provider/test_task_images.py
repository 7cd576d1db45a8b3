"""Any image as a docker desktop (src/deskctl/providers/docker/layers.py), through the real CLI on the real engine:
a plain Debian image with xterm and no X server gets deskctl's layer (Xvfb, and the font package the `fonts`
option names), its display on :1; an app a process in the container starts with DISPLAY=:1 alone is in
deskctl's screenshot, and a CJK glyph is drawn with the font (its pixels, not the package's presence)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: the test's task image: Debian with an X client and no X server (built once, kept: its tag names its recipe)
APP_DOCKERFILE = ("FROM deskctl-base:bookworm\n"
                  "RUN apt-get update && apt-get install -y --no-install-recommends xterm "
                  "&& rm -rf /var/lib/apt/lists/*\nWORKDIR /srv\n")
APP_IMAGE = "deskctl-test-xterm:1"


def run(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deskctl", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


@pytest.fixture(scope="module")
def app_image(docker_sdk: Any) -> str:
    try:
        docker_sdk.images.get(APP_IMAGE)
    except Exception:  # not built yet on this engine
        docker_sdk.images.build(fileobj=io.BytesIO(APP_DOCKERFILE.encode()), tag=APP_IMAGE, network_mode="host",
                                rm=True, forcerm=True)
    return APP_IMAGE


def ink_box(png: Path) -> tuple[int, int] | None:
    """Width and height of the dark pixels (ink) inside xterm's white window (the screen around it is Xvfb's
    black), or None before the window is drawn."""
    from PIL import Image

    with Image.open(png) as image:
        rgb = image.convert("RGB")
    white = rgb.point(lambda v: 255 if v > 230 else 0).convert("L").point(lambda v: 255 if v == 255 else 0)
    window = white.getbbox()
    if window is None:
        return None
    inside = rgb.crop(window).convert("L").point(lambda v: 255 if v < 80 else 0)
    ink = inside.getbbox()
    if ink is None:
        return None
    return ink[2] - ink[0], ink[3] - ink[1]


def test_a_task_image_app_on_display_1_is_in_the_screenshot_with_its_cjk_glyph(
        deskctl_home: Path, tmp_path: Path, app_image: str, docker_sdk: Any) -> None:
    env = {"DESKCTL_HOME": str(deskctl_home)}
    up = run("up", "-p", "docker", "-g", "640x480", "-o", f"image={app_image}", "-o", "display=1",
             "-o", "fonts=fonts-wqy-zenhei", "-o", "locale=zh_CN.UTF-8", "-o", "timezone=Asia/Shanghai",
             "-o", "build_network=host", "--json", env=env)
    assert up.returncode == 0, up.stderr
    session = json.loads(up.stdout)["id"]
    try:
        attrs = docker_sdk.api.inspect_container(session)
        assert attrs["Config"]["Image"].startswith("deskctl-layer:")  # Xvfb and the font added over the image
        assert attrs["Config"]["WorkingDir"] == "/srv"  # the image's own
        assert "DISPLAY" not in " ".join(attrs["Config"]["Env"])  # no DISPLAY forced on the task's environment
        # as Harbor's computer-1 starts an app: DISPLAY=:1 and nothing else of X in the command
        xterm = ("DISPLAY=:1 xterm -geometry 6x1+0+0 -fa 'WenQuanYi Zen Hei' -fs 40 -bg white -fg black "
                 "-e sh -c 'printf \"\\033[?25l\\344\\270\\200\"; sleep 600'")  # cursor hidden, then U+4E00
        started = run("exec", session, "--background", "--", xterm, env=env)
        assert started.returncode == 0, started.stderr
        facts = run("exec", session, "--", "echo $LANG $TZ; date +%Z; locale -a | grep -i zh_CN", env=env)
        assert facts.stdout.split() == ["zh_CN.UTF-8", "Asia/Shanghai", "CST", "zh_CN.utf8"], facts.stdout
        shot = tmp_path / "shot.png"
        box = None
        for _ in range(100):  # until xterm has drawn (bounded: 100 screenshots)
            taken = run("screenshot", session, "-o", str(shot), env=env)
            assert taken.returncode == 0, taken.stderr
            box = ink_box(shot)
            if box is not None:
                break
        assert box is not None, "nothing drawn where xterm's window is"
        width, height = box
        # U+4E00 "一" is one horizontal stroke: ink much wider than tall (a missing glyph is a box or nothing)
        assert width >= 20 and height * 3 <= width, box
    finally:
        down = run("down", session, env=env)
        assert down.returncode == 0, down.stderr


def test_an_image_that_cannot_be_a_desktop_is_refused_with_the_reason(deskctl_home: Path,
                                                                       docker_sdk: Any) -> None:
    # busybox-like: a shell, no Xvfb, no package manager deskctl knows
    tag = "deskctl-test-nopm:1"
    try:
        docker_sdk.images.get(tag)
    except Exception:
        docker_sdk.images.build(fileobj=io.BytesIO(b"FROM deskctl-base:bookworm\nRUN rm -f /usr/bin/apt-get\n"),
                                tag=tag, network_mode="none", rm=True, forcerm=True)
    env = {"DESKCTL_HOME": str(deskctl_home)}
    up = run("up", "-p", "docker", "-o", f"image={tag}", "--json", env=env)
    assert up.returncode == 2, up.stdout + up.stderr
    error = json.loads(up.stdout)["error"]
    assert error["code"] == "usage.bad_image" and "no Xvfb" in error["message"], error
    assert "apt-get, apk, dnf" in error["message"] and error["remedy"]


def test_an_image_without_a_shell_is_refused_and_its_probe_container_is_gone(deskctl_home: Path,
                                                                            docker_sdk: Any) -> None:
    tag = "deskctl-test-noshell:1"
    try:
        docker_sdk.images.get(tag)
    except Exception:
        dockerfile = b"FROM deskctl-base:bookworm AS files\nFROM scratch\nCOPY --from=files /etc/hostname /x\n"
        docker_sdk.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, network_mode="none", rm=True,
                                forcerm=True)
    up = run("up", "-p", "docker", "-o", f"image={tag}", "--json", env={"DESKCTL_HOME": str(deskctl_home)})
    assert up.returncode == 2, up.stdout + up.stderr
    error = json.loads(up.stdout)["error"]
    assert error["code"] == "usage.bad_image" and "no /bin/sh" in error["message"], error
    assert docker_sdk.api.containers(all=True, filters={"label": "deskctl.probe", "ancestor": tag}) == []


#: a task image's Xvfb from before ``-nocursor`` (put first on PATH): refuses the option as such a server does
OLD_XVFB = ('#!/bin/sh\nfor a; do if [ "$a" = -nocursor ]; then echo "Unrecognized option: $a"; exit 1; fi; done\n'
            'exec /usr/bin/Xvfb "$@"\n')


def test_a_task_image_xvfb_draws_no_pointer_and_one_without_the_option_still_starts(
        deskctl_home: Path, app_image: str, docker_sdk: Any) -> None:
    import deskctl
    from deskctl.providers.docker.container import _guest_script

    # the options of the test above: the same layer over the image (built once)
    options = {"image": app_image, "display": 1, "fonts": "fonts-wqy-zenhei", "locale": "zh_CN.UTF-8",
               "timezone": "Asia/Shanghai", "build_network": "host"}
    with deskctl.open_desktop("docker", geometry="320x240", provider_options=options) as desk:
        prov, handle = desk.provider, desk.handle
        assert handle is not None
        # a cursor a window defines (xterm's, a browser's) is drawn into Xvfb's framebuffer file unless it runs
        # with -nocursor; captures read that file, GetImage leaves the pointer out
        driver = prov._driver(handle)  # type: ignore[attr-defined]
        font = driver._display.open_font("cursor")
        driver._root.change_attributes(cursor=font.create_glyph_cursor(font, 68, 69, (0, 0, 0),
                                                                       (65535, 65535, 65535)))
        driver._display.sync()
        desk.move(100, 100)
        frame = desk.raw_frame()
        assert prov._framebuffer(handle) is not None  # type: ignore[attr-defined]
        size = 320 * 240 * 4
        assert bytes(frame.data)[:size] == bytes(driver.raw_frame().data)[:size]

        # an older Xvfb refuses -nocursor: the script starts it again without (here on display 7, last: it
        # shares the desktop's framebuffer folder)
        container = docker_sdk.containers.get(str(handle.resource_id))
        shim = container.exec_run(["sh", "-c", f"mkdir -p /tmp/shim && printf '%s' '{OLD_XVFB}' > /tmp/shim/Xvfb "
                                               "&& chmod +x /tmp/shim/Xvfb"])
        assert shim.exit_code == 0, shim.output
        path = "/tmp/shim:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        started = container.exec_run(["sh", "-c", _guest_script("start-xvfb.sh"), "deskctl-xvfb", "7",
                                      "320x240x24"], environment={"PATH": path})
        assert started.exit_code == 0, started.output
        running = container.exec_run(["sh", "-c", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; "
                                                  "done"]).output.decode()
        servers = [line for line in running.splitlines() if line.startswith("/usr/bin/Xvfb :7 ")]
        assert len(servers) == 1 and "-nocursor" not in servers[0], running
        assert [line for line in running.splitlines() if "Xvfb :1 " in line and "-nocursor" in line], running
