"""The blind scene generators still outside training, docs/experiments/thirteenth_scenes.py (read in session 57),
fourteenth_scenes.py (read in session 58), fifteenth_scenes.py (blind, session 58) and sixteenth_scenes.py (blind,
session 59): deterministic, independent per index, exact labels, readable colours, objects that stand out, queries
consistent with `matches`. One contract for all four; CPU only, a few seconds each."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy import ndimage

from engine.training.scenes import Scene
from tests.scene_labels import (assert_colours_read_as_named, assert_exact_labels, assert_queries, assert_reproducible,
                                assert_vocabulary_and_counts, load_script, px_box, visible)

N = 28
GENERATORS = (("thirteenth", 13131), ("fourteenth", 14141), ("fifteenth", 15151), ("sixteenth", 16161))


@pytest.fixture(scope="module", params=GENERATORS, ids=[name for name, _ in GENERATORS])
def gen(request):
    name, seed = request.param
    module = load_script(f"{name}_scenes")
    return SimpleNamespace(E=module, seed=seed, batch=getattr(module, f"{name}_batch"),
                           scene=getattr(module, f"{name}_scene"))


@pytest.fixture(scope="module")
def batch(gen):
    return gen.batch(gen.seed, N)


def test_reproducible(gen, batch):
    assert_reproducible(batch, gen.batch, gen.scene, gen.seed)


def test_default_seed(gen):
    assert gen.E.DEFAULT_SEED == gen.seed


def test_canvas_and_kinds(gen, batch):
    kinds = set()
    for scene, _ in batch:
        assert isinstance(scene, Scene)
        W, H = scene.size
        assert 96 <= min(W, H) and max(W, H) <= 800 and max(W, H) <= 2 * min(W, H) + 1
        assert scene.image.mode == "RGB" and len(scene.objects) <= 25
        assert scene.background in gen.E.KINDS
        kinds.add(scene.background)
    assert kinds == set(gen.E.KINDS) and len(gen.E.KINDS) == 7


def test_boxes_masks_points(batch):
    for scene, _ in batch:
        W, H = scene.size
        short = min(W, H)
        for k, o in enumerate(scene.objects):
            vis = assert_exact_labels(scene, k)
            assert vis.sum() >= 0.75 * o.mask.sum()
            px0, py0, px1, py1 = px_box(o, W, H)
            # inside the canvas, not cut by its edge
            assert px0 >= 1 and py0 >= 1 and px1 <= W - 1 and py1 <= H - 1
            # sizes: at least 10 px, at most 40 % of the short side, and the box fits the diameter
            assert 10 <= o.size * short and o.size <= 0.40 + 1e-9
            assert max(px1 - px0, py1 - py0) <= o.size * short + 1e-6
            assert 0 <= o.tilt <= 180
            if o.shape in ("circle", "ring"):
                assert o.tilt == 0
            if o.shape == "square":         # never turned towards the diamond pose
                assert o.tilt <= 30 + 1e-9
            if o.shape == "diamond":        # a rhombus near an axis pose
                assert o.tilt <= 30 + 1e-9 or o.tilt >= 60 - 1e-9


def test_vocabulary_and_counts(gen, batch):
    assert_vocabulary_and_counts(batch, gen.E)


def test_counts_and_kinds_spread(gen):
    """Over many scenes (canvas, kind and count only: cheap): about a quarter crowded, every kind equally often."""
    stats = [gen.E.canvas_and_count(gen.seed, i) for i in range(700)]
    crowded = np.mean([n >= 11 for _, _, n in stats])
    assert 0.18 <= crowded <= 0.32
    kinds = [gen.E.kind_for(gen.seed, i) for i in range(700)]
    assert all(kinds.count(k) == 100 for k in gen.E.KINDS)


def test_queries(batch):
    assert_queries(batch)


def test_colours_read_as_named(gen, batch):
    """Every object's colour reads back from the finished image as its name (scene_labels)."""
    assert assert_colours_read_as_named(batch, gen.E.read_colour, gen.E.COLOURS) > 100


def test_objects_stand_out(gen, batch):
    """Every object's core colour differs (Lab) from the mean of the uncovered background right around it."""
    for scene, _ in batch:
        img = np.asarray(scene.image)
        W, H = scene.size
        covered = np.zeros((H, W), bool)
        for o in scene.objects:
            x0, y0, x1, y1 = px_box(o, W, H)
            covered[y0:y1, x0:x1] |= o.mask
        for k, o in enumerate(scene.objects):
            x0, y0, x1, y1 = px_box(o, W, H)
            vis = visible(scene, k)
            full = np.zeros((H, W), bool)
            full[y0:y1, x0:x1] = o.mask
            ring = ndimage.binary_dilation(full, iterations=3) & ~covered
            if ring.sum() < 8:
                continue
            dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
            core = vis & (dist >= 0.4 * dist.max())
            med = np.median(img[y0:y1, x0:x1][core if core.sum() >= 8 else vis], 0)
            around = img[ring].astype(np.float64).mean(0)
            assert np.linalg.norm(gen.E.to_lab(med) - gen.E.to_lab(around)) >= 12, (scene.background, o.colour, o.shape)


def test_shade_families_apart(gen):
    """Different colour names' shades do not come close to each other (Lab distance)."""
    lab, names = gen.E.FAMILY_LAB, gen.E.FAMILY_NAME
    d = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    other = names[:, None] != names[None]
    assert d[other].min() > 15
    assert set(names) == set(gen.E.COLOURS) | set(gen.E.DISTRACTOR_COLOURS)
