"""The twelfth scene generator, engine/training/foreign/twelfth.py (blind until session 56): deterministic,
independent per index, exact labels, readable colours, queries consistent with `matches`. CPU only, a few seconds."""

from __future__ import annotations

import numpy as np
import pytest

from engine.training.foreign import twelfth
from engine.training.scenes import Scene
from tests.scene_labels import (assert_colours_read_as_named, assert_exact_labels, assert_queries, assert_reproducible,
                                assert_vocabulary_and_counts, px_box)

SEED, N = 12121, 28

E = twelfth


@pytest.fixture(scope="module")
def batch():
    return E.twelfth_batch(SEED, N)


def test_reproducible(batch):
    assert_reproducible(batch, E.twelfth_batch, E.twelfth_scene, SEED)


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


def test_vocabulary_and_counts(batch):
    assert_vocabulary_and_counts(batch, E)


def test_queries(batch):
    assert_queries(batch)


def test_colours_read_as_named(batch):
    """Every object's colour reads back from the finished image as its name (scene_labels)."""
    assert assert_colours_read_as_named(batch, E.read_colour, E.COLOURS) > 100


def test_shade_families_apart():
    """Different colour names' shades do not come close to each other (Lab distance)."""
    lab, names = E.FAMILY_LAB, E.FAMILY_NAME
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    other = names[:, None] != names[None]
    assert d[other].min() > 15
