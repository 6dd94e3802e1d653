"""Fast checks of the fifth scene generator (engine/training/foreign/fifth.py)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.training.foreign.fifth import COLOURS, SHAPES, fifth_batch


@pytest.fixture(scope="module")
def batch():
    return fifth_batch(2024, 24)


def _expected(scene, text):
    words = text.split()
    if len(words) == 2:
        colour, shape = words
        named = [o for o in scene.objects if o.shape == shape and o.colour == colour]
    elif words[0] in SHAPES:
        named = [o for o in scene.objects if o.shape == words[0] and o.colour in COLOURS]
    else:
        named = [o for o in scene.objects if o.colour == words[0] and o.shape in SHAPES]
    return sorted(named, key=lambda o: (min(int(o.point[1] * 8), 7), o.point[0]))


def test_deterministic_for_seed():
    a, b = fifth_batch(77, 4), fifth_batch(77, 4)
    c = fifth_batch(78, 4)
    for (sa, qa), (sb, qb) in zip(a, b):
        assert qa == qb and sa.objects == sb.objects and sa.background == sb.background
        assert sa.image.size == sb.image.size and sa.image.tobytes() == sb.image.tobytes()
        for oa, ob in zip(sa.objects, sb.objects):
            assert np.array_equal(oa.mask, ob.mask)
    assert [q.text for _, q in a] != [q.text for _, q in c] or any(
        sa.image.tobytes() != sc.image.tobytes() for (sa, _), (sc, _) in zip(a, c))
    # scene i depends only on (seed, i)
    assert fifth_batch(77, 2)[1][1] == a[1][1]


def test_query_text_and_matches(batch):
    vocab = set(SHAPES) | set(COLOURS)
    for scene, query in batch:
        words = query.text.split()
        assert query.text == query.text.lower() and 1 <= len(words) <= 2 and set(words) <= vocab
        if len(words) == 2:
            assert words[0] in COLOURS and words[1] in SHAPES
        expected = _expected(scene, query.text)
        assert len(query.matches) == len(expected)
        assert all(m is e for m, e in zip(query.matches, expected))


def test_query_rules_on_distractors(batch):
    for scene, query in batch:
        words = query.text.split()
        if len(words) != 1:
            continue
        if words[0] in SHAPES:  # shape-only: no such shape in a non-vocabulary colour
            assert not [o for o in scene.objects if o.shape == words[0] and o.colour not in COLOURS]
        else:  # colour-only: no out-of-vocabulary shape in that colour
            assert not [o for o in scene.objects if o.colour == words[0] and o.shape not in SHAPES]


def test_boxes_masks_points(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        assert scene.image.mode == "RGB" and 200 <= min(W, H) and max(W, H) <= 900
        assert max(W, H) / min(W, H) <= 2.5 and scene.background
        assert len(scene.objects) <= 25
        for o in scene.objects:
            x0, y0, x1, y1 = o.box
            assert 0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0
            px0, py0, px1, py1 = (round(x0 * W), round(y0 * H), round(x1 * W), round(y1 * H))
            assert o.mask is not None and o.mask.dtype == bool
            assert o.mask.shape == (py1 - py0, px1 - px0)
            # box is the tight pixel box of the mask
            assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()
            col, row = int(o.point[0] * W), int(o.point[1] * H)
            assert abs((col + 0.5) / W - o.point[0]) < 1e-9 and abs((row + 0.5) / H - o.point[1]) < 1e-9
            assert o.mask[row - py0, col - px0]
            assert 0.0 < o.size < 0.6 and o.tilt >= 0.0


def test_points_are_visible(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        objs = scene.objects
        for i, o in enumerate(objs):
            col, row = int(o.point[0] * W), int(o.point[1] * H)
            for later in objs[i + 1:]:
                lx0, ly0 = round(later.box[0] * W), round(later.box[1] * H)
                r, c = row - ly0, col - lx0
                if 0 <= r < later.mask.shape[0] and 0 <= c < later.mask.shape[1]:
                    assert not later.mask[r, c]


def test_empty_and_forms_present(batch):
    texts = [q.text for _, q in batch]
    assert any(not q.matches for _, q in batch)
    assert any(q.matches for _, q in batch)
    assert any(len(t.split()) == 2 for t in texts) and any(t in SHAPES for t in texts)
