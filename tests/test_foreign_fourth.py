"""engine/training/foreign/fourth.py (once a blind evaluation generator, now also a training source): determinism, matches, geometry."""

from __future__ import annotations

import numpy as np
import pytest

from engine.training.foreign.fourth import fourth_batch

SHAPES = {"circle", "square", "triangle", "star", "cross", "hexagon", "diamond"}
COLOURS = {"red", "green", "blue", "yellow", "purple", "orange", "white", "black"}
N = 60


@pytest.fixture(scope="module")
def batch():
    return fourth_batch(11, N)


def _expected(objects, text):
    words = text.split()
    if len(words) == 2:
        col, shape = words
        return [o for o in objects if o.colour == col and o.shape == shape]
    (w,) = words
    if w in SHAPES:
        return [o for o in objects if o.shape == w and o.colour in COLOURS]
    assert w in COLOURS, text
    return [o for o in objects if o.colour == w and o.shape in SHAPES]


def _pixel_box(o, W, H):
    return round(o.box[0] * W), round(o.box[1] * H), round(o.box[2] * W), round(o.box[3] * H)


def test_deterministic_for_a_seed(batch):
    again = fourth_batch(11, 4)
    for (s1, q1), (s2, q2) in zip(batch[:4], again):
        assert q1.text == q2.text and q1.matches == q2.matches
        assert s1.objects == s2.objects and s1.background == s2.background
        assert np.array_equal(np.asarray(s1.image), np.asarray(s2.image))
        assert all(np.array_equal(a.mask, b.mask) for a, b in zip(s1.objects, s2.objects))
    other = fourth_batch(12, 4)
    assert [q.text for _, q in other] != [q.text for _, q in batch[:4]] or \
        any(s1.objects != s2.objects for (s1, _), (s2, _) in zip(batch, other))


def test_matches_follow_the_query_text(batch):
    for scene, query in batch:
        exp = _expected(scene.objects, query.text)
        assert {id(o) for o in query.matches} == {id(o) for o in exp}, query.text
        assert len(query.matches) == len(exp)
        # reading order: bands of 1/8 of the height, then left to right
        keys = [(min(7, int((o.box[1] + o.box[3]) / 2 * 8)), (o.box[0] + o.box[2]) / 2)
                for o in query.matches]
        assert keys == sorted(keys)
        words = query.text.split()
        if len(words) == 1 and words[0] in SHAPES:   # no look-alike in an off-vocabulary colour
            assert not [o for o in scene.objects if o.shape == words[0] and o.colour not in COLOURS]
        if len(words) == 1 and words[0] in COLOURS:  # no off-vocabulary shape in that colour
            assert not [o for o in scene.objects if o.colour == words[0] and o.shape not in SHAPES]


def test_geometry(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        assert scene.image.mode == "RGB"
        assert 160 <= min(W, H) and max(W, H) <= 720 and max(W, H) / min(W, H) <= 2.5 + 1e-6
        assert scene.background
        covered = np.zeros((H, W), bool)
        for o in reversed(scene.objects):                # top first: hidden parts of lower ones
            x0, y0, x1, y1 = _pixel_box(o, W, H)
            assert all(0.0 <= v <= 1.0 for v in o.box)
            assert o.box[0] < o.box[2] and o.box[1] < o.box[3]
            assert np.allclose(np.array(o.box) * [W, H, W, H], [x0, y0, x1, y1], atol=1e-6)
            assert o.mask is not None and o.mask.dtype == bool
            assert o.mask.shape == (y1 - y0, x1 - x0)
            # the box is the mask's exact pixel box
            m = o.mask
            assert m[0].any() and m[-1].any() and m[:, 0].any() and m[:, -1].any()
            col, row = int(o.point[0] * W), int(o.point[1] * H)
            assert o.mask[row - y0, col - x0]
            assert not covered[row, col]                 # the point is on a visible pixel
            hidden = covered[y0:y1, x0:x1][o.mask].mean()
            assert hidden <= 0.25
            covered[y0:y1, x0:x1] |= o.mask
            assert 0.02 <= o.size <= 0.41 and 0 <= o.tilt <= 180


def test_mix_and_empty_queries(batch):
    pairs = batch
    texts = [q.text for _, q in pairs]
    assert all(t == t.lower() for t in texts)
    empty = sum(not q.matches for _, q in pairs)
    assert 4 <= empty <= 25
    forms = [("cs" if " " in t else "s" if t in SHAPES else "c") for t in texts]
    assert {"cs", "s", "c"} <= set(forms)
    assert max(len(s.objects) for s, _ in pairs) >= 11
    assert any(not s.objects for s, _ in pairs) or empty > 0
