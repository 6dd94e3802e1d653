"""The ninth blind scene generator (evaluation only): shapes as stickers, cut-outs and small
3D-ish tokens lying on photograph-like procedural backgrounds.

Moved from docs/experiments/ninth_scenes.py in session 56: blind until session 52's decision, it is now a training
source too (`engine.train --foreign-from`, engine/training/foreign/__init__.py), so its figures are no
longer blind. Below, as it was written.

Written blind (from the vocabulary's definition, the dataclasses and `matches` only), to test
whether detect/point generalise to scenes unlike the ones the model learnt from.

What a scene looks like:

* Canvas 96-800 px a side, aspect ratio up to 3:1 (landscape or portrait).
* One of nine backgrounds, all muted and photograph-like, never flat:
  ``landscape`` (sky gradient with soft clouds, one or two hazy hill ridges, a textured field),
  ``room`` (painted wall with lamp falloff, skirting board, wooden plank floor in perspective),
  ``table`` (wood grain under a lamp spot), ``defocus`` (an out-of-focus "photo": smooth blended
  colour regions plus very soft bokeh glows), ``fabric`` (woven textile with folds), ``concrete``
  (speckled, stained, cracked), ``whiteboard`` (glare band and ghost marker strokes), ``brick``
  (brick wall with mortar) and ``lawn`` (grass texture with light patches).
* 0-25 objects; a third of the scenes are crowds of 11-25, often dominated by many copies of one
  kind (same shape and colour), or of one shape in many colours, or of one colour in many shapes.
* Vocabulary shapes (circle, square, triangle, star, cross, hexagon, diamond; square and
  diamond as the vocabulary defines them) in the eight vocabulary colours, each colour drawn
  from its own shade range here; also distractors: shapes pentagon, octagon, ellipse, rectangle,
  heart, arrow, ring, crescent, trapezoid, parallelogram, semicircle, l-shape, chevron, teardrop,
  and colours pink, cyan, brown, gray (any distractor shape may have a vocabulary colour and
  vice versa).
* Every object at any rotation, with a mild per-object affine distortion (shear and stretch of
  a few per cent, like a slightly oblique view), anti-aliased, in one of these looks: flat,
  die-cut sticker (thin white margin), bevelled 3D token (lit edges), glossy (shading gradient
  and a soft highlight), outlined (thin dark or light contour) or paper cut-out (fibre texture);
  often with a soft semi-transparent drop shadow from one scene light.
* Objects may overlap: a later object covers at most 18 % of an earlier one and never the part
  around its point; objects of the same or similar colour never touch.
* Sizes 2.5-40 % of the short side (circumscribed diameter), never below 8-24 px (by shape: 8 for
  a circle, 13-15 for cross / diamond / hexagon / star, more for the fussier distractors).
* Camera effects on the whole picture: colour cast, reduced contrast / exposure, vignetting,
  blur, sensor noise, JPEG. Each object's local contrast and the nameability of its colour (its
  median visible pixel colour lies in its name's hue / saturation / value window, is nearest its
  own reference shade in CIELAB and, for a vocabulary colour, nearest the project's canonical
  shade of that name) are checked on the final image; effects are weakened (or objects dropped)
  until they hold.

One query per scene: "colour shape" (~55 %), "shape" (~28 %) or "colour" (~17 %); about 20 % name
something absent, half of those near misses (a present shape in another colour, "diamond" where
squares are, "orange" where red is, "hexagon" where pentagons are, ...). Ground truth follows the
project's conventions: box = the whole (unoccluded) shape's pixels edge to edge (a pixel belongs
to the object when the shape, with its sticker margin or outline, covers at least half of it;
drop shadows are not the object), point = the visible pixel nearest the shape's centroid,
Query.matches = matches(text, objects).

    python -m engine.training.foreign.ninth [--seed 9999] [--n 300] [--save DIR]
"""

from __future__ import annotations

import io
import math
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage

from engine.training.scenes import COLOURS, Query, Scene, SceneObject, matches


# --------------------------------------------------------------------------- names and shades

VOCAB_SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
DISTRACTOR_SHAPES = ("pentagon", "octagon", "ellipse", "rectangle", "heart", "arrow", "ring", "crescent",
                     "trapezoid", "parallelogram", "semicircle", "l-shape", "chevron", "teardrop")
VOCAB_COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_COLOURS = ("pink", "cyan", "brown", "gray")

# HSV ranges (hue in degrees, saturation, value) of each name's shades in this generator.
SHADES: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    "red": ((-5, 5), (0.78, 0.93), (0.80, 0.93)),
    "orange": ((25, 32), (0.88, 1.0), (0.93, 1.0)),
    "yellow": ((50, 57), (0.80, 0.95), (0.93, 1.0)),
    "green": ((115, 138), (0.65, 0.85), (0.55, 0.75)),
    "blue": ((215, 228), (0.75, 0.90), (0.80, 0.95)),
    "purple": ((275, 288), (0.58, 0.75), (0.62, 0.80)),
    "white": ((0, 360), (0.0, 0.03), (0.96, 1.0)),
    "black": ((0, 360), (0.0, 0.15), (0.05, 0.12)),
    "pink": ((330, 345), (0.30, 0.42), (0.97, 1.0)),
    "cyan": ((183, 190), (0.78, 0.90), (0.82, 0.92)),
    "brown": ((22, 30), (0.62, 0.75), (0.38, 0.48)),
    "gray": ((0, 360), (0.0, 0.04), (0.47, 0.57)),
}
# The reference shade of each name (what a colour is judged against, in CIELAB).
CENTRES: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35), "orange": (250, 130, 20), "yellow": (245, 220, 35), "green": (40, 160, 60),
    "blue": (40, 85, 225), "purple": (140, 55, 190), "white": (245, 245, 245), "black": (20, 20, 20),
    "pink": (250, 160, 195), "cyan": (40, 200, 215), "brown": (125, 75, 35), "gray": (128, 128, 128),
}

# Smallest circumscribed diameter (px) at which each shape is drawn.
MIN_PX = {"circle": 8, "square": 9, "triangle": 11, "star": 15, "cross": 13, "hexagon": 14, "diamond": 13,
          "pentagon": 19, "octagon": 23, "ellipse": 14, "rectangle": 14, "heart": 16, "arrow": 24, "ring": 15,
          "crescent": 18, "trapezoid": 20, "parallelogram": 22, "semicircle": 14, "l-shape": 18,
          "chevron": 22, "teardrop": 18}
# Rotational symmetry period (degrees); 0: any rotation looks the same.
PERIOD = {"circle": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60, "diamond": 180,
          "pentagon": 72, "octagon": 45, "ellipse": 180, "rectangle": 180, "heart": 360, "arrow": 360, "ring": 0,
          "crescent": 360, "trapezoid": 360, "parallelogram": 180, "semicircle": 360, "l-shape": 360,
          "chevron": 360, "teardrop": 360}

# Near misses for absent queries: what a shape / colour is most easily taken for.
NEAR_SHAPE = {"square": ("diamond",), "diamond": ("square",), "circle": ("hexagon",), "hexagon": ("circle",),
              "star": ("cross",), "cross": ("star",), "triangle": ("diamond",), "pentagon": ("hexagon",),
              "octagon": ("hexagon", "circle"), "ellipse": ("circle",), "ring": ("circle",),
              "rectangle": ("square",), "parallelogram": ("diamond", "square"), "trapezoid": ("triangle",),
              "semicircle": ("circle",), "heart": ("circle",), "arrow": ("cross", "triangle"), "crescent": ("circle",),
              "l-shape": ("cross", "square"), "chevron": ("triangle",), "teardrop": ("circle",)}
NEAR_COLOUR = {"red": ("orange",), "orange": ("red", "yellow"), "yellow": ("orange",), "green": ("blue",),
               "blue": ("purple", "green"), "purple": ("blue",), "white": ("yellow",), "black": ("blue",),
               "pink": ("red", "purple"), "cyan": ("blue", "green"), "brown": ("orange", "red"),
               "gray": ("white", "black")}

BACKGROUNDS = ("landscape", "room", "table", "defocus", "fabric", "concrete", "whiteboard", "brick", "lawn")
LOOKS = ("flat", "sticker", "bevel", "glossy", "outline", "paper")

MAX_COVER = 0.18          # a later object hides at most this fraction of an earlier one


# --------------------------------------------------------------------------- colour helpers

def _hsv(h: float, s: float, v: float) -> np.ndarray:
    h = (h % 360) / 60.0
    i = int(h) % 6
    f = h - int(h)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    return np.array([(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i], np.float32)


def to_lab(rgb) -> np.ndarray:
    """sRGB (floats 0-1, last axis 3) -> CIELAB (D65)."""
    c = np.asarray(rgb, np.float64)
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


_CENTRE_NAMES = tuple(CENTRES)
_CENTRE_LAB = to_lab(np.array([CENTRES[n] for n in _CENTRE_NAMES]) / 255.0)
_CANON_NAMES = tuple(COLOURS)
_CANON = np.array([COLOURS[n] for n in _CANON_NAMES], np.float64) / 255.0


# What a measured colour must look like to be called by a name here: hue window (degrees),
# saturation range, value range (HSV); beside being nearest (CIELAB) to the name's reference shade.
NAMEABLE: dict[str, tuple[tuple[float, float] | None, tuple[float, float], tuple[float, float]]] = {
    "red": ((-14, 13), (0.55, 1), (0.6, 1)), "orange": ((19, 39), (0.6, 1), (0.8, 1)),
    "yellow": ((47, 63), (0.6, 1), (0.84, 1)), "green": ((95, 155), (0.4, 1), (0.4, 1)),
    "blue": ((205, 240), (0.45, 1), (0.55, 1)), "purple": ((262, 300), (0.35, 1), (0.45, 1)),
    "white": (None, (0, 0.1), (0.85, 1)), "black": (None, (0, 1), (0, 0.2)),
    "pink": ((318, 352), (0.18, 0.6), (0.8, 1)), "cyan": ((176, 198), (0.45, 1), (0.55, 1)),
    "brown": ((14, 40), (0.45, 1), (0.2, 0.6)), "gray": (None, (0, 0.1), (0.35, 0.7)),
}


def _to_hsv(rgb: np.ndarray) -> tuple[float, float, float]:
    r, g, b = (float(v) for v in np.clip(rgb, 0, 1))
    mx, mn = max(r, g, b), min(r, g, b)
    v, c = mx, mx - mn
    s = c / mx if mx > 0 else 0.0
    if c == 0:
        h = 0.0
    elif mx == r:
        h = 60 * (((g - b) / c) % 6)
    elif mx == g:
        h = 60 * ((b - r) / c + 2)
    else:
        h = 60 * ((r - g) / c + 4)
    return h, s, v


def colour_name_ok(rgb: np.ndarray, name: str, slack: float = 1.0) -> bool:
    """Is an sRGB colour (0-1) unmistakably `name`: nearest (CIELAB) to its reference shade, not far
    from it, and inside the name's hue / saturation / value window? A vocabulary colour must also be
    nearest (RGB) to the project's canonical shade of its name. `slack` < 1 is stricter."""
    if name in COLOURS and _CANON_NAMES[int(np.argmin(np.linalg.norm(_CANON - rgb, axis=1)))] != name:
        return False
    lab = to_lab(rgb)
    d = np.linalg.norm(_CENTRE_LAB - lab, axis=1)
    if _CENTRE_NAMES[int(np.argmin(d))] != name or d[_CENTRE_NAMES.index(name)] > 40 * slack:
        return False
    h, s, v = _to_hsv(rgb)
    hue, (s0, s1), (v0, v1) = NAMEABLE[name]
    e = 0.05 * (1 - slack)         # stricter: shrink the windows
    if not (s0 - e <= s <= s1 + e and v0 - e <= v <= v1 + e):
        return False
    if hue is not None:
        h0, h1 = hue[0] - 40 * e, hue[1] + 40 * e
        if not (h0 <= h <= h1 or h0 <= h - 360 <= h1):
            return False
    return True


def _shade(rng: np.random.Generator, name: str) -> np.ndarray:
    (h0, h1), (s0, s1), (v0, v1) = SHADES[name]
    for _ in range(40):
        c = _hsv(rng.uniform(h0, h1), rng.uniform(s0, s1), rng.uniform(v0, v1))
        if colour_name_ok(c, name, 0.5):
            return c
    return np.array(CENTRES[name], np.float32) / 255.0


# --------------------------------------------------------------------------- shape outlines

def _regular(n: int, start: float, r: float = 1.0) -> np.ndarray:
    a = np.radians(start + 360.0 / n * np.arange(n))
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


def _normalise(p: np.ndarray) -> np.ndarray:
    p = p - (p.min(0) + p.max(0)) / 2
    return p / np.max(np.linalg.norm(p, axis=1))


def outline(shape: str, rng: np.random.Generator) -> list[tuple[np.ndarray, bool]]:
    """Polygons (unit circumradius, y down, upright pose) and whether each fills (True) or cuts (False)."""
    circle = _regular(96, 0)
    if shape == "circle":
        return [(circle, True)]
    if shape == "square":
        return [(_regular(4, -45), True)]
    if shape == "triangle":
        return [(_regular(3, -90), True)]
    if shape == "hexagon":
        return [(_regular(6, -90), True)]
    if shape == "pentagon":
        return [(_regular(5, -90), True)]
    if shape == "octagon":
        return [(_regular(8, -90 + 22.5), True)]
    if shape == "star":
        outer, inner = _regular(5, -90), _regular(5, -54, rng.uniform(0.37, 0.47))
        return [(np.stack([outer, inner], 1).reshape(10, 2), True)]
    if shape == "cross":
        t = rng.uniform(0.28, 0.38)
        a = 1 / math.sqrt(1 + t * t)
        b = t * a
        return [(np.array([(-b, -a), (b, -a), (b, -b), (a, -b), (a, b), (b, b), (b, a), (-b, a), (-b, b),
                           (-a, b), (-a, -b), (-b, -b)]), True)]
    if shape == "diamond":
        r = rng.uniform(0.52, 0.70)
        return [(np.array([(0, -1), (r, 0), (0, 1), (-r, 0)], float), True)]
    if shape == "ellipse":
        q = rng.uniform(0.45, 0.65)
        return [(circle * np.array([1.0, q]), True)]
    if shape == "rectangle":
        q = rng.uniform(0.40, 0.62)
        c = 1 / math.sqrt(1 + q * q)
        return [(np.array([(-c, -q * c), (c, -q * c), (c, q * c), (-c, q * c)]), True)]
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 120, endpoint=False)
        p = np.stack([16 * np.sin(t) ** 3, -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))], 1)
        return [(_normalise(p), True)]
    if shape == "arrow":
        h = rng.uniform(0.15, 0.22)
        p = np.array([(-1, -h), (0.15, -h), (0.15, -0.5), (1, 0), (0.15, 0.5), (0.15, h), (-1, h)])
        return [(_normalise(p), True)]
    if shape == "ring":
        return [(circle, True), (circle * rng.uniform(0.50, 0.65), False)]
    if shape == "crescent":
        rho, off = rng.uniform(0.80, 0.90), rng.uniform(0.45, 0.60)
        return [(circle, True), (circle * rho + np.array([off, -0.1 * off]), False)]
    if shape == "trapezoid":
        h, tw = rng.uniform(0.7, 0.9), rng.uniform(0.5, 0.65)
        return [(_normalise(np.array([(-1, h / 2), (1, h / 2), (tw, -h / 2), (-tw, -h / 2)])), True)]
    if shape == "parallelogram":
        b, sh, h = 0.9, rng.uniform(0.4, 0.6), rng.uniform(0.3, 0.42)
        p = np.array([(-b - sh / 2, h), (b - sh / 2, h), (b + sh / 2, -h), (-b + sh / 2, -h)])
        return [(_normalise(p), True)]
    if shape == "semicircle":
        a = np.linspace(np.pi, 2 * np.pi, 60)
        return [(_normalise(np.stack([np.cos(a), np.sin(a)], 1)), True)]
    if shape == "l-shape":
        t = rng.uniform(0.38, 0.48)
        p = np.array([(0, 0), (t, 0), (t, 1.6 - t), (1.1, 1.6 - t), (1.1, 1.6), (0, 1.6)])
        return [(_normalise(p), True)]
    if shape == "chevron":
        t = rng.uniform(0.45, 0.6)
        p = np.array([(-0.5, -1), (-0.5 + t, -1), (0.5 + t, 0), (-0.5 + t, 1), (-0.5, 1), (0.5, 0)])
        return [(_normalise(p), True)]
    if shape == "teardrop":
        m = rng.uniform(1.0, 1.5)
        t = np.linspace(0, 2 * np.pi, 100, endpoint=False)
        p = np.stack([np.sin(t) * np.abs(np.sin(t / 2)) ** m, -np.cos(t)], 1)
        return [(_normalise(p), True)]
    raise ValueError(shape)


# --------------------------------------------------------------------------- backgrounds

def _field(rng: np.random.Generator, h: int, w: int, cells: float, octaves: int = 1) -> np.ndarray:
    """Smooth random field in about [-1, 1]: bicubic upsampling of a coarse random grid (summed octaves)."""
    out = np.zeros((h, w), np.float32)
    amp, total = 1.0, 0.0
    for o in range(octaves):
        c = cells * 2 ** o
        gh, gw = max(2, int(round(c * h / max(h, w))) + 2), max(2, int(round(c * w / max(h, w))) + 2)
        g = Image.fromarray(rng.standard_normal((gh, gw)).astype(np.float32), "F")
        out += amp * np.asarray(g.resize((w, h), Image.BICUBIC), np.float32)
        total += amp
        amp *= 0.5
    return out / (total * 1.2)


def _muted(rng: np.random.Generator, sat=(0.05, 0.35), val=(0.35, 0.85), hue=(0, 360)) -> np.ndarray:
    return _hsv(rng.uniform(*hue), rng.uniform(*sat), rng.uniform(*val))


def _grid(h: int, w: int):
    return np.mgrid[0:h, 0:w].astype(np.float32)


def _bg_landscape(rng, h, w):
    yy, _ = _grid(h, w)
    horizon = rng.uniform(0.35, 0.65) * h
    top, low = [(np.array([0.42, 0.58, 0.80]), np.array([0.80, 0.85, 0.90])),
                (np.array([0.55, 0.57, 0.62]), np.array([0.78, 0.78, 0.80])),
                (np.array([0.35, 0.36, 0.55]), np.array([0.90, 0.68, 0.52]))][rng.integers(3)]
    t = np.clip(yy / max(horizon, 1), 0, 1)[..., None]
    img = top * (1 - t) + low * t
    clouds = np.clip(_field(rng, h, w, rng.uniform(3, 7), 3) * 2.2 - 0.2, 0, 1)[..., None] * rng.uniform(0.3, 0.6)
    img = img * (1 - clouds) + 0.93 * clouds
    ground = _muted(rng, (0.25, 0.45), (0.35, 0.6), (40, 110))
    for layer in range(int(rng.integers(1, 3))):
        ridge = horizon - (0.04 + 0.1 * (1 - layer)) * h * (1 + _field(rng, 1, w, rng.uniform(2, 6), 2)[0])
        haze = 0.55 - 0.3 * layer
        col = _muted(rng, (0.1, 0.3), (0.35, 0.6), (90, 230)) * (1 - haze) + low * haze
        img = np.where((yy >= ridge[None, :])[..., None], col, img)
    field_t = np.clip((yy - horizon) / max(h - horizon, 1), 0, 1)[..., None]
    rows = np.sin(yy * rng.uniform(0.3, 0.8) + _field(rng, h, w, 4) * 6)
    tex = 1 + 0.08 * _field(rng, h, w, w / 6, 1)[..., None] + 0.06 * rows[..., None]
    gimg = (ground * (0.75 + 0.35 * field_t)) * tex
    return np.where((yy >= horizon)[..., None], gimg, img)


def _bg_room(rng, h, w):
    yy, xx = _grid(h, w)
    floor_y = rng.uniform(0.4, 0.7) * h
    wall = _muted(rng, (0.05, 0.3), (0.55, 0.85))
    lx, ly = rng.uniform(0.2, 0.8) * w, rng.uniform(-0.2, 0.2) * h
    lamp = np.exp(-(((xx - lx) ** 2 + (yy - ly) ** 2) / (2 * (0.6 * max(h, w)) ** 2)))
    img = wall * (0.7 + 0.35 * lamp)[..., None] * (1 + 0.02 * _field(rng, h, w, 20))[..., None]
    vx, vy = rng.uniform(0.2, 0.8) * w, floor_y - rng.uniform(0.6, 1.5) * h
    u = (xx - vx) / np.maximum(yy - vy, 1)
    k = rng.uniform(3, 9)
    idx = np.floor(u * k)
    wood = _muted(rng, (0.3, 0.55), (0.35, 0.65), (20, 40))
    var = 1 + 0.12 * np.sin(idx * 12.9898 + rng.uniform(0, 6)) + 0.04 * _field(rng, h, w, w / 25)
    gap = np.abs(u * k - idx - 0.5) > 0.5 - 0.015 * (yy - vy) / h
    depth = np.clip((yy - floor_y) / (h - floor_y + 1), 0, 1)
    fimg = wood * (var * (0.75 + 0.3 * depth) * np.where(gap, 0.7, 1.0))[..., None]
    img = np.where((yy >= floor_y)[..., None], fimg, img)
    board = (yy >= floor_y - max(2, 0.02 * h)) & (yy < floor_y)
    img[board] = _muted(rng, (0, 0.1), (0.2, 0.95))
    return img


def _bg_table(rng, h, w):
    yy, xx = _grid(h, w)
    a = rng.uniform(0, np.pi)
    v = -xx * np.sin(a) + yy * np.cos(a)                 # across the grain
    v = v + _field(rng, h, w, rng.uniform(1.5, 3), 2) * rng.uniform(8, 25)
    rings = (0.5 + 0.5 * np.sin(2 * np.pi * v / rng.uniform(7, 20))) ** 3
    n1 = rng.standard_normal(int((v.max() - v.min()) / 2) + 4)
    n1 = np.convolve(n1, np.ones(3) / 3, mode="same")
    streak = np.interp((v - v.min()) / 2, np.arange(len(n1)), n1).astype(np.float32)
    t = np.clip(0.22 * rings + 0.08 * streak + 0.25, 0, 1)[..., None]
    light, dark = _muted(rng, (0.3, 0.5), (0.62, 0.82), (22, 38)), _muted(rng, (0.45, 0.65), (0.3, 0.45), (18, 32))
    img = light * (1 - t) + dark * t
    lx, ly = rng.uniform(0, w), rng.uniform(0, h)
    spot = np.exp(-(((xx - lx) ** 2 + (yy - ly) ** 2) / (2 * (rng.uniform(0.3, 0.7) * max(h, w)) ** 2)))
    return img * (0.65 + 0.45 * spot)[..., None]


def _bg_defocus(rng, h, w):
    n = int(rng.integers(3, 5))
    cols = np.stack([_muted(rng, (0.1, 0.5), (0.25, 0.9)) for _ in range(n)])
    logits = np.stack([_field(rng, h, w, rng.uniform(1.5, 4), 2) * 6 for _ in range(n)], -1)
    wts = np.exp(logits - logits.max(-1, keepdims=True))
    img = (wts / wts.sum(-1, keepdims=True)) @ cols
    yy, xx = _grid(h, w)
    for _ in range(int(rng.integers(0, 6))):
        r = rng.uniform(0.1, 0.25) * min(h, w)
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        g = np.exp(-(((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r)))[..., None] * rng.uniform(0.1, 0.25)
        img = img * (1 - g) + _muted(rng, (0.0, 0.3), (0.8, 1.0)) * g
    return img


def _bg_fabric(rng, h, w):
    yy, xx = _grid(h, w)
    base = [np.array([0.30, 0.37, 0.50]), np.array([0.80, 0.76, 0.66]), np.array([0.45, 0.48, 0.42]),
            _muted(rng, (0.1, 0.4), (0.3, 0.75))][rng.integers(4)]
    p = rng.uniform(2.5, 6)
    warp = np.sin(2 * np.pi * xx / p) * ((np.floor(yy / p) + np.floor(xx / p)) % 2)
    weft = np.sin(2 * np.pi * yy / p) * (1 - (np.floor(yy / p) + np.floor(xx / p)) % 2)
    a = rng.uniform(0, np.pi)
    folds = np.sin((xx * np.cos(a) + yy * np.sin(a)) / max(h, w) * rng.uniform(4, 12) + 3 * _field(rng, h, w, 3))
    shade = (1 + 0.06 * (warp + weft)) * (0.85 + 0.15 * folds) * (1 + 0.04 * _field(rng, h, w, max(h, w) / 4))
    return base * shade[..., None]


def _bg_concrete(rng, h, w):
    base = _muted(rng, (0.0, 0.08), (0.45, 0.72))
    tex = 0.06 * _field(rng, h, w, 8, 4) + 0.05 * rng.standard_normal((h, w)).astype(np.float32)
    stains = np.clip(_field(rng, h, w, 3, 2), 0, 1) * rng.uniform(0.1, 0.25)
    img = base * (1 + tex - stains)[..., None]
    speck = rng.random((h, w)) < 0.01
    img[speck] *= 0.6
    im = Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8))
    d = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(0, 4))):
        x, y = rng.uniform(0, w), rng.uniform(0, h)
        ang = rng.uniform(0, 2 * np.pi)
        pts = [(x, y)]
        for _ in range(int(rng.integers(8, 30))):
            ang += rng.normal(0, 0.5)
            x, y = x + 4 * np.cos(ang), y + 4 * np.sin(ang)
            pts.append((x, y))
        d.line(pts, fill=tuple(int(c * 255 * 0.55) for c in base), width=1)
    return np.asarray(im, np.float32) / 255.0


def _bg_whiteboard(rng, h, w):
    yy, xx = _grid(h, w)
    base = rng.uniform(0.86, 0.95)
    a = rng.uniform(0, np.pi)
    v = (xx * np.cos(a) + yy * np.sin(a)) / max(h, w)
    glare = np.exp(-((v - rng.uniform(0.2, 0.8)) ** 2) / (2 * rng.uniform(0.05, 0.15) ** 2)) * 0.08
    img = np.full((h, w, 3), base, np.float32) * np.array([1.0, 1.0, rng.uniform(0.97, 1.03)]) + glare[..., None]
    img = img * (1 - 0.08 * v)[..., None]
    ghost = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(ghost)
    for _ in range(int(rng.integers(1, 6))):
        x, y = rng.uniform(0, w), rng.uniform(0, h)
        pts = [(x, y)]
        ang = rng.uniform(0, 2 * np.pi)
        for _ in range(int(rng.integers(5, 20))):
            ang += rng.normal(0, 0.6)
            x, y = x + 0.03 * w * np.cos(ang), y + 0.03 * w * np.sin(ang)
            pts.append((x, y))
        d.line(pts, fill=255, width=int(max(2, 0.012 * max(h, w))), joint="curve")
    g = np.asarray(ghost.filter(ImageFilter.GaussianBlur(2)), np.float32)[..., None] / 255 * rng.uniform(0.06, 0.14)
    ink = _muted(rng, (0.0, 0.4), (0.2, 0.5), (200, 240))
    return img * (1 - g) + ink * g


def _bg_brick(rng, h, w):
    yy, xx = _grid(h, w)
    bh = rng.uniform(0.05, 0.12) * min(h, w) + 4
    bw = bh * rng.uniform(2.0, 3.0)
    row = np.floor(yy / bh)
    xs = xx + (row % 2) * bw / 2
    col = np.floor(xs / bw)
    mortar_w = max(1.0, bh * 0.08)
    mortar = ((yy - row * bh) < mortar_w) | ((xs - col * bw) < mortar_w)
    base = _muted(rng, (0.3, 0.5), (0.35, 0.55), (5, 30))
    jitter = np.sin(row * 78.233 + col * 12.9898) * 43758.5453
    jitter = (jitter - np.floor(jitter)) - 0.5
    img = base * (1 + 0.25 * jitter + 0.06 * _field(rng, h, w, max(h, w) / 5))[..., None]
    img = np.where(mortar[..., None], _muted(rng, (0.0, 0.1), (0.6, 0.8)), img)
    light = 0.8 + 0.25 * _field(rng, h, w, 1.5)
    return img * light[..., None]


def _bg_lawn(rng, h, w):
    base = _muted(rng, (0.35, 0.55), (0.30, 0.50), (75, 110))
    blades = np.asarray(Image.fromarray(rng.standard_normal((max(2, h // 3), w)).astype(np.float32), "F")
                        .resize((w, h), Image.BICUBIC), np.float32)
    patches = _field(rng, h, w, 3, 2)
    return base * (1 + 0.12 * blades + 0.25 * patches)[..., None]


_BG = {"landscape": _bg_landscape, "room": _bg_room, "table": _bg_table, "defocus": _bg_defocus,
       "fabric": _bg_fabric, "concrete": _bg_concrete, "whiteboard": _bg_whiteboard, "brick": _bg_brick,
       "lawn": _bg_lawn}


def background(kind: str, rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """H x W x 3 float32 image in [0, 1]."""
    return np.clip(_BG[kind](rng, h, w), 0, 1).astype(np.float32)


# --------------------------------------------------------------------------- objects

class _Sprite:
    """One object rendered on its own patch: coverage, mask, colours, ring around it."""

    def __init__(self, shape, colour, rgb, radius, angle, distort, look, light, rng):
        self.shape, self.colour, self.rgb = shape, colour, rgb
        self.radius, self.angle, self.look = radius, angle, look
        ops = outline(shape, rng)
        rot = np.array([[math.cos(math.radians(angle)), -math.sin(math.radians(angle))],
                        [math.sin(math.radians(angle)), math.cos(math.radians(angle))]])
        mat = distort @ rot * radius
        ops = [(p @ mat.T, fill) for p, fill in ops]
        pts = np.concatenate([p for p, _ in ops])
        d = 2 * radius
        self.border = int(max(1, round(0.05 * d))) if look == "sticker" and d >= 24 and colour != "white" else 0
        margin = self.border + 5
        lo, hi = pts.min(0), pts.max(0)
        fx, fy = rng.random(2)
        self.centre = np.array([-lo[0] + margin + fx, -lo[1] + margin + fy])
        pw, ph = int(math.ceil(hi[0] - lo[0] + 2 * margin + 1)), int(math.ceil(hi[1] - lo[1] + 2 * margin + 1))
        self.size_px = 2 * float(np.max(np.linalg.norm(pts, axis=1)))
        k = 4 if max(pw, ph) <= 150 else 3 if max(pw, ph) <= 240 else 2
        im = Image.new("L", (pw * k, ph * k), 0)
        dr = ImageDraw.Draw(im)
        for p, fill in ops:
            q = (p + self.centre) * k - 0.5
            dr.polygon([tuple(v) for v in q], fill=255 if fill else 0)
        ss = np.asarray(im) > 127
        cov = ss.reshape(ph, k, pw, k).mean((1, 3))
        if self.border:
            st = ndimage.distance_transform_edt(~ss) <= self.border * k
            cov_all = st.reshape(ph, k, pw, k).mean((1, 3))
        else:
            cov_all = cov
        self.mask = cov_all >= 0.5
        shape_mask = cov >= 0.5
        self.ok = bool(shape_mask.sum() >= 6)
        if not self.ok:
            return
        # colours
        yy, xx = _grid(ph, pw)
        cx, cy = self.centre
        lx, ly = light
        f = np.ones((ph, pw), np.float32)
        d_in = ndimage.distance_transform_edt(shape_mask)
        g = {"flat": rng.uniform(0, 0.05), "sticker": rng.uniform(0, 0.06), "bevel": rng.uniform(0.03, 0.09),
             "glossy": rng.uniform(0.08, 0.15), "outline": rng.uniform(0, 0.06), "paper": rng.uniform(0, 0.05)}[look]
        f *= 1 + g * ((xx - cx) * lx + (yy - cy) * ly) / radius
        if look == "bevel" and d >= 16:
            bw = max(1.5, 0.1 * d)
            gy, gx = np.gradient(d_in)
            n = np.hypot(gx, gy) + 1e-6
            dot = (-gx * lx - gy * ly) / n
            f *= 1 + rng.uniform(0.2, 0.32) * dot * np.clip(1 - (d_in - 1) / bw, 0, 1)
        if look == "paper":
            f *= 1 + 0.05 * _field(rng, ph, pw, max(ph, pw) / 2)
        if colour == "white":
            f = np.clip(f, 0.92, 1.2)
        base = np.asarray(rgb, np.float32)
        if colour == "black":
            col = base + 0.25 * (f - 1)[..., None]
        else:
            col = base * f[..., None]
        if look == "glossy" and d >= 16:
            hx, hy = cx + 0.4 * radius * lx, cy + 0.4 * radius * ly
            s = 0.22 * radius
            hl = np.exp(-((xx - hx) ** 2 + (yy - hy) ** 2) / (2 * s * s)) * rng.uniform(0.2, 0.35)
            col = col * (1 - hl[..., None]) + hl[..., None]
        self.interior = shape_mask.copy()
        if look == "outline" and d >= 20:
            ow = 1 if d < 40 else 2
            edge = shape_mask & (d_in <= ow)
            oc = (np.array([0.8, 0.8, 0.8]) if colour == "black" else np.array([0.25, 0.25, 0.25]) if colour == "white"
                  else base * rng.uniform(0.25, 0.45) if rng.random() < 0.6 else np.array([0.06, 0.06, 0.06]))
            col[edge] = oc
            self.interior = shape_mask & (d_in > ow)
        col = np.clip(col, 0, 1)
        bcol = np.array([0.97, 0.97, 0.95], np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            mix = np.where(cov_all > 0, cov / np.maximum(cov_all, 1e-6), 1)[..., None]
        self.colours = (col * mix + bcol * (1 - mix)).astype(np.float32)
        self.alpha = np.where(cov_all > 0.97, 1.0, cov_all).astype(np.float32)
        if not self.interior.any():
            self.interior = shape_mask
        self.med = np.median(self.colours[self.interior], axis=0)
        self.lab = to_lab(self.med)
        self.dil = ndimage.binary_dilation(self.mask, iterations=2)
        self.ring = ndimage.binary_dilation(self.mask, iterations=4) & ~self.dil | (self.dil & ~self.mask)
        self.area = int(self.mask.sum())
        # the protected core: mask pixels near the pixel nearest the centroid (the point's neighbourhood)
        rr, cc = np.nonzero(self.mask)
        my, mx = rr.mean(), cc.mean()
        j = np.argmin((rr - my) ** 2 + (cc - mx) ** 2)
        self.core = self.mask & (((yy - rr[j]) ** 2 + (xx - cc[j]) ** 2) <= max(2.0, 0.2 * self.size_px) ** 2)
        self.shape_ph, self.shape_pw = ph, pw


def _tilt(shape: str, angle: float) -> float:
    p = PERIOD[shape]
    if p == 0:
        return 0.0
    t = angle % p
    return float(min(t, p - t))


def _de(lab_a: np.ndarray, lab_b: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(lab_a) - np.asarray(lab_b), axis=-1)


# --------------------------------------------------------------------------- scene

def _canvas(rng: np.random.Generator) -> tuple[int, int]:
    long = float(np.exp(rng.uniform(np.log(120), np.log(800))))
    aspect = 1.0 if rng.random() < 0.3 else float(np.exp(rng.uniform(0, np.log(3))))
    short = long / aspect
    if short < 96:
        short, long = 96, min(800, 96 * aspect)
    w, h = int(round(long)), int(round(short))
    w = min(w, 3 * h)
    return (w, h) if rng.random() < 0.65 else (h, w)


def _kinds(rng: np.random.Generator, n: int) -> list[tuple[str, str]]:
    def shape():
        return str(rng.choice(VOCAB_SHAPES)) if rng.random() < 0.66 else str(rng.choice(DISTRACTOR_SHAPES))

    def colour():
        return str(rng.choice(VOCAB_COLOURS)) if rng.random() < 0.76 else str(rng.choice(DISTRACTOR_COLOURS))

    kinds = [(shape(), colour()) for _ in range(n)]
    if n >= 8:
        r = rng.random()
        frac = rng.uniform(0.4, 0.85)
        if r < 0.55:         # many copies of one kind
            dom = (str(rng.choice(VOCAB_SHAPES)) if rng.random() < 0.85 else shape(), colour())
            kinds = [dom if rng.random() < frac else k for k in kinds]
        elif r < 0.75:       # one shape, many colours
            s = shape()
            kinds = [(s, c) if rng.random() < frac else (s2, c) for s2, c in kinds]
        elif r < 0.9:        # one colour, many shapes
            c = colour()
            kinds = [(s, c) if rng.random() < frac else (s, c2) for s, c2 in kinds]
    return kinds


def _count(rng: np.random.Generator) -> int:
    r = rng.random()
    if r < 0.04:
        return 0
    if r < 0.30:
        return int(rng.integers(1, 4))
    if r < 0.66:
        return int(rng.integers(4, 11))
    return int(rng.integers(11, 26))


def _size_range(n: int) -> tuple[float, float]:
    return (0.06, 0.40) if n <= 3 else (0.04, 0.22) if n <= 10 else (0.025, 0.13)


def _effects(img: np.ndarray, fx: dict, level: float, rng_seed) -> Image.Image:
    """Camera effects, scaled by level (1: as drawn, 0: none)."""
    out = img.copy()
    if level > 0:
        if "cast" in fx:
            out = out * (1 + level * (fx["cast"] - 1))
        if "contrast" in fx:
            c, b = fx["contrast"]
            c, b = 1 + level * (c - 1), 1 + level * (b - 1)
            out = (0.5 + c * (out - 0.5)) * b
        if "vignette" in fx:
            h, w = out.shape[:2]
            yy, xx = _grid(h, w)
            r2 = ((xx - w / 2) / (w / 2)) ** 2 + ((yy - h / 2) / (h / 2)) ** 2
            out = out * (1 - level * fx["vignette"] * r2 / 2)[..., None]
    pil = Image.fromarray((np.clip(out, 0, 1) * 255 + 0.5).astype(np.uint8))
    if level > 0 and "blur" in fx:
        pil = pil.filter(ImageFilter.GaussianBlur(fx["blur"] * level))
    if level > 0 and "noise" in fx:
        a = np.asarray(pil, np.float32)
        nrng = np.random.default_rng(rng_seed)
        a += nrng.standard_normal(a.shape, dtype=np.float32) * np.float32(fx["noise"] * level * 255)
        pil = Image.fromarray(np.clip(a + 0.5, 0, 255).astype(np.uint8))
    if level > 0 and "jpeg" in fx:
        buf = io.BytesIO()
        pil.save(buf, "JPEG", quality=int(round(95 - level * (95 - fx["jpeg"]))))
        pil = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return pil


def _check(arr: np.ndarray, placed, lab_map: np.ndarray) -> list[int]:
    """Indices of objects whose visible colour is not clearly their name, or that do not stand out."""
    bad = []
    for i, (sp, ox, oy) in enumerate(placed):
        ph, pw = sp.mask.shape
        sub = lab_map[oy:oy + ph, ox:ox + pw]
        vis = sub == i
        inner = vis & sp.interior
        inner_e = ndimage.binary_erosion(inner) if inner.sum() > 30 else inner
        if inner_e.sum() < 3:
            inner_e = vis
        pix = arr[oy:oy + ph, ox:ox + pw]
        med = np.median(pix[inner_e], axis=0)
        lab = to_lab(med)
        ring = ndimage.binary_dilation(vis, iterations=2) & ~vis
        rl = to_lab(pix[ring])
        de = _de(rl, lab)
        if (not colour_name_ok(med, sp.colour)) or np.median(de) < 24 or np.mean(de < 14) > 0.2:
            bad.append(i)
    return bad


def _place(rng, sprite, canvas, lab_map, core_map, placed, covered, overlap, near_to):
    h, w = lab_map.shape
    ph, pw = sprite.mask.shape
    if ph >= h or pw >= w:
        return None
    for attempt in range(40):
        if near_to is not None and attempt < 15 and placed:
            sp2, ox2, oy2 = placed[int(rng.integers(len(placed)))]
            c2 = np.array([ox2, oy2]) + sp2.centre
            ang = rng.uniform(0, 2 * np.pi)
            dist = (sp2.size_px + sprite.size_px) / 2 * rng.uniform(0.6, 0.95)
            c = c2 + dist * np.array([np.cos(ang), np.sin(ang)])
            ox, oy = int(round(c[0] - sprite.centre[0])), int(round(c[1] - sprite.centre[1]))
            if not (0 <= ox <= w - pw and 0 <= oy <= h - ph):
                continue
        else:
            ox, oy = int(rng.integers(0, w - pw + 1)), int(rng.integers(0, h - ph + 1))
        sub = lab_map[oy:oy + ph, ox:ox + pw]
        touch = np.unique(sub[sprite.dil])
        touch = touch[touch >= 0]
        if len(touch) and not overlap:
            continue
        fine = True
        for j in touch:
            sp2 = placed[j][0]
            if sp2.colour == sprite.colour or _de(sp2.lab, sprite.lab) < 45:
                fine = False
                break
        if not fine:
            continue
        under = sub[sprite.mask]
        for j in np.unique(under[under >= 0]):
            if covered[j] + int((under == j).sum()) > MAX_COVER * placed[j][0].area:
                fine = False
                break
        if not fine or core_map[oy:oy + ph, ox:ox + pw][sprite.mask].any():
            continue
        ring = canvas[oy:oy + ph, ox:ox + pw][sprite.ring]
        de = _de(to_lab(ring), sprite.lab)
        if np.median(de) < 32 or np.mean(de < 18) > 0.12:
            continue
        return ox, oy
    return None


def _shadow(canvas, lab_map, sprite, ox, oy, light, strength):
    h, w = lab_map.shape
    d = sprite.size_px
    off = -np.array(light) * (0.06 * d + 1.0)
    sigma = 0.03 * d + 0.7
    pad = int(math.ceil(np.abs(off).max() + 3 * sigma)) + 1
    ph, pw = sprite.mask.shape
    big = np.zeros((ph + 2 * pad, pw + 2 * pad), np.float32)
    dy, dx = int(round(off[1])), int(round(off[0]))
    big[pad + dy:pad + dy + ph, pad + dx:pad + dx + pw] = sprite.alpha
    big = ndimage.gaussian_filter(big, sigma)
    y0, x0 = oy - pad, ox - pad
    ys, xs = max(0, y0), max(0, x0)
    ye, xe = min(h, y0 + big.shape[0]), min(w, x0 + big.shape[1])
    b = big[ys - y0:ye - y0, xs - x0:xe - x0]
    free = (lab_map[ys:ye, xs:xe] < 0)
    canvas[ys:ye, xs:xe] *= (1 - strength * b * free)[..., None]


def _compose(bg, placed, light, shadow_strength):
    h, w = bg.shape[:2]
    canvas = bg.copy()
    lab_map = np.full((h, w), -1, np.int32)
    for i, (sp, ox, oy) in enumerate(placed):
        if shadow_strength[i] > 0:
            _shadow(canvas, lab_map, sp, ox, oy, light, shadow_strength[i])
        ph, pw = sp.mask.shape
        a = sp.alpha[..., None]
        region = canvas[oy:oy + ph, ox:ox + pw]
        canvas[oy:oy + ph, ox:ox + pw] = region * (1 - a) + sp.colours * a
        lab_map[oy:oy + ph, ox:ox + pw][sp.mask] = i
    return canvas, lab_map


def _query(rng: np.random.Generator, objects: tuple[SceneObject, ...]) -> str:
    def absent(texts):
        return [t for t in dict.fromkeys(texts) if not matches(t, objects)]

    r = rng.random()
    form = "colour shape" if r < 0.55 else "shape" if r < 0.83 else "colour"
    want_absent = rng.random() < 0.17
    present = []
    for o in objects:
        cs, ss = o.colour in VOCAB_COLOURS, o.shape in VOCAB_SHAPES
        if form == "colour shape" and cs and ss:
            present.append(f"{o.colour} {o.shape}")
        elif form == "shape" and ss:
            present.append(o.shape)
        elif form == "colour" and cs:
            present.append(o.colour)
    if not present and not want_absent:
        present = [o.shape for o in objects if o.shape in VOCAB_SHAPES] + [o.colour for o in objects if o.colour in VOCAB_COLOURS]
    if present and not want_absent:
        return str(present[int(rng.integers(len(present)))])
    near: list[str] = []
    for o in objects:
        vc = [o.colour] if o.colour in VOCAB_COLOURS else [c for c in NEAR_COLOUR[o.colour]]
        for s in NEAR_SHAPE[o.shape]:
            near += [s] + [f"{c} {s}" for c in vc]
        for c in NEAR_COLOUR[o.colour]:
            near += [c] + ([f"{c} {o.shape}"] if o.shape in VOCAB_SHAPES else [])
        if o.shape in VOCAB_SHAPES:
            near += [f"{c} {o.shape}" for c in VOCAB_COLOURS if c != o.colour]
    near = absent(near)
    if near and (rng.random() < 0.6 or not want_absent):
        return str(near[int(rng.integers(len(near)))])
    pool = absent([*VOCAB_SHAPES, *VOCAB_COLOURS, *(f"{c} {s}" for c in VOCAB_COLOURS for s in VOCAB_SHAPES)])
    if form == "shape":
        pool = [t for t in pool if t in VOCAB_SHAPES] or pool
    elif form == "colour":
        pool = [t for t in pool if t in VOCAB_COLOURS] or pool
    else:
        pool = [t for t in pool if " " in t] or pool
    return str(pool[int(rng.integers(len(pool)))])


def ninth_pair(seed: int, i: int) -> tuple[Scene, Query]:
    """Scene and query number `i` of the stream `seed` (depends on (seed, i) only)."""
    rng = np.random.default_rng([int(seed) & 0x7FFFFFFFFFFFFFFF, int(i), 9])
    w, h = _canvas(rng)
    kind = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    bg = background(kind, rng, h, w)
    n = _count(rng)
    kinds = _kinds(rng, n)
    short = min(w, h)
    lo, hi = _size_range(n)
    scene_look = str(rng.choice(LOOKS + ("mixed",)))
    phi = np.radians(rng.uniform(-135 - 60, -135 + 60))
    light = (float(np.cos(phi)), float(np.sin(phi)))          # unit vector towards the light
    shadow_p = {"sticker": 0.8, "paper": 0.8}.get(scene_look, 0.45)
    shadow_on = rng.random() < shadow_p
    overlap = rng.random() < 0.45
    copy_size = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    canvas = bg.copy()
    lab_map = np.full((h, w), -1, np.int32)
    core_map = np.zeros((h, w), bool)
    placed: list[tuple[_Sprite, int, int]] = []
    covered: list[int] = []
    meta: list[tuple[float, float]] = []         # (angle, shadow strength)
    kind_counts = Counter(kinds)
    for shape, colour in kinds:
        look = str(rng.choice(LOOKS)) if scene_look == "mixed" or rng.random() < 0.2 else scene_look
        if kind_counts[(shape, colour)] >= 4 and rng.random() < 0.6:
            s = copy_size * rng.uniform(0.85, 1.15)
        else:
            s = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        d = max(s * short, MIN_PX[shape])
        d = min(d, 0.42 * short)
        if d < MIN_PX[shape]:
            continue
        rgb = _shade(rng, colour)
        for _shrink in range(3):
            angle = float(rng.uniform(0, 360))
            a = float(np.exp(rng.uniform(-0.045, 0.045)))
            sh = float(rng.uniform(-0.06, 0.06))
            if shape == "circle":
                a, sh = float(np.exp(rng.uniform(-0.02, 0.02))), sh / 2
            distort = np.array([[a, sh], [0, 1 / a]])
            sp = _Sprite(shape, colour, rgb, d / 2, angle, distort, look, light, rng)
            if not sp.ok or not colour_name_ok(sp.med, colour, 0.8):
                look = "flat"
                continue
            near_to = True if overlap and placed and rng.random() < 0.4 else None
            pos = _place(rng, sp, canvas, lab_map, core_map, placed, covered, overlap, near_to)
            if pos is not None:
                ox, oy = pos
                strength = float(rng.uniform(0.22, 0.42)) if shadow_on and d >= 12 else 0.0
                if strength:
                    _shadow(canvas, lab_map, sp, ox, oy, light, strength)
                ph, pw = sp.mask.shape
                sub = lab_map[oy:oy + ph, ox:ox + pw]
                under = sub[sp.mask]
                for j in np.unique(under[under >= 0]):
                    covered[j] += int((under == j).sum())
                al = sp.alpha[..., None]
                canvas[oy:oy + ph, ox:ox + pw] = canvas[oy:oy + ph, ox:ox + pw] * (1 - al) + sp.colours * al
                sub[sp.mask] = len(placed)
                core_map[oy:oy + ph, ox:ox + pw] |= sp.core
                placed.append((sp, ox, oy))
                covered.append(0)
                meta.append((angle, strength))
                break
            if d * 0.8 < MIN_PX[shape]:
                break
            d *= 0.8

    fx: dict = {}
    if rng.random() < 0.5:
        g = rng.uniform(0.92, 1.08, 3)
        fx["cast"] = (g / g.mean()).astype(np.float32)
    if rng.random() < 0.35:
        fx["contrast"] = (rng.uniform(0.72, 0.95), rng.uniform(0.85, 1.08))
    if rng.random() < 0.35:
        fx["vignette"] = rng.uniform(0.08, 0.22)
    dmin = min((sp.size_px for sp, _, _ in placed), default=100.0)
    if rng.random() < 0.35 and dmin >= 12:
        fx["blur"] = rng.uniform(0.3, 1.0) * min(1.0, 0.035 * dmin)
    if rng.random() < 0.6:
        fx["noise"] = rng.uniform(0.005, 0.03)
    if rng.random() < 0.6:
        fx["jpeg"] = int(rng.integers(40 if dmin >= 24 else 60, 91))
    noise_seed = [int(seed) & 0x7FFFFFFFFFFFFFFF, int(i), 99]

    for _round in range(4):
        shadows = [m[1] for m in meta]
        final, lab_map = _compose(bg, placed, light, shadows)
        for level in (1.0, 0.5, 0.0):
            img = _effects(final, fx, level, noise_seed)
            bad = _check(np.asarray(img, np.float32) / 255.0, placed, lab_map)
            if not bad:
                break
        if not bad:
            break
        keep = [j for j in range(len(placed)) if j not in set(bad)]
        placed = [placed[j] for j in keep]
        meta = [meta[j] for j in keep]
    else:
        placed, meta = [], []
        final, lab_map = _compose(bg, placed, light, [])
        img = _effects(final, fx, 0.0, noise_seed)

    objects = []
    for idx, ((sp, ox, oy), (angle, _)) in enumerate(zip(placed, meta)):
        rr, cc = np.nonzero(sp.mask)
        r0, r1, c0, c1 = rr.min(), rr.max(), cc.min(), cc.max()
        box = ((ox + c0) / w, (oy + r0) / h, (ox + c1 + 1) / w, (oy + r1 + 1) / h)
        ph, pw = sp.mask.shape
        vis = lab_map[oy:oy + ph, ox:ox + pw] == idx
        inner = ndimage.binary_erosion(vis)
        cand = inner if inner.any() else vis
        vr, vc = np.nonzero(cand)
        k = np.argmin((vr - rr.mean()) ** 2 + (vc - cc.mean()) ** 2)
        point = ((ox + vc[k] + 0.5) / w, (oy + vr[k] + 0.5) / h)
        objects.append(SceneObject(
            shape=sp.shape, colour=sp.colour, box=tuple(float(v) for v in box), point=tuple(float(v) for v in point),
            rgb=tuple(int(round(float(v) * 255)) for v in sp.rgb), tilt=_tilt(sp.shape, angle),
            size=float(sp.size_px / short), mask=sp.mask[r0:r1 + 1, c0:c1 + 1].copy()))
    objects_t = tuple(objects)
    scene = Scene(image=img, objects=objects_t, background=kind)
    text = _query(rng, objects_t)
    return scene, Query(text=text, matches=matches(text, objects_t))


def ninth_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    return [ninth_pair(seed, i) for i in range(n)]


def near_miss(text: str, objects) -> bool:
    """Does an (absent) query name something close to a present object: its shape in another colour,
    its colour on another shape, or a shape / colour it is easily taken for?"""
    words = text.split()
    colour = words[0] if words[0] in VOCAB_COLOURS else None
    shape = words[-1] if words[-1] in VOCAB_SHAPES else None
    for o in objects:
        if shape is not None and (shape == o.shape or shape in NEAR_SHAPE[o.shape]):
            if colour is None or colour == o.colour or colour in NEAR_COLOUR[o.colour]:
                return True
        if colour is not None and (colour == o.colour or colour in NEAR_COLOUR[o.colour]):
            if shape is None or shape == o.shape or shape in NEAR_SHAPE[o.shape]:
                return True
    return False


def crowd(n: int) -> str:
    return "0" if n == 0 else "1" if n == 1 else "2-4" if n <= 4 else "5-10" if n <= 10 else "11-25"


def _summary(data: list[tuple[Scene, Query]]) -> None:
    shapes, colours, bgs, crowds, forms = Counter(), Counter(), Counter(), Counter(), Counter()
    absent = near = occluded = 0
    sizes, obj_sizes = [], []
    for scene, q in data:
        bgs[scene.background] += 1
        crowds[crowd(len(scene.objects))] += 1
        forms["colour shape" if " " in q.text else "colour" if q.text in VOCAB_COLOURS else "shape"] += 1
        absent += not q.matches
        near += not q.matches and near_miss(q.text, scene.objects)
        sizes.append(scene.image.size)
        w, h = scene.image.size
        for k, o in enumerate(scene.objects):
            shapes[o.shape] += 1
            colours[o.colour] += 1
            obj_sizes.append(o.size)
            x0, y0 = round(o.box[0] * w), round(o.box[1] * h)
            hid = np.zeros_like(o.mask)
            for o2 in scene.objects[k + 1:]:
                a, b = round(o2.box[0] * w), round(o2.box[1] * h)
                ys, xs = max(y0, b), max(x0, a)
                ye, xe = min(y0 + o.mask.shape[0], b + o2.mask.shape[0]), min(x0 + o.mask.shape[1], a + o2.mask.shape[1])
                if ys < ye and xs < xe:
                    hid[ys - y0:ye - y0, xs - x0:xe - x0] |= o2.mask[ys - b:ye - b, xs - a:xe - a]
            occluded += bool((hid & o.mask).any())
    fmt = lambda c: ", ".join(f"{k} {v}" for k, v in c.most_common())  # noqa: E731
    n_obj = sum(shapes.values())
    print(f"{len(data)} scenes, {n_obj} objects ({sum(shapes[s] for s in VOCAB_SHAPES) / max(n_obj, 1):.0%} vocabulary shapes, "
          f"{sum(colours[c] for c in VOCAB_COLOURS) / max(n_obj, 1):.0%} vocabulary colours)")
    print("shapes:      ", fmt(shapes))
    print("colours:     ", fmt(colours))
    print("backgrounds: ", fmt(bgs))
    print("crowd:       ", ", ".join(f"{k} {crowds[k]}" for k in ("0", "1", "2-4", "5-10", "11-25")))
    print("query forms: ", fmt(forms), f"; absent {absent} ({absent / max(len(data), 1):.0%}, near misses {near})")
    if obj_sizes:
        q = np.percentile(obj_sizes, [0, 50, 100])
        print(f"object size:  {q[0]:.3f} / {q[1]:.3f} / {q[2]:.3f} of the short side (min / median / max); "
              f"{occluded} objects partly covered by a later one")
    ws, hs = zip(*sizes)
    print(f"canvas:       width {min(ws)}-{max(ws)}, height {min(hs)}-{max(hs)}, "
          f"max aspect {max(max(a, b) / min(a, b) for a, b in sizes):.2f}")


if __name__ == "__main__":
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=9999)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--save", default=None, help="write the first 12 images (with boxes drawn) here")
    a = ap.parse_args()
    t0 = time.perf_counter()
    batch = ninth_batch(a.seed, a.n)
    print(f"generated {a.n} scenes in {time.perf_counter() - t0:.1f}s")
    _summary(batch)
    if a.save:
        out = Path(a.save)
        out.mkdir(parents=True, exist_ok=True)
        for i, (scene, q) in enumerate(batch[:12]):
            scene.image.save(out / f"{i:02d}.png")
            im = scene.image.copy()
            dr = ImageDraw.Draw(im)
            W, H = im.size
            for o in scene.objects:
                x0, y0, x1, y1 = o.box
                dr.rectangle([x0 * W - 1, y0 * H - 1, x1 * W, y1 * H], outline=(255, 0, 255))
                px, py = o.point[0] * W, o.point[1] * H
                dr.point([(px, py)], fill=(0, 255, 0))
            im.save(out / f"{i:02d}_boxes.png")
            print(i, scene.background, im.size, repr(q.text), len(q.matches), "of", len(scene.objects),
                  "|", ", ".join(o.name for o in scene.objects))
