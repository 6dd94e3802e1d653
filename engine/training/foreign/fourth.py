"""Fourth scene generator: flat shapes on varied backgrounds.

Written as a blind evaluation generator (sessions 36-38); since session 51 also a training source
(`engine.train --foreign`, engine/training/foreign/__init__.py), so its figures are no longer blind.

Written independently of the training generators (only the `Scene` / `Query` / `SceneObject`
data classes are shared), so a model's score here is not a score on its own training distribution.

How a scene is drawn
--------------------
* The query is chosen first ("<colour> <shape>" 45 %, "<shape>" 40 %, "<colour>" 15 %; about 22 %
  meant to match nothing, often with a near miss in the scene: the shape in another colour, the
  colour on another shape, a look-alike shape such as an oval for "circle" or a 45-degree square
  for "diamond", or a look-alike colour such as pink for "purple"). Then a list of objects is
  planned around it: matching objects (sometimes many copies of one kind), near misses and random
  fillers (vocabulary shapes in vocabulary colours, out-of-vocabulary shapes, vocabulary shapes
  in out-of-vocabulary colours). Fillers never match the query; a "<shape>" scene never holds
  that shape in an out-of-vocabulary colour and a "<colour>" scene never holds an
  out-of-vocabulary shape in that colour.
* The image is 160-720 px a side (aspect up to 1:2.5). Its background is one of nine procedural
  kinds (plain, gradient, paper, photo, wood, fabric, bricks, confetti, chalkboard) in muted
  colours, drawn with numpy from upsampled random fields and sines (nothing shape-like; confetti
  specks are 1-3 px and in non-vocabulary colours).
* Every shape is an exact geometric figure (union of convex polygons and ellipses, minus an
  ellipse for the moon) in a local frame with circumscribed radius 1. It is rasterised by
  supersampling (2-4 x 2-4 samples a pixel) at a random rotation and sub-pixel centre; the
  coverage is the alpha used to paint one flat colour, and the mask is coverage >= 0.5.
* Objects are placed largest-first (so drawing order is mostly big at the bottom) at random
  positions, fully inside the image. A position is rejected when it would hide more than 20 % of
  an earlier object's mask, when more than 4 % of the pixels under it are within RGB distance 85
  of its own colour (no contrast), or when it comes within 3-8 px (more for bigger objects) of an
  earlier object of the same colour name or a similar colour (they would merge). About half the
  scenes allow no overlap at all (any two objects keep that gap). Objects that find no position
  in 40 tries are dropped.
* Afterwards, optionally: Gaussian noise, a small brightness change, a slight blur, JPEG.
* `point` is a visible pixel (eroded away from the visible region's edges where possible) nearest
  the visible region's centroid; `box` is the full mask's exact pixel box; matches are sorted by
  the band int(8 * box centre y) and then by box centre x.
"""

from __future__ import annotations

import colorsys
import io
import math

import numpy as np
from PIL import Image, ImageFilter

from engine.training.scenes import Query, Scene, SceneObject

__all__ = ["fourth_batch", "VOCAB_SHAPES", "VOCAB_COLOURS", "OTHER_SHAPES", "OTHER_COLOURS",
           "reading_order"]

VOCAB_SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
VOCAB_COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
OTHER_SHAPES = ("pentagon", "octagon", "oval", "rectangle", "heart", "arrow", "moon", "lshape",
                "trapezoid", "parallelogram")
OTHER_COLOURS = ("pink", "cyan", "brown", "grey", "teal", "beige")

# Rotation symmetry period in degrees (0: any rotation is the same pose).
_PERIOD = {"circle": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60,
           "diamond": 180, "pentagon": 72, "octagon": 45, "oval": 180, "rectangle": 180,
           "heart": 360, "arrow": 360, "moon": 360, "lshape": 360, "trapezoid": 360,
           "parallelogram": 180}

# Smallest circumscribed diameter in pixels at which a person tells the shape apart.
_MIN_PX = {"circle": 10, "square": 10, "triangle": 12, "diamond": 12, "cross": 12,
           "hexagon": 16, "star": 16}
_MIN_PX_OTHER = 20
_MIN_PX.update({s: _MIN_PX_OTHER for s in OTHER_SHAPES})
_MIN_PX.update({"pentagon": 24, "octagon": 24, "oval": 18})

# HSV ranges (hue degrees, saturation, value) per colour name; one flat shade an object.
_HSV = {
    "red": ((-6, 6), (0.78, 1.0), (0.72, 1.0)),
    "orange": ((27, 37), (0.88, 1.0), (0.93, 1.0)),
    "yellow": ((51, 60), (0.72, 1.0), (0.92, 1.0)),
    "green": ((100, 138), (0.6, 1.0), (0.45, 0.88)),
    "blue": ((212, 234), (0.7, 1.0), (0.5, 1.0)),
    "purple": ((268, 288), (0.55, 0.88), (0.45, 0.82)),
    "pink": ((330, 350), (0.25, 0.45), (0.95, 1.0)),
    "cyan": ((178, 188), (0.6, 0.9), (0.85, 1.0)),
    "brown": ((18, 32), (0.55, 0.8), (0.3, 0.48)),
    "teal": ((172, 182), (0.7, 0.95), (0.42, 0.58)),
    "beige": ((30, 42), (0.22, 0.35), (0.78, 0.9)),
}

# Near misses for an empty query.
_SHAPE_LOOKALIKE = {"circle": ("oval", "octagon", "moon"),
                    "square": ("rectangle", "trapezoid", "parallelogram", "diamond"),
                    "triangle": ("trapezoid", "arrow", "pentagon"),
                    "star": ("pentagon", "heart", "cross"),
                    "cross": ("lshape", "arrow", "star"),
                    "hexagon": ("pentagon", "octagon", "circle"),
                    "diamond": ("square", "parallelogram", "trapezoid")}
_COLOUR_LOOKALIKE = {"red": ("orange", "pink", "brown"), "orange": ("red", "yellow", "brown"),
                     "yellow": ("orange", "beige"), "green": ("teal", "cyan", "yellow"),
                     "blue": ("cyan", "teal", "purple"), "purple": ("pink", "blue"),
                     "white": ("beige", "grey", "pink"), "black": ("grey", "brown")}

_BACKGROUNDS = ("plain", "gradient", "paper", "photo", "wood", "fabric", "bricks", "confetti",
                "chalkboard")
_BG_P = np.array([0.16, 0.12, 0.14, 0.14, 0.1, 0.1, 0.08, 0.08, 0.08])

_CONTRAST = 85.0        # RGB distance under which two colours don't stand apart
_SIMILAR = 90.0         # RGB distance under which touching objects would merge
_MAX_HIDDEN = 0.2       # of an object's mask that later objects may cover
_TRIES = 40


# ---------------------------------------------------------------------------- colours

def _hsv_rgb(h: float, s: float, v: float) -> np.ndarray:
    r, g, b = colorsys.hsv_to_rgb((h % 360.0) / 360.0, min(max(s, 0.0), 1.0),
                                  min(max(v, 0.0), 1.0))
    return np.array([r, g, b], np.float32) * 255.0


def _shade(rng: np.random.Generator, name: str) -> tuple[int, int, int]:
    if name == "white":
        base = rng.uniform(243, 255)
        rgb = base - rng.uniform(0, 5, 3)
    elif name == "black":
        base = rng.uniform(0, 32)
        rgb = base + rng.uniform(0, 8, 3)
    elif name == "grey":
        base = rng.uniform(110, 165)
        rgb = base + rng.uniform(-4, 4, 3)
    else:
        (h0, h1), (s0, s1), (v0, v1) = _HSV[name]
        rgb = _hsv_rgb(rng.uniform(h0, h1), rng.uniform(s0, s1), rng.uniform(v0, v1))
    return tuple(int(round(c)) for c in np.clip(rgb, 0, 255))


def _muted(rng: np.random.Generator, v=(0.2, 0.95), smax=0.18) -> np.ndarray:
    return _hsv_rgb(rng.uniform(0, 360), rng.uniform(0, smax), rng.uniform(*v))


# ---------------------------------------------------------------------------- backgrounds

def _smooth(rng: np.random.Generator, H: int, W: int, cells: float) -> np.ndarray:
    """Zero-mean unit-std random field with about `cells` blobs along the long side."""
    ch = max(2, int(round(cells * H / max(H, W))) + 1)
    cw = max(2, int(round(cells * W / max(H, W))) + 1)
    small = rng.standard_normal((ch, cw)).astype(np.float32)
    f = np.asarray(Image.fromarray(small, "F").resize((W, H), Image.BICUBIC), np.float32)
    f = f - f.mean()
    return f / (f.std() + 1e-6)


def _grid(H: int, W: int):
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    return yy, xx


def _lighting(rng, H, W, amp) -> np.ndarray:
    yy, xx = _grid(H, W)
    a = rng.uniform(0, 2 * math.pi)
    t = (xx * math.cos(a) + yy * math.sin(a)) / max(H, W)
    t = t - t.mean()
    return (1.0 + amp * t)[..., None]


def _bg_plain(rng, H, W):
    c = _muted(rng, v=rng.choice([(0.8, 0.97), (0.3, 0.7), (0.12, 0.3)]))
    img = np.broadcast_to(c, (H, W, 3)).astype(np.float32)
    return img * _lighting(rng, H, W, rng.uniform(0, 0.12))


def _bg_gradient(rng, H, W):
    c0 = _muted(rng, smax=0.22)
    c1 = _muted(rng, smax=0.22)
    yy, xx = _grid(H, W)
    if rng.random() < 0.6:
        a = rng.uniform(0, 2 * math.pi)
        t = xx * math.cos(a) + yy * math.sin(a)
    else:
        cx, cy = rng.uniform(0, W), rng.uniform(0, H)
        t = np.hypot(xx - cx, yy - cy)
    t = (t - t.min()) / (np.ptp(t) + 1e-6)
    return c0 * (1 - t[..., None]) + c1 * t[..., None]


def _bg_paper(rng, H, W):
    c = _hsv_rgb(rng.uniform(30, 60), rng.uniform(0.02, 0.12), rng.uniform(0.88, 0.98))
    img = np.broadcast_to(c, (H, W, 3)).astype(np.float32).copy()
    img += (_smooth(rng, H, W, rng.uniform(3, 8)) * rng.uniform(2, 5))[..., None]
    img += (_smooth(rng, H, W, max(H, W) / 3) * rng.uniform(1, 3))[..., None]
    if rng.random() < 0.5:
        step = int(rng.integers(18, 33))
        start = int(rng.integers(0, step))
        line = np.array([170, 185, 210], np.float32)
        alpha = rng.uniform(0.2, 0.4)
        img[start::step] = img[start::step] * (1 - alpha) + line * alpha
    img += rng.normal(0, rng.uniform(1, 3), (H, W, 1)).astype(np.float32)
    return img


def _bg_photo(rng, H, W):
    k = int(rng.integers(2, 4))
    cols = [_muted(rng, v=(0.25, 0.9), smax=0.25) for _ in range(k)]
    beta = rng.uniform(1.5, 4)
    ws = [np.exp(beta * _smooth(rng, H, W, rng.uniform(1.5, 5))) for _ in range(k)]
    tot = sum(ws)
    img = sum(w[..., None] / tot[..., None] * c for w, c in zip(ws, cols))
    img = img * _lighting(rng, H, W, rng.uniform(0.05, 0.3))
    img += (_smooth(rng, H, W, max(H, W) / 4) * rng.uniform(1, 4))[..., None]
    return img


def _bg_wood(rng, H, W):
    hue = rng.uniform(18, 36)
    s = rng.uniform(0.28, 0.5)
    v = rng.uniform(0.5, 0.85)
    light = _hsv_rgb(hue, s, v)
    dark = _hsv_rgb(hue + rng.uniform(-4, 2), min(0.65, s + 0.1), v * rng.uniform(0.6, 0.8))
    yy, xx = _grid(H, W)
    a = rng.uniform(0, math.pi) if rng.random() < 0.4 else rng.choice([0.0, math.pi / 2])
    a += rng.uniform(-0.05, 0.05)
    vv = -xx * math.sin(a) + yy * math.cos(a)
    period = rng.uniform(8, 26)
    warp = _smooth(rng, H, W, rng.uniform(1, 2.5)) * period * rng.uniform(0.25, 0.7)
    warp += _smooth(rng, H, W, rng.uniform(4, 8)) * period * 0.12
    t = (0.5 + 0.5 * np.sin(2 * math.pi * (vv + warp) / period)) ** rng.uniform(1.5, 3.0)
    streak = 0.5 + 0.5 * np.sin(2 * math.pi * (vv + warp) / (period / rng.uniform(3, 6)))
    f = 0.75 * t + 0.2 * streak + 0.1 * _smooth(rng, H, W, rng.uniform(6, 14))
    f = np.clip(f, 0, 1)[..., None]
    img = light * (1 - f) + dark * f
    if rng.random() < 0.6:  # plank seams along the grain
        plank = rng.uniform(60, 160)
        seam = (np.mod(vv + rng.uniform(0, plank), plank) < 1.5)[..., None]
        img = np.where(seam, img * 0.7, img)
    return img


def _bg_fabric(rng, H, W):
    c = _muted(rng, v=(0.3, 0.9), smax=0.2)
    p = int(rng.integers(3, 7))
    yy, xx = _grid(H, W)
    over = ((xx // p + yy // p) % 2).astype(bool)
    sh_h = 0.5 + 0.5 * np.cos(2 * math.pi * (np.mod(yy, p) + 0.5) / p)
    sh_v = 0.5 + 0.5 * np.cos(2 * math.pi * (np.mod(xx, p) + 0.5) / p)
    val = np.where(over, sh_h, sh_v) - 0.5
    amp = rng.uniform(0.1, 0.25)
    img = c * (1 + amp * val)[..., None]
    img = img * (1 + 0.04 * _smooth(rng, H, W, rng.uniform(2, 6)))[..., None]
    return img + rng.normal(0, 2, (H, W, 1)).astype(np.float32)


def _bg_bricks(rng, H, W):
    c = _muted(rng, v=(0.35, 0.9), smax=0.18)
    bh = int(rng.integers(14, 36))
    bw = bh * rng.uniform(1.8, 3.2)
    m = int(rng.integers(1, 4))
    yy, xx = _grid(H, W)
    row = (yy // bh).astype(np.int64)
    x_off = xx + (row % 2) * bw / 2
    col = np.floor(x_off / bw).astype(np.int64)
    tints = rng.normal(0, 0.04, (int(row.max()) + 1, int(col.max()) + 2)).astype(np.float32)
    img = c * (1 + tints[row, col])[..., None]
    mortar = (np.mod(yy, bh) < m) | (np.mod(x_off, bw) < m)
    mortar_c = c * rng.choice([0.8, 1.15]) + rng.uniform(-5, 5)
    img = np.where(mortar[..., None], mortar_c, img)
    img += (_smooth(rng, H, W, max(H, W) / 3) * 2)[..., None]
    return img


def _bg_confetti(rng, H, W):
    img = (_bg_plain(rng, H, W) if rng.random() < 0.5 else _bg_gradient(rng, H, W)).copy()
    n = int(H * W * rng.uniform(0.001, 0.004))
    names = ("pink", "cyan", "brown", "grey", "teal", "beige")
    palette = [np.array(_shade(rng, str(rng.choice(names))), np.float32)
               for _ in range(int(rng.integers(2, 5)))]
    ys = rng.integers(0, H - 2, n)
    xs = rng.integers(0, W - 2, n)
    kinds = rng.integers(0, 4, n)
    cols = rng.integers(0, len(palette), n)
    for y, x, k, ci in zip(ys, xs, kinds, cols):
        c = palette[ci]
        if k == 0:
            img[y, x] = c
        elif k == 1:
            img[y:y + 2, x:x + 2] = c
        elif k == 2:
            img[y, x:x + 3] = c
        else:
            img[y:y + 3, x] = c
    return img


def _bg_chalkboard(rng, H, W):
    c = _hsv_rgb(rng.uniform(90, 220), rng.uniform(0.05, 0.22), rng.uniform(0.14, 0.3))
    img = np.broadcast_to(c, (H, W, 3)).astype(np.float32).copy()
    dust = np.clip(_smooth(rng, H, W, rng.uniform(2, 6)), 0, None) * rng.uniform(4, 12)
    img += dust[..., None]
    return img + rng.normal(0, 1.5, (H, W, 1)).astype(np.float32)


_BG_FN = {"plain": _bg_plain, "gradient": _bg_gradient, "paper": _bg_paper, "photo": _bg_photo,
          "wood": _bg_wood, "fabric": _bg_fabric, "bricks": _bg_bricks,
          "confetti": _bg_confetti, "chalkboard": _bg_chalkboard}


# ---------------------------------------------------------------------------- shapes

def _ngon(n: int, start_deg: float, r: float = 1.0) -> np.ndarray:
    a = np.deg2rad(start_deg + 360.0 * np.arange(n) / n)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


def _rect(x0, y0, x1, y1) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)


def _geometry(rng: np.random.Generator, shape: str):
    """(added parts, subtracted parts) in a y-up frame, scaled to circumscribed radius 1.

    A part is ("poly", convex vertices) or ("ell", cx, cy, rx, ry). Upright poses: square and
    cross axis-aligned, triangle / star / hexagon / pentagon with a vertex up, diamond with its
    long diagonal vertical, arrow pointing up.
    """
    add, sub = [], []
    if shape in ("circle",):
        add.append(("ell", 0.0, 0.0, 1.0, 1.0))
    elif shape == "oval":
        add.append(("ell", 0.0, 0.0, 1.0, rng.uniform(0.45, 0.68)))
    elif shape == "square":
        add.append(("poly", _rect(-1, -1, 1, 1)))
    elif shape == "rectangle":
        h = rng.uniform(0.35, 0.6)
        add.append(("poly", _rect(-1, -h, 1, h)))
    elif shape == "triangle":
        add.append(("poly", _ngon(3, 90)))
    elif shape == "hexagon":
        add.append(("poly", _ngon(6, 90)))
    elif shape == "pentagon":
        add.append(("poly", _ngon(5, 90)))
    elif shape == "octagon":
        add.append(("poly", _ngon(8, 22.5)))
    elif shape == "diamond":
        r = rng.uniform(0.52, 0.72)
        add.append(("poly", np.array([[0, -1], [r, 0], [0, 1], [-r, 0]], np.float64)))
    elif shape == "star":
        ri = rng.uniform(0.38, 0.47)
        outer = _ngon(5, 90)
        inner = _ngon(5, 90 + 36, ri)
        add.append(("poly", inner))
        for k in range(5):
            add.append(("poly", np.stack([inner[(k - 1) % 5], outer[k], inner[k]])))
    elif shape == "cross":
        w = rng.uniform(0.2, 0.3)
        add.append(("poly", _rect(-1, -w, 1, w)))
        add.append(("poly", _rect(-w, -1, w, 1)))
    elif shape == "heart":
        add.append(("ell", -0.5, 0.3, 0.52, 0.52))
        add.append(("ell", 0.5, 0.3, 0.52, 0.52))
        add.append(("poly", np.array([[-1.0, 0.22], [0, -1.05], [1.0, 0.22], [0, 0.55]])))
    elif shape == "arrow":
        w = rng.uniform(0.13, 0.2)
        h = rng.uniform(0.42, 0.55)
        neck = rng.uniform(0.1, 0.3)
        add.append(("poly", _rect(-w, -1, w, neck + 0.01)))
        add.append(("poly", np.array([[-h, neck], [h, neck], [0, 1.0]])))
    elif shape == "lshape":
        t = rng.uniform(0.35, 0.5)
        add.append(("poly", _rect(-0.6, -0.8, -0.6 + t, 0.8)))
        add.append(("poly", _rect(-0.6, -0.8, 0.6, -0.8 + t)))
    elif shape == "moon":
        add.append(("ell", 0.0, 0.0, 1.0, 1.0))
        r2 = rng.uniform(0.8, 0.9)
        sub.append(("ell", rng.uniform(0.38, 0.52), rng.uniform(0.0, 0.15), r2, r2))
    elif shape == "trapezoid":
        top = rng.uniform(0.4, 0.6)
        hh = rng.uniform(0.5, 0.7)
        add.append(("poly", np.array([[-1, -hh], [1, -hh], [top, hh], [-top, hh]])))
    elif shape == "parallelogram":
        h = rng.uniform(0.35, 0.45)
        s = rng.uniform(0.35, 0.5)
        add.append(("poly", np.array([[-0.75 - s, -h], [0.75 - s, -h], [0.75 + s, h],
                                      [-0.75 + s, h]])))
    else:
        raise ValueError(shape)
    # Centre on the added parts' bounding box and scale so the farthest point is at radius 1.
    pts = []
    for p in add:
        if p[0] == "poly":
            pts.append(p[1])
        else:
            a = np.linspace(0, 2 * math.pi, 73)
            pts.append(np.stack([p[1] + p[3] * np.cos(a), p[2] + p[4] * np.sin(a)], 1))
    pts = np.concatenate(pts)
    centre = (pts.min(0) + pts.max(0)) / 2 if shape not in ("triangle", "star", "pentagon") \
        else np.zeros(2)
    scale = 1.0 / np.max(np.linalg.norm(pts - centre, axis=1))

    def tf(p):
        if p[0] == "poly":
            return ("poly", (p[1] - centre) * scale)
        return ("ell", (p[1] - centre[0]) * scale, (p[2] - centre[1]) * scale, p[3] * scale,
                p[4] * scale)
    return [tf(p) for p in add], [tf(p) for p in sub]


def _inside(part, lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    if part[0] == "ell":
        _, cx, cy, rx, ry = part
        return ((lx - cx) / rx) ** 2 + ((ly - cy) / ry) ** 2 <= 1.0
    v = part[1]
    area = np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1])
    if area < 0:
        v = v[::-1]
    ok = None
    for i in range(len(v)):
        x0, y0 = v[i]
        x1, y1 = v[(i + 1) % len(v)]
        t = (x1 - x0) * (ly - y0) - (y1 - y0) * (lx - x0) >= 0
        ok = t if ok is None else ok & t
    return ok


def _raster(add, sub, R: float, theta: float, fx: float, fy: float):
    """Coverage of the shape on the pixel grid around its centre pixel.

    Returns (cov, off): cov[i, j] is the coverage of pixel (centre row + off + i,
    centre col + off + j); the centre lies at (centre col + fx, centre row + fy).
    """
    K = 4 if R < 14 else (3 if R < 45 else 2)
    n = int(math.ceil(R)) + 1
    idx = np.arange(-n, n + 1, dtype=np.float32)
    s = (idx[:, None] + ((np.arange(K, dtype=np.float32) + 0.5) / K)[None, :]).ravel()
    dx = (s - fx)[None, :]
    wy = -(s - fy)[:, None]
    c, si = math.cos(theta), math.sin(theta)
    lx = (dx * c + wy * si) / R
    ly = (-dx * si + wy * c) / R
    inside = np.zeros(lx.shape, bool)
    for p in add:
        inside |= _inside(p, lx, ly)
    for p in sub:
        inside &= ~_inside(p, lx, ly)
    N = 2 * n + 1
    cov = inside.reshape(N, K, N, K).mean(axis=(1, 3), dtype=np.float32)
    return cov, -n


def _dilate(m: np.ndarray, g: int) -> np.ndarray:
    h, w = m.shape
    p = np.zeros((h + 2 * g, w + 2 * g), bool)
    p[g:g + h, g:g + w] = m
    q = p.copy()
    for d in range(1, g + 1):
        q[d:] |= p[:-d]
        q[:-d] |= p[d:]
    r = q.copy()
    for d in range(1, g + 1):
        r[:, d:] |= q[:, :-d]
        r[:, :-d] |= q[:, d:]
    return r


def _erode(m: np.ndarray) -> np.ndarray:
    p = np.pad(m, 1)
    out = m.copy()
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            out &= p[1 + dy:1 + dy + m.shape[0], 1 + dx:1 + dx + m.shape[1]]
    return out


# ---------------------------------------------------------------------------- queries & plans

def _matches(qtype: str, qcol: str, qshape: str, shape: str, colour: str) -> bool:
    if qtype == "cs":
        return shape == qshape and colour == qcol
    if qtype == "s":
        return shape == qshape and colour in VOCAB_COLOURS
    return colour == qcol and shape in VOCAB_SHAPES


def _allowed(qtype, qcol, qshape, shape, colour) -> bool:
    if _matches(qtype, qcol, qshape, shape, colour):
        return False
    if qtype == "s" and shape == qshape and colour not in VOCAB_COLOURS:
        return False
    if qtype == "c" and colour == qcol and shape not in VOCAB_SHAPES:
        return False
    return True


def _random_kind(rng) -> tuple[str, str]:
    u = rng.random()
    if u < 0.6:
        return str(rng.choice(VOCAB_SHAPES)), str(rng.choice(VOCAB_COLOURS))
    if u < 0.8:
        col = rng.choice(VOCAB_COLOURS) if rng.random() < 0.6 else rng.choice(OTHER_COLOURS)
        return str(rng.choice(OTHER_SHAPES)), str(col)
    return str(rng.choice(VOCAB_SHAPES)), str(rng.choice(OTHER_COLOURS))


def _near_miss(rng, qtype, qcol, qshape) -> tuple[str, str, float | None]:
    """A kind that resembles the query without matching it (angle override or None)."""
    for _ in range(50):
        angle = None
        if qtype == "cs":
            u = rng.random()
            if u < 0.4:
                shape, col = qshape, str(rng.choice(VOCAB_COLOURS + OTHER_COLOURS))
            elif u < 0.75:
                shape, col = str(rng.choice(VOCAB_SHAPES)), qcol
            else:
                shape, col = str(rng.choice(_SHAPE_LOOKALIKE[qshape])), qcol
        elif qtype == "s":
            shape = str(rng.choice(_SHAPE_LOOKALIKE[qshape]))
            col = str(rng.choice(VOCAB_COLOURS))
        else:
            shape = str(rng.choice(VOCAB_SHAPES))
            col = str(rng.choice(_COLOUR_LOOKALIKE[qcol]))
        if qtype in ("s", "cs") and qshape == "diamond" and shape == "square":
            angle = 45.0 + rng.uniform(-2, 2)
        if _allowed(qtype, qcol, qshape, shape, col):
            return shape, col, angle
    shape, col = _random_kind(rng)
    return shape, col, None


def _n_objects(rng, empty: bool) -> int:
    if empty and rng.random() < 0.12:
        return 0
    u = rng.random()
    if u < 0.33:
        return int(rng.integers(1, 5))
    if u < 0.65:
        return int(rng.integers(5, 11))
    return int(rng.integers(11, 26))


def _plan(rng, qtype, qcol, qshape, empty, n):
    """List of dicts: shape, colour, role ('target' / 'other'), angle override, size hint."""
    items = []
    if n == 0:
        return items
    if not empty:
        copies = n >= 5 and rng.random() < 0.3
        k = int(rng.integers(4, min(n, 14) + 1)) if copies else \
            min(n, int(rng.choice([1, 1, 1, 2, 2, 3, 3, 4, 5, 6])))
        fix_col = str(rng.choice(VOCAB_COLOURS))
        fix_shape = str(rng.choice(VOCAB_SHAPES))
        same = copies or rng.random() < 0.3
        for _ in range(k):
            if qtype == "cs":
                shape, col = qshape, qcol
            elif qtype == "s":
                shape = qshape
                col = fix_col if same else str(rng.choice(VOCAB_COLOURS))
            else:
                col = qcol
                shape = fix_shape if same else str(rng.choice(VOCAB_SHAPES))
            items.append(dict(shape=shape, colour=col, role="target", angle=None,
                              group=0 if copies else None))
    rest = n - len(items)
    if rest > 0 and rng.random() < (0.7 if empty else 0.35):
        m = min(rest, int(rng.integers(1, 4)))
        if empty and n >= 6 and rng.random() < 0.3:
            m = min(rest, int(rng.integers(3, 9)))   # many copies of the near miss
            shape, col, angle = _near_miss(rng, qtype, qcol, qshape)
            items += [dict(shape=shape, colour=col, role="other", angle=angle, group=1)
                      for _ in range(m)]
        else:
            for _ in range(m):
                shape, col, angle = _near_miss(rng, qtype, qcol, qshape)
                items.append(dict(shape=shape, colour=col, role="other", angle=angle, group=None))
    rest = n - len(items)
    if rest >= 6 and rng.random() < 0.2:   # many copies of one filler kind
        while True:
            shape, col = _random_kind(rng)
            if _allowed(qtype, qcol, qshape, shape, col):
                break
        m = int(rng.integers(4, rest + 1))
        items += [dict(shape=shape, colour=col, role="other", angle=None, group=2)
                  for _ in range(m)]
    while len(items) < n:
        shape, col = _random_kind(rng)
        if _allowed(qtype, qcol, qshape, shape, col):
            items.append(dict(shape=shape, colour=col, role="other", angle=None, group=None))
    return items


def reading_order(objects) -> list:
    """Sort by 1/8-height band of the box centre, then by box centre x."""
    def key(o):
        cy = (o.box[1] + o.box[3]) / 2
        cx = (o.box[0] + o.box[2]) / 2
        return (min(7, int(cy * 8)), cx)
    return sorted(objects, key=key)


# ---------------------------------------------------------------------------- one scene

def _image_size(rng, n: int) -> tuple[int, int]:
    lo = 260 if n >= 11 else 160
    ratio = math.exp(rng.uniform(0, math.log(2.5))) if rng.random() < 0.7 else 1.0
    long_side = int(rng.integers(max(lo, 200), 721))
    short = max(lo, min(long_side, int(round(long_side / ratio))))
    return (long_side, short) if rng.random() < 0.5 else (short, long_side)


def _contrast_frac(pix: np.ndarray, rgb: np.ndarray) -> float:
    d2 = ((pix - rgb) ** 2).sum(-1)
    return float((d2 < _CONTRAST ** 2).mean()) if d2.size else 0.0


def _scene(rng: np.random.Generator, qtype: str, empty: bool):
    qcol = str(rng.choice(VOCAB_COLOURS))
    qshape = str(rng.choice(VOCAB_SHAPES))
    text = {"cs": f"{qcol} {qshape}", "s": qshape, "c": qcol}[qtype]
    n = _n_objects(rng, empty)
    items = _plan(rng, qtype, qcol, qshape, empty, n)

    W, H = _image_size(rng, n)
    short = min(W, H)
    bg_kind = str(rng.choice(_BACKGROUNDS, p=_BG_P / _BG_P.sum()))
    canvas = np.clip(_BG_FN[bg_kind](rng, H, W), 0, 255).astype(np.float32)
    canvas = np.ascontiguousarray(canvas)
    sample = canvas.reshape(-1, 3)[rng.integers(0, H * W, 1500)]

    # Shades: resample until the colour stands out from most of the background.
    group_rgb = {}
    for it in items:
        rgb = None
        g = it["group"]
        if g is not None and g in group_rgb and rng.random() < 0.7:
            rgb = group_rgb[g]
        else:
            for _ in range(8):
                cand = _shade(rng, it["colour"])
                if _contrast_frac(sample, np.array(cand, np.float32)) < 0.03:
                    rgb = cand
                    break
            if g is not None and rgb is not None:
                group_rgb.setdefault(g, rgb)
        it["rgb"] = rgb
    if any(it["rgb"] is None and it["role"] == "target" for it in items):
        return None                                 # this background hides the targets: redraw
    items = [it for it in items if it["rgb"] is not None]

    # Sizes (fraction of the short side) and rotations.
    n_eff = max(1, len(items))
    smax = min(0.40, 0.95 / math.sqrt(n_eff + 1))
    upright_p = float(rng.choice([0.0, 0.3, 0.8]))
    no_overlap = bool(rng.random() < 0.5)
    group_size = {}
    min_extra = 4 if bg_kind == "confetti" else 0
    for it in items:
        smin = max(0.03, (_MIN_PX[it["shape"]] + min_extra) / short)
        hi = max(smax, smin * 1.3)
        g = it["group"]
        if g is not None and g in group_size:
            size = group_size[g] * rng.uniform(0.85, 1.15)
        else:
            size = math.exp(rng.uniform(math.log(smin), math.log(hi)))
            if g is not None:
                group_size[g] = size
        it["size"] = float(min(max(size, smin), 0.40))
        if it["angle"] is not None:
            it["theta"] = it["angle"]
        elif rng.random() < upright_p:
            it["theta"] = rng.uniform(-3, 3)
        else:
            it["theta"] = rng.uniform(0, 360)
    jitter = np.exp(rng.normal(0, 0.4, len(items)))
    order = sorted(range(len(items)), key=lambda i: -items[i]["size"] * jitter[i])

    labels = np.full((H, W), -1, np.int32)
    placed = []   # dicts with geometry
    for i in order:
        it = items[i]
        R = it["size"] * short / 2
        add, sub = _geometry(rng, it["shape"])
        fx, fy = rng.uniform(0, 1, 2)
        cov, off = _raster(add, sub, R, math.radians(it["theta"]), fx, fy)
        nz_r = np.flatnonzero(cov.any(1))
        nz_c = np.flatnonzero(cov.any(0))
        if nz_r.size == 0:
            continue
        cov = cov[nz_r[0]:nz_r[-1] + 1, nz_c[0]:nz_c[-1] + 1]
        c_r0, c_c0 = off + nz_r[0], off + nz_c[0]          # coverage origin rel. centre pixel
        full = cov >= 0.5
        mr = np.flatnonzero(full.any(1))
        mc = np.flatnonzero(full.any(0))
        if mr.size == 0:
            continue
        mask = full[mr[0]:mr[-1] + 1, mc[0]:mc[-1] + 1]
        m_r0, m_c0 = c_r0 + mr[0], c_c0 + mc[0]            # mask origin rel. centre pixel
        mh, mw = mask.shape
        ch, cw = cov.shape
        lo_x, hi_x = -c_c0, W - (c_c0 + cw)
        lo_y, hi_y = -c_r0, H - (c_r0 + ch)
        if hi_x < lo_x or hi_y < lo_y:
            continue
        rgb = np.array(it["rgb"], np.float32)
        gap = int(min(8, max(3, round(0.08 * R) + 2)))
        dil = _dilate(mask, gap)
        area = int(mask.sum())
        sim = np.array([p["name"] == it["colour"] or
                        float(np.linalg.norm(p["rgbf"] - rgb)) < _SIMILAR for p in placed], bool)
        ok = False
        for _ in range(_TRIES):
            CX = int(rng.integers(lo_x, hi_x + 1))
            CY = int(rng.integers(lo_y, hi_y + 1))
            y0, x0 = CY + m_r0, CX + m_c0
            under = labels[y0:y0 + mh, x0:x0 + mw][mask]
            # neighbours within `gap` px
            dy0, dx0 = y0 - gap, x0 - gap
            sy0, sx0 = max(0, dy0), max(0, dx0)
            sy1, sx1 = min(H, dy0 + mh + 2 * gap), min(W, dx0 + mw + 2 * gap)
            near = labels[sy0:sy1, sx0:sx1][dil[sy0 - dy0:sy1 - dy0, sx0 - dx0:sx1 - dx0]]
            near = np.unique(near[near >= 0])
            if near.size and (no_overlap or sim[near].any()):
                continue
            hit = under[under >= 0]
            if hit.size:
                cnt = np.bincount(hit, minlength=len(placed))
                js = np.flatnonzero(cnt)
                if any(placed[j]["hidden"] + cnt[j] > _MAX_HIDDEN * placed[j]["area"] for j in js):
                    continue
            pix = canvas[y0:y0 + mh, x0:x0 + mw][mask]
            if _contrast_frac(pix, rgb) > 0.04:
                continue
            ok = True
            break
        if not ok:
            continue
        if hit.size:
            for j in js:
                placed[j]["hidden"] += int(cnt[j])
        idx = len(placed)
        lab = labels[y0:y0 + mh, x0:x0 + mw]
        lab[mask] = idx
        cy0, cx0 = CY + c_r0, CX + c_c0
        a = cov[..., None]
        reg = canvas[cy0:cy0 + ch, cx0:cx0 + cw]
        reg *= 1 - a
        reg += a * rgb
        period = _PERIOD[it["shape"]]
        if period == 0:
            tilt = 0.0
        else:
            t = it["theta"] % period
            tilt = min(t, period - t)
        placed.append(dict(name=it["colour"], shape=it["shape"], rgbf=rgb, rgb=it["rgb"],
                           mask=mask, x0=x0, y0=y0, area=area, hidden=0, tilt=float(tilt),
                           size=float(2 * R / short)))

    objects = []
    for idx, p in enumerate(placed):
        mh, mw = p["mask"].shape
        vis = p["mask"] & (labels[p["y0"]:p["y0"] + mh, p["x0"]:p["x0"] + mw] == idx)
        best = vis
        for _ in range(2):
            e = _erode(best)
            if not e.any():
                break
            best = e
        rr, cc = np.nonzero(best)
        vr, vc = np.nonzero(vis)
        k = int(np.argmin((rr - vr.mean()) ** 2 + (cc - vc.mean()) ** 2))
        r, c = int(rr[k]), int(cc[k])
        objects.append(SceneObject(
            shape=p["shape"], colour=p["name"],
            box=(p["x0"] / W, p["y0"] / H, (p["x0"] + mw) / W, (p["y0"] + mh) / H),
            point=((p["x0"] + c + 0.5) / W, (p["y0"] + r + 0.5) / H),
            rgb=tuple(int(v) for v in p["rgb"]), tilt=round(p["tilt"], 3),
            size=round(p["size"], 5), mask=p["mask"].copy()))

    matches = [o for o in objects if _matches(qtype, qcol, qshape, o.shape, o.colour)]
    if not empty and not matches:
        return None
    matches = reading_order(matches)

    # Camera-ish finishing touches.
    img = canvas
    if rng.random() < 0.35:
        img = img + rng.normal(0, rng.uniform(1.5, 4.5), img.shape[:2] + (1,)).astype(np.float32)
    if rng.random() < 0.3:
        img = img * rng.uniform(0.95, 1.05)
    pil = Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8), "RGB")
    if rng.random() < 0.3:
        pil = pil.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.35, 0.9))))
    if rng.random() < 0.4:
        buf = io.BytesIO()
        pil.save(buf, "JPEG", quality=int(rng.integers(55, 93)))
        buf.seek(0)
        pil = Image.open(buf).convert("RGB")
    return Scene(image=pil, objects=tuple(objects), background=bg_kind), \
        Query(text=text, matches=tuple(matches))


def fourth_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    """`n` (scene, query) pairs, the same for the same seed."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        qtype = str(rng.choice(["cs", "s", "c"], p=[0.45, 0.40, 0.15]))
        empty = bool(rng.random() < 0.22)
        r = None
        while r is None:          # a redraw keeps the query form and emptiness
            r = _scene(rng, qtype, empty)
        out.append(r)
    return out


if __name__ == "__main__":
    import collections
    import time

    t = time.perf_counter()
    batch = fourth_batch(4444, 500)
    dt = time.perf_counter() - t
    print(f"500 scenes in {dt:.1f} s")
    print("backgrounds:", dict(collections.Counter(s.background for s, _ in batch).most_common()))
    counts = [len(s.objects) for s, _ in batch]
    bins = collections.Counter("0" if c == 0 else "1-4" if c < 5 else "5-10" if c < 11
                               else "11-25" for c in counts)
    print("objects per scene:", {k: bins[k] for k in ("0", "1-4", "5-10", "11-25")},
          f"mean {np.mean(counts):.1f}, max {max(counts)}")
    forms = collections.Counter(("colour shape" if " " in q.text else
                                 "shape" if q.text in VOCAB_SHAPES else "colour") for _, q in batch)
    print("query forms:", dict(forms), "empty:", sum(not q.matches for _, q in batch))
