"""engine.training.foreign: separately written generators as a training source (`engine.train --foreign`,
`--foreign-from`)."""

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
    assert {foreign.draw(np.random.default_rng([3, i]))[0] for i in range(16)} == set(foreign.SESSION51)


def test_foreign_from_draws_among_the_named_generators_only():
    every = tuple(foreign.GENERATORS)
    assert {"seventh", "eighth"} <= set(every) and set(foreign.SESSION51) < set(every)
    assert {foreign.draw(np.random.default_rng([5, i]), every)[0] for i in range(120)} == set(every)
    assert {foreign.draw(np.random.default_rng([5, i]), ("eighth",))[0] for i in range(8)} == {"eighth"}
    # the default is session 51's draw, replayed: a name among the four sorted, then a 31-bit seed
    assert set(foreign.SESSION51) == {"third", "fourth", "fifth", "sixth"}
    for i in range(8):
        old = np.random.default_rng([6, i])
        names = sorted(("third", "fourth", "fifth", "sixth"))
        assert foreign.draw(np.random.default_rng([6, i])) == (names[int(old.integers(4))], int(old.integers(2 ** 31)))
    with pytest.raises(ValueError, match="unknown scene generator 'thirteenth'"):
        foreign.check_names(("third", "thirteenth"))        # the blind one is not a training source


@pytest.mark.parametrize("names", [foreign.SESSION51, ("seventh", "eighth"), ("ninth", "tenth"), ("eleventh", "twelfth")])
def test_foreign_objects_fit_the_training_labels(names):
    """Every object carries the mask `cell_labels` reads and a box inside the image; vocabulary
    names are the project's."""
    for i in range(12):
        scene = foreign.foreign_scene(np.random.default_rng([4, i]), names)
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
    c = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=SMALL_SCENES, foreign=1.0,
                     foreign_from=("seventh", "eighth"))
    assert c["crops"].shape[0] == c["n_crops"].sum() and not np.array_equal(c["crops"][:1], a["crops"][:1])


def test_foreign_share_is_checked():
    with pytest.raises(SystemExit):
        T.main(["--out", "/nonexistent", "--foreign", "1.5"])


def test_foreign_from_is_checked(capsys):
    with pytest.raises(SystemExit):
        T.main(["--out", "/nonexistent", "--foreign", "0.5", "--foreign-from", "third,thirteenth"])
    assert "unknown scene generator 'thirteenth'" in capsys.readouterr().err
