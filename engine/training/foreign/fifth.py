"""Fifth synthetic scene generator (written blind to the others).

Written as a blind evaluation generator (sessions 36-38); since session 51 also a training source
(`engine.train --foreign`, engine/training/foreign/__init__.py), so its figures are no longer blind.

How it draws
------------
Every scene is built on a *canvas* and may then be warped as a whole.

1. Background (named in ``Scene.background``), generated with numpy from smooth
   value noise (random low-resolution grids upsampled bicubically, summed over
   octaves):

   * ``sky``       vertical blue gradient with soft, thresholded-noise clouds;
   * ``wood``      planks with sinusoidal, noise-warped grain, streaks and seams;
   * ``marble``    light (or dark) stone with thin turbulent veins;
   * ``concrete``  grey noise with speckle pores;
   * ``newspaper`` off-white paper with columns of tiny glyph-like ink marks
                   (random 3x5 bitmaps, a stem in every headline glyph);
   * ``pavers``    running-bond rectangular stones (aspect 2-3, never square)
                   with mortar gaps;
   * ``foliage``   dark olive ground covered by muted, blurred leaf ellipses
                   and dappled light;
   * ``linen``     muted woven fabric (thread jitter and a fine checker).

2. Objects are closed polygons (circle = 96-gon) in a unit frame with
   circumradius 1, in their upright pose (a vertex straight up for triangle,
   star and hexagon; axis-aligned sides / arms for square and cross; long
   diagonal vertical for diamond).  They get any rotation, an optional
   "hand-drawn" wobble (the outline is densified and displaced radially by a
   few low harmonics), and are rasterised with 2-4x supersampling into an
   anti-aliased coverage map; the pixel mask is coverage >= 0.5.  Per scene a
   style mix decides how often objects get a thin darker same-hue outline
   (distance-transform stroke), a soft linear shading gradient, and a blurred
   drop shadow (drawn before the object).  Colours come from per-name shade
   sets; distractors are out-of-vocabulary shapes (semicircle, crescent,
   heart, arrow, lightning bolt, house, chevron, teardrop, oval, long
   rectangle, trapezoid) and vocabulary shapes in pink, cyan, brown or grey.

3. Placement is rejection-sampled per object: >= 80 % of the mask inside the
   canvas (some objects are allowed to be cut by the border), at most 12 % of the
   pixels under it and 12 % of a 3 px ring around it closer than 75 RGB
   units to its colour, no earlier
   object left with < 75 % of its in-image pixels visible, and no two objects
   of the same colour name touching (2 px).

4. About 45 % of scenes are then warped by one affine map (slight rotation,
   squash along one axis, shear), expanding the frame so nothing is lost, and
   padding the corners with a darkened background mean.  Each object's
   coverage is warped with the same PIL call so masks follow the pixels.

5. Global photo effects: colour temperature shift, lens vignetting, slight blur,
   Gaussian noise, JPEG re-encoding (each with some probability, all mild).

Object fields: ``box`` is the pixel bounding box of the (warped, clipped)
mask, ``mask`` the full mask cropped to it, ``point`` the visible pixel
deepest inside the visible part (distance transform), ``size`` twice the
largest distance from the centre to the un-wobbled outline after the warp
over the image's short side, ``tilt`` the angle of the transformed "up"
vector folded by the shape's rotation period.

The query (one per scene) is planned first ("<colour> <shape>" ~45 %,
"<shape>" ~40 %, "<colour>" ~15 %, ~20 % meant to be empty, usually with a near
miss present); object kinds that would break the query rules are never drawn,
and the matches are computed from the objects actually placed, in reading
order (bands of 1/8 image height by point y, then point x).
"""
from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage

from engine.training.scenes import Query, Scene, SceneObject

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_SHAPES = (
    "semicircle", "crescent", "heart", "arrow", "lightning", "house",
    "chevron", "teardrop", "oval", "rectangle", "trapezoid",
)
DISTRACTOR_COLOURS = ("pink", "cyan", "brown", "grey")
BACKGROUNDS = ("sky", "wood", "marble", "concrete", "newspaper", "pavers", "foliage", "linen")

SHADES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "red": ((218, 32, 38), (196, 22, 28), (236, 58, 48), (172, 18, 26)),
    "green": ((34, 156, 58), (22, 122, 44), (64, 178, 76), (10, 138, 70)),
    "blue": ((32, 82, 212), (22, 58, 168), (58, 112, 230), (28, 48, 150)),
    "yellow": ((248, 216, 32), (252, 232, 64), (240, 206, 20)),
    "purple": ((128, 48, 168), (108, 36, 146), (152, 72, 192)),
    "orange": ((246, 132, 22), (234, 112, 16), (250, 152, 44)),
    "white": ((252, 252, 252), (243, 243, 239), (247, 247, 251)),
    "black": ((16, 16, 16), (30, 30, 34), (42, 40, 40)),
    "pink": ((246, 152, 192), (238, 120, 170), (250, 178, 206)),
    "cyan": ((40, 202, 218), (84, 222, 232), (24, 184, 204)),
    "brown": ((128, 78, 36), (150, 96, 52), (104, 62, 30)),
    "grey": ((132, 132, 132), (158, 158, 158), (112, 112, 114)),
}

PERIOD = {"circle": 0.0, "square": 90.0, "triangle": 120.0, "star": 72.0, "cross": 90.0,
          "hexagon": 60.0, "diamond": 180.0, "oval": 180.0, "rectangle": 180.0}

_NEAR_COLOUR = {"red": ("pink", "brown"), "green": ("cyan",), "blue": ("cyan",),
                "yellow": ("brown",), "purple": ("pink",), "orange": ("brown", "pink"),
                "white": ("grey",), "black": ("grey",)}
_LOOKALIKE = {"circle": ("oval", "semicircle", "teardrop"),
              "square": ("rectangle", "trapezoid", "house"),
              "triangle": ("trapezoid", "house", "chevron"),
              "star": ("lightning", "heart", "crescent"),
              "cross": ("arrow", "chevron", "lightning"),
              "hexagon": ("house", "oval", "trapezoid"),
              "diamond": ("teardrop", "chevron", "arrow")}

_CLOSE_RGB = 75.0          # RGB distance counted as "no contrast"
_MIN_DIAM_PX = 14.0
_P_EMPTY = 0.19


# --------------------------------------------------------------------------- noise
def _noise(rng, h, w, cell_y, cell_x=None):
    """Smooth value noise in [0, 1]-ish, feature size ~cell pixels."""
    cell_x = cell_y if cell_x is None else cell_x
    gh = max(2, int(h / max(cell_y, 1.0)) + 2)
    gw = max(2, int(w / max(cell_x, 1.0)) + 2)
    grid = rng.random((gh, gw)).astype(np.float32)
    return np.asarray(Image.fromarray(grid).resize((w, h), Image.BICUBIC), dtype=np.float32)


def _fractal(rng, h, w, cell, octaves=4):
    acc = np.zeros((h, w), np.float32)
    amp, tot = 1.0, 0.0
    for _ in range(octaves):
        acc += amp * _noise(rng, h, w, cell)
        tot += amp
        amp *= 0.5
        cell = max(cell / 2.0, 2.0)
    acc /= tot
    lo, hi = float(acc.min()), float(acc.max())
    return (acc - lo) / max(hi - lo, 1e-6)


def _smoothstep(a, b, x):
    t = np.clip((x - a) / (b - a), 0.0, 1.0)
    return t * t * (3 - 2 * t)


# ---------------------------------------------------------------------- backgrounds
def _bg_sky(rng, h, w):
    top = np.array([rng.uniform(60, 105), rng.uniform(118, 158), rng.uniform(196, 236)], np.float32)
    bot = np.array([rng.uniform(180, 212), rng.uniform(206, 228), rng.uniform(230, 248)], np.float32)
    t = np.linspace(0, 1, h, dtype=np.float32) ** rng.uniform(0.7, 1.4)
    img = top + (bot - top) * t[:, None, None]
    img = np.broadcast_to(img, (h, w, 3)).copy()
    n = _fractal(rng, h, w, min(h, w) * rng.uniform(0.3, 0.6), 5)
    thr = rng.uniform(0.45, 0.7)
    a = _smoothstep(thr, thr + rng.uniform(0.15, 0.3), n) * 0.93
    shade = _fractal(rng, h, w, min(h, w) * 0.2, 3)
    cloud = (250 - 28 * shade)[..., None] * np.array([1.0, 1.0, 1.01], np.float32)
    return img * (1 - a[..., None]) + cloud * a[..., None]


def _bg_wood(rng, h, w):
    vertical = rng.random() < 0.5
    if vertical:
        h, w = w, h
    bases = ((196, 154, 108), (170, 120, 80), (214, 184, 142), (140, 96, 62), (184, 140, 92))
    light = np.array(bases[rng.integers(len(bases))], np.float32)
    dark = light * rng.uniform(0.62, 0.78)
    ph = rng.uniform(48, 140)
    off = rng.uniform(0, ph)
    y = np.arange(h, dtype=np.float32)[:, None]
    warp = _noise(rng, h, w, 90, 260) * rng.uniform(6, 16)
    period = rng.uniform(5, 12)
    rings = 0.5 + 0.5 * np.sin(2 * np.pi * (y + warp) / period)
    streak = _noise(rng, h, w, 2.5, 70)
    v = 0.55 * rings ** 0.7 + 0.45 * streak
    img = dark + (light - dark) * v[..., None]
    plank = ((y[:, 0] + off) // ph).astype(int)
    tone = rng.normal(0, 9, plank.max() + 2)[plank]
    img += tone[:, None, None]
    seam = ((y[:, 0] + off) % ph) < 2
    img[seam] *= 0.55
    img = img.astype(np.float32)
    return img.transpose(1, 0, 2).copy() if vertical else img


def _bg_marble(rng, h, w):
    if rng.random() < 0.72:
        base = np.array([rng.uniform(222, 238)] * 3, np.float32) + rng.normal(0, 3, 3)
        vein = np.array([rng.uniform(110, 160)] * 3, np.float32) + rng.normal(0, 4, 3)
    else:
        base = np.array([rng.uniform(38, 62)] * 3, np.float32) + rng.normal(0, 3, 3)
        vein = np.array([rng.uniform(185, 220)] * 3, np.float32)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.broadcast_to(base, (h, w, 3)).astype(np.float32)
    img = img + ((_fractal(rng, h, w, 160, 4) - 0.5) * 14)[..., None]
    for k in range(int(rng.integers(1, 3))):
        a = rng.uniform(0, np.pi)
        per = rng.uniform(90, 260)
        t = (xx * np.cos(a) + yy * np.sin(a)) / per + rng.uniform(1.5, 3.0) * _fractal(rng, h, w, 140, 5)
        width = rng.uniform(0.05, 0.13) / (k + 1)
        v = np.clip(1 - np.abs(np.sin(np.pi * t)) / width, 0, 1) ** 1.5 * rng.uniform(0.5, 0.9)
        img = img * (1 - v[..., None]) + vein * v[..., None]
    return img


def _bg_concrete(rng, h, w):
    g = rng.uniform(132, 186)
    base = np.array([g, g, g], np.float32) + rng.normal(0, 4, 3)
    img = base + ((_fractal(rng, h, w, 120, 5) - 0.5) * 36)[..., None]
    img = img + rng.normal(0, 5, (h, w, 1)).astype(np.float32)
    pores = rng.random((h, w)) < 0.003
    img[pores] *= rng.uniform(0.6, 0.8)
    return img


def _glyph_row(rng, n_glyph, cell, stem):
    bits = rng.random((n_glyph, 5, 3)) < 0.42
    if stem:
        bits[:, :, 0] = True
    gaps = rng.random(n_glyph) < 0.17
    bits[gaps] = False
    row = np.zeros((5, n_glyph, 4), bool)
    row[:, :, :3] = bits.transpose(1, 0, 2)
    row = row.reshape(5, n_glyph * 4)
    return np.kron(row, np.ones((cell, cell), bool))


def _bg_newspaper(rng, h, w):
    paper = np.array([rng.uniform(226, 240), rng.uniform(222, 236), rng.uniform(204, 222)], np.float32)
    ink_rgb = np.array([rng.uniform(40, 70)] * 3, np.float32)
    ink = np.zeros((h, w), bool)
    margin = int(rng.integers(6, 20))
    y = margin
    if rng.random() < 0.7:  # headline
        hc = int(rng.integers(2, 4))
        for _ in range(int(rng.integers(1, 3))):
            if y + 5 * hc > h - margin:
                break
            ng = max(1, (w - 2 * margin) // (4 * hc))
            ng = int(ng * rng.uniform(0.5, 1.0))
            rows = _glyph_row(rng, ng, hc, True)
            ink[y:y + rows.shape[0], margin:margin + rows.shape[1]] |= rows
            y += 5 * hc + int(rng.integers(4, 9))
        y += int(rng.integers(4, 12))
    ncol = int(rng.integers(2, 5)) if w > 320 else int(rng.integers(1, 3))
    gutter = int(rng.integers(8, 18))
    colw = (w - 2 * margin - (ncol - 1) * gutter) // ncol
    cell = 1 if rng.random() < 0.55 else 2
    pitch = 5 * cell + int(rng.integers(3, 7))
    for c in range(ncol):
        x0 = margin + c * (colw + gutter)
        yy = y
        while yy + 5 * cell <= h - margin:
            ng = colw // (4 * cell)
            if rng.random() < 0.12:
                ng = int(ng * rng.uniform(0.2, 0.8))  # paragraph end
            if ng > 0 and rng.random() > 0.05:
                rows = _glyph_row(rng, ng, cell, False)
                ink[yy:yy + rows.shape[0], x0:x0 + rows.shape[1]] |= rows
            yy += pitch
    img = paper + rng.normal(0, 3, (h, w, 1)).astype(np.float32)
    img = img + ((_fractal(rng, h, w, 150, 3) - 0.5) * 10)[..., None]
    img[ink] = ink_rgb + rng.normal(0, 8, (int(ink.sum()), 1)).astype(np.float32)
    return np.asarray(Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(0.45)), np.float32)


def _bg_pavers(rng, h, w):
    bases = ((176, 170, 160), (150, 148, 144), (196, 184, 160), (128, 126, 122), (168, 160, 142))
    base = np.array(bases[rng.integers(len(bases))], np.float32)
    sh = rng.uniform(34, 90)
    sw = sh * rng.uniform(2.0, 3.0)
    gap = rng.uniform(2, 4.5)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    r = (yy // sh).astype(int)
    xs = xx + (r % 2) * sw * 0.5
    c = (xs // sw).astype(int)
    table = rng.normal(0, 11, (r.max() + 2, c.max() + 2)).astype(np.float32)
    img = base + table[r, c][..., None]
    img = img + ((_fractal(rng, h, w, 40, 4) - 0.5) * 22)[..., None]
    mortar = ((yy % sh) < gap) | ((xs % sw) < gap)
    img[mortar] = img[mortar] * 0.55
    return img


def _bg_foliage(rng, h, w):
    base = (rng.uniform(52, 72), rng.uniform(66, 88), rng.uniform(42, 58))
    im = Image.new("RGB", (w, h), tuple(int(v) for v in base))
    d = ImageDraw.Draw(im)
    n = int(h * w / rng.uniform(260, 420))
    t = np.linspace(0, 2 * np.pi, 14, endpoint=False)
    for _ in range(n):
        cx, cy = rng.uniform(-10, w + 10), rng.uniform(-10, h + 10)
        ln = rng.uniform(10, 34)
        wd = ln * rng.uniform(0.32, 0.5)
        a = rng.uniform(0, np.pi)
        px = ln * np.cos(t) * np.cos(a) - wd * np.sin(t) * np.sin(a) + cx
        py = ln * np.cos(t) * np.sin(a) + wd * np.sin(t) * np.cos(a) + cy
        g = rng.uniform(70, 128)
        if rng.random() < 0.15:
            col = (g * rng.uniform(0.95, 1.1), g * rng.uniform(0.8, 0.9), g * rng.uniform(0.5, 0.6))
        else:
            col = (g * rng.uniform(0.68, 0.92), g, g * rng.uniform(0.45, 0.65))
        d.polygon(list(zip(px.tolist(), py.tolist())), fill=tuple(int(v) for v in col))
    im = im.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 2.4)))
    img = np.asarray(im, np.float32)
    light = 0.78 + 0.4 * _fractal(rng, h, w, min(h, w) * 0.4, 3)
    return img * light[..., None]


def _bg_linen(rng, h, w):
    bases = ((208, 200, 186), (182, 188, 196), (196, 184, 170), (170, 176, 160), (150, 158, 172))
    base = np.array(bases[rng.integers(len(bases))], np.float32)
    p = int(rng.integers(2, 4))
    yy, xx = np.mgrid[0:h, 0:w]
    check = (((xx // p + yy // p) % 2) * 2 - 1).astype(np.float32) * rng.uniform(2, 5)
    rows = rng.normal(0, 5, h).astype(np.float32)[:, None]
    cols = rng.normal(0, 5, w).astype(np.float32)[None, :]
    img = base + (check + rows + cols + (_fractal(rng, h, w, 110, 4) - 0.5) * 18)[..., None]
    return img


_BG_FUNCS = {"sky": _bg_sky, "wood": _bg_wood, "marble": _bg_marble, "concrete": _bg_concrete,
             "newspaper": _bg_newspaper, "pavers": _bg_pavers, "foliage": _bg_foliage,
             "linen": _bg_linen}


# --------------------------------------------------------------------------- shapes
def _circle_pts(n=96, rx=1.0, ry=1.0, a0=0.0, a1=2 * np.pi, endpoint=False):
    t = np.linspace(a0, a1, n, endpoint=endpoint)
    return np.stack([rx * np.cos(t), ry * np.sin(t)], 1)


def _normalise(p):
    p = np.asarray(p, np.float64)
    c = (p.min(0) + p.max(0)) / 2
    p = p - c
    return p / np.sqrt((p ** 2).sum(1)).max()


def _unit_outline(shape, rng):
    """Closed outline (N, 2), image axes (y down), upright pose, circumradius 1."""
    if shape == "circle":
        return _circle_pts(96)
    if shape == "square":
        s = 1 / math.sqrt(2)
        return np.array([(-s, -s), (s, -s), (s, s), (-s, s)])
    if shape in ("triangle", "hexagon"):
        k = 3 if shape == "triangle" else 6
        a = -np.pi / 2 + 2 * np.pi * np.arange(k) / k
        return np.stack([np.cos(a), np.sin(a)], 1)
    if shape == "star":
        inner = rng.uniform(0.38, 0.5)
        a = -np.pi / 2 + np.pi * np.arange(10) / 5
        r = np.where(np.arange(10) % 2 == 0, 1.0, inner)
        return np.stack([r * np.cos(a), r * np.sin(a)], 1)
    if shape == "cross":
        q = rng.uniform(0.28, 0.36)
        p = [(-q, -1), (q, -1), (q, -q), (1, -q), (1, q), (q, q), (q, 1), (-q, 1), (-q, q),
             (-1, q), (-1, -q), (-q, -q)]
        return _normalise(p)
    if shape == "diamond":
        q = rng.uniform(0.5, 0.75)
        return np.array([(0, -1), (q, 0), (0, 1), (-q, 0)], np.float64)
    if shape == "semicircle":
        arc = _circle_pts(48, a0=np.pi, a1=2 * np.pi, endpoint=True)
        return _normalise(arc)
    if shape == "crescent":
        d, r2 = rng.uniform(0.4, 0.55), rng.uniform(0.8, 0.9)
        x = (d * d + 1 - r2 * r2) / (2 * d)
        y = math.sqrt(max(1 - x * x, 1e-6))
        al = math.atan2(y, x)
        be = math.atan2(y, x - d)
        outer = _circle_pts(60, a0=al, a1=2 * np.pi - al, endpoint=True)
        t = np.linspace(2 * np.pi - be, be, 50)
        inner = np.stack([d + r2 * np.cos(t), r2 * np.sin(t)], 1)
        return _normalise(np.concatenate([outer, inner[1:-1]]))
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 80, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        return _normalise(np.stack([x, y], 1))
    if shape == "arrow":
        hw, sw = rng.uniform(0.45, 0.6), rng.uniform(0.16, 0.24)
        return _normalise([(-1, -sw), (0.15, -sw), (0.15, -hw), (1, 0), (0.15, hw), (0.15, sw), (-1, sw)])
    if shape == "lightning":
        return _normalise([(0.15, -1), (-0.45, 0.12), (-0.02, 0.12), (-0.3, 1), (0.5, -0.25),
                           (0.06, -0.25), (0.4, -1)])
    if shape == "house":
        return _normalise([(-0.7, 1), (0.7, 1), (0.7, -0.1), (0, -0.9), (-0.7, -0.1)])
    if shape == "chevron":
        t = rng.uniform(0.5, 0.7)
        return _normalise([(-1, -0.6), (0, 0.3), (1, -0.6), (1, -0.6 + t), (0, 0.3 + t), (-1, -0.6 + t)])
    if shape == "teardrop":
        t = np.linspace(0, 2 * np.pi, 80, endpoint=False)
        x = np.sin(t) * np.abs(np.sin(t / 2)) ** 1.4 * 0.9
        y = np.cos(t)
        return _normalise(np.stack([x, y], 1))
    if shape == "oval":
        return _normalise(_circle_pts(96, 1.0, rng.uniform(0.45, 0.62)))
    if shape == "rectangle":
        a = rng.uniform(0.34, 0.55)
        return _normalise([(-1, -a), (1, -a), (1, a), (-1, a)])
    if shape == "trapezoid":
        top = rng.uniform(0.35, 0.6)
        return _normalise([(-1, 0.5), (1, 0.5), (top, -0.5), (-top, -0.5)])
    raise ValueError(shape)


def _densify(p, step):
    out = []
    q = np.roll(p, -1, 0)
    for a, b in zip(p, q):
        k = max(1, int(np.hypot(*(b - a)) / step))
        t = np.arange(k)[:, None] / k
        out.append(a + (b - a) * t)
    return np.concatenate(out)


def _wobble(pts, radius, rng):
    p = _densify(pts, max(radius * 0.06, 1.5))
    th = np.arctan2(p[:, 1], p[:, 0])
    amp = rng.uniform(0.018, 0.035)
    f = np.zeros(len(p))
    for k in rng.choice(np.arange(3, 10), 3, replace=False):
        f += rng.normal(0, 1) * np.sin(k * th + rng.uniform(0, 2 * np.pi))
    f = f / max(np.abs(f).max(), 1e-6) * amp
    return p * (1 + f)[:, None]


def _rot(deg):
    a = math.radians(deg)
    return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


_PAD = 4


def _raster(pts):
    mn = np.floor(pts.min(0)) - _PAD
    mx = np.ceil(pts.max(0)) + _PAD
    w, h = int(mx[0] - mn[0]), int(mx[1] - mn[1])
    big = max(w, h)
    ss = 4 if big <= 100 else (3 if big <= 220 else 2)
    img = Image.new("L", (w * ss, h * ss), 0)
    q = (pts - mn) * ss
    ImageDraw.Draw(img).polygon([(float(x), float(y)) for x, y in q], fill=255)
    cov = np.asarray(img, np.float32).reshape(h, ss, w, ss).mean((1, 3)) / 255.0
    return cov, mn


class _Obj:
    """One rendered object in canvas space (local arrays with integer origin)."""

    __slots__ = ("shape", "colour", "rgb", "unit", "radius", "phi", "cov", "mask", "dil2", "dil3",
                 "col", "shadow", "centre", "h", "w", "ty", "tx", "vis", "area")


def _render(rng, shape, colour, rgb, diam, style):
    unit = _unit_outline(shape, rng)
    if rng.random() < 0.25:
        phi = float(rng.uniform(-4, 4))
    else:
        phi = float(rng.uniform(0, 360))
    radius = diam / 2.0
    pts = unit @ _rot(phi).T * radius
    if rng.random() < style["wobble"] and diam >= 20:
        pts = _wobble(pts, radius, rng)
    frac = rng.random(2)
    pts = pts + frac
    cov, mn = _raster(pts)
    mask = cov >= 0.5
    if mask.sum() < 12:
        return None
    h, w = cov.shape
    o = _Obj()
    o.shape, o.colour, o.rgb = shape, colour, rgb
    o.unit, o.radius, o.phi = unit, radius, phi
    o.cov, o.mask, o.h, o.w = cov, mask, h, w
    o.centre = frac - mn
    o.dil2 = ndimage.binary_dilation(mask, iterations=2)
    o.dil3 = ndimage.binary_dilation(o.dil2, iterations=1)
    base = np.array(rgb, np.float32)
    col = np.broadcast_to(base, (h, w, 3)).astype(np.float32)
    if rng.random() < style["shade"]:
        g = {"white": 0.05, "yellow": 0.08, "black": 0.3}.get(colour, rng.uniform(0.06, 0.13))
        psi = rng.uniform(0, 2 * np.pi)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
        t = ((xx - o.centre[0]) * math.cos(psi) + (yy - o.centre[1]) * math.sin(psi)) / radius
        f = 1 + g * np.clip(t, -1, 1)
        col = np.clip(col * f[..., None], 0, 255)
    if rng.random() < style["outline"] and diam >= 22:
        sw = float(np.clip(diam * rng.uniform(0.025, 0.045), 1.0, 3.0))
        dist = ndimage.distance_transform_edt(mask)
        wgt = np.clip(sw + 0.5 - dist, 0, 1)[..., None].astype(np.float32)
        k = {"white": 0.76, "black": 0.5, "yellow": 0.72}.get(colour, 0.6)
        col = col * (1 - wgt) + base * k * wgt
    o.col = col
    o.shadow = None
    if rng.random() < style["shadow"]:
        off = max(2.0, diam * rng.uniform(0.04, 0.08))
        dx, dy = off * style["light"][0], off * style["light"][1]
        blur = max(1.0, diam * 0.04)
        pad = int(math.ceil(abs(dx) + abs(dy) + 3 * blur)) + 1
        big = np.zeros((h + 2 * pad, w + 2 * pad), np.float32)
        oy, ox = pad + int(round(dy)), pad + int(round(dx))
        big[oy:oy + h, ox:ox + w] = cov
        alpha = ndimage.gaussian_filter(big, blur) * rng.uniform(0.22, 0.34)
        o.shadow = (alpha, pad)
    return o


def _overlap(ay, ax, ah, aw, by, bx, bh, bw):
    y0, y1 = max(ay, by), min(ay + ah, by + bh)
    x0, x1 = max(ax, bx), min(ax + aw, bx + bw)
    if y0 >= y1 or x0 >= x1:
        return None
    return ((slice(y0 - ay, y1 - ay), slice(x0 - ax, x1 - ax)),
            (slice(y0 - by, y1 - by), slice(x0 - bx, x1 - bx)))


def _try_place(rng, o, canvas, placed, allow_cut, attempts):
    H, W = canvas.shape[:2]
    total = float(o.mask.sum())
    base = np.array(o.rgb, np.float32)
    for _ in range(attempts):
        if allow_cut and rng.random() < 0.5:
            tx = int(rng.integers(-int(0.3 * o.w), max(-int(0.3 * o.w) + 1, W - int(0.7 * o.w))))
            ty = int(rng.integers(-int(0.3 * o.h), max(-int(0.3 * o.h) + 1, H - int(0.7 * o.h))))
        else:
            tx = int(rng.integers(-_PAD, max(-_PAD + 1, W - o.w + _PAD + 1)))
            ty = int(rng.integers(-_PAD, max(-_PAD + 1, H - o.h + _PAD + 1)))
        ov = _overlap(ty, tx, o.h, o.w, 0, 0, H, W)
        if ov is None:
            continue
        lo, cv = ov
        inside = float(o.mask[lo].sum())
        if inside < 0.8 * total:
            continue
        region = o.dil3[lo]
        px = canvas[cv][region]
        inner = o.mask[lo][region]
        close = np.sqrt(((px - base) ** 2).sum(1)) < _CLOSE_RGB
        if close.mean() > 0.12:
            continue
        ring = close[~inner]
        if ring.size and ring.mean() > 0.12:
            continue
        ok, updates = True, []
        for e in placed:
            ov2 = _overlap(ty, tx, o.h, o.w, e.ty, e.tx, e.h, e.w)
            if ov2 is None:
                continue
            ln, le = ov2
            if e.colour == o.colour and (o.dil2[ln] & e.mask[le]).any():
                ok = False
                break
            cover = o.mask[ln] & e.vis[le]
            if cover.any():
                nv = e.vis.copy()
                nv[le] &= ~o.mask[ln]
                if nv.sum() < 0.75 * e.area:
                    ok = False
                    break
                updates.append((e, nv))
        if not ok:
            continue
        for e, nv in updates:
            e.vis = nv
        o.ty, o.tx = ty, tx
        vis = np.zeros_like(o.mask)
        vis[lo] = o.mask[lo]
        o.vis, o.area = vis, inside
        return True
    return False


def _composite(o, canvas):
    H, W = canvas.shape[:2]
    if o.shadow is not None:
        alpha, pad = o.shadow
        ov = _overlap(o.ty - pad, o.tx - pad, alpha.shape[0], alpha.shape[1], 0, 0, H, W)
        if ov is not None:
            canvas[ov[1]] *= (1 - alpha[ov[0]])[..., None]
    lo, cv = _overlap(o.ty, o.tx, o.h, o.w, 0, 0, H, W)
    a = o.cov[lo][..., None]
    canvas[cv] = canvas[cv] * (1 - a) + o.col[lo] * a


# --------------------------------------------------------------------------- planning
def _allowed(shape, colour, form, ts, tc, empty):
    vs, vc = shape in SHAPES, colour in COLOURS
    if form == "cs":
        return not (empty and shape == ts and colour == tc)
    if form == "s":
        if shape == ts and (not vc or empty):
            return False
        return True
    if colour == tc and (not vs or empty):
        return False
    return True


def _random_kind(rng):
    u = rng.random()
    if u < 0.62:
        return SHAPES[rng.integers(7)], COLOURS[rng.integers(8)]
    if u < 0.80:
        return SHAPES[rng.integers(7)], DISTRACTOR_COLOURS[rng.integers(4)]
    cols = COLOURS if rng.random() < 0.7 else DISTRACTOR_COLOURS
    return DISTRACTOR_SHAPES[rng.integers(len(DISTRACTOR_SHAPES))], cols[rng.integers(len(cols))]


def _pick_count(rng):
    u = rng.random()
    if u < 0.03:
        return 0
    if u < 0.25:
        return int(rng.integers(1, 5))
    if u < 0.70:
        return int(rng.integers(5, 11))
    return int(rng.integers(11, 26))


def _plan(rng):
    form = ("cs", "s", "c")[int(rng.choice(3, p=[0.45, 0.40, 0.15]))]
    n = _pick_count(rng)
    empty = n == 0 or rng.random() < _P_EMPTY
    ts, tc = SHAPES[rng.integers(7)], COLOURS[rng.integers(8)]
    kinds: list[tuple[str, str]] = []
    if n and not empty:
        copies = n >= 6 and rng.random() < 0.2
        k = int(rng.integers(5, min(14, n) + 1)) if copies else int(rng.integers(1, min(4, n) + 1))
        fixed_c = COLOURS[rng.integers(8)]
        fixed_s = SHAPES[rng.integers(7)]
        for _ in range(k):
            if form == "cs":
                kinds.append((ts, tc))
            elif form == "s":
                kinds.append((ts, fixed_c if copies else COLOURS[rng.integers(8)]))
            else:
                kinds.append((fixed_s if copies else SHAPES[rng.integers(7)], tc))
    if n and rng.random() < (0.85 if empty else 0.5):
        other_c = [c for c in COLOURS if c != tc]
        other_s = [s for s in SHAPES if s != ts]
        if form == "cs":
            cands = [(ts, other_c[rng.integers(7)]), (other_s[rng.integers(6)], tc),
                     (_LOOKALIKE[ts][rng.integers(3)], tc),
                     (ts, _NEAR_COLOUR[tc][rng.integers(len(_NEAR_COLOUR[tc]))])]
        elif form == "s":
            cands = [(_LOOKALIKE[ts][rng.integers(3)], COLOURS[rng.integers(8)]),
                     (other_s[rng.integers(6)], COLOURS[rng.integers(8)])]
        else:
            cands = [(SHAPES[rng.integers(7)], _NEAR_COLOUR[tc][rng.integers(len(_NEAR_COLOUR[tc]))]),
                     (SHAPES[rng.integers(7)], other_c[rng.integers(7)])]
        for j in rng.permutation(len(cands))[: int(rng.integers(1, 4))]:
            if len(kinds) < n and _allowed(*cands[j], form, ts, tc, empty):
                kinds.append(cands[j])
    if len(kinds) < n - 5 and rng.random() < 0.12:  # many copies of a filler kind
        while True:
            kind = _random_kind(rng)
            if _allowed(*kind, form, ts, tc, empty):
                break
        kinds += [kind] * int(rng.integers(4, min(10, n - len(kinds)) + 1))
    while len(kinds) < n:
        kind = _random_kind(rng)
        if _allowed(*kind, form, ts, tc, empty):
            kinds.append(kind)
    kinds = kinds[:n]
    order = rng.permutation(len(kinds))
    return form, ts, tc, [kinds[i] for i in order]


# ------------------------------------------------------------------------------ warp
def _pick_warp(rng, W, H):
    """Return (M 2x2, t 2, out_w, out_h) or None for identity."""
    if rng.random() >= 0.45:
        return None
    for _ in range(20):
        th = rng.uniform(1.5, 9) * rng.choice([-1, 1]) if rng.random() < 0.7 else 0.0
        sx = sy = 1.0
        if rng.random() < 0.6:
            if rng.random() < 0.5:
                sx = rng.uniform(0.84, 0.95)
            else:
                sy = rng.uniform(0.84, 0.95)
        shr = rng.uniform(-0.07, 0.07) if rng.random() < 0.35 else 0.0
        if th == 0 and sx == 1 and sy == 1 and shr == 0:
            continue
        M = _rot(th) @ np.array([[1, shr], [0, 1]]) @ np.diag([sx, sy])
        corners = np.array([[0, 0], [W, 0], [0, H], [W, H]], np.float64) @ M.T
        ext = corners.max(0) - corners.min(0)
        s = 1.0
        if ext.max() > 900:
            s = 900 / ext.max()
        elif ext.min() < 200:
            s = 200 / ext.min()
        M = M * s
        corners = corners * s
        ext = corners.max(0) - corners.min(0)
        ow, oh = int(math.ceil(ext[0] - 1e-6)), int(math.ceil(ext[1] - 1e-6))
        if max(ow, oh) > 900 or min(ow, oh) < 200 or max(ow, oh) / min(ow, oh) > 2.5:
            continue
        return M, -corners.min(0), ow, oh
    return None


# ----------------------------------------------------------------------------- scene
def _reading_key(o):
    return (min(int(o.point[1] * 8), 7), o.point[0])


def _matches(objs, form, ts, tc):
    if form == "cs":
        m = [o for o in objs if o.shape == ts and o.colour == tc]
    elif form == "s":
        m = [o for o in objs if o.shape == ts and o.colour in COLOURS]
    else:
        m = [o for o in objs if o.colour == tc and o.shape in SHAPES]
    return tuple(sorted(m, key=_reading_key))


def _make_scene(rng):
    form, ts, tc, kinds = _plan(rng)
    n = len(kinds)
    # canvas size
    L = rng.uniform(380 if n > 10 else 240, 900)
    asp = rng.uniform(1.0, 2.3)
    S = max(200.0, L / asp)
    W, H = (int(L), int(S)) if rng.random() < 0.55 else (int(S), int(L))
    bg_kind = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
    canvas = np.clip(_BG_FUNCS[bg_kind](rng, H, W), 0, 255).astype(np.float32)
    bg_mean = canvas.reshape(-1, 3).mean(0)

    la = rng.uniform(0.3, 1.2)
    style = {"outline": float(rng.choice([0.0, 0.5, 1.0])),
             "shade": float(rng.choice([0.0, 0.6, 1.0])),
             "shadow": float(rng.choice([0.0, 0.0, 0.5, 1.0])),
             "wobble": float(rng.choice([0.0, 0.0, 0.5, 1.0])),
             "light": (math.cos(la), math.sin(la))}
    short = min(W, H)
    hi = float(np.clip(0.95 / math.sqrt(max(n, 1)), 0.11, 0.40))
    lo = min(max(0.03, _MIN_DIAM_PX / short), hi * 0.6)
    copy_size: dict[tuple[str, str], float] = {}
    cut_p = rng.choice([0.0, 0.25, 0.5])
    placed: list[_Obj] = []
    for shape, colour in kinds:
        key = (shape, colour)
        if key in copy_size and rng.random() < 0.7:
            frac = copy_size[key] * rng.uniform(0.85, 1.15)
        else:
            if rng.random() < 0.5:
                frac = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            else:
                frac = rng.uniform(lo, hi)
            copy_size.setdefault(key, frac)
        diam = max(_MIN_DIAM_PX, frac * short)
        shades = list(SHADES[colour])
        allow_cut = rng.random() < cut_p
        done = False
        for attempt in range(3):
            rgb = shades[rng.integers(len(shades))]
            o = _render(rng, shape, colour, rgb, diam, style)
            if o is None:
                break
            if _try_place(rng, o, canvas, placed, allow_cut, 30 if attempt == 0 else 15):
                done = True
                break
            diam = max(_MIN_DIAM_PX, diam * 0.8)
        if done:
            _composite(o, canvas)
            placed.append(o)

    # ----- global warp
    warp = _pick_warp(rng, W, H)
    if warp is None:
        OW, OH = W, H
        img = canvas
        M, t = np.eye(2), np.zeros(2)
    else:
        M, t, OW, OH = warp
        Minv = np.linalg.inv(M)
        k = -Minv @ t
        pad = tuple(int(v) for v in np.clip(bg_mean * 0.9, 0, 255))
        pil = Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8))
        pil = pil.transform((OW, OH), Image.AFFINE, (Minv[0, 0], Minv[0, 1], k[0], Minv[1, 0], Minv[1, 1], k[1]),
                            resample=Image.BICUBIC, fillcolor=pad)
        img = np.asarray(pil, np.float32)

    # ----- object masks in output space
    outs = []
    for o in placed:
        lo_, cv = _overlap(o.ty, o.tx, o.h, o.w, 0, 0, H, W)
        cov = np.zeros_like(o.cov)
        cov[lo_] = o.cov[lo_]
        if warp is None:
            m, oy, ox = cov >= 0.5, o.ty, o.tx
        else:
            corners = np.array([[o.tx, o.ty], [o.tx + o.w, o.ty], [o.tx, o.ty + o.h],
                                [o.tx + o.w, o.ty + o.h]], np.float64) @ M.T + t
            ox = max(0, int(math.floor(corners[:, 0].min())) - 1)
            oy = max(0, int(math.floor(corners[:, 1].min())) - 1)
            bw = min(OW, int(math.ceil(corners[:, 0].max())) + 1) - ox
            bh = min(OH, int(math.ceil(corners[:, 1].max())) + 1) - oy
            if bw <= 0 or bh <= 0:
                continue
            c2 = Minv @ np.array([ox, oy], np.float64) + k - np.array([o.tx, o.ty], np.float64)
            cim = Image.fromarray(np.round(cov * 255).astype(np.uint8))
            cim = cim.transform((bw, bh), Image.AFFINE, (Minv[0, 0], Minv[0, 1], c2[0], Minv[1, 0], Minv[1, 1], c2[1]),
                                resample=Image.BILINEAR, fillcolor=0)
            m = np.asarray(cim) >= 128
        # clip to output and trim to the tight box
        ov = _overlap(oy, ox, m.shape[0], m.shape[1], 0, 0, OH, OW)
        if ov is None:
            continue
        m = m[ov[0]]
        oy, ox = max(oy, 0), max(ox, 0)
        rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
        if rows.size == 0:
            continue
        m = m[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
        outs.append((o, oy + int(rows[0]), ox + int(cols[0]), np.ascontiguousarray(m)))

    label = np.full((OH, OW), -1, np.int32)
    for i, (o, y0, x0, m) in enumerate(outs):
        sub = label[y0:y0 + m.shape[0], x0:x0 + m.shape[1]]
        sub[m] = i

    short_out = min(OW, OH)
    objects = []
    for i, (o, y0, x0, m) in enumerate(outs):
        h, w = m.shape
        vis = m & (label[y0:y0 + h, x0:x0 + w] == i)
        if not vis.any():
            vis = m
        dt = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
        r, c = np.unravel_index(int(np.argmax(dt)), dt.shape)
        point = ((x0 + c + 0.5) / OW, (y0 + r + 0.5) / OH)
        box = (x0 / OW, y0 / OH, (x0 + w) / OW, (y0 + h) / OH)
        lin = M @ _rot(o.phi)
        size = 2 * o.radius * float(np.sqrt(((o.unit @ lin.T) ** 2).sum(1)).max()) / short_out
        period = PERIOD.get(o.shape, 360.0)
        if period == 0:
            tilt = 0.0
        else:
            up = lin @ np.array([0.0, -1.0])
            ang = math.degrees(math.atan2(up[0], -up[1])) % period
            tilt = float(min(ang, period - ang))
        objects.append(SceneObject(shape=o.shape, colour=o.colour, box=box, point=point,
                                   rgb=tuple(int(v) for v in o.rgb), tilt=tilt, size=size, mask=m))

    # ----- global photo effects
    if rng.random() < 0.3:
        tt = rng.uniform(-0.05, 0.05)
        img = img * np.array([1 + tt, 1.0, 1 - tt], np.float32)
    if rng.random() < 0.3:
        yy = (np.arange(OH, dtype=np.float32) + 0.5) / OH - 0.5
        xx = (np.arange(OW, dtype=np.float32) + 0.5) / OW - 0.5
        r2 = (xx[None, :] ** 2 + yy[:, None] ** 2) * 2
        img = img * (1 - rng.uniform(0.08, 0.18) * r2)[..., None]
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    if rng.random() < 0.25:
        pil = pil.filter(ImageFilter.GaussianBlur(rng.uniform(0.4, 0.9)))
    if rng.random() < 0.4:
        arr = np.asarray(pil, np.float32) + rng.normal(0, rng.uniform(2, 6), (OH, OW, 1)).astype(np.float32)
        pil = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    if rng.random() < 0.4:
        buf = io.BytesIO()
        pil.save(buf, format="JPEG", quality=int(rng.integers(55, 91)))
        buf.seek(0)
        pil = Image.open(buf).convert("RGB")

    text = {"cs": f"{tc} {ts}", "s": ts, "c": tc}[form]
    objs = tuple(objects)
    return Scene(image=pil, objects=objs, background=bg_kind), Query(text=text, matches=_matches(objs, form, ts, tc))


def fifth_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    """``n`` (scene, query) pairs; scene ``i`` depends only on ``(seed, i)``."""
    out = []
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence([int(seed) % (1 << 63), i, 5]))
        out.append(_make_scene(rng))
    return out


def _summary(seed=5555, n=500):
    import collections
    import time

    t0 = time.perf_counter()
    batch = fifth_batch(seed, n)
    dt = time.perf_counter() - t0
    bg = collections.Counter(s.background for s, _ in batch)
    counts = [len(s.objects) for s, _ in batch]
    bins = collections.Counter("0" if c == 0 else "1-4" if c < 5 else "5-10" if c < 11 else "11-25" for c in counts)
    forms = collections.Counter(
        "colour shape" if " " in q.text else ("shape" if q.text in SHAPES else "colour") for _, q in batch)
    empty = sum(not q.matches for _, q in batch)
    sizes = collections.Counter(f"{s.image.size[0]}x{s.image.size[1]}" for s, _ in batch)
    print(f"fifth_batch({seed}, {n}): {dt:.1f} s ({1000 * dt / n:.0f} ms/scene)")
    print("backgrounds:", dict(sorted(bg.items())))
    print("object counts:", {k: bins[k] for k in ("0", "1-4", "5-10", "11-25")},
          f"mean {np.mean(counts):.1f}, max {max(counts)}")
    print("query forms:", dict(forms), f"empty {empty}/{n} = {empty / n:.1%}")
    print("distinct image sizes:", len(sizes))


if __name__ == "__main__":
    _summary()
