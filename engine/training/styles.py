"""Drawing styles for training scenes (`make_scene(style=True)`, `engine.train --style`).

Flat, hard-edged shapes on a flat canvas are one way to draw coloured shapes; stickers, prints and
photographs draw them with a rim, light falling across them, a shadow under them and a camera that
is not square to the page. This module adds those, on top of `scenes.make_scene`'s placement:

* `paint_object`: one object's pixels, with (each by its STYLE_P chance) a soft drop shadow cast
  on the background only, a linear shading across the fill, and a darker rim of the object's own
  hue inside its mask. The mask, box and point are unchanged.
* `random_warp` and `affine_warp`: the whole canvas under one affine map (a small rotation, an
  unequal scale of the two axes, a shear), the frame grown so that nothing is cut, the corners
  filled with the background's darkened mean. Masks and the owner map follow the same map, so
  boxes and points are recomputed from what is drawn.

Every change is bounded so that a person still names each object's shape and colour: the shading
moves brightness by at most SHADING_MAX, the rim is at most a tenth of the object's short side, and
the warp keeps each axis within WARP_SCALE of the other.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

STYLE_P = {"shadow": 0.25, "shading": 0.4, "rim": 0.3, "warp": 0.3}
SHADING_MAX = 0.18          # brightness factor 1 ± this at the two ends of the shading ramp
RIM_DARKEN = (0.45, 0.7)    # the rim's colour: the fill times this (white objects: a grey rim)
SHADOW_ALPHA = (0.25, 0.5)  # how much a shadow darkens the background under it
WARP_ROTATE = 10.0          # degrees, either way
WARP_SCALE = 0.15           # x and y scales differ by at most this fraction
WARP_SHEAR = 0.15
MIN_RIM_PX = 14             # objects smaller than this (short side, px) get no rim


def paint_object(rng: np.random.Generator, pixels: np.ndarray, owner: np.ndarray, mask: np.ndarray,
                 rect: tuple[int, int, int, int], rgb: np.ndarray, dark: bool) -> None:
    """Draw one object into `pixels` (h, w, 3) uint8 in place. `owner` (h, w) is -1 on background;
    `mask` (y1-y0, x1-x0) bool is the object at `rect` = (y0, x0, y1, x1); `dark`: a black object
    (no darker rim; its shading only lightens a little)."""
    y0, x0, y1, x1 = rect
    if rng.random() < STYLE_P["shadow"]:
        _shadow(rng, pixels, owner, mask, rect)
    fill = np.broadcast_to(rgb.astype(np.float32), mask.shape + (3,))
    if rng.random() < STYLE_P["shading"]:
        t = rng.uniform(0.0, 2.0 * math.pi)
        hh, ww = mask.shape
        proj = (np.arange(ww, dtype=np.float32)[None, :] - ww / 2) * math.cos(t) \
            + (np.arange(hh, dtype=np.float32)[:, None] - hh / 2) * math.sin(t)
        proj /= max(float(np.abs(proj).max()), 1.0)                     # (hh, ww) in [-1, 1]
        amp = rng.uniform(0.06, SHADING_MAX) * (0.5 if dark else 1.0)
        factor = 1.0 + amp * proj if not dark else 1.0 + amp * (proj + 1.0) / 2.0
        fill = fill * factor[..., None]                                  # (hh, ww, 3)
    fill = np.clip(np.rint(fill), 0, 255).astype(np.uint8)
    region = pixels[y0:y1, x0:x1]
    region[mask] = fill[mask]
    if not dark and min(mask.shape) >= MIN_RIM_PX and rng.random() < STYLE_P["rim"]:
        width = int(rng.integers(1, max(2, min(mask.shape) // 10) + 1))
        inner = Image.fromarray(mask.astype(np.uint8) * 255)
        for _ in range(width):   # `width` 3×3 erosions: one (2·width+1)² square erosion, at a fraction of its cost
            inner = inner.filter(ImageFilter.MinFilter(3))
        inner = np.asarray(inner)
        rim = mask & (inner == 0)
        rim_rgb = rgb.astype(np.float32) * rng.uniform(*RIM_DARKEN)
        region[rim] = np.clip(np.rint(rim_rgb), 0, 255).astype(np.uint8)


def _shadow(rng, pixels, owner, mask, rect) -> None:
    """Darken the background (owner == -1) under a blurred copy of `mask`, shifted down-right."""
    h, w = owner.shape
    y0, x0, y1, x1 = rect
    size = max(mask.shape)
    off = rng.uniform(0.04, 0.12) * size
    angle = rng.uniform(0.0, 2.0 * math.pi)
    dy, dx = int(round(off * math.sin(angle))), int(round(off * math.cos(angle)))
    blur = max(1.0, rng.uniform(0.03, 0.1) * size)
    pad = int(math.ceil(2 * blur)) + 1
    canvas = Image.new("L", (mask.shape[1] + 2 * pad, mask.shape[0] + 2 * pad), 0)
    canvas.paste(Image.fromarray(mask.astype(np.uint8) * 255), (pad, pad))
    soft = np.asarray(canvas.filter(ImageFilter.GaussianBlur(blur)), dtype=np.float32) / 255.0
    sy0, sx0 = y0 - pad + dy, x0 - pad + dx                              # soft's top-left in the canvas
    cy0, cx0 = max(sy0, 0), max(sx0, 0)
    cy1, cx1 = min(sy0 + soft.shape[0], h), min(sx0 + soft.shape[1], w)
    if cy0 >= cy1 or cx0 >= cx1:
        return
    a = soft[cy0 - sy0:cy1 - sy0, cx0 - sx0:cx1 - sx0] * rng.uniform(*SHADOW_ALPHA)
    a = a * (owner[cy0:cy1, cx0:cx1] < 0)                                # background only
    part = pixels[cy0:cy1, cx0:cx1].astype(np.float32)
    pixels[cy0:cy1, cx0:cx1] = np.rint(part * (1.0 - a[..., None])).astype(np.uint8)


def random_warp(rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """A random 2×2 affine map (x, y) → (x', y') within WARP_ROTATE, WARP_SCALE and WARP_SHEAR, and
    how dark the uncovered corners are filled (× the background mean)."""
    rot = math.radians(rng.uniform(-WARP_ROTATE, WARP_ROTATE))
    sx = rng.uniform(1.0 - WARP_SCALE / 2, 1.0)
    sy = sx * rng.uniform(1.0 - WARP_SCALE / 2, 1.0 + WARP_SCALE / 2)
    sh = rng.uniform(-WARP_SHEAR, WARP_SHEAR)
    c, s = math.cos(rot), math.sin(rot)
    fwd = np.array([[c, -s], [s, c]]) @ np.array([[1.0, sh], [0.0, 1.0]]) @ np.diag([sx, sy])
    return fwd, float(rng.uniform(0.4, 0.8))


def affine_warp(pixels: np.ndarray, owner: np.ndarray, placed: list[dict[str, Any]], fwd: np.ndarray,
                darken: float) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]] | None:
    """The canvas, the owner map and every placed object under the affine map `fwd` (2×2), the frame
    grown to hold the whole canvas; the uncovered corners take the background's mean × `darken`.

    placed: dicts with "mask" and "rect" (y0, x0, y1, x1), as `scenes.make_scene` keeps them.
    Returns (pixels, owner, placed) with new "mask" (tight, full shape) and "rect", and "visible"
    (the object's owned pixels, cropped to its rect); None when some object would lose every
    visible pixel (the caller keeps the unwarped scene)."""
    h, w = owner.shape
    corners = fwd @ np.array([[0, w, 0, w], [0, 0, h, h]], dtype=np.float64)
    lo = corners.min(axis=1)
    nw, nh = int(math.ceil(corners[0].max() - lo[0])), int(math.ceil(corners[1].max() - lo[1]))
    inv = np.linalg.inv(fwd)
    # PIL maps each output pixel (x', y') to input inv @ ((x', y') + lo).
    off = inv @ lo
    coeffs = (inv[0, 0], inv[0, 1], off[0], inv[1, 0], inv[1, 1], off[1])
    bg = (owner < 0)
    mean = pixels[bg].mean(axis=0) if bg.any() else pixels.reshape(-1, 3).mean(axis=0)
    fill = tuple(int(v) for v in np.rint(mean * darken))
    out = np.asarray(Image.fromarray(pixels).transform((nw, nh), Image.AFFINE, coeffs, Image.BILINEAR, fillcolor=fill))
    own = np.asarray(Image.fromarray((owner + 1).astype(np.uint8)).transform(
        (nw, nh), Image.AFFINE, coeffs, Image.NEAREST, fillcolor=0)).astype(np.int32) - 1
    warped = []
    for i, p in enumerate(placed):
        y0, x0, y1, x1 = p["rect"]
        full = Image.new("L", (w, h), 0)
        full.paste(Image.fromarray(p["mask"].astype(np.uint8) * 255), (x0, y0))
        m = np.asarray(full.transform((nw, nh), Image.AFFINE, coeffs, Image.NEAREST, fillcolor=0)) > 127
        part = drawn_part(m, own, i)
        if part is None:
            return None
        warped.append({**p, **part})
    return out.copy(), own, warped


def drawn_part(m: np.ndarray, owner: np.ndarray, i: int) -> dict[str, Any] | None:
    """Object i's "mask" (its full shape `m`, a canvas-sized bool map, cropped to its tight box),
    "rect" (y0, x0, y1, x1) and "visible" (the pixels of that box `owner` gives to i); None when
    `m` is empty or no pixel of it is visible. Used by every whole-scene redraw (`affine_warp`,
    `cells.cell_grid`)."""
    rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
    if rows.size == 0:
        return None
    r0, r1, c0, c1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    mask = m[r0:r1, c0:c1]
    visible = mask & (owner[r0:r1, c0:c1] == i)
    if not visible.any():
        return None
    return {"mask": mask, "rect": (r0, c0, r1, c1), "visible": visible}
