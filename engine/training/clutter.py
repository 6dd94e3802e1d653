"""Busy training-only backgrounds (`make_scene(clutter=True)`, `engine.train --clutter`): printed text
and a litter of leaves. Both are made of many marks that are not vocabulary objects and must never
be returned: glyphs of one-pixel strokes, no larger than a background mark may be for their body text
(headline glyphs up to twice that), and leaves that are long pointed ovals (aspect
LEAF_ASPECT, thinner than any diamond) in shades between the background's two colours.

The shipped model answered shape queries with boxes on the glyphs of a newspaper page and on the
leaves of a foliage photograph (README, "The fifth generator's failures"); these are the kinds of
surface it had never seen in training.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

CLUTTER_BACKGROUNDS: tuple[str, ...] = ("print", "leaves")
CLUTTER_P = 0.3                 # share of scenes on a clutter background when asked for
LEAF_ASPECT = (0.22, 0.42)      # a leaf's width / length; DIAMOND_RATIO starts at 0.5
LEAF_LENGTH = (0.04, 0.18)      # a leaf's length / the image's short side, log-uniform
GLYPHS_PER_ATLAS = 40
# Stroke endpoints on a 3 × 3 lattice of a glyph cell (x, y in [0, 1]); a glyph joins 1–3 of them.
_LATTICE = np.array([(x, y) for y in (0.0, 0.5, 1.0) for x in (0.0, 0.5, 1.0)])


def _glyph_atlas(rng: np.random.Generator, gh: int, gw: int) -> np.ndarray:
    """(GLYPHS_PER_ATLAS + 1, gh, gw) bool: random letter-like glyphs of 1–3 one-pixel strokes (or an
    arc), drawn inside a cell with a one-pixel margin, so neighbours never touch; the last is the blank."""
    out = np.zeros((GLYPHS_PER_ATLAS + 1, gh, gw), dtype=bool)
    sx, sy = max(gw - 2, 1), max(gh - 2, 1)
    for k in range(GLYPHS_PER_ATLAS):
        img = Image.new("1", (gw, gh), 0)
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(1, 4))):
            if rng.random() < 0.25:   # an arc: the bowl of a b, d, o, c
                a0 = float(rng.uniform(0, 360))
                draw.arc((1, 1 + 0.3 * sy, 1 + sx, 1 + sy), a0, a0 + float(rng.uniform(180, 360)), fill=1)
            else:
                p, q = _LATTICE[rng.choice(9, size=2, replace=False)]
                draw.line((1 + p[0] * sx, 1 + p[1] * sy, 1 + q[0] * sx, 1 + q[1] * sy), fill=1)
        out[k] = np.asarray(img, dtype=bool)
    return out


def _text_block(rng: np.random.Generator, rows: int, cols: int, atlas: np.ndarray) -> np.ndarray:
    """(rows · gh, cols · gw) bool: lines of words (2–9 glyphs, one blank between), ragged line ends."""
    blank = atlas.shape[0] - 1
    idx = rng.integers(0, blank, size=(rows, cols))
    for r in range(rows):
        c = 0
        while c < cols:
            c += int(rng.integers(2, 10))
            if c < cols:
                idx[r, c] = blank
            c += 1
        end = cols - int(rng.integers(0, max(cols // 3, 1))) if rng.random() < 0.3 else cols
        idx[r, end:] = blank
    _, gh, gw = atlas.shape
    return atlas[idx].transpose(0, 2, 1, 3).reshape(rows * gh, cols * gw)


def print_background(rng: np.random.Generator, w: int, h: int, c1: np.ndarray, c2: np.ndarray,
                     cap: float) -> np.ndarray:
    """(h, w, 3) uint8: a printed page, the lighter of c1, c2 the paper, the other the ink: 1–3 columns
    of body text (glyph height 3 px to cap), sometimes a headline band of larger glyphs (up to 2 × cap)."""
    paper, ink = (c1, c2) if c1.sum() >= c2.sum() else (c2, c1)
    on = np.zeros((h, w), dtype=bool)
    top = 2
    if rng.random() < 0.5:   # a headline
        hh = int(max(4, round(rng.uniform(1.2, 2.0) * cap)))
        hw = max(3, int(round(hh * rng.uniform(0.6, 0.8))))
        atlas = _glyph_atlas(rng, hh, hw)
        rows, cols = int(rng.integers(1, 3)), (w - 4) // hw
        if cols > 2 and 2 + rows * (hh + 2) < h:
            block = _text_block(rng, rows, cols, np.pad(atlas, ((0, 0), (0, 2), (0, 0))))
            on[2:2 + block.shape[0], 2:2 + block.shape[1]] = block
            top = 4 + block.shape[0]
    gh = int(max(3, round(rng.uniform(3.0, max(3.0, cap)))))
    gw = max(2, int(round(gh * rng.uniform(0.55, 0.8))))
    lead = int(rng.integers(1, max(2, gh // 2) + 1))
    atlas = np.pad(_glyph_atlas(rng, gh, gw), ((0, 0), (0, lead), (0, 0)))
    n_col = int(rng.integers(1, 4))
    gutter = max(4, 2 * gw)
    col_w = (w - 4 - gutter * (n_col - 1)) // n_col
    rows = (h - top - 2) // (gh + lead)
    if col_w >= 3 * gw and rows > 0:
        for k in range(n_col):
            block = _text_block(rng, rows, col_w // gw, atlas)
            x = 2 + k * (col_w + gutter)
            on[top:top + block.shape[0], x:x + block.shape[1]] = block
    return np.where(on[..., None], np.rint(ink).astype(np.uint8), np.rint(paper).astype(np.uint8))


def _leaf(length: float, aspect: float) -> np.ndarray:
    """(24, 2) outline of a pointed oval of this length and width, centred on 0, long axis along x."""
    t = np.linspace(0.0, math.pi, 13)[:-1]
    top = np.stack([-np.cos(t), np.sin(t)], 1)
    pts = np.concatenate([top, top * [-1.0, -1.0]])
    return pts * [length / 2, aspect * length / 2]


def leaves_background(rng: np.random.Generator, w: int, h: int, c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8: a ground of c1 covered about twice over by leaves at any angle, each one of
    5 shades between c1 and c2, their lengths log-uniform in LEAF_LENGTH of the short side."""
    img = Image.fromarray(np.broadcast_to(np.rint(c1).astype(np.uint8), (h, w, 3)).copy())
    draw = ImageDraw.Draw(img)
    short = min(w, h)
    shades = [tuple(int(v) for v in np.rint(c1 + t * (c2 - c1))) for t in np.linspace(0.0, 1.0, 5)]
    lo, hi = math.log(LEAF_LENGTH[0] * short), math.log(LEAF_LENGTH[1] * short)
    mean_area = math.pi / 4 * math.exp(lo + hi) * float(np.mean(LEAF_ASPECT))   # a rough mean leaf area
    n = int(2.0 * w * h / max(mean_area, 1.0))
    d = rng.random((n, 6))
    for i in range(n):
        length = math.exp(lo + d[i, 0] * (hi - lo))
        aspect = LEAF_ASPECT[0] + d[i, 1] * (LEAF_ASPECT[1] - LEAF_ASPECT[0])
        a = d[i, 2] * math.pi
        ca, sa = math.cos(a), math.sin(a)
        pts = _leaf(length, aspect) @ np.array([[ca, sa], [-sa, ca]]) + [d[i, 3] * w, d[i, 4] * h]
        draw.polygon([tuple(p) for p in pts], fill=shades[int(d[i, 5] * 5)])
    return np.asarray(img).copy()
