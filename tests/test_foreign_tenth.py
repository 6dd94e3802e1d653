"""The tenth scene generator (engine/training/foreign/tenth.py; blind until session 53): determinism, ground truth, readability."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from engine.training.foreign import tenth as tenth_module
from engine.training.scenes import COLOURS, SHAPES, matches

SEED = 10101
N = 32


@pytest.fixture(scope="module")
def tenth():
    return tenth_module


@pytest.fixture(scope="module")
def data(tenth):
    return tenth.tenth_batch(SEED, N)


def _px(o, W, H):
    x0, y0, x1, y1 = o.box
    return round(x0 * W), round(y0 * H), round(x1 * W), round(y1 * H)


def test_deterministic_and_seed_dependent(tenth, data):
    for i in (0, 7):
        scene, query = tenth.tenth_pair(SEED, i)
        ref_scene, ref_query = data[i]
        assert np.array_equal(np.asarray(scene.image), np.asarray(ref_scene.image))
        assert scene.objects == ref_scene.objects and scene.background == ref_scene.background
        assert query.text == ref_query.text and query.matches == ref_query.matches
    other, _ = tenth.tenth_pair(SEED + 1, 0)
    first = np.asarray(data[0][0].image)
    assert other.image.size != data[0][0].image.size or not np.array_equal(np.asarray(other.image), first)


def test_queries_follow_matches(data):
    texts = [q.text for _, q in data]
    for scene, query in data:
        assert query.text == query.text.strip().lower()
        words = query.text.split()
        assert (len(words) == 2 and words[0] in COLOURS and words[1] in SHAPES) or \
            (len(words) == 1 and (words[0] in COLOURS or words[0] in SHAPES))
        assert query.matches == matches(query.text, scene.objects)
    empty = sum(1 for _, q in data if not q.matches)
    assert 1 <= empty <= N // 2
    assert len({len(t.split()) for t in texts}) == 2


def test_boxes_masks_points(data):
    for scene, _ in data:
        W, H = scene.image.size
        assert 96 <= min(W, H) and max(W, H) <= 800 and max(W, H) / min(W, H) <= 3.0 + 1e-9
        assert scene.background
        for j, o in enumerate(scene.objects):
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            c0, r0, c1, r1 = _px(o, W, H)
            assert abs(x0 * W - c0) < 1e-6 and abs(y1 * H - r1) < 1e-6
            m = o.mask
            assert m is not None and m.dtype == bool and m.shape == (r1 - r0, c1 - c0)
            assert m[0].any() and m[-1].any() and m[:, 0].any() and m[:, -1].any()
            assert max(r1 - r0, c1 - c0) >= 9
            assert 0 < o.size <= 0.5 and 0 <= o.tilt <= 180
            px, py = int(o.point[0] * W), int(o.point[1] * H)
            assert abs((px + 0.5) / W - o.point[0]) < 1e-9 and abs((py + 0.5) / H - o.point[1]) < 1e-9
            assert m[py - r0, px - c0], "point outside the object's mask"
            for later in scene.objects[j + 1:]:
                lc0, lr0, lc1, lr1 = _px(later, W, H)
                if lc0 <= px < lc1 and lr0 <= py < lr1:
                    assert not later.mask[py - lr0, px - lc0], "point covered by a later object"


def _occupancy(scene):
    W, H = scene.image.size
    own = np.full((H, W), -1, int)
    for j, o in enumerate(scene.objects):
        c0, r0, c1, r1 = _px(o, W, H)
        own[r0:r1, c0:c1][o.mask] = j
    return own


def _grow(m, r):
    p = np.pad(m, r)
    out = np.zeros_like(p)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            out |= np.roll(np.roll(p, dy, 0), dx, 1)
    return out[r:-r, r:-r] if r else out


def _shrink(m):
    p = np.pad(m, 1)
    return p[1:-1, 1:-1] & p[:-2, 1:-1] & p[2:, 1:-1] & p[1:-1, :-2] & p[1:-1, 2:]


def _canonical_ok(colour, rgb):
    """An independent, lenient check that a mean colour reads as its name."""
    r, g, b = rgb
    hi, lo = max(rgb), min(rgb)
    if colour == "white":
        return lo >= 170 and hi - lo <= 45
    if colour == "black":
        return hi <= 85
    if hi - lo < 40:
        return False
    chroma = ("red", "green", "blue", "yellow", "purple", "orange")
    ref = {c: np.array(COLOURS[c], float) / max(COLOURS[c]) for c in chroma}
    v = np.array(rgb, float) / hi
    return min(chroma, key=lambda c: np.linalg.norm(ref[c] - v)) == colour


def test_colours_readable(data):
    checked = 0
    for scene, _ in data:
        img = np.asarray(scene.image).astype(float)
        W, H = scene.image.size
        own = _occupancy(scene)
        for j, o in enumerate(scene.objects):
            c0, r0, c1, r1 = _px(o, W, H)
            vis = own[r0:r1, c0:c1] == j
            assert vis.sum() >= 0.6 * o.mask.sum()
            core = _shrink(vis)           # away from the edge, where blur and JPEG mix colours
            mean = img[r0:r1, c0:c1][core if core.sum() >= 4 else vis].mean(0)
            pad = 6
            fx0, fy0, fx1, fy1 = max(0, c0 - pad), max(0, r0 - pad), min(W, c1 + pad), min(H, r1 + pad)
            full = np.zeros((fy1 - fy0, fx1 - fx0), bool)
            full[r0 - fy0:r1 - fy0, c0 - fx0:c1 - fx0] = o.mask
            ring = _grow(full, 4) & ~_grow(full, 1) & (own[fy0:fy1, fx0:fx1] == -1)
            if ring.sum() >= 6:
                around = img[fy0:fy1, fx0:fx1][ring].mean(0)
                assert np.linalg.norm(mean - around) >= 30, (scene.background, o.name, mean, around)
            if o.known:
                assert _canonical_ok(o.colour, tuple(mean)), (scene.background, o.name, mean)
            checked += 1
    assert checked >= 100


def test_vocabulary_distractors_and_variety(data):
    objs = [o for s, _ in data for o in s.objects]
    assert any(o.known for o in objs)
    assert any(o.shape not in SHAPES for o in objs) and any(o.colour not in COLOURS for o in objs)
    assert len({o.shape for o in objs if o.known}) == len(SHAPES)
    kinds = Counter(s.background for s, _ in data)
    assert len(kinds) >= 5
    assert any(len(s.objects) >= 11 for s, _ in data)
    for o in objs:   # squares are never diamonds: equal sides, any rotation; diamonds are clearly thin
        if o.shape == "diamond":
            h, w = o.mask.shape
            assert o.mask.sum() < 0.9 * h * w
