"""The twelfth (blind) scene generator, docs/experiments/twelfth_scenes.py: deterministic, independent per
index, exact labels, readable colours, queries consistent with `matches`. CPU only, a few seconds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from engine.training.scenes import Query, Scene, matches, parse_query
from tests.scene_labels import assert_exact_labels, load_script, px_box, visible

SEED, N = 12121, 28

E = load_script("twelfth_scenes")


@pytest.fixture(scope="module")
def batch():
    return E.twelfth_batch(SEED, N)


def test_deterministic(batch):
    for i in (0, 1, 6, 20):
        again, q2 = E.twelfth_scene(SEED, i)[:2]
        scene, q = batch[i]
        assert scene.image.tobytes() == again.image.tobytes()
        assert scene.objects == again.objects and q.text == q2.text and q.matches == q2.matches
        for a, b in zip(scene.objects, again.objects):
            assert np.array_equal(a.mask, b.mask)
    other = E.twelfth_batch(SEED + 1, 3)
    assert any(a.image.tobytes() != b.image.tobytes() for (a, _), (b, _) in zip(batch[:3], other))


def test_independent_of_batch_size(batch):
    short = E.twelfth_batch(SEED, 4)
    for (a, qa), (b, qb) in zip(short, batch[:4]):
        assert a.image.tobytes() == b.image.tobytes() and a.objects == b.objects and qa.text == qb.text


def test_canvas_and_kinds(batch):
    kinds = set()
    for scene, _ in batch:
        assert isinstance(scene, Scene)
        W, H = scene.size
        assert 96 <= min(W, H) and max(W, H) <= 800
        assert scene.image.mode == "RGB" and len(scene.objects) <= 25
        assert scene.background in E.KINDS
        kinds.add(scene.background)
    assert kinds == set(E.KINDS) and 6 <= len(E.KINDS) <= 7


def test_boxes_masks_points(batch):
    for scene, _ in batch:
        W, H = scene.size
        short = min(W, H)
        for k, o in enumerate(scene.objects):
            assert_exact_labels(scene, k)
            px0, py0, px1, py1 = px_box(o, W, H)
            # sizes: at least 10 px, at most 40 % of the short side, and the box fits the diameter
            assert 10 <= o.size * short and o.size <= 0.40 + 1e-9
            assert max(px1 - px0, py1 - py0) <= o.size * short + 1e-6
            assert 0 <= o.tilt <= 180
            if o.shape in ("circle", "ring"):
                assert o.tilt == 0


def test_labels_in_vocabulary(batch):
    shapes = set(E.SHAPES) | set(E.DISTRACTOR_SHAPES)
    colours = set(E.COLOURS) | set(E.DISTRACTOR_COLOURS)
    seen_c, seen_s = set(), set()
    for scene, _ in batch:
        for o in scene.objects:
            assert o.shape in shapes and o.colour in colours
            assert all(0 <= c <= 255 for c in o.rgb)
            seen_c.add(o.colour)
            seen_s.add(o.shape)
    assert set(E.COLOURS) <= seen_c and set(E.SHAPES) <= seen_s
    assert seen_s & set(E.DISTRACTOR_SHAPES) and seen_c & set(E.DISTRACTOR_COLOURS)


def test_counts(batch):
    counts = [len(s.objects) for s, _ in batch]
    assert max(counts) <= 25
    assert sum(1 <= c <= 6 for c in counts) >= N // 4
    assert sum(c >= 11 for c in counts) >= 3
    assert sum(c == 0 for c in counts) <= N // 6


def test_queries(batch):
    forms, empty = set(), 0
    for scene, q in batch:
        assert isinstance(q, Query)
        colour, shape = parse_query(q.text)          # vocabulary words only
        forms.add((colour is not None, shape is not None))
        assert q.matches == matches(q.text, scene.objects)
        assert all(any(m is o for o in scene.objects) for m in q.matches)
        empty += not q.matches
    assert forms == {(True, True), (False, True), (True, False)}
    assert 2 <= empty <= N // 2


def test_colours_read_as_named(batch):
    """The median colour of the inner part of every object's visible pixels reads as its own colour;
    distractor colours do not read as a vocabulary colour."""
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
            if o.colour in E.COLOURS:
                assert E.read_colour(med) == o.colour, (scene.background, o.colour, o.shape, med)
                assert E.read_colour(o.rgb) == o.colour
            else:
                assert E.read_colour(med) not in E.COLOURS, (scene.background, o.colour, o.shape, med)
            checked += 1
    assert checked > 100


def test_shade_families_apart():
    """Different colour names' shades do not come close to each other (Lab distance)."""
    lab, names = E.FAMILY_LAB, E.FAMILY_NAME
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    other = names[:, None] != names[None]
    assert d[other].min() > 15
