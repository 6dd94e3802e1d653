"""Shared by the tests of the scene generators in docs/experiments/ (scripts, not package modules): loading one
by path, and an object's pixel box and visible pixels from its normalised box and mask."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parent.parent / "docs" / "experiments"


def load_script(stem: str):
    """docs/experiments/<stem>.py as the module `<stem>_under_test` (registered before it runs: its
    dataclasses look their module up)."""
    name = f"{stem}_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def px_box(obj, W, H):
    """The object's box in whole pixels (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = obj.box
    return round(x0 * W), round(y0 * H), round(x1 * W), round(y1 * H)


def visible(scene, k):
    """Object k's visible pixels (its mask less the masks of later objects), in its box."""
    W, H = scene.size
    o = scene.objects[k]
    x0, y0, x1, y1 = px_box(o, W, H)
    vis = o.mask.copy()
    for later in scene.objects[k + 1:]:
        a0, b0, a1, b1 = px_box(later, W, H)
        ix0, iy0, ix1, iy1 = max(x0, a0), max(y0, b0), min(x1, a1), min(y1, b1)
        if ix0 < ix1 and iy0 < iy1:
            vis[iy0 - y0:iy1 - y0, ix0 - x0:ix1 - x0] &= ~later.mask[iy0 - b0:iy1 - b0, ix0 - a0:ix1 - a0]
    return vis


def assert_exact_labels(scene, k):
    """Object k's box is in whole pixels and tight around its boolean mask; its point is a visible pixel of it;
    at least 70 % of it is visible. Returns its visible pixels (in its box)."""
    W, H = scene.size
    o = scene.objects[k]
    x0, y0, x1, y1 = o.box
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    px0, py0, px1, py1 = px_box(o, W, H)
    assert abs(px0 - x0 * W) < 1e-6 and abs(py1 - y1 * H) < 1e-6      # whole pixels
    assert o.mask.dtype == bool and o.mask.shape == (py1 - py0, px1 - px0)
    # tight: the mask touches every side of its box
    assert o.mask[0].any() and o.mask[-1].any() and o.mask[:, 0].any() and o.mask[:, -1].any()
    # the point is a visible pixel of the object, inside its box
    assert x0 <= o.point[0] <= x1 and y0 <= o.point[1] <= y1
    vis = visible(scene, k)
    cx, cy = int(o.point[0] * W) - px0, int(o.point[1] * H) - py0
    assert o.mask[cy, cx] and vis[cy, cx]
    assert vis.sum() >= 0.7 * o.mask.sum()
    return vis
