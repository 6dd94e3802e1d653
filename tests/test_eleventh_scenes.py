"""The eleventh (blind) scene generator, docs/experiments/eleventh_scenes.py: deterministic, exact labels,
readable colours, queries consistent with `matches`. CPU only, a few seconds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from engine.training.scenes import Query, Scene, matches, parse_query

PATH = Path(__file__).resolve().parent.parent / "docs" / "experiments" / "eleventh_scenes.py"
SEED, N = 11011, 36


def _load():
    name = "eleventh_scenes_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod          # before exec: the module defines dataclasses
    spec.loader.exec_module(mod)
    return mod


E = _load()


@pytest.fixture(scope="module")
def batch():
    return E.eleventh_batch(SEED, N)


def _px_box(obj, W, H):
    x0, y0, x1, y1 = obj.box
    return round(x0 * W), round(y0 * H), round(x1 * W), round(y1 * H)


def _visible(scene, k):
    """Object k's visible pixels (its mask less the masks of later objects), in its box."""
    W, H = scene.size
    o = scene.objects[k]
    x0, y0, x1, y1 = _px_box(o, W, H)
    vis = o.mask.copy()
    for later in scene.objects[k + 1:]:
        a0, b0, a1, b1 = _px_box(later, W, H)
        ix0, iy0, ix1, iy1 = max(x0, a0), max(y0, b0), min(x1, a1), min(y1, b1)
        if ix0 < ix1 and iy0 < iy1:
            vis[iy0 - y0:iy1 - y0, ix0 - x0:ix1 - x0] &= ~later.mask[iy0 - b0:iy1 - b0, ix0 - a0:ix1 - a0]
    return vis


def test_deterministic(batch):
    first = E.eleventh_batch(SEED, 2)
    for i in (0, 1, 5, 17):
        again, q2 = first[i] if i < 2 else E.eleventh_scene(SEED, i)[:2]
        scene, q = batch[i]
        assert scene.image.tobytes() == again.image.tobytes()
        assert scene.objects == again.objects and q.text == q2.text
        for a, b in zip(scene.objects, again.objects):
            assert np.array_equal(a.mask, b.mask)
    other = E.eleventh_batch(SEED + 1, 3)
    assert any(a.image.tobytes() != b.image.tobytes() for (a, _), (b, _) in zip(batch[:3], other))


def test_canvas_and_kinds(batch):
    kinds = set()
    for scene, _ in batch:
        assert isinstance(scene, Scene)
        W, H = scene.size
        assert 96 <= min(W, H) and max(W, H) <= 800 and max(W, H) <= 3 * min(W, H)
        assert scene.image.mode == "RGB" and len(scene.objects) <= 25
        kinds.add(scene.background)
    assert kinds <= set(E.KINDS) and len(kinds) >= 6


def test_boxes_masks_points(batch):
    for scene, _ in batch:
        W, H = scene.size
        for k, o in enumerate(scene.objects):
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            px0, py0, px1, py1 = _px_box(o, W, H)
            assert abs(px0 - x0 * W) < 1e-6 and abs(py1 - y1 * H) < 1e-6      # whole pixels
            assert o.mask.dtype == bool and o.mask.shape == (py1 - py0, px1 - px0)
            # tight: the mask touches every side of its box
            assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()
            # the point is a visible pixel of the object, inside its box
            assert x0 <= o.point[0] <= x1 and y0 <= o.point[1] <= y1
            vis = _visible(scene, k)
            cx, cy = int(o.point[0] * W) - px0, int(o.point[1] * H) - py0
            assert o.mask[cy, cx] and vis[cy, cx]
            assert vis.sum() >= 0.7 * o.mask.sum()
            short = min(W, H)
            assert 9.5 <= o.size * short and o.size <= 0.42
            assert 0 <= o.tilt <= 180
            assert max(px1 - px0, py1 - py0) <= o.size * short + 2


def test_labels_in_vocabulary(batch):
    shapes = set(E.SHAPES) | set(E.DISTRACTOR_SHAPES)
    colours = set(E.COLOURS) | set(E.DISTRACTOR_COLOURS)
    seen = set()
    for scene, _ in batch:
        for o in scene.objects:
            assert o.shape in shapes and o.colour in colours
            assert all(0 <= c <= 255 for c in o.rgb)
            if o.shape == "circle":
                assert o.tilt == 0
            seen.add(o.colour)
    assert set(E.COLOURS) <= seen


def test_queries(batch):
    forms, empty, crowds = set(), 0, 0
    for scene, q in batch:
        assert isinstance(q, Query)
        colour, shape = parse_query(q.text)          # vocabulary words only
        forms.add((colour is not None, shape is not None))
        assert q.matches == matches(q.text, scene.objects)
        empty += not q.matches
        crowds += len(scene.objects) >= 11
    assert forms == {(True, True), (False, True), (True, False)}
    assert 2 <= empty <= N // 2
    assert crowds >= 3


def test_colours_read_as_named(batch):
    """The median colour of the inner part of every object's visible pixels is nearest its own shade family."""
    checked = 0
    for scene, _ in batch:
        img = np.asarray(scene.image)
        W, H = scene.size
        for k, o in enumerate(scene.objects):
            x0, y0, x1, y1 = _px_box(o, W, H)
            vis = _visible(scene, k)
            dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
            core = vis & (dist >= 0.4 * dist.max())      # the inner part: no outline, shading, edge blur
            med = np.median(img[y0:y1, x0:x1][core if core.sum() >= 8 else vis], 0)
            assert E.read_colour(med) == o.colour, (scene.background, o.colour, o.shape, med)
            assert E.read_colour(o.rgb) == o.colour
            checked += 1
    assert checked > 100


def test_shade_families_apart():
    """Different colour names' shade ranges do not come close to each other (Lab distance)."""
    lab, names = E.FAMILY_LAB, E.FAMILY_NAME
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    other = names[:, None] != names[None]
    assert d[other].min() > 15
