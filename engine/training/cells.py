"""Scenes seen through a grid of cells (`make_scene(cells=True)`, `engine.train --cells`; training only).

LED panels, tile mosaics, cross-stitch and bead boards draw a shape as a grid of separate elements:
every cell shows one colour, and gaps (a dark panel, grout) run between the cells. The tenth
generator's LED and mosaic scenes found that the model trained on solid fills misses most such
shapes (README, "The shipped model since session 53"). `cell_grid` redraws a finished scene that way:

* the canvas is cut into square cells of CELL_PITCH px (never so coarse that the smallest object
  spans fewer than MIN_CELLS_ACROSS cells), at a random phase; each cell takes the colour and the
  owner found at its centre;
* "led": each cell is a disc on a near-black panel; cells on the background are dim unlit LEDs;
  the lit objects bloom a little (a blurred copy of them added); never for a scene with a black
  object, which no panel can light;
* "tiles": each cell is a square tile with grout lines on two sides; every tile's colour is
  jittered a little, the background's tiles keep the background's colours.

An object's mask becomes the drawn pixels of the cells whose centre lies inside its full shape, its
box their tight box, its visible part the drawn pixels of the cells it owns; points are then
recomputed from what is drawn (`scenes.make_scene`). Colours stay inside each name's shades: the
jitter is at most TILE_JITTER levels, and the bloom adds only light of the object's own colour.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image, ImageFilter

from engine.training.styles import drawn_part

CELLS_P = 0.5               # share of the scenes tried (the flag on); about a quarter of those can be drawn
CELL_PITCH = (3, 9)         # px, from the smallest to the largest pitch drawn
MIN_CELLS_ACROSS = 3        # the smallest object's short side spans at least this many cells
KINDS = ("led", "tiles")
LED_RADIUS = (0.4, 0.5)     # a LED's radius, × (the pitch − 1), at least 0.75 px
LED_PANEL = (6, 30)         # the panel's grey level
LED_UNLIT = (28, 70)        # an unlit LED's grey level
LED_BLOOM = (0.15, 0.4)     # weight of the blurred copy of the lit objects
GROUT = (50, 215)           # the grout's grey level
TILE_JITTER = 8             # ± levels per tile and channel


def cell_grid(rng: np.random.Generator, pixels: np.ndarray, owner: np.ndarray,
              placed: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]], str] | None:
    """The scene redrawn through cells: (pixels, owner, placed, kind), or None when the smallest
    object is too small for MIN_CELLS_ACROSS cells of the finest pitch, or some object would lose
    every visible cell (the caller keeps the scene as it was).

    pixels (h, w, 3) uint8; owner (h, w) int, -1 on the background; placed: dicts with "mask" and
    "rect" (y0, x0, y1, x1) as `scenes.make_scene` keeps them. The returned dicts have a new "mask",
    "rect" and "visible" (the object's drawn pixels it owns, cropped to its rect)."""
    if not placed:
        return None
    h, w = owner.shape
    smallest = min(min(p["mask"].shape) for p in placed)
    coarsest = min(CELL_PITCH[1], smallest // MIN_CELLS_ACROSS)
    if coarsest < CELL_PITCH[0]:
        return None
    pitch = int(rng.integers(CELL_PITCH[0], coarsest + 1))
    kind = KINDS[int(rng.integers(len(KINDS)))]
    if kind == "led" and any(p["colour"] == "black" for p in placed):
        kind = "tiles"                      # a panel cannot light a black LED
    oy, ox = (int(v) for v in rng.integers(0, pitch, size=2))
    rows, cols = (np.arange(h) + oy) // pitch, (np.arange(w) + ox) // pitch        # cell of each pixel row / column
    cy = np.clip(rows * pitch - oy + pitch // 2, 0, h - 1)                         # (h,) the row of its cell's centre
    cx = np.clip(cols * pitch - ox + pitch // 2, 0, w - 1)                         # (w,)
    ly, lx = (np.arange(h) + oy) % pitch, (np.arange(w) + ox) % pitch              # position inside the cell
    if kind == "led":
        # a disc inside the cell's first pitch-1 rows and columns: one dark pixel at least between two LEDs
        c, r = (pitch - 2) / 2.0, max(0.75, rng.uniform(*LED_RADIUS) * (pitch - 1))
        inside = (ly[:, None] <= pitch - 2) & (lx[None, :] <= pitch - 2)
        lit = inside & (((ly[:, None] - c) ** 2 + (lx[None, :] - c) ** 2) <= r * r)   # (h, w)
    else:
        g = 1 if pitch < 6 else int(rng.integers(1, 3))
        lit = (ly[:, None] >= g) & (lx[None, :] >= g)
    cell_owner = owner[cy[:, None], cx[None, :]]                                    # (h, w): the owner at each cell's centre
    colour = pixels[cy[:, None], cx[None, :]].astype(np.float32)                     # (h, w, 3)
    n_rows, n_cols = int(rows[-1]) + 1, int(cols[-1]) + 1
    if kind == "led":
        panel = float(rng.integers(*LED_PANEL))
        unlit = rng.uniform(*LED_UNLIT, size=(n_rows, n_cols)).astype(np.float32)[rows[:, None], cols[None, :]]
        colour = np.where((cell_owner >= 0)[..., None], colour, unlit[..., None])
        out = np.where(lit[..., None], colour, panel)
        glow = np.where((lit & (cell_owner >= 0))[..., None], colour, 0.0).astype(np.uint8)
        radius = max(1.0, pitch * rng.uniform(0.5, 1.0))
        blurred = np.asarray(Image.fromarray(glow).filter(ImageFilter.GaussianBlur(radius)), dtype=np.float32)
        out = np.maximum(out, rng.uniform(*LED_BLOOM) * blurred + (1 - lit[..., None]) * panel)
    else:
        grout = float(rng.integers(*GROUT))
        jitter = rng.integers(-TILE_JITTER, TILE_JITTER + 1, size=(n_rows, n_cols, 3)).astype(np.float32)
        out = np.where(lit[..., None], colour + jitter[rows[:, None], cols[None, :]], grout)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    new_owner = np.where(lit, cell_owner, -1).astype(owner.dtype)
    redrawn = []
    for i, p in enumerate(placed):
        y0, x0, y1, x1 = p["rect"]
        full = np.zeros((h, w), dtype=bool)
        full[y0:y1, x0:x1] = p["mask"]
        part = drawn_part(full[cy[:, None], cx[None, :]] & lit, new_owner, i)       # the drawn pixels of its cells
        if part is None:
            return None
        redrawn.append({**p, **part})
    return out, new_owner, redrawn, kind
