"""Contract checks of the sixth scene generator (engine/training/foreign/sixth.py): photographed surfaces."""
from __future__ import annotations

import numpy as np
import pytest

from engine.training.foreign.sixth import CLUTTER, COLOURS, OFF_COLOURS, SHAPES, sixth_batch

SEED, N = 606, 24


@pytest.fixture(scope="module")
def batch():
    return sixth_batch(SEED, N)


def _pixel_box(o, W, H):
    return round(o.box[0] * W), round(o.box[1] * H), round(o.box[2] * W), round(o.box[3] * H)


def _point_pixel(o, W, H):
    return int(o.point[0] * W), int(o.point[1] * H)


def _by_rule(scene, text):
    words = text.split()
    if len(words) == 2:
        hits = [o for o in scene.objects if (o.colour, o.shape) == (words[0], words[1])]
    elif words[0] in SHAPES:
        hits = [o for o in scene.objects if o.shape == words[0] and o.colour in COLOURS]
    else:
        hits = [o for o in scene.objects if o.colour == words[0] and o.shape in SHAPES]
    return sorted(hits, key=lambda o: (min(int(o.point[1] * 8), 7), o.point[0]))


def test_same_seed_same_scenes_and_index_independence():
    first, again = sixth_batch(31, 3), sixth_batch(31, 3)
    for (s1, q1), (s2, q2) in zip(first, again):
        assert q1 == q2 and s1.objects == s2.objects and s1.background == s2.background
        assert s1.image.tobytes() == s2.image.tobytes()
        assert all(np.array_equal(a.mask, b.mask) for a, b in zip(s1.objects, s2.objects))
    # scene i only depends on (seed, i), not on n
    short = sixth_batch(31, 2)
    assert short[1][1] == first[1][1] and short[1][0].image.tobytes() == first[1][0].image.tobytes()
    other = sixth_batch(32, 3)
    assert any(a[0].image.tobytes() != b[0].image.tobytes() for a, b in zip(first, other))


def test_query_text_and_matches_follow_the_rules(batch):
    for scene, query in batch:
        words = query.text.split()
        assert query.text == query.text.lower() and len(words) in (1, 2)
        if len(words) == 2:
            assert words[0] in COLOURS and words[1] in SHAPES
        else:
            assert words[0] in SHAPES or words[0] in COLOURS
        expected = _by_rule(scene, query.text)
        assert len(query.matches) == len(expected)
        assert all(m is e for m, e in zip(query.matches, expected))


def test_distractors_are_never_ambiguous(batch):
    for scene, query in batch:
        for o in scene.objects:
            assert o.shape in SHAPES or o.shape in CLUTTER
            assert o.colour in COLOURS or o.colour in OFF_COLOURS
        word = query.text
        if word in SHAPES:
            assert all(o.colour in COLOURS for o in scene.objects if o.shape == word)
        elif word in COLOURS:
            assert all(o.shape in SHAPES for o in scene.objects if o.colour == word)


def test_images_boxes_masks_points_agree(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        assert scene.image.mode == "RGB" and scene.background
        assert 200 <= min(W, H) and max(W, H) <= 900 and max(W, H) / min(W, H) <= 2.5
        assert 1 <= len(scene.objects) <= 25
        for o in scene.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            px0, py0, px1, py1 = _pixel_box(o, W, H)
            m = o.mask
            assert m is not None and m.dtype == bool and m.shape == (py1 - py0, px1 - px0)
            assert m[0].any() and m[-1].any() and m[:, 0].any() and m[:, -1].any()
            col, row = _point_pixel(o, W, H)
            assert o.point == pytest.approx(((col + 0.5) / W, (row + 0.5) / H), abs=1e-9)
            assert m[row - py0, col - px0]
            assert 0 < o.size < 0.6 and o.tilt >= 0
            # not tiny: at least ~4 % of the short side across
            assert max(px1 - px0, py1 - py0) >= 0.04 * min(W, H)
            assert len(o.rgb) == 3


def _covered(objs, i, W, H):
    """Bool mask (in object i's box) of its pixels covered by objects drawn later."""
    o = objs[i]
    px0, py0, px1, py1 = _pixel_box(o, W, H)
    cover = np.zeros_like(o.mask)
    for later in objs[i + 1:]:
        lx0, ly0, lx1, ly1 = _pixel_box(later, W, H)
        ix0, iy0, ix1, iy1 = max(px0, lx0), max(py0, ly0), min(px1, lx1), min(py1, ly1)
        if ix0 < ix1 and iy0 < iy1:
            cover[iy0 - py0:iy1 - py0, ix0 - px0:ix1 - px0] |= \
                later.mask[iy0 - ly0:iy1 - ly0, ix0 - lx0:ix1 - lx0]
    return cover & o.mask


def test_points_visible_and_occlusion_light(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        objs = scene.objects
        for i, o in enumerate(objs):
            cover = _covered(objs, i, W, H)
            px0, py0, _, _ = _pixel_box(o, W, H)
            col, row = _point_pixel(o, W, H)
            assert not cover[row - py0, col - px0]
            assert cover.sum() <= 0.25 * o.mask.sum()


def test_matches_sorted_in_reading_order(batch):
    for _, query in batch:
        keys = [(min(int(m.point[1] * 8), 7), m.point[0]) for m in query.matches]
        assert keys == sorted(keys)


def test_empty_nonempty_and_every_form_present(batch):
    texts = [q.text for _, q in batch]
    assert any(not q.matches for _, q in batch) and any(q.matches for _, q in batch)
    assert any(len(t.split()) == 2 for t in texts)
    assert any(t in SHAPES for t in texts)
    assert any(t in COLOURS for t in texts)
    # several kinds of background in one small batch
    assert len({s.background for s, _ in batch}) >= 3
