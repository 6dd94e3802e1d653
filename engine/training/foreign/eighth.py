"""Eighth scene generator: synthetic scenes written blind in session 51 as an evaluation set.

Its figures vetoed session 52's candidates, so they have been read; since session 53 it is also a
training source (`engine.train --foreign-from`, engine/training/foreign/__init__.py), so they are no
longer blind.

It draws none of the project's other generators' code or numbers. What it draws:

* Canvas: each side 96-640 px, aspect up to 3:1 (square about a third of the time).
* Background, one of fifteen kinds: flat colour, linear gradient, radial glow, paper (mottled,
  with short fibres), fabric weave, smooth clouds (multi-octave value noise), bokeh (big, very soft
  light blobs), wood grain, brick wall (2:1 bricks, mortar lines), graph paper (thin lines),
  soft stripes, confetti (specks of at most ~3 px), horizon (two regions split by a soft wavy line),
  terrazzo (tiny angular flecks) and sand (coarse per-pixel noise).
* 0-25 objects (about 5 % empty, 55 % with 1-6, 18 % with 7-10, 22 % with 11-25), often with
  several copies of one kind. Vocabulary shapes (circle, square, triangle - equilateral or moderately
  isosceles -, 5-pointed star, plus-sign cross, regular hexagon, rhombus diamond with short/long
  diagonal 0.52-0.73) in vocabulary colours, plus distractors: other shapes (pentagon, octagon,
  ellipse, rectangle, heart, arrow, ring, crescent, trapezoid, semicircle) and/or other colours
  (pink, cyan, brown, gray), named truthfully. Circumscribed diameter 2.5-40 % of the short side
  (log-uniform, smaller in crowded scenes), never below 7 px (more for fiddly shapes); any rotation,
  with some exact "upright" or "vertex-up" poses. Anti-aliased by 3-4x supersampling; objects never
  overlap (2+ px apart), lie fully inside the image, and every colour shade is re-drawn until it
  differs clearly from the background under and around it (CIELAB: 10th-percentile dE >= 45 and
  |dL| >= 12).
* Fills: flat, gentle linear shading, darker rim, or fine grain; sometimes soft drop shadows.
* Effects at random: down-and-up rescaling, Gaussian blur, brightness/contrast, slight colour cast,
  pixel noise, JPEG re-encoding.
* One query per scene: ~45 % "colour shape", ~40 % "shape", ~15 % "colour"; ~20 % name nothing in
  the scene (often a near miss, e.g. "diamond" beside squares, "red" beside pink), the rest name a
  kind that is present. Query.matches is always `matches(text, scene.objects)`.

Pair i depends only on (seed, i). `python -m engine.training.foreign.eighth` prints a summary.
"""

import colorsys
import io
import math

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from engine.training.scenes import Query, Scene, SceneObject, matches

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
EXTRA_SHAPES = ("pentagon", "octagon", "ellipse", "rectangle", "heart", "arrow", "ring",
                "crescent", "trapezoid", "semicircle")
EXTRA_COLOURS = ("pink", "cyan", "brown", "gray")

# name -> (hue range in degrees or None for any hue, saturation range, value range), HSV.
SHADES = {
    "red": ((-6.0, 6.0), (0.80, 1.00), (0.70, 1.00)),
    "orange": ((22.0, 32.0), (0.85, 1.00), (0.92, 1.00)),
    "yellow": ((50.0, 58.0), (0.80, 1.00), (0.90, 1.00)),
    "green": ((105.0, 140.0), (0.65, 1.00), (0.45, 0.85)),
    "blue": ((215.0, 235.0), (0.70, 1.00), (0.60, 1.00)),
    "purple": ((266.0, 284.0), (0.55, 0.85), (0.45, 0.75)),
    "white": (None, (0.00, 0.05), (0.94, 1.00)),
    "black": (None, (0.00, 0.25), (0.00, 0.14)),
    "pink": ((335.0, 352.0), (0.22, 0.40), (0.96, 1.00)),
    "cyan": ((180.0, 190.0), (0.65, 1.00), (0.85, 1.00)),
    "brown": ((18.0, 30.0), (0.55, 0.80), (0.30, 0.48)),
    "gray": (None, (0.00, 0.04), (0.45, 0.62)),
}

# Smallest circumscribed diameter (px) at which each shape still reads as itself.
MIN_PX = {"circle": 7, "square": 8, "triangle": 9, "diamond": 10, "cross": 10, "hexagon": 14,
          "star": 12, "pentagon": 18, "octagon": 22, "ellipse": 10, "rectangle": 10, "heart": 14,
          "arrow": 14, "ring": 14, "crescent": 16, "trapezoid": 14, "semicircle": 12}

# Near misses for absent queries.
NEAR_SHAPE = {
    "square": ("diamond", "hexagon"), "diamond": ("square", "triangle"), "circle": ("hexagon",),
    "hexagon": ("circle",), "star": ("cross",), "cross": ("star",), "triangle": ("diamond",),
    "pentagon": ("hexagon", "circle"), "octagon": ("hexagon", "circle"), "ellipse": ("circle",),
    "rectangle": ("square", "diamond"), "trapezoid": ("triangle", "square"), "heart": ("star",),
    "arrow": ("triangle", "cross"), "ring": ("circle",), "crescent": ("circle",),
    "semicircle": ("circle", "triangle"),
}
NEAR_COLOUR = {
    "red": ("orange", "purple"), "orange": ("red", "yellow"), "yellow": ("orange", "green"),
    "green": ("blue", "yellow"), "blue": ("purple", "green"), "purple": ("blue", "red"),
    "white": ("yellow", "black"), "black": ("blue", "white"), "pink": ("red", "purple", "white"),
    "cyan": ("blue", "green"), "brown": ("orange", "red", "black"), "gray": ("white", "black"),
}

BACKGROUNDS = ("flat", "gradient", "radial", "paper", "fabric", "clouds", "bokeh", "wood",
               "bricks", "graph", "stripes", "confetti", "horizon", "terrazzo", "sand")

P_EMPTY = 0.13
FORMS = ("colour shape", "shape", "colour")
FORM_P = (0.45, 0.40, 0.15)


# ----------------------------------------------------------------------------------------------
# colours

def _hsv(h_deg: float, s: float, v: float) -> np.ndarray:
    r, g, b = colorsys.hsv_to_rgb((h_deg / 360.0) % 1.0, s, v)
    return np.array([r, g, b], np.float32) * 255.0


def _shade(rng, name: str) -> tuple[int, int, int]:
    hue, sat, val = SHADES[name]
    h = rng.uniform(*hue) if hue else rng.uniform(0.0, 360.0)
    c = _hsv(h, rng.uniform(*sat), rng.uniform(*val))
    return tuple(int(round(float(x))) for x in c)


_M = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]],
              np.float32)
_WHITE = np.array([0.9505, 1.0, 1.089], np.float32)


def _lab(rgb: np.ndarray) -> np.ndarray:
    c = np.asarray(rgb, np.float32) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    t = (lin @ _M.T) / _WHITE
    f = np.where(t > 0.008856, np.cbrt(t), 7.787 * t + 16.0 / 116.0)
    return np.stack([116.0 * f[..., 1] - 16.0, 500.0 * (f[..., 0] - f[..., 1]),
                     200.0 * (f[..., 1] - f[..., 2])], -1)


def _contrasts(bg_lab: np.ndarray, rgb) -> bool:
    o = _lab(np.array(rgb, np.float32))
    d = bg_lab - o
    de = np.sqrt((d * d).sum(-1))
    return bool(np.percentile(de, 10) >= 45.0 and np.percentile(np.abs(d[:, 0]), 10) >= 12.0)


def _bg_colour(rng) -> np.ndarray:
    s = rng.uniform(0.0, 0.35) if rng.random() < 0.7 else rng.uniform(0.35, 0.85)
    return _hsv(rng.uniform(0, 360), s, rng.uniform(0.12, 0.97))


def _near(rng, c: np.ndarray, amount: float) -> np.ndarray:
    return np.clip(c + rng.normal(0.0, amount, 3), 0, 255).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# backgrounds (float32 H x W x 3, 0..255)

def _smooth(rng, H: int, W: int, cell_y: float, cell_x: float | None = None) -> np.ndarray:
    cell_x = cell_y if cell_x is None else cell_x
    gh, gw = max(2, int(H / cell_y) + 2), max(2, int(W / cell_x) + 2)
    g = rng.standard_normal((gh, gw)).astype(np.float32)
    return np.asarray(Image.fromarray(g, "F").resize((W, H), Image.BICUBIC))


def _fbm(rng, H, W, cell) -> np.ndarray:
    f = _smooth(rng, H, W, cell) + 0.5 * _smooth(rng, H, W, max(2, cell / 2)) \
        + 0.25 * _smooth(rng, H, W, max(2, cell / 4))
    return (f - f.mean()) / (f.std() + 1e-6)


def _grid(H, W):
    return (np.arange(H, dtype=np.float32)[:, None], np.arange(W, dtype=np.float32)[None, :])


def _lerp(c1, c2, t):
    return c1[None, None, :] + (c2 - c1)[None, None, :] * t[..., None]


def _up(small: np.ndarray, W: int, H: int) -> np.ndarray:
    return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(small[..., k]), "F")
                                .resize((W, H), Image.BICUBIC)) for k in range(3)], -1)


def _splats(rng, H, W, count, irregular):
    """Alpha layer and colour positions of tiny specks (<= ~3 px across)."""
    a = np.zeros((H, W), np.float32)
    ys = rng.integers(0, H, count)
    xs = rng.integers(0, W, count)
    a[ys, xs] = 1.0
    if irregular:
        for _ in range(2):
            dy = rng.integers(-1, 2, count)
            dx = rng.integers(-1, 2, count)
            a[np.clip(ys + dy, 0, H - 1), np.clip(xs + dx, 0, W - 1)] = 1.0
    return a, ys, xs


def _background(rng, kind: str, H: int, W: int) -> np.ndarray:
    yy, xx = _grid(H, W)
    short = min(H, W)
    if kind == "flat":
        img = np.broadcast_to(_bg_colour(rng), (H, W, 3)).astype(np.float32)
    elif kind == "gradient":
        c1 = _bg_colour(rng)
        c2 = _near(rng, c1, 70) if rng.random() < 0.5 else _bg_colour(rng)
        a = rng.uniform(0, 2 * math.pi)
        u = (xx - W / 2) * math.cos(a) + (yy - H / 2) * math.sin(a)
        t = (u - u.min()) / (u.max() - u.min() + 1e-6)
        img = _lerp(c1, c2, t)
    elif kind == "radial":
        c1, c2 = _bg_colour(rng), _bg_colour(rng)
        cx, cy = rng.uniform(0, W), rng.uniform(0, H)
        d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
        t = (d / d.max()) ** rng.uniform(0.6, 1.6)
        img = _lerp(c1, c2, t)
    elif kind in ("paper", "graph"):
        base = _hsv(rng.uniform(25, 60), rng.uniform(0.0, 0.12), rng.uniform(0.82, 0.97))
        if rng.random() < 0.25:  # tinted paper
            base = _hsv(rng.uniform(0, 360), rng.uniform(0.1, 0.3), rng.uniform(0.75, 0.95))
        img = base[None, None, :] + (_fbm(rng, H, W, rng.uniform(25, 70)) * rng.uniform(2, 6))[..., None]
        img = img + rng.normal(0, 2.5, (H, W, 1)).astype(np.float32)
        if kind == "paper":
            fib = Image.new("L", (W, H), 128)
            dr = ImageDraw.Draw(fib)
            for _ in range(int(rng.integers(10, 20 + W * H // 2500))):
                x, y = rng.uniform(0, W), rng.uniform(0, H)
                a = rng.uniform(0, 2 * math.pi)
                pts = [(x, y)]
                for _ in range(3):
                    a += rng.normal(0, 0.5)
                    step = rng.uniform(2, 8)
                    x, y = x + step * math.cos(a), y + step * math.sin(a)
                    pts.append((x, y))
                dr.line(pts, fill=int(128 + rng.choice([-1, 1]) * rng.uniform(15, 35)), width=1)
            fib = fib.filter(ImageFilter.GaussianBlur(0.5))
            img = img + (np.asarray(fib, np.float32) - 128.0)[..., None] * 0.6
        else:
            g = int(rng.integers(8, 25))
            ink = _hsv(rng.choice([200.0, 120.0, 0.0, 30.0]), rng.uniform(0.2, 0.6), rng.uniform(0.4, 0.8))
            strength = rng.uniform(0.15, 0.35)
            ox, oy = rng.integers(0, g), rng.integers(0, g)
            line = ((((xx + ox) % g) < 1) | (((yy + oy) % g) < 1)).astype(np.float32) * strength
            major = ((((xx + ox) % (5 * g)) < 1) | (((yy + oy) % (5 * g)) < 1)).astype(np.float32)
            line = np.maximum(line, major * min(0.6, strength * 1.8))
            img = img + (ink[None, None, :] - img) * line[..., None]
    elif kind == "fabric":
        base = _bg_colour(rng)
        p = rng.uniform(3, 7)
        amp = rng.uniform(8, 18)
        rowph = rng.uniform(0, 2 * math.pi, (H, 1)).astype(np.float32)
        colph = rng.uniform(0, 2 * math.pi, (1, W)).astype(np.float32)
        warp = np.sin(2 * math.pi * xx / p + rowph * 0.3)
        weft = np.sin(2 * math.pi * yy / p + colph * 0.3)
        check = ((np.floor(xx / p) + np.floor(yy / p)) % 2).astype(np.float32)
        tex = check * warp + (1 - check) * weft
        threads = rng.normal(0, 4, (H, 1)).astype(np.float32) + rng.normal(0, 4, (1, W)).astype(np.float32)
        img = base[None, None, :] + (tex * amp + threads)[..., None]
    elif kind == "clouds":
        c1 = _bg_colour(rng)
        c2 = _near(rng, c1, 80) if rng.random() < 0.6 else _bg_colour(rng)
        f = _fbm(rng, H, W, rng.uniform(0.15, 0.5) * short)
        t = 1.0 / (1.0 + np.exp(-1.5 * f))
        img = _lerp(c1, c2, t)
    elif kind == "bokeh":
        s = 8
        h, w = max(4, H // s), max(4, W // s)
        sy, sx = _grid(h, w)
        c1, c2 = _bg_colour(rng) * 0.7, _bg_colour(rng) * 0.7
        small = _lerp(c1, c2, np.broadcast_to(sy / h, (h, w)).astype(np.float32))
        for _ in range(int(rng.integers(6, 22))):
            cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            sig = rng.uniform(0.07, 0.22) * min(h, w)
            g = np.exp(-((sx - cx) ** 2 + (sy - cy) ** 2) / (2 * sig * sig))
            col = _hsv(rng.uniform(0, 360), rng.uniform(0.1, 0.7), rng.uniform(0.6, 1.0))
            small = small + (col[None, None, :] - small) * (g * rng.uniform(0.25, 0.6))[..., None]
        img = _up(small.astype(np.float32), W, H)
    elif kind == "wood":
        vertical = rng.random() < 0.4
        h, w = (W, H) if vertical else (H, W)
        gy, gx = _grid(h, w)
        dark = _hsv(rng.uniform(18, 38), rng.uniform(0.4, 0.7), rng.uniform(0.3, 0.55))
        light = _hsv(rng.uniform(25, 42), rng.uniform(0.3, 0.55), rng.uniform(0.6, 0.88))
        if rng.random() < 0.25:  # painted / bleached wood
            hue = rng.uniform(0, 360)
            dark = _hsv(hue, rng.uniform(0.05, 0.3), rng.uniform(0.35, 0.6))
            light = _hsv(hue, rng.uniform(0.05, 0.3), rng.uniform(0.65, 0.9))
        warp = _smooth(rng, h, w, rng.uniform(15, 40), rng.uniform(60, 160)) * rng.uniform(4, 12)
        period = rng.uniform(5, 16)
        rings = np.sin(2 * math.pi * (gy + warp) / period)
        t = 0.5 + 0.5 * np.sign(rings) * np.abs(rings) ** 0.6
        t = 0.75 * t + 0.25 * (0.5 + 0.3 * _smooth(rng, h, w, 2, 30))
        img = _lerp(dark, light, np.clip(t, 0, 1).astype(np.float32))
        if vertical:
            img = np.ascontiguousarray(img.transpose(1, 0, 2))
    elif kind == "bricks":
        hb = int(rng.integers(10, 37))
        L = hb * rng.uniform(1.8, 3.0)
        mw = int(rng.integers(1, 4))
        if rng.random() < 0.6:
            base = _hsv(rng.uniform(5, 25), rng.uniform(0.35, 0.65), rng.uniform(0.4, 0.7))
        else:
            base = _bg_colour(rng)
        mortar = np.clip(base + rng.choice([-1, 1]) * rng.uniform(25, 45), 0, 255).astype(np.float32)
        rows = (yy // hb).astype(np.int64)
        nrows = H // hb + 2
        off = (np.arange(nrows) % 2) * L / 2 + rng.uniform(0, L)
        u = xx + off[rows[:, 0]][:, None].astype(np.float32)
        idx = np.floor(u / L).astype(np.int64)
        ncols = int(W / L) + 4
        jit = (rng.normal(0, 10, (nrows, ncols, 1)) + rng.normal(0, 3, (nrows, ncols, 3))).astype(np.float32)
        img = base[None, None, :] + jit[rows, idx]
        m = ((yy % hb) < mw) | ((u % L) < mw)
        img = np.where(m[..., None], mortar[None, None, :], img)
        img = img + rng.normal(0, 4, (H, W, 1)).astype(np.float32)
    elif kind == "stripes":
        c1 = _bg_colour(rng)
        c2 = _near(rng, c1, 35)
        a = rng.uniform(0, math.pi)
        P = rng.uniform(6, 40)
        u = xx * math.cos(a) + yy * math.sin(a)
        t = 0.5 + 0.5 * np.tanh(3.0 * np.sin(2 * math.pi * u / P))
        img = _lerp(c1, c2, t.astype(np.float32))
    elif kind in ("confetti", "terrazzo"):
        if kind == "terrazzo":
            base = _hsv(rng.uniform(0, 360), rng.uniform(0, 0.12), rng.uniform(0.6, 0.92))
        else:
            base = _bg_colour(rng)
        img = np.broadcast_to(base, (H, W, 3)).astype(np.float32).copy()
        count = int(H * W / rng.uniform(60, 250))
        alpha, ys, xs = _splats(rng, H, W, count, kind == "terrazzo")
        cols = np.zeros((H, W, 3), np.float32)
        if kind == "terrazzo":
            pal = np.stack([_hsv(rng.uniform(0, 360), rng.uniform(0, 0.3), rng.uniform(0.15, 0.9))
                            for _ in range(4)])
            cc = pal[rng.integers(0, 4, count)]
        else:
            cc = np.stack([_hsv(h, s, v) for h, s, v in zip(rng.uniform(0, 360, count),
                                                             rng.uniform(0.2, 0.7, count),
                                                             rng.uniform(0.4, 1.0, count))])
            cc = 0.5 * cc + 0.5 * base
        # colour each speck's neighbourhood with its own colour (last writer wins)
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                cols[np.clip(ys + dy, 0, H - 1), np.clip(xs + dx, 0, W - 1)] = cc
        if kind == "confetti":
            alpha = np.asarray(Image.fromarray((alpha * 255).astype(np.uint8)).filter(
                ImageFilter.GaussianBlur(0.7)), np.float32) / 255.0
            alpha = np.clip(alpha * 2.2, 0, 1)
        img = img + (cols - img) * alpha[..., None]
    elif kind == "horizon":
        sky1 = _bg_colour(rng)
        sky2 = _near(rng, sky1, 50)
        ground1 = _bg_colour(rng)
        ground2 = _near(rng, ground1, 40)
        top = _lerp(sky1, sky2, np.broadcast_to(yy / H, (H, W)).astype(np.float32))
        bottom = _lerp(ground1, ground2, np.broadcast_to(yy / H, (H, W)).astype(np.float32))
        line = H * rng.uniform(0.3, 0.7) + rng.uniform(0.02, 0.08) * H * np.sin(
            2 * math.pi * xx / rng.uniform(0.4, 1.5) / W + rng.uniform(0, 6.3))
        line = line + _smooth(rng, 1, W, 1, rng.uniform(20, 80)) * rng.uniform(1, 6)
        soft = rng.uniform(1.5, 5)
        t = 0.5 + 0.5 * np.tanh((yy - line) / (2.0 * soft))
        img = top + (bottom - top) * t[..., None]
    elif kind == "sand":
        base = _bg_colour(rng)
        sig = rng.uniform(8, 18)
        mono = rng.normal(0, sig, (H, W, 1)).astype(np.float32)
        chroma = rng.normal(0, sig * 0.3, (H, W, 3)).astype(np.float32)
        img = base[None, None, :] + mono + chroma
        img = np.asarray(Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
                         .filter(ImageFilter.GaussianBlur(0.5)), np.float32)
    else:  # pragma: no cover
        raise ValueError(kind)
    img = np.asarray(img, np.float32)
    if rng.random() < 0.3:
        img = img + rng.normal(0, rng.uniform(0.5, 2.5), (H, W, 1)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# shapes: outlines in unit coordinates (circumscribed radius ~1, centre 0, y down, upright pose)

def _ngon(n: int, start_deg: float, r: float = 1.0) -> np.ndarray:
    a = np.radians(start_deg + 360.0 * np.arange(n) / n)
    return np.stack([r * np.cos(a), r * np.sin(a)], -1)


def _normalise(p: np.ndarray) -> np.ndarray:
    c = (p.min(0) + p.max(0)) / 2
    p = p - c
    return p / np.sqrt((p * p).sum(-1)).max()


def _unit_shape(rng, shape: str):
    """(filled polygons, hole polygons, rotational symmetry period in degrees; 0 = any)."""
    holes: list[np.ndarray] = []
    if shape == "circle":
        return [_ngon(96, 0)], holes, 0.0
    if shape == "square":
        return [_ngon(4, 45)], holes, 90.0
    if shape == "triangle":
        apex = 60.0 if rng.random() < 0.5 else rng.uniform(42.0, 78.0)
        a = np.radians([-90.0, 90.0 - apex, 90.0 + apex])
        sym = 120.0 if apex == 60.0 else 360.0
        return [np.stack([np.cos(a), np.sin(a)], -1)], holes, sym
    if shape == "star":
        ri = rng.uniform(0.38, 0.5)
        a = np.radians(-90.0 + 36.0 * np.arange(10))
        r = np.where(np.arange(10) % 2 == 0, 1.0, ri)
        return [np.stack([r * np.cos(a), r * np.sin(a)], -1)], holes, 72.0
    if shape == "cross":
        w = rng.uniform(0.2, 0.34)
        p = np.array([(w, -1), (w, -w), (1, -w), (1, w), (w, w), (w, 1), (-w, 1), (-w, w),
                      (-1, w), (-1, -w), (-w, -w), (-w, -1)], np.float64)
        return [p / math.hypot(1, w)], holes, 90.0
    if shape == "hexagon":
        return [_ngon(6, 0)], holes, 60.0
    if shape == "diamond":
        q = rng.uniform(0.52, 0.73)
        return [np.array([(0, -1), (q, 0), (0, 1), (-q, 0)], np.float64)], holes, 180.0
    if shape == "pentagon":
        return [_normalise(_ngon(5, -90))], holes, 72.0
    if shape == "octagon":
        return [_ngon(8, 22.5)], holes, 45.0
    if shape == "ellipse":
        e = rng.uniform(0.45, 0.7)
        a = np.radians(np.arange(96) * 3.75)
        return [np.stack([np.cos(a), e * np.sin(a)], -1)], holes, 180.0
    if shape == "rectangle":
        r = rng.uniform(1.6, 2.6)
        hw, hh = math.cos(math.atan(1 / r)), math.sin(math.atan(1 / r))
        return [np.array([(-hw, -hh), (hw, -hh), (hw, hh), (-hw, hh)])], holes, 180.0
    if shape == "heart":
        t = np.linspace(0, 2 * math.pi, 90, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        return [_normalise(np.stack([x, y], -1))], holes, 360.0
    if shape == "arrow":
        sw, hw, hl = rng.uniform(0.14, 0.24), rng.uniform(0.42, 0.6), rng.uniform(0.7, 1.0)
        x0 = 1 - hl
        p = np.array([(-1, -sw), (x0, -sw), (x0, -hw), (1, 0), (x0, hw), (x0, sw), (-1, sw)])
        return [_normalise(p)], holes, 360.0
    if shape == "ring":
        return [_ngon(96, 0)], [_ngon(96, 0, rng.uniform(0.45, 0.65))], 0.0
    if shape == "crescent":
        off = rng.uniform(0.35, 0.55)
        inner = _ngon(96, 0, rng.uniform(0.85, 1.0)) + np.array([off, 0.0])
        return [_ngon(96, 0)], [inner], 360.0
    if shape == "trapezoid":
        t, h = rng.uniform(0.4, 0.65), rng.uniform(0.45, 0.7)
        return [_normalise(np.array([(-1, h), (1, h), (t, -h), (-t, -h)]))], holes, 360.0
    if shape == "semicircle":
        a = np.radians(np.linspace(180, 360, 49))
        return [_normalise(np.stack([np.cos(a), np.sin(a)], -1))], holes, 360.0
    raise ValueError(shape)  # pragma: no cover


def _render(rng, polys, holes, R: float, theta_deg: float):
    """Anti-aliased coverage (n x n float32) of the shape on a padded square canvas."""
    pad = 4
    n = int(math.ceil(2 * R)) + 2 * pad
    cx, cy = n / 2 + rng.uniform(-0.5, 0.5), n / 2 + rng.uniform(-0.5, 0.5)
    S = 4 if R < 48 else 3
    th = math.radians(theta_deg)
    rot = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
    big = Image.new("L", (n * S, n * S), 0)
    dr = ImageDraw.Draw(big)
    for fill, group in ((255, polys), (0, holes)):
        for p in group:
            q = ((p @ rot.T) * R + np.array([cx, cy])) * S
            dr.polygon([(float(a), float(b)) for a, b in q], fill=fill)
    return np.asarray(big.resize((n, n), Image.BOX), np.float32) / 255.0


# ----------------------------------------------------------------------------------------------
# scene

def _canvas_size(rng) -> tuple[int, int]:
    aspect = 1.0 if rng.random() < 0.33 else math.exp(rng.uniform(0, math.log(3.0)))
    hi = min(640.0, 640.0 / aspect)
    short = int(round(math.exp(rng.uniform(math.log(96), math.log(max(96.5, min(hi, 560.0)))))))
    short = max(96, min(short, int(hi)))
    long = max(short, min(640, int(round(short * aspect))))
    return (long, short) if rng.random() < 0.5 else (short, long)  # (W, H)


def _count(rng) -> int:
    u = rng.random()
    if u < 0.05:
        return 0
    if u < 0.60:
        return int(rng.choice(np.arange(1, 7), p=np.array([6, 5, 4, 3.5, 3, 2.5]) / 24.0))
    if u < 0.78:
        return int(rng.integers(7, 11))
    return int(rng.integers(11, 26))


def _kinds(rng, n: int) -> list[tuple[str, str]]:
    p_d = float(rng.choice([0.0, 0.15, 0.3, 0.5], p=[0.25, 0.3, 0.3, 0.15]))
    p_copy = float(rng.choice([0.0, 0.3, 0.6], p=[0.4, 0.35, 0.25]))
    out: list[tuple[str, str]] = []
    for _ in range(n):
        if out and rng.random() < p_copy:
            out.append(out[int(rng.integers(len(out)))])
            continue
        if rng.random() < p_d:
            u = rng.random()
            shape = str(rng.choice(EXTRA_SHAPES)) if u < 0.6 else str(rng.choice(SHAPES))
            colour = str(rng.choice(EXTRA_COLOURS)) if u >= 0.45 else str(rng.choice(COLOURS))
        else:
            shape, colour = str(rng.choice(SHAPES)), str(rng.choice(COLOURS))
        out.append((shape, colour))
    return out


def _tilt(theta: float, sym: float) -> float:
    if sym <= 0:
        return 0.0
    t = theta % sym
    return float(min(t, sym - t))


def _fill_field(rng, style: str, rgb, cov: np.ndarray, colour: str, d: float) -> np.ndarray:
    n = cov.shape[0]
    if style == "rim" and d < 24:  # a rim would darken most of a small object
        style = "flat"
    base = np.array(rgb, np.float32)
    F = np.broadcast_to(base, (n, n, 3)).astype(np.float32)
    gentle = colour in ("yellow", "orange", "white", "pink", "cyan")
    if style == "shade":
        yy, xx = _grid(n, n)
        a = rng.uniform(0, 2 * math.pi)
        u = ((xx - n / 2) * math.cos(a) + (yy - n / 2) * math.sin(a)) / (n / 2)
        amp = rng.uniform(0.05, 0.09 if gentle else 0.15) * np.clip(u, -1, 1)
        if colour == "black":
            F = F + 255.0 * np.abs(amp)[..., None] * 0.5
        else:
            lighten = F + (255.0 - F) * np.clip(amp, 0, None)[..., None]
            F = lighten * (1.0 + np.clip(amp, None, 0))[..., None]
    elif style == "rim":
        r = max(0.8, 0.04 * d)
        blur = np.asarray(Image.fromarray((cov * 255).astype(np.uint8)).filter(
            ImageFilter.GaussianBlur(r)), np.float32) / 255.0
        e = np.clip(1.0 - blur, 0, 1)[..., None]
        if colour == "black":
            F = F + 70.0 * e
        else:
            F = F * (1.0 - (0.25 if gentle else 0.4) * e)
    elif style == "grain":
        F = F + rng.normal(0, rng.uniform(3, 7), (n, n, 1)).astype(np.float32)
    return np.clip(F, 0, 255)


def _place_all(rng, img: np.ndarray, kinds, short: int):
    H, W = img.shape[:2]
    n = len(kinds)
    hi = 0.40 if n <= 3 else 0.28 if n <= 6 else 0.18 if n <= 10 else 0.12
    budget = 0.45 * W * H
    specs = []
    for shape, colour in kinds:
        frac = math.exp(rng.uniform(math.log(0.025), math.log(hi)))
        d = min(0.40 * short, max(float(MIN_PX[shape]), frac * short))
        specs.append([d, shape, colour])
    # keep the total footprint packable: shrink the biggest ones first
    while sum(s[0] ** 2 for s in specs) > budget:
        big = max(range(n), key=lambda k: specs[k][0])
        floor = float(MIN_PX[specs[big][1]])
        if specs[big][0] <= floor * 1.01:
            specs.pop(big)
            n -= 1
            if not specs:
                break
        else:
            specs[big][0] = max(floor, specs[big][0] * 0.85)
    order = sorted(range(len(specs)), key=lambda k: -specs[k][0])
    occ = np.zeros((H, W), bool)
    placed = []
    for k in order:
        d, shape, colour = specs[k]
        vocab_colour = colour in COLOURS
        tried = {colour}
        done = None
        for _shrink in range(4):
            polys, holes, sym = _unit_shape(rng, shape)
            if sym > 0 and rng.random() < 0.3:
                theta = float(rng.integers(0, 8)) * sym / 2 + rng.normal(0, 1.0)
            else:
                theta = rng.uniform(0, 360.0)
            R = d / 2
            cov = _render(rng, polys, holes, R, theta)
            c = cov.shape[0]
            mask = cov >= 0.5
            if c > W or c > H or mask.sum() < 6:
                d = max(float(MIN_PX[shape]), d * 0.8)
                continue
            foot = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).filter(
                ImageFilter.MaxFilter(5))) > 0
            fails = 0
            for _attempt in range(30):
                ox, oy = int(rng.integers(0, W - c + 1)), int(rng.integers(0, H - c + 1))
                if (occ[oy:oy + c, ox:ox + c] & foot).any():
                    continue
                patch = img[oy:oy + c, ox:ox + c]
                step = max(1, int(math.sqrt(c * c / 300)))
                bg_lab = _lab(patch[::step, ::step].reshape(-1, 3))
                rgb = None
                for _ in range(6):
                    cand = _shade(rng, colour)
                    if _contrasts(bg_lab, cand):
                        rgb = cand
                        break
                if rgb is None:
                    fails += 1
                    if fails % 3 == 0:  # this colour does not suit this background: try another
                        pool = [x for x in (COLOURS if vocab_colour else EXTRA_COLOURS) if x not in tried]
                        if pool:
                            colour = str(rng.choice(pool))
                            tried.add(colour)
                    continue
                done = (ox, oy, cov, mask, foot, rgb, colour, theta, sym, d)
                break
            if done is not None:
                break
            d = max(float(MIN_PX[shape]), d * 0.8)
        if done is None:
            continue
        ox, oy, cov, mask, foot, rgb, colour, theta, sym, d = done
        c = cov.shape[0]
        occ[oy:oy + c, ox:ox + c] |= foot
        placed.append(dict(shape=shape, colour=colour, rgb=rgb, cov=cov, mask=mask, ox=ox, oy=oy,
                           tilt=_tilt(theta, sym), d=d))
    return placed


def _shadows(rng, img: np.ndarray, placed) -> None:
    H, W = img.shape[:2]
    a = rng.uniform(0, 2 * math.pi)
    opacity = rng.uniform(0.25, 0.45)
    for p in placed:
        if p["colour"] == "black":
            continue
        cov = p["cov"]
        c = cov.shape[0]
        off = max(1.0, 0.06 * p["d"])
        r = max(0.8, 0.05 * p["d"])
        m = int(math.ceil(off + 3 * r)) + 1
        big = np.zeros((c + 2 * m, c + 2 * m), np.uint8)
        dx, dy = int(round(off * math.cos(a))), int(round(off * math.sin(a)))
        big[m + dy:m + dy + c, m + dx:m + dx + c] = (cov * 255).astype(np.uint8)
        sh = np.asarray(Image.fromarray(big).filter(ImageFilter.GaussianBlur(r)), np.float32) / 255.0
        x0, y0 = p["ox"] - m, p["oy"] - m
        xa, ya = max(0, x0), max(0, y0)
        xb, yb = min(W, x0 + sh.shape[1]), min(H, y0 + sh.shape[0])
        s = sh[ya - y0:yb - y0, xa - x0:xb - x0]
        img[ya:yb, xa:xb] *= (1.0 - opacity * s)[..., None]


def _effects(rng, img: np.ndarray, min_d: float) -> Image.Image:
    H, W = img.shape[:2]
    im = Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8))
    small_objects = min_d < 16  # gentler effects, and never rescaling and blur together
    rescaled = False
    if rng.random() < 0.2:
        rescaled = True
        f = rng.uniform(0.8 if small_objects else 0.5, 0.9)
        small = im.resize((max(8, int(round(W * f))), max(8, int(round(H * f)))),
                          Image.BOX if rng.random() < 0.5 else Image.BILINEAR)
        im = small.resize((W, H), Image.BICUBIC if rng.random() < 0.5 else Image.BILINEAR)
    if rng.random() < 0.25 and not (small_objects and rescaled):
        im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.5 if small_objects else 1.1)))
    arr = np.asarray(im, np.float32)
    changed = False
    if rng.random() < 0.35:
        c, b = rng.uniform(0.85, 1.15), rng.uniform(-15, 15)
        arr = (arr - 128.0) * c + 128.0 + b
        changed = True
    if rng.random() < 0.12:
        arr = arr * rng.uniform(0.95, 1.05, 3).astype(np.float32)
        changed = True
    if rng.random() < 0.3:
        sig = rng.uniform(2, 8)
        shape = (H, W, 1) if rng.random() < 0.5 else (H, W, 3)
        arr = arr + rng.normal(0, sig, shape).astype(np.float32)
        changed = True
    if changed:
        im = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8))
    if rng.random() < 0.4:
        buf = io.BytesIO()
        q = int(rng.integers(60 if small_objects else 35, 93))
        im.save(buf, "JPEG", quality=q, subsampling=int(rng.choice([0, 2])))
        buf.seek(0)
        im = Image.open(buf).convert("RGB")
    return Image.fromarray(np.asarray(im, np.uint8).copy(), "RGB")


def _scene(rng) -> Scene:
    W, H = _canvas_size(rng)
    short = min(W, H)
    kind = str(rng.choice(BACKGROUNDS))
    img = _background(rng, kind, H, W)
    placed = _place_all(rng, img, _kinds(rng, _count(rng)), short)
    if placed and rng.random() < 0.25:
        _shadows(rng, img, placed)
    mode = str(rng.choice(["flat", "shade", "rim", "grain", "mixed"], p=[0.45, 0.2, 0.15, 0.1, 0.1]))
    objects = []
    for p in placed:
        style = str(rng.choice(["flat", "shade", "rim", "grain"])) if mode == "mixed" else mode
        cov, c, ox, oy = p["cov"], p["cov"].shape[0], p["ox"], p["oy"]
        F = _fill_field(rng, style, p["rgb"], cov, p["colour"], p["d"])
        reg = img[oy:oy + c, ox:ox + c]
        reg += (F - reg) * cov[..., None]
        mask = p["mask"]
        rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
        y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        m = np.ascontiguousarray(mask[y0:y1, x0:x1])
        ys, xs = np.nonzero(m)
        j = int(np.argmin((ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2))
        bx0, by0 = ox + int(x0), oy + int(y0)
        objects.append(SceneObject(
            shape=p["shape"], colour=p["colour"],
            box=(bx0 / W, by0 / H, (bx0 + m.shape[1]) / W, (by0 + m.shape[0]) / H),
            point=((bx0 + int(xs[j]) + 0.5) / W, (by0 + int(ys[j]) + 0.5) / H),
            rgb=tuple(int(v) for v in p["rgb"]), tilt=round(p["tilt"], 3),
            size=float(p["d"] / short), mask=m))
    min_d = min((p["d"] for p in placed), default=99.0)
    return Scene(image=_effects(rng, img, min_d), objects=tuple(objects), background=kind)


def _text(form: str, colour: str | None, shape: str | None) -> str:
    if form == "colour shape":
        return f"{colour} {shape}"
    return shape if form == "shape" else colour


def _eligible(form: str, objs) -> list:
    if form == "colour shape":
        return [o for o in objs if o.colour in COLOURS and o.shape in SHAPES]
    if form == "shape":
        return [o for o in objs if o.shape in SHAPES]
    return [o for o in objs if o.colour in COLOURS]


def _absent_text(rng, form: str, objs) -> str | None:
    def empty(t):
        return not matches(t, objs)

    if rng.random() < 0.5 and objs:  # near miss
        cands = []
        for o in objs:
            ns, nc = NEAR_SHAPE.get(o.shape, ()), NEAR_COLOUR.get(o.colour, ())
            if form == "shape":
                cands += list(ns)
            elif form == "colour":
                cands += list(nc)
            else:
                if o.colour in COLOURS:
                    cands += [f"{o.colour} {s}" for s in ns]
                if o.shape in SHAPES:
                    cands += [f"{c} {o.shape}" for c in nc]
                # both words present in the scene, never together
                cands += [f"{o.colour} {p.shape}" for p in objs
                          if o.colour in COLOURS and p.shape in SHAPES]
        cands = sorted({t for t in cands if empty(t)})
        if cands:
            return str(rng.choice(cands))
    if form == "shape":
        cands = [s for s in SHAPES if empty(s)]
    elif form == "colour":
        cands = [c for c in COLOURS if empty(c)]
    else:
        cands = [f"{c} {s}" for c in COLOURS for s in SHAPES if empty(f"{c} {s}")]
    return str(rng.choice(cands)) if cands else None


def _query(rng, scene: Scene) -> Query:
    objs = scene.objects
    form = FORMS[int(rng.choice(3, p=FORM_P))]
    text = None
    if rng.random() >= P_EMPTY:
        el = _eligible(form, objs)
        if el:
            o = el[int(rng.integers(len(el)))]
            text = _text(form, o.colour, o.shape)
    if text is None:
        text = _absent_text(rng, form, objs)
        if text is None:  # every kind of this form is present: ask for one of them instead
            el = _eligible(form, objs)
            o = el[int(rng.integers(len(el)))]
            text = _text(form, o.colour, o.shape)
    return Query(text=text, matches=matches(text, objs))


def eighth_pair(seed: int, i: int) -> tuple[Scene, Query]:
    rng = np.random.default_rng([seed, i, 8888])
    scene = _scene(rng)
    return scene, _query(rng, scene)


def eighth_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    """n (scene, query) pairs; pair i depends only on (seed, i)."""
    return [eighth_pair(seed, i) for i in range(n)]


if __name__ == "__main__":
    import time
    from collections import Counter

    t0 = time.perf_counter()
    batch = eighth_batch(0, 300)
    dt = (time.perf_counter() - t0) / len(batch)
    bins = Counter()
    for s, _ in batch:
        k = len(s.objects)
        bins["0" if k == 0 else "1-6" if k <= 6 else "7-10" if k <= 10 else "11-25"] += 1
    forms = Counter("colour shape" if " " in q.text else "shape" if q.text in SHAPES else "colour"
                    for _, q in batch)
    objs = [o for s, _ in batch for o in s.objects]
    sizes = np.array([o.size for o in objs])
    print(f"{len(batch)} scenes, {dt * 1000:.1f} ms/scene")
    print("image sizes: W", min(s.image.width for s, _ in batch), "-", max(s.image.width for s, _ in batch),
          " H", min(s.image.height for s, _ in batch), "-", max(s.image.height for s, _ in batch))
    print("backgrounds:", dict(sorted(Counter(s.background for s, _ in batch).items())))
    print("object counts:", {k: bins[k] for k in ("0", "1-6", "7-10", "11-25")},
          f"(total {len(objs)} objects)")
    distract = np.mean([o.shape not in SHAPES or o.colour not in COLOURS for o in objs])
    print(f"distractors: {distract:.1%}  sizes (of the short side): min {sizes.min():.3f}"
          f" median {np.median(sizes):.3f} max {sizes.max():.3f}")
    print("query forms:", {f: forms[f] for f in FORMS})
    print(f"empty queries: {np.mean([not q.matches for _, q in batch]):.1%}")
