"""The transform arithmetic of deskctl.observe.transform, exhaustively on small grids: every image pixel maps to
the desktop pixel under its centre, inside the region, and back; bad sizes, regions and spaces are usage errors.
(The conformance suite checks the same on real screens with clicks.)"""

from __future__ import annotations

import itertools
import math

import pytest

from deskctl.errors import GeometryOutOfBounds, UsageError
from deskctl.observe.transform import ImageTransform, as_transform, plan


@pytest.mark.parametrize(("region", "size"), [((0, 0, 7, 5), (3, 2)), ((10, 20, 5, 3), (17, 11)),
                                               ((3, 4, 9, 9), (9, 9)), ((0, 0, 1, 1), (4, 4))])
def test_every_image_pixel_maps_to_the_desktop_pixel_under_its_centre(region: tuple[int, int, int, int],
                                                                       size: tuple[int, int]) -> None:
    transform = ImageTransform(region, size)
    rx, ry, rw, rh = region
    for u, v in itertools.product(range(size[0]), range(size[1])):
        x, y = transform.to_desktop(u, v)
        assert x == rx + math.floor((u + 0.5) * rw / size[0])
        assert y == ry + math.floor((v + 0.5) * rh / size[1])
        assert rx <= x < rx + rw and ry <= y < ry + rh
        back = transform.to_image(x, y)
        assert back is not None
        assert transform.to_desktop(*back) == (x, y)


def test_plan_fits_scales_and_zooms() -> None:
    assert plan((1920, 1200), max_size=(1280, 800)).size == (1280, 800)
    assert plan((1920, 1200), max_size="1000x1000").size == (1000, 625)
    assert plan((800, 600), max_size=(1280, 800)).size == (800, 600)  # never enlarged by max_size
    assert plan((800, 600), scale=0.5).size == (400, 300)
    zoom = plan((800, 600), region="100,100,50,40", scale=4)
    assert (zoom.region, zoom.size) == ((100, 100, 50, 40), (200, 160))
    assert ImageTransform.from_dict(zoom.to_dict()) == zoom
    assert as_transform(zoom.to_dict()) == zoom


@pytest.mark.parametrize("kwargs", [{"max_size": "0x10"}, {"max_size": "wide"}, {"scale": 0}, {"scale": 9},
                                    {"scale": "x"}, {"region": "1,2,3"}, {"region": (0, 0, 0, 5)},
                                    {"scale": 8, "region": (0, 0, 2000, 2000)}])
def test_bad_input_is_usage_bad_space(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError) as caught:
        plan((4000, 4000), **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "usage.bad_space" and caught.value.exit_code == 2


def test_a_region_off_the_screen_and_a_point_off_the_image_are_out_of_bounds() -> None:
    with pytest.raises(GeometryOutOfBounds):
        plan((800, 600), region=(790, 0, 20, 20))
    with pytest.raises(GeometryOutOfBounds):
        ImageTransform((0, 0, 10, 10), (5, 5)).to_desktop(5, 0)
    with pytest.raises(UsageError) as caught:
        as_transform(42)
    assert caught.value.code == "usage.bad_space"
