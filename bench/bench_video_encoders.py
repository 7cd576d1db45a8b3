"""Which encoder writes a session's video: the ``ffmpeg`` program fed through a pipe (what deskctl uses) or PyAV
(libav in this process), on the same frames with the same settings, measured.

Frames: ``--frames`` raw frames of a real xvfb desktop (an xterm printing lines, so every frame differs a little,
as a session's screen does) captured first, so both encoders get identical input and capture costs nothing here.
Each encoder then writes H.264 (libx264, ultrafast, CRF 26, yuv420p, a keyframe a second, fragmented MP4) at
``--fps``. Printed per encoder: CPU seconds (this process and its children, all threads), CPU seconds per minute
of video, wall seconds, file size; rounds alternate the two encoders. PyAV is no dependency of deskctl: install
it (``pip install av``) to compare; without it only the ffmpeg row is printed.

    .venv/bin/python bench/bench_video_encoders.py [--frames 300] [--fps 10] [--rounds 3] [--geometry 1024x768]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import deskctl
from deskctl.recording_video import VideoOptions, _packed, _start_ffmpeg


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def capture_frames(count: int, geometry: str, fps: int) -> list[Any]:
    with deskctl.open_desktop("xvfb", geometry=geometry) as desk:
        desk.exec("xterm -title deskctl-bench-video -geometry 200x60+0+0 -e sh -c "
                  "'i=0; while true; do i=$((i+1)); echo line $i $(date +%s.%N); sleep 0.02; done'", background=True)
        desk.wait_for("deskctl-bench-video", timeout=30)
        frames = []
        for _ in range(count):
            frames.append(desk.raw_frame())
            time.sleep(1.0 / fps)
        return frames


def encode_ffmpeg(frames: list[Any], path: Path, fps: int) -> None:
    first = frames[0]
    _, pix_fmt = _packed(first)
    proc = _start_ffmpeg(path, first.width, first.height, pix_fmt, VideoOptions(fps=fps))
    assert proc.stdin is not None
    for frame in frames:
        proc.stdin.write(_packed(frame)[0])
    proc.stdin.close()
    if proc.wait(timeout=600) != 0:
        raise SystemExit(f"ffmpeg failed: see {path.parent / 'video.log'}")


def encode_pyav(frames: list[Any], path: Path, fps: int) -> None:
    import av  # type: ignore[import-not-found]
    import numpy as np

    first = frames[0]
    with av.open(str(path), "w", format="mp4",
                 options={"movflags": "+frag_keyframe+empty_moov+default_base_moof"}) as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = first.width, first.height, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "26", "g": str(fps)}
        for frame in frames:
            data, pix_fmt = _packed(frame)
            array = np.frombuffer(data, np.uint8).reshape(frame.height, frame.width, -1)
            picture = av.VideoFrame.from_ndarray(array, format="bgra" if pix_fmt == "bgr0" else "rgb24")
            for packet in stream.encode(picture):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--fps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--geometry", default="1024x768")
    args = parser.parse_args()
    encoders = {"ffmpeg program (deskctl)": encode_ffmpeg}
    try:
        import av  # type: ignore[import-not-found]  # noqa: F401

        encoders["PyAV in-process"] = encode_pyav
    except ImportError:
        print("PyAV is not installed (pip install av): only ffmpeg is measured", file=sys.stderr)
    frames = capture_frames(args.frames, args.geometry, args.fps)
    minutes = args.frames / args.fps / 60.0
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in encoders}
    with tempfile.TemporaryDirectory(prefix="deskctl-bench-video-") as tmp:
        for index in range(args.rounds):
            order = list(encoders.items())
            for name, encode in order if index % 2 == 0 else reversed(order):
                path = Path(tmp) / f"{index}-{len(results[name])}.mp4"
                cpu, wall = _cpu(), time.perf_counter()
                encode(frames, path, args.fps)
                results[name].append((_cpu() - cpu, time.perf_counter() - wall, path.stat().st_size))
    print(f"{args.frames} frames {args.geometry} at {args.fps} fps ({minutes * 60:.0f} s of video), "
          f"{args.rounds} rounds, load {os.getloadavg()[0]:.1f}; medians")
    print("| encoder | CPU s | CPU s per minute of video | wall s | file KiB |")
    print("|---|---|---|---|---|")
    for name, samples in results.items():
        cpu = statistics.median(s[0] for s in samples)
        wall = statistics.median(s[1] for s in samples)
        size = statistics.median(s[2] for s in samples) / 1024
        print(f"| {name} | {cpu:.2f} | {cpu / minutes:.2f} | {wall:.2f} | {size:.0f} |")


if __name__ == "__main__":
    main()
