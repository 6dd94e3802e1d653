"""engine.training.cells: scenes redrawn as LED panels or tile mosaics (`make_scene(cells=True)`)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from engine.model.config import TINY
from engine.training import cells
from engine.training import train as T
from engine.training.scenes import VARIETY_SCENES, make_scene


def _cell_scenes(monkeypatch, n=40, **kw):
    out = [make_scene(np.random.default_rng([91, i]),
                      **{**VARIETY_SCENES, "effects": False, "cells": True, "cells_share": 1.0, **kw})
           for i in range(n)]
    return [s for s in out if "+" in s.background]


def test_without_the_flag_nothing_changes():
    for i in range(6):
        a = make_scene(np.random.default_rng([92, i]), **VARIETY_SCENES)
        b = make_scene(np.random.default_rng([92, i]), **{**VARIETY_SCENES, "cells": False})
        assert np.array_equal(np.asarray(a.image), np.asarray(b.image)) and a.objects == b.objects
        assert "+" not in a.background


@pytest.mark.parametrize("style", [False, True])
def test_cell_scenes_have_exact_labels(monkeypatch, style):
    found = _cell_scenes(monkeypatch, style=style)
    kinds = {s.background.split("+")[1] for s in found}
    assert len(found) >= 8 and kinds == set(cells.KINDS)
    for s in found:
        w, h = s.image.size
        img = np.asarray(s.image)
        for o in s.objects:
            x0, y0, x1, y1 = (round(o.box[0] * w), round(o.box[1] * h), round(o.box[2] * w), round(o.box[3] * h))
            assert o.mask.shape == (y1 - y0, x1 - x0)
            assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()   # tight
            px, py = int(o.point[0] * w), int(o.point[1] * h)
            assert x0 <= px < x1 and y0 <= py < y1 and o.mask[py - y0, px - x0]    # on a drawn cell
            if o.colour != "black" and not style:     # (styles shade and rim the fill: tests/test_styles.py)
                # the point's pixel is the object's colour (tiles: within the jitter; LEDs may bloom brighter)
                assert np.abs(img[py, px].astype(int) - np.array(o.rgb)).max() <= 60


def test_cells_leave_gaps_inside_objects(monkeypatch):
    """Every large object is drawn as separate cells: its box holds panel or grout pixels between them."""
    seen = 0
    for s in _cell_scenes(monkeypatch):
        for o in s.objects:
            if min(o.mask.shape) >= 20:
                assert ndimage.label(o.mask)[1] >= 4       # separate cells, not one solid fill
                seen += 1
    assert seen >= 3


def test_led_panels_never_hold_black_objects(monkeypatch):
    for s in _cell_scenes(monkeypatch, n=60):
        if s.background.endswith("+led"):
            assert all(o.colour != "black" for o in s.objects)


def test_too_small_objects_keep_the_scene(monkeypatch):
    rng = np.random.default_rng(0)
    pixels = np.zeros((40, 40, 3), np.uint8)
    owner = np.full((40, 40), -1, np.int32)
    mask = np.ones((4, 4), bool)
    owner[10:14, 10:14] = 0
    placed = [{"mask": mask, "rect": (10, 10, 14, 14), "colour": "red"}]
    assert cells.cell_grid(rng, pixels, owner, placed) is None        # 4 px < MIN_CELLS_ACROSS cells of 3 px


def test_training_batches_with_cells(monkeypatch, tokenizer):
    prompts = T.prompt_table(TINY, tokenizer)
    kw = {"min_objects": 1, "max_objects": 4, "size_range": (96, 200), "cells": True, "cells_share": 1.0}
    a = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=kw)
    b = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=4, scene_kw=kw)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(SystemExit):
        T.main(["--out", "/nonexistent", "--cells", "--foreign", "2"])    # the flag parses; the share is checked


def test_cells_share_sets_how_many_scenes_are_redrawn():
    """The same seeds: a share of 0.1 redraws a subset of what the default share redraws, which is a
    subset of what a share of 1 redraws (one draw decides, so the sets nest), and the counts differ."""
    def redrawn(**kw):
        kw = {**VARIETY_SCENES, "effects": False, "cells": True, **kw}
        return {i for i in range(80) if "+" in make_scene(np.random.default_rng([93, i]), **kw).background}
    low, default, every = redrawn(cells_share=0.1), redrawn(), redrawn(cells_share=1.0)
    assert low <= default <= every and len(low) < len(default) < len(every)
    assert default == redrawn(cells_share=cells.CELLS_P)


@pytest.mark.parametrize("argv", [["--cells-share", "0.2"], ["--cells", "--cells-share", "0"],
                                  ["--cells", "--cells-share", "1.5"]])
def test_cells_share_is_refused_without_the_flag_or_out_of_range(argv, capsys):
    with pytest.raises(SystemExit):
        T.main(["--out", "/nonexistent", *argv])
    assert "--cells-share" in capsys.readouterr().err
