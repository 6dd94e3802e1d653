"""The tenth blind scene generator: shapes in things people photograph or screenshot.

Moved from docs/experiments/tenth_scenes.py in session 56: blind until session 53's decision, it is now a training
source too (`engine.train --foreign-from`, engine/training/foreign/__init__.py), so its figures are no
longer blind. Below, as it was written.

Written blind (without reading how the project's other generators draw their scenes), for
evaluation only. Every scene is one of seven kinds (``Scene.background``):

* ``worksheet``  a printed children's worksheet, scanned (slight skew, scanner streaks, a dark
  lid edge) or photographed on a desk (a few degrees of perspective, page-curl shading, uneven
  light, a soft shadow); paper tone, a title, a name/date line, instruction lines, a frame; the
  shapes are filled printed shapes, sometimes with a dark printed outline and ink mottling;
* ``app_ui``     a flat-design editor / diagram screenshot: title and menu bar, a layers panel, a
  properties panel with sliders, a status bar, a canvas grid or dot grid or a white artboard,
  text labels next to the shapes, thin connector lines; light or dark theme; crisp or
  anti-aliased shapes, sometimes with a stroke or a soft UI shadow; occasionally resampled;
* ``neon``       neon signs at night on a dark brick or concrete wall: filled neon shapes with a
  glow halo (the object is the filled shape, not the halo), a street-light gradient, sensor noise;
* ``magnets``    fridge magnets / toy pieces photographed on a white, steel or black fridge door (with
  a handle), a carpet or a wooden floor: drop shadows, bevelled edges, specular highlights,
  lighting gradients, vignetting; pieces may overlap a little;
* ``mosaic``     a tiled floor or wall: the shapes are built from square tiles with grout lines
  on a field of muted tiles (every shape 13-20 or more tiles across);
* ``led``        an LED matrix panel: shapes made of lit LEDs on a grid of dark unlit LEDs, with bloom;
* ``patches``    felt or embroidered patches on denim, khaki canvas, black canvas or grey felt:
  fibre texture or satin-stitch stripes, a stitched border, a soft shadow; may overlap a little.

Objects: the seven vocabulary shapes at any rotation (upright often, as real layouts are) and
distractors (rectangle, ellipse, pentagon, semicircle, heart, crescent, arrow; pink, brown, grey),
named truthfully. Canvas 96-800 px, aspect up to 3:1; 0-25 objects, about a quarter crowds of
11-25, often many copies of one kind; sizes about 2.5-40 % of the short side, never under 10 px
(`MIN_DIAM`: squares 13, crosses 14, diamonds and stars 16, hexagons and pentagons 18). Colours
are this module's own shade ranges (`SHADES`). After rendering (JPEG included) each object's mean
visible colour must still be named by its colour (`colour_name`) and stand out from its
surroundings (CIE76 distance), else it is dropped and the scene redrawn. Each scene has one query:
mostly "colour shape", also "shape" and "colour"; about a fifth name nothing present (half of those
near misses: "diamond" where squares are, "orange" where red is, a present shape in another colour).

Ground truth follows engine/training/scenes.py: box = the object's drawn pixels (anti-aliased
coverage >= 0.5; for tiles / LEDs the tile pixels) edge to edge, of the whole shape also where a
later object covers it; point = centre of the visible pixel nearest the shape's centroid (deep
inside when possible); tilt = rotation folded by the shape's symmetry (upright: square with
horizontal sides, triangle / star / hexagon / pentagon with a vertex up, diamond with its long
diagonal vertical, cross with arms along the axes); size = circumscribed diameter / short side.

    python -m engine.training.foreign.tenth [--seed 10101] [--n 300] [--save DIR] [--k 6]
"""

from __future__ import annotations

import argparse
import colorsys
import io
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from engine.training.scenes import COLOURS, SHAPES, Query, Scene, SceneObject, matches


KINDS = ("worksheet", "app_ui", "neon", "magnets", "mosaic", "led", "patches")
DISTRACTOR_SHAPES = ("rectangle", "ellipse", "pentagon", "semicircle", "heart", "crescent", "arrow")
DISTRACTOR_COLOURS = ("pink", "brown", "grey")
VOCAB_COLOURS = tuple(COLOURS)

# Shade ranges (hue degrees, saturation, value) from which an object's fill is drawn.
SHADES: dict[str, tuple] = {
    "red": ((352, 364), (0.80, 0.95), (0.80, 0.95)),
    "orange": ((24, 31), (0.90, 1.00), (0.96, 1.00)),
    "yellow": ((49, 56), (0.85, 1.00), (0.94, 1.00)),
    "green": ((112, 138), (0.68, 0.90), (0.52, 0.75)),
    "blue": ((215, 228), (0.76, 0.92), (0.75, 0.93)),
    "purple": ((272, 288), (0.60, 0.80), (0.58, 0.76)),
    "white": ((0, 360), (0.00, 0.04), (0.95, 1.00)),
    "black": ((0, 360), (0.00, 0.10), (0.04, 0.11)),
    "pink": ((330, 345), (0.28, 0.42), (0.96, 1.00)),
    "brown": ((20, 30), (0.62, 0.75), (0.32, 0.44)),
    "grey": ((0, 360), (0.00, 0.03), (0.50, 0.58)),
}

# Smallest circumscribed diameter (px) at which a careful viewer still names the shape.
MIN_DIAM = {"circle": 10, "square": 13, "triangle": 12, "diamond": 16, "cross": 14, "star": 16, "hexagon": 18,
            "rectangle": 12, "ellipse": 12, "pentagon": 18, "semicircle": 12, "heart": 14, "crescent": 14,
            "arrow": 16}
# Mosaic / LED shapes: smallest diameter in cells (fewer cells blur hexagon into circle, star into blob).
# Oblique diamonds, hexagons and pentagons stay near upright there (on a grid they turn into parallelograms / blobs).
CELLS_MIN = {"circle": 13, "square": 15, "rectangle": 14, "triangle": 15, "cross": 14, "semicircle": 14,
             "ellipse": 14, "heart": 16, "crescent": 16, "diamond": 18, "star": 18, "arrow": 18, "hexagon": 20,
             "pentagon": 20}
GRID_UPRIGHT = ("diamond", "hexagon", "pentagon", "rectangle", "ellipse", "arrow")
SYMMETRY = {"circle": 0, "square": 4, "triangle": 3, "star": 5, "cross": 4, "hexagon": 6, "diamond": 2,
            "rectangle": 2, "ellipse": 2, "pentagon": 5, "semicircle": 1, "heart": 1, "crescent": 1, "arrow": 1}

PALETTES = {
    "worksheet": VOCAB_COLOURS + DISTRACTOR_COLOURS,
    "app_ui": VOCAB_COLOURS + DISTRACTOR_COLOURS,
    "neon": ("red", "green", "blue", "yellow", "purple", "orange", "white", "pink"),
    "magnets": VOCAB_COLOURS + DISTRACTOR_COLOURS,
    "mosaic": VOCAB_COLOURS + DISTRACTOR_COLOURS,
    "led": ("red", "green", "blue", "yellow", "purple", "orange", "white", "pink"),
    "patches": VOCAB_COLOURS + DISTRACTOR_COLOURS,
}
UPRIGHT_P = {"worksheet": 0.6, "app_ui": 0.6, "neon": 0.5, "magnets": 0.2, "mosaic": 0.6, "led": 0.7, "patches": 0.3}
OVERLAP_P = {"magnets": 0.3, "patches": 0.25, "app_ui": 0.1}

WORDS = ("look", "find", "count", "match", "draw", "page", "unit", "trace", "sort", "group", "each", "how", "many",
         "the", "and", "can", "you", "see", "in", "this", "row", "below", "next", "total", "write", "number", "then",
         "some", "all", "them", "with", "your", "pencil", "lesson", "week", "part", "task", "set", "copy")
UI_WORDS = ("File", "Edit", "View", "Insert", "Arrange", "Tools", "Help", "Window", "Export", "Layers", "Align",
            "Opacity", "Stroke", "Width", "Height", "Blend", "Radius", "Zoom", "Grid", "Snap", "Page", "Group")
LABELS = ("Shape", "Layer", "node", "item", "obj", "Path", "Group", "el", "fig", "A", "B", "step")

NEAR_SHAPE = {"square": ("diamond",), "diamond": ("square",), "circle": ("hexagon",), "hexagon": ("circle",),
              "star": ("cross",), "cross": ("star",), "triangle": ("diamond", "star"), "rectangle": ("square",),
              "ellipse": ("circle",), "pentagon": ("hexagon",), "heart": ("circle",), "crescent": ("circle",),
              "semicircle": ("circle",), "arrow": ("triangle",)}
NEAR_COLOUR = {"red": ("orange", "purple"), "orange": ("red", "yellow"), "yellow": ("orange", "white"),
               "green": ("blue", "yellow"), "blue": ("purple", "green"), "purple": ("blue", "red"),
               "white": ("yellow",), "black": ("purple", "blue"), "pink": ("red", "purple"),
               "brown": ("orange", "black"), "grey": ("white", "black")}


# --------------------------------------------------------------------------- colour helpers

def _hsv(h: float, s: float, v: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb((h % 360) / 360.0, s, v), np.float32)


def _shade(rng: np.random.Generator, name: str) -> np.ndarray:
    (h0, h1), (s0, s1), (v0, v1) = SHADES[name]
    return _hsv(rng.uniform(h0, h1), rng.uniform(s0, s1), rng.uniform(v0, v1))


def _lab(rgb: np.ndarray) -> np.ndarray:
    rgb = np.clip(np.asarray(rgb, np.float64), 0, 1)
    lin = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = lin @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def delta_e(a, b) -> float:
    return float(np.linalg.norm(_lab(a) - _lab(b)))


def colour_name(rgb) -> str | None:
    """The colour name a viewer gives a mean pixel colour (0-1 floats), or None where it is doubtful."""
    h, s, v = colorsys.rgb_to_hsv(*[float(np.clip(c, 0, 1)) for c in rgb])
    h *= 360
    found = []
    if v <= 0.22 and s <= 0.6 or v <= 0.16:
        found.append("black")
    if s <= 0.14 and v >= 0.8:
        found.append("white")
    if s <= 0.12 and 0.36 <= v <= 0.66:
        found.append("grey")
    if (h >= 345 or h <= 12) and s >= 0.62 and v >= 0.45:
        found.append("red")
    if 318 <= h <= 352 and 0.18 <= s <= 0.55 and v >= 0.8:
        found.append("pink")
    if 17 <= h <= 33 and s >= 0.7 and v >= 0.75:
        found.append("orange")
    if 15 <= h <= 38 and s >= 0.4 and 0.22 <= v <= 0.55:
        found.append("brown")
    if 44 <= h <= 66 and s >= 0.5 and v >= 0.68:
        found.append("yellow")
    if 88 <= h <= 160 and s >= 0.35 and v >= 0.3:
        found.append("green")
    if 205 <= h <= 248 and s >= 0.4 and v >= 0.4:
        found.append("blue")
    if 258 <= h <= 300 and s >= 0.3 and v >= 0.3:
        found.append("purple")
    return found[0] if len(found) == 1 else None


# --------------------------------------------------------------------------- array helpers

def _u8(a: np.ndarray) -> np.ndarray:
    return (np.clip(a, 0, 1) * 255 + 0.5).astype(np.uint8)


def _f32(im: Image.Image) -> np.ndarray:
    return np.asarray(im, np.float32) / 255.0


def _blur(a: np.ndarray, radius: float) -> np.ndarray:
    """Gaussian blur of a [0,1] array (H,W) or (H,W,3) through Pillow (8-bit precision)."""
    if radius <= 0:
        return a
    return _f32(Image.fromarray(_u8(a)).filter(ImageFilter.GaussianBlur(radius)))


def _lowfreq(rng: np.random.Generator, h: int, w: int, cells: int) -> np.ndarray:
    """Smooth noise in about [-1, 1]: a coarse random grid resized bicubically."""
    gh, gw = max(2, int(round(cells * h / max(h, w))) + 1), max(2, int(round(cells * w / max(h, w))) + 1)
    g = rng.standard_normal((gh, gw)).astype(np.float32)
    return np.asarray(Image.fromarray(g).resize((w, h), Image.BICUBIC), np.float32) / 1.2


def _morph(m: np.ndarray, r: int, grow: bool) -> np.ndarray:
    """Dilation (grow) or erosion of a bool mask by a (2r+1)-square; outside the array counts as False."""
    if r <= 0:
        return m
    h, w = m.shape
    p = np.pad(m, r)
    f = np.logical_or if grow else np.logical_and
    a = p[:, 0:w]
    for k in range(1, 2 * r + 1):
        a = f(a, p[:, k:k + w])
    b = a[0:h]
    for k in range(1, 2 * r + 1):
        b = f(b, a[k:k + h])
    return b


@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(max(6, int(size)))


def _sentence(rng: np.random.Generator, k: int, words=WORDS) -> str:
    s = " ".join(str(w) for w in rng.choice(words, k))
    return s[0].upper() + s[1:]


def _grey(v: float, tint=(0.0, 0.0, 0.0)) -> tuple[int, int, int]:
    return tuple(int(np.clip(round(255 * (v + t)), 0, 255)) for t in tint)


# --------------------------------------------------------------------------- geometry

def _unit_poly(shape: str, param: float) -> np.ndarray:
    """Vertices of the upright shape around the origin (y down), scaled to circumradius 1 about the origin."""
    if shape in ("circle", "ellipse"):
        t = np.linspace(0, 2 * np.pi, 96, endpoint=False)
        p = np.stack([np.cos(t), np.sin(t) * (param if shape == "ellipse" else 1.0)], 1)
    elif shape in ("square", "triangle", "hexagon", "pentagon"):
        n = {"square": 4, "triangle": 3, "hexagon": 6, "pentagon": 5}[shape]
        start = -np.pi / 4 if shape == "square" else -np.pi / 2
        t = start + 2 * np.pi * np.arange(n) / n
        p = np.stack([np.cos(t), np.sin(t)], 1)
    elif shape == "star":
        t = -np.pi / 2 + np.pi * np.arange(10) / 5
        r = np.where(np.arange(10) % 2 == 0, 1.0, param)
        p = np.stack([r * np.cos(t), r * np.sin(t)], 1)
    elif shape == "diamond":
        p = np.array([[0, -1], [param, 0], [0, 1], [-param, 0]], np.float64)
    elif shape == "cross":
        a, b = 1.0, param
        p = np.array([[-b, -a], [b, -a], [b, -b], [a, -b], [a, b], [b, b], [b, a], [-b, a], [-b, b], [-a, b],
                      [-a, -b], [-b, -b]], np.float64)
    elif shape == "rectangle":
        p = np.array([[-1, -param], [1, -param], [1, param], [-1, param]], np.float64)
    elif shape == "semicircle":
        t = np.linspace(np.pi, 2 * np.pi, 48)
        p = np.stack([np.cos(t), np.sin(t) + 0.5], 1)
    elif shape == "heart":
        t = np.linspace(0, 2 * np.pi, 96, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        p = np.stack([x, y - (y.max() + y.min()) / 2], 1)
    elif shape == "crescent":
        d, r1 = param, 0.82
        xi = (1 - r1 ** 2 + d ** 2) / (2 * d)
        yi = math.sqrt(max(1 - xi ** 2, 1e-6))
        phi = math.atan2(yi, xi)
        outer = np.linspace(phi, 2 * np.pi - phi, 64)
        psi1, psi2 = math.atan2(yi, xi - d), math.atan2(-yi, xi - d) + 2 * np.pi
        inner = np.linspace(psi2, psi1, 48)[1:-1]
        p = np.concatenate([np.stack([np.cos(outer), np.sin(outer)], 1),
                            np.stack([d + r1 * np.cos(inner), r1 * np.sin(inner)], 1)])
        p[:, 0] -= (p[:, 0].max() + p[:, 0].min()) / 2
    elif shape == "arrow":
        w, hw, hl = param, 0.55, 0.9
        p = np.array([[-1.6, -w], [1.6 - hl, -w], [1.6 - hl, -hw], [1.6, 0], [1.6 - hl, hw], [1.6 - hl, w],
                      [-1.6, w]], np.float64)
    else:
        raise ValueError(shape)
    p = np.asarray(p, np.float64)
    return p / np.sqrt((p ** 2).sum(1)).max()


def _param(rng: np.random.Generator, shape: str) -> float:
    return {"star": lambda: rng.uniform(0.40, 0.50), "diamond": lambda: rng.uniform(0.55, 0.72),
            "cross": lambda: rng.uniform(0.30, 0.40), "rectangle": lambda: rng.uniform(0.42, 0.62),
            "ellipse": lambda: rng.uniform(0.45, 0.66), "crescent": lambda: rng.uniform(0.42, 0.55),
            "arrow": lambda: rng.uniform(0.18, 0.26)}.get(shape, lambda: 0.0)()


def _tilt(shape: str, angle: float) -> float:
    n = SYMMETRY[shape]
    if n == 0:
        return 0.0
    period = 360.0 / n
    t = angle % period
    return float(min(t, period - t))


def _raster(poly: np.ndarray, W: int, H: int, ss: int = 4, cell: int = 1):
    """Coverage of a polygon (image px, continuous coords) on the pixel grid (or on a grid of `cell`-px
    cells): (cov array, x0, y0) in grid units, or None when the polygon leaves the canvas."""
    q = poly / cell
    gw, gh = W // cell, H // cell
    x0, y0 = int(math.floor(q[:, 0].min())), int(math.floor(q[:, 1].min()))
    x1, y1 = int(math.ceil(q[:, 0].max())), int(math.ceil(q[:, 1].max()))
    if x0 < 0 or y0 < 0 or x1 > gw or y1 > gh or x1 - x0 < 1 or y1 - y0 < 1:
        return None
    w, h = x1 - x0, y1 - y0
    im = Image.new("L", (w * ss, h * ss), 0)
    pts = ((q - [x0, y0]) * ss - 0.5).ravel().tolist()
    ImageDraw.Draw(im).polygon(pts, fill=255)
    cov = np.asarray(im, np.float32).reshape(h, ss, w, ss).mean((1, 3)) / 255.0
    return cov, x0, y0


# --------------------------------------------------------------------------- plans

@dataclass
class _Obj:
    shape: str
    colour: str
    rgb: np.ndarray
    cx: float            # centre, plan coordinates
    cy: float
    r: float             # circumradius, plan px
    angle: float
    param: float
    seed: int
    # filled by _rasterize (image coordinates)
    poly: np.ndarray | None = None
    cov: np.ndarray | None = None
    mask: np.ndarray | None = None
    ox: int = 0
    oy: int = 0


@dataclass
class _Ctx:
    kind: str
    W: int
    H: int
    region: tuple[float, float, float, float]    # where objects go, plan coordinates
    hom: np.ndarray | None = None                 # plan -> image homography (worksheet)
    cell: int = 1                                 # mosaic / led grid
    keepout: list = field(default_factory=list)   # rectangles (plan coords) objects avoid
    info: dict = field(default_factory=dict)


def _to_image(ctx: _Ctx, pts: np.ndarray) -> np.ndarray:
    if ctx.hom is None:
        return pts
    h = np.concatenate([pts, np.ones((len(pts), 1))], 1) @ ctx.hom.T
    return h[:, :2] / h[:, 2:3]


def _poly_of(o: _Obj, ctx: _Ctx) -> np.ndarray:
    p = _unit_poly(o.shape, o.param) * o.r
    a = math.radians(o.angle)
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])   # clockwise on screen (y down)
    return _to_image(ctx, p @ rot.T + [o.cx, o.cy])


def _rasterize(o: _Obj, ctx: _Ctx) -> bool:
    o.poly = _poly_of(o, ctx)
    if ctx.cell > 1:
        c = ctx.cell
        r = _raster(o.poly, ctx.W, ctx.H, cell=c)
        if r is None:
            return False
        cov, gx, gy = r
        member = cov >= 0.5
        tile = ctx.info["tile"]
        o.mask = np.kron(member, tile).astype(bool)
        o.cov = o.mask.astype(np.float32)
        o.ox, o.oy = gx * c, gy * c
    else:
        r = _raster(o.poly, ctx.W, ctx.H)
        if r is None:
            return False
        o.cov, o.ox, o.oy = r
        o.mask = o.cov >= 0.5
    return bool(o.mask.any())


def _local_bg(bg: np.ndarray, ctx: _Ctx, cx: float, cy: float, r: float) -> np.ndarray:
    x, y = _to_image(ctx, np.array([[cx, cy]]))[0]
    rr = max(2, int(r * 1.3))
    x0, x1 = max(0, int(x) - rr), min(ctx.W, int(x) + rr + 1)
    y0, y1 = max(0, int(y) - rr), min(ctx.H, int(y) + rr + 1)
    return bg[y0:y1, x0:x1].reshape(-1, 3).mean(0)


def _plan(rng: np.random.Generator, ctx: _Ctx, bg: np.ndarray, crowd: bool) -> list[_Obj]:
    W, H, short = ctx.W, ctx.H, min(ctx.W, ctx.H)
    palette = PALETTES[ctx.kind]
    vocab_pal = [c for c in palette if c in COLOURS]
    dist_pal = [c for c in palette if c not in COLOURS]
    u = rng.random()
    n = int(rng.integers(11, 26)) if crowd else (0 if u < 0.055 else int(rng.integers(1, 11)))
    dominant = None
    if crowd and rng.random() < 0.65:
        dominant = (str(rng.choice(SHAPES)), str(rng.choice(vocab_pal)), rng.uniform(0.4, 0.75))
    x0, y0, x1, y1 = ctx.region
    gap = max(3.0, 2.2 * ctx.cell)
    upright = UPRIGHT_P[ctx.kind]
    base_frac = (0.025, 0.14) if crowd else (0.04, 0.40)
    if ctx.kind == "app_ui" and ctx.info.get("labels"):
        base_frac = (base_frac[0], min(base_frac[1], 0.3))
    plans: list[_Obj] = []
    for k in range(n):
        for _attempt in range(30):
            if dominant is not None and rng.random() < dominant[2]:
                shape, colour = dominant[0], dominant[1]
            else:
                shape = str(rng.choice(DISTRACTOR_SHAPES)) if rng.random() < 0.15 else str(rng.choice(SHAPES))
                if dist_pal and rng.random() < 0.10:
                    colour = str(rng.choice(dist_pal))
                else:
                    colour = str(rng.choice(vocab_pal))
            lo = max(MIN_DIAM[shape], ctx.cell * CELLS_MIN.get(shape, 12) if ctx.cell > 1 else 0)
            diam = short * math.exp(rng.uniform(math.log(base_frac[0]), math.log(base_frac[1])))
            if diam < lo:
                diam = lo * rng.uniform(1.0, 1.25)
            diam = float(min(diam, max(base_frac[1] * short, lo * 1.25)))
            r = diam / 2
            if x1 - x0 < diam + 4 or y1 - y0 < diam + 4:
                continue
            cx, cy = rng.uniform(x0 + r + 2, x1 - r - 2), rng.uniform(y0 + r + 2, y1 - r - 2)
            if any(kx0 - r < cx < kx1 + r and ky0 - r < cy < ky1 + r for kx0, ky0, kx1, ky1 in ctx.keepout):
                continue
            ok = True
            overlap = rng.random() < OVERLAP_P.get(ctx.kind, 0.0)
            for p in plans:
                d = math.hypot(p.cx - cx, p.cy - cy)
                if overlap and p.colour != colour:
                    if d < 0.8 * (p.r + r):
                        ok = False
                        break
                elif d < p.r + r + gap:
                    ok = False
                    break
            if not ok:
                continue
            local = _local_bg(bg, ctx, cx, cy, r)
            choices = [colour] + [str(c) for c in rng.permutation(palette) if c != colour]
            if dominant is not None and (shape, colour) == dominant[:2]:
                choices = choices[:1]
            colour_ok = None
            for c in choices[:6]:
                rgb = _shade(rng, c)
                if ctx.kind in ("neon", "led") and c not in ("white", "pink"):   # lit tubes / LEDs are bright
                    rgb = rgb * (rng.uniform(0.92, 1.0) / float(rgb.max()))
                if delta_e(rgb, local) >= 38 and colour_name(rgb) == c:
                    colour_ok = (c, rgb)
                    break
            if colour_ok is None:
                continue
            if rng.random() < upright or ctx.cell > 1 and shape in GRID_UPRIGHT:
                angle = float(rng.choice([0.0, 90.0, 180.0, 270.0]) if shape in ("diamond", "rectangle", "ellipse")
                              else 0.0)
                if ctx.kind in ("magnets", "patches", "neon"):
                    angle += rng.normal(0, 4)
                elif ctx.cell > 1:
                    angle += rng.normal(0, 5)
            else:
                angle = rng.uniform(0, 360)
            plans.append(_Obj(shape, colour_ok[0], colour_ok[1], cx, cy, r, float(angle % 360), _param(rng, shape),
                              int(rng.integers(2 ** 31))))
            break
    return plans


def _resolve(plans: list[_Obj], ctx: _Ctx) -> list[_Obj]:
    """Rasterize; drop objects that leave the canvas, touch an object of their colour, or hide too much of
    an earlier one."""
    W, H = ctx.W, ctx.H
    kept: list[_Obj] = []
    covered: list[int] = []
    for o in plans:
        if not _rasterize(o, ctx) or o.mask.sum() < 20:
            continue
        ys, xs = np.nonzero(o.mask)
        h, w = o.mask.shape
        ok = True
        extra = []
        for j, p in enumerate(kept):
            # overlap of bounding frames first
            if p.ox >= o.ox + w + 3 or o.ox >= p.ox + p.mask.shape[1] + 3 or \
               p.oy >= o.oy + h + 3 or o.oy >= p.oy + p.mask.shape[0] + 3:
                continue
            fx0, fy0 = min(p.ox, o.ox) - 3, min(p.oy, o.oy) - 3
            fx1 = max(p.ox + p.mask.shape[1], o.ox + w) + 3
            fy1 = max(p.oy + p.mask.shape[0], o.oy + h) + 3
            a = np.zeros((fy1 - fy0, fx1 - fx0), bool)
            b = np.zeros_like(a)
            a[p.oy - fy0:p.oy - fy0 + p.mask.shape[0], p.ox - fx0:p.ox - fx0 + p.mask.shape[1]] = p.mask
            b[o.oy - fy0:o.oy - fy0 + h, o.ox - fx0:o.ox - fx0 + w] = o.mask
            if p.colour == o.colour:
                if (_morph(b, 2, True) & a).any():
                    ok = False
                    break
            else:
                extra.append((j, int((a & b).sum())))
        if not ok:
            continue
        if any(covered[j] + c > 0.25 * kept[j].mask.sum() for j, c in extra):
            continue
        for j, c in extra:
            covered[j] += c
        kept.append(o)
        covered.append(0)
    return kept


# --------------------------------------------------------------------------- backgrounds

def _canvas(rng: np.random.Generator, kind: str, crowd: bool) -> tuple[int, int]:
    lo = 320 if kind in ("mosaic", "led") else (160 if crowd else 96)
    short = int(round(math.exp(rng.uniform(math.log(lo), math.log(640)))))
    aspect = 1.0 + 2.0 * rng.random() ** 2
    long = min(800, max(short, int(round(short * aspect))))
    if kind == "app_ui" and rng.random() < 0.8 or rng.random() < 0.55:
        return long, short
    return short, long


def _paper_texture(rng, H, W, rgb, amp=0.012):
    tex = _lowfreq(rng, H, W, 8) * amp + rng.standard_normal((H, W)).astype(np.float32) * amp * 0.6
    return np.clip(np.asarray(rgb, np.float32)[None, None] * (1 + tex[..., None]), 0, 1)


def _homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    a = []
    for (x, y), (u, v) in zip(src, dst):
        a.append([x, y, 1, 0, 0, 0, -u * x, -u * y, -u])
        a.append([0, 0, 0, x, y, 1, -v * x, -v * y, -v])
    _, _, vt = np.linalg.svd(np.asarray(a, np.float64))
    h = vt[-1].reshape(3, 3)
    return h / h[2, 2]


def _bg_worksheet(rng, W, H):
    paper = [(0.97, 0.97, 0.96), (0.96, 0.93, 0.85), (0.88, 0.88, 0.86), (0.80, 0.69, 0.53)][
        int(rng.choice(4, p=[0.4, 0.3, 0.18, 0.12]))]
    page = Image.fromarray(_u8(_paper_texture(rng, H, W, paper)))
    d = ImageDraw.Draw(page)
    short = min(W, H)
    m = max(4, int(0.05 * short))
    ink = _grey(rng.uniform(0.08, 0.25))
    y = m
    if H >= 110:
        ts = int(np.clip(0.055 * H, 8, 30))
        if rng.random() < 0.4:   # pale header band
            band = tuple(int(255 * (c * rng.uniform(0.9, 0.97))) for c in paper)
            d.rectangle([0, 0, W, y + int(ts * 1.4)], fill=band)
        d.text((m, y), _sentence(rng, int(rng.integers(2, 4))), fill=ink, font=_font(ts))
        if W > 260:
            nx = int(W * rng.uniform(0.55, 0.65))
            d.text((nx, y + ts * 0.25), "Name:", fill=ink, font=_font(int(ts * 0.6)))
            d.line([nx + ts * 2.2, y + ts, W - m, y + ts], fill=ink, width=1)
        y += int(ts * 1.6)
        d.line([m, y, W - m, y], fill=_grey(0.45), width=1)
        y += max(3, ts // 3)
        fs = int(np.clip(ts * 0.55, 7, 16))
        for _ in range(int(rng.integers(1, 4 if H > 300 else 2))):
            d.text((m, y), f"{int(rng.integers(1, 9))}. " + _sentence(rng, int(rng.integers(3, 9))).lower(),
                   fill=ink, font=_font(fs))
            y += int(fs * 1.5)
    y += 2
    foot = 0
    if H > 260 and rng.random() < 0.6:
        fs = int(np.clip(0.03 * H, 7, 13))
        foot = int(fs * 2.2)
        d.text((W // 2 - fs, H - m - fs), str(int(rng.integers(1, 40))), fill=_grey(0.4), font=_font(fs))
        if rng.random() < 0.5:
            d.line([m, H - m - fs - 4, W // 2 - 3 * fs, H - m - fs - 4], fill=_grey(0.5), width=1)
    region = (m, y, W - m, H - m - foot)
    if rng.random() < 0.45 and region[3] - region[1] > 40:
        d.rectangle([region[0] - 1, region[1] - 1, region[2], region[3]], outline=_grey(rng.uniform(0.2, 0.6)),
                    width=1 + int(short > 400))
        region = (region[0] + 3, region[1] + 3, region[2] - 3, region[3] - 3)
    scanned = rng.random() < 0.45
    if scanned:
        a = math.radians(rng.uniform(-1.5, 1.5))
        c, s = math.cos(a), math.sin(a)
        src = np.array([[0, 0], [W, 0], [W, H], [0, H]], np.float64)
        ctr = np.array([W / 2, H / 2])
        dst = (src - ctr) @ np.array([[c, -s], [s, c]]).T * rng.uniform(1.0, 1.04) + ctr
        table = np.full((H, W, 3), rng.uniform(0.03, 0.12), np.float32)
    else:
        src = np.array([[0, 0], [W, 0], [W, H], [0, H]], np.float64)
        ins = rng.uniform(0.0, 0.05, (4, 2)) * [W, H]
        jit = rng.normal(0, 0.012, (4, 2)) * [W, H]
        dst = src + np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * ins + jit
        wood = np.array([0.42, 0.28, 0.16]) if rng.random() < 0.5 else np.array([0.35, 0.35, 0.37])
        grain = _lowfreq(rng, H, W, 30) * 0.06
        table = np.clip(wood[None, None] * (1 + grain[..., None]), 0, 1).astype(np.float32)
    hom = _homography(src, dst)
    inv = np.linalg.inv(hom)
    inv = inv / inv[2, 2]
    coeffs = tuple(inv.ravel()[:8])
    warped = page.transform((W, H), Image.PERSPECTIVE, coeffs, Image.BILINEAR)
    alpha = Image.new("L", (W, H), 255).transform((W, H), Image.PERSPECTIVE, coeffs, Image.BILINEAR, fillcolor=0)
    al = _f32(alpha)[..., None]
    img = _f32(warped) * al + table * (1 - al)
    shrink = 0.015 * short
    region = (region[0] + shrink, region[1] + shrink, region[2] - shrink, region[3] - shrink)
    return img, _Ctx("worksheet", W, H, region, hom=hom, info={"scanned": scanned, "paper": paper,
                                                                "outline": rng.random() < 0.5})


def _bg_app_ui(rng, W, H):
    dark = rng.random() < 0.4
    tint = tuple(rng.uniform(-0.015, 0.02, 3)) if rng.random() < 0.5 else (0, 0, 0)
    if dark:
        canvas_v, panel_v, line_v, text_v = rng.uniform(0.1, 0.2), rng.uniform(0.2, 0.26), 0.32, 0.82
    else:
        canvas_v, panel_v, line_v, text_v = rng.uniform(0.95, 1.0), rng.uniform(0.9, 0.94), 0.8, 0.25
    im = Image.new("RGB", (W, H), _grey(canvas_v, tint))
    d = ImageDraw.Draw(im)
    short = min(W, H)
    x0, y0, x1, y1 = 0, 0, W, H
    if H >= 120:
        th = int(np.clip(0.075 * H, 12, 34))
        d.rectangle([0, 0, W, th], fill=_grey(panel_v, tint))
        d.line([0, th, W, th], fill=_grey(line_v, tint))
        fs = int(th * 0.5)
        x = int(th * 0.5)
        for w in rng.choice(UI_WORDS[:9], int(rng.integers(3, 8)), replace=False):
            if x + fs * len(w) * 0.6 > W - 4:
                break
            d.text((x, th * 0.25), str(w), fill=_grey(text_v, tint), font=_font(fs))
            x += int(fs * (len(w) * 0.6 + 1.5))
        y0 = th + 1
    if H >= 160 and rng.random() < 0.55:
        sh = int(np.clip(0.045 * H, 10, 22))
        d.rectangle([0, H - sh, W, H], fill=_grey(panel_v, tint))
        d.line([0, H - sh, W, H - sh], fill=_grey(line_v, tint))
        d.text((6, H - sh + sh * 0.2), f"{int(rng.integers(25, 400))}%  " + _sentence(rng, 2, UI_WORDS),
               fill=_grey(text_v, tint), font=_font(int(sh * 0.6)))
        y1 = H - sh - 1
    if W >= 260 and rng.random() < 0.7:
        pw = int(W * rng.uniform(0.14, 0.22))
        d.rectangle([0, y0, pw, y1], fill=_grey(panel_v, tint))
        d.line([pw, y0, pw, y1], fill=_grey(line_v, tint))
        fs = int(np.clip(0.03 * short, 7, 13))
        y = y0 + fs
        while y < y1 - 2 * fs:
            d.text((fs, y), f"{rng.choice(LABELS)} {int(rng.integers(1, 40))}", fill=_grey(text_v, tint),
                   font=_font(fs))
            y += int(fs * 1.9)
            d.line([4, y - fs * 0.45, pw - 4, y - fs * 0.45], fill=_grey((panel_v + line_v) / 2, tint))
        x0 = pw + 1
    if W >= 420 and rng.random() < 0.4:
        pw = int(W * rng.uniform(0.14, 0.2))
        d.rectangle([W - pw, y0, W, y1], fill=_grey(panel_v, tint))
        d.line([W - pw, y0, W - pw, y1], fill=_grey(line_v, tint))
        fs = int(np.clip(0.028 * short, 7, 12))
        y = y0 + fs
        for w in rng.choice(UI_WORDS[9:], 5, replace=False):
            if y > y1 - 3 * fs:
                break
            d.text((W - pw + fs, y), str(w), fill=_grey(text_v, tint), font=_font(fs))
            y += int(fs * 1.6)
            kx = W - pw + fs + int(rng.uniform(0.1, 0.9) * (pw - 3 * fs))
            d.line([W - pw + fs, y, W - 2 * fs, y], fill=_grey(line_v, tint), width=2)
            d.rectangle([kx - 2, y - 4, kx + 2, y + 4], fill=_grey(text_v, tint))
            y += int(fs * 1.4)
        x1 = W - pw - 1
    region = (x0, y0, x1, y1)
    artboard = not dark and rng.random() < 0.3 and (x1 - x0) > 120 and (y1 - y0) > 100
    if artboard:
        d.rectangle([x0, y0, x1, y1], fill=_grey(rng.uniform(0.78, 0.86), tint))
        m = int(0.06 * min(x1 - x0, y1 - y0))
        region = (x0 + m, y0 + m, x1 - m, y1 - m)
        d.rectangle([region[0] + 2, region[1] + 3, region[2] + 2, region[3] + 3], fill=_grey(0.7, tint))
        d.rectangle(list(region), fill=(255, 255, 255))
    else:
        g = rng.random()
        step = int(rng.uniform(10, 32))
        col = _grey(canvas_v + (0.06 if dark else -0.06), tint)
        if g < 0.45:
            for gx in range(int(x0) + step, int(x1), step):
                d.line([gx, y0, gx, y1], fill=col)
            for gy in range(int(y0) + step, int(y1), step):
                d.line([x0, gy, x1, gy], fill=col)
        elif g < 0.65:
            for gx in range(int(x0) + step, int(x1), step):
                for gy in range(int(y0) + step, int(y1), step):
                    d.point((gx, gy), fill=_grey(canvas_v + (0.25 if dark else -0.25), tint))
    region = (region[0] + 2, region[1] + 2, region[2] - 2, region[3] - 2)
    info = {"dark": dark, "labels": rng.random() < 0.6, "connect": rng.random() < 0.3,
            "hard": rng.random() < 0.4, "stroke": rng.random() < 0.3, "shadow": rng.random() < 0.25,
            "text_v": text_v, "line_v": line_v, "tint": tint}
    return _f32(im), _Ctx("app_ui", W, H, region, info=info)


def _bricks(rng, W, H, bh, base_hsv, mortar_v):
    bw = int(bh * rng.uniform(2.0, 3.2))
    mt = max(1, int(round(bh * 0.12)))
    ys, xs = np.mgrid[0:H, 0:W]
    row = ys // bh
    off = (row % 2) * (bw // 2)
    col = (xs + off) // bw
    ids = (row * 1000 + col) % 9973
    jit = np.random.default_rng(int(rng.integers(2 ** 31))).uniform(-1, 1, (9973, 3)).astype(np.float32)
    h, s, v = base_hsv
    base = _hsv(h, s, v)
    img = base[None, None] * (1 + 0.18 * jit[ids][..., :1]) + 0.02 * jit[ids]
    mortar = ((ys % bh) < mt) | (((xs + off) % bw) < mt)
    img[mortar] = mortar_v
    return img.astype(np.float32)


def _bg_neon(rng, W, H):
    short = min(W, H)
    if rng.random() < 0.7:
        bh = int(np.clip(short * rng.uniform(0.04, 0.09), 5, 30))
        img = _bricks(rng, W, H, bh, (rng.uniform(5, 22), rng.uniform(0.35, 0.6), rng.uniform(0.2, 0.32)),
                      rng.uniform(0.08, 0.3))
    else:
        img = np.full((H, W, 3), rng.uniform(0.12, 0.22), np.float32)
    tex = rng.standard_normal((H, W)).astype(np.float32) * 0.03 + _lowfreq(rng, H, W, 12) * 0.05
    img = img * (1 + tex[..., None])
    light = 0.45 + 0.55 * np.clip(0.5 + 0.5 * _lowfreq(rng, H, W, 2), 0, 1)
    img = np.clip(img * light[..., None], 0, 1)
    img *= np.array([1.0, 0.97, 1.0 + rng.uniform(-0.05, 0.12)], np.float32)
    return img.astype(np.float32), _Ctx("neon", W, H, (2, 2, W - 2, H - 2),
                                        info={"glow": rng.uniform(0.45, 0.8), "core": rng.uniform(0.05, 0.2)})


def _bg_magnets(rng, W, H):
    short = min(W, H)
    surf = str(rng.choice(["fridge_white", "fridge_steel", "fridge_black", "carpet", "wood"],
                          p=[0.3, 0.2, 0.12, 0.22, 0.16]))
    ys, xs = np.mgrid[0:H, 0:W].astype(np.float32)
    keep = []
    if surf == "fridge_white":
        img = _paper_texture(rng, H, W, np.array([0.94, 0.95, 0.96]) * rng.uniform(0.97, 1.02), 0.008)
    elif surf == "fridge_steel":
        rows = np.asarray(Image.fromarray(rng.standard_normal((H, 1)).astype(np.float32))
                          .resize((W, H), Image.BILINEAR), np.float32)
        streak = rng.standard_normal((H, max(2, W // 40))).astype(np.float32)
        streak = np.asarray(Image.fromarray(streak).resize((W, H), Image.BILINEAR), np.float32)
        v = rng.uniform(0.62, 0.74) * (1 + 0.02 * rows + 0.025 * streak)
        img = np.repeat(v[..., None], 3, 2) * np.array([0.98, 0.99, 1.02], np.float32)
    elif surf == "fridge_black":
        img = np.full((H, W, 3), rng.uniform(0.07, 0.12), np.float32)
        refl = np.exp(-((xs - rng.uniform(0, W)) / (0.25 * W)) ** 2) * rng.uniform(0.05, 0.12)
        img += refl[..., None]
    elif surf == "carpet":
        base = [np.array([0.74, 0.69, 0.6]), np.array([0.55, 0.55, 0.56]), np.array([0.42, 0.47, 0.55]),
                np.array([0.6, 0.62, 0.55])][int(rng.integers(4))]
        fib = rng.standard_normal((H, W)).astype(np.float32)
        fib = 0.6 * fib + 0.4 * _blur(np.clip(0.5 + 0.25 * fib, 0, 1), 0.8) * 4 - 2
        img = base[None, None] * (1 + 0.07 * fib[..., None] + 0.05 * _lowfreq(rng, H, W, 6)[..., None])
    else:  # wood floor planks
        ph = int(np.clip(short * rng.uniform(0.12, 0.25), 10, 120))
        plank = (ys // ph).astype(int)
        tone = np.random.default_rng(int(rng.integers(2 ** 31))).uniform(-0.12, 0.12, 1000)[plank % 1000]
        grain = np.sin(xs / rng.uniform(3, 9) + 3 * _lowfreq(rng, H, W, 10)) * 0.04
        base = np.array([0.62, 0.45, 0.3]) * rng.uniform(0.85, 1.1)
        img = base[None, None] * (1 + tone[..., None] + grain[..., None])
        img[(ys % ph) < max(1, ph // 25)] *= 0.55
    img = np.clip(img, 0, 1).astype(np.float32)
    if surf.startswith("fridge") and W >= 200 and rng.random() < 0.6:
        hw = int(W * rng.uniform(0.03, 0.05))
        hx = int(W * 0.04) if rng.random() < 0.5 else W - int(W * 0.04) - hw
        hy0, hy1 = int(H * rng.uniform(0.05, 0.25)), int(H * rng.uniform(0.75, 0.95))
        hv = 0.8 if surf == "fridge_black" else 0.55
        img[hy0:hy1, hx:hx + hw] = hv
        img[hy0:hy1, hx + hw // 3:hx + hw // 2] = min(1.0, hv + 0.25)
        img[hy0:hy1, hx + hw:hx + hw + max(1, hw // 3)] *= 0.8
        keep.append((hx - 4, hy0 - 4, hx + hw + hw // 3 + 4, hy1 + 4))
    info = {"surface": surf, "shadow": rng.uniform(0.25, 0.5), "spec": rng.uniform(0.15, 0.45),
            "light_dx": rng.uniform(-1, 1), "light_dy": rng.uniform(0.3, 1)}
    return img, _Ctx("magnets", W, H, (2, 2, W - 2, H - 2), keepout=keep, info=info)


def _cells_bg(rng, W, H, c, tile, tile_rgb, grout_rgb, jitter):
    gw, gh = W // c, H // c
    cols = tile_rgb[None, None] * (1 + jitter * rng.uniform(-1, 1, (gh, gw, 1))) \
        + 0.01 * rng.standard_normal((gh, gw, 3))
    img = np.empty((H, W, 3), np.float32)
    img[:] = grout_rgb
    big = np.repeat(np.repeat(cols.astype(np.float32), c, 0), c, 1)
    t = np.tile(tile, (gh, gw))[..., None]
    img[:gh * c, :gw * c] = np.where(t, big, np.asarray(grout_rgb, np.float32))
    return np.clip(img, 0, 1)


def _bg_mosaic(rng, W, H):
    short = min(W, H)
    c = int(np.clip(round(short / rng.uniform(60, 100)), 4, 8))
    tile = np.zeros((c, c), bool)
    tile[:c - 1, :c - 1] = True
    base = [np.array([0.9, 0.86, 0.76]), np.array([0.63, 0.48, 0.38]), np.array([0.5, 0.53, 0.56]),
            np.array([0.58, 0.62, 0.52]), np.array([0.78, 0.78, 0.76]), np.array([0.3, 0.31, 0.33])][
        int(rng.integers(6))]
    grout = np.full(3, rng.choice([rng.uniform(0.2, 0.32), rng.uniform(0.72, 0.86)]), np.float32)
    img = _cells_bg(rng, W, H, c, tile, base, grout, 0.06)
    return img, _Ctx("mosaic", W, H, (0, 0, (W // c) * c, (H // c) * c), cell=c,
                     info={"tile": tile, "jitter": 0.04, "gloss": rng.random() < 0.5})


def _bg_led(rng, W, H):
    short = min(W, H)
    c = int(np.clip(round(short / rng.uniform(55, 90)), 4, 9))
    g = 1 if c < 6 else 2
    tile = np.zeros((c, c), bool)
    tile[:c - g, :c - g] = True
    if c - g >= 5:
        for y, x in ((0, 0), (0, c - g - 1), (c - g - 1, 0), (c - g - 1, c - g - 1)):
            tile[y, x] = False
    img = _cells_bg(rng, W, H, c, tile, np.full(3, rng.uniform(0.1, 0.16), np.float32),
                    np.full(3, rng.uniform(0.0, 0.03), np.float32), 0.1)
    return img, _Ctx("led", W, H, (0, 0, (W // c) * c, (H // c) * c), cell=c,
                     info={"tile": tile, "jitter": 0.06, "bloom": rng.uniform(0.2, 0.5)})


def _bg_patches(rng, W, H):
    ys, xs = np.mgrid[0:H, 0:W]
    fabric = str(rng.choice(["denim", "khaki", "black", "felt"], p=[0.45, 0.2, 0.15, 0.2]))
    noise = rng.standard_normal((H, W)).astype(np.float32)
    if fabric == "denim":
        per = int(rng.integers(3, 6))
        twill = ((xs + ys) % per < per // 2).astype(np.float32) - 0.5
        base = _hsv(rng.uniform(212, 226), rng.uniform(0.35, 0.5), rng.uniform(0.3, 0.44))
        wash = _lowfreq(rng, H, W, 5)
        img = base[None, None] * (1 + 0.16 * twill[..., None] + 0.07 * noise[..., None]) \
            + (0.06 * np.clip(wash, 0, 1))[..., None]
    elif fabric == "khaki":
        weave = (((xs // 2) + (ys // 2)) % 2).astype(np.float32) - 0.5
        img = np.array([0.66, 0.6, 0.45])[None, None] * (1 + 0.08 * weave[..., None] + 0.05 * noise[..., None])
    elif fabric == "black":
        weave = ((xs % 3 == 0) | (ys % 3 == 0)).astype(np.float32)
        img = np.full((H, W, 3), 0.1, np.float32) * (1 + 0.25 * weave[..., None] + 0.15 * noise[..., None])
    else:
        img = np.array([0.56, 0.56, 0.55])[None, None] * (1 + 0.06 * _blur(np.clip(0.5 + 0.2 * noise, 0, 1), 0.7)
                                                          [..., None] * 5 - 0.15)
    img = np.clip(img, 0, 1).astype(np.float32)
    if fabric in ("denim", "khaki") and rng.random() < 0.5:   # a seam with double top-stitching
        vertical = rng.random() < 0.5
        pos = int(rng.uniform(0.15, 0.85) * (W if vertical else H))
        thread = _hsv(40, 0.35, 0.78)
        for off in (0, 5):
            idx = np.arange(0, H if vertical else W)
            dash = idx[(idx // 3) % 2 == 0]
            if vertical:
                img[dash, min(W - 1, pos + off)] = thread
            else:
                img[min(H - 1, pos + off), dash] = thread
        if vertical:
            img[:, max(0, pos - 3):pos - 1] *= 0.8
        else:
            img[max(0, pos - 3):pos - 1, :] *= 0.8
    return img, _Ctx("patches", W, H, (2, 2, W - 2, H - 2),
                     info={"fabric": fabric, "shadow": rng.uniform(0.25, 0.45), "satin": rng.random() < 0.4})


BACKGROUNDS = {"worksheet": _bg_worksheet, "app_ui": _bg_app_ui, "neon": _bg_neon, "magnets": _bg_magnets,
               "mosaic": _bg_mosaic, "led": _bg_led, "patches": _bg_patches}


# --------------------------------------------------------------------------- rendering

def _window(o: _Obj, pad: int, W: int, H: int):
    """A frame `pad` px around the object's crop, clipped to the canvas: (x0, y0, x1, y1)."""
    h, w = o.mask.shape
    x0, y0 = max(0, o.ox - pad), max(0, o.oy - pad)
    x1, y1 = min(W, o.ox + w + pad), min(H, o.oy + h + pad)
    return x0, y0, x1, y1


def _in_window(a: np.ndarray, o: _Obj, x0, y0, x1, y1) -> np.ndarray:
    out = np.zeros((y1 - y0, x1 - x0), np.float32)
    h, w = a.shape
    out[o.oy - y0:o.oy - y0 + h, o.ox - x0:o.ox - x0 + w] = a
    return out


def _shadow(img, o, W, H, dx, dy, blur, strength):
    pad = int(abs(dx) + abs(dy) + 3 * blur + 2)
    x0, y0, x1, y1 = _window(o, pad, W, H)
    a = _in_window(o.cov, o, x0, y0, x1, y1)
    a = np.roll(np.roll(a, int(round(dy)), 0), int(round(dx)), 1)
    a = _blur(a, blur)
    img[y0:y1, x0:x1] *= (1 - strength * a)[..., None]


def _glow(img, o, W, H, radius, strength, colour):
    pad = int(3 * radius + 2)
    x0, y0, x1, y1 = _window(o, pad, W, H)
    a = _blur(_in_window(o.cov, o, x0, y0, x1, y1), radius) * strength
    g = a[..., None] * colour[None, None]
    sub = img[y0:y1, x0:x1]
    img[y0:y1, x0:x1] = 1 - (1 - sub) * (1 - g)


def _fill(img, o, colour_field, alpha=None):
    h, w = o.mask.shape
    a = (o.cov if alpha is None else alpha)[..., None]
    sub = img[o.oy:o.oy + h, o.ox:o.ox + w]
    sub += (colour_field - sub) * a


def _inner(o: _Obj, radius: float) -> np.ndarray:
    """About 0 at the object's edge rising to 1 inside (a blurred mask), in the crop's frame."""
    pad = int(3 * radius + 2)
    m = np.pad(o.cov, pad)
    b = _blur(m, radius)[pad:pad + o.cov.shape[0], pad:pad + o.cov.shape[1]]
    return np.clip((b - 0.5) * 2, 0, 1)


def _render_objects(img, ctx: _Ctx, plans: list[_Obj], rng):
    W, H, kind, info = ctx.W, ctx.H, ctx.kind, ctx.info
    if kind == "neon":
        for o in plans:    # all halos first: fills sit on top of every halo
            rad = max(1.5, 0.12 * 2 * o.r * rng.uniform(0.8, 1.3))
            _glow(img, o, W, H, rad, info["glow"], o.rgb)
    if kind == "led":
        for o in plans:
            _glow(img, o, W, H, max(2.0, ctx.cell * 1.2), info["bloom"], o.rgb)
    if kind == "app_ui":
        if info["labels"] or info["connect"]:
            im = Image.fromarray(_u8(img))
            d = ImageDraw.Draw(im)
            tint = info["tint"]
            if info["connect"] and len(plans) >= 2:
                cs = sorted(((float(np.mean(o.poly[:, 0])), float(np.mean(o.poly[:, 1]))) for o in plans))
                for a, b in zip(cs, cs[1:]):
                    d.line([a, b], fill=_grey(info["line_v"] * 0.75 if not info["dark"] else 0.5, tint), width=1)
            if info["labels"]:
                fs = int(np.clip(0.03 * min(W, H), 7, 13))
                taken = [(o.ox - 2, o.oy - 2, o.ox + o.mask.shape[1] + 2, o.oy + o.mask.shape[0] + 2) for o in plans]
                for o in plans:
                    if rng.random() < 0.3:
                        continue
                    text = f"{rng.choice(LABELS)} {int(rng.integers(1, 30))}"
                    tw = int(_font(fs).getlength(text)) + 2
                    for lx, ly in ((o.ox + o.mask.shape[1] + 4, o.oy + o.mask.shape[0] // 2 - fs // 2),
                                   (o.ox + o.mask.shape[1] // 2 - tw // 2, o.oy + o.mask.shape[0] + 3)):
                        r = (lx, ly, lx + tw, ly + fs + 3)
                        if r[0] < ctx.region[0] or r[2] > ctx.region[2] or r[1] < ctx.region[1] or r[3] > ctx.region[3]:
                            continue
                        if any(not (r[2] < t[0] or t[2] < r[0] or r[3] < t[1] or t[3] < r[1]) for t in taken):
                            continue
                        d.text((lx, ly), text, fill=_grey(info["text_v"], tint), font=_font(fs))
                        taken.append(r)
                        break
            img[:] = _f32(im)
    for o in plans:
        orng = np.random.default_rng(o.seed)
        h, w = o.mask.shape
        col = np.broadcast_to(o.rgb[None, None], (h, w, 3)).astype(np.float32)
        diam = 2 * o.r
        if kind == "worksheet":
            mottle = _lowfreq(orng, h, w, 4) * 0.03 + orng.standard_normal((h, w)).astype(np.float32) * 0.012
            col = np.clip(col * (1 + mottle[..., None]), 0, 1)
            _fill(img, o, col, o.cov * orng.uniform(0.93, 1.0))
            if info["outline"] and diam >= 24 and o.colour != "black":
                t = 1 + int(diam >= 60)
                edge = o.mask & ~_morph(o.mask, t, False)
                _fill(img, o, np.full((h, w, 3), 0.12, np.float32), edge.astype(np.float32) * 0.9)
        elif kind == "app_ui":
            if info["shadow"]:
                _shadow(img, o, W, H, 0, max(1, diam * 0.04), max(1.0, diam * 0.05), 0.25)
            _fill(img, o, col, o.mask.astype(np.float32) if info["hard"] else None)
            if info["stroke"] and diam >= 20:
                edge = o.mask & ~_morph(o.mask, 1, False)
                _fill(img, o, col * 0.7, edge.astype(np.float32))
        elif kind == "neon":
            inner = _inner(o, max(1.0, diam * 0.12))
            c = col * (0.9 + 0.1 * inner[..., None]) + info["core"] * inner[..., None] * (1 - col)
            _fill(img, o, np.clip(c, 0, 1))
        elif kind == "magnets":
            dx = info["light_dx"] * max(1.0, diam * 0.05)
            dy = info["light_dy"] * max(1.0, diam * 0.05)
            _shadow(img, o, W, H, dx, dy, max(1.0, diam * 0.06), info["shadow"])
            inner = _inner(o, max(0.8, diam * 0.05))
            shade = 0.86 + 0.14 * inner
            c = col * shade[..., None]
            if diam >= 16:
                yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
                hx, hy = w * (0.5 - 0.22 * info["light_dx"]), h * (0.5 - 0.25 * info["light_dy"])
                spot = np.exp(-(((xx - hx) / (0.2 * w)) ** 2 + ((yy - hy) / (0.14 * h)) ** 2))
                c = c + info["spec"] * spot[..., None] * (1 - c) * inner[..., None]
            _fill(img, o, np.clip(c, 0, 1))
        elif kind in ("mosaic", "led"):
            c = ctx.cell
            gh, gw = h // c, w // c
            jit = 1 + info["jitter"] * orng.uniform(-1, 1, (gh, gw, 1)).astype(np.float32)
            cell_col = np.repeat(np.repeat(o.rgb[None, None] * jit, c, 0), c, 1)
            if kind == "led":
                yy, xx = np.mgrid[0:h, 0:w]
                cc = (c - 1) / 2
                d2 = ((yy % c - cc) ** 2 + (xx % c - cc) ** 2) / (cc ** 2 + 1e-6)
                cell_col = cell_col + 0.15 * np.clip(1 - d2, 0, 1)[..., None] * (1 - cell_col)
            elif info["gloss"]:
                yy, xx = np.mgrid[0:h, 0:w]
                cell_col = cell_col * (1 + 0.06 * (((yy % c) + (xx % c)) < c // 2))[..., None]
            _fill(img, o, np.clip(cell_col, 0, 1).astype(np.float32))
        elif kind == "patches":
            _shadow(img, o, W, H, max(1.0, diam * 0.03), max(1.0, diam * 0.04), max(1.0, diam * 0.04),
                    info["shadow"])
            yy, xx = np.mgrid[0:h, 0:w]
            if info["satin"]:
                a = math.radians(o.angle + 60)
                stripe = np.sin((xx * math.cos(a) + yy * math.sin(a)) * 1.9)
                tex = 0.07 * stripe + 0.03 * orng.standard_normal((h, w))
            else:
                tex = 0.08 * _blur(np.clip(0.5 + 0.2 * orng.standard_normal((h, w)), 0, 1), 0.6) * 5 - 0.2
            c = np.clip(col * (1 + tex[..., None].astype(np.float32)), 0, 1)
            _fill(img, o, c)
            if diam >= 22:
                band = _morph(o.mask, 2, False) & ~_morph(o.mask, 3, False)
                dash = band & (((xx + yy) // 3) % 2 == 0)
                thread = col * 0.7 if o.colour not in ("black",) else np.full((h, w, 3), 0.28, np.float32)
                _fill(img, o, thread, dash.astype(np.float32))
    return img


def _post(img: np.ndarray, ctx: _Ctx, rng: np.random.Generator) -> np.ndarray:
    W, H, kind, info = ctx.W, ctx.H, ctx.kind, ctx.info
    ys, xs = np.arange(H, dtype=np.float32)[:, None], np.arange(W, dtype=np.float32)[None, :]
    short = min(W, H)
    gain = np.ones((H, W), np.float32)
    if kind == "worksheet":
        if info["scanned"]:
            cols = rng.choice(W, int(rng.integers(0, 6)), replace=False) if W > 8 else []
            for c0 in cols:
                wdt = int(rng.integers(1, 3))
                img[:, c0:c0 + wdt] *= rng.uniform(0.93, 1.03)
            if rng.random() < 0.5:   # dark lid / spine edge on one side
                side = int(rng.integers(4))
                dist = [xs, W - 1 - xs, ys, H - 1 - ys][side]
                gain *= 1 - 0.5 * np.exp(-dist / (0.02 * short + 1))
        else:
            a = rng.uniform(0, 2 * np.pi)
            t = (np.cos(a) * xs / W + np.sin(a) * ys / H)
            t = (t - t.min()) / (t.max() - t.min() + 1e-6)
            gain *= 1 - rng.uniform(0.0, 0.16) * t
            side = int(rng.integers(4))
            dist = [xs, W - 1 - xs, ys, H - 1 - ys][side]
            gain *= 1 - rng.uniform(0.05, 0.15) * np.exp(-dist / (0.08 * short))
            if rng.random() < 0.3:   # a soft shadow of the phone / hand across a corner
                cx, cy = rng.choice([0, W]), rng.choice([0, H])
                r = np.hypot(xs - cx, ys - cy) / short
                gain *= 1 - 0.12 * np.clip((0.45 - r) / 0.15, 0, 1)
    elif kind in ("magnets", "patches", "mosaic"):
        if rng.random() < 0.8:
            a = rng.uniform(0, 2 * np.pi)
            t = (np.cos(a) * xs / W + np.sin(a) * ys / H)
            t = (t - t.min()) / (t.max() - t.min() + 1e-6)
            gain *= 1 - rng.uniform(0.0, 0.18) * t
        if rng.random() < 0.4:
            r2 = ((xs / W - 0.5) ** 2 + (ys / H - 0.5) ** 2) * 2
            gain *= 1 - rng.uniform(0.05, 0.15) * r2
    img = img * gain[..., None]
    if kind != "app_ui":
        img = img * (1 + rng.uniform(-0.025, 0.025, 3)).astype(np.float32)[None, None]
    noise = {"worksheet": (0.0, 0.02), "app_ui": (0.0, 0.0), "neon": (0.015, 0.045), "magnets": (0.005, 0.03),
             "mosaic": (0.005, 0.025), "led": (0.01, 0.04), "patches": (0.005, 0.03)}[kind]
    sigma = rng.uniform(*noise)
    if sigma > 0:
        img = img + rng.standard_normal((H, W, 1), dtype=np.float32) * sigma
        chroma = rng.standard_normal(((H + 1) // 2, (W + 1) // 2, 3), dtype=np.float32) * (sigma * 0.35)
        img += np.repeat(np.repeat(chroma, 2, 0), 2, 1)[:H, :W]   # camera chroma noise is coarser
    out = Image.fromarray(_u8(img))
    blur_max = {"app_ui": 0.0, "worksheet": 0.8, "led": 0.9}.get(kind, 1.0) * min(1.0, short / 320)
    if kind == "app_ui" and rng.random() < 0.2:   # screenshot resampled by a messenger
        f = rng.uniform(0.6, 0.9)
        out = out.resize((max(8, int(W * f)), max(8, int(H * f))), Image.BILINEAR).resize((W, H), Image.BICUBIC)
    elif rng.random() < 0.6 and blur_max > 0.25:
        out = out.filter(ImageFilter.GaussianBlur(rng.uniform(0.25, blur_max)))
    if rng.random() < (0.5 if kind == "app_ui" else 0.8):
        buf = io.BytesIO()
        out.save(buf, "JPEG", quality=int(rng.integers(40, 93)))
        out = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return np.asarray(out)


def _owner(plans: list[_Obj], W: int, H: int) -> np.ndarray:
    own = np.full((H, W), -1, np.int16)
    for i, o in enumerate(plans):
        h, w = o.mask.shape
        own[o.oy:o.oy + h, o.ox:o.ox + w][o.mask] = i
    return own


def _surround(o: _Obj, own: np.ndarray, W: int, H: int, final: np.ndarray) -> np.ndarray | None:
    x0, y0, x1, y1 = _window(o, 5, W, H)
    m = _in_window(o.mask.astype(np.float32), o, x0, y0, x1, y1) > 0.5
    ring = _morph(m, 4, True) & ~_morph(m, 1, True) & (own[y0:y1, x0:x1] == -1)
    if ring.sum() < 6:
        ring = _morph(m, 4, True) & ~_morph(m, 1, True)
    if ring.sum() < 6:
        return None
    return final[y0:y1, x0:x1][ring].astype(np.float32).mean(0) / 255.0


def _core(o: _Obj, own: np.ndarray, i: int) -> np.ndarray:
    """The object's visible pixels away from its edge (crop frame)."""
    h, w = o.mask.shape
    vis = own[o.oy:o.oy + h, o.ox:o.ox + w] == i
    for r in (2, 1):
        if min(h, w) > 4 * r + 4:
            er = _morph(vis, r, False)
            if er.sum() >= 4:
                return er
    return vis


def _check(final: np.ndarray, plans: list[_Obj], own: np.ndarray, W: int, H: int) -> list[int]:
    bad = []
    for i, o in enumerate(plans):
        h, w = o.mask.shape
        core = _core(o, own, i)
        if core.sum() < 3:
            bad.append(i)
            continue
        mean = final[o.oy:o.oy + h, o.ox:o.ox + w][core].astype(np.float32).mean(0) / 255.0
        around = _surround(o, own, W, H, final)
        if colour_name(mean) != o.colour or (around is not None and delta_e(mean, around) < 22):
            bad.append(i)
    return bad


def _scene_object(o: _Obj, i: int, own: np.ndarray, ctx: _Ctx) -> SceneObject:
    W, H = ctx.W, ctx.H
    ys, xs = np.nonzero(o.mask)
    r0, r1, c0, c1 = ys.min(), ys.max(), xs.min(), xs.max()
    mask = o.mask[r0:r1 + 1, c0:c1 + 1].copy()
    gy, gx = ys.mean() + o.oy, xs.mean() + o.ox
    core = _core(o, own, i)
    cy, cx = np.nonzero(core)
    k = int(np.argmin((cy + o.oy - gy) ** 2 + (cx + o.ox - gx) ** 2))
    px, py = int(cx[k] + o.ox), int(cy[k] + o.oy)
    box = ((c0 + o.ox) / W, (r0 + o.oy) / H, (c1 + 1 + o.ox) / W, (r1 + 1 + o.oy) / H)
    ctr = _to_image(ctx, np.array([[o.cx, o.cy]]))[0]
    diam = 2 * float(np.sqrt(((o.poly - ctr) ** 2).sum(1)).max())
    return SceneObject(shape=o.shape, colour=o.colour, box=tuple(float(v) for v in box),
                       point=((px + 0.5) / W, (py + 0.5) / H), rgb=tuple(int(v) for v in _u8(o.rgb)),
                       tilt=_tilt(o.shape, o.angle), size=diam / min(W, H), mask=mask)


# --------------------------------------------------------------------------- queries

def _query(rng: np.random.Generator, objects: tuple[SceneObject, ...]) -> tuple[str, str]:
    """(text, how): how is present / near_miss / absent."""
    known = [o for o in objects if o.known]
    if known and rng.random() >= 0.17:
        o = known[int(rng.integers(len(known)))]
        form = rng.choice(3, p=[0.55, 0.28, 0.17])
        return (f"{o.colour} {o.shape}", o.shape, o.colour)[form], "present"
    if objects and rng.random() < 0.6:
        for _ in range(12):
            o = objects[int(rng.integers(len(objects)))]
            way = int(rng.integers(4))
            shape = o.shape if o.shape in SHAPES else str(rng.choice(NEAR_SHAPE[o.shape]))
            if way == 0:
                text = str(rng.choice(NEAR_SHAPE[o.shape]))
            elif way == 1:
                text = f"{rng.choice(NEAR_COLOUR[o.colour])} {shape}"
            elif way == 2:
                text = str(rng.choice(NEAR_COLOUR[o.colour]))
            else:
                text = f"{rng.choice(VOCAB_COLOURS)} {shape}"
            if not matches(text, objects):
                return text, "near_miss"
    for _ in range(50):
        form = int(rng.integers(3))
        c, s = str(rng.choice(VOCAB_COLOURS)), str(rng.choice(SHAPES))
        text = (f"{c} {s}", s, c)[form]
        if not matches(text, objects):
            return text, "absent"
    o = known[int(rng.integers(len(known)))]
    return f"{o.colour} {o.shape}", "present"


# --------------------------------------------------------------------------- public

def _pair(seed: int, i: int) -> tuple[Scene, Query, dict]:
    rng = np.random.default_rng([int(seed), int(i), 10])
    kind = KINDS[int(rng.integers(len(KINDS)))]
    crowd = rng.random() < 0.25
    W, H = _canvas(rng, kind, crowd)
    bg, ctx = BACKGROUNDS[kind](rng, W, H)
    plans = _resolve(_plan(rng, ctx, bg, crowd), ctx)
    post_seed = int(rng.integers(2 ** 31))
    render_seed = int(rng.integers(2 ** 31))
    drops = 0
    while True:
        img = _render_objects(bg.copy(), ctx, plans, np.random.default_rng(render_seed))
        final = _post(img, ctx, np.random.default_rng(post_seed))
        own = _owner(plans, W, H)
        bad = _check(final, plans, own, W, H)
        if not bad:
            break
        drops += len(bad)
        plans = [o for j, o in enumerate(plans) if j not in bad]
    objects = tuple(_scene_object(o, j, own, ctx) for j, o in enumerate(plans))
    scene = Scene(image=Image.fromarray(final), objects=objects, background=kind)
    text, how = _query(rng, objects)
    return scene, Query(text, matches(text, objects)), {"how": how, "dropped": drops, "crowd": crowd}


def tenth_pair(seed: int, i: int) -> tuple[Scene, Query]:
    """Scene and query number `i` of the stream `seed` (depends on nothing else)."""
    scene, query, _ = _pair(seed, i)
    return scene, query


def tenth_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    return [tenth_pair(seed, i) for i in range(n)]


def draw_boxes(scene: Scene, query: Query | None = None) -> Image.Image:
    im = scene.image.convert("RGB").copy()
    W, H = im.size
    d = ImageDraw.Draw(im)
    hits = {id(o) for o in query.matches} if query is not None else set()
    for o in scene.objects:
        x0, y0, x1, y1 = o.box
        col = (255, 0, 255) if id(o) in hits else ((0, 255, 255) if o.known else (128, 128, 128))
        d.rectangle([x0 * W, y0 * H, x1 * W - 1, y1 * H - 1], outline=col)
        px, py = o.point[0] * W, o.point[1] * H
        d.ellipse([px - 2, py - 2, px + 2, py + 2], fill=col, outline=(0, 0, 0))
        d.text((x0 * W, max(0, y0 * H - 9)), f"{o.colour} {o.shape}", fill=col, font=_font(9))
    if query is not None:
        d.text((2, H - 11), f"q: {query.text} ({len(query.matches)})", fill=(255, 0, 255), font=_font(10))
    return im


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=10101)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--save", default=None, help="write the first --k scenes (image and image with boxes) here")
    ap.add_argument("--k", type=int, default=6)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    data = [_pair(a.seed, i) for i in range(a.n)]
    dt = time.perf_counter() - t0
    shapes, colours, kinds, crowd, forms, hows, sizes = Counter(), Counter(), Counter(), Counter(), Counter(), \
        Counter(), []
    nobj, dropped = [], 0
    for scene, query, info in data:
        kinds[scene.background] += 1
        n = len(scene.objects)
        nobj.append(n)
        crowd["0" if n == 0 else "1-3" if n <= 3 else "4-10" if n <= 10 else "11-25"] += 1
        forms[len(query.text.split()) == 2 and "colour shape" or (query.text in COLOURS and "colour" or "shape")] += 1
        hows[info["how"]] += 1
        dropped += info["dropped"]
        for o in scene.objects:
            shapes[o.shape] += 1
            colours[o.colour] += 1
            sizes.append(o.size)
    tot = sum(nobj)
    fmt = lambda c: ", ".join(f"{k} {v}" for k, v in c.most_common())  # noqa: E731
    print(f"{a.n} scenes (seed {a.seed}) in {dt:.1f}s ({1000 * dt / max(1, a.n):.0f} ms each); {tot} objects, "
          f"{sum(1 for s, _, _ in data for o in s.objects if not o.known)} distractors; {dropped} dropped by the "
          f"colour check")
    print("scene kinds:", fmt(kinds))
    print("objects per scene:", fmt(crowd))
    print("shapes:", fmt(shapes))
    print("colours:", fmt(colours))
    print("queries:", fmt(forms), "|", fmt(hows),
          f"| empty {sum(1 for _, q, _ in data if not q.matches)}")
    sz = np.array(sizes) if sizes else np.zeros(1)
    print(f"size (diameter / short side): min {sz.min():.3f} median {np.median(sz):.3f} max {sz.max():.3f}")
    dims = np.array([s.image.size for s, _, _ in data])
    print(f"canvas: width {dims[:, 0].min()}-{dims[:, 0].max()}, height {dims[:, 1].min()}-{dims[:, 1].max()}")
    if a.save:
        out = Path(a.save)
        out.mkdir(parents=True, exist_ok=True)
        for i, (scene, query, _) in enumerate(data[:a.k]):
            scene.image.save(out / f"tenth_{i:02d}_{scene.background}.png")
            draw_boxes(scene, query).save(out / f"tenth_{i:02d}_{scene.background}_boxes.png")
        print(f"wrote {2 * min(a.k, len(data))} images to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
