"""docs/experiments/point_misses.py: where a missed point lands (synthetic scenes here)."""

from __future__ import annotations

import numpy as np
from PIL import Image

from engine.training.scenes import Query, Scene, SceneObject
from tests.scene_labels import load_script

P = load_script("point_misses")
W = H = 100


def _square(shape, colour, x0, y0, side, hollow=False):
    """An object whose mask fills its pixel box (or only its one-pixel rim when hollow)."""
    mask = np.ones((side, side), bool)
    if hollow:
        mask[1:-1, 1:-1] = False
    box = (x0 / W, y0 / H, (x0 + side) / W, (y0 + side) / H)
    return SceneObject(shape, colour, box, ((x0 + side / 2) / W, (y0 + side / 2) / H), mask=mask)


def _scene(*objs):
    return Scene(Image.new("RGB", (W, H)), tuple(objs))


def test_each_kind_of_miss_is_told_apart():
    target = _square("star", "red", 10, 10, 10)
    ring = _square("circle", "blue", 60, 60, 20, hollow=True)
    red_cross = _square("cross", "red", 10, 60, 10)
    green_star = _square("star", "green", 60, 10, 10)
    scene = _scene(target, ring, red_cross, green_star)
    q = Query("red star", (target,))
    assert P.classify((0.215, 0.15), scene, q, near=3) == ("near", None)          # 1.5 px right of the mask
    assert P.classify((0.15, 0.65), scene, q, near=3) == ("same colour", red_cross)
    assert P.classify((0.65, 0.15), scene, q, near=3) == ("same shape", green_star)
    assert P.classify((0.605, 0.605), scene, q, near=3) == ("other object", ring)   # the blue ring's rim
    assert P.classify((0.9, 0.3), scene, q, near=3) == ("background", None)
    hollow_target = Query("blue circle", (ring,))
    assert P.classify((0.7, 0.7), scene, hollow_target, near=3) == ("in box", None)   # the ring's empty middle


def test_distance_is_zero_on_the_mask_and_grows_off_it():
    o = _square("star", "red", 10, 10, 10)
    assert P.distance_to_mask((0.15, 0.15), o, (W, H)) < 1
    assert 9 < P.distance_to_mask((0.3, 0.15), o, (W, H)) < 11
