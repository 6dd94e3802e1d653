"""The ninth generator (engine/training/foreign/ninth.py; blind until session 52): deterministic, and its ground truth
follows the scene conventions (boxes, masks, points, matches, readable colours)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.training.foreign import ninth
from engine.training.scenes import COLOURS, SHAPES, matches

SEED, N = 7, 36


@pytest.fixture(scope="module")
def batch():
    return ninth.ninth_batch(SEED, N)


def _pixels(scene, o):
    """(row0, col0, mask) of an object's full mask in image pixels."""
    w, h = scene.image.size
    c0, r0 = round(o.box[0] * w), round(o.box[1] * h)
    return r0, c0, o.mask


def _visible(scene, k, pad=0):
    """(row0, col0, map): object k's pixels not covered by later objects, on its box grown by `pad`."""
    w, h = scene.image.size
    r0, c0, m = _pixels(scene, scene.objects[k])
    R0, C0 = max(0, r0 - pad), max(0, c0 - pad)
    R1, C1 = min(h, r0 + m.shape[0] + pad), min(w, c0 + m.shape[1] + pad)
    vis = np.zeros((R1 - R0, C1 - C0), bool)
    vis[r0 - R0:r0 - R0 + m.shape[0], c0 - C0:c0 - C0 + m.shape[1]] = m
    for o in scene.objects[k + 1:]:
        r, c, m2 = _pixels(scene, o)
        a, b = max(r, R0), max(c, C0)
        e, f = min(r + m2.shape[0], R1), min(c + m2.shape[1], C1)
        if a < e and b < f:
            vis[a - R0:e - R0, b - C0:f - C0] &= ~m2[a - r:e - r, b - c:f - c]
    return R0, C0, vis


def test_deterministic_and_seed_dependent(batch):
    a, qa = ninth.ninth_pair(SEED, 3)
    b, qb = batch[3]
    assert a.image.tobytes() == b.image.tobytes() and a.image.size == b.image.size
    assert a.objects == b.objects and qa == qb and a.background == b.background
    c, _ = ninth.ninth_pair(SEED + 1, 3)
    d, _ = batch[4]
    assert c.image.tobytes() != a.image.tobytes() and d.image.tobytes() != a.image.tobytes()


def test_queries_and_matches(batch):
    absent = 0
    forms = Counter()
    for scene, q in batch:
        assert q.text == q.text.strip().lower() and q.matches == matches(q.text, scene.objects)
        words = q.text.split()
        forms[len(words) == 2 and "colour shape" or words[0] in COLOURS and "colour" or "shape"] += 1
        assert all(w in COLOURS or w in SHAPES for w in words)
        absent += not q.matches
    assert 0.05 * N <= absent <= 0.4 * N
    assert set(forms) == {"colour shape", "shape", "colour"}


def test_boxes_masks_points(batch):
    for scene, _ in batch:
        w, h = scene.image.size
        assert 96 <= min(w, h) and max(w, h) <= 800 and max(w, h) / min(w, h) <= 3.01
        for k, o in enumerate(scene.objects):
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            for v, n in ((x0, w), (x1, w), (y0, h), (y1, h)):
                assert abs(v * n - round(v * n)) < 1e-6
            m = o.mask
            assert m.dtype == bool and m.shape == (round((y1 - y0) * h), round((x1 - x0) * w))
            assert m[0].any() and m[-1].any() and m[:, 0].any() and m[:, -1].any()
            col, row = o.point[0] * w - 0.5, o.point[1] * h - 0.5
            assert abs(col - round(col)) < 1e-6 and abs(row - round(row)) < 1e-6
            R0, C0, vis = _visible(scene, k)
            assert vis[round(row) - R0, round(col) - C0], (o.name, "point not on a visible pixel of the object")
            assert vis.sum() >= 0.75 * m.sum()
            assert 0 < o.size <= 0.5 and 0 <= o.tilt <= 180 and len(o.rgb) == 3


def test_same_colour_objects_do_not_overlap(batch):
    for scene, _ in batch:
        w, h = scene.image.size
        by_colour: dict[str, np.ndarray] = {}
        for o in scene.objects:
            r0, c0, m = _pixels(scene, o)
            occ = by_colour.setdefault(o.colour, np.zeros((h, w), bool))
            assert not (occ[r0:r0 + m.shape[0], c0:c0 + m.shape[1]] & m).any()
            occ[r0:r0 + m.shape[0], c0:c0 + m.shape[1]] |= m


def test_vocabulary_and_distractors_and_crowds(batch):
    objs = [o for s, _ in batch for o in s.objects]
    shapes, colours = {o.shape for o in objs}, {o.colour for o in objs}
    assert len(shapes & set(SHAPES)) == len(SHAPES) and len(shapes - set(SHAPES)) >= 5
    assert len(colours & set(COLOURS)) == len(COLOURS) and len(colours - set(COLOURS)) >= 2
    assert any(not o.known for o in objs) and sum(o.known for o in objs) > len(objs) / 2
    counts = [len(s.objects) for s, _ in batch]
    assert max(counts) >= 11 and min(counts) <= 3
    assert len({s.background for s, _ in batch}) >= 6


def test_named_shades_are_readable(batch):
    """Every object's visible colour is far from its surroundings, and a vocabulary-coloured object is
    nearer the canonical shade of its name (scenes.COLOURS) than any other canonical shade."""
    from scipy import ndimage

    canon = {k: np.array(v, float) for k, v in COLOURS.items()}
    for scene, _ in batch:
        img = np.asarray(scene.image, float)
        for k, o in enumerate(scene.objects):
            R0, C0, vis = _visible(scene, k, pad=3)
            crop = img[R0:R0 + vis.shape[0], C0:C0 + vis.shape[1]]
            inner = ndimage.binary_erosion(vis) if vis.sum() > 40 else vis
            med = np.median(crop[inner], axis=0)
            ring = ndimage.binary_dilation(vis, iterations=2) & ~vis
            around = np.median(np.linalg.norm(crop[ring] - med, axis=1))
            assert around > 35, (o.name, scene.background, med, around)
            if o.colour in COLOURS:
                near = min(canon, key=lambda c: np.linalg.norm(canon[c] - med))
                assert near == o.colour, (o.name, med)
