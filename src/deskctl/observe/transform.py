"""Screenshots resized or cropped for a model, and the exact way back from a point of such an image to the desktop.

A model that sees a 1280x800 copy of a 1920x1200 screen answers in the copy's pixels; a click sent there unmapped
lands in the wrong place. :func:`take` gives the image together with the :class:`ImageTransform` it applied (a
region of the desktop, shown at a size), and every pointer action takes ``space=`` (that screenshot, its
transform, or the transform's dict) to map the point back.

The mapping is exact in integers: image pixel ``u`` of an image ``iw`` wide that shows a region ``rw`` wide from
``rx`` covers the desktop span ``rx + [u * rw / iw, (u + 1) * rw / iw)``; its centre falls on desktop pixel
``rx + floor((2u + 1) * rw / (2 * iw))``, which is where the point goes. When the image is larger than the region
(a zoom), several image pixels show one desktop pixel and all of them map to it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deskctl.errors import GeometryOutOfBounds, UsageError
from deskctl.providers.base import Screenshot

if TYPE_CHECKING:
    from deskctl.session import Desktop

__all__ = ["ImageTransform", "TransformedScreenshot", "as_transform", "parse_region", "parse_size", "plan", "take"]

_MAX_SIDE = 8192
_MAX_SCALE = 8.0


@dataclass(frozen=True)
class ImageTransform:
    """The desktop ``region`` (x, y, width, height) shown as an image of ``size`` (width, height)."""

    region: tuple[int, int, int, int]
    size: tuple[int, int]

    @property
    def scale(self) -> tuple[float, float]:
        """Image pixels per desktop pixel, across and down."""
        return self.size[0] / self.region[2], self.size[1] / self.region[3]

    def to_desktop(self, x: int, y: int) -> tuple[int, int]:
        """The desktop pixel that image pixel (x, y) shows; ``geometry.out_of_bounds`` outside the image."""
        (rx, ry, rw, rh), (iw, ih) = self.region, self.size
        if not (0 <= x < iw and 0 <= y < ih):
            raise GeometryOutOfBounds(f"point ({x}, {y}) is outside the {iw}x{ih} image",
                                      remedy=f"x must be in 0..{iw - 1} and y in 0..{ih - 1} of that image")
        return rx + (2 * x + 1) * rw // (2 * iw), ry + (2 * y + 1) * rh // (2 * ih)

    def to_image(self, x: int, y: int) -> tuple[int, int] | None:
        """The image pixel that shows the centre of desktop pixel (x, y), or None when the region leaves it out."""
        (rx, ry, rw, rh), (iw, ih) = self.region, self.size
        if not (rx <= x < rx + rw and ry <= y < ry + rh):
            return None
        return (2 * (x - rx) + 1) * iw // (2 * rw), (2 * (y - ry) + 1) * ih // (2 * rh)

    def to_dict(self) -> dict[str, Any]:
        return {"region": list(self.region), "size": list(self.size), "scale": [round(s, 6) for s in self.scale]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ImageTransform:
        """The transform a :meth:`to_dict` gave (``scale`` is ignored: region and size define it)."""
        try:
            region = parse_region(raw["region"])
            size = parse_size(raw["size"], what="size")
        except (KeyError, TypeError) as exc:
            raise UsageError("a coordinate space is a screenshot's transform: {\"region\": [x, y, w, h], "
                             "\"size\": [w, h]}", code="usage.bad_space") from exc
        return cls(region, size)


class TransformedScreenshot(Screenshot, frozen=True):  # a record (deskctl._record), as Screenshot is
    """A screenshot of a region at a size; ``transform`` maps its points back (pass it as ``space=``)."""

    transform: ImageTransform = ImageTransform((0, 0, 1, 1), (1, 1))


def _ints(value: Any, count: int, what: str, example: str) -> tuple[int, ...]:
    parts: Sequence[Any]
    if isinstance(value, str):
        parts = value.replace("x", ",").replace("X", ",").replace("+", ",").split(",")
    elif isinstance(value, Sequence):
        parts = value
    else:
        parts = ()
    try:
        numbers = tuple(int(p.strip()) if isinstance(p, str) else p for p in parts)
    except ValueError:
        numbers = ()
    if len(numbers) != count or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        raise UsageError(f"{what} {str(value)[:40]!r} is not {example}", code="usage.bad_space")
    return numbers


def parse_size(value: Any, *, what: str = "max_size") -> tuple[int, int]:
    """``(w, h)`` from ``(w, h)`` or ``"WxH"``; each side 1..8192."""
    w, h = _ints(value, 2, what, "WIDTHxHEIGHT (two whole numbers)")
    if not (1 <= w <= _MAX_SIDE and 1 <= h <= _MAX_SIDE):
        raise UsageError(f"{what} {w}x{h}: each side must be 1..{_MAX_SIDE} pixels", code="usage.bad_space")
    return w, h


def parse_region(value: Any) -> tuple[int, int, int, int]:
    """``(x, y, w, h)`` from a sequence or ``"X,Y,W,H"`` (w, h at least 1; checked against a screen by :func:`plan`)."""
    x, y, w, h = _ints(value, 4, "region", "X,Y,WIDTH,HEIGHT (four whole numbers)")
    if w < 1 or h < 1:
        raise UsageError(f"region {x},{y},{w},{h} is empty", code="usage.bad_space")
    return x, y, w, h


def plan(screen: tuple[int, int], *, max_size: Any = None, scale: Any = None, region: Any = None) -> ImageTransform:
    """The transform for a screen of size ``screen``: ``region`` (default: all of it), times ``scale`` (default 1),
    then shrunk to fit ``max_size`` keeping the aspect ratio (never enlarged by it)."""
    sw, sh = screen
    box = parse_region(region) if region is not None else (0, 0, sw, sh)
    rx, ry, rw, rh = box
    if rx < 0 or ry < 0 or rx + rw > sw or ry + rh > sh:
        raise GeometryOutOfBounds(f"region {rx},{ry},{rw},{rh} is not inside the {sw}x{sh} screen",
                                  remedy=f"x + width <= {sw} and y + height <= {sh}")
    factor = 1.0
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, int | float | str):
            raise UsageError(f"scale {scale!r} is not a number", code="usage.bad_space")
        try:
            factor = float(scale)
        except ValueError:
            raise UsageError(f"scale {scale!r} is not a number", code="usage.bad_space") from None
        if not 0 < factor <= _MAX_SCALE:
            raise UsageError(f"scale {scale!r} must be more than 0 and at most {_MAX_SCALE:g}",
                             code="usage.bad_space")
    if max_size is not None:
        mw, mh = parse_size(max_size)
        factor = min(factor, mw / rw, mh / rh)
    iw, ih = max(1, round(rw * factor)), max(1, round(rh * factor))
    if max_size is not None:  # rounding never passes the cap
        iw, ih = min(iw, mw), min(ih, mh)
    if iw > _MAX_SIDE or ih > _MAX_SIDE:
        raise UsageError(f"the image would be {iw}x{ih}; at most {_MAX_SIDE} pixels a side", code="usage.bad_space")
    return ImageTransform(box, (iw, ih))


def take(desk: Desktop, *, max_size: Any = None, scale: Any = None, region: Any = None) -> TransformedScreenshot:
    """A screenshot of ``desk`` with the transform of :func:`plan` applied (cropped from a raw frame, resized with
    a Lanczos filter, PNG-encoded once)."""
    from PIL import Image

    transform = plan(desk.size, max_size=max_size, scale=scale, region=region)
    rx, ry, rw, rh = transform.region
    frame = desk.raw_frame()
    image = frame.pil_view().convert("RGB")
    if (rx, ry, rw, rh) != (0, 0, frame.width, frame.height):
        image = image.crop((rx, ry, rx + rw, ry + rh))
    if transform.size != (rw, rh):
        image = image.resize(transform.size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "PNG", compress_level=1)
    return TransformedScreenshot(out.getvalue(), transform.size[0], transform.size[1], transform)


def as_transform(space: Any) -> ImageTransform:
    """The transform named by ``space``: a :class:`TransformedScreenshot`, an :class:`ImageTransform`, or its dict
    (``{"region": [...], "size": [...]}``, also as a JSON string)."""
    if isinstance(space, TransformedScreenshot):
        return space.transform
    if isinstance(space, ImageTransform):
        return space
    if isinstance(space, str):
        import json

        try:
            space = json.loads(space)
        except ValueError as exc:
            raise UsageError("space is not JSON of a screenshot's transform", code="usage.bad_space") from exc
    if isinstance(space, Mapping):
        return ImageTransform.from_dict(space)
    if isinstance(space, Screenshot):  # a plain screenshot's space is the desktop's
        return ImageTransform((0, 0, space.width, space.height), (space.width, space.height))
    raise UsageError(f"space must be a screenshot taken with a transform, not {type(space).__name__}",
                     code="usage.bad_space")
