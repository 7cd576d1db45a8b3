"""Latency of the ``ssh`` provider through deskctl next to the naive way, in one run, on one desktop on a real
OpenSSH server on a loopback port (started here, as in the tests: run as root after scripts/setup.d/40-ssh.sh).

* click: ``desk.click`` (XTEST over the session's one SSH connection, through a streamlocal channel to the
  remote X socket) vs ``ssh host 'xdotool mousemove X Y click 1'`` per action;
* screenshot of a 1024x768 desktop showing realistic content, as PNG bytes on the client: ``desk.screenshot()``
  vs ``ssh host 'scrot FILE && cat FILE'`` per shot;
* both naive ways also with OpenSSH connection sharing (``ControlMaster``/``ControlPersist``), the best a
  shell script can do: it saves the handshake but still starts a remote process per action.

Prints medians and ratios (naive / deskctl).

    .venv/bin/python bench/bench_ssh.py [--clicks 100] [--naive-clicks 30] [--shots 20] [--naive-shots 15]
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

GEOMETRY = (1024, 768)


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def row(name: str, ours: list[float], naive: dict[str, list[float]]) -> None:
    cells = [f"{name:<11} deskctl {ms(ours):8.2f} ms"]
    for label, samples in naive.items():
        cells.append(f"{label} {ms(samples):8.2f} ms (x{ms(samples) / ms(ours):5.1f})")
    print("  ".join(cells))


def wallpaper(path: Path) -> None:
    """A desktop-like picture: a title bar, lines of coloured text, buttons, and a noisy photo region."""
    from PIL import Image, ImageDraw

    rng = random.Random(7)
    width = GEOMETRY[0]
    image = Image.new("RGB", GEOMETRY, (246, 246, 246))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width, 28), fill=(45, 52, 64))
    words = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "agents", "click",
             "buttons", "and", "type", "text")
    for line in range(50):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        draw.text((16, 40 + line * 14), text, fill=(rng.randint(0, 90), rng.randint(0, 90), rng.randint(0, 140)))
    for i in range(8):
        x, y = 620 + (i % 2) * 190, 60 + (i // 2) * 50
        draw.rounded_rectangle((x, y, x + 170, y + 36), radius=6, fill=(60, 120, 220))
        draw.text((x + 12, y + 12), f"Button {i}", fill=(255, 255, 255))
    image.paste(Image.effect_noise((360, 240), 48).convert("RGB"), (620, 300))
    image.save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clicks", type=int, default=100)
    parser.add_argument("--naive-clicks", type=int, default=30)
    parser.add_argument("--shots", type=int, default=20)
    parser.add_argument("--naive-shots", type=int, default=15)
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
            wallpaper(picture)
            os.chmod(picture, 0o644)
            # ImageMagick sets the root window's background and exits (with status 1 on Xvfb, harmlessly);
            # the PNG size printed at the end shows the content is there
            desk.exec(f"display -window root {picture}", timeout=30)
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
                                  "shared-ssh+xdotool": timed(naive_click(ssh_shared), args.naive_clicks)})
            sizes: list[int] = []

            def ours_shot() -> None:
                sizes.append(len(desk.screenshot().png))

            shots = timed(ours_shot, args.shots)
            row("screenshot", shots, {"ssh+scrot": timed(naive_shot(ssh_base), args.naive_shots),
                                      "shared-ssh+scrot": timed(naive_shot(ssh_shared), args.naive_shots)})
            print(f"\n(deskctl PNG {statistics.median(sizes) // 1024} KiB; the raw frame crosses SSH and is encoded "
                  "on the client)")
    finally:
        subprocess.run([*ssh_shared, "-O", "exit"], capture_output=True)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
