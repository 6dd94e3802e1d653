"""Synthetic scenes with exact ground truth, for training and evaluating detect/point.

A scene is an RGB image of flat-coloured shapes on a varied background, plus, for every
object, its shape and colour names, the tight bounding box of its drawn pixels and a point
inside it. A query names a shape ("circle"), a colour and a shape ("red circle") or a colour
("red"); its matches are the objects it names, in canonical reading order.

Conventions (all coordinates normalised by the image width / height):

* ``box = (x_min, y_min, x_max, y_max)`` covers the object's pixels edge to edge: an object
  whose pixels span columns ``c0..c1`` has ``x_min = c0 / W`` and ``x_max = (c1 + 1) / W``.
  The box is that of the whole shape (as if drawn alone), also when a later object hides
  part of it.
* ``point = (x, y)`` is the centre of one pixel of the object that stays visible in the
  final image (the pixel nearest the shape's centroid): ``x = (col + 0.5) / W``.
* Objects are drawn in list order; a later object may cover at most ``MAX_COVERED`` of an
  earlier object's pixels and never its point. Objects of the same colour never touch, so
  each one stays a separate blob.
* Shapes are drawn without anti-aliasing (unless ``make_scene(style=True)``, training only:
  `styles.py`), each in one flat colour (its named colour with a
  small per-object jitter, kept in ``SceneObject.rgb``), so the pixels of an object are
  exactly the pixels of that colour inside its box.
"""

from __future__ import annotations

import colorsys
import dataclasses
import io
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from engine.model.vocabulary import Vocabulary
from engine.training import styles
from engine.training.cells import CELLS_P, cell_grid
from engine.training.clutter import CLUTTER_BACKGROUNDS, CLUTTER_P, leaves_background, print_background
from engine.training.drops import DROPS_P, add_drops

# The vocabulary (one home; README "The embedded model" repeats it). Names never overlap:
# * square: four equal sides and equal diagonals, at ANY rotation (45° included: a tilted
#   square is a square, never a diamond);
# * diamond: a rhombus whose short diagonal is DIAMOND_RATIO (0.5–0.75) of its long one, at any
#   rotation; so a diamond is never a square;
# * every shape may appear at any rotation; circle, triangle (equilateral), star (five points),
#   cross (plus-shaped, arms of equal length), hexagon (regular).
# Objects outside the vocabulary (DISTRACTOR_SHAPES, DISTRACTOR_COLOURS) appear in scenes and must
# never be returned for a shape they do not have; a colour query ("red") names every object of that
# colour, whatever its shape.
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
DIAMOND_RATIO = (0.5, 0.75)

COLOURS: dict[str, tuple[int, int, int]] = {     # the canonical shade of each colour name
    "red": (225, 30, 35),
    "green": (30, 175, 50),
    "blue": (35, 80, 235),
    "yellow": (250, 225, 20),
    "purple": (145, 45, 200),
    "orange": (255, 135, 10),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
}

# Every shade a colour name covers: (hue from, hue to in degrees, saturation range, value range).
# Objects take a uniform shade from their name's range (one flat fill per object).
COLOUR_RANGES: dict[str, tuple[float, float, float, float, float, float]] = {
    "red": (-10, 6, 0.7, 1.0, 0.72, 1.0),
    "orange": (20, 34, 0.8, 1.0, 0.88, 1.0),
    "yellow": (48, 60, 0.75, 1.0, 0.88, 1.0),
    "green": (100, 145, 0.6, 1.0, 0.5, 0.85),
    "blue": (205, 232, 0.65, 1.0, 0.6, 0.95),
    "purple": (265, 290, 0.45, 0.85, 0.6, 0.85),
    "white": (0, 360, 0.0, 0.05, 0.94, 1.0),
    "black": (0, 360, 0.0, 0.3, 0.0, 0.12),
}
DISTRACTOR_COLOURS: dict[str, tuple[float, float, float, float, float, float]] = {
    "pink": (325, 350, 0.22, 0.5, 0.92, 1.0),
    "cyan": (178, 192, 0.65, 1.0, 0.78, 1.0),
    "brown": (18, 32, 0.55, 0.85, 0.32, 0.55),
    "gray": (0, 360, 0.0, 0.04, 0.42, 0.62),
}
DISTRACTOR_SHAPES: tuple[str, ...] = ("pentagon", "ellipse", "rectangle", "heart", "arrow", "ring", "crescent", "trapezoid")
# Look-alikes of vocabulary shapes, distractors only with `make_scene(lookalikes=True)` (`engine.train
# --lookalikes`): a parallelogram (sides in a ratio of 0.54–0.69, never a diamond) and a kite (two short,
# two long sides) beside the diamond, a regular octagon beside the circle and the hexagon.
LOOKALIKE_SHAPES: tuple[str, ...] = ("parallelogram", "kite", "octagon")

QUERY_WORDS: tuple[str, ...] = tuple(COLOURS) + SHAPES
# What a model trained on these scenes recognises (written into its config.json for the UI).
SCENE_VOCABULARY = Vocabulary({"shapes": SHAPES, "colours": tuple(COLOURS)},
                              examples=("red circle", "star", "blue square", "green", "yellow triangle", "hexagon"))

BACKGROUNDS: tuple[str, ...] = ("flat", "gradient", "noise", "blotches", "stripes", "checker", "texture")

MAX_COVERED = 0.30      # largest fraction of an object's pixels that later objects may hide
READING_BANDS = 8       # reading order: horizontal bands of 1/8 image height, then x
MIN_BG_DISTANCE = 60.0  # smallest RGB distance from a background base colour to any object shade
SIZE_FRACTION = (0.02, 0.40)  # object size (circumscribed diameter) / the image's short side, log-uniform
MIN_OBJECT_PX = 9
MAX_ASPECT = 3.0        # image aspect ratio stays within [1/3, 3]
SYMMETRY = {"circle": 0.0, "square": 90.0, "triangle": 120.0, "star": 72.0, "cross": 90.0, "hexagon": 60.0,
            "diamond": 180.0}   # rotation period in degrees (0: rotation changes nothing)

# The own generator (`engine.evaluate --generator own`), unchanged since stage 16 so that its figures
# compare across models.
OWN_SCENES: dict[str, Any] = {"min_objects": 0, "max_objects": 25, "size_range": (96, 512), "distractors": 4,
                              "crowd_rate": 0.35, "effects": True}

# Training-only widening (`make_scene(variety=True)`, `engine.train --variety`, stages 23–25):
# each colour name's shades reach further (darker reds, blues, greens and purples; a wider hue for
# orange and yellow), backgrounds take any muted, light, dark or off-vocabulary vivid colour that keeps
# VARIETY_BG_DISTANCE from every shade, and VARIETY_BACKGROUNDS add patterns of many small marks
# (polka dots, confetti), grid lines and radial gradients. Distractor colours stay disjoint from the
# wide ranges (tests/test_scenes.py checks it).
WIDE_COLOUR_RANGES: dict[str, tuple[float, float, float, float, float, float]] = {
    "red": (-14, 8, 0.65, 1.0, 0.55, 1.0),
    "orange": (20, 36, 0.75, 1.0, 0.82, 1.0),
    "yellow": (46, 62, 0.65, 1.0, 0.82, 1.0),
    "green": (95, 150, 0.55, 1.0, 0.35, 0.9),
    "blue": (200, 238, 0.6, 1.0, 0.42, 0.97),
    "purple": (260, 298, 0.4, 0.9, 0.42, 0.88),
    "white": (0, 360, 0.0, 0.07, 0.92, 1.0),
    "black": (0, 360, 0.0, 0.35, 0.0, 0.16),
}
MARK_BACKGROUNDS: tuple[str, ...] = ("dots", "confetti", "grid")   # a base colour with marks of another
VARIETY_BACKGROUNDS: tuple[str, ...] = MARK_BACKGROUNDS + ("radial",)
VARIETY_BG_DISTANCE = 40.0   # (RGB) a light or dark background may come closer to white / black objects
VARIETY_SCENES: dict[str, Any] = {**OWN_SCENES, "variety": True}

# Training-only poses (`make_scene(poses=True)`, `engine.train --poses`): a diamond standing on a
# vertex (long diagonal upright or level) and a square standing on a corner (45°) look most alike,
# and the shipped model answered "square" for upright diamonds (README, "A sixth generator"). So
# VERTEX_POSE_P of the diamonds and of the squares take that pose, within ±VERTEX_POSE_SPREAD degrees;
# the rest keep any rotation. The names do not change: a square on its corner is a square.
VERTEX_POSES: dict[str, float] = {"diamond": 0.0, "square": 45.0}
VERTEX_POSE_P = 0.5
VERTEX_POSE_SPREAD = 8.0


def tilt(shape: str, angle: float) -> float:
    """How far a rotation by `angle` degrees turns a shape away from its nearest upright pose
    (0 … half its symmetry period, in degrees; always 0 for a circle or an unknown shape)."""
    period = SYMMETRY.get(shape, 0.0)
    if not period:
        return 0.0
    a = angle % period
    return float(min(a, period - a))


def hsv_shade(rng: np.random.Generator, spec: Sequence[float]) -> np.ndarray:
    """A uniform RGB shade (float, 0–255) from an (h0, h1, s0, s1, v0, v1) range."""
    h0, h1, s0, s1, v0, v1 = spec
    h = (rng.uniform(h0, h1) % 360.0) / 360.0
    return np.array(colorsys.hsv_to_rgb(h, rng.uniform(s0, s1), rng.uniform(v0, v1))) * 255.0


def in_range(rgb: Sequence[float], spec: Sequence[float], tol: float = 0.01) -> bool:
    """Does an RGB shade fall in an (h0, h1, s0, s1, v0, v1) range (tolerance `tol`, plus the
    saturation and hue error of 8-bit rounding, large for dark and grey shades)?"""
    h, sat, val = colorsys.rgb_to_hsv(*(np.asarray(rgb, dtype=np.float64) / 255.0))
    h0, h1, s0, s1, v0, v1 = spec
    s_tol = tol + 1.0 / max(val * 255.0, 1.0)
    if not (s0 - s_tol <= sat <= s1 + s_tol and v0 - tol <= val <= v1 + tol):
        return False
    chroma = sat * val * 255.0
    if h1 - h0 >= 360 or chroma < 8:
        return True
    tol = tol + 30.0 / 360.0 / chroma
    deg = h * 360.0
    return any(h0 - 360 * tol <= d <= h1 + 360 * tol for d in (deg, deg - 360.0, deg + 360.0))


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    box: tuple[float, float, float, float]
    point: tuple[float, float]
    rgb: tuple[int, int, int] = (0, 0, 0)
    tilt: float = 0.0       # degrees away from the upright pose (`tilt`)
    size: float = 0.0       # circumscribed diameter / the image's short side
    # Full (unoccluded) pixel mask of the shape, cropped to its box: shape (box height, box width).
    mask: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"

    @property
    def known(self) -> bool:
        """Both its colour and its shape are in the vocabulary (not a distractor)."""
        return self.colour in COLOURS and self.shape in SHAPES


@dataclass(frozen=True)
class Scene:
    image: Image.Image
    objects: tuple[SceneObject, ...]   # in drawing order (bottom first)
    background: str = ""               # the background's kind (for breakdowns)

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


@dataclass(frozen=True)
class Query:
    text: str
    matches: tuple[SceneObject, ...]   # in reading order; empty: the answer is an immediate EOS


# --------------------------------------------------------------------------- shapes

def polygon(shape: str, r: float, angle: float, aspect: float = 0.62) -> list[tuple[float, float]] | None:
    """Vertices around the origin (None for shapes drawn as ellipses), y pointing down.
    `aspect`: a diamond's short / long diagonal, a rectangle's or ellipse's short / long side."""
    if shape in ("circle", "ellipse", "ring", "crescent"):
        return None
    if shape == "square":
        a = r / math.sqrt(2.0)
        pts = [(-a, -a), (a, -a), (a, a), (-a, a)]
    elif shape == "triangle":
        pts = [(r * math.cos(t), r * math.sin(t)) for t in (math.radians(d) for d in (-90, 30, 150))]
    elif shape == "star":
        pts = []
        for k in range(10):
            rad = r if k % 2 == 0 else 0.42 * r
            t = math.radians(-90 + 36 * k)
            pts.append((rad * math.cos(t), rad * math.sin(t)))
    elif shape == "cross":
        w = 0.32 * r
        pts = [(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w), (-r, w), (-r, -w), (-w, -w)]
    elif shape == "hexagon":
        pts = [(r * math.cos(math.radians(60 * k)), r * math.sin(math.radians(60 * k))) for k in range(6)]
    elif shape == "diamond":
        pts = [(0.0, -r), (aspect * r, 0.0), (0.0, r), (-aspect * r, 0.0)]
    elif shape == "pentagon":
        pts = [(r * math.cos(math.radians(-90 + 72 * k)), r * math.sin(math.radians(-90 + 72 * k))) for k in range(5)]
    elif shape == "rectangle":
        a = r / math.sqrt(1.0 + aspect * aspect)
        pts = [(-a, -aspect * a), (a, -aspect * a), (a, aspect * a), (-a, aspect * a)]
    elif shape == "trapezoid":
        pts = [(-0.45 * r, -0.55 * r), (0.45 * r, -0.55 * r), (r, 0.55 * r), (-r, 0.55 * r)]
    elif shape == "arrow":
        pts = [(-r, -0.2 * r), (0.25 * r, -0.2 * r), (0.25 * r, -0.6 * r), (r, 0.0), (0.25 * r, 0.6 * r),
               (0.25 * r, 0.2 * r), (-r, 0.2 * r)]
    elif shape == "octagon":
        pts = [(r * math.cos(math.radians(22.5 + 45 * k)), r * math.sin(math.radians(22.5 + 45 * k))) for k in range(8)]
    elif shape == "parallelogram":   # long sides 1.2 r, short sides 0.65–0.83 r (aspect 0.35–0.55)
        a, sk, b = 0.6 * r, 0.25 * r, 0.6 * aspect * r
        pts = [(-a + sk, -b), (a + sk, -b), (a - sk, b), (-a - sk, b)]
    elif shape == "kite":            # sides 0.58 r and 1.18 r
        pts = [(0.0, -0.5 * r), (0.42 * r, -0.1 * r), (0.0, r), (-0.42 * r, -0.1 * r)]
    elif shape == "heart":
        pts = []
        for k in range(40):
            t = 2 * math.pi * k / 40
            x = 16 * math.sin(t) ** 3
            y = -(13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t))
            pts.append((x * r / 17.0, (y + 2.5) * r / 17.0))
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES + DISTRACTOR_SHAPES + LOOKALIKE_SHAPES)}")
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s, x * s + y * c) for x, y in pts]


def _round_shape(shape: str, r: float, n: int, angle_deg: float, aspect: float) -> np.ndarray:
    """Circle, ellipse, ring and crescent: drawn upright on an n×n canvas, then rotated."""
    c = n / 2.0
    canvas = Image.new("L", (n, n), 0)
    draw = ImageDraw.Draw(canvas)
    if shape == "ellipse":
        draw.ellipse([c - r, c - aspect * r, c + r, c + aspect * r], fill=1)
    else:
        draw.ellipse([c - r, c - r, c + r, c + r], fill=1)
        if shape == "ring":
            draw.ellipse([c - 0.55 * r, c - 0.55 * r, c + 0.55 * r, c + 0.55 * r], fill=0)
        elif shape == "crescent":
            draw.ellipse([c - 0.5 * r, c - 0.95 * r, c + 1.4 * r, c + 0.95 * r], fill=0)
    if shape != "circle" and angle_deg:
        canvas = canvas.rotate(-angle_deg, resample=Image.NEAREST, center=(c, c))
    return np.asarray(canvas, dtype=bool)


def render_shape(shape: str, diameter: float, angle_deg: float = 0.0, aspect: float = 0.62) -> np.ndarray:
    """Boolean mask of a shape whose circumscribed circle has `diameter` px, cropped tight."""
    r = diameter / 2.0
    n = int(math.ceil(diameter)) + 4
    pts = polygon(shape, r, math.radians(angle_deg), aspect)
    if pts is None:
        mask = _round_shape(shape, r, n, angle_deg, aspect)
    else:
        c = n / 2.0
        canvas = Image.new("L", (n, n), 0)
        ImageDraw.Draw(canvas).polygon([(c + x, c + y) for x, y in pts], fill=1)
        mask = np.asarray(canvas, dtype=bool)
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        raise ValueError(f"shape {shape!r} of diameter {diameter} draws no pixels")
    return mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


def _inner_point(mask: np.ndarray) -> tuple[int, int]:
    """(row, col) of the mask pixel nearest the mask's centroid."""
    ys, xs = np.nonzero(mask)
    cy, cx = ys.mean(), xs.mean()
    iy, ix = int(round(cy)), int(round(cx))
    if 0 <= iy < mask.shape[0] and 0 <= ix < mask.shape[1] and mask[iy, ix]:
        return iy, ix
    k = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))
    return int(ys[k]), int(xs[k])


# --------------------------------------------------------------------------- backgrounds

def _range_samples(spec) -> list[np.ndarray]:
    h0, h1, s0, s1, v0, v1 = spec
    hues = np.linspace(h0, h1, 2 + int((h1 - h0) // 15))
    return [np.array(colorsys.hsv_to_rgb((h % 360) / 360, sa, va)) * 255.0
            for h in hues for sa in (s0, (s0 + s1) / 2, s1) for va in (v0, (v0 + v1) / 2, v1)]


# shades spanning every colour name's range: backgrounds keep MIN_BG_DISTANCE from all of them
OBJECT_RGB = np.array([rgb for spec in COLOUR_RANGES.values() for rgb in _range_samples(spec)], dtype=np.float64)
WIDE_OBJECT_RGB = np.array([rgb for spec in WIDE_COLOUR_RANGES.values() for rgb in _range_samples(spec)],
                           dtype=np.float64)


def hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """`colorsys.hsv_to_rgb` over arrays (h in [0, 1)), with its float operations: the same bits."""
    i = (h * 6.0).astype(np.int64)
    f = (h * 6.0) - i
    p, q, t = v * (1.0 - s), v * (1.0 - s * f), v * (1.0 - s * (1.0 - f))
    i = i % 6
    rgb = np.stack([np.choose(i, [v, q, p, p, t, v]), np.choose(i, [t, v, v, q, p, p]),
                    np.choose(i, [p, p, t, v, v, q])], axis=-1)
    grey = s == 0.0
    rgb[grey] = v[grey, None]
    return rgb


def bg_colour(rng: np.random.Generator, wide: bool = False) -> np.ndarray:
    """A muted mid-tone colour far from every object shade (the first of 64 candidates that is).
    wide: any hue, saturation 0–0.75 and value 0.12–0.97, VARIETY_BG_DISTANCE from the wide shades."""
    if wide:
        return _wide_bg_colour(rng)
    for _ in range(4):
        # 64 candidates' (hue, saturation, value) in the order of 64 × (rng.random(), rng.uniform(0, 0.28),
        # rng.uniform(0.32, 0.72)): Generator.uniform is low + (high - low) · the next double
        d = rng.random(192)
        cand = hsv_to_rgb(d[0::3], 0.0 + (0.28 - 0.0) * d[1::3], 0.32 + (0.72 - 0.32) * d[2::3]) * 255.0  # [64, 3]
        for lo in range(0, 64, 8):   # the first fit is usually among the first few: measure 8 at a time
            part = cand[lo:lo + 8]
            dist = np.sqrt(((part[:, None, :] - OBJECT_RGB[None]) ** 2).sum(-1)).min(1)
            ok = np.flatnonzero(dist >= MIN_BG_DISTANCE)
            if ok.size:
                return part[ok[0]]
    return np.array([128.0, 128.0, 128.0])


def _wide_bg_colour(rng: np.random.Generator) -> np.ndarray:
    for _ in range(8):
        d = rng.random((16, 3))
        cand = hsv_to_rgb(d[:, 0], 0.75 * d[:, 1], 0.12 + 0.85 * d[:, 2]) * 255.0   # [16, 3]
        dist = np.sqrt(((cand[:, None, :] - WIDE_OBJECT_RGB[None]) ** 2).sum(-1)).min(1)
        ok = np.flatnonzero(dist >= VARIETY_BG_DISTANCE)
        if ok.size:
            return cand[ok[0]]
    return np.array([128.0, 128.0, 128.0])


def _mark_size_px(short: int) -> float:
    """Largest diameter of a background mark (dots, confetti): 0.7 × the smallest object's."""
    return 0.7 * max(MIN_OBJECT_PX, SIZE_FRACTION[0] * short)


def _mark_background(rng: np.random.Generator, kind: str, w: int, h: int,
                     c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """(h, w, 3) uint8 pixels of one of MARK_BACKGROUNDS in base colour c1 and mark colour c2."""
    yy, xx = np.arange(h, dtype=np.float32)[:, None], np.arange(w, dtype=np.float32)[None, :]
    u1, u2 = np.rint(c1).astype(np.uint8), np.rint(c2).astype(np.uint8)
    cap = _mark_size_px(min(w, h))
    if kind == "dots":        # a regular (optionally staggered) lattice of small discs
        r = rng.uniform(1.2, cap / 2)
        sp = rng.uniform(3.0, 7.0) * r
        shift = (np.floor(yy / sp) % 2) * (sp / 2) if rng.random() < 0.5 else 0.0
        on = np.hypot((xx + shift) % sp - sp / 2, yy % sp - sp / 2) <= r
        return np.stack([u1, u2])[on.astype(np.int32)]
    if kind == "grid":
        sp, lw = rng.uniform(10, 50), int(rng.integers(1, 3))
        on = ((xx.astype(np.int32) % int(sp)) < lw) | ((yy.astype(np.int32) % int(sp)) < lw)
        return np.stack([u1, u2])[on.astype(np.int32)]
    # confetti: scattered small dots and strokes in two or three background colours
    img = Image.fromarray(np.broadcast_to(u1, (h, w, 3)).copy())
    draw = ImageDraw.Draw(img)
    inks = [tuple(int(v) for v in u2)] + [tuple(int(v) for v in np.rint(bg_colour(rng, wide=True)))
                                          for _ in range(int(rng.integers(0, 2)))]
    n = int(w * h * rng.uniform(0.002, 0.012) / max(cap, 2.0))
    pos = rng.random((n, 4))
    for i in range(n):
        x, y = pos[i, 0] * w, pos[i, 1] * h
        s = 1.0 + pos[i, 2] * (cap - 1.0) / 2
        ink = inks[i % len(inks)]
        if pos[i, 3] < 0.5:
            draw.ellipse((x - s, y - s, x + s, y + s), fill=ink)
        else:
            t = pos[i, 3] * 4 * math.pi
            draw.line((x, y, x + 2 * s * math.cos(t), y + 2 * s * math.sin(t)), fill=ink, width=1)
    return np.asarray(img).copy()


def background(rng: np.random.Generator, w: int, h: int, variety: bool = False,
               clutter: bool = False) -> tuple[np.ndarray, str]:
    """A (h, w, 3) uint8 background and its kind. Every pixel stays within a small distance of
    a colour returned by bg_colour (noise: up to ~1.3 sigma on average, clipped at 3 sigma).
    variety: also VARIETY_BACKGROUNDS, in bg_colour(wide=True) colours.
    clutter: CLUTTER_P of the backgrounds are CLUTTER_BACKGROUNDS (`clutter.py`, training only)."""
    if clutter and rng.random() < CLUTTER_P:
        kind = CLUTTER_BACKGROUNDS[int(rng.integers(len(CLUTTER_BACKGROUNDS)))]
        c1, c2 = bg_colour(rng, wide=variety), bg_colour(rng, wide=variety)
        if kind == "print":
            return print_background(rng, w, h, c1, c2, _mark_size_px(min(w, h))), kind
        return leaves_background(rng, w, h, c1, c2), kind
    if variety:
        kinds = BACKGROUNDS + VARIETY_BACKGROUNDS
        kind = kinds[int(rng.integers(len(kinds)))]
        c1, c2 = bg_colour(rng, wide=True), bg_colour(rng, wide=True)
        if kind in MARK_BACKGROUNDS:
            return _mark_background(rng, kind, w, h, c1, c2), kind
    else:
        kind = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
        c1, c2 = bg_colour(rng), bg_colour(rng)
    u1, u2 = np.rint(c1).astype(np.uint8), np.rint(c2).astype(np.uint8)
    if kind == "flat":
        return np.broadcast_to(u1, (h, w, 3)).copy(), kind
    if kind in ("gradient", "stripes"):
        t = rng.uniform(0, 2 * math.pi)
        proj = (np.arange(w, dtype=np.float32)[None, :] * np.float32(math.cos(t))
                + np.arange(h, dtype=np.float32)[:, None] * np.float32(math.sin(t)))
        if kind == "stripes":
            half = np.float32(rng.uniform(3, 20))
            band = ((proj - np.float32(proj.min())) / half).astype(np.int32) & 1
            return np.stack([u1, u2])[band], kind
        lo, hi = float(proj.min()), float(proj.max())
        frac = (proj - lo) * np.float32(255.0 / max(hi - lo, 1.0))
    elif kind == "radial":   # (variety only) from c1 at a random centre to c2 at the farthest pixel
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        d = np.hypot(np.arange(w, dtype=np.float32)[None, :] - cx, np.arange(h, dtype=np.float32)[:, None] - cy)
        frac = d * np.float32(255.0 / max(float(d.max()), 1.0))
    elif kind == "blotches":
        gw, gh = int(rng.integers(3, 9)), int(rng.integers(3, 9))
        small = (rng.random((gh, gw)) * 255.0).astype(np.float32)
        frac = np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BILINEAR))
    elif kind == "noise":
        a = int(rng.integers(6, 22))   # half-width of the shared (grey) noise
        b = max(1, a // 3)             # half-width of the per-channel noise
        img = u1.astype(np.int16) + rng.integers(-a, a + 1, size=(h, w, 1), dtype=np.int16) \
            + rng.integers(-b, b + 1, size=(h, w, 3), dtype=np.int16)
        return np.clip(img, 0, 255).astype(np.uint8), kind
    elif kind == "texture":   # photographic-like: a few octaves of smooth noise plus grain
        frac = np.zeros((h, w), np.float32)
        for octave, weight in ((3, 0.5), (9, 0.3), (27, 0.2)):
            gw, gh = max(2, w * octave // 256 + 2), max(2, h * octave // 256 + 2)
            small = (rng.random((gh, gw)) * 255.0).astype(np.float32)
            frac += weight * np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BICUBIC))
        frac += rng.normal(0.0, 12.0, size=(h, w)).astype(np.float32)
    else:  # checker
        cell = int(rng.integers(6, 41))
        band = (np.arange(h, dtype=np.int32)[:, None] // cell + np.arange(w, dtype=np.int32)[None, :] // cell) & 1
        return np.stack([u1, u2])[band], kind
    lut = np.rint(c1[None, :] + np.linspace(0.0, 1.0, 256)[:, None] * (c2 - c1)[None, :]).astype(np.uint8)
    return lut[np.clip(frac, 0, 255).astype(np.uint8)], kind


# --------------------------------------------------------------------------- scenes

def _try_place(rng, owner, placed, shape, colour, diameter, w, h, poses=False):
    angle = rng.uniform(0.0, 360.0)
    if poses and shape in VERTEX_POSES and rng.random() < VERTEX_POSE_P:
        angle = VERTEX_POSES[shape] + 90.0 * int(rng.integers(4)) + rng.uniform(-VERTEX_POSE_SPREAD, VERTEX_POSE_SPREAD)
    aspect = rng.uniform(*DIAMOND_RATIO) if shape == "diamond" else rng.uniform(0.35, 0.55)
    mask = render_shape(shape, diameter, angle, aspect)
    mh, mw = mask.shape
    if mh > h or mw > w:
        return None
    y0, x0 = int(rng.integers(0, h - mh + 1)), int(rng.integers(0, w - mw + 1))
    y1, x1 = y0 + mh, x0 + mw
    for p in placed:  # same-colour objects: boxes at least 2 px apart
        if p["colour"] == colour:
            py0, px0, py1, px1 = p["rect"]
            if x0 < px1 + 2 and px0 < x1 + 2 and y0 < py1 + 2 and py0 < y1 + 2:
                return None
    under = owner[y0:y1, x0:x1][mask]
    hidden = np.bincount(under[under >= 0], minlength=len(placed))
    for i in np.flatnonzero(hidden):
        p = placed[i]
        if p["visible"] - hidden[i] < (1.0 - MAX_COVERED) * p["area"]:
            return None
        py, px = p["pix"]
        if y0 <= py < y1 and x0 <= px < x1 and mask[py - y0, px - x0]:
            return None
    for i in np.flatnonzero(hidden):
        placed[i]["visible"] -= int(hidden[i])
    iy, ix = _inner_point(mask)
    return {"shape": shape, "colour": colour, "mask": mask, "rect": (y0, x0, y1, x1), "tilt": tilt(shape, angle),
            "area": int(mask.sum()), "visible": int(mask.sum()), "pix": (y0 + iy, x0 + ix)}


def make_scene(rng: np.random.Generator, *, min_objects: int = 0, max_objects: int = 10,
               size_range: tuple[int, int] = (96, 512), distractors: int = 0, crowd_rate: float = 0.0,
               effects: bool = False, variety: bool = False, lookalikes: bool = False,
               style: bool = False, poses: bool = False, clutter: bool = False, cells: bool = False,
               cells_share: float = CELLS_P, drops: bool = False) -> Scene:
    """One random scene: width uniform in size_range, height uniform in size_range within an
    aspect ratio of MAX_ASPECT. The count of vocabulary objects is drawn uniformly from
    [min_objects, max_objects]; in a crowded small image fewer may fit (placement gives up after
    many tries). Every object takes any rotation and a log-uniform size in SIZE_FRACTION.

    distractors: up to this many extra objects (uniform 0..distractors, drawn among the others)
    whose shape and/or colour is outside the vocabulary. crowd_rate: chance that the scene's
    objects come from only 1–3 (colour, shape) kinds, so one query matches many copies.
    effects: `photo_effects` (blur, JPEG, rescaling) on the finished scene.
    variety: the training-only widening (WIDE_COLOUR_RANGES, VARIETY_BACKGROUNDS, a tone change).
    lookalikes: distractors include LOOKALIKE_SHAPES (training only).
    style: drawing styles (training only, `styles.py`): shadows, shading and rims on objects, and an
    affine warp of the whole scene; objects are then no longer one flat colour.
    poses: VERTEX_POSE_P of the diamonds and squares stand on a vertex (training only).
    clutter: some backgrounds are printed text or leaves (`clutter.py`, training only).
    cells: a share cells_share (default CELLS_P) of the scenes is tried as LED panels or tile mosaics
    (`cells.py`, training only); about a quarter of those tries can be drawn.
    drops: DROPS_P of the scenes get rain drops, bubbles, glints or bokeh on the background only
    (`drops.py`, training only); the labels are unchanged."""
    if not 0 <= min_objects <= max_objects:
        raise ValueError(f"need 0 <= min_objects <= max_objects, got {min_objects}, {max_objects}")
    lo, hi = size_range
    if not 16 <= lo <= hi:
        raise ValueError(f"size_range must satisfy 16 <= lo <= hi, got {size_range}")
    w = int(rng.integers(lo, hi + 1))
    h = int(rng.integers(max(lo, math.ceil(w / MAX_ASPECT)), min(hi, int(w * MAX_ASPECT)) + 1))
    pixels, kind = background(rng, w, h, variety, clutter)
    shades = WIDE_COLOUR_RANGES if variety else COLOUR_RANGES
    owner = np.full((h, w), -1, dtype=np.int32)
    n = int(rng.integers(min_objects, max_objects + 1))
    n_extra = int(rng.integers(0, distractors + 1)) if distractors else 0
    short = min(w, h)
    placed: list[dict[str, Any]] = []
    colour_names = list(COLOURS)
    kinds = None
    if crowd_rate and rng.random() < crowd_rate:
        kinds = [(colour_names[int(rng.integers(len(colour_names)))], SHAPES[int(rng.integers(len(SHAPES)))])
                 for _ in range(int(rng.integers(1, 4)))]
    extra_at = set(rng.choice(n + n_extra, size=n_extra, replace=False).tolist()) if n_extra else set()
    log_lo, log_hi = math.log(SIZE_FRACTION[0]), math.log(SIZE_FRACTION[1])
    for i in range(n + n_extra):
        if i in extra_at:
            shape, colour, spec = _distractor(rng, lookalikes)
        else:
            if kinds is not None:
                colour, shape = kinds[int(rng.integers(len(kinds)))]
            else:
                shape = SHAPES[int(rng.integers(len(SHAPES)))]
                colour = colour_names[int(rng.integers(len(colour_names)))]
            spec = shades[colour]
        frac = math.exp(rng.uniform(log_lo, log_hi))
        for attempt in range(40):
            scale = 1.0 if attempt < 20 else 0.6
            diameter = max(MIN_OBJECT_PX, frac * scale * short)
            obj = _try_place(rng, owner, placed, shape, colour, diameter, w, h, poses)
            if obj is not None:
                break
        else:
            continue
        rgb = np.clip(np.rint(hsv_shade(rng, spec)), 0, 255).astype(np.uint8)
        y0, x0, y1, x1 = obj["rect"]
        if style:
            styles.paint_object(rng, pixels, owner, obj["mask"], obj["rect"], rgb, dark=colour == "black")
        else:
            pixels[y0:y1, x0:x1][obj["mask"]] = rgb
        owner[y0:y1, x0:x1][obj["mask"]] = len(placed)
        obj["rgb"] = tuple(int(v) for v in rgb)
        obj["size"] = diameter / short
        placed.append(obj)
    if style and placed and rng.random() < styles.STYLE_P["warp"]:
        fwd, darken = styles.random_warp(rng)
        warped = styles.affine_warp(pixels, owner, placed, fwd, darken)
        if warped is not None:
            pixels, owner, placed = warped
            h, w = owner.shape
            grow = math.sqrt(abs(float(np.linalg.det(fwd)))) * short / min(w, h)   # sizes: old short side → new
            for p in placed:
                p["pix"] = _visible_point(p)
                p["size"] *= grow
    if cells and placed and rng.random() < cells_share:
        redrawn = cell_grid(rng, pixels, owner, placed)
        if redrawn is not None:
            pixels, owner, placed, cell_kind = redrawn
            kind = f"{kind}+{cell_kind}"
            for p in placed:
                p["pix"] = _visible_point(p)
    if drops and rng.random() < DROPS_P:
        dropped = add_drops(rng, pixels, owner)
        if dropped is not None:
            pixels, drop_kind = dropped
            kind = f"{kind}+{drop_kind}"
    objects = []
    for p in placed:
        y0, x0, y1, x1 = p["rect"]
        py, px = p["pix"]
        mask = p["mask"]
        mask.setflags(write=False)
        objects.append(SceneObject(
            shape=p["shape"], colour=p["colour"],
            box=(x0 / w, y0 / h, x1 / w, y1 / h),
            point=((px + 0.5) / w, (py + 0.5) / h),
            rgb=p["rgb"], tilt=p["tilt"], size=p["size"], mask=mask))
    scene = Scene(image=Image.fromarray(pixels, mode="RGB"), objects=tuple(objects), background=kind)
    return photo_effects(rng, scene, tone=variety) if effects else scene


def _visible_point(p: dict[str, Any]) -> tuple[int, int]:
    """The canvas pixel (y, x) of a redrawn object's point: `_inner_point` of its "visible" part,
    offset by its "rect" (after a whole-scene redraw: `styles.affine_warp`, `cells.cell_grid`)."""
    iy, ix = _inner_point(p["visible"])
    return p["rect"][0] + iy, p["rect"][1] + ix


def _distractor(rng: np.random.Generator, lookalikes: bool = False) -> tuple[str, str, Sequence[float]]:
    """(shape, colour, shade range) of an object outside the vocabulary: an unknown shape in any
    colour, or a known shape in an unknown colour. lookalikes: half the unknown shapes are
    LOOKALIKE_SHAPES."""
    if rng.random() < 0.6:
        pool_shapes = LOOKALIKE_SHAPES if lookalikes and rng.random() < 0.5 else DISTRACTOR_SHAPES
        shape = pool_shapes[int(rng.integers(len(pool_shapes)))]
        pool = {**COLOUR_RANGES, **DISTRACTOR_COLOURS}
    else:
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        pool = DISTRACTOR_COLOURS
    colour = list(pool)[int(rng.integers(len(pool)))]
    return shape, colour, pool[colour]


EFFECT_P = {"rescale": 0.3, "blur": 0.25, "jpeg": 0.3, "tone": 0.3}


def photo_effects(rng: np.random.Generator, scene: Scene, tone: bool = False) -> Scene:
    """Capture-like degradations of a finished scene, each with its EFFECT_P chance: rescaling
    (each side by 0.6–1.0, the two factors within 8 % of each other; boxes stay on the new pixel
    grid, masks are resized with nearest neighbour), Gaussian blur (radius 0.3–1.2 px) and JPEG
    (quality 30–90); with `tone`, also a brightness and a contrast change (each × 0.85–1.15) before
    them. Boxes and points keep their meaning; pixel colours are no longer exact."""
    image, objects = scene.image, scene.objects
    if tone and rng.random() < EFFECT_P["tone"]:
        image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.85, 1.15))
        image = ImageEnhance.Contrast(image).enhance(rng.uniform(0.85, 1.15))
    if rng.random() < EFFECT_P["rescale"]:
        w, h = image.size
        f = rng.uniform(0.6, 1.0)
        g = f * math.exp(rng.uniform(-0.08, 0.08))
        nw, nh = max(32, int(round(w * f))), max(32, int(round(h * min(g, 1.0))))
        image = image.resize((nw, nh), Image.LANCZOS)
        objects = tuple(_rescaled(o, nw, nh) for o in objects)
    if rng.random() < EFFECT_P["blur"]:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
    if rng.random() < EFFECT_P["jpeg"]:
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=int(rng.integers(30, 91)))
        image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return Scene(image=image, objects=objects, background=scene.background)


def _rescaled(obj: SceneObject, w: int, h: int) -> SceneObject:
    x0, y0 = int(round(obj.box[0] * w)), int(round(obj.box[1] * h))
    x1, y1 = max(x0 + 1, int(round(obj.box[2] * w))), max(y0 + 1, int(round(obj.box[3] * h)))
    mask = np.asarray(Image.fromarray(obj.mask).resize((x1 - x0, y1 - y0), Image.NEAREST), dtype=bool)
    mask.setflags(write=False)
    return dataclasses.replace(obj, box=(x0 / w, y0 / h, x1 / w, y1 / h), mask=mask)


# --------------------------------------------------------------------------- queries

def reading_order_key(obj: SceneObject) -> tuple[int, float, float]:
    """Sort key: band of the point's y (READING_BANDS per image height), then x, then y."""
    x, y = obj.point
    return (min(int(y * READING_BANDS), READING_BANDS - 1), x, y)


def reading_order(objects: Sequence[SceneObject]) -> tuple[SceneObject, ...]:
    return tuple(sorted(objects, key=reading_order_key))


def parse_query(text: str) -> tuple[str | None, str | None]:
    """(colour, shape) named by a query text; either may be None. Raises on unknown words."""
    words = text.split()
    colour = shape = None
    if len(words) == 2 and words[0] in COLOURS and words[1] in SHAPES:
        colour, shape = words
    elif len(words) == 1 and words[0] in COLOURS:
        colour = words[0]
    elif len(words) == 1 and words[0] in SHAPES:
        shape = words[0]
    else:
        raise ValueError(f"not a scene query: {text!r} (use 'shape', 'colour shape' or 'colour')")
    return colour, shape


def matches(text: str, objects: Sequence[SceneObject]) -> tuple[SceneObject, ...]:
    """Objects named by `text`, in reading order."""
    colour, shape = parse_query(text)
    return reading_order([o for o in objects if (colour is None or o.colour == colour)
                          and (shape is None or o.shape == shape)])


ALL_QUERIES: tuple[str, ...] = (SHAPES + tuple(f"{c} {s}" for c in COLOURS for s in SHAPES) + tuple(COLOURS))
_FORMS = ("shape", "colour shape", "colour")
_FORM_P = (0.4, 0.45, 0.15)


def _text(form: str, colour: str, shape: str) -> str:
    return shape if form == "shape" else colour if form == "colour" else f"{colour} {shape}"


# Shapes a small or tilted one is taken for (the evaluation's wrong answers to absent shape queries):
# an absent shape "near" a present one is a hard negative.
NEAR_SHAPES: dict[str, tuple[str, ...]] = {
    "square": ("diamond",), "diamond": ("square", "triangle", "star"), "triangle": ("diamond", "star"),
    "star": ("cross", "triangle", "diamond"), "cross": ("star",), "hexagon": ("circle",), "circle": ("hexagon",),
}


def near_miss(text: str, present: set[tuple[str, str]]) -> bool:
    """Does an absent query `text` name something close to what the scene shows: a present shape
    in another colour, a present colour on another shape, or a shape that a present one resembles?"""
    words = text.split()
    colours = {c for c, _ in present}
    shapes = {s for _, s in present}
    if len(words) == 2:
        return words[0] in colours or words[1] in shapes
    if words[0] in SHAPES:
        return any(words[0] in NEAR_SHAPES.get(s, ()) for s in shapes)
    return False


def make_query(rng: np.random.Generator, scene: Scene, *, empty_rate: float = 0.15, hard_rate: float = 0.0) -> Query:
    """A query for `scene`: with probability `empty_rate` (always, for a scene with no
    objects) one that matches nothing, otherwise one naming a random object of the scene.
    `hard_rate`: the share of the empty queries drawn among near misses (`near_miss`) where the
    scene allows one; 0 draws no extra random number, so the stream is unchanged."""
    form = _FORMS[int(rng.choice(len(_FORMS), p=_FORM_P))]
    named = [o for o in scene.objects if o.colour in COLOURS or o.shape in SHAPES]
    if named and rng.random() >= empty_rate:
        obj = named[int(rng.integers(len(named)))]
        if obj.colour not in COLOURS:      # a distractor is named only by its known attribute
            form = "shape"
        elif obj.shape not in SHAPES:
            form = "colour"
        text = _text(form, obj.colour, obj.shape)
    else:
        present = {(o.colour, o.shape) for o in scene.objects}
        hard = hard_rate > 0 and rng.random() < hard_rate
        candidates = []
        for f in (form,) + tuple(x for x in _FORMS if x != form):
            candidates = [_text(f, c, s) for c in COLOURS for s in SHAPES] if f == "colour shape" else \
                list(SHAPES) if f == "shape" else list(COLOURS)
            taken = {_text(f, c, s) for c, s in present}
            candidates = [t for t in candidates if t not in taken]
            if hard:
                candidates = [t for t in candidates if near_miss(t, present)] or candidates
            if candidates:
                break
        text = candidates[int(rng.integers(len(candidates)))]
    return Query(text=text, matches=matches(text, scene.objects))


_PLURAL = {"cross": "crosses"}


def plural(word: str) -> str:
    """The plural of a vocabulary word as users type it ("circle" → "circles", "cross" → "crosses")."""
    return _PLURAL.get(word, word + "s")


def vary_wording(rng: np.random.Generator, text: str) -> str:
    """Another way a user may type a query: random case, a plural, a leading article or
    quantifier, extra spaces, a trailing full stop. `engine.serving.skills.normalize_query`
    maps every variant back to `text`."""
    words = text.split()
    if rng.random() < 0.3:
        words[-1] = plural(words[-1])
    if rng.random() < 0.25:
        words.insert(0, ("the", "a", "all", "all the", "any")[int(rng.integers(5))])
    case = rng.random()
    out = " ".join(words)
    if case < 0.15:
        out = out.upper()
    elif case < 0.35:
        out = out.title()
    elif case < 0.45:
        out = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in out)
    if rng.random() < 0.15:
        out = "  " + out.replace(" ", "   ") + " "
    if rng.random() < 0.1:
        out += "."
    return out


def scene_batch(seed: int, n: int, **kw: Any) -> list[tuple[Scene, Query]]:
    """n (scene, query) pairs. Item i depends only on (seed, i), so batches of different
    lengths from one seed share their prefix. Keyword arguments go to make_scene
    (min_objects, max_objects, size_range, distractors, crowd_rate, effects, variety, lookalikes, style,
    poses, clutter, cells, cells_share, drops) and
    make_query (empty_rate)."""
    q_kw = {k: kw.pop(k) for k in ("empty_rate",) if k in kw}
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        scene = make_scene(rng, **kw)
        out.append((scene, make_query(rng, scene, **q_kw)))
    return out
