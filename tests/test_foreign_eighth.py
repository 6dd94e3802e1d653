"""Fast checks of the eighth scene generator (engine/training/foreign/eighth.py; blind in sessions 51-52,
a training source since session 53)."""

import numpy as np
import pytest

from engine.training.foreign import eighth as es
from engine.training.scenes import matches

SEED = 3


@pytest.fixture(scope="module")
def batch():
    return es.eighth_batch(SEED, 200)


def _objects(batch):
    for scene, _ in batch:
        for o in scene.objects:
            yield scene, o


def _pixels(scene, o):
    W, H = scene.image.size
    x0, y0, x1, y1 = (round(o.box[0] * W), round(o.box[1] * H), round(o.box[2] * W), round(o.box[3] * H))
    return x0, y0, x1, y1


def test_deterministic_prefix_and_seed_dependent(batch):
    again = es.eighth_batch(SEED, 4)
    assert again == batch[:4]
    for (s1, q1), (s2, q2) in zip(again, batch[:4]):
        assert np.array_equal(np.asarray(s1.image), np.asarray(s2.image))
        assert all(np.array_equal(a.mask, b.mask) for a, b in zip(s1.objects, s2.objects))
        assert q1 == q2
    other = es.eighth_batch(SEED + 1, 4)
    assert all(not np.array_equal(np.asarray(a.image), np.asarray(b.image))
               for (a, _), (b, _) in zip(other, batch[:4]) if a.image.size == b.image.size)
    assert [s.image.size for s, _ in other] != [s.image.size for s, _ in batch[:4]]


def test_queries_match_the_parser(batch):
    for scene, q in batch:
        assert q.matches == matches(q.text, scene.objects)   # matches() parses the text, raising on any other form


def test_vocabulary_agrees_with_the_project():
    for c in es.COLOURS:
        for s in es.SHAPES:
            matches(f"{c} {s}", [])
    for word in es.EXTRA_SHAPES + es.EXTRA_COLOURS:
        with pytest.raises(ValueError):
            matches(word, [])


def test_image_sizes(batch):
    for scene, _ in batch:
        W, H = scene.image.size
        assert scene.image.mode == "RGB"
        assert 96 <= W <= 640 and 96 <= H <= 640
        assert max(W, H) / min(W, H) <= 3.0 + 1e-6
        assert scene.background in es.BACKGROUNDS
        assert len(scene.objects) <= 25


def test_boxes_masks_points(batch):
    n = 0
    for scene, o in _objects(batch):
        W, H = scene.image.size
        x0, y0, x1, y1 = o.box
        assert 0.0 <= x0 < x1 <= 1.0 and 0.0 <= y0 < y1 <= 1.0
        px0, py0, px1, py1 = _pixels(scene, o)
        assert abs(px0 - x0 * W) < 1e-6 and abs(py1 - y1 * H) < 1e-6
        assert o.mask is not None and o.mask.dtype == bool
        assert o.mask.shape == (py1 - py0, px1 - px0)
        assert o.mask.any()
        # the box is tight around the mask
        assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()
        px, py = o.point[0] * W - 0.5, o.point[1] * H - 0.5
        assert abs(px - round(px)) < 1e-6 and abs(py - round(py)) < 1e-6
        assert o.mask[round(py) - py0, round(px) - px0]
        assert 0.0 <= o.tilt <= 180.0
        n += 1
    assert n > 500


def test_names_sizes_and_no_overlap(batch):
    for scene, o in _objects(batch):
        # every name is either vocabulary or a known distractor name, never both
        assert o.shape in es.SHAPES + es.EXTRA_SHAPES
        assert o.colour in es.COLOURS + es.EXTRA_COLOURS
        assert not set(es.SHAPES) & set(es.EXTRA_SHAPES) and not set(es.COLOURS) & set(es.EXTRA_COLOURS)
        short = min(scene.image.size)
        assert 6.9 <= o.size * short and o.size <= 0.41
    for scene, _ in batch:
        W, H = scene.image.size
        occ = np.zeros((H, W), bool)
        for o in scene.objects:
            x0, y0, x1, y1 = _pixels(scene, o)
            assert not (occ[y0:y1, x0:x1] & o.mask).any()
            occ[y0:y1, x0:x1] |= o.mask


def test_mix_of_kinds_counts_and_queries(batch):
    objs = [o for s, _ in batch for o in s.objects]
    vocab = [o for o in objs if o.shape in es.SHAPES and o.colour in es.COLOURS]
    assert 0.6 < len(vocab) / len(objs) < 0.95
    assert {o.shape for o in vocab} == set(es.SHAPES)
    assert {o.colour for o in vocab} == set(es.COLOURS)
    assert any(o.shape in es.EXTRA_SHAPES for o in objs) and any(o.colour in es.EXTRA_COLOURS for o in objs)
    counts = [len(s.objects) for s, _ in batch]
    assert any(c == 0 for c in counts) and any(c >= 11 for c in counts)
    assert 0.35 < np.mean([1 <= c <= 6 for c in counts]) < 0.8
    forms = [len(q.text.split()) == 2 for _, q in batch]
    assert 0.3 < np.mean(forms) < 0.6
    empty = np.mean([not q.matches for _, q in batch])
    assert 0.10 <= empty <= 0.35


def test_objects_contrast_with_the_background(batch):
    # mean colour inside each (large enough) mask differs from the ring of pixels just outside its box
    bad = total = 0
    for scene, o in _objects(batch):
        if o.mask.sum() < 40:
            continue
        W, H = scene.image.size
        x0, y0, x1, y1 = _pixels(scene, o)
        if x0 < 3 or y0 < 3 or x1 > W - 3 or y1 > H - 3:
            continue
        a = np.asarray(scene.image, np.float32)
        inside = a[y0:y1, x0:x1][o.mask].mean(0)
        ring = np.concatenate([a[y0 - 3:y0 - 1, x0:x1].reshape(-1, 3),
                               a[y1 + 1:y1 + 3, x0:x1].reshape(-1, 3),
                               a[y0:y1, x0 - 3:x0 - 1].reshape(-1, 3),
                               a[y0:y1, x1 + 1:x1 + 3].reshape(-1, 3)])
        total += 1
        bad += np.abs(inside - np.median(ring, 0)).max() < 25
    assert total > 100 and bad / total < 0.03
