"""Shared by the tests of the separately written scene generators (engine/training/foreign/, docs/experiments/):
loading a script of docs/experiments/ (not a package module) by path, an object's pixel box and visible pixels
from its normalised box and mask, exact labels, the queries' contract, and each object's colour read back from
the finished image."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
from scipy import ndimage

from engine.training.scenes import Query, matches, parse_query

EXPERIMENTS = Path(__file__).resolve().parent.parent / "docs" / "experiments"


def load_script(stem: str):
    """docs/experiments/<stem>.py as the module `<stem>_under_test` (registered before it runs: its
    dataclasses look their module up)."""
    name = f"{stem}_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def px_box(obj, W, H):
    """The object's box in whole pixels (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = obj.box
    return round(x0 * W), round(y0 * H), round(x1 * W), round(y1 * H)


def visible(scene, k):
    """Object k's visible pixels (its mask less the masks of later objects), in its box."""
    W, H = scene.size
    o = scene.objects[k]
    x0, y0, x1, y1 = px_box(o, W, H)
    vis = o.mask.copy()
    for later in scene.objects[k + 1:]:
        a0, b0, a1, b1 = px_box(later, W, H)
        ix0, iy0, ix1, iy1 = max(x0, a0), max(y0, b0), min(x1, a1), min(y1, b1)
        if ix0 < ix1 and iy0 < iy1:
            vis[iy0 - y0:iy1 - y0, ix0 - x0:ix1 - x0] &= ~later.mask[iy0 - b0:iy1 - b0, ix0 - a0:ix1 - a0]
    return vis


def assert_exact_labels(scene, k):
    """Object k's box is in whole pixels and tight around its boolean mask; its point is a visible pixel of it;
    at least 70 % of it is visible. Returns its visible pixels (in its box)."""
    W, H = scene.size
    o = scene.objects[k]
    x0, y0, x1, y1 = o.box
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    px0, py0, px1, py1 = px_box(o, W, H)
    assert abs(px0 - x0 * W) < 1e-6 and abs(py1 - y1 * H) < 1e-6      # whole pixels
    assert o.mask.dtype == bool and o.mask.shape == (py1 - py0, px1 - px0)
    # tight: the mask touches every side of its box
    assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()
    # the point is a visible pixel of the object, inside its box
    assert x0 <= o.point[0] <= x1 and y0 <= o.point[1] <= y1
    vis = visible(scene, k)
    cx, cy = int(o.point[0] * W) - px0, int(o.point[1] * H) - py0
    assert o.mask[cy, cx] and vis[cy, cx]
    assert vis.sum() >= 0.7 * o.mask.sum()
    return vis


def assert_queries(batch) -> tuple[int, int]:
    """Every query is a `Query` in the vocabulary's words, its matches are `scenes.matches` (objects of its scene),
    all three forms (colour shape, shape, colour) occur, and between 2 and half of them match nothing.
    Returns (absent queries, scenes with 11 or more objects)."""
    forms, empty, crowds = set(), 0, 0
    for scene, q in batch:
        assert isinstance(q, Query)
        colour, shape = parse_query(q.text)          # vocabulary words only
        forms.add((colour is not None, shape is not None))
        assert q.matches == matches(q.text, scene.objects)
        assert all(any(m is o for o in scene.objects) for m in q.matches)
        empty += not q.matches
        crowds += len(scene.objects) >= 11
    assert forms == {(True, True), (False, True), (True, False)}
    assert 2 <= empty <= len(batch) // 2
    return empty, crowds


def assert_colours_read_as_named(batch, read_colour, vocabulary) -> int:
    """The median colour of the inner part of every object's visible pixels (no outline, shading or edge blur)
    reads as its own colour name under the generator's `read_colour`, and so does its `rgb`; an object coloured
    outside the vocabulary reads as no vocabulary colour. Returns how many objects were checked."""
    checked = 0
    for scene, _ in batch:
        img = np.asarray(scene.image)
        W, H = scene.size
        for k, o in enumerate(scene.objects):
            x0, y0, x1, y1 = px_box(o, W, H)
            vis = visible(scene, k)
            dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
            core = vis & (dist >= 0.4 * dist.max())
            med = np.median(img[y0:y1, x0:x1][core if core.sum() >= 8 else vis], 0)
            if o.colour in vocabulary:
                assert read_colour(med) == o.colour, (scene.background, o.colour, o.shape, med)
                assert read_colour(o.rgb) == o.colour
            else:
                assert read_colour(med) not in vocabulary, (scene.background, o.colour, o.shape, med)
            checked += 1
    return checked


def assert_reproducible(batch, batch_fn, scene_fn, seed):
    """The batch is a function of (seed, index): `scene_fn(seed, i)` redraws scene i bit for bit (masks too), a
    shorter batch is a prefix of it, and another seed draws other images."""
    for i in (0, 1, 6, 20):
        again, q2 = scene_fn(seed, i)[:2]
        scene, q = batch[i]
        assert scene.image.tobytes() == again.image.tobytes()
        assert scene.objects == again.objects and q.text == q2.text and q.matches == q2.matches
        for a, b in zip(scene.objects, again.objects):
            assert np.array_equal(a.mask, b.mask)
    other = batch_fn(seed + 1, 3)
    assert any(a.image.tobytes() != b.image.tobytes() for (a, _), (b, _) in zip(batch[:3], other))
    for (a, qa), (b, qb) in zip(batch_fn(seed, 4), batch[:4]):
        assert a.image.tobytes() == b.image.tobytes() and a.objects == b.objects and qa.text == qb.text


def assert_vocabulary_and_counts(batch, gen):
    """Every object is drawn from the generator's vocabulary or its distractors (`gen.SHAPES`, `COLOURS`,
    `DISTRACTOR_SHAPES`, `DISTRACTOR_COLOURS`), all vocabulary words and some distractors occur; scenes hold
    0–25 objects, at least a quarter 1–6, a few 11 or more, at most a sixth none."""
    shapes = set(gen.SHAPES) | set(gen.DISTRACTOR_SHAPES)
    colours = set(gen.COLOURS) | set(gen.DISTRACTOR_COLOURS)
    seen_c, seen_s = set(), set()
    for scene, _ in batch:
        for o in scene.objects:
            assert o.shape in shapes and o.colour in colours
            assert all(0 <= c <= 255 for c in o.rgb)
            seen_c.add(o.colour)
            seen_s.add(o.shape)
    assert set(gen.COLOURS) <= seen_c and set(gen.SHAPES) <= seen_s
    assert seen_s & set(gen.DISTRACTOR_SHAPES) and seen_c & set(gen.DISTRACTOR_COLOURS)
    counts = [len(s.objects) for s, _ in batch]
    n = len(batch)
    assert max(counts) <= 25
    assert sum(1 <= c <= 6 for c in counts) >= n // 4
    assert sum(c >= 11 for c in counts) >= 3
    assert sum(c == 0 for c in counts) <= n // 6
