"""engine.training.foreign: the third to sixth generators as a training source (`engine.train --foreign`)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.model.config import TINY
from engine.training import foreign
from engine.training import train as T
from engine.training.scenes import COLOURS, SHAPES, Scene

SMALL_SCENES = {"min_objects": 1, "max_objects": 5, "size_range": (96, 200)}


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return T.prompt_table(TINY, tokenizer)


def test_foreign_scene_deterministic_and_every_generator_drawn():
    for i in range(4):
        a = foreign.foreign_scene(np.random.default_rng([3, i]))
        b = foreign.foreign_scene(np.random.default_rng([3, i]))
        assert isinstance(a, Scene)
        assert np.array_equal(np.asarray(a.image), np.asarray(b.image)) and a.objects == b.objects
        name, seed = foreign.draw(np.random.default_rng([3, i]))
        c = foreign.batch_function(name)(seed, 1)[0][0]          # the scene `draw` names
        assert np.array_equal(np.asarray(a.image), np.asarray(c.image)) and a.objects == c.objects
    assert {foreign.draw(np.random.default_rng([3, i]))[0] for i in range(16)} == set(foreign.GENERATORS)


def test_foreign_objects_fit_the_training_labels():
    """Every object carries the mask `cell_labels` reads and a box inside the image; vocabulary
    names are the project's."""
    for i in range(12):
        scene = foreign.foreign_scene(np.random.default_rng([4, i]))
        w, h = scene.image.size
        for o in scene.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
            assert o.mask is not None and o.mask.any()
            assert abs(o.mask.shape[1] - (x1 - x0) * w) <= 1 and abs(o.mask.shape[0] - (y1 - y0) * h) <= 1
            assert isinstance(o.shape, str) and isinstance(o.colour, str)
        colour, shape = T.cell_labels(scene, TINY.vision.grid)
        assert colour.max() <= len(COLOURS) and shape.max() <= len(SHAPES)


def test_make_batch_with_foreign_scenes(prompts):
    own = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=SMALL_SCENES)
    none = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=SMALL_SCENES, foreign=0.0)
    assert all(np.array_equal(own[k], none[k]) for k in own)     # foreign 0: the same stream
    a = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=SMALL_SCENES, foreign=1.0)
    b = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=SMALL_SCENES, foreign=1.0)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["crops"].shape[0] == a["n_crops"].sum() and not np.array_equal(a["crops"][:1], own["crops"][:1])
    assert list(a["img"]) == [0] * 4 + [1] * 4 + [2] * 4


def test_foreign_share_is_checked():
    with pytest.raises(SystemExit):
        T.main(["--out", "/nonexistent", "--foreign", "1.5"])
