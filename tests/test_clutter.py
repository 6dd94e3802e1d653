"""Busy training backgrounds (engine/training/clutter.py, `make_scene(clutter=True)`): printed text whose
marks stay smaller than any object, leaves in the background's own shades, and only when asked."""

from __future__ import annotations

import numpy as np

from engine.training import clutter, scenes
from engine.training.scenes import VARIETY_SCENES, make_scene


def _longest_run(on: np.ndarray) -> int:
    """Longest run of True along the last axis of a 2-D bool array."""
    best = 0
    for row in on:
        edges = np.flatnonzero(np.diff(np.concatenate([[0], row.astype(np.int8), [0]])))
        if edges.size:
            best = max(best, int((edges[1::2] - edges[0::2]).max()))
    return best


def test_clutter_backgrounds_only_when_asked_and_old_scenes_unchanged():
    plain = [make_scene(np.random.default_rng(i), **VARIETY_SCENES) for i in range(60)]
    again = [make_scene(np.random.default_rng(i), **VARIETY_SCENES, clutter=False) for i in range(60)]
    assert all(a.background not in clutter.CLUTTER_BACKGROUNDS for a in plain)
    assert all(np.array_equal(np.asarray(a.image), np.asarray(b.image)) for a, b in zip(plain, again))
    busy = [make_scene(np.random.default_rng(i), **VARIETY_SCENES, clutter=True).background for i in range(200)]
    share = sum(k in clutter.CLUTTER_BACKGROUNDS for k in busy) / len(busy)
    assert abs(share - clutter.CLUTTER_P) < 0.1, share
    assert set(busy) >= set(clutter.CLUTTER_BACKGROUNDS)


def test_print_marks_are_two_colours_and_smaller_than_any_object():
    for i in range(30):
        rng = np.random.default_rng(i)
        w, h = int(rng.integers(96, 513)), int(rng.integers(96, 513))
        cap = 0.7 * max(scenes.MIN_OBJECT_PX, scenes.SIZE_FRACTION[0] * min(w, h))
        c1, c2 = scenes.bg_colour(rng, wide=True), scenes.bg_colour(rng, wide=True)
        px = clutter.print_background(rng, w, h, c1, c2, cap)
        assert px.shape == (h, w, 3) and px.dtype == np.uint8
        paper = np.rint(c1 if c1.sum() >= c2.sum() else c2).astype(np.uint8)
        ink = np.any(px != paper, axis=-1)
        assert ink.mean() > 0.02        # there is text
        colours = np.unique(px.reshape(-1, 3), axis=0)
        assert len(colours) == 2
        smallest = max(scenes.MIN_OBJECT_PX, scenes.SIZE_FRACTION[0] * min(w, h))
        assert _longest_run(ink) <= 2 * cap < 2 * smallest
        assert _longest_run(ink.T) <= 2 * cap


def test_leaves_cover_the_ground_in_shades_between_its_two_colours():
    rng = np.random.default_rng(3)
    c1, c2 = np.array([40.0, 90.0, 30.0]), np.array([140.0, 150.0, 60.0])
    px = clutter.leaves_background(rng, 300, 200, c1, c2).astype(np.float64)
    assert px.shape == (200, 300, 3)
    t = ((px - c1) @ (c2 - c1)) / ((c2 - c1) @ (c2 - c1))      # where on the segment c1 → c2
    off = np.linalg.norm(px - (c1 + t[..., None] * (c2 - c1)), axis=-1)
    assert off.max() < 1.5 and t.min() > -0.01 and t.max() < 1.01
    assert (np.abs(t) > 0.1).mean() > 0.5                  # leaves cover most of the ground
    assert clutter.LEAF_ASPECT[1] < scenes.DIAMOND_RATIO[0]  # a leaf is thinner than any diamond


def test_clutter_scenes_keep_their_ground_truth():
    for i in range(40):
        scene = make_scene(np.random.default_rng(i), **VARIETY_SCENES, clutter=True)
        if scene.background not in clutter.CLUTTER_BACKGROUNDS:
            continue
        w, h = scene.image.size
        arr = np.asarray(scene.image.convert("RGB"))
        for obj in scene.objects:
            col, row = int(obj.point[0] * w), int(obj.point[1] * h)
            assert 0 <= col < w and 0 <= row < h
            x0, y0 = round(obj.box[0] * w), round(obj.box[1] * h)
            assert obj.mask[row - y0, col - x0]
        assert arr.shape == (h, w, 3)
