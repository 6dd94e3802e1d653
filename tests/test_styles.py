"""Training drawing styles (engine/training/styles.py, `make_scene(style=True)`): the pixels change,
the ground truth still describes them."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageFilter

from engine.training import scenes, styles
from engine.training.scenes import OWN_SCENES, make_scene

STYLE_SCENES = {**scenes.VARIETY_SCENES, "effects": False, "style": True}


@pytest.fixture(scope="module")
def styled():
    rng = np.random.default_rng(5)
    return [make_scene(rng, **STYLE_SCENES) for _ in range(40)]


def _rect(obj, w, h):
    x0, y0, x1, y1 = obj.box
    return round(x0 * w), round(y0 * h), round(x1 * w), round(y1 * h)


def test_style_scenes_keep_consistent_ground_truth(styled):
    shaded = 0
    for scene in styled:
        arr = np.asarray(scene.image).astype(np.int16)
        w, h = scene.image.size
        for i, obj in enumerate(scene.objects):
            px0, py0, px1, py1 = _rect(obj, w, h)
            assert 0 <= px0 < px1 <= w and 0 <= py0 < py1 <= h
            assert obj.mask.shape == (py1 - py0, px1 - px0)
            assert obj.mask[0].any() and obj.mask[-1].any() and obj.mask[:, 0].any() and obj.mask[:, -1].any()
            col, row = int(obj.point[0] * w), int(obj.point[1] * h)
            assert abs((col + 0.5) / w - obj.point[0]) < 1e-9 and abs((row + 0.5) / h - obj.point[1]) < 1e-9
            assert obj.mask[row - py0, col - px0]
            for later in scene.objects[i + 1:]:   # the point stays visible
                lx0, ly0, lx1, ly1 = _rect(later, w, h)
                if lx0 <= col < lx1 and ly0 <= row < ly1:
                    assert not later.mask[row - ly0, col - lx0]
            # The point's pixel is the object's colour, give or take shading and the warp's resampling.
            assert np.abs(arr[row, col] - np.array(obj.rgb)).max() <= styles.SHADING_MAX * 255 + 8
            inside = arr[py0:py1, px0:px1][obj.mask]
            shaded += len(np.unique(inside.reshape(-1, 3), axis=0)) > 3
    assert shaded >= 20


def test_paint_object_touches_its_mask_and_only_background_around_it():
    rng = np.random.default_rng(0)
    for trial in range(30):
        pixels = np.full((80, 90, 3), 200, np.uint8)
        owner = np.full((80, 90), -1, np.int32)
        owner[:, :20] = 0                                     # an earlier object on the left
        pixels[:, :20] = (10, 200, 10)
        mask = scenes.render_shape("hexagon", 40, rng.uniform(0, 360))
        rect = (20, 25, 20 + mask.shape[0], 25 + mask.shape[1])
        rgb = np.array([220, 30, 30], np.uint8)
        before = pixels.copy()
        styles.paint_object(rng, pixels, owner, mask, rect, rgb, dark=False)
        assert (pixels[:, :20] == before[:, :20]).all(), "an earlier object was painted over"
        changed = (pixels != before).any(axis=-1)
        inside = np.zeros_like(changed)
        inside[rect[0]:rect[2], rect[1]:rect[3]] = mask
        outside = changed & ~inside
        assert (pixels[outside] <= before[outside]).all(), "outside the mask only a shadow (darker) may fall"
        fill = pixels[inside].astype(int)
        assert (fill[:, 0] > fill[:, 1] + 40).all(), "every object pixel stays red"


def test_affine_warp_moves_masks_with_the_pixels():
    rng = np.random.default_rng(3)
    colours = [(230, 20, 20), (20, 20, 230), (240, 240, 20)]
    for trial in range(10):
        h, w = 140, 180
        pixels = np.full((h, w, 3), 128, np.uint8)
        owner = np.full((h, w), -1, np.int32)
        placed = []
        for i, (y, x) in enumerate(((10, 10), (60, 90), (40, 40))):
            mask = scenes.render_shape(scenes.SHAPES[(trial + i) % 7], 50, rng.uniform(0, 360))
            rect = (y, x, y + mask.shape[0], x + mask.shape[1])
            pixels[rect[0]:rect[2], rect[1]:rect[3]][mask] = colours[i]
            owner[rect[0]:rect[2], rect[1]:rect[3]][mask] = i
            placed.append({"mask": mask, "rect": rect})
        fwd, darken = styles.random_warp(rng)
        out = styles.affine_warp(pixels, owner, placed, fwd, darken)
        assert out is not None
        new_pixels, new_owner, warped = out
        nh, nw = new_owner.shape
        assert new_pixels.shape == (nh, nw, 3) and nh >= h * 0.8
        for i, p in enumerate(warped):
            y0, x0, y1, x1 = p["rect"]
            assert p["mask"].shape == (y1 - y0, x1 - x0) and p["visible"].any()
            assert not (p["visible"] & ~p["mask"]).any()
            # away from edges (all 8 neighbours visible too), where the bilinear resampling blends
            core = np.asarray(Image.fromarray(np.pad(p["visible"], 1).astype(np.uint8) * 255)
                              .filter(ImageFilter.MinFilter(3)))[1:-1, 1:-1] > 0
            got = new_pixels[y0:y1, x0:x1][core].astype(int)
            assert len(got) and np.abs(got - np.array(colours[i])).max() <= 2


def test_style_is_off_unless_asked():
    assert "style" not in OWN_SCENES and "style" not in scenes.VARIETY_SCENES
    a = make_scene(np.random.default_rng(9), **OWN_SCENES)
    b = make_scene(np.random.default_rng(9), **OWN_SCENES, style=False)
    assert a.image.tobytes() == b.image.tobytes()
    c = make_scene(np.random.default_rng(9), **STYLE_SCENES)
    d = make_scene(np.random.default_rng(9), **STYLE_SCENES)
    assert c.image.tobytes() == d.image.tobytes() and c.objects == d.objects
