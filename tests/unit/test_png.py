"""The PNG code of :mod:`deskctl.providers._png`: the striped screenshot encoder, the banded encoder of the SSH
provider's incremental capture, and the header helpers; every PNG is decoded by Pillow to check it."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from deskctl.errors import ProviderApiError


def test_adler32_combine_matches_zlib() -> None:
    import random
    import zlib

    from deskctl.providers._png import adler32_combine

    rng = random.Random(3)
    for size in (0, 1, 100, 70000, 300001):
        data = rng.randbytes(size)
        cut = rng.randint(0, size)
        a, b = data[:cut], data[cut:]
        assert adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(data)


@pytest.mark.parametrize("stripes", [1, 2, 3, 7, None])
@pytest.mark.parametrize(("width", "height"), [(97, 131), (1024, 64), (5, 1)])
def test_encode_png_round_trips_bgrx(stripes: int | None, width: int, height: int) -> None:
    import random

    from deskctl.providers._png import encode_png

    rng = random.Random(width * height)
    bgrx = bytes(rng.getrandbits(8) if i % 4 != 3 else 0 for i in range(width * height * 4))
    png = encode_png(bgrx, width, height, "BGRX", stripes=stripes)
    image = Image.open(io.BytesIO(png))
    image.load()  # verifies the zlib stream and its Adler-32, and every chunk CRC
    assert image.mode == "RGB" and image.size == (width, height)
    expected = Image.frombuffer("RGB", (width, height), bgrx, "raw", "BGRX", 0, 1)
    assert image.tobytes() == expected.tobytes()


def test_encode_png_of_16_bit_and_grey_captures() -> None:
    from deskctl.providers._png import encode_png

    grey = bytes(range(256)) * 4
    image = Image.open(io.BytesIO(encode_png(grey, 64, 16, "L", stripes=3)))
    assert image.mode == "L" and image.tobytes() == grey
    rgb16 = bytes([0x1F, 0x00] * 8 * 8)  # pure blue in BGR;16 (5-6-5, little-endian)
    image = Image.open(io.BytesIO(encode_png(rgb16, 8, 8, "BGR;16"))).convert("RGB")
    assert image.getpixel((3, 3)) == Image.frombuffer("RGB", (8, 8), rgb16, "raw", "BGR;16", 0, 1).getpixel((3, 3))


def test_banded_png_reencodes_only_the_bands_that_changed() -> None:
    import random

    from deskctl.providers._png import BandedPng

    width, height = 50, 70  # 5 bands of 16 rows, the last one short
    rng = random.Random(5)
    frame = bytearray(rng.getrandbits(8) if i % 4 != 3 else 0 for i in range(width * height * 4))
    encoder = BandedPng(width, height)

    def decoded(png: bytes) -> bytes:
        image = Image.open(io.BytesIO(png))
        image.load()  # verifies the joined zlib stream, its Adler-32 and the chunk CRCs
        assert image.mode == "RGB" and image.size == (width, height)
        return image.tobytes()

    expected = Image.frombuffer("RGB", (width, height), bytes(frame), "raw", "BGRX", 0, 1).tobytes()
    assert decoded(encoder.encode(frame)) == expected
    assert encoder.bands_encoded == 5
    frame[20 * width * 4:21 * width * 4] = bytes(width * 4)  # one black row, in band 1
    encoder.invalidate(20, 21)
    expected = Image.frombuffer("RGB", (width, height), bytes(frame), "raw", "BGRX", 0, 1).tobytes()
    assert decoded(encoder.encode(frame)) == expected
    assert encoder.bands_encoded == 6


def test_png_size_reads_the_header_and_refuses_what_is_not_a_png() -> None:
    from deskctl.providers._png import encode_png, png_size

    assert png_size(encode_png(bytes(7 * 3 * 4), 7, 3), "xvfb") == (7, 3)
    with pytest.raises(ProviderApiError, match="not a PNG") as caught:
        png_size(b"GIF89a" + bytes(30), "daytona")
    assert caught.value.provider == "daytona"


def test_a_process_without_pillow_loaded_encodes_the_same_png_without_loading_it() -> None:
    """A one-shot process (``deskctl screenshot``) has not loaded Pillow: BGRX is converted by strided copies
    instead, to the very same bytes, and Pillow's import is not paid."""
    import random
    import subprocess
    import sys

    from deskctl.providers._png import encode_png

    rng = random.Random(11)
    bgrx = bytes(rng.getrandbits(8) if i % 4 != 3 else 0 for i in range(300 * 200 * 4))
    code = ("import sys; from deskctl.providers._png import encode_png\n"
            "data = sys.stdin.buffer.read()\n"
            "png = encode_png(data, 300, 200, 'BGRX')\n"
            "assert 'PIL' not in sys.modules, 'Pillow was loaded'\n"
            "sys.stdout.buffer.write(png)\n")
    done = subprocess.run([sys.executable, "-c", code], input=bgrx, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == encode_png(bgrx, 300, 200, "BGRX")


def test_a_striped_encode_runs_its_threads_without_threading() -> None:
    """The stripes of one picture are encoded by several threads (:mod:`_thread`'s, each joined by a lock it holds
    while it runs): a one-shot process (``deskctl screenshot``) never imports threading, and the PNG is the same
    however the stripes were shared out."""
    import random
    import subprocess
    import sys

    from deskctl.providers._png import encode_png

    rng = random.Random(12)
    bgrx = bytes(rng.getrandbits(8) if i % 4 != 3 else 0 for i in range(320 * 240 * 4))
    code = ("import sys; from deskctl.providers._png import encode_png\n"
            "data = sys.stdin.buffer.read()\n"
            "pngs = [encode_png(data, 320, 240, 'BGRX', stripes=7) for _ in range(3)]\n"
            "assert 'threading' not in sys.modules, 'threading was imported'\n"
            "assert pngs[0] == pngs[1] == pngs[2]\n"
            "sys.stdout.buffer.write(pngs[0])\n")
    done = subprocess.run([sys.executable, "-P", "-c", code], input=bgrx, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == encode_png(bgrx, 320, 240, "BGRX", stripes=7)
    image = Image.open(io.BytesIO(done.stdout))
    assert image.tobytes() == Image.frombuffer("RGB", (320, 240), bgrx, "raw", "BGRX", 0, 1).tobytes()
