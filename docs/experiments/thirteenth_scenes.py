"""Thirteenth evaluation scene generator, written BLIND.

Written without seeing how the training scenes or any other evaluation generator draw their images.
What was read: in engine/training/scenes.py only the dataclasses `SceneObject`, `Scene`, `Query`, the
functions `matches`, `parse_query`, `reading_order` and the names (no values) of its module-level vocabulary,
tests/test_twelfth_scenes.py and tests/scene_labels.py (the test contract), the opening lines and the batch
function's signature of docs/experiments/twelfth_scenes.py (conventions), and in docs/experiments/blind_eval.py
the docstring, imports and `GENERATORS` (to register this file).  All shapes, shade ranges, textures and
effects below are this file's own choices.

Scene kinds (`Scene.background`):
  halftone  newspaper print: the page goes through four rotated CMYK dot screens with slight plate
            misregistration, on newsprint with tint panels, text lines and column rules; each shape gets the
            ink coverage whose printed dots average to a shade of its colour (that mean colour is its
            `rgb`); white, gray and yellow shapes sit on tint panels, not on bare paper.
  graffiti  spray paint on a brick wall: mortar joints and brick texture show through the paint, soft
            sprayed edges, an overspray mist around each shape, thin drips below some shapes (drips are
            not part of the labels), some shapes with a thin black or white inner outline (part of them).
  plastic   glossy plastic 3-D renders on a studio backdrop: extruded shapes seen from above-front
            (vertical foreshortening, a visible side wall, which is part of the object), rounded bevel
            shading with specular highlights, soft cast shadows, smaller when farther, depth of field
            (limited so that no object blurs by more than a tenth of its size).
  glass     shapes seen through frosted or rain-streaked glass: a refraction warp (fine frosting ripples,
            inverting rain drops, streak channels) applied to image and labels alike, then frosting blur,
            a milky veil and drop rims / glints.  Drops are only ever small against the objects they cover.
  sunlight  paper cut-outs in hard sunlight: the shadows of blinds, window bars, railings or leaves fall
            ACROSS the ground and the objects alike (hard edges, bluish shade, warm light), and every
            cut-out casts its own small shadow.  An object's core lies either mostly in the light or mostly
            in the shade, and in the shade only when its shaded colour still reads as its name.
  icing     icing on cakes and cookies: flooded royal icing with puffy shading, a piped rim, gloss and
            bubbles, on fondant, or filling shaped cookies (the baked cookie rim is part of the object);
            sprinkles in non-vocabulary colours, a few of them on the icing.
  enamel    coloured enamel set in a metal plate: brushed steel / brass / copper / gunmetal with engraved
            lines, each shape a champleve cell with a raised metal rim (part of the object, from 16 px
            up), glossy enamel darker at the walls, pits and a specular sheen across the plate.
Every kind also gets mild photographic effects (noise, JPEG).

Objects: the seven vocabulary shapes in the eight vocabulary colours (85 %), else distractor shapes
(pentagon, ellipse, rectangle, heart, arrow, ring, crescent, trapezoid) and/or distractor colours (pink, cyan,
brown, gray).  Any rotation, except that the square stays within 30 degrees of upright and the diamond is a
rhombus (never a square) within 30 degrees of an axis pose, so neither reads as the other.  Sizes from 3 % of
the short side (at least 11-16 px by shape) to about 38 %; 0-25 objects, about a quarter of scenes with
11-25.  At placement an object may hide at most 15 % of any earlier one, and objects of the same colour name
never touch.

Labels: box = tight box of the object's whole (unoccluded) drawn mask in whole pixels, mask = that mask
cropped to the box, point = the visible pixel farthest from the visible region's edge, size = the mask's
largest width over 32 directions / the short side, tilt = degrees from the nearest upright pose given the
shape's rotational symmetry (0 for circles and rings).  Checked on the FINAL image: every object's visible
core colour (median of the visible pixels at least 0.4 of the maximum distance from the visible edge) reads,
in CIE Lab against this file's shade families, as its colour with a margin (distractor colours as no
vocabulary colour); it differs by at least 14 Lab units from the mean of the uncovered pixels within 3 px
around the object; at least 75 % of each object is visible and it lies inside the canvas.  A scene that fails
is redrawn (next attempt, effects toned down after ten failures); canvas size, kind and object count of
scene i are fixed across attempts.  Kinds come in shuffled blocks of seven.  Queries: ~15 % drawn absent on
purpose (often near misses), plus scenes with nothing nameable, giving ~20 % absent queries overall.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import io  # noqa: E402
import math  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from functools import lru_cache  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402
from scipy import ndimage  # noqa: E402

from engine.training import scenes as _scenes  # noqa: E402
from engine.training.scenes import Query, Scene, SceneObject, matches  # noqa: E402

DEFAULT_SEED = 13131
KINDS = ("halftone", "graffiti", "plastic", "glass", "sunlight", "icing", "enamel")

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_SHAPES = ("pentagon", "ellipse", "rectangle", "heart", "arrow", "ring", "crescent", "trapezoid")
DISTRACTOR_COLOURS = ("pink", "cyan", "brown", "gray")
assert set(SHAPES) == set(_scenes.SHAPES) and set(COLOURS) == set(_scenes.COLOURS)

_ATTEMPTS = 30

# ----------------------------------------------------------------------------------------------- colour

# This file's own shade families (sRGB).  A colour reads as the family of its nearest shade in CIE Lab
# if that shade is within READ_RADIUS; objects are drawn from these shades and checked on the final image.
_SHADES = {
    "red": [(200, 30, 35), (225, 45, 40), (170, 20, 30), (235, 65, 55), (150, 15, 25), (210, 20, 60),
            (185, 40, 30)],
    "orange": [(245, 130, 20), (255, 150, 40), (230, 110, 20), (250, 165, 60), (215, 100, 15), (240, 120, 50)],
    "yellow": [(250, 220, 30), (255, 235, 70), (240, 205, 20), (255, 240, 120), (235, 215, 50), (250, 200, 40)],
    "green": [(40, 160, 60), (30, 130, 50), (70, 180, 70), (20, 110, 60), (100, 190, 60), (40, 150, 100),
              (60, 120, 40)],
    "blue": [(30, 80, 200), (40, 110, 220), (20, 60, 160), (60, 130, 230), (25, 45, 130), (30, 100, 180),
             (70, 100, 210)],
    "purple": [(120, 50, 160), (140, 60, 180), (100, 40, 130), (160, 90, 200), (130, 40, 140)],
    "white": [(245, 245, 245), (235, 235, 230), (250, 250, 255), (228, 230, 234), (240, 238, 228)],
    "black": [(20, 20, 20), (35, 35, 38), (10, 10, 15), (45, 42, 40), (30, 32, 45)],
    "pink": [(240, 130, 170), (255, 170, 200), (225, 100, 150), (250, 150, 180)],
    "cyan": [(40, 200, 210), (90, 220, 230), (0, 170, 190), (60, 210, 200)],
    "brown": [(120, 70, 35), (140, 90, 50), (100, 60, 30), (160, 110, 70)],
    "gray": [(128, 128, 128), (160, 160, 160), (95, 95, 95), (140, 140, 135)],
}
READ_RADIUS = 24.0
_FAIR_RADIUS, _FAIR_MARGIN, _CONTRAST = 19.0, 5.0, 14.0


def to_lab(rgb) -> np.ndarray:
    """sRGB (0-255, any leading shape) to CIE Lab (D65)."""
    c = np.asarray(rgb, np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


FAMILY_NAME = np.array([name for name, shades in _SHADES.items() for _ in shades])
FAMILY_LAB = to_lab([c for shades in _SHADES.values() for c in shades])
_IS_VOCAB = np.isin(FAMILY_NAME, COLOURS)


def read_colour(rgb) -> str | None:
    """The colour name an sRGB colour reads as (nearest shade in Lab within READ_RADIUS), else None."""
    d = np.linalg.norm(FAMILY_LAB - to_lab(np.asarray(rgb, np.float64)[:3]), axis=1)
    k = int(np.argmin(d))
    return str(FAMILY_NAME[k]) if d[k] <= READ_RADIUS else None


def _fair(rgb, name: str) -> bool:
    """Stricter than read_colour: reads as `name` with a margin (vocabulary colours), or, for a
    distractor colour, as its own name with a margin or as no vocabulary colour at all."""
    d = np.linalg.norm(FAMILY_LAB - to_lab(np.asarray(rgb, np.float64)[:3]), axis=1)
    own, other = d[FAMILY_NAME == name].min(), d[FAMILY_NAME != name].min()
    if own <= _FAIR_RADIUS and other - own >= _FAIR_MARGIN:
        return True
    return name not in COLOURS and d[_IS_VOCAB].min() > READ_RADIUS + 4


def _pick_rgb(rng, name: str, jitter: float = 7.0) -> np.ndarray:
    shades = _SHADES[name]
    for _ in range(20):
        rgb = np.clip(np.asarray(shades[rng.integers(len(shades))], np.float64)
                      + rng.uniform(-jitter, jitter, 3), 0, 255).round()
        if _fair(rgb, name):
            return rgb
    return np.asarray(shades[0], np.float64)


# ----------------------------------------------------------------------------------------------- shapes

def _poly(n: int, start: float = -90.0, radius: float = 1.0, cx: float = 0.0, cy: float = 0.0) -> np.ndarray:
    t = np.radians(start + np.arange(n) * 360.0 / n)
    return np.stack([cx + radius * np.cos(t), cy + radius * np.sin(t)], 1)


def _unit_ops(shape: str, rng) -> tuple[list[tuple[np.ndarray, bool]], float]:
    """(polygons with fill flags, drawn in turn; circumradius about 1; upright; y down), symmetry period."""
    if shape == "circle":
        return [(_poly(72), True)], 0.0
    if shape == "square":
        return [(_poly(4, 45.0), True)], 90.0
    if shape == "triangle":
        return [(_poly(3), True)], 120.0
    if shape == "star":
        inner = rng.uniform(0.38, 0.5)
        t = np.radians(-90.0 + np.arange(10) * 36.0)
        r = np.where(np.arange(10) % 2 == 0, 1.0, inner)
        return [(np.stack([r * np.cos(t), r * np.sin(t)], 1), True)], 72.0
    if shape == "cross":
        w = rng.uniform(0.25, 0.34)
        p = np.array([(-w, -1), (w, -1), (w, -w), (1, -w), (1, w), (w, w), (w, 1), (-w, 1), (-w, w), (-1, w),
                      (-1, -w), (-w, -w)], np.float64)
        return [(p / math.hypot(1, w), True)], 90.0
    if shape == "hexagon":
        return [(_poly(6, rng.choice([0.0, 30.0])), True)], 60.0
    if shape == "diamond":
        a = rng.uniform(0.55, 0.72)
        return [(np.array([(0, -1), (a, 0), (0, 1), (-a, 0)], np.float64), True)], 180.0
    if shape == "pentagon":
        return [(_poly(5), True)], 72.0
    if shape == "ellipse":
        p = _poly(72)
        p[:, 0] *= rng.uniform(0.5, 0.68)
        return [(p, True)], 180.0
    if shape == "rectangle":
        q = rng.uniform(0.42, 0.62)
        h = 1 / math.hypot(1, q)
        return [(np.array([(-q * h, -h), (q * h, -h), (q * h, h), (-q * h, h)]), True)], 180.0
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 96, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        p = np.stack([x, y + 2.5], 1)
        return [(p / np.abs(p).max(), True)], 360.0
    if shape == "arrow":
        w, hw, neck = rng.uniform(0.16, 0.24), rng.uniform(0.45, 0.6), rng.uniform(0.05, 0.25)
        p = np.array([(-w, 1), (-w, neck), (-hw, neck), (0, -1), (hw, neck), (w, neck), (w, 1)], np.float64)
        return [(p, True)], 360.0
    if shape == "ring":
        return [(_poly(72), True), (_poly(72, radius=rng.uniform(0.5, 0.64)), False)], 0.0
    if shape == "crescent":
        return [(_poly(72), True), (_poly(72, radius=rng.uniform(0.78, 0.88), cx=rng.uniform(0.35, 0.5),
                                          cy=-0.1), False)], 360.0
    if shape == "trapezoid":
        top = rng.uniform(0.45, 0.65)
        p = np.array([(-top, -0.55), (top, -0.55), (1, 0.55), (-1, 0.55)], np.float64)
        return [(p / np.hypot(1, 0.55), True)], 360.0
    raise ValueError(shape)


def _angle(rng, shape: str) -> float:
    if shape in ("square", "diamond"):
        return float(rng.uniform(-30, 30) + 90 * rng.integers(4)) % 360
    return float(rng.uniform(0, 360))


def _tilt(shape: str, ang: float, period: float) -> float:
    if period == 0:
        return 0.0
    r = ang % period
    return float(min(r, period - r))


def _raster(ops, cx, cy, r, ang, squash=1.0):
    """Anti-aliased coverage of the shape in a local array: (alpha float32, x0, y0)."""
    th = math.radians(ang)
    c, s = math.cos(th), math.sin(th)
    polys = []
    for p, fill in ops:
        x = cx + r * (p[:, 0] * c - p[:, 1] * s)
        y = cy + r * (p[:, 0] * s + p[:, 1] * c) * squash
        polys.append((x, y, fill))
    xs = np.concatenate([p[0] for p in polys])
    ys = np.concatenate([p[1] for p in polys])
    x0, y0 = int(math.floor(xs.min())) - 1, int(math.floor(ys.min())) - 1
    w, h = int(math.ceil(xs.max())) + 1 - x0, int(math.ceil(ys.max())) + 1 - y0
    ss = 4 if max(w, h) <= 240 else 2
    im = Image.new("L", (w * ss, h * ss), 0)
    draw = ImageDraw.Draw(im)
    for x, y, fill in polys:
        pts = list(zip(((x - x0) * ss - 0.5).tolist(), ((y - y0) * ss - 0.5).tolist()))
        draw.polygon(pts, fill=255 if fill else 0)
    a = np.asarray(im.resize((w, h), Image.BOX), np.float32) / 255.0
    return a, x0, y0


# ----------------------------------------------------------------------------------------------- helpers

def _noise(rng, h: int, w: int, scale: float) -> np.ndarray:
    """Smooth noise of roughly unit spread with features about `scale` px."""
    gh, gw = max(2, int(h / max(scale, 1e-3)) + 2), max(2, int(w / max(scale, 1e-3)) + 2)
    a = rng.standard_normal((gh, gw)).astype(np.float32)
    out = np.asarray(Image.fromarray(a, mode="F").resize((w, h), Image.BICUBIC), np.float32)
    sd = out.std()
    return out / sd if sd > 1e-6 else out


def _clip_region(x0, y0, h, w, H, W):
    """Intersection of a local array at (x0, y0) with the canvas: canvas slices and local slices."""
    cx0, cy0, cx1, cy1 = max(x0, 0), max(y0, 0), min(x0 + w, W), min(y0 + h, H)
    if cx0 >= cx1 or cy0 >= cy1:
        return None
    return (slice(cy0, cy1), slice(cx0, cx1)), (slice(cy0 - y0, cy1 - y0), slice(cx0 - x0, cx1 - x0))


def _comp(img, a, x0, y0, patch):
    """Alpha-composite a local patch (colour or local image) onto img."""
    H, W = img.shape[:2]
    reg = _clip_region(x0, y0, a.shape[0], a.shape[1], H, W)
    if reg is None:
        return
    (cs, ls) = reg
    al = a[ls][..., None]
    p = patch[ls] if (isinstance(patch, np.ndarray) and patch.ndim == 3) else patch
    img[cs] = img[cs] * (1 - al) + p * al


def _multiply(img, a, x0, y0, factor):
    H, W = img.shape[:2]
    reg = _clip_region(x0, y0, a.shape[0], a.shape[1], H, W)
    if reg is None:
        return
    cs, ls = reg
    img[cs] *= (1 - a[ls] * (1 - factor))[..., None]


def _ring(mask, x0, y0, H, W, p):
    """Pixels within p of a local mask (outside it), clipped to the canvas: (y, x, ring mask) or None."""
    ya, yb = max(0, y0 - p), min(H, y0 + mask.shape[0] + p)
    xa, xb = max(0, x0 - p), min(W, x0 + mask.shape[1] + p)
    big = np.zeros((yb - ya, xb - xa), bool)
    big[y0 - ya:y0 - ya + mask.shape[0], x0 - xa:x0 - xa + mask.shape[1]] = mask
    ring = ndimage.binary_dilation(big, iterations=p) & ~big
    return (ya, xa, ring) if ring.sum() >= 8 else None


def _pad(a, p):
    return np.pad(a, p)


def _edt(mask):
    return ndimage.distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]


def _smoothstep(x):
    x = np.clip(x, 0, 1)
    return x * x * (3 - 2 * x)


def _pillow_normals(mask, bevel, height=0.8):
    """Normals of a rounded 'pillow' of the mask: flat inside, rising over `bevel` px from the edge."""
    h = _smoothstep(_edt(mask) / max(bevel, 1e-3)) * bevel * height
    gy, gx = np.gradient(h.astype(np.float32))
    n = np.stack([-gx, -gy, np.ones_like(gx)], -1)
    return n / np.linalg.norm(n, axis=-1, keepdims=True)


def _lit(n, light, base, ambient=0.3, spec=0.6, shininess=60):
    """Shade a colour over normals; a flat face keeps the colour exactly (plus a tiny specular)."""
    light = np.asarray(light, np.float32) / np.linalg.norm(light)
    diff = np.clip(n @ light, 0, None)
    shade = ambient + (1 - ambient) * diff / light[2]
    half = light + np.array([0, 0, 1], np.float32)
    half /= np.linalg.norm(half)
    sp = spec * np.clip(n @ half, 0, None) ** shininess
    sp -= spec * half[2] ** shininess      # no highlight on the flat face
    return np.clip(base * shade[..., None] + np.clip(sp, 0, None)[..., None], 0, 1)


def _jpeg(img_u8, quality: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(img_u8).save(buf, "JPEG", quality=int(quality))
    buf.seek(0)
    return np.asarray(Image.open(buf).convert("RGB"))


@dataclass
class _Obj:
    shape: str
    colour: str
    rgb: np.ndarray            # base colour (0-255)
    ops: list
    period: float
    ang: float
    cx: float
    cy: float
    r: float
    alpha: np.ndarray | None = None
    x0: int = 0
    y0: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def base(self) -> np.ndarray:
        return (self.rgb / 255.0).astype(np.float32)


# ----------------------------------------------------------------------------------------------- kinds

class _Kind:
    """One scene kind: background, object geometry, drawing. A fresh instance per attempt."""

    margin = 3
    pred: np.ndarray | None = None       # the background as drawn before any object (0-1), for a forecast

    def __init__(self, rng, W, H, strength):
        self.rng, self.W, self.H, self.st = rng, W, H, strength
        self.short = min(W, H)

    def position(self, rng, r):
        m = r + self.margin
        return rng.uniform(m, max(m + 1e-3, self.W - m)), rng.uniform(m, max(m + 1e-3, self.H - m))

    def shape_alpha(self, o: _Obj):
        return _raster(o.ops, o.cx, o.cy, o.r, o.ang)

    def ok(self, o: _Obj, mask, x0, y0) -> bool:
        """Forecast: the object's colour stands out of the background right around it."""
        if self.pred is None:
            return True
        ring = _ring(mask, x0, y0, self.H, self.W, 3)
        if ring is None:
            return True
        (ya, xa, rm) = ring
        bgc = self.pred[ya:ya + rm.shape[0], xa:xa + rm.shape[1]][rm].mean(0) * 255
        return float(np.linalg.norm(to_lab(self.obj_colour(o, mask, x0, y0)) - to_lab(bgc))) >= _CONTRAST + 6

    def obj_colour(self, o, mask, x0, y0):
        return o.rgb

    def colour_for(self, rng, name):
        return _pick_rgb(rng, name)

    def render(self, objs) -> np.ndarray:
        raise NotImplementedError

    def finish(self, img, noise=0.012, quality=(70, 93)) -> np.ndarray:
        rng = self.rng
        img = img + rng.normal(0, noise * self.st, img.shape).astype(np.float32)
        u8 = np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8)
        return _jpeg(u8, rng.integers(quality[0], quality[1] + 1))


# ---- halftone newspaper print

_INKS = np.array([[0, 158, 224], [226, 0, 122], [255, 236, 0], [38, 34, 36]], np.float64) / 255.0
_PAPERS = np.array([[238, 234, 222], [232, 229, 216], [242, 240, 232]], np.float64) / 255.0
_SPOT_SORTED = np.sort((0.5 - 0.25 * (np.cos(np.linspace(0, 2 * np.pi, 128, endpoint=False))[:, None]
                                      + np.cos(np.linspace(0, 2 * np.pi, 128, endpoint=False))[None])).ravel())
_SPOT_Q = np.linspace(0, 1, 1025)
_SPOT_LUT = np.interp(_SPOT_Q, np.linspace(0, 1, _SPOT_SORTED.size), _SPOT_SORTED)


@lru_cache(maxsize=None)
def _cmyk_grid(paper_i: int) -> tuple[np.ndarray, np.ndarray]:
    """All CMYK coverages on a 1/20 grid (K on a coarser one) and the Lab of their printed mean colour."""
    lv, kl = np.linspace(0, 1, 21), np.linspace(0, 1, 11)
    cov = np.stack(np.meshgrid(lv, lv, lv, kl, indexing="ij"), -1).reshape(-1, 4)
    out = np.broadcast_to(_PAPERS[paper_i], (len(cov), 3)).copy()
    for k in range(4):
        out *= 1 - cov[:, k:k + 1] * (1 - _INKS[k])
    return cov, to_lab(out * 255)


@lru_cache(maxsize=None)
def _cmyk_for(rgb: tuple, paper_i: int) -> tuple:
    """(coverage, printed mean rgb) for the coverage whose printed mean colour comes closest to rgb in Lab
    (least total ink on near ties)."""
    cov, lab = _cmyk_grid(paper_i)
    d = np.sum((lab - to_lab(rgb)) ** 2, 1) + 3.0 * cov.sum(1)
    c = cov[int(np.argmin(d))]
    out = _PAPERS[paper_i].copy()
    for k in range(4):
        out *= 1 - c[k] * (1 - _INKS[k])
    return tuple(float(v) for v in c), tuple(float(v) for v in np.round(out * 255))


class _Halftone(_Kind):
    name = "halftone"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        self.paper_i = int(rng.integers(len(_PAPERS)))
        cov = np.zeros((H, W, 4), np.float32)
        panel = np.ones((H, W), bool)
        side = rng.integers(5)      # 0: no text strip; else the side the text strip is on
        if side:
            frac = rng.uniform(0.12, 0.3)
            if side in (1, 2):
                t = max(8, int(frac * W))
                strip = (slice(None), slice(0, t)) if side == 1 else (slice(None), slice(W - t, W))
            else:
                t = max(8, int(frac * H))
                strip = (slice(0, t), slice(None)) if side == 3 else (slice(H - t, H), slice(None))
            panel[strip] = False
        tints = [(0, 0, 0, rng.uniform(0.22, 0.45)), (rng.uniform(0.2, 0.35), 0, 0, rng.uniform(0, 0.12)),
                 (0, rng.uniform(0.05, 0.12), rng.uniform(0.15, 0.3), rng.uniform(0.08, 0.2)),
                 (rng.uniform(0.15, 0.3), 0, rng.uniform(0.2, 0.35), rng.uniform(0.05, 0.15)),
                 (rng.uniform(0.1, 0.2), rng.uniform(0.1, 0.2), rng.uniform(0.1, 0.2), rng.uniform(0.25, 0.5))]
        tint = np.asarray(tints[rng.integers(len(tints))], np.float32)
        shade = 1 + 0.35 * st * _noise(rng, H, W, self.short * rng.uniform(0.15, 0.5))
        cov[panel] = (tint[None] * np.clip(shade[panel], 0.3, 1.8)[:, None])
        # text lines on the rest of the page
        lh = max(1, int(round(self.short * rng.uniform(0.008, 0.014))))
        pitch = lh * 2 + 1
        yy = np.arange(H)[:, None]
        xx = np.arange(W)[None, :]
        word = np.floor(xx / max(3, lh * 3)).astype(np.int64)
        wr = np.random.default_rng(int(rng.integers(1 << 30))).random((H // pitch + 2, W // max(3, lh * 3) + 2))
        row = yy // pitch
        text = ((yy % pitch) < lh) & (wr[row, word] < 0.8) & ((xx % max(3, lh * 3)) < max(2, lh * 3 - lh))
        text &= ~panel
        cov[..., 3] = np.where(text, rng.uniform(0.5, 0.7), cov[..., 3])
        if side:        # column rule along the panel edge
            edge = panel & ~ndimage.binary_erosion(panel, iterations=1, border_value=1)
            cov[..., 3] = np.where(edge, 0.85, cov[..., 3])
        self.cov, self.panel = np.clip(cov, 0, 1), panel
        pred = np.broadcast_to(_PAPERS[self.paper_i].astype(np.float32), (H, W, 3)).copy()
        for k in range(4):
            pred *= 1 - self.cov[..., k:k + 1] * (1 - _INKS[k].astype(np.float32))
        self.pred = pred

    def colour_for(self, rng, name):
        """A shade of the family that these inks can print (the printed mean colour is the label)."""
        shades = _SHADES[name]
        for k in rng.permutation(len(shades)):
            printed = np.asarray(_cmyk_for(tuple(shades[k]), self.paper_i)[1])
            if _fair(printed, name):
                return printed
        return np.asarray(_cmyk_for(tuple(shades[0]), self.paper_i)[1])

    def ok(self, o, mask, x0, y0):
        if o.colour in ("white", "gray", "yellow") and \
                not self.panel[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]][mask].all():
            return False
        return super().ok(o, mask, x0, y0)

    def render(self, objs):
        rng, st, H, W = self.rng, self.st, self.H, self.W
        cov = self.cov
        for o in objs:
            c = np.asarray(_cmyk_for(tuple(int(v) for v in o.rgb), self.paper_i)[0], np.float32)
            h = o.alpha.shape[0]
            grad = 1 + 0.04 * st * np.linspace(-1, 1, h, dtype=np.float32)[:, None]
            patch = np.clip(c[None, None] * grad[..., None], 0, 1)
            _comp(cov, o.alpha, o.x0, o.y0, patch)
        period = float(np.clip(self.short * rng.uniform(0.008, 0.015), 2.6, 5.2))
        base = rng.uniform(0, 90)
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        paper = _PAPERS[self.paper_i].astype(np.float32)
        img = np.broadcast_to(paper, (H, W, 3)).copy()
        mis = rng.uniform(-0.9, 0.9, (4, 2)) * st
        mis -= mis.mean(0)
        wsoft = 2.2 / period
        for k, ang in enumerate((15, 75, 0, 45)):
            plane = cov[..., k]
            if not plane.any():
                continue
            if k < 3:
                plane = ndimage.shift(plane, mis[k], order=1, mode="nearest")
            th = math.radians(ang + base)
            u = (xx * math.cos(th) + yy * math.sin(th)) * (2 * np.pi / period)
            v = (-xx * math.sin(th) + yy * math.cos(th)) * (2 * np.pi / period)
            f = 0.5 - 0.25 * (np.cos(u) + np.cos(v))
            thr = np.interp(plane, _SPOT_Q, _SPOT_LUT).astype(np.float32)
            thr = np.where(plane < 0.004, -1.0, np.where(plane > 0.996, 2.0, thr))
            ink = np.clip((thr - f) / wsoft + 0.5, 0, 1)
            img *= 1 - ink[..., None] * (1 - _INKS[k].astype(np.float32))
        img = ndimage.gaussian_filter(img, (0.28 * period, 0.28 * period, 0))
        img *= (1 + 0.025 * st * _noise(rng, H, W, 1.5))[..., None]
        return self.finish(img, noise=0.01, quality=(72, 92))


# ---- spray paint on brick

class _Graffiti(_Kind):
    name = "graffiti"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        s = self.short
        bh = max(5.0, s * rng.uniform(0.045, 0.1))
        bw = bh * rng.uniform(2.0, 2.7)
        mort = max(1.0, bh * rng.uniform(0.1, 0.18))
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        row = np.floor(yy / bh).astype(np.int64)
        off = (row % 2) * bw * 0.5
        col = np.floor((xx + off) / bw).astype(np.int64)
        palettes = [((150, 78, 62), 22), ((170, 140, 110), 18), ((120, 110, 105), 15), ((205, 200, 190), 10),
                    ((130, 70, 55), 18), ((175, 100, 75), 20)]
        base, var = palettes[rng.integers(len(palettes))]
        lut_rng = np.random.default_rng(int(rng.integers(1 << 30)))
        nb = lut_rng.normal(0, var / 255.0, (int(H / bh) + 3, int(W / bw) + 3, 1)).astype(np.float32)
        lum = lut_rng.normal(0, 0.06, (int(H / bh) + 3, int(W / bw) + 3, 1)).astype(np.float32)
        brick = np.asarray(base, np.float32) / 255 * (1 + lum[row, col]) + nb[row, col] * 0.5
        ym = yy - row * bh
        xm = (xx + off) - col * bw
        dist = np.minimum(np.minimum(ym, bh - ym), np.minimum(xm, bw - xm))
        mortar = _smoothstep((mort - dist) + 0.5)
        mcol = np.asarray((185, 180, 172), np.float32) / 255 * rng.uniform(0.75, 1.05)
        tex = 1 + 0.07 * _noise(rng, H, W, 1.2) + 0.05 * _noise(rng, H, W, bh * 0.6)
        wall = brick * (1 - mortar[..., None]) + mcol * mortar[..., None]
        wall *= tex[..., None]
        # buffed-over old paint: big soft patches of dull colour
        for _ in range(rng.integers(0, 3)):
            g = _noise(rng, H, W, s * rng.uniform(0.2, 0.5))
            patch = _smoothstep((g - 0.8) * 2)[..., None] * rng.uniform(0.4, 0.8)
            dull = np.asarray(rng.choice([(150, 150, 145), (110, 105, 100), (190, 185, 175)]), np.float32) / 255
            wall = wall * (1 - patch) + dull * patch * tex[..., None]
        light = 1 + 0.12 * st * (_noise(rng, H, W, s * 0.8))
        self.wall = self.pred = np.clip(wall * light[..., None], 0, 1)
        self.relief = (1 - 0.25 * mortar) * tex     # paint follows the wall relief

    def render(self, objs):
        rng, st, H, W = self.rng, self.st, self.H, self.W
        img = self.wall.copy()
        for o in objs:
            diam = 2 * o.r
            pad = int(math.ceil(diam * 0.12)) + 3
            a = _pad(o.alpha, pad)
            x0, y0 = o.x0 - pad, o.y0 - pad
            soft = ndimage.gaussian_filter(a, rng.uniform(0.4, 0.9) * min(1.0, max(0.5, diam / 50)))
            halo = ndimage.gaussian_filter(a, max(1.0, diam * rng.uniform(0.03, 0.06)))
            speck = rng.random(a.shape).astype(np.float32) < rng.uniform(0.25, 0.55)
            mist = np.clip(halo * 0.9, 0, 1) * speck * rng.uniform(0.35, 0.6) * (1 - soft) * st
            reg = _clip_region(x0, y0, a.shape[0], a.shape[1], H, W)
            if reg is None:
                continue
            cs, ls = reg
            relief = np.ones(a.shape, np.float32)
            relief[ls] = self.relief[cs]
            paint = o.base[None, None] * (0.93 + 0.07 * relief[..., None])
            paint = np.clip(paint * (1 + 0.03 * rng.standard_normal(a.shape)[..., None]), 0, 1)
            _comp(img, mist, x0, y0, paint)
            mask = soft >= 0.5
            outline = None
            if diam >= 34 and rng.random() < 0.3 * st:
                w = max(1.5, diam * rng.uniform(0.035, 0.06))
                dark = to_lab(o.rgb)[0] < 45
                stroke = np.clip(w + 0.5 - _edt(mask), 0, 1) * soft
                outline = (stroke, np.float32(0.95 if dark else 0.07))
            _comp(img, soft, x0, y0, paint)
            if outline is not None:
                _comp(img, outline[0], x0, y0, outline[1])
            # drips below the shape (not part of its labels)
            if diam >= 24 and rng.random() < 0.55 * st:
                cols = np.flatnonzero(mask.any(0))
                bottoms = mask.shape[0] - 1 - np.argmax(mask[::-1], 0)
                low = cols[bottoms[cols] >= bottoms[cols].max() - 0.3 * diam]
                for _ in range(rng.integers(1, 4)):
                    c = int(rng.choice(low))
                    by = y0 + int(bottoms[c])
                    ln = int(diam * rng.uniform(0.06, 0.18))
                    dw = 1 if diam < 60 else 2
                    xa, xb = x0 + c, x0 + c + dw
                    ya, yb = by, min(H, by + ln)
                    if 0 <= xa and xb <= W and ya < yb:
                        img[ya:yb, xa:xb] = img[ya:yb, xa:xb] * 0.1 + o.base * 0.9
                        img[max(ya, yb - 2):yb, max(0, xa - 1):min(W, xb + 1)] = o.base
            o.alpha, o.x0, o.y0 = soft, x0, y0
        img = ndimage.gaussian_filter(img, (0.45, 0.45, 0))
        return self.finish(img, noise=0.015, quality=(68, 90))


# ---- glossy plastic renders

class _Plastic(_Kind):
    name = "plastic"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        self.squash = rng.uniform(0.78, 0.95)
        self.thick = rng.uniform(0.25, 0.45)
        self.horizon = H * (rng.uniform(0.05, 0.3) if rng.random() < 0.6 else -0.2)
        backdrops = [(150, 155, 162), (200, 190, 172), (120, 140, 160), (70, 72, 78), (190, 200, 205),
                     (175, 165, 185), (160, 190, 175), (95, 110, 120)]
        floor = np.asarray(backdrops[rng.integers(len(backdrops))], np.float32) / 255
        wall = np.clip(floor * rng.uniform(0.75, 1.1), 0, 1)
        yy = np.arange(H, dtype=np.float32)[:, None, None]
        t = _smoothstep((yy - self.horizon) / max(8.0, 0.12 * H) + 0.5)
        bg = wall * (1 - t) + floor * t
        xx = np.arange(W, dtype=np.float32)[None, :, None]
        lx, ly = rng.uniform(0.2, 0.8) * W, rng.uniform(-0.2, 0.5) * H
        fall = np.exp(-(((xx - lx) ** 2 + (yy - ly) ** 2) / (2 * (0.9 * max(W, H)) ** 2)))
        bg = bg * (0.78 + 0.3 * fall)
        self.bg = self.pred = np.clip(bg, 0, 1).astype(np.float32)
        ang = rng.uniform(200, 340)
        self.light = np.array([math.cos(math.radians(ang)) * 0.6, math.sin(math.radians(ang)) * 0.6 + 0.2, 0.75],
                              np.float32)
        self.shadow_dir = -self.light[:2] / max(1e-3, np.linalg.norm(self.light[:2]))

    def _scale(self, cy):
        t = np.clip((cy - max(self.horizon, 0)) / max(1.0, self.H - max(self.horizon, 0)), 0, 1)
        return 0.78 + 0.3 * t

    def _ext(self, r):
        return max(1, int(round(self.thick * r * math.sqrt(1 - self.squash ** 2))))

    def position(self, rng, r):
        m = r + self.margin
        ext = self._ext(r)
        top = max(m, self.horizon + r * self.squash + 2)
        return (rng.uniform(m, max(m + 1e-3, self.W - m)),
                rng.uniform(min(top, self.H - m - ext - 1), max(top + 1e-3, self.H - m - ext - 1)))

    def shape_alpha(self, o):
        r = o.r * self._scale(o.cy)
        top, x0, y0 = _raster(o.ops, o.cx, o.cy, r, o.ang, self.squash)
        ext = self._ext(r)
        solid = np.pad(top, ((0, ext), (0, 0)))
        for d in range(1, ext + 1):
            solid[d:d + top.shape[0]] = np.maximum(solid[d:d + top.shape[0]], top)
        o.extra.update(top=np.pad(top, ((0, ext), (0, 0))), rr=r, ext=ext)
        return solid, x0, y0

    def render(self, objs):
        rng, st, H = self.rng, self.st, self.H
        img = self.bg.copy()
        for o in objs:
            r, solid, top = o.extra["rr"], o.alpha, o.extra["top"]
            # soft cast shadow on what lies below
            pad = int(r * 0.5) + 2
            sh = ndimage.gaussian_filter(_pad(solid, pad), max(1.0, 0.1 * r))
            dx, dy = self.shadow_dir * r * 0.18
            sh = ndimage.shift(sh, (dy, dx), order=1)
            _multiply(img, sh * 0.55 * st, o.x0 - pad, o.y0 - pad, 0.0)
            # side wall: darker, a gradient downward, a light line at the top edge
            h = solid.shape[0]
            grad = np.linspace(0.72, 0.5, h, dtype=np.float32)[:, None, None]
            side = np.clip(o.base[None, None] * grad + 0.04, 0, 1)
            _comp(img, solid, o.x0, o.y0, side)
            n = _pillow_normals(top >= 0.5, max(1.5, 0.2 * r))
            face = _lit(n, self.light, o.base[None, None], ambient=0.35, spec=0.7 * st, shininess=40)
            _comp(img, top, o.x0, o.y0, face)
        # depth of field: blur grows away from a focus row, limited so small objects stay clear
        yf = rng.uniform(0.3, 1.0) * H
        dof = rng.uniform(0.8, 2.8) * st * max(0.5, self.short / 400)
        for o in objs:
            rel = abs(o.cy - yf) / H
            if rel > 0:
                dof = min(dof, 0.1 * o.extra["rr"] * 2 / rel)
        if dof > 0.3:
            levels = [img, ndimage.gaussian_filter(img, (dof / 2, dof / 2, 0)),
                      ndimage.gaussian_filter(img, (dof, dof, 0))]
            s = np.clip(np.abs(np.arange(H, dtype=np.float32) - yf) / H, 0, 1) * 2    # 0..2 in level units
            lo = np.clip(np.floor(s).astype(int), 0, 1)
            frac = (s - lo)[:, None, None]
            stack = np.stack(levels)
            rows = np.arange(H)
            img = stack[lo, rows] * (1 - frac) + stack[lo + 1, rows] * frac
        return self.finish(img, noise=0.008, quality=(80, 95))


# ---- through frosted or rain-streaked glass

class _Glass(_Kind):
    name = "glass"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        s = self.short
        tones = np.asarray([(110, 115, 120), (150, 140, 125), (95, 110, 95), (170, 175, 180), (80, 85, 100),
                            (135, 125, 120), (185, 180, 165)], np.float32) / 255
        bg = np.broadcast_to(tones[rng.integers(len(tones))], (H, W, 3)).copy()
        for _ in range(rng.integers(2, 6)):     # soft regions: buildings, foliage, sky, walls
            g = _noise(rng, H, W, s * rng.uniform(0.25, 0.7))
            m = _smoothstep((g - rng.uniform(-0.3, 0.8)) * 1.5)[..., None]
            bg = bg * (1 - m) + tones[rng.integers(len(tones))] * m
        for _ in range(rng.integers(0, 8)):     # out-of-focus light spots
            cx, cy, rad = rng.uniform(0, W), rng.uniform(0, H), s * rng.uniform(0.02, 0.07)
            yy, xx = np.ogrid[0:H, 0:W]
            d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
            bg = bg + (_smoothstep((rad - d) / 2 + 0.5) * rng.uniform(0.05, 0.15))[..., None]
        self.bg = np.clip(bg * (1 + 0.03 * _noise(rng, H, W, 3))[..., None], 0, 1).astype(np.float32)
        self.pred = self.bg
        self.rain = rng.random() < 0.55

    def render(self, objs):
        rng, st, H, W, s = self.rng, self.st, self.H, self.W, self.short
        img = self.bg.copy()
        for o in objs:
            h = o.alpha.shape[0]
            g = (1 + 0.06 * np.linspace(-1, 1, h, dtype=np.float32))[:, None, None]
            _comp(img, o.alpha, o.x0, o.y0, np.clip(o.base[None, None] * g, 0, 1))
        min_d = min([2 * o.r for o in objs], default=s)
        # backward map: output pixel samples the scene at (Y + dy, X + dx)
        amp = rng.uniform(0.35, 1.0) * st * min(1.0, min_d / 32)
        dx = amp * _noise(rng, H, W, rng.uniform(2.0, 4.0))
        dy = amp * _noise(rng, H, W, rng.uniform(2.0, 4.0))
        rims = np.zeros((H, W), np.float32)
        glints = []
        if self.rain:
            for _ in range(int(rng.integers(3, 8) * (W * H) / 200 ** 2 * st) + 1):   # streak channels
                x = rng.uniform(0, W)
                wv = rng.uniform(1, 2.5)
                xx = np.arange(W, dtype=np.float32)[None, :]
                wig = x + 3 * _noise(rng, H, 1, H / 4)[:, :1]
                band = _smoothstep((wv - np.abs(xx - wig)) + 0.5)
                dx += band * rng.uniform(-1.5, 1.5) * min(1.0, min_d / 20)
                rims += band * 0.06
            ndrops = int(rng.uniform(8, 30) * (W * H) / 300 ** 2 * st)
            yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
            for _ in range(ndrops):
                rd = s * rng.uniform(0.008, 0.03)
                cx, cy = rng.uniform(0, W), rng.uniform(0, H)
                # only drops small against every object they cover
                if any(rd > 0.1 * 2 * o.r and abs(o.cx - cx) < o.r + rd and abs(o.cy - cy) < o.r + rd
                       for o in objs):
                    continue
                ya, yb, xa, xb = (max(0, int(cy - rd) - 1), min(H, int(cy + rd) + 2),
                                  max(0, int(cx - rd) - 1), min(W, int(cx + rd) + 2))
                if ya >= yb or xa >= xb:
                    continue
                ly, lx = yy[ya:yb, xa:xb] - cy, xx[ya:yb, xa:xb] - cx
                d = np.sqrt(lx ** 2 + ly ** 2)
                inside = d < rd
                k = rng.uniform(0.45, 0.7)
                dx[ya:yb, xa:xb] = np.where(inside, -lx * (1 + k), dx[ya:yb, xa:xb])
                dy[ya:yb, xa:xb] = np.where(inside, -ly * (1 + k), dy[ya:yb, xa:xb])
                rims[ya:yb, xa:xb] += np.clip(1 - np.abs(d - rd + 0.7), 0, 1) * 0.35
                glints.append((cx - rd * 0.35, cy - rd * 0.35, max(0.8, rd * 0.18)))
        D = int(math.ceil(max(np.abs(dx).max(), np.abs(dy).max()))) + 2
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        my, mx = yy + dy, xx + dx
        img = np.stack([ndimage.map_coordinates(img[..., c], [my, mx], order=1, mode="nearest")
                        for c in range(3)], -1)
        for o in objs:          # labels follow the same warp
            h, w = o.alpha.shape
            ya, yb, xa, xb = max(0, o.y0 - D), min(H, o.y0 + h + D), max(0, o.x0 - D), min(W, o.x0 + w + D)
            a = ndimage.map_coordinates(o.alpha, [my[ya:yb, xa:xb] - o.y0, mx[ya:yb, xa:xb] - o.x0], order=1,
                                        mode="constant", cval=0.0)
            o.alpha, o.x0, o.y0 = a.astype(np.float32), xa, ya
        if not self.rain or rng.random() < 0.4:
            sig = rng.uniform(0.6, 1.6) * st * min(1.0, min_d / 26)
            img = ndimage.gaussian_filter(img, (sig, sig, 0))
        veil = rng.uniform(0.03, 0.09) * st
        img = img * (1 - veil) + np.float32(0.86) * veil
        img = img * (1 - rims[..., None] * 0.5)
        yy, xx = np.ogrid[0:H, 0:W]
        for gx, gy, gr in glints:
            ya, yb, xa, xb = max(0, int(gy - 3 * gr)), min(H, int(gy + 3 * gr) + 1), max(0, int(gx - 3 * gr)), \
                min(W, int(gx + 3 * gr) + 1)
            if ya < yb and xa < xb:
                d2 = (xx[:, xa:xb] - gx) ** 2 + (yy[ya:yb] - gy) ** 2
                img[ya:yb, xa:xb] += (0.5 * np.exp(-d2 / (2 * gr * gr)))[..., None]
        return self.finish(np.clip(img, 0, 1), noise=0.014, quality=(70, 92))


# ---- hard sunlight with cast shadows across everything

class _Sunlight(_Kind):
    name = "sunlight"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        s = self.short
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        grounds = [(190, 175, 150), (160, 160, 155), (140, 110, 80), (210, 205, 195), (120, 125, 130),
                   (175, 150, 120)]
        g = np.asarray(grounds[rng.integers(len(grounds))], np.float32) / 255
        style = rng.integers(3)
        if style == 0:      # planks
            pw = s * rng.uniform(0.08, 0.2)
            vert = rng.random() < 0.5
            coord = xx if vert else yy
            idx = np.floor(coord / pw)
            var = np.random.default_rng(int(rng.integers(1 << 30))).normal(0, 0.06, int(max(W, H) / pw) + 3)
            tone = 1 + var[idx.astype(int)]
            grain = _noise(rng, H, W, 2.0)
            gap = _smoothstep(1.2 - np.abs(coord - idx * pw))
            ground = g * (tone * (1 + 0.05 * grain) * (1 - 0.35 * gap))[..., None]
        elif style == 1:    # concrete
            ground = g * (1 + 0.06 * _noise(rng, H, W, 1.0) + 0.05 * _noise(rng, H, W, s * 0.1))[..., None]
        else:               # tiles
            tw = s * rng.uniform(0.12, 0.3)
            gx, gy = np.mod(xx, tw), np.mod(yy, tw)
            grout = _smoothstep(1.5 - np.minimum(np.minimum(gx, tw - gx), np.minimum(gy, tw - gy)))
            ground = g * (1 + 0.03 * _noise(rng, H, W, 1.5) - 0.3 * grout)[..., None]
        self.ground = np.clip(ground, 0, 1).astype(np.float32)
        # the shadow map of off-screen things
        pat = rng.integers(4)
        th = rng.uniform(0, np.pi)
        u = xx * math.cos(th) + yy * math.sin(th)
        if pat == 0:        # blinds
            P = s * rng.uniform(0.06, 0.14)
            duty = rng.uniform(0.3, 0.45)
            sm = np.abs(np.mod(u / P, 1.0) - 0.5) * P - (0.5 - duty / 2) * P     # >0 inside a bar
            S = _smoothstep(sm + 0.5)
        elif pat == 1:      # window bars + frame shadow
            P1, P2 = s * rng.uniform(0.25, 0.5), s * rng.uniform(0.25, 0.5)
            v = -xx * math.sin(th) + yy * math.cos(th) * rng.uniform(0.6, 1.0)
            bw = s * rng.uniform(0.02, 0.05)
            d1 = np.abs(np.mod(u / P1, 1.0) - 0.5) * P1
            d2 = np.abs(np.mod(v / P2, 1.0) - 0.5) * P2
            S = np.maximum(_smoothstep(bw / 2 - (P1 / 2 - d1) + 0.5), _smoothstep(bw / 2 - (P2 / 2 - d2) + 0.5))
            edge = u - rng.uniform(0.6, 1.2) * (W * abs(math.cos(th)) + H * abs(math.sin(th)))
            S = np.maximum(S, _smoothstep(edge + 0.5))
        elif pat == 2:      # railing bars
            P = s * rng.uniform(0.08, 0.16)
            duty = rng.uniform(0.15, 0.3)
            sm = np.abs(np.mod(u / P, 1.0) - 0.5) * P - (0.5 - duty / 2) * P
            S = _smoothstep(sm + 0.5)
        else:               # leaves
            n = _noise(rng, H, W, s * rng.uniform(0.05, 0.1)) + 0.5 * _noise(rng, H, W, s * 0.025)
            thr = np.quantile(n[:: max(1, H // 64), :: max(1, W // 64)], rng.uniform(0.6, 0.72))
            S = _smoothstep((n - thr) * 6 + 0.5)
        S = ndimage.gaussian_filter(S.astype(np.float32), rng.uniform(0.4, 1.2))
        self.S = S * st
        warm = rng.uniform(0.0, 0.05)
        self.lit = np.array([1 + warm, 1.0, 1 - warm * 1.2], np.float32) * rng.uniform(0.98, 1.06)
        self.shade = np.array([0.9, 0.96, 1.08], np.float32) * rng.uniform(0.38, 0.55)
        ang = rng.uniform(0, 2 * np.pi)
        self.drop = np.array([math.cos(ang), math.sin(ang)], np.float32)
        self.light_map = self.lit * (1 - self.S[..., None]) + self.shade * self.S[..., None]
        self.pred = np.clip(self.ground * self.light_map, 0, 1)

    def obj_colour(self, o, mask, x0, y0):
        lm = self.light_map[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]][mask]
        return np.clip(o.rgb * np.median(lm, 0), 0, 255)

    def ok(self, o, mask, x0, y0):
        core = mask & (_edt(mask) >= 0.4 * _edt(mask).max())
        Sc = self.S[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]][core]
        frac = float((Sc > 0.5).mean()) if Sc.size else 0.0
        if frac > 0.35:
            ok = _fair(np.clip(o.rgb * self.shade, 0, 255), o.colour) and frac > 0.65
        else:
            ok = _fair(np.clip(o.rgb * self.lit, 0, 255), o.colour)
        return ok and super().ok(o, mask, x0, y0)

    def render(self, objs):
        rng, st, H, W = self.rng, self.st, self.H, self.W
        img = self.ground.copy()
        for o in objs:
            lift = 2 * o.r * rng.uniform(0.04, 0.1)
            pad = int(lift) + 3
            sh = ndimage.shift(_pad(o.alpha, pad), (self.drop[1] * lift, self.drop[0] * lift), order=1)
            sl = _clip_region(o.x0 - pad, o.y0 - pad, sh.shape[0], sh.shape[1], H, W)
            if sl is not None:
                cs, ls = sl
                img[cs] *= (1 - 0.5 * st * sh[ls] * (1 - self.S[cs]))[..., None]
            h, w = o.alpha.shape
            paper = o.base[None, None] * (1 + 0.025 * rng.standard_normal((h, w, 1)).astype(np.float32))
            _comp(img, o.alpha, o.x0, o.y0, np.clip(paper, 0, 1))
        img = img * self.light_map
        return self.finish(np.clip(img, 0, 1), noise=0.012, quality=(72, 93))


# ---- icing on cakes and cookies

class _Icing(_Kind):
    name = "icing"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        s = self.short
        self.cookies = rng.random() < 0.5
        if self.cookies:
            tones = [(150, 110, 75), (200, 190, 170), (225, 220, 205), (110, 80, 60), (175, 180, 185)]
        else:
            tones = [(240, 200, 205), (195, 230, 205), (200, 220, 240), (215, 200, 230), (95, 55, 35),
                     (200, 150, 95), (245, 238, 220), (230, 215, 170)]
        base = np.asarray(tones[rng.integers(len(tones))], np.float32) / 255
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        lx, ly = rng.uniform(-0.5, 1.5) * W, rng.uniform(-0.5, 0.5) * H
        fall = 1 - 0.15 * np.sqrt((xx - lx) ** 2 + (yy - ly) ** 2) / max(W, H)
        tex = 1 + 0.025 * _noise(rng, H, W, s * 0.04) + 0.015 * _noise(rng, H, W, 1.2)
        bg = base * (fall * tex)[..., None]
        # sprinkles in colours outside the vocabulary
        sp_cols = np.asarray([(250, 160, 190), (140, 215, 225), (200, 170, 225), (120, 75, 45)], np.float32) / 255
        self.sprinkles = []
        for _ in range(int(rng.uniform(0, 40) * W * H / 300 ** 2 * st)):
            ln = max(2.0, s * rng.uniform(0.012, 0.022))
            self.sprinkles.append((rng.uniform(0, W), rng.uniform(0, H), ln, rng.uniform(0, np.pi),
                                   sp_cols[rng.integers(len(sp_cols))]))
        self.bg = self.pred = np.clip(bg, 0, 1).astype(np.float32)
        self.cookie = np.asarray([(205, 160, 100), (185, 135, 80), (220, 180, 120)][rng.integers(3)],
                                 np.float32) / 255
        ang = rng.uniform(200, 340)
        self.light = np.array([math.cos(math.radians(ang)) * 0.5, math.sin(math.radians(ang)) * 0.5, 0.8],
                              np.float32)

    def _draw_sprinkles(self, img, items):
        for x, y, ln, a, col in items:
            dx, dy = math.cos(a) * ln / 2, math.sin(a) * ln / 2
            wd = max(1.2, ln * 0.3)
            x0, y0 = int(min(x - dx, x + dx) - wd - 1), int(min(y - dy, y + dy) - wd - 1)
            w, h = int(abs(2 * dx) + 2 * wd + 3), int(abs(2 * dy) + 2 * wd + 3)
            im = Image.new("L", (w * 4, h * 4), 0)
            ImageDraw.Draw(im).line([((x - dx - x0) * 4, (y - dy - y0) * 4), ((x + dx - x0) * 4, (y + dy - y0) * 4)],
                                    fill=255, width=max(1, int(wd * 4)))
            al = np.asarray(im.resize((w, h), Image.BOX), np.float32) / 255
            _comp(img, al, x0, y0, col)

    def render(self, objs):
        rng, st = self.rng, self.st
        img = self.bg.copy()
        self._draw_sprinkles(img, self.sprinkles)
        for o in objs:
            r = o.r
            mask = o.alpha >= 0.5
            pad = int(r * 0.2) + 2
            sh = ndimage.gaussian_filter(_pad(o.alpha, pad), max(1.0, 0.06 * r))
            sh = ndimage.shift(sh, (r * 0.06, r * 0.03), order=1)
            _multiply(img, sh * 0.35 * st, o.x0 - pad, o.y0 - pad, 0.0)
            dist = _edt(mask)
            h, w = mask.shape
            if self.cookies:
                rim = max(1.0, 2 * r * rng.uniform(0.05, 0.08))
                n = _pillow_normals(mask, max(1.5, rim))
                dough = self.cookie * (1 + 0.08 * rng.standard_normal((h, w, 1)).astype(np.float32))
                dough = _lit(n, self.light, dough, ambient=0.5, spec=0.0)
                _comp(img, o.alpha, o.x0, o.y0, dough)
                ice = np.clip(dist - rim + 0.5, 0, 1).astype(np.float32) * o.alpha
            else:
                ice = o.alpha
            imask = ice >= 0.5
            n = _pillow_normals(imask, max(1.5, 0.25 * r), height=0.5)
            col = _lit(n, self.light, o.base[None, None], ambient=0.55, spec=0.5 * st, shininess=30)
            # piped rim: a slightly raised, lighter ridge at the edge of the icing
            idist = _edt(imask)
            ridge = np.exp(-((idist - 1.2) ** 2) / 1.2)[..., None] * 0.08
            col = np.clip(col * (1 - ridge) + ridge, 0, 1)
            for _ in range(int(rng.integers(0, 4) * st)):     # bubbles
                by, bx = rng.integers(0, h), rng.integers(0, w)
                br = max(0.8, r * rng.uniform(0.02, 0.05))
                yy, xx = np.ogrid[0:h, 0:w]
                d2 = (yy - by) ** 2 + (xx - bx) ** 2
                col = np.clip(col + (np.exp(-d2 / (2 * br * br)) * 0.12)[..., None], 0, 1)
            _comp(img, ice, o.x0, o.y0, col)
            if self.cookies:
                o.extra["ice"] = ice
        # a few sprinkles land on top of the icing too
        top = [sp for sp in self.sprinkles if rng.random() < 0.15]
        self._draw_sprinkles(img, top)
        return self.finish(np.clip(img, 0, 1), noise=0.01, quality=(75, 93))


# ---- enamel in a metal plate

class _Enamel(_Kind):
    name = "enamel"

    def __init__(self, rng, W, H, st):
        super().__init__(rng, W, H, st)
        s = self.short
        metals = [(172, 174, 178), (185, 155, 90), (180, 115, 80), (95, 97, 104), (200, 200, 195)]
        self.metal = np.asarray(metals[rng.integers(len(metals))], np.float32) / 255
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        th = rng.uniform(0, np.pi)
        raw = rng.standard_normal((H, W)).astype(np.float32)
        brushed = ndimage.gaussian_filter(raw, (0.4, 10.0) if rng.random() < 0.5 else (10.0, 0.4))
        brushed /= max(1e-6, brushed.std())
        u = (xx * math.cos(th) + yy * math.sin(th)) / max(W, H)
        self.sheen = np.exp(-((u - rng.uniform(0.1, 0.9)) ** 2) / (2 * rng.uniform(0.05, 0.15) ** 2))
        plate = self.metal * (0.86 + 0.03 * brushed + 0.1 * u)[..., None]
        # engraved lines: thin grooves with a bright lip
        eng = np.zeros((H, W), np.float32)
        for _ in range(rng.integers(0, 5)):
            a, ph, f = rng.uniform(0, np.pi), rng.uniform(0, 2 * np.pi), rng.uniform(2, 6) * np.pi / max(W, H)
            v = xx * math.cos(a) + yy * math.sin(a)
            w2 = -xx * math.sin(a) + yy * math.cos(a)
            c = rng.uniform(0.2, 0.8) * (W * abs(math.sin(a)) + H * abs(math.cos(a)))
            curve = w2 - c - 0.08 * s * np.sin(v * f + ph)
            eng += np.clip(1.2 - np.abs(curve), 0, 1)
        plate = plate * (1 - 0.4 * np.clip(eng, 0, 1))[..., None]
        self.bg = self.pred = np.clip(plate, 0, 1).astype(np.float32)
        ang = rng.uniform(200, 340)
        self.light = np.array([math.cos(math.radians(ang)) * 0.6, math.sin(math.radians(ang)) * 0.6, 0.7],
                              np.float32)

    def render(self, objs):
        rng, st = self.rng, self.st
        img = self.bg.copy()
        for o in objs:
            mask = o.alpha >= 0.5
            diam = 2 * o.r
            dist = _edt(mask)
            rim_w = 0.0 if diam < 16 else max(1.2, diam * rng.uniform(0.04, 0.07))
            h, w = mask.shape
            n = _pillow_normals(mask, max(1.0, rim_w), height=1.0)
            metal = _lit(n, self.light, self.metal[None, None] * np.ones((h, w, 1), np.float32), ambient=0.45,
                         spec=0.6, shininess=20)
            depth = np.clip((dist - rim_w) / max(2.0, diam * 0.1), 0, 1)[..., None]
            enamel = o.base[None, None] * (0.82 + 0.18 * depth)
            enamel = enamel * (1 + 0.02 * rng.standard_normal((h, w, 1)).astype(np.float32))
            for _ in range(int(rng.integers(0, 5) * st)):      # pits
                py, px = rng.integers(0, h), rng.integers(0, w)
                yy, xx = np.ogrid[0:h, 0:w]
                pit = ((yy - py) ** 2 + (xx - px) ** 2) <= max(0.6, diam * 0.015) ** 2
                enamel = np.where(pit[..., None], enamel * 0.7, enamel)
            inner = np.clip(dist - rim_w + 0.5, 0, 1)[..., None] if rim_w > 0 else np.ones((h, w, 1), np.float32)
            patch = metal * (1 - inner) + enamel * inner
            _comp(img, o.alpha, o.x0, o.y0, np.clip(patch, 0, 1))
        img = img + (0.1 * st * self.sheen)[..., None]
        return self.finish(np.clip(img, 0, 1), noise=0.01, quality=(75, 93))


_KIND_CLASSES = {k.name: k for k in (_Halftone, _Graffiti, _Plastic, _Glass, _Sunlight, _Icing, _Enamel)}
assert tuple(_KIND_CLASSES) == KINDS


# ----------------------------------------------------------------------------------------------- scenes

_MIN_PX = {"star": 14, "hexagon": 14, "cross": 13, "diamond": 12}
_DIRS = np.linspace(0, np.pi, 32, endpoint=False)
_DC, _DS = np.cos(_DIRS), np.sin(_DIRS)


def _diameter(mask) -> float:
    """Largest width of the mask's pixel squares over 32 directions (0 and 90 degrees included)."""
    edge = mask & ~ndimage.binary_erosion(mask)
    ys, xs = np.nonzero(edge)
    proj = xs[:, None] * _DC[None] + ys[:, None] * _DS[None]
    return float((proj.max(0) - proj.min(0) + np.abs(_DC) + np.abs(_DS)).max())


def _identity(rng):
    u = rng.random()
    if u < 0.85:
        return str(rng.choice(SHAPES)), str(rng.choice(COLOURS))
    if u < 0.91:
        return str(rng.choice(DISTRACTOR_SHAPES)), str(rng.choice(COLOURS))
    if u < 0.96:
        return str(rng.choice(SHAPES)), str(rng.choice(DISTRACTOR_COLOURS))
    return str(rng.choice(DISTRACTOR_SHAPES)), str(rng.choice(DISTRACTOR_COLOURS))


def _place(kind: _Kind, rng, n: int) -> list[_Obj] | None:
    W, H, short = kind.W, kind.H, kind.short
    top = np.full((H, W), -1, np.int16)
    objs: list[_Obj] = []
    area: list[int] = []
    vis: list[int] = []
    hi = min(0.36, 0.9 / math.sqrt(max(n, 1)))

    def new_object():
        shape, colour = _identity(rng)
        min_px = _MIN_PX.get(shape, 16 if shape in DISTRACTOR_SHAPES else 11)
        lo = max(min_px / short, 0.03)
        s = math.exp(rng.uniform(math.log(lo), math.log(max(hi, lo * 1.05))))
        ops, period = _unit_ops(shape, rng)
        return _Obj(shape, colour, kind.colour_for(rng, colour), ops, period, 0.0, 0, 0, 0), lo, s

    for j in range(n):
        o, lo, s = new_object()
        for t in range(72):
            if t == 36:         # this one does not fit here (colour against the background, crowding): another
                o, lo, s = new_object()
            elif t and t % 12 == 0:
                s = max(lo, s * 0.75)
            o.r = s * short / 2
            o.ang = _angle(rng, o.shape)
            o.cx, o.cy = kind.position(rng, o.r)
            a, x0, y0 = kind.shape_alpha(o)
            h, w = a.shape
            if x0 < 1 or y0 < 1 or x0 + w > W - 1 or y0 + h > H - 1:
                continue
            m = a >= 0.5
            if m.sum() < 20 or (max(h, w) > 0.3 * short and _diameter(m) > 0.38 * short):
                continue
            reg = top[y0:y0 + h, x0:x0 + w]
            under = reg[m]
            under = under[under >= 0]
            lost = np.bincount(under, minlength=j) if under.size else np.zeros(j, np.int64)
            if j and np.any(np.asarray(vis) - lost < 0.85 * np.asarray(area)):
                continue
            ya, xa = max(0, y0 - 2), max(0, x0 - 2)
            near = top[ya:min(H, y0 + h + 2), xa:min(W, x0 + w + 2)]
            dil = ndimage.binary_dilation(np.pad(m, 2), iterations=2)
            dil = dil[ya - y0 + 2:ya - y0 + 2 + near.shape[0], xa - x0 + 2:xa - x0 + 2 + near.shape[1]]
            ids = np.unique(near[dil])
            if any(objs[i].colour == o.colour for i in ids if i >= 0):
                continue
            if not kind.ok(o, m, x0, y0):
                continue
            reg[m] = j
            for i in np.flatnonzero(lost):
                vis[i] -= int(lost[i])
            area.append(int(m.sum()))
            vis.append(int(m.sum()))
            o.alpha, o.x0, o.y0 = a, x0, y0
            objs.append(o)
            break
        else:
            return None
    return objs


def _median_core(img, vis, x0, y0):
    dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
    core = vis & (dist >= 0.4 * dist.max())
    h, w = vis.shape
    return np.median(img[y0:y0 + h, x0:x0 + w][core if core.sum() >= 8 else vis], 0)


def _labels(kind: _Kind, objs: list[_Obj], img: np.ndarray) -> list[SceneObject] | None:
    """Exact labels from the final masks, or None if any object is unfair on the final image."""
    H, W = img.shape[:2]
    short = min(W, H)
    tight = []
    top = np.full((H, W), -1, np.int16)
    covered = np.zeros((H, W), bool)
    for k, o in enumerate(objs):
        m = o.alpha >= 0.5
        rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
        if not rows.size:
            return None
        m = m[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
        X0, Y0 = o.x0 + int(cols[0]), o.y0 + int(rows[0])
        h, w = m.shape
        if X0 < 1 or Y0 < 1 or X0 + w > W - 1 or Y0 + h > H - 1:
            return None
        top[Y0:Y0 + h, X0:X0 + w][m] = k
        covered[Y0:Y0 + h, X0:X0 + w] |= m
        tight.append((np.ascontiguousarray(m), X0, Y0))
    out = []
    for k, (o, (m, X0, Y0)) in enumerate(zip(objs, tight)):
        h, w = m.shape
        vis = m & (top[Y0:Y0 + h, X0:X0 + w] == k)
        if vis.sum() < 0.75 * m.sum():
            return None
        diam = _diameter(m)
        if diam < 10 or diam > 0.40 * short:
            return None
        med = _median_core(img, vis, X0, Y0)
        if not _fair(med, o.colour):
            return None
        # stands out of the background right around it
        p = 3
        ya, yb, xa, xb = max(0, Y0 - p), min(H, Y0 + h + p), max(0, X0 - p), min(W, X0 + w + p)
        big = np.zeros((yb - ya, xb - xa), bool)
        big[Y0 - ya:Y0 - ya + h, X0 - xa:X0 - xa + w] = m
        ring = ndimage.binary_dilation(big, iterations=p) & ~covered[ya:yb, xa:xb]
        if ring.sum() >= 8:
            bgc = img[ya:yb, xa:xb][ring].mean(0)
            if np.linalg.norm(to_lab(med) - to_lab(bgc)) < _CONTRAST:
                return None
        dt = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
        py, px = np.unravel_index(int(np.argmax(dt)), dt.shape)
        out.append(SceneObject(
            shape=o.shape, colour=o.colour,
            box=(X0 / W, Y0 / H, (X0 + w) / W, (Y0 + h) / H),
            point=((X0 + px + 0.5) / W, (Y0 + py + 0.5) / H),
            rgb=tuple(int(v) for v in o.rgb), tilt=_tilt(o.shape, o.ang, o.period), size=diam / short, mask=m))
    return out


def _query(rng, objects) -> Query:
    known = [o for o in objects if o.known]
    forms = ("colour shape", "shape", "colour")
    form = forms[int(rng.choice(3, p=(0.5, 0.3, 0.2)))]
    if known and rng.random() >= 0.15:
        o = known[int(rng.integers(len(known)))]
        text = {"colour shape": o.name, "shape": o.shape, "colour": o.colour}[form]
        return Query(text, matches(text, objects))
    present_cs = {(o.colour, o.shape) for o in objects}
    present_s = {o.shape for o in objects}
    present_c = {o.colour for o in objects}
    cands = {
        "colour shape": [f"{c} {s}" for c in COLOURS for s in SHAPES if (c, s) not in present_cs],
        "shape": [s for s in SHAPES if s not in present_s],
        "colour": [c for c in COLOURS if c not in present_c],
    }
    order = [form] + [f for f in forms if f != form]
    for f in order:
        if cands[f]:
            c = cands[f]
            if f == "colour shape" and rng.random() < 0.6:       # near misses: the shape or colour is there
                near = [t for t in c if t.split()[0] in present_c or t.split()[1] in present_s]
                c = near or c
            text = c[int(rng.integers(len(c)))]
            return Query(text, matches(text, objects))
    o = known[0]
    return Query(o.name, matches(o.name, objects))


def kind_for(seed: int, i: int) -> str:
    perm = np.random.default_rng([seed, i // len(KINDS), 7]).permutation(len(KINDS))
    return KINDS[int(perm[i % len(KINDS)])]


def canvas_and_count(seed: int, i: int) -> tuple[int, int, int]:
    rng = np.random.default_rng([seed, i, 0])
    u = rng.random()
    short = rng.uniform(96, 160) if u < 0.15 else rng.uniform(160, 480) if u < 0.75 else rng.uniform(480, 800)
    aspect = 1.0 if rng.random() < 0.3 else rng.uniform(1.0, 2.0)
    short = int(round(short))
    long = int(min(800, round(short * aspect)))
    W, H = (long, short) if rng.random() < 0.5 else (short, long)
    u = rng.random()
    n = 0 if u < 0.04 else int(rng.integers(1, 7)) if u < 0.48 else int(rng.integers(7, 11)) if u < 0.75 \
        else int(rng.integers(11, 26))
    return W, H, n


def _attempt(kind_name, W, H, n, rng, strength):
    kind = _KIND_CLASSES[kind_name](rng, W, H, strength)
    objs = _place(kind, rng, n)
    if objs is None:
        return None
    img = kind.render(objs)
    objects = _labels(kind, objs, img)
    if objects is None:
        return None
    scene = Scene(Image.fromarray(img, "RGB"), tuple(objects), kind_name)
    return scene, _query(rng, scene.objects)


def thirteenth_scene(seed: int = DEFAULT_SEED, i: int = 0) -> tuple[Scene, Query, int]:
    """Scene i of the batch for `seed` (independent of the batch size): (scene, query, attempts used)."""
    kind = kind_for(seed, i)
    W, H, n = canvas_and_count(seed, i)
    for attempt in range(_ATTEMPTS):
        strength = 1.0 if attempt < 10 else max(0.2, 1.0 - 0.06 * (attempt - 9))
        out = _attempt(kind, W, H, n, np.random.default_rng([seed, i, attempt + 1]), strength)
        if out is not None:
            return out[0], out[1], attempt + 1
    raise RuntimeError(f"thirteenth scene {i} (seed {seed}, {kind}, {W}x{H}, {n} objects) failed every attempt")


def thirteenth_batch(seed: int = DEFAULT_SEED, n: int = 300) -> list[tuple[Scene, Query]]:
    return [thirteenth_scene(seed, i)[:2] for i in range(n)]


if __name__ == "__main__":
    from docs.experiments.scene_sample import sample

    sample(thirteenth_scene, __doc__, DEFAULT_SEED)
