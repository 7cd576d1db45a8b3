"""Latency of the ``ssh`` provider through deskctl next to the naive way, in one run, on one desktop on a real
OpenSSH server on a loopback port (started here, as in the tests: run as root after scripts/setup.d/40-ssh.sh).

* click: ``desk.click`` (XTEST over the session's one SSH connection, through a streamlocal channel to the
  remote X socket) vs ``ssh host 'xdotool mousemove X Y click 1'`` per action;
* screenshot of a 1024x768 desktop showing realistic content, as PNG bytes on the client: ``desk.screenshot()``
  vs ``ssh host 'scrot FILE && cat FILE'`` per shot, in three cases: nothing changed since the last shot, a
  button-sized region (200x40) changed, the whole screen changed (deskctl fetches only what X DAMAGE reports
  changed, so the cases differ for it; scrot always captures everything). Changes are drawn, untimed, before
  every shot of either way by a local X client (the "host" is this machine);
* both naive ways also with OpenSSH connection sharing (``ControlMaster``/``ControlPersist``), the best a
  shell script can do: it saves the handshake but still starts a remote process per action.

Prints medians and ratios (naive / deskctl).

    .venv/bin/python bench/bench_ssh.py [--clicks 100] [--naive-clicks 30] [--shots 15] [--naive-shots 10]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "ssh"))

from _common import desktop_wallpaper, row, timed

GEOMETRY = (1024, 768)


class Painter:
    """Changes the desktop between shots, as a local X client (the host of the loopback sshd is this machine)."""

    def __init__(self, data: dict[str, object], picture: Path) -> None:
        from PIL import Image

        from deskctl.providers._x11 import X11Address, connect_display, read_cookie

        self.display = connect_display(X11Address(f":{data['display']}"), read_cookie(f"{data['dir']}/Xauthority"))
        self.root = self.display.screen().root
        self.depth = self.display.screen().root_depth
        self.picture = Image.open(picture).convert("RGBX").tobytes("raw", "BGRX")
        self.rng = random.Random(3)
        self.shift = 0

    def nothing(self) -> None:
        return None

    def small(self) -> None:
        colour = self.rng.randrange(1 << 24)
        gc = self.root.create_gc(foreground=colour)
        self.root.fill_rectangle(gc, self.rng.randrange(GEOMETRY[0] - 200), self.rng.randrange(GEOMETRY[1] - 40),
                                 200, 40)
        gc.free()
        self.display.sync()

    def full(self) -> None:
        from Xlib import X

        self.shift = (self.shift + 4 * 37) % (GEOMETRY[0] * 4)
        rolled = b"".join(row[self.shift:] + row[: self.shift] for row in
                          (self.picture[y * GEOMETRY[0] * 4:(y + 1) * GEOMETRY[0] * 4] for y in range(GEOMETRY[1])))
        gc = self.root.create_gc()
        rows = 60
        for top in range(0, GEOMETRY[1], rows):
            chunk = rolled[top * GEOMETRY[0] * 4:(top + rows) * GEOMETRY[0] * 4]
            self.root.put_image(gc, 0, top, GEOMETRY[0], len(chunk) // (GEOMETRY[0] * 4), X.ZPixmap, self.depth, 0,
                                chunk)
        gc.free()
        self.display.sync()

    def close(self) -> None:
        self.display.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clicks", type=int, default=100)
    parser.add_argument("--naive-clicks", type=int, default=30)
    parser.add_argument("--shots", type=int, default=15)
    parser.add_argument("--naive-shots", type=int, default=10)
    args = parser.parse_args()
    from _sshd import SshServer, unavailable_reason

    reason = unavailable_reason()
    if reason:
        sys.exit(reason)
    for tool in ("xdotool", "scrot", "display", "ssh"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (scripts/setup --dev installs the naive tools)")

    work = Path(tempfile.mkdtemp(prefix="deskctl-bench-ssh-"))
    os.chmod(work, 0o755)
    server = SshServer().start()
    known_hosts = server.write_known_hosts(work / "known_hosts")
    os.environ.update({"DESKCTL_HOME": str(work / "home"), "DESKCTL_SSH_HOST": server.target,
                       "DESKCTL_SSH_KEY_FILE": str(server.client_key), "DESKCTL_SSH_KNOWN_HOSTS": str(known_hosts)})
    os.environ.pop("SSH_AUTH_SOCK", None)
    ssh_base = ["ssh", "-q", "-p", str(server.port), "-i", str(server.client_key), "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes", "-o", "ControlMaster=no",
                f"{server.user}@127.0.0.1"]
    control = str(work / "ctl-%C")
    ssh_shared = ["ssh", "-q", "-p", str(server.port), "-i", str(server.client_key), "-o", "BatchMode=yes",
                  "-o", f"UserKnownHostsFile={known_hosts}", "-o", "ControlMaster=auto", "-o",
                  f"ControlPath={control}", "-o", "ControlPersist=120", f"{server.user}@127.0.0.1"]
    import deskctl

    print(f"deskctl ssh benchmark: {GEOMETRY[0]}x{GEOMETRY[1]} over loopback sshd, medians; "
          "(xN) = naive / deskctl\n")
    try:
        with deskctl.open_desktop("ssh", geometry=f"{GEOMETRY[0]}x{GEOMETRY[1]}") as desk:
            data = desk.handle.data  # type: ignore[union-attr]
            env = f"DISPLAY=:{data['display']} XAUTHORITY={data['dir']}/Xauthority"
            picture = work / "wallpaper.png"
            desktop_wallpaper(picture, GEOMETRY, lines=50)
            os.chmod(picture, 0o644)
            # ImageMagick sets the root window's background and exits (with status 1 on Xvfb, harmlessly);
            # the PNG size printed at the end shows the content is there
            desk.exec(f"display -window root {picture}", timeout=30)
            desk.screenshot()  # the first one fetches the whole frame
            shot_file = f"{data['dir']}/bench-shot.png"

            rng = random.Random(1)
            points = [(rng.randrange(GEOMETRY[0]), rng.randrange(GEOMETRY[1])) for _ in range(64)]
            it = iter(points * 1000)

            def ours_click() -> None:
                x, y = next(it)
                desk.click(x, y)

            def naive_click(base: list[str]) -> Callable[[], None]:
                def run() -> None:
                    x, y = next(it)
                    subprocess.run([*base, f"{env} xdotool mousemove {x} {y} click 1"], check=True)
                return run

            def naive_shot(base: list[str]) -> Callable[[], None]:
                def run() -> None:
                    out = subprocess.run([*base, f"{env} scrot -o {shot_file} && cat {shot_file}"], check=True,
                                         capture_output=True).stdout
                    assert out.startswith(b"\x89PNG")
                return run

            subprocess.run([*ssh_shared, "true"], check=True)  # the shared master connection, set up once
            clicks = timed(ours_click, args.clicks)
            row("click", clicks, {"ssh+xdotool": timed(naive_click(ssh_base), args.naive_clicks),
                                  "shared-ssh+xdotool": timed(naive_click(ssh_shared), args.naive_clicks)},
                ratio_width=5)
            sizes: list[int] = []

            def ours_shot() -> None:
                sizes.append(len(desk.screenshot().png))

            painter = Painter(data, picture)
            for case, change in (("unchanged", painter.nothing), ("small", painter.small),
                                 ("full", painter.full)):
                def with_change(fn: Callable[[], None], rounds: int,
                                change: Callable[[], None] = change) -> list[float]:
                    samples = []
                    for _ in range(rounds):
                        change()
                        start = time.perf_counter()
                        fn()
                        samples.append(time.perf_counter() - start)
                    return samples

                ours = with_change(ours_shot, args.shots)
                plain = with_change(naive_shot(ssh_base), args.naive_shots)
                shared = with_change(naive_shot(ssh_shared), args.naive_shots)
                row(f"shot:{case}", ours, {"ssh+scrot": plain, "shared-ssh+scrot": shared}, ratio_width=5)
            painter.close()
            print(f"\n(deskctl PNG median {statistics.median(sizes) // 1024} KiB)")
    finally:
        subprocess.run([*ssh_shared, "-O", "exit"], capture_output=True)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
