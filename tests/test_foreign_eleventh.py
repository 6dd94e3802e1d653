"""The eleventh scene generator, engine/training/foreign/eleventh.py (blind until session 55): deterministic, exact labels,
readable colours, queries consistent with `matches`. CPU only, a few seconds."""

from __future__ import annotations

import numpy as np
import pytest

from engine.training.foreign import eleventh
from engine.training.scenes import Scene
from tests.scene_labels import (assert_colours_read_as_named, assert_exact_labels, assert_queries, px_box)

SEED, N = 11011, 36

E = eleventh


@pytest.fixture(scope="module")
def batch():
    return E.eleventh_batch(SEED, N)


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
            assert_exact_labels(scene, k)
            px0, py0, px1, py1 = px_box(o, W, H)
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
    _, crowds = assert_queries(batch)
    assert crowds >= 3


def test_colours_read_as_named(batch):
    """Every object's colour, distractors' too, reads back from the finished image as its name (scene_labels)."""
    assert assert_colours_read_as_named(batch, E.read_colour, E.COLOURS + E.DISTRACTOR_COLOURS) > 100


def test_shade_families_apart():
    """Different colour names' shade ranges do not come close to each other (Lab distance)."""
    lab, names = E.FAMILY_LAB, E.FAMILY_NAME
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    other = names[:, None] != names[None]
    assert d[other].min() > 15
