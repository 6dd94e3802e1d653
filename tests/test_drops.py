"""engine.training.drops: rain drops, bubbles, glints and bokeh on the background only
(`make_scene(drops=True)`, `engine.train --drops`); the labels and the object pixels never change."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from engine.model.config import TINY
from engine.training import drops
from engine.training import train as T
from engine.training.scenes import VARIETY_SCENES, make_scene

SCENE = {**VARIETY_SCENES, "effects": False}


def _canvas(seed: int, h: int = 160, w: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """A noisy background with three objects: (pixels (h, w, 3) uint8, owner (h, w) int32)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(60, 140, size=(h, w, 3)).astype(np.uint8)
    owner = np.full((h, w), -1, np.int32)
    yy, xx = np.mgrid[:h, :w]
    owner[(yy - 50) ** 2 + (xx - 60) ** 2 <= 20 ** 2] = 0           # a disc: the shape drops look most like
    owner[100:130, 120:170] = 1
    owner[20:35, 150:165] = 2
    for i, rgb in enumerate([(200, 30, 30), (30, 30, 200), (240, 240, 240)]):
        pixels[owner == i] = rgb
    return pixels, owner


def _kinds_by_seed(n: int = 60) -> dict[str, int]:
    """The first seed of `_canvas` + add_drops that gives each kind."""
    seen: dict[str, int] = {}
    for seed in range(n):
        pixels, owner = _canvas(seed)
        got = drops.add_drops(np.random.default_rng(seed), pixels, owner)
        if got is not None:
            seen.setdefault(got[1], seed)
    return seen


def test_without_the_flag_nothing_changes():
    for i in range(8):
        a = make_scene(np.random.default_rng([94, i]), **VARIETY_SCENES)
        b = make_scene(np.random.default_rng([94, i]), **{**VARIETY_SCENES, "drops": False})
        assert np.array_equal(np.asarray(a.image), np.asarray(b.image)) and a.objects == b.objects
        assert a.background == b.background and "+" not in a.background


def test_drops_scenes_are_named_and_come_at_their_share():
    named = [make_scene(np.random.default_rng([95, i]), **SCENE, drops=True).background for i in range(120)]
    with_drops = [k for k in named if "+" in k]
    assert all(k.rsplit("+", 1)[1] in drops.KINDS for k in with_drops)
    assert abs(len(with_drops) / len(named) - drops.DROPS_P) < 0.12, len(with_drops)
    assert len({k.rsplit("+", 1)[1] for k in with_drops}) >= 3


@pytest.mark.parametrize("style", [False, True])
def test_drops_change_background_pixels_only_and_keep_the_labels(style):
    """Without photo effects the draw for drops is the scene's last: the same seed with and without the
    flag gives the same objects, and the two images differ only off every object's mask."""
    changed_scenes = 0
    for i in range(30):
        kw = {**SCENE, "style": style}
        plain = make_scene(np.random.default_rng([96, i]), **kw)
        dropped = make_scene(np.random.default_rng([96, i]), **kw, drops=True)
        assert dropped.objects == plain.objects
        a, b = np.asarray(plain.image), np.asarray(dropped.image)
        changed = np.any(a != b, axis=-1)
        if "+" not in dropped.background:
            assert not changed.any()
            continue
        changed_scenes += 1
        w, h = plain.image.size
        on_objects = np.zeros((h, w), bool)
        for o in plain.objects:
            x0, y0 = round(o.box[0] * w), round(o.box[1] * h)
            on_objects[y0:y0 + o.mask.shape[0], x0:x0 + o.mask.shape[1]] |= o.mask
        assert changed.any() and not (changed & on_objects).any()
    assert changed_scenes >= 4


def test_add_drops_keeps_object_pixels_and_a_margin():
    for seed in range(24):
        pixels, owner = _canvas(seed)
        before = pixels.copy()
        got = drops.add_drops(np.random.default_rng(seed), pixels, owner)
        assert got is not None
        out, kind = got
        assert np.array_equal(pixels, before)                     # the input is not written to
        assert out.shape == pixels.shape and out.dtype == np.uint8 and kind in drops.KINDS
        changed = np.any(out != pixels, axis=-1)
        assert changed.sum() >= 10, kind                          # some background changed
        assert np.array_equal(out[owner >= 0], pixels[owner >= 0])
        near = ndimage.binary_dilation(owner >= 0, iterations=drops.MARGIN_PX)   # within MARGIN_PX steps
        assert not (changed & near).any(), kind


def test_every_kind_is_drawn():
    assert set(_kinds_by_seed()) == set(drops.KINDS)


def test_no_room_gives_none():
    pixels = np.zeros((40, 40, 3), np.uint8)
    owner = np.zeros((40, 40), np.int32)                          # one object covers everything
    for seed in range(8):
        assert drops.add_drops(np.random.default_rng(seed), pixels, owner) is None


def test_marks_are_translucent_and_lit():
    """On a flat grey ground: a drop's lens shows the same grey, so rain moves most changed pixels by
    no more than RAIN_LEVEL (never an opaque fill); bokeh by no more than its alpha allows; rain,
    bubbles and glints have a near-white highlight; every scene holds several separate marks."""
    h = w = 256
    grey = np.full((h, w, 3), 110, np.uint8)
    owner = np.full((h, w), -1, np.int32)
    seen = set()
    for seed in range(80):
        got = drops.add_drops(np.random.default_rng(seed), grey, owner)
        assert got is not None
        out, kind = got
        seen.add(kind)
        delta = np.abs(out.astype(int) - 110).max(-1)             # (h, w)
        changed = delta > 0
        if kind == "rain":
            assert np.median(delta[changed]) <= drops.RAIN_LEVEL[1], kind
        if kind == "bokeh":
            assert np.median(delta[changed]) <= drops.BOKEH_ALPHA[1] * (255 - 110), kind
        else:
            assert out.max() >= 200, kind
        assert ndimage.label(changed)[1] >= 2, kind
    assert seen == set(drops.KINDS)


def test_train_flag_sets_the_scene_option(monkeypatch):
    got = {}
    monkeypatch.setattr(T, "train", lambda out, **kw: got.update(kw))
    assert T.main(["--out", "/nonexistent", "--drops"]) == 0
    assert got["scene"] == {**T.RECIPE["scene"], "drops": True}
    got.clear()
    assert T.main(["--out", "/nonexistent", "--variety", "--cells", "--drops"]) == 0
    assert got["scene"] == {**VARIETY_SCENES, "cells": True, "drops": True}
    got.clear()
    assert T.main(["--out", "/nonexistent"]) == 0
    assert "drops" not in (got.get("scene") or {})


def test_training_batches_with_drops(tokenizer):
    prompts = T.prompt_table(TINY, tokenizer)
    kw = {"min_objects": 1, "max_objects": 4, "size_range": (96, 200), "drops": True}
    a = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=kw)
    b = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=kw)
    assert all(np.array_equal(a[k], b[k]) for k in a)
