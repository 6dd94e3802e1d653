"""The eleventh scene generator: shapes drawn by hand, and shown on old screens (a BLIND evaluation set).

Moved from docs/experiments/eleventh_scenes.py in session 56: blind until session 55's decision, it is now a training
source too (`engine.train --foreign-from`, engine/training/foreign/__init__.py), so its figures are no
longer blind. Below, as it was written.

Written blind: its author read only the dataclasses `SceneObject`, `Scene`, `Query` and the functions
`matches`, `parse_query`, `reading_order` of engine/training/scenes.py, never the project's other scene
generators, styles or effects. Drawing code, shade ranges, backgrounds and effects are its own.

What it draws (`Scene.background` is the kind):

- crayon     crayon / coloured-pencil drawings on paper (white, cream, manila, kraft, construction paper;
             plain, ruled notebook or graph paper; sometimes the sheet lies on a table): wobbly outlines
             in a darker stroke, hatched (sometimes cross-hatched) waxy fill that lets the paper tooth show.
- marker     felt-tip drawings on paper, a legal pad or a whiteboard: overlapping translucent marker
             bands (darker where they overlap), traced outline in a darker shade or in black.
- chalk      chalk on asphalt, concrete slabs or a chalkboard: grainy streaky fill, denser outline.
- pixelart   a retro video-game screenshot: the scene is built on a low-resolution grid (2-6 px per
             pixel), shapes rasterised on it with a 1-pixel dark outline and dithered shading, Bayer-
             dithered sky bands, brick ground, space or dungeon tiles, a HUD bar with blocky text,
             upscaled with nearest neighbour, sometimes scanlines.
- crt        a photographed CRT/LCD: smooth shapes on a screen (black, DOS blue, teal, vector grid) inside
             a plastic bezel, barrel distortion of the whole screen, bloom, scanlines, an RGB sub-pixel
             triad that aliases into moire, a soft glare.
- stitch     cross-stitch on Aida cloth (X stitches per cell) or fuse beads on a pegboard; shapes are
             rasterised on the cell grid (a cell is in when half of it is covered).
- corkboard  paper cut-outs on cork or felt pinboards, with drop shadows, the odd metal tack (which hides
             part of the shape it pins) and curled sticky-note squares.

Photographed kinds get a mild perspective/rotation of the whole surface (applied to the geometry, so the
labels stay exact), a lighting gradient, vignette, white balance, noise, blur and JPEG.

Labels: vocabulary shapes circle, square (equal diagonals), triangle (equilateral or moderately isosceles),
star (5 points), cross (plus sign), hexagon (regular), diamond (rhombus, short/long diagonal 0.52-0.73);
colours red, green, blue, yellow, purple, orange, white, black (own HSV ranges, SHADES below). Distractors
are named truthfully: shapes pentagon, octagon, ellipse, rectangle, heart, arrow, ring, crescent,
semicircle, trapezoid; colours pink, cyan, brown, gray. 0-25 objects (few empty, ~half 1-6, ~a fifth
7-10, ~a quarter 11-25, often many copies of one kind), 2.5-40 % of the short side, >= 10 px.
Ground truth: box = tight box of the shape's pixels (coverage >= 0.5, whole shape even where covered),
mask = the full shape cropped to the box, point = the visible pixel deepest inside the shape,
tilt folded by the shape's symmetry, size = circumscribed diameter / short side. A scene is redrawn
(next attempt) when any object's visible colour would read as another colour family or fails to stand
out from its surroundings on the final image.

    python -m engine.training.foreign.eleventh [--seed 11011] [--n 300] [--save DIR]
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage

from engine.training.scenes import Query, Scene, SceneObject, matches


# ----------------------------------------------------------------------------- vocabulary

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_SHAPES = ("pentagon", "octagon", "ellipse", "rectangle", "heart", "arrow", "ring", "crescent",
                     "semicircle", "trapezoid")
DISTRACTOR_COLOURS = ("pink", "cyan", "brown", "gray")
KINDS = ("crayon", "marker", "chalk", "pixelart", "crt", "stitch", "corkboard")
_KIND_P = (0.16, 0.14, 0.14, 0.15, 0.14, 0.13, 0.14)

# name -> ((hue lo, hue hi) degrees, (sat lo, hi), (value lo, hi)); achromatic names ignore the hue
SHADES: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    "red": ((-7, 5), (0.74, 0.95), (0.70, 0.92)),
    "orange": ((22, 33), (0.86, 1.0), (0.93, 1.0)),
    "yellow": ((49, 58), (0.80, 1.0), (0.92, 1.0)),
    "green": ((102, 138), (0.62, 0.95), (0.48, 0.78)),
    "blue": ((208, 228), (0.72, 0.95), (0.64, 0.92)),
    "purple": ((270, 285), (0.52, 0.80), (0.52, 0.76)),
    "white": ((0, 0), (0.0, 0.04), (0.95, 1.0)),
    "black": ((0, 0), (0.0, 0.20), (0.06, 0.15)),
    "pink": ((326, 344), (0.28, 0.44), (0.96, 1.0)),
    "cyan": ((181, 189), (0.68, 1.0), (0.86, 1.0)),
    "brown": ((19, 31), (0.56, 0.78), (0.33, 0.47)),
    "gray": ((0, 0), (0.0, 0.04), (0.49, 0.59)),
}
_ACHROMATIC = ("white", "black", "gray")

# rotational symmetry period in degrees (0: any rotation is the same); unlisted shapes: 360
SYMMETRY = {"circle": 0, "ring": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60,
            "diamond": 180, "pentagon": 72, "octagon": 45, "ellipse": 180, "rectangle": 180}

_NEAR_SHAPE = {"square": ("diamond",), "diamond": ("square", "triangle"), "circle": ("hexagon",),
               "hexagon": ("circle",), "star": ("cross",), "cross": ("star",), "triangle": ("diamond",),
               "pentagon": ("hexagon",), "octagon": ("circle", "hexagon"), "ellipse": ("circle",),
               "rectangle": ("square",), "ring": ("circle",), "trapezoid": ("triangle",),
               "heart": ("triangle",), "arrow": ("triangle",), "crescent": ("circle",), "semicircle": ("circle",)}
_NEAR_COLOUR = {"red": ("orange", "purple"), "orange": ("red", "yellow"), "yellow": ("orange",),
                "green": ("blue",), "blue": ("purple", "green"), "purple": ("blue", "red"), "white": ("yellow",),
                "black": ("blue",), "pink": ("red", "purple"), "cyan": ("blue", "green"), "brown": ("orange",),
                "gray": ("white", "black")}


def fold_tilt(shape: str, degrees: float) -> float:
    """Degrees away from the upright pose, folded by the shape's rotational symmetry."""
    period = SYMMETRY.get(shape, 360)
    if period == 0:
        return 0.0
    a = degrees % period
    return float(round(min(a, period - a), 3))


# ----------------------------------------------------------------------------- colour

def hsv_to_rgb(h, s, v) -> np.ndarray:
    h = (np.asarray(h, np.float64) % 360.0) / 60.0
    s = np.asarray(s, np.float64)
    v = np.asarray(v, np.float64)
    c = v * s
    x = c * (1 - np.abs(h % 2 - 1))
    z = np.zeros_like(c)
    i = np.floor(h).astype(int) % 6
    r = np.choose(i, [c, x, z, z, x, c])
    g = np.choose(i, [x, c, c, x, z, z])
    b = np.choose(i, [z, z, x, c, c, x])
    m = v - c
    return np.stack([r + m, g + m, b + m], -1)


def to_lab(rgb) -> np.ndarray:
    """sRGB in [0, 1] (any leading shape) -> CIE Lab (D65)."""
    c = np.asarray(rgb, np.float64)
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = c @ m.T / np.array([0.9505, 1.0, 1.089])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def delta_e(a, b) -> float:
    return float(np.linalg.norm(to_lab(a) - to_lab(b)))


def sample_shade(rng: np.random.Generator, name: str) -> np.ndarray:
    (h0, h1), (s0, s1), (v0, v1) = SHADES[name]
    return hsv_to_rgb(rng.uniform(h0, h1), rng.uniform(s0, s1), rng.uniform(v0, v1)).astype(np.float32)


def _family_samples():
    labs, names = [], []
    for name, ((h0, h1), (s0, s1), (v0, v1)) in SHADES.items():
        hs = [h0] if name in _ACHROMATIC else np.linspace(h0, h1, 5)
        hh, ss, vv = np.meshgrid(hs, np.linspace(s0, s1, 4), np.linspace(v0, v1, 4), indexing="ij")
        lab = to_lab(hsv_to_rgb(hh.ravel(), ss.ravel(), vv.ravel()))
        labs.append(lab)
        names += [name] * len(lab)
    return np.concatenate(labs), np.array(names)


FAMILY_LAB, FAMILY_NAME = _family_samples()


def read_colour(rgb) -> str:
    """The colour family whose shade range holds the sample nearest (in Lab) to `rgb` (0-255 or 0-1)."""
    c = np.asarray(rgb, np.float64)
    if c.max() > 1.0:
        c = c / 255.0
    d = np.linalg.norm(FAMILY_LAB - to_lab(c), axis=1)
    return str(FAMILY_NAME[int(np.argmin(d))])


# ----------------------------------------------------------------------------- geometry

def _ngon(n: int, offset_deg: float = -90.0) -> np.ndarray:
    a = np.deg2rad(offset_deg + 360.0 * np.arange(n) / n)
    return np.stack([np.cos(a), np.sin(a)], 1)


def unit_outline(shape: str, rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Outer polygons and holes of `shape`, upright (y down), circumscribed radius 1 about the origin."""
    holes: list[np.ndarray] = []
    if shape == "circle":
        p = _ngon(96)
    elif shape == "square":
        p = _ngon(4, -45)
    elif shape == "triangle":
        apex = 60.0 if rng.random() < 0.5 else rng.uniform(48, 72)   # inscribed: base vertices at 90 +- apex
        a = np.deg2rad([-90.0, 90.0 - apex, 90.0 + apex])
        p = np.stack([np.cos(a), np.sin(a)], 1)
    elif shape == "star":
        inner = rng.uniform(0.38, 0.5)
        p = _ngon(10) * np.where(np.arange(10) % 2 == 0, 1.0, inner)[:, None]
    elif shape == "cross":
        a = rng.uniform(0.2, 0.32)
        p = np.array([(a, -1), (a, -a), (1, -a), (1, a), (a, a), (a, 1), (-a, 1), (-a, a), (-1, a), (-1, -a),
                      (-a, -a), (-a, -1)], float)
    elif shape == "hexagon":
        p = _ngon(6, 0)
    elif shape == "diamond":
        q = rng.uniform(0.52, 0.73)
        p = np.array([(0, -1), (q, 0), (0, 1), (-q, 0)], float)
    elif shape == "pentagon":
        p = _ngon(5)
    elif shape == "octagon":
        p = _ngon(8, -67.5)
    elif shape == "ellipse":
        asp = rng.uniform(0.45, 0.68)
        p = _ngon(96) * np.array([1.0, asp])
    elif shape == "rectangle":
        asp = rng.uniform(0.35, 0.6)
        p = np.array([(-1, -asp), (1, -asp), (1, asp), (-1, asp)], float)
    elif shape == "heart":
        t = np.linspace(0, 2 * np.pi, 90, endpoint=False)
        p = np.stack([16 * np.sin(t) ** 3, -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))], 1)
    elif shape == "arrow":
        sw, hw, hl = rng.uniform(0.15, 0.22), rng.uniform(0.45, 0.55), rng.uniform(0.45, 0.6)
        p = np.array([(-1, -sw), (1 - hl, -sw), (1 - hl, -hw), (1, 0), (1 - hl, hw), (1 - hl, sw), (-1, sw)], float)
    elif shape == "ring":
        p = _ngon(96)
        holes = [_ngon(96) * rng.uniform(0.5, 0.64)]
    elif shape == "crescent":
        p = _ngon(96)
        holes = [_ngon(96) * rng.uniform(0.8, 0.9) + np.array([rng.uniform(0.32, 0.45), 0.0])]
    elif shape == "semicircle":
        a = np.deg2rad(np.linspace(180, 360, 49))
        p = np.stack([np.cos(a), np.sin(a)], 1)
    elif shape == "trapezoid":
        tw, hh = rng.uniform(0.45, 0.65), rng.uniform(0.45, 0.6)
        p = np.array([(-tw, -hh), (tw, -hh), (1, hh), (-1, hh)], float)
    else:
        raise ValueError(shape)
    if shape in ("heart", "arrow", "trapezoid"):
        p = p - (p.min(0) + p.max(0)) / 2
    scale = np.sqrt((p ** 2).sum(1)).max()
    return [p / scale], [h / scale for h in holes]


def _densify(p: np.ndarray, step: float) -> np.ndarray:
    q = np.roll(p, -1, 0)
    n = np.maximum(1, np.ceil(np.linalg.norm(q - p, axis=1) / step).astype(int))
    t = np.concatenate([np.arange(k) / k for k in n])
    i = np.repeat(np.arange(len(p)), n)
    return p[i] + (q[i] - p[i]) * t[:, None]


def _wobble(p: np.ndarray, centre: np.ndarray, amp: float, rng: np.random.Generator) -> np.ndarray:
    """Hand-drawn wobble: a smooth periodic radial displacement of up to `amp` px."""
    seg = np.linalg.norm(np.roll(p, -1, 0) - p, axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)[:-1]]) / max(seg.sum(), 1e-6)
    d = np.zeros(len(p))
    for f in rng.choice(np.arange(2, 9), 3, replace=False):
        d += rng.uniform(0.3, 1.0) * np.sin(2 * np.pi * f * s + rng.uniform(0, 2 * np.pi))
    d *= amp / 2.3
    v = p - centre
    r = np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-6)
    return p + v / r * d[:, None]


def raster(outer: list[np.ndarray], holes: list[np.ndarray]) -> tuple[int, int, np.ndarray]:
    """Anti-aliased coverage of polygons (pixel (i, j) covers [i, i+1) x [j, j+1)): (x0, y0, coverage)."""
    allp = np.concatenate(outer)
    x0, y0 = int(math.floor(allp[:, 0].min())) - 1, int(math.floor(allp[:, 1].min())) - 1
    x1, y1 = int(math.ceil(allp[:, 0].max())) + 1, int(math.ceil(allp[:, 1].max())) + 1
    w, h = x1 - x0, y1 - y0
    s = 4 if max(w, h) < 64 else 3 if max(w, h) < 160 else 2
    im = Image.new("L", (w * s, h * s), 0)
    d = ImageDraw.Draw(im)
    off = np.array([x0, y0], float)
    for poly, fill in [(q, 255) for q in outer] + [(q, 0) for q in holes]:
        d.polygon(((poly - off) * s - 0.5).ravel().tolist(), fill=fill)
    cov = np.asarray(im, np.float32).reshape(h, s, w, s).mean((1, 3)) / 255.0
    return x0, y0, cov


def _homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    a, b = [], []
    for (x, y), (u, v) in zip(src, dst):
        a.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        a.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        b += [u, v]
    h = np.linalg.solve(np.array(a, float), np.array(b, float))
    return np.append(h, 1.0).reshape(3, 3)


class View:
    """Source surface -> image: optional barrel distortion about `bc`, then a homography."""

    def __init__(self, hom: np.ndarray | None = None, barrel: float = 0.0, bc=(0.0, 0.0), bnorm: float = 1.0):
        self.hom = hom
        self.inv_hom = None if hom is None else np.linalg.inv(hom)
        self.barrel, self.bc, self.bnorm = barrel, np.asarray(bc, float), bnorm

    @property
    def identity(self) -> bool:
        return self.hom is None and self.barrel == 0.0

    def fwd(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, float)
        if self.barrel:
            d = p - self.bc
            p = self.bc + d * (1 + self.barrel * (d ** 2).sum(-1, keepdims=True) / self.bnorm ** 2)
        if self.hom is not None:
            q = p @ self.hom[:, :2].T + self.hom[:, 2]
            p = q[..., :2] / q[..., 2:]
        return p

    def inv(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.inv_hom is not None:
            m = self.inv_hom
            w = m[2, 0] * x + m[2, 1] * y + m[2, 2]
            x, y = (m[0, 0] * x + m[0, 1] * y + m[0, 2]) / w, (m[1, 0] * x + m[1, 1] * y + m[1, 2]) / w
        if self.barrel:
            dx, dy = x - self.bc[0], y - self.bc[1]
            r2d = (dx * dx + dy * dy) / self.bnorm ** 2
            s = np.ones_like(dx)
            for _ in range(5):   # solve r = r' / (1 + k r^2)
                s = 1.0 / (1 + self.barrel * r2d * s * s)
            x, y = self.bc[0] + dx * s, self.bc[1] + dy * s
        return x.astype(np.float32), y.astype(np.float32)

    def rotation(self, c: np.ndarray) -> float:
        a, b = self.fwd(np.array([c, c + (10.0, 0.0)]))
        return math.degrees(math.atan2(b[1] - a[1], b[0] - a[0]))


def _camera_view(rng: np.random.Generator, w: int, h: int, rot: float, persp: float) -> View:
    c = np.array([w / 2, h / 2])
    src = np.array([(0, 0), (w, 0), (w, h), (0, h)], float)
    t = math.radians(rng.uniform(-rot, rot))
    r = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    dst = (src - c) @ r.T * rng.uniform(1.0, 1.05) + c + rng.uniform(-persp, persp, (4, 2)) * min(w, h)
    return View(_homography(src, dst))


# ----------------------------------------------------------------------------- textures

def _noise(rng: np.random.Generator, h: int, w: int, cell_y: float, cell_x: float | None = None) -> np.ndarray:
    """Smooth value noise in about [0, 1] with features about `cell` px large."""
    cell_x = cell_y if cell_x is None else cell_x
    low = rng.random((max(2, int(h / cell_y) + 2), max(2, int(w / cell_x) + 2)), dtype=np.float32)
    return np.asarray(Image.fromarray(low).resize((w, h), Image.BICUBIC))


def _grain(rng: np.random.Generator, h: int, w: int, streak: float = 1.0) -> np.ndarray:
    """Fine grain in [0, 1] (paper tooth, chalk), optionally streaky along x (streak > 1) or y (< 1)."""
    g = 0.55 * rng.random((h, w), dtype=np.float32)
    if streak >= 1:
        g += 0.45 * _noise(rng, h, w, 1.3, 1.3 * streak)
    else:
        g += 0.45 * _noise(rng, h, w, 1.3 / streak, 1.3)
    lo, hi = np.percentile(g[:: 7, :: 7], [1, 99])
    return np.clip((g - lo) / max(hi - lo, 1e-3), 0, 1)


_BAYER = np.array([[0, 8, 2, 10], [12, 4, 14, 6], [3, 11, 1, 9], [15, 7, 13, 5]], np.float32) / 16 + 1 / 32

_FONT = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", "S": "111100111001111", "C": "111100100100111",
    "O": "111101101101111", "R": "110101110101101", "E": "111100111100111", "H": "101101111101101",
    "I": "111010010010111", "L": "100100100100111", "V": "101101101101010", "X": "101101010101101",
    "P": "111101111100100", "T": "111010010010010", "U": "101101101101111", " ": "000000000000000",
}


def _u8(c) -> np.ndarray:
    return np.asarray(c, np.float32) / 255.0


# ----------------------------------------------------------------------------- scene state

@dataclass
class _Obj:
    shape: str
    colour: str
    fill: np.ndarray
    x0: int
    y0: int
    mask: np.ndarray
    centre: np.ndarray      # final coordinates (working canvas)
    radius: float           # circumscribed radius, working px
    tilt: float
    index: int = 0


@dataclass
class _State:
    kind: str
    rng: np.random.Generator
    w: int                  # working canvas (pixelart: the low-resolution grid)
    h: int
    img: np.ndarray
    allowed: tuple[float, float, float, float]      # where objects may go, in source coordinates
    view: View = field(default_factory=View)
    p: int = 1              # final px per working px
    u: np.ndarray | None = None
    v: np.ndarray | None = None
    wobble: float = 0.0     # hand-drawn wobble, fraction of the radius
    cell: float = 0.0       # stitch: cell size in source px
    style: dict = field(default_factory=dict)
    objs: list = field(default_factory=list)
    occ: np.ndarray | None = None
    min_px: float = 10.0    # smallest circumscribed diameter, final px


def _uv(st: _State) -> None:
    ys, xs = np.mgrid[0:st.h, 0:st.w].astype(np.float32) + 0.5
    st.u, st.v = (xs, ys) if st.view.identity else st.view.inv(xs, ys)


def _photo_view(st: _State, rot: float = 3.5, persp: float = 0.03) -> None:
    st.view = _camera_view(st.rng, st.w, st.h, rot, persp) if st.rng.random() < 0.8 else View()
    _uv(st)


# ----------------------------------------------------------------------------- backgrounds

_PAPERS = {"white": (248, 247, 242), "cream": (245, 236, 212), "manila": (236, 222, 178), "grey": (226, 226, 222),
           "blue": (214, 226, 240), "kraft": (184, 148, 108), "black": (34, 34, 38), "navy": (33, 43, 80)}


def _paper_sheet(st: _State, paper: tuple, lines: bool = True) -> None:
    rng, h, w = st.rng, st.h, st.w
    u, v = st.u, st.v
    base = _u8(paper) * (1 + 0.03 * (_noise(rng, h, w, 40) - 0.5))[..., None]
    base *= (1 + 0.04 * (rng.random((h, w), dtype=np.float32) - 0.5))[..., None]
    dark = np.mean(paper) < 120
    r = rng.random()
    if lines and r < 0.3 and not dark:            # ruled notebook paper with a margin line
        sp = rng.uniform(14, 28) * max(1.0, min(w, h) / 400)
        a = np.clip(1.2 - np.minimum(v % sp, sp - v % sp), 0, 1)
        base = base * (1 - 0.45 * a[..., None]) + _u8((120, 160, 215)) * 0.45 * a[..., None]
        if rng.random() < 0.6:
            mx = rng.uniform(0.08, 0.16) * w
            m = np.clip(1.3 - np.abs(u - mx), 0, 1)
            base = base * (1 - 0.5 * m[..., None]) + _u8((225, 120, 130)) * 0.5 * m[..., None]
    elif lines and r < 0.45 and not dark:         # graph paper
        sp = rng.uniform(8, 16)
        a = np.clip(1.0 - np.minimum(np.minimum(u % sp, sp - u % sp), np.minimum(v % sp, sp - v % sp)), 0, 1)
        base = base * (1 - 0.3 * a[..., None]) + _u8((130, 180, 200)) * 0.3 * a[..., None]
    if rng.random() < 0.2:                        # a fold
        y = rng.uniform(0.3, 0.7) * h
        f = np.exp(-((v - y) / 2.0) ** 2)
        base *= (1 - 0.06 * f)[..., None]
    st.img = base
    if rng.random() < 0.4:                        # the sheet lies on a table
        m = rng.uniform(0.0, 0.14, 4) * np.array([w, h, w, h])
        k = int(rng.integers(4))
        m[k] = max(m[k], 0.05 * min(w, h))
        x0, y0, x1, y1 = m[0], m[1], w - m[2], h - m[3]
        if x1 - x0 > 0.5 * w and y1 - y0 > 0.5 * h:
            table = rng.integers(3)
            if table == 0:    # wood
                grain = _noise(rng, h, w, 3, 60) if rng.random() < 0.5 else _noise(rng, h, w, 60, 3)
                tb = _u8((125, 85, 52)) * (0.8 + 0.35 * grain)[..., None]
            elif table == 1:  # dark desk
                tb = _u8((52, 54, 58)) * (0.9 + 0.2 * _noise(rng, h, w, 30))[..., None]
            else:             # grey-green cutting mat
                tb = _u8((60, 96, 80)) * (0.95 + 0.1 * _noise(rng, h, w, 30))[..., None]
            inside = (u >= x0) & (u < x1) & (v >= y0) & (v < y1)
            dist = np.minimum(np.minimum(u - x0, x1 - u), np.minimum(v - y0, y1 - v))
            shade = np.where(inside, 1.0, 1 - 0.35 * np.exp(np.minimum(dist, 0) / 4.0))
            st.img = np.where(inside[..., None], st.img, tb * shade[..., None])
            st.allowed = (x0 + 3, y0 + 3, x1 - 3, y1 - 3)


def _setup_crayon(st: _State) -> None:
    rng = st.rng
    _photo_view(st)
    paper = rng.choice(list(_PAPERS), p=[0.3, 0.16, 0.1, 0.08, 0.08, 0.1, 0.1, 0.08])
    _paper_sheet(st, _PAPERS[paper])
    st.wobble = rng.uniform(0.015, 0.035)
    st.style.update(grain=_grain(rng, st.h, st.w), hatch=rng.uniform(0, np.pi), pencil=rng.random() < 0.35,
                    mix=0.7)


def _setup_marker(st: _State) -> None:
    rng = st.rng
    _photo_view(st)
    r = rng.random()
    if r < 0.25:   # whiteboard with ghosts of old drawings and glare
        u, v = st.u, st.v
        img = _u8((238, 240, 243)) * np.ones((st.h, st.w, 1), np.float32)
        ghost = _noise(rng, st.h, st.w, 25)
        img *= (1 - 0.035 * np.clip((ghost - 0.5) * 2.5, 0, 1))[..., None]
        gx, gy = rng.uniform(0, st.w), rng.uniform(0, st.h)
        glare = np.exp(-(((u - gx) / (0.4 * st.w)) ** 2 + ((v - gy) / (0.25 * st.h)) ** 2))
        st.img = img + (1 - img) * 0.5 * glare[..., None]
        st.style["board"] = "whiteboard"
    else:
        name = rng.choice(["white", "cream", "grey", "legal", "blue"], p=[0.45, 0.2, 0.1, 0.15, 0.1])
        _paper_sheet(st, (250, 243, 168) if name == "legal" else _PAPERS[name])
    st.wobble = rng.uniform(0.01, 0.025)
    st.style.update(grain=_grain(rng, st.h, st.w), hatch=rng.uniform(0, np.pi), black_outline=rng.random() < 0.35,
                    mix=0.95)


def _setup_chalk(st: _State) -> None:
    rng, h, w = st.rng, st.h, st.w
    _photo_view(st, rot=5, persp=0.05)
    u, v = st.u, st.v
    ground = rng.choice(["asphalt", "concrete", "board"], p=[0.45, 0.25, 0.3])
    if ground == "asphalt":
        g = rng.uniform(62, 100)
        base = _u8((g, g, g + rng.uniform(-4, 6)))
        tex = 0.82 + 0.3 * rng.random((h, w), dtype=np.float32) + 0.16 * (_noise(rng, h, w, 3) - 0.5)
        tex += 0.25 * (rng.random((h, w), dtype=np.float32) > 0.985)
        tex *= 1 - 0.25 * np.clip((_noise(rng, h, w, 80) - 0.65) * 3, 0, 1)        # oil stains
        img = base * tex[..., None]
    elif ground == "concrete":
        g = rng.uniform(135, 165)
        base = _u8((g, g - 2, g - 6))
        tex = 0.9 + 0.14 * rng.random((h, w), dtype=np.float32) + 0.12 * (_noise(rng, h, w, 20) - 0.5)
        sp = rng.uniform(120, 260)
        seam = np.clip(1.5 - np.minimum(np.minimum(u % sp, sp - u % sp), np.minimum(v % sp, sp - v % sp)), 0, 1)
        img = base * (tex * (1 - 0.35 * seam))[..., None]
    else:
        col = [(38, 62, 50), (40, 44, 47), (30, 48, 44)][rng.integers(3)]
        img = _u8(col) * (0.92 + 0.12 * _noise(rng, h, w, 12))[..., None]
        smudge = np.clip((_noise(rng, h, w, 60, 120) - 0.45) * 2, 0, 1) * rng.uniform(0.05, 0.12)
        img = img + (0.85 - img) * smudge[..., None]
    st.img = img.astype(np.float32)
    st.style["ground"] = ground
    st.wobble = rng.uniform(0.015, 0.035)
    streak = rng.uniform(2.5, 5) if rng.random() < 0.5 else 1 / rng.uniform(2.5, 5)
    st.style.update(grain=_grain(rng, h, w, streak), t0=rng.uniform(0.1, 0.2), mix=0.82)


_SKIES = [[(60, 110, 230), (90, 150, 245), (140, 190, 250), (190, 225, 255)],
          [(38, 22, 82), (96, 40, 118), (196, 82, 92), (238, 150, 84)],
          [(20, 30, 70), (30, 60, 110), (60, 100, 140)],
          [(130, 200, 240), (170, 220, 245), (220, 240, 250)]]


def _setup_pixelart(st: _State, W: int, H: int) -> None:
    rng = st.rng
    ps = [q for q in (2, 3, 4, 5, 6) if min(W, H) // q >= 40]
    p = int(rng.choice(ps))
    st.p, st.w, st.h = p, W // p, H // p
    w, h = st.w, st.h
    ys, xs = np.mgrid[0:h, 0:w]
    bay = _BAYER[ys % 4, xs % 4]
    style = rng.choice(["sky", "space", "dungeon", "flat"], p=[0.4, 0.2, 0.2, 0.2])
    if style == "sky":
        bands = np.array(_SKIES[rng.integers(len(_SKIES))], np.float32) / 255
        t = ys / max(h - 1, 1) * (len(bands) - 1)
        k = np.floor(t).astype(int)
        k = np.where((t - k) > bay, np.minimum(k + 1, len(bands) - 1), k)
        img = bands[k]
        if rng.random() < 0.7:   # brick ground with a grass top
            gy = int(h * rng.uniform(0.75, 0.88))
            bw, bh = int(rng.integers(6, 10)), int(rng.integers(3, 5))
            mortar = ((ys - gy) % bh == 0) | ((xs + (((ys - gy) // bh) % 2) * (bw // 2)) % bw == 0)
            dirt = np.where(mortar[..., None], _u8((92, 50, 24)), _u8((156, 92, 44)))
            img = np.where((ys >= gy)[..., None], dirt, img)
            img = np.where(((ys >= gy) & (ys < gy + 2))[..., None], _u8((56, 168, 60)), img)
    elif style == "space":
        img = np.broadcast_to(_u8((6, 6, 22)), (h, w, 3)).copy()
        stars = rng.random((h, w)) < 0.008
        img[stars] = _u8((120, 120, 150))
    elif style == "dungeon":
        ts = int(rng.integers(6, 14))
        chk = ((ys // ts + xs // ts) % 2).astype(bool)
        img = np.where(chk[..., None], _u8((64, 62, 72)), _u8((48, 46, 56)))
        img = np.where(((ys % ts == 0) | (xs % ts == 0))[..., None], _u8((30, 28, 34)), img)
    else:
        cols = [(0, 0, 0), (20, 22, 64), (96, 96, 112), (236, 236, 222), (24, 70, 40)]
        a, b = rng.choice(len(cols), 2, replace=False)
        t = ys / max(h - 1, 1) if rng.random() < 0.5 else xs / max(w - 1, 1)
        img = np.where((t * 0.6 > bay)[..., None], _u8(cols[b]) * 0.3 + _u8(cols[a]) * 0.7, _u8(cols[a]))
    img = np.ascontiguousarray(img, np.float32)
    top, bottom = 1.0, h - 1.0
    if rng.random() < 0.75:   # HUD bar
        hh = int(rng.integers(7, 10))
        at_top = rng.random() < 0.6
        y0 = 0 if at_top else h - hh
        img[y0:y0 + hh] = _u8((0, 0, 0) if rng.random() < 0.6 else (24, 24, 90))
        img[(y0 + hh - 1) if at_top else y0] = _u8((200, 200, 210))
        text = rng.choice(["SCORE ", "PTS ", "1UP "]) + f"{int(rng.integers(0, 99999)):06d}"
        if rng.random() < 0.6:
            text += rng.choice(["  HI ", "  LV ", "  X"]) + str(int(rng.integers(1, 99)))
        tc = _u8((250, 250, 250) if rng.random() < 0.5 else (250, 220, 60))
        x = 2
        ty = y0 + (hh - 5) // 2
        for ch in text:
            if x + 3 >= w:
                break
            g = np.array([int(b) for b in _FONT[ch]], bool).reshape(5, 3)
            img[ty:ty + 5, x:x + 3][g] = tc
            x += 4
        if at_top:
            top = hh + 1.0
        else:
            bottom = h - hh - 1.0
    st.img = img
    st.allowed = (1.0, top, w - 1.0, bottom)
    st.min_px = max(10.0, 8.0 * p)
    st.style.update(outline=rng.random() < 0.75, scan=p >= 3 and rng.random() < 0.55, mix=1.0)


def _setup_crt(st: _State) -> None:
    rng, h, w = st.rng, st.h, st.w
    if rng.random() < 0.75:
        mx, my = rng.uniform(0.05, 0.12) * w, rng.uniform(0.05, 0.12) * h
    else:
        mx = my = -0.02 * min(w, h)
    screen = (mx, my, w - mx, h - my)
    bc = ((screen[0] + screen[2]) / 2, (screen[1] + screen[3]) / 2)
    hom = _camera_view(rng, w, h, 3, 0.03).hom if rng.random() < 0.7 else None
    st.view = View(hom, barrel=-rng.uniform(0.03, 0.09), bc=bc, bnorm=math.hypot(w, h) / 2)
    _uv(st)
    u, v = st.u, st.v
    content = rng.choice(["black", "dos", "teal", "grid", "grey"], p=[0.3, 0.2, 0.15, 0.2, 0.15])
    cols = {"black": (8, 8, 10), "dos": (12, 22, 150), "teal": (0, 112, 112), "grid": (6, 10, 8),
            "grey": (70, 72, 78)}
    img = _u8(cols[content]) * (0.9 + 0.15 * (1 - ((v - bc[1]) / h) ** 2))[..., None]
    if content == "grid":
        sp = rng.uniform(16, 40)
        a = np.clip(1.0 - np.minimum(np.minimum(u % sp, sp - u % sp), np.minimum(v % sp, sp - v % sp)), 0, 1)
        img = img + a[..., None] * _u8((10, 70, 30))
    rad = rng.uniform(0.03, 0.08) * min(w, h)
    dx = np.maximum(np.maximum(screen[0] + rad - u, u - (screen[2] - rad)), 0)
    dy = np.maximum(np.maximum(screen[1] + rad - v, v - (screen[3] - rad)), 0)
    inside = (np.hypot(dx, dy) <= rad).astype(np.float32)
    bez = [(205, 196, 170), (46, 46, 50), (22, 22, 24), (150, 150, 155)][rng.integers(4)]
    bezel = _u8(bez) * (0.85 + 0.2 * (1 - v / h))[..., None] * (0.96 + 0.06 * _noise(rng, h, w, 30))[..., None]
    soft = ndimage.uniform_filter(inside, 3)
    st.img = (img * soft[..., None] + bezel * (1 - soft[..., None])).astype(np.float32)
    st.allowed = (screen[0] + rad * 0.7, screen[1] + rad * 0.7, screen[2] - rad * 0.7, screen[3] - rad * 0.7)
    st.style.update(screen=inside, mix=1.0, edge=rng.random() < 0.3)


def _setup_stitch(st: _State) -> None:
    rng, h, w = st.rng, st.h, st.w
    _photo_view(st, rot=4, persp=0.025)
    u, v = st.u, st.v
    beads = rng.random() < 0.45
    short = min(w, h)
    st.cell = c = float(np.clip(rng.uniform(0.012, 0.028) * short, 4.6 if beads else 4.0, 9.0))
    st.min_px = max(10.0, 9.0 * c)
    fu, fv = (u / c) % 1.0, (v / c) % 1.0
    if beads:
        col = [(228, 228, 232), (236, 236, 240), (190, 214, 234), (200, 200, 206)][rng.integers(4)]
        img = _u8(col) * (0.96 + 0.06 * _noise(rng, h, w, 50))[..., None]
        r = np.hypot(fu - 0.5, fv - 0.5)
        peg = np.clip((0.2 - r) * c, 0, 1)
        img = img * (1 - 0.12 * np.clip((0.27 - r) * c, 0, 1) + 0.12 * peg)[..., None]
    else:
        col = [(238, 233, 218), (250, 250, 247), (206, 222, 236), (40, 40, 44), (222, 206, 182)][rng.integers(5)]
        wf = np.where((fu < 0.5) ^ (fv < 0.5), 1.03, 0.97)
        hole = np.clip((0.16 - np.minimum(fu, 1 - fu)) * c, 0, 1) * np.clip((0.16 - np.minimum(fv, 1 - fv)) * c, 0, 1)
        img = _u8(col) * (wf * (1 - 0.45 * hole) * (0.97 + 0.05 * _noise(rng, h, w, 40)))[..., None]
    st.img = img.astype(np.float32)
    st.style.update(beads=beads, mix=0.72 if not beads else 0.7)


def _setup_corkboard(st: _State) -> None:
    rng, h, w = st.rng, st.h, st.w
    _photo_view(st)
    u, v = st.u, st.v
    if rng.random() < 0.7:
        base = _u8((rng.uniform(165, 190), rng.uniform(120, 140), rng.uniform(78, 95)))
        tex = 0.8 + 0.36 * _noise(rng, h, w, 2.4) + 0.1 * (_noise(rng, h, w, 1.1) - 0.5)   # granules
        tex += 0.12 * (_noise(rng, h, w, 30) - 0.5)
        tex *= np.where(_noise(rng, h, w, 1.7) > 0.88, 0.62, 1.0)                             # pores
        st.style["board"] = "cork"
    else:
        base = _u8([(40, 82, 56), (42, 52, 88), (118, 118, 124), (96, 34, 44)][rng.integers(4)])
        tex = 0.92 + 0.12 * rng.random((h, w), dtype=np.float32) + 0.1 * (_noise(rng, h, w, 4) - 0.5)
        st.style["board"] = "felt"
    img = base * tex[..., None]
    if rng.random() < 0.5:   # wooden frame
        fw = rng.uniform(0.03, 0.06) * min(w, h)
        inside = (u > fw) & (u < w - fw) & (v > fw) & (v < h - fw)
        wood = _u8((150, 104, 62)) * (0.85 + 0.25 * _noise(rng, h, w, 4, 40))[..., None]
        img = np.where(inside[..., None], img, wood)
        st.allowed = (fw + 3, fw + 3, w - fw - 3, h - fw - 3)
    st.img = img.astype(np.float32)
    ang = rng.uniform(0, 2 * np.pi)
    st.style.update(light=np.array([math.cos(ang), math.sin(ang)]), mix=1.0, grain=_grain(rng, h, w))


# ----------------------------------------------------------------------------- painters

def _box(ob: _Obj) -> tuple[slice, slice]:
    return slice(ob.y0, ob.y0 + ob.mask.shape[0]), slice(ob.x0, ob.x0 + ob.mask.shape[1])


def _grid(ob: _Obj) -> tuple[np.ndarray, np.ndarray]:
    h, w = ob.mask.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    return xs + ob.x0 + 0.5, ys + ob.y0 + 0.5


def _over(st: _State, sl, alpha: np.ndarray, col: np.ndarray) -> None:
    a = alpha[..., None].astype(np.float32)
    st.img[sl] = st.img[sl] * (1 - a) + col * a


def _paint_crayon(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    rng, sl, mask = st.rng, _box(ob), ob.mask
    xs, ys = _grid(ob)
    dist = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    phi = st.style["hatch"] + rng.normal(0, 0.25)
    per = rng.uniform(1.8, 2.8) if st.style["pencil"] else rng.uniform(2.4, 4.2)
    along = -xs * math.sin(phi) + ys * math.cos(phi)
    proj = xs * math.cos(phi) + ys * math.sin(phi) + 0.7 * np.sin(along * rng.uniform(0.05, 0.12) + rng.uniform(0, 6))
    stroke = ((proj / per + rng.random()) % 1.0) < rng.uniform(0.74, 0.88)
    ink = np.where(stroke, 1.0, 0.35)
    if rng.random() < 0.35:
        phi2 = phi + rng.uniform(0.9, 1.6)
        p2 = xs * math.cos(phi2) + ys * math.sin(phi2)
        ink = np.maximum(ink, 0.85 * (((p2 / per + rng.random()) % 1.0) < 0.55))
    tooth = st.style["grain"][sl]
    ink = ink * np.clip((tooth - 0.05) / 0.25, 0, 1)
    t = float(np.clip(0.06 * ob.radius, 1.2, 3.0))
    band = mask & (dist <= t)
    ink = np.where(band, np.clip(0.75 + 0.5 * tooth, 0, 1), ink)
    col = ob.fill * (0.93 + 0.1 * tooth)[..., None]
    col = np.where(band[..., None], ob.fill * 0.8, col)
    _over(st, sl, ink * mask, col)


def _paint_marker(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    rng, sl, mask = st.rng, _box(ob), ob.mask
    xs, ys = _grid(ob)
    dist = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    phi = st.style["hatch"] + rng.normal(0, 0.3)
    wd = float(np.clip(rng.uniform(0.28, 0.55) * ob.radius, 3, 12))
    fr = ((xs * math.cos(phi) + ys * math.sin(phi)) / wd + rng.random()) % 1.0
    ov = fr < 0.18
    q = -xs * math.sin(phi) + ys * math.cos(phi)
    streak = 0.97 + 0.03 * np.sin(q * rng.uniform(0.8, 1.6))
    alpha = np.where(ov, 1.0, 0.92)
    col = ob.fill * (np.where(ov, 0.88, 1.0) * streak)[..., None]
    t = float(np.clip(0.06 * ob.radius, 1.2, 2.8))
    band = mask & (dist <= t)
    black = st.style["black_outline"] and ob.colour not in ("black",)
    col = np.where(band[..., None], _u8((24, 24, 30)) if black else ob.fill * 0.72, col)
    alpha = np.where(band, 1.0, alpha)
    _over(st, sl, alpha * np.clip(cov * 1.5 - 0.25, 0, 1), col)


def _paint_chalk(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    sl, mask = _box(ob), ob.mask
    dist = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    g = st.style["grain"][sl]
    cover = np.clip((g - st.style["t0"]) / 0.18, 0, 1)
    band = mask & (dist <= float(np.clip(0.07 * ob.radius, 1.2, 3.0)))
    cover = np.where(band, np.maximum(cover, 0.9), cover)
    col = np.clip(ob.fill * (0.92 + 0.14 * g)[..., None], 0, 1)
    _over(st, sl, cover * np.clip(cov * 1.5 - 0.25, 0, 1), col)


def _paint_pixel(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    sl, mask = _box(ob), ob.mask
    h, w = mask.shape
    ys, xs = np.mgrid[0:h, 0:w]
    checker = ((ys + xs + ob.x0 + ob.y0) % 2) == 0
    edge = mask & ~ndimage.binary_erosion(mask)
    inner = mask & ~edge
    br = np.zeros_like(mask)
    br[:-1, :-1] = mask[1:, 1:]
    tl = np.zeros_like(mask)
    tl[1:, 1:] = mask[:-1, :-1]
    col = np.broadcast_to(ob.fill, (h, w, 3)).copy()
    col[inner & ~br & checker] = ob.fill * 0.78
    col[inner & ~tl & checker] = ob.fill * 0.85 + 0.15
    if st.style["outline"]:
        col[edge] = ob.fill * 0.4 if ob.colour != "black" else _u8((70, 70, 80))
    st.img[sl] = np.where(mask[..., None], col, st.img[sl])


def _paint_crt(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    sl, mask = _box(ob), ob.mask
    xs, ys = _grid(ob)
    grad = 1.04 - 0.08 * (ys - ys.min()) / max(1.0, float(np.ptp(ys)))
    col = np.clip(ob.fill * grad[..., None], 0, 1)
    if st.style["edge"]:
        dist = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
        col = np.where((mask & (dist <= 1.5))[..., None], ob.fill * 0.75 + 0.25, col)
    _over(st, sl, cov, col)


def _paint_stitch(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    sl, mask = _box(ob), ob.mask
    c = st.cell
    fu, fv = (st.u[sl] / c) % 1.0, (st.v[sl] / c) % 1.0
    if st.style["beads"]:
        r = np.hypot(fu - 0.5, fv - 0.5)
        bead = np.clip((0.54 - r) * c * 1.5, 0, 1) * np.clip((r - 0.12) * c * 1.5, 0, 1)
        shade = 1.0 + 0.22 * (0.5 - fu + 0.5 - fv) * np.clip(1 - r * 2, 0, 1)
        alpha, col = bead, ob.fill * shade[..., None]
    else:
        d1, d2 = np.abs(fu - fv), np.abs(fu + fv - 1)
        tw = 0.36 if c >= 5 else 0.42
        l1 = np.clip((tw - d1) * c * 1.5, 0, 1)
        l2 = np.clip((tw - d2) * c * 1.5, 0, 1)
        twist1 = 0.9 + 0.08 * np.sin((fu + fv) * 18)
        twist2 = 1.0 + 0.08 * np.sin((fu - fv) * 18)
        top = l2 > 0.5
        alpha = np.maximum(l1, l2)
        col = ob.fill * np.where(top, twist2, twist1)[..., None]
    _over(st, sl, alpha * mask, np.clip(col, 0, 1))


def _paint_cork(st: _State, ob: _Obj, cov: np.ndarray) -> None:
    rng, sl, mask = st.rng, _box(ob), ob.mask
    # drop shadow on an expanded window
    off = st.style["light"] * float(np.clip(0.08 * ob.radius, 1.0, 4.0))
    sig = float(np.clip(0.06 * ob.radius, 1.0, 3.0))
    m = int(math.ceil(abs(off).max() + 3 * sig)) + 1
    h, w = mask.shape
    big = np.zeros((h + 2 * m, w + 2 * m), np.float32)
    oy, ox = int(round(off[1])), int(round(off[0]))
    big[m + oy:m + oy + h, m + ox:m + ox + w] = cov
    shadow = ndimage.gaussian_filter(big, sig) * 0.38
    y0, x0 = ob.y0 - m, ob.x0 - m
    cy0, cx0, cy1, cx1 = max(0, y0), max(0, x0), min(st.h, y0 + h + 2 * m), min(st.w, x0 + w + 2 * m)
    st.img[cy0:cy1, cx0:cx1] *= (1 - shadow[cy0 - y0:cy1 - y0, cx0 - x0:cx1 - x0])[..., None]
    xs, ys = _grid(ob)
    g = st.style["grain"][sl]
    shade = 1 + 0.05 * (g - 0.5)
    if ob.shape == "square" and rng.random() < 0.5:   # a sticky note, curling at one corner
        cx, cy = rng.choice([xs.min(), xs.max()]), rng.choice([ys.min(), ys.max()])
        d = np.hypot(xs - cx, ys - cy) / (2 * ob.radius)
        shade = shade * (1 - 0.12 * np.clip(1 - d * 2.5, 0, 1))
    col = np.clip(ob.fill * shade[..., None], 0, 1)
    _over(st, sl, cov, col)
    if rng.random() < 0.55 and ob.radius >= 9:       # a tack near the top of the shape
        dist = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
        rp = float(np.clip(0.1 * ob.radius, 2.2, 3.4))
        ok = np.argwhere(dist >= rp + 2.5)
        if len(ok):
            ok = ok[ok[:, 0] <= ok[:, 0].min() + max(2, 0.25 * np.ptp(ok[:, 0]))]
            py, px = ok[rng.integers(len(ok))]
            d = np.hypot(xs - (ob.x0 + px + 0.5), ys - (ob.y0 + py + 0.5))
            sh = np.hypot(xs - (ob.x0 + px + 0.5 + 1.2 * st.style["light"][0]), ys - (ob.y0 + py + 0.5 + 1.2 * st.style["light"][1]))
            _over(st, sl, np.clip(rp + 0.5 - sh, 0, 1) * 0.4, np.zeros(3, np.float32))
            head = np.clip(rp + 0.5 - d, 0, 1)
            metal = _u8((176, 176, 182) if rng.random() < 0.6 else (196, 164, 74))
            hl = np.clip(1 - np.hypot(xs - (ob.x0 + px + 0.5 - rp / 3), ys - (ob.y0 + py + 0.5 - rp / 3)) / rp, 0, 1)
            _over(st, sl, head, np.clip(metal * (0.8 + 0.5 * hl)[..., None], 0, 1))
            st.occ[sl][head >= 0.5] = -2


_PAINT = {"crayon": _paint_crayon, "marker": _paint_marker, "chalk": _paint_chalk, "pixelart": _paint_pixel,
          "crt": _paint_crt, "stitch": _paint_stitch, "corkboard": _paint_cork}


# ----------------------------------------------------------------------------- placement

def _count(rng: np.random.Generator) -> int:
    r = rng.random()
    if r < 0.05:
        return 0
    if r < 0.55:
        return int(rng.integers(1, 7))
    if r < 0.75:
        return int(rng.integers(7, 11))
    return int(rng.integers(11, 26))


def _specs(rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    def pick() -> tuple[str, str]:
        s = rng.choice(DISTRACTOR_SHAPES) if rng.random() < 0.13 else rng.choice(SHAPES)
        c = rng.choice(DISTRACTOR_COLOURS) if rng.random() < 0.1 else rng.choice(COLOURS)
        return str(s), str(c)
    out = []
    if n >= 3 and rng.random() < 0.55:
        rep = (str(rng.choice(SHAPES)), str(rng.choice(COLOURS)))
        out += [rep] * max(2, int(round(n * rng.uniform(0.3, 0.7))))
    if n >= 4 and rng.random() < 0.25:   # same shape in several colours
        s = str(rng.choice(SHAPES))
        out += [(s, str(rng.choice(COLOURS))) for _ in range(int(rng.integers(2, 4)))]
    while len(out) < n:
        out.append(pick())
    out = out[:n]
    rng.shuffle(out)
    return out


def _contrast_ok(st: _State, x0: int, y0: int, mask: np.ndarray, fill: np.ndarray) -> bool:
    h, w = mask.shape
    m = 3
    ey0, ex0, ey1, ex1 = max(0, y0 - m), max(0, x0 - m), min(st.h, y0 + h + m), min(st.w, x0 + w + m)
    big = np.zeros((ey1 - ey0, ex1 - ex0), bool)
    big[y0 - ey0:y0 - ey0 + h, x0 - ex0:x0 - ex0 + w] = mask
    region = st.img[ey0:ey1, ex0:ex1]
    under = region[big].mean(0)
    ring = region[~big].mean(0) if (~big).any() else under
    mix = st.style.get("mix", 1.0)
    thr = 30.0
    for bg in (under, ring):
        eff = fill * mix + bg * (1 - mix)
        if delta_e(eff, bg) < thr:
            return False
    return True


def _place(st: _State, shape: str, colour: str, diam: float, overlap: bool) -> bool:
    rng, p = st.rng, st.p
    ax0, ay0, ax1, ay1 = st.allowed
    lo, hi = max(10.2, st.min_px), 0.395 * min(st.w, st.h) * p     # final px
    zoom = 1.0      # how much the view scales a shape here (learnt when a try comes out too big or small)
    for attempt in range(30):
        r_src = min(max(diam * 0.93 ** max(0, attempt - 10), lo), hi) / 2 / p / zoom
        if ax1 - ax0 < 2 * r_src + 2 or ay1 - ay0 < 2 * r_src + 2:
            return False
        c = np.array([rng.uniform(ax0 + r_src + 1, ax1 - r_src - 1), rng.uniform(ay0 + r_src + 1, ay1 - r_src - 1)])
        ang = 0.0 if rng.random() < 0.3 else rng.uniform(0, 360)
        outer, holes = unit_outline(shape, rng)
        t = math.radians(ang)
        rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
        outer = [c + r_src * q @ rot.T for q in outer]
        holes = [c + r_src * q @ rot.T for q in holes]
        if st.wobble:
            step = max(1.5, r_src / 14)
            amp = float(np.clip(st.wobble * r_src, 0.35, 2.5))
            outer = [_wobble(_densify(q, step), c, amp, rng) for q in outer]
            holes = [_wobble(_densify(q, step), c, amp, rng) for q in holes]
        elif st.view.barrel:
            outer = [_densify(q, max(2.0, r_src / 10)) for q in outer]
            holes = [_densify(q, max(2.0, r_src / 10)) for q in holes]
        fout = [st.view.fwd(q) for q in outer]
        allp = np.concatenate(fout)
        if allp.min() < 1.5 or allp[:, 0].max() > st.w - 1.5 or allp[:, 1].max() > st.h - 1.5:
            continue
        cf = st.view.fwd(c[None])[0]
        rf = float(np.sqrt(((allp - cf) ** 2).sum(1)).max())
        if not lo - 0.3 <= 2 * rf * p <= hi + 0.5:
            zoom = rf / r_src
            continue
        gap = 0.0 if overlap else max(1.5, 0.04 * rf)
        fac = 0.8 if overlap else 1.0
        if any(np.hypot(*(cf - o.centre)) < fac * (rf + o.radius) + gap for o in st.objs):
            continue
        if st.cell:   # cross-stitch / beads: the shape on the cell grid
            cc = st.cell
            cx0, cy0, ccov = raster([q / cc for q in outer], [q / cc for q in holes])
            cm = ccov >= 0.5
            if cm.sum() < 12:
                continue
            ch, cw = cm.shape
            corners = st.view.fwd(np.array([(cx0, cy0), (cx0 + cw, cy0), (cx0 + cw, cy0 + ch), (cx0, cy0 + ch)]) * cc)
            x0, y0 = int(math.floor(corners[:, 0].min())) - 1, int(math.floor(corners[:, 1].min())) - 1
            x1, y1 = int(math.ceil(corners[:, 0].max())) + 1, int(math.ceil(corners[:, 1].max())) + 1
            if x0 < 0 or y0 < 0 or x1 > st.w or y1 > st.h:
                continue
            ui = np.floor(st.u[y0:y1, x0:x1] / cc).astype(int) - cx0
            vi = np.floor(st.v[y0:y1, x0:x1] / cc).astype(int) - cy0
            ok = (ui >= 0) & (ui < cw) & (vi >= 0) & (vi < ch)
            mask = np.zeros(ui.shape, bool)
            mask[ok] = cm[vi[ok], ui[ok]]
            cov = mask.astype(np.float32)
        else:
            x0, y0, cov = raster(fout, [st.view.fwd(q) for q in holes])
            mask = cov >= 0.5
        if mask.sum() < 12:
            continue
        ys, xs = np.nonzero(mask)
        mask = mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        cov = cov[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        x0, y0 = x0 + int(xs.min()), y0 + int(ys.min())
        sl = (slice(y0, y0 + mask.shape[0]), slice(x0, x0 + mask.shape[1]))
        under = st.occ[sl][mask]
        if (under != -1).any():
            if not overlap:
                continue
            ids, cnt = np.unique(under[under >= 0], return_counts=True)
            if (under == -2).any() or any(k > 0.1 * st.objs[i].mask.sum() for i, k in zip(ids, cnt)):
                continue
            if (under >= 0).sum() > 0.1 * mask.sum():
                continue
        fill = None
        for _ in range(3):
            f = sample_shade(rng, colour)
            if _contrast_ok(st, x0, y0, mask, f):
                fill = f
                break
        if fill is None:
            continue
        ob = _Obj(shape, colour, fill, x0, y0, mask, cf, rf, fold_tilt(shape, ang + st.view.rotation(c)),
                  len(st.objs))
        occ = st.occ[sl]
        occ[mask] = ob.index
        st.objs.append(ob)
        _PAINT[st.kind](st, ob, cov)
        return True
    return False


# ----------------------------------------------------------------------------- finishing effects

def _crt_post(st: _State) -> None:
    rng, img = st.rng, st.img
    scr = st.style["screen"][..., None]
    u8 = Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8))
    bloom = np.asarray(u8.filter(ImageFilter.GaussianBlur(rng.uniform(1.5, 3.5))), np.float32) / 255
    img = img + rng.uniform(0.08, 0.2) * bloom * scr
    u, v = st.u, st.v
    per = rng.uniform(2.2, 4.0)
    mod = 1 + rng.uniform(0.06, 0.16) * np.cos(2 * np.pi * v / per)
    tp = rng.uniform(2.2, 4.5)
    a = rng.uniform(0.08, 0.25)
    ph = 2 * np.pi * u / tp
    triad = np.stack([1 + a * np.cos(ph - k * 2 * np.pi / 3) for k in range(3)], -1)
    f = rng.uniform(0.004, 0.02, 2) * rng.choice([-1, 1], 2)
    moire = 1 + rng.uniform(0.03, 0.08) * np.cos(2 * np.pi * (f[0] * u + f[1] * v) + 0.00004 * ((u - st.w / 2) ** 2))
    eff = mod[..., None] * triad * moire[..., None]
    img = img * (1 + (eff - 1) * scr)
    gx, gy = rng.uniform(0, st.w), rng.uniform(0, st.h)
    ys, xs = np.mgrid[0:st.h, 0:st.w].astype(np.float32)
    glare = np.exp(-(((xs - gx) / (rng.uniform(0.15, 0.4) * st.w)) ** 2 + ((ys - gy) / (rng.uniform(0.1, 0.3) * st.h)) ** 2))
    img = img + (1 - img) * rng.uniform(0.04, 0.14) * glare[..., None]
    st.img = img.astype(np.float32)


def _camera(rng: np.random.Generator, img: np.ndarray, strong: bool) -> Image.Image:
    h, w = img.shape[:2]
    if strong:
        ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
        xn, yn = xs / w - 0.5, ys / h - 0.5
        ang = rng.uniform(0, 2 * np.pi)
        light = 1 + rng.uniform(0, 0.16) * (xn * math.cos(ang) + yn * math.sin(ang))
        light *= 1 - rng.uniform(0, 0.14) * (xn ** 2 + yn ** 2) * 2
        img = img * light[..., None] * rng.uniform(0.97, 1.03, 3).astype(np.float32)
        img = img + rng.normal(0, rng.uniform(0.002, 0.012), img.shape).astype(np.float32)
    im = Image.fromarray((np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8))
    if strong and rng.random() < 0.6:
        im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9) * min(1.0, min(w, h) / 300)))
    if rng.random() < (0.7 if strong else 0.35):
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=int(rng.integers(60, 93)))
        im = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return im


# ----------------------------------------------------------------------------- a scene

def _canvas(rng: np.random.Generator) -> tuple[int, int]:
    short = int(round(math.exp(rng.uniform(math.log(96), math.log(640)))))
    aspect = 1.0 if rng.random() < 0.25 else math.exp(rng.uniform(0, math.log(3)) * rng.random() ** 0.5)
    long = int(min(800, max(short, round(short * aspect))))
    return (long, short) if rng.random() < 0.65 else (short, long)


def core_colour(pixels: np.ndarray, vis: np.ndarray, dist: np.ndarray | None = None) -> np.ndarray:
    """Median colour (0-255) of the inner part of an object's visible pixels (at least 40 % of the way from
    its visible edge to its deepest point): how its fill reads, without outlines, shading or edge blur."""
    if dist is None:
        dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
    core = vis & (dist >= 0.4 * dist.max())
    if core.sum() < 8:
        core = vis
    return np.median(pixels[core].astype(np.float32), 0)


def _labels(st: _State, image: np.ndarray) -> tuple[list[SceneObject], bool]:
    """SceneObjects on the final image, and whether every object reads as its colour and stands out."""
    p = st.p
    H, W = image.shape[:2]
    occ = st.occ if p == 1 else np.repeat(np.repeat(st.occ, p, 0), p, 1)
    short = min(W, H)
    out, ok = [], True
    lab_img = None
    for ob in st.objs:
        mask = ob.mask if p == 1 else np.repeat(np.repeat(ob.mask, p, 0), p, 1)
        x0, y0 = ob.x0 * p, ob.y0 * p
        h, w = mask.shape
        sl = (slice(y0, y0 + h), slice(x0, x0 + w))
        vis = mask & (occ[sl] == ob.index)
        dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
        ys, xs = np.nonzero(mask)
        cy, cx = ys.mean(), xs.mean()
        score = dist - 0.001 * np.hypot(*np.mgrid[0:h, 0:w] - np.array([cy, cx])[:, None, None])
        py, px = np.unravel_index(int(np.argmax(np.where(vis, score, -1e9))), vis.shape)
        deep = dist.max()
        full = ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1].max()
        if vis.sum() < 0.75 * mask.sum() or deep < min(2.0, 0.5 * full):
            ok = False
            st.style.setdefault("fails", []).append(("hidden", ob.shape, ob.colour))
        # colour and contrast as seen on the final image
        med = core_colour(image[sl], vis, dist) / 255
        if read_colour(med) != ob.colour:
            ok = False
            st.style.setdefault("fails", []).append(("reads", ob.shape, ob.colour, read_colour(med)))
        m = 3
        ey0, ex0, ey1, ex1 = max(0, y0 - m), max(0, x0 - m), min(H, y0 + h + m), min(W, x0 + w + m)
        big = np.zeros((ey1 - ey0, ex1 - ex0), bool)
        big[y0 - ey0:y0 - ey0 + h, x0 - ex0:x0 - ex0 + w] = mask
        ring = (ndimage.distance_transform_edt(~big) <= m) & ~big
        if ring.any():
            around = np.median(image[ey0:ey1, ex0:ex1][ring].astype(np.float32) / 255, 0)
            if delta_e(med, around) < 20:
                ok = False
                st.style.setdefault("fails", []).append(("contrast", ob.shape, ob.colour))
        rgb = tuple(int(round(float(c) * 255)) for c in np.clip(ob.fill, 0, 1))
        radius = ob.radius * p
        if st.cell or p > 1:   # on a grid the drawn cells reach past the geometric outline
            ccx, ccy = (ob.centre + 0.0) * p - (x0, y0)
            radius = max(radius, float(np.hypot(xs + 0.5 - ccx, ys + 0.5 - ccy).max()) + 0.7)
        out.append(SceneObject(
            shape=ob.shape, colour=ob.colour,
            box=(x0 / W, y0 / H, (x0 + w) / W, (y0 + h) / H),
            point=((x0 + px + 0.5) / W, (y0 + py + 0.5) / H),
            rgb=rgb, tilt=ob.tilt, size=float(2 * radius / short), mask=mask.copy()))
    return out, ok


def _query(rng: np.random.Generator, objects: list[SceneObject]) -> Query:
    forms = ("colour shape", "shape", "colour")
    form = str(rng.choice(forms, p=(0.45, 0.4, 0.15)))

    def text_of(o: SceneObject, f: str) -> str | None:
        if f == "colour shape":
            return f"{o.colour} {o.shape}" if o.colour in COLOURS and o.shape in SHAPES else None
        if f == "shape":
            return o.shape if o.shape in SHAPES else None
        return o.colour if o.colour in COLOURS else None

    def all_texts(f: str) -> list[str]:
        if f == "colour shape":
            return [f"{c} {s}" for c in COLOURS for s in SHAPES]
        return list(SHAPES if f == "shape" else COLOURS)

    present = {f: [t for t in (text_of(o, f) for o in objects) if t] for f in forms}
    empty = rng.random() < 0.16
    if not empty:
        order = [form] + [f for f in forms if f != form]
        for f in order:
            if present[f]:
                text = present[f][rng.integers(len(present[f]))]
                return Query(text, matches(text, objects))
    # names nothing present: half near misses
    cands = []
    if objects and rng.random() < 0.5:
        for o in objects:
            for s in (_NEAR_SHAPE.get(o.shape, ()) if form != "colour" else (None,)):
                for c in (_NEAR_COLOUR.get(o.colour, ()) if form != "shape" else (None,)):
                    if form == "colour shape":
                        opts = [f"{o.colour} {s}" if o.colour in COLOURS else None,
                                f"{c} {o.shape}" if o.shape in SHAPES else None, f"{c} {s}"]
                    else:
                        opts = [s if form == "shape" else c]
                    cands += [t for t in opts if t and not matches(t, objects)]
    if not cands:
        cands = [t for t in all_texts(form) if not matches(t, objects)]
    if not cands:
        for f in forms:
            cands = [t for t in all_texts(f) if not matches(t, objects)]
            if cands:
                break
    if not cands:   # everything is present (practically never): ask for something that is
        cands = present["shape"] or all_texts("shape")
    text = cands[rng.integers(len(cands))]
    return Query(text, matches(text, objects))


def _attempt(seed: int, i: int, attempt: int) -> tuple[Scene, Query, bool]:
    kind = str(np.random.default_rng([seed & 0xFFFFFFFF, i, 11011]).choice(KINDS, p=_KIND_P))   # kept on redraws
    rng = np.random.default_rng([seed & 0xFFFFFFFF, i, attempt, 11011, 1])
    W, H = _canvas(rng)
    while kind == "stitch" and min(W, H) < 170:   # the cell grid needs room
        W, H = _canvas(rng)
    st = _State(kind, rng, W, H, np.zeros((H, W, 3), np.float32), (1.0, 1.0, W - 1.0, H - 1.0))
    if kind == "pixelart":
        _setup_pixelart(st, W, H)
    else:
        {"crayon": _setup_crayon, "marker": _setup_marker, "chalk": _setup_chalk, "crt": _setup_crt,
         "stitch": _setup_stitch, "corkboard": _setup_corkboard}[kind](st)
    st.img = np.ascontiguousarray(st.img, np.float32)
    st.occ = np.full((st.h, st.w), -1, np.int16)
    n = _count(rng)
    p = st.p
    ax0, ay0, ax1, ay1 = st.allowed
    area = max(1.0, (ax1 - ax0) * (ay1 - ay0)) * p * p
    short = min(W, H)
    dmin = max(10.5, 0.025 * short, st.min_px)
    dcap = min(0.4 * short, 0.95 * min(ax1 - ax0, ay1 - ay0) * p)
    while n > 0 and math.sqrt(0.5 * area / n) < dmin * 1.2:
        n -= 1
    dmax = max(dmin, min(dcap, math.sqrt(0.5 * area / max(n, 1)) * 1.1))
    overlap = rng.random() < 0.2
    if rng.random() < 0.4:
        base = math.exp(rng.uniform(math.log(dmin), math.log(dmax)))
        sizes = [float(np.clip(base * rng.uniform(0.85, 1.15), dmin, dmax)) for _ in range(n)]
    else:
        sizes = [math.exp(rng.uniform(math.log(dmin), math.log(dmax))) for _ in range(n)]
    sizes.sort(reverse=True)   # big ones first place best; drawing order is shuffled by the specs below
    for (shape, colour), d in zip(_specs(rng, n), sizes):
        if not _place(st, shape, colour, d, overlap):
            for alt in rng.permutation(COLOURS)[:3]:
                if _place(st, shape, str(alt), d * 0.8, overlap):
                    break
    if kind == "crt":
        _crt_post(st)
    if p > 1:
        big = np.repeat(np.repeat(st.img, p, 0), p, 1)
        if st.style["scan"]:
            big[p - 1::p] *= 0.8
        image = _camera(rng, big, strong=False)
    else:
        image = _camera(rng, st.img, strong=True)
    arr = np.asarray(image)
    objects, ok = _labels(st, arr)
    return Scene(image=image, objects=tuple(objects), background=kind), _query(rng, objects), ok


def eleventh_scene(seed: int, i: int, attempts: int = 8) -> tuple[Scene, Query, int]:
    """Pair i of seed `seed`, and how many attempts it took (a failed check redraws the scene)."""
    for a in range(attempts):
        scene, query, ok = _attempt(seed, i, a)
        if ok:
            return scene, query, a + 1
    return scene, query, attempts


def eleventh_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    """`n` (scene, query) pairs; pair i depends only on (seed, i)."""
    return [eleventh_scene(seed, i)[:2] for i in range(n)]


# ----------------------------------------------------------------------------- CLI

def _draw_labels(scene: Scene, query: Query) -> Image.Image:
    im = scene.image.copy()
    d = ImageDraw.Draw(im)
    W, H = im.size
    hit = {id(o) for o in query.matches}
    for o in scene.objects:
        x0, y0, x1, y1 = o.box[0] * W, o.box[1] * H, o.box[2] * W - 1, o.box[3] * H - 1
        col = (255, 0, 255) if id(o) in hit else (0, 255, 0) if o.known else (160, 160, 160)
        d.rectangle([x0, y0, x1, y1], outline=col)
        px, py = o.point[0] * W, o.point[1] * H
        d.line([px - 2, py, px + 2, py], fill=col)
        d.line([px, py - 2, px, py + 2], fill=col)
    d.text((2, 2), f"{scene.background}: {query.text} ({len(query.matches)})", fill=(255, 0, 255))
    return im


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=11011)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--save", default=None, help="folder for a few images with their boxes drawn")
    ap.add_argument("--save-n", type=int, default=3, help="images saved per kind")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    data, tries = [], []
    for i in range(a.n):
        s, q, k = eleventh_scene(a.seed, i)
        data.append((s, q))
        tries.append(k)
    dt = time.perf_counter() - t0
    counts = [len(s.objects) for s, _ in data]
    objs = [o for s, _ in data for o in s.objects]
    px = [o.size * min(s.size) for s, _ in data for o in s.objects]
    bins = Counter("0" if c == 0 else "1-6" if c <= 6 else "7-10" if c <= 10 else "11-25" for c in counts)
    forms = Counter("colour shape" if " " in q.text else "colour" if q.text in COLOURS else "shape" for _, q in data)
    print(f"{a.n} scenes (seed {a.seed}) in {dt:.1f}s: {1000 * dt / max(a.n, 1):.1f} ms/scene; "
          f"redrawn {sum(k > 1 for k in tries)} (mean attempts {np.mean(tries):.2f}, failed {sum(k >= 8 for k in tries)})")
    print("kinds:", dict(Counter(s.background for s, _ in data).most_common()))
    print("objects per scene:", {k: bins[k] for k in ("0", "1-6", "7-10", "11-25")},
          f"mean {np.mean(counts):.1f}, max {max(counts)}")
    print(f"sizes: fraction of short side p5/p50/p95 {np.percentile([o.size for o in objs], [5, 50, 95]).round(3).tolist()}, "
          f"px min {min(px):.1f} p50 {np.median(px):.1f} max {max(px):.1f}")
    print(f"canvases: short side {min(min(s.size) for s, _ in data)}-{max(min(s.size) for s, _ in data)}, "
          f"max aspect {max(max(s.size) / min(s.size) for s, _ in data):.2f}")
    print("query forms:", dict(forms), f"empty {sum(not q.matches for _, q in data) / a.n:.1%}")
    print(f"distractors: shape {np.mean([o.shape not in SHAPES for o in objs]):.1%}, "
          f"colour {np.mean([o.colour not in COLOURS for o in objs]):.1%}")
    print("colours:", dict(Counter(o.colour for o in objs).most_common()))
    print("shapes:", dict(Counter(o.shape for o in objs).most_common()))
    if a.save:
        out = Path(a.save)
        out.mkdir(parents=True, exist_ok=True)
        per = Counter()
        for i, (s, q) in enumerate(data):
            if per[s.background] >= a.save_n:
                continue
            per[s.background] += 1
            s.image.save(out / f"{i:04d}_{s.background}.png")
            _draw_labels(s, q).save(out / f"{i:04d}_{s.background}_boxes.png")
        print(f"saved {sum(per.values())} scenes (+ boxes) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
