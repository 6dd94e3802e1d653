"""Twelfth evaluation scene generator, written BLIND.

Moved from docs/experiments/twelfth_scenes.py in session 56: blind until session 56's decision, it is now a training
source too (`engine.train --foreign-from`, engine/training/foreign/__init__.py), so its figures are no
longer blind. Below, as it was written.

Written without seeing how the training scenes or any other evaluation generator draw their images.
What was read: in engine/training/scenes.py only the dataclasses `SceneObject`, `Scene`, `Query` and the
functions `matches`, `parse_query`, `reading_order` (plus a few neighbouring lines printed by accident,
listed in the author's report), and tests/test_eleventh_scenes.py (the shape of the test contract).
All shapes, shade ranges, textures and effects below are this file's own choices.

Scene kinds (`Scene.background`):
  stained      stained-glass window: pale irregular glass pieces separated by dark lead lines; the shapes
               are coloured glass with a lead rim, uneven glass density, back-light glow and bloom.
  bevel        3-D bevelled / embossed tiles lying on a table: shading of the bevel from an upper-left
               light, specular glints, soft cast shadows on the floor, a floor gradient.
  fabric       shapes printed on woven cloth with folds: a thread texture, then a smooth fold
               displacement (applied to the geometry and to the labels) with fold shading.
  watercolour  watercolour on paper: ragged, bled edges (the labels follow the painted edge), pigment
               pooling at the rims, granulation, paper fibre texture.  (No white objects: white paint
               on white paper is not a thing.)
  road         paint on asphalt seen in perspective: the plane is drawn flat, then a homography is applied
               to image and labels alike; paint wear and asphalt speckle.
  night        low-light photograph: dark surroundings, a pool of lamp light, a colour cast, heavy sensor
               noise (luma and chroma), slight blur.  Colours are checked after the cast.  (No black
               objects: they would not stand out of the dark.)
  water        shapes lying on a sandy bottom seen through rippling water: refraction displacement
               (geometry and labels), caustic light, a water tint.
Every kind also gets moderate photographic effects (blur, noise, vignette, JPEG).

Labels: box = tight box of the object's whole (unoccluded) mask in whole pixels, mask = that mask
cropped to the box, point = the visible pixel farthest from the visible region's edge, size = the mask's
largest width over 16 directions / the short side, tilt = degrees from the nearest upright pose given
the shape's rotational symmetry.  Every object's visible core colour is read back from the FINAL image;
a scene that fails is redrawn (next attempt); the canvas size and object count of scene i are fixed
across attempts so that redraws do not bias them.  Queries: ~12 % drawn absent on purpose, plus scenes
with nothing nameable, giving ~20 % absent queries overall.
"""

from __future__ import annotations

import argparse
import io
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage
from scipy.spatial import cKDTree

from engine.training.scenes import Query, Scene, SceneObject, matches


DEFAULT_SEED = 12121
KINDS = ("stained", "bevel", "fabric", "watercolour", "road", "night", "water")
SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_SHAPES = ("pentagon", "octagon", "ellipse", "rectangle", "heart", "arrow", "ring", "crescent",
                     "semicircle", "trapezoid")
DISTRACTOR_COLOURS = ("pink", "cyan", "brown", "gray")

# Rotational symmetry period (degrees) of each shape, for `tilt`.
PERIOD = {"circle": 0, "ring": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60,
          "diamond": 180, "pentagon": 72, "octagon": 45, "ellipse": 180, "rectangle": 180, "heart": 360,
          "arrow": 360, "crescent": 360, "semicircle": 360, "trapezoid": 360}

# ----------------------------------------------------------------------------------------- colours
# Shade families (sRGB): a colour "reads as" the family of its nearest shade in CIE Lab.
SHADES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "red": ((210, 35, 35), (180, 22, 24), (235, 50, 40), (150, 15, 20)),
    "green": ((40, 160, 60), (30, 120, 45), (85, 185, 60), (25, 140, 90), (20, 95, 35)),
    "blue": ((40, 80, 205), (30, 55, 160), (65, 115, 235), (25, 40, 125)),
    "yellow": ((245, 215, 40), (250, 235, 80), (230, 195, 20)),
    "purple": ((130, 50, 175), (100, 35, 140), (155, 75, 200)),
    "orange": ((240, 130, 30), (230, 105, 20), (250, 155, 50)),
    "white": ((246, 246, 246), (228, 230, 233), (252, 250, 240)),
    "black": ((18, 18, 20), (40, 38, 42), (28, 30, 36)),
    "pink": ((245, 150, 190), (230, 105, 165), (250, 185, 210)),
    "cyan": ((40, 200, 220), (95, 222, 232), (20, 170, 190)),
    "brown": ((120, 72, 38), (150, 95, 55), (95, 60, 35)),
    "gray": ((128, 128, 128), (160, 160, 162), (96, 96, 98), (176, 176, 177)),
}


def srgb_to_lab(rgb) -> np.ndarray:
    """sRGB 0..255 (..., 3) -> CIE Lab (D65)."""
    c = np.asarray(rgb, np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


FAMILY_NAME = np.array([n for n, shades in SHADES.items() for _ in shades])
FAMILY_LAB = srgb_to_lab(np.array([s for shades in SHADES.values() for s in shades]))


def read_colour(rgb) -> str:
    """The colour name an RGB triple reads as (nearest shade family in Lab)."""
    d = np.linalg.norm(FAMILY_LAB - srgb_to_lab(rgb), axis=-1)
    return str(FAMILY_NAME[int(np.argmin(d))])


def colour_ok(rgb, name: str, max_d: float = 32.0, margin: float = 6.0) -> bool:
    """`rgb` reads as `name` without hesitation: nearest family, close to it, clearly nearer than others."""
    d = np.linalg.norm(FAMILY_LAB - srgb_to_lab(rgb), axis=-1)
    own, other = d[FAMILY_NAME == name].min(), d[FAMILY_NAME != name].min()
    return bool(own <= max_d and other - own >= margin)


def _pick_rgb(rng, name: str) -> tuple[int, int, int]:
    shades = SHADES[name]
    for _ in range(40):
        base = np.array(shades[rng.integers(len(shades))], float)
        rgb = np.clip(base + rng.normal(0, 7, 3), 0, 255).round().astype(int)
        if colour_ok(rgb, name, max_d=14, margin=12):
            return tuple(int(v) for v in rgb)
    return shades[0]


# ----------------------------------------------------------------------------------------- shapes

def _circle(r, n=72, cx=0.0, cy=0.0):
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([cx + r * np.cos(t), cy + r * np.sin(t)], 1)


def _outline(shape: str, r: float, angle: float, q: float) -> list[tuple[np.ndarray, int]]:
    """(polygon, fill 1/0) list around the origin, circumscribed radius ~r, rotated by `angle` degrees."""
    n = max(40, int(r * 1.5))
    if shape in ("circle", "ring", "crescent"):
        polys = [(_circle(r, n), 1)]
        if shape == "ring":
            polys.append((_circle(r * (0.55 + 0.1 * q), n), 0))
        elif shape == "crescent":
            polys.append((_circle(r * 0.85, n, cx=r * (0.4 + 0.2 * q)), 0))
    else:
        def reg(k, start):
            return np.array([[math.cos(math.radians(start + 360 * j / k)), math.sin(math.radians(start + 360 * j / k))]
                             for j in range(k)])
        if shape == "square":
            p = reg(4, 45)
        elif shape == "triangle":
            p = reg(3, -90)
        elif shape == "star":
            p = reg(10, -90) * np.where(np.arange(10) % 2 == 0, 1.0, 0.38 + 0.1 * q)[:, None]
        elif shape == "cross":
            a, w = 1.0, 0.3 + 0.06 * q
            p = np.array([(-w, -a), (w, -a), (w, -w), (a, -w), (a, w), (w, w), (w, a), (-w, a), (-w, w),
                          (-a, w), (-a, -w), (-w, -w)])
        elif shape == "hexagon":
            p = reg(6, 0)
        elif shape == "diamond":
            s = 0.52 + 0.2 * q
            p = np.array([(0, -1), (s, 0), (0, 1), (-s, 0)])
        elif shape == "pentagon":
            p = reg(5, -90)
        elif shape == "octagon":
            p = reg(8, 22.5)
        elif shape == "ellipse":
            t = np.linspace(0, 2 * np.pi, n, endpoint=False)
            p = np.stack([np.cos(t), (0.45 + 0.2 * q) * np.sin(t)], 1)
        elif shape == "rectangle":
            b = 0.4 + 0.22 * q
            p = np.array([(-1, -b), (1, -b), (1, b), (-1, b)])
        elif shape == "heart":
            t = np.linspace(0, 2 * np.pi, n, endpoint=False)
            p = np.stack([16 * np.sin(t) ** 3, -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t)
                                                 - np.cos(4 * t))], 1)
        elif shape == "arrow":
            h = 0.4 + 0.1 * q
            p = np.array([(-1, -0.17), (0.25, -0.17), (0.25, -h), (1, 0), (0.25, h), (0.25, 0.17), (-1, 0.17)])
        elif shape == "semicircle":
            t = np.linspace(np.pi, 2 * np.pi, n // 2 + 1)
            p = np.stack([np.cos(t), np.sin(t) + 0.5], 1)
        elif shape == "trapezoid":
            top = 0.35 + 0.2 * q
            p = np.array([(-top, -0.55), (top, -0.55), (1, 0.55), (-1, 0.55)])
        else:
            raise ValueError(shape)
        p = p - (p.max(0) + p.min(0)) / 2
        p = p / np.linalg.norm(p, axis=1).max() * r
        polys = [(p, 1)]
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    rot = np.array([[c, -s], [s, c]])
    return [(p @ rot.T, f) for p, f in polys]


def _coverage(shape, cx, cy, r, angle, q, ss=4):
    """Anti-aliased coverage (float32, local window) and the window's top-left (x0, y0) in the canvas."""
    x0, y0 = int(math.floor(cx - r - 3)), int(math.floor(cy - r - 3))
    w = h = int(math.ceil(2 * r + 7))
    im = Image.new("L", (w * ss, h * ss), 0)
    dr = ImageDraw.Draw(im)
    for poly, fill in _outline(shape, r, angle, q):
        pts = [((px + cx - x0) * ss, (py + cy - y0) * ss) for px, py in poly]
        dr.polygon(pts, fill=255 * fill)
    a = np.asarray(im, np.float32).reshape(h, ss, w, ss).mean((1, 3)) / 255.0
    return a, x0, y0


def _tilt(shape: str, angle: float) -> float:
    p = PERIOD[shape]
    if p == 0:
        return 0.0
    a = angle % p
    return float(round(min(a, p - a), 3))


# ----------------------------------------------------------------------------------------- warps

class _Shift:
    """Output (u, v) samples source (u + dx, v + dy): folds or refraction."""

    def __init__(self, fn, amp):
        self.fn, self.amp = fn, amp

    def inv(self, u, v):
        dx, dy = self.fn(u, v)
        return u + dx, v + dy

    def out_window(self, x0, y0, x1, y1):
        a = int(math.ceil(self.amp)) + 2
        return x0 - a, y0 - a, x1 + a, y1 + a


def _sine_shift(waves) -> "_Shift":
    """A displacement along each wave's direction: waves are (nx, ny, wavelength, amplitude, phase), px; its
    bound is the sum of the amplitudes."""
    def fn(u, v):
        dx = np.zeros_like(u)
        dy = np.zeros_like(u)
        for nx, ny, lam, a, ph in waves:
            s = np.sin(2 * np.pi * (u * nx + v * ny) / lam + ph) * a
            dx += s * nx
            dy += s * ny
        return dx, dy
    return _Shift(fn, sum(w[3] for w in waves))


class _Homography:
    def __init__(self, Hm):
        self.H, self.Hi = Hm, np.linalg.inv(Hm)

    @staticmethod
    def _apply(M, u, v):
        d = M[2, 0] * u + M[2, 1] * v + M[2, 2]
        return (M[0, 0] * u + M[0, 1] * v + M[0, 2]) / d, (M[1, 0] * u + M[1, 1] * v + M[1, 2]) / d

    def inv(self, u, v):            # output -> source
        return self._apply(self.H, u, v)

    def fwd(self, x, y):            # source -> output
        return self._apply(self.Hi, x, y)

    def out_window(self, x0, y0, x1, y1):
        xs, ys = self.fwd(np.array([x0, x1, x0, x1], float), np.array([y0, y0, y1, y1], float))
        return int(math.floor(xs.min())) - 2, int(math.floor(ys.min())) - 2, int(math.ceil(xs.max())) + 2, \
            int(math.ceil(ys.max())) + 2


def _homography(src, dst) -> np.ndarray:
    """3x3 matrix mapping the 4 points `src` onto `dst`."""
    A, b = [], []
    for (x, y), (u, v) in zip(src, dst):
        A.append([x, y, 1, 0, 0, 0, -u * x, -u * y]); b.append(u)
        A.append([0, 0, 0, x, y, 1, -v * x, -v * y]); b.append(v)
    h = np.linalg.solve(np.array(A, float), np.array(b, float))
    return np.append(h, 1.0).reshape(3, 3)


def _warp_image(canvas, warp, W, H):
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    sx, sy = warp.inv(u + 0.5, v + 0.5)
    out = np.empty((H, W, 3), np.float32)
    for c in range(3):
        out[..., c] = ndimage.map_coordinates(canvas[..., c], [sy - 0.5, sx - 0.5], order=1, mode="mirror")
    return out


def _warp_cov(cov, x0, y0, warp, W, H):
    h, w = cov.shape
    u0, v0, u1, v1 = warp.out_window(x0, y0, x0 + w, y0 + h)
    u0, v0, u1, v1 = max(u0, 0), max(v0, 0), min(u1, W), min(v1, H)
    if u0 >= u1 or v0 >= v1:
        return np.zeros((1, 1), np.float32), 0, 0
    v, u = np.mgrid[v0:v1, u0:u1].astype(np.float64)
    sx, sy = warp.inv(u + 0.5, v + 0.5)
    out = ndimage.map_coordinates(cov, [sy - 0.5 - y0, sx - 0.5 - x0], order=1, mode="constant", cval=0.0)
    return out.astype(np.float32), u0, v0


# ----------------------------------------------------------------------------------------- textures

def _smooth_noise(rng, h, w, sigma):
    n = ndimage.gaussian_filter(rng.normal(0, 1, (h, w)), sigma)
    return n / (n.std() + 1e-9)


def _paste(canvas, cov, x0, y0, colour_field):
    """Alpha-composite `colour_field` ((h, w, 3) or (3,)) with coverage `cov` at (x0, y0), clipped."""
    H, W = canvas.shape[:2]
    h, w = cov.shape
    a0, b0, a1, b1 = max(x0, 0), max(y0, 0), min(x0 + w, W), min(y0 + h, H)
    if a0 >= a1 or b0 >= b1:
        return
    c = cov[b0 - y0:b1 - y0, a0 - x0:a1 - x0, None]
    f = np.asarray(colour_field, np.float32)
    if f.ndim == 3:
        f = f[b0 - y0:b1 - y0, a0 - x0:a1 - x0]
    region = canvas[b0:b1, a0:a1]
    canvas[b0:b1, a0:a1] = region * (1 - c) + f * c


# ----------------------------------------------------------------------------------------- kinds

class _Kind:
    """Per-kind look. Canvas values are linear-ish floats in 0..1 (sRGB/255)."""
    warp_amp = 0.0
    exclude: tuple[str, ...] = ()

    def __init__(self, rng, W, H):
        self.rng, self.W, self.H = rng, W, H
        self.short = min(W, H)
        self.warp = None
        self.SW, self.SH = W, H           # source (flat) canvas size

    def background(self):
        raise NotImplementedError

    def place(self, cx, cy, r):
        """Output-space centre/radius -> source-space centre/radius."""
        return cx, cy, r

    def shape_cov(self, cov):
        return cov

    def before(self, canvas, cov, x0, y0, r):
        pass

    def paint(self, canvas, cov, x0, y0, rgb, r):
        _paste(canvas, cov, x0, y0, rgb)

    def after(self, img):
        return img


class Stained(_Kind):
    def background(self):
        rng, W, H = self.rng, self.W, self.H
        k = int(rng.integers(12, 40) * (W * H) / 250000) + 8
        seeds = rng.uniform(0, 1, (k, 2)) * [W, H]
        yy, xx = np.mgrid[0:H, 0:W]
        lab = cKDTree(seeds).query(np.stack([xx.ravel(), yy.ravel()], 1))[1].reshape(H, W)
        # pale, low-saturation glass tints
        base = rng.uniform(0.72, 0.92, (k, 1)) + rng.uniform(-0.06, 0.06, (k, 3))
        canvas = base[lab].astype(np.float32)
        edge = (lab != np.roll(lab, 1, 0)) | (lab != np.roll(lab, 1, 1))
        lw = max(1, int(round(self.short / 160)))
        edge = ndimage.binary_dilation(edge, iterations=lw)
        self.lead = float(rng.uniform(0.06, 0.14))
        canvas[edge] = self.lead
        canvas *= (1 + 0.05 * _smooth_noise(rng, H, W, 6))[..., None]
        return canvas

    def paint(self, canvas, cov, x0, y0, rgb, r):
        m = cov >= 0.5
        d = ndimage.distance_transform_edt(np.pad(m, 1))[1:-1, 1:-1]
        lw = max(1.5, r * 0.09)
        glow = 1.0 + 0.10 * np.clip(d / (r * 0.6 + 1e-6), 0, 1)
        dens = 1.0 + 0.04 * _smooth_noise(self.rng, *cov.shape, 2)
        col = np.asarray(rgb, np.float32)[None, None] * (glow * dens)[..., None]
        col = np.where((d <= lw)[..., None] & m[..., None], self.lead, col)
        _paste(canvas, cov, x0, y0, np.clip(col, 0, 1))

    def after(self, img):
        # back-light: bright side glow + bloom
        rng, H, W = self.rng, self.H, self.W
        yy, xx = np.mgrid[0:H, 0:W] / self.short
        cx, cy = rng.uniform(0, W / self.short), rng.uniform(0, H / self.short)
        light = 0.92 + 0.12 * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.5)
        img = img * light[..., None]
        bloom = ndimage.gaussian_filter(np.clip(img - 0.8, 0, 1), (self.short / 60, self.short / 60, 0))
        return img + 0.4 * bloom


class Bevel(_Kind):
    def background(self):
        rng, W, H = self.rng, self.W, self.H
        base = np.array([rng.uniform(0.55, 0.8)] * 3) + rng.uniform(-0.08, 0.08, 3)
        if rng.random() < 0.4:     # darker slate table
            base = base * 0.45
        yy = np.linspace(0, 1, H)[:, None, None]
        canvas = base[None, None] * (0.85 + 0.25 * yy) * np.ones((H, W, 1))
        grain = _smooth_noise(rng, H, W, (1, 8))
        canvas *= (1 + 0.025 * grain)[..., None]
        ang = rng.uniform(200, 250)
        self.L = np.array([math.cos(math.radians(ang)), math.sin(math.radians(ang))])   # towards the light
        self.shadow = -self.L * rng.uniform(0.1, 0.25)
        return canvas.astype(np.float32)

    def before(self, canvas, cov, x0, y0, r):
        off = self.shadow * r
        sh = ndimage.gaussian_filter(np.pad(cov, int(r * 0.4) + 3), r * 0.12 + 1)
        p = int(r * 0.4) + 3
        H, W = canvas.shape[:2]
        sx, sy = x0 - p + int(round(off[0])), y0 - p + int(round(off[1]))
        h, w = sh.shape
        a0, b0, a1, b1 = max(sx, 0), max(sy, 0), min(sx + w, W), min(sy + h, H)
        if a0 < a1 and b0 < b1:
            canvas[b0:b1, a0:a1] *= (1 - 0.45 * sh[b0 - sy:b1 - sy, a0 - sx:a1 - sx])[..., None]

    def paint(self, canvas, cov, x0, y0, rgb, r):
        m = cov >= 0.5
        d = ndimage.distance_transform_edt(np.pad(m, 1))[1:-1, 1:-1]
        b = max(2.0, r * 0.2)
        hgt = ndimage.gaussian_filter(np.clip(d / b, 0, 1), 0.7)
        gy, gx = np.gradient(hgt)
        g = np.stack([gx, gy], -1) * b
        facing = -(g @ self.L)         # >0 where the bevel faces the light
        shade = 1 + 0.35 * np.clip(facing, -1, 1)
        col = np.asarray(rgb, np.float32)[None, None] * shade[..., None]
        spec = np.clip(facing, 0, 1) ** 6 * 0.55
        col = col + spec[..., None] * (1 - col)
        _paste(canvas, cov, x0, y0, np.clip(col, 0, 1))


class Fabric(_Kind):
    def __init__(self, rng, W, H):
        super().__init__(rng, W, H)
        folds = []
        for _ in range(int(rng.integers(1, 4))):
            th = rng.uniform(0, np.pi)
            lam = rng.uniform(0.25, 0.7) * self.short
            a = rng.uniform(0.15, 0.35) * lam / (2 * np.pi)
            a = min(a, 0.025 * self.short)
            folds.append((math.cos(th), math.sin(th), lam, a, rng.uniform(0, 2 * np.pi)))
        self.folds = folds
        self.warp = _sine_shift(folds)
        self.warp_amp = self.warp.amp

    def background(self):
        rng, W, H = self.rng, self.W, self.H
        opts = [(0.90, 0.87, 0.80), (0.35, 0.42, 0.55), (0.80, 0.80, 0.78), (0.60, 0.52, 0.42), (0.25, 0.25, 0.27)]
        base = np.array(opts[rng.integers(len(opts))]) + rng.uniform(-0.04, 0.04, 3)
        yy, xx = np.mgrid[0:H, 0:W]
        per = rng.uniform(2.5, 4.5)
        self.weave = (1 + 0.06 * np.sin(2 * np.pi * xx / per) * np.sin(2 * np.pi * yy / per)
                      + 0.03 * _smooth_noise(rng, H, W, 0.8)).astype(np.float32)
        return (base[None, None] * self.weave[..., None]).astype(np.float32)

    def paint(self, canvas, cov, x0, y0, rgb, r):
        h, w = cov.shape
        H, W = canvas.shape[:2]
        wv = np.ones((h, w), np.float32)
        a0, b0, a1, b1 = max(x0, 0), max(y0, 0), min(x0 + w, W), min(y0 + h, H)
        wv[b0 - y0:b1 - y0, a0 - x0:a1 - x0] = self.weave[b0:b1, a0:a1]
        _paste(canvas, cov, x0, y0, np.clip(np.asarray(rgb, np.float32) * wv[..., None], 0, 1))

    def after(self, img):
        v, u = np.mgrid[0:self.H, 0:self.W].astype(np.float64)
        sh = np.zeros_like(u)
        for nx, ny, lam, a, ph in self.folds:
            sh += np.cos(2 * np.pi * (u * nx + v * ny) / lam + ph) * (a * 2 * np.pi / lam)
        return img * (1 + 0.22 * np.clip(sh, -1, 1))[..., None]


class Watercolour(_Kind):
    exclude = ("white",)

    def background(self):
        rng, W, H = self.rng, self.W, self.H
        base = np.array([0.96, 0.95, 0.91]) + rng.uniform(-0.03, 0.02, 3)
        fib = 0.025 * _smooth_noise(rng, H, W, 1.2) + 0.02 * _smooth_noise(rng, H, W, 10)
        return (base[None, None] * (1 + fib)[..., None]).astype(np.float32)

    def shape_cov(self, cov):
        m = cov >= 0.5
        sd = ndimage.distance_transform_edt(m) - ndimage.distance_transform_edt(~m)
        r = cov.shape[0] / 2
        amp = min(1.0, 0.02 * r + 0.3)
        n = _smooth_noise(self.rng, *cov.shape, max(1.5, r * 0.25)) * amp
        a = np.clip(sd + n + 0.5, 0, 1)
        a = ndimage.gaussian_filter(a, 0.8)
        # no coverage may reach the window border
        a[:1] = a[-1:] = 0
        a[:, :1] = a[:, -1:] = 0
        return a.astype(np.float32)

    def paint(self, canvas, cov, x0, y0, rgb, r):
        m = cov >= 0.5
        d = ndimage.distance_transform_edt(np.pad(m, 1))[1:-1, 1:-1]
        pool = 1 - 0.16 * np.exp(-d / 1.5)
        lift = 1 + 0.06 * np.clip(d / (r + 1e-6), 0, 1)
        gran = 1 + 0.05 * _smooth_noise(self.rng, *cov.shape, 0.8)
        col = np.asarray(rgb, np.float32)[None, None] * (pool * lift * gran)[..., None]
        _paste(canvas, cov * 0.95, x0, y0, np.clip(col, 0, 1))


class Road(_Kind):
    def __init__(self, rng, W, H):
        super().__init__(rng, W, H)
        ts = rng.uniform(0.6, 0.85)
        k = rng.uniform(1.15, 1.5)
        self.SW, self.SH = int(math.ceil(W / ts)), int(math.ceil(H * k))
        SW, SH = self.SW, self.SH
        out = [(0, 0), (W, 0), (W, H), (0, H)]
        src = [(0, 0), (SW, 0), ((SW + W) / 2, SH), ((SW - W) / 2, SH)]
        self.warp = _Homography(_homography(out, src))

    def place(self, cx, cy, r):
        x, y = self.warp.inv(np.array([cx, cx + 1.0]), np.array([cy, cy]))
        scale = abs(x[1] - x[0])         # source px per output px, horizontally
        return float(x[0]), float(y[0]), r * scale

    def background(self):
        rng, W, H = self.rng, self.SW, self.SH
        g = rng.uniform(0.2, 0.38)
        base = np.array([g, g, g * rng.uniform(0.95, 1.08)])
        sp = 0.12 * rng.normal(0, 1, (H, W)) + 0.05 * _smooth_noise(rng, H, W, 12)
        return np.clip(base[None, None] * (1 + sp)[..., None], 0, 1).astype(np.float32)

    def paint(self, canvas, cov, x0, y0, rgb, r):
        wear = (self.rng.random(cov.shape) < 0.03) | (_smooth_noise(self.rng, *cov.shape, 2) > 2.2)
        col = np.broadcast_to(np.asarray(rgb, np.float32), cov.shape + (3,)).copy()
        col *= (1 + 0.04 * self.rng.normal(0, 1, cov.shape))[..., None]
        _paste(canvas, cov * np.where(wear, 0.35, 1.0), x0, y0, np.clip(col, 0, 1))


class Night(_Kind):
    exclude = ("black",)

    def background(self):
        rng, W, H = self.rng, self.W, self.H
        base = np.array([0.07, 0.08, 0.11]) + rng.uniform(0, 0.06, 3)
        return (base[None, None] * (1 + 0.2 * _smooth_noise(rng, H, W, 20))[..., None]).astype(np.float32)

    def after(self, img):
        rng, W, H = self.rng, self.W, self.H
        yy, xx = np.mgrid[0:H, 0:W] / self.short
        cx, cy = rng.uniform(0.2, 0.8) * W / self.short, rng.uniform(0.1, 0.7) * H / self.short
        s2 = rng.uniform(0.4, 0.9)
        light = 0.72 + 0.35 * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / s2)
        cast = np.array([(1.06, 1.0, 0.86), (0.9, 0.98, 1.08), (1.0, 1.03, 0.94)][rng.integers(3)])
        img = img * light[..., None] * cast[None, None]
        sig = rng.uniform(0.03, 0.06)
        img = img + rng.normal(0, sig, (H, W, 1)) + ndimage.gaussian_filter(
            rng.normal(0, sig * 0.8, (H, W, 3)), (0.8, 0.8, 0))
        return img


class Water(_Kind):
    def __init__(self, rng, W, H):
        super().__init__(rng, W, H)
        waves = []
        for _ in range(int(rng.integers(2, 5))):
            th = rng.uniform(0, 2 * np.pi)
            lam = max(14.0, rng.uniform(0.12, 0.35) * self.short)
            a = min(rng.uniform(0.1, 0.3) * lam / (2 * np.pi), 0.012 * self.short + 0.5)
            waves.append((math.cos(th), math.sin(th), lam, a, rng.uniform(0, 2 * np.pi)))
        self.waves = waves
        self.warp = _sine_shift(waves)
        self.warp_amp = self.warp.amp

    def background(self):
        rng, W, H = self.rng, self.W, self.H
        base = np.array([0.82, 0.74, 0.58]) + rng.uniform(-0.06, 0.04, 3)
        sand = 0.06 * rng.normal(0, 1, (H, W)) + 0.05 * _smooth_noise(rng, H, W, 8)
        return (base[None, None] * (1 + sand)[..., None]).astype(np.float32)

    def after(self, img):
        v, u = np.mgrid[0:self.H, 0:self.W].astype(np.float64)
        f = np.zeros_like(u)
        for nx, ny, lam, a, ph in self.waves:
            f += np.cos(2 * np.pi * (u * nx + v * ny) / lam + ph * 1.7)
        caustic = np.clip(f / len(self.waves), 0, 1) ** 4 * 0.18
        tint = np.array([0.9, 0.97, 1.0])
        return img * tint[None, None] + caustic[..., None]


KIND_CLASSES = {"stained": Stained, "bevel": Bevel, "fabric": Fabric, "watercolour": Watercolour,
                "road": Road, "night": Night, "water": Water}


# ----------------------------------------------------------------------------------------- scene

def _photo(rng, img, strength: float):
    H, W = img.shape[:2]
    if rng.random() < 0.5 * strength:
        img = ndimage.gaussian_filter(img, (rng.uniform(0.3, 0.9) * strength, rng.uniform(0.3, 0.9) * strength, 0))
    if rng.random() < 0.6:
        yy, xx = np.mgrid[0:H, 0:W]
        rr = ((xx - W / 2) / W) ** 2 + ((yy - H / 2) / H) ** 2
        img = img * (1 - rng.uniform(0, 0.35) * strength * rr)[..., None]
    img = img + rng.normal(0, rng.uniform(0, 0.02) * strength, img.shape)
    out = Image.fromarray(np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8), "RGB")
    if rng.random() < 0.5 * strength + 0.1:
        buf = io.BytesIO()
        out.save(buf, "JPEG", quality=int(rng.integers(60, 95)))
        out = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return out


def _count(rng) -> int:
    u = rng.random()
    if u < 0.04:
        return 0
    if u < 0.54:
        return int(rng.integers(1, 7))
    if u < 0.75:
        return int(rng.integers(7, 11))
    return int(rng.integers(11, 26))


def _specs(rng, n: int, exclude):
    """(shape, colour) list: vocabulary objects with distractors mixed in, often repeated kinds."""
    cols = [c for c in COLOURS if c not in exclude]
    specs = []
    while len(specs) < n:
        if rng.random() < 0.2:
            shape = DISTRACTOR_SHAPES[rng.integers(len(DISTRACTOR_SHAPES))]
            colour = cols[rng.integers(len(cols))] if rng.random() < 0.6 else \
                DISTRACTOR_COLOURS[rng.integers(len(DISTRACTOR_COLOURS))]
        else:
            shape = SHAPES[rng.integers(len(SHAPES))]
            colour = cols[rng.integers(len(cols))] if rng.random() < 0.9 else \
                DISTRACTOR_COLOURS[rng.integers(len(DISTRACTOR_COLOURS))]
        reps = int(rng.integers(2, 5)) if rng.random() < 0.3 else 1
        specs += [(shape, colour)] * reps
    return specs[:n]


def _visible_masks(full):
    """full: list of (mask, x0, y0); -> visible masks (in each object's box)."""
    vis = []
    for k, (m, x0, y0) in enumerate(full):
        v = m.copy()
        h, w = m.shape
        for m2, a0, b0 in full[k + 1:]:
            h2, w2 = m2.shape
            ix0, iy0, ix1, iy1 = max(x0, a0), max(y0, b0), min(x0 + w, a0 + w2), min(y0 + h, b0 + h2)
            if ix0 < ix1 and iy0 < iy1:
                v[iy0 - y0:iy1 - y0, ix0 - x0:ix1 - x0] &= ~m2[iy0 - b0:iy1 - b0, ix0 - a0:ix1 - a0]
        vis.append(v)
    return vis


def _diameter(mask) -> float:
    edge = mask & ~ndimage.binary_erosion(mask)
    ys, xs = np.nonzero(edge)
    best = 0.0
    for t in np.linspace(0, np.pi, 16, endpoint=False):
        p = xs * math.cos(t) + ys * math.sin(t)
        best = max(best, float(p.max() - p.min() + 1))
    return best


def _layout(seed: int, i: int) -> tuple[int, int, int]:
    """Canvas size and object count of scene i: fixed across attempts, so redraws do not bias them."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, i, 12121, 1 << 20])
    short = int(rng.integers(96, 601)) if rng.random() < 0.8 else int(rng.integers(96, 801))
    aspect = float(np.exp(rng.uniform(0, math.log(2.0)))) if rng.random() < 0.75 else 1.0
    long_ = min(800, int(round(short * aspect)))
    W, H = (long_, short) if rng.random() < 0.6 else (short, long_)
    return W, H, _count(rng)


def _attempt(seed: int, i: int, attempt: int, kind: str, strength: float, W: int, H: int, n: int):
    rng = np.random.default_rng([seed & 0xFFFFFFFF, i, 12121, attempt])
    short = min(W, H)
    K = KIND_CLASSES[kind](rng, W, H)
    canvas = K.background()
    specs = _specs(rng, n, K.exclude)
    lo, hi = (0.05, 0.16) if n >= 11 else (0.06, 0.24) if n >= 7 else (0.08, 0.36)
    placed = []          # (shape, colour, rgb, angle, cov, x0, y0, r) in source space
    flat = []            # (mask, x0, y0) in output space (approximate for warped kinds, for placement)
    for shape, colour in specs:
        for _ in range(12):
            d = max(14.0, short * float(np.exp(rng.uniform(math.log(lo), math.log(hi)))))
            d = min(d, 0.36 * short)
            r = d / 2
            m = r + 3 + K.warp_amp + 2
            if W - 2 * m <= 0 or H - 2 * m <= 0:
                continue
            cx, cy = rng.uniform(m, W - m), rng.uniform(m, H - m)
            # placement check in output space (undistorted disc)
            cov0, fx0, fy0 = _coverage("circle", cx, cy, r * 0.95, 0, 0)
            m0 = cov0 >= 0.5
            vis = _visible_masks(flat + [(m0, fx0, fy0)])
            if all(v.sum() >= 0.78 * f[0].sum() for v, f in zip(vis[:-1], flat)):
                break
        else:
            continue
        angle = 0.0 if shape in ("circle", "ring") else float(rng.uniform(0, 360))
        q = float(rng.random())
        sx, sy, sr = K.place(cx, cy, r)
        cov, x0, y0 = _coverage(shape, sx, sy, sr, angle, q)
        cov = K.shape_cov(cov)
        rgb = _pick_rgb(rng, colour)
        placed.append((shape, colour, rgb, angle, cov, x0, y0, sr))
        flat.append((m0, fx0, fy0))
    for shape, colour, rgb, angle, cov, x0, y0, sr in placed:
        K.before(canvas, cov, x0, y0, sr)
        K.paint(canvas, cov, x0, y0, np.asarray(rgb, np.float32) / 255.0, sr)
    if K.warp is not None:
        img = _warp_image(canvas, K.warp, W, H)
    else:
        img = canvas
    img = K.after(img)
    image = _photo(rng, img, strength)
    arr = np.asarray(image)

    # ------------------------------------------------------------------ labels and checks
    full = []
    for shape, colour, rgb, angle, cov, x0, y0, sr in placed:
        if K.warp is not None:
            cov, x0, y0 = _warp_cov(cov, x0, y0, K.warp, W, H)
        m = cov >= 0.5
        if not m.any():
            return None, "lost"
        ys, xs = np.nonzero(m)
        a0, a1, b0, b1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
        X0, Y0, X1, Y1 = x0 + a0, y0 + b0, x0 + a1, y0 + b1
        if X0 <= 0 or Y0 <= 0 or X1 >= W or Y1 >= H:
            return None, "border"
        full.append((np.ascontiguousarray(m[b0:b1, a0:a1]), int(X0), int(Y0)))
    vis = _visible_masks(full)
    objects = []
    for (shape, colour, rgb, angle, *_), (m, x0, y0), v in zip(placed, full, vis):
        h, w = m.shape
        if v.sum() < 0.7 * m.sum():
            return None, "hidden"
        diam = _diameter(m)
        if diam < 10 or diam > 0.4 * short:
            return None, "size"
        dist = ndimage.distance_transform_edt(np.pad(v, 1))[1:-1, 1:-1]
        if dist.max() < 2:
            return None, "thin"
        py, px = np.unravel_index(int(np.argmax(dist)), dist.shape)
        core = v & (dist >= 0.4 * dist.max())
        patch = arr[y0:y0 + h, x0:x0 + w]
        med = np.median(patch[core if core.sum() >= 8 else v], 0)
        if colour in COLOURS and not colour_ok(med, colour):
            return None, f"colour {colour} {kind}"
        if colour not in COLOURS and read_colour(med) in COLOURS:
            return None, "distractor colour"
        # stands out from its surroundings
        ring_full = np.zeros((h + 8, w + 8), bool)
        ring_full[4:-4, 4:-4] = m
        ring = ndimage.binary_dilation(ring_full, iterations=3) & ~ring_full
        ys, xs = np.nonzero(ring)
        ys, xs = ys + y0 - 4, xs + x0 - 4
        ok = (ys >= 0) & (ys < H) & (xs >= 0) & (xs < W)
        around = np.median(arr[ys[ok], xs[ok]], 0)
        if np.linalg.norm(srgb_to_lab(med) - srgb_to_lab(around)) < 20:
            return None, "contrast"
        objects.append(SceneObject(
            shape=shape, colour=colour, box=(x0 / W, y0 / H, (x0 + w) / W, (y0 + h) / H),
            point=((x0 + px + 0.5) / W, (y0 + py + 0.5) / H), rgb=tuple(int(c) for c in rgb),
            tilt=_tilt(shape, angle), size=diam / short, mask=m))
    objects = tuple(objects)
    return (image, objects, rng), "ok"


def _query(rng, objects) -> Query:
    known = [o for o in objects if o.colour in COLOURS and o.shape in SHAPES]
    forms = ("shape", "colour shape", "colour")
    if known and rng.random() >= 0.12:   # plus scenes with nothing nameable: ~20 % absent
        o = known[rng.integers(len(known))]
        form = forms[rng.choice(3, p=[0.4, 0.45, 0.15])]
        text = o.shape if form == "shape" else o.colour if form == "colour" else f"{o.colour} {o.shape}"
        return Query(text, matches(text, objects))
    for _ in range(200):
        form = forms[rng.choice(3, p=[0.35, 0.5, 0.15])]
        c, s = COLOURS[rng.integers(len(COLOURS))], SHAPES[rng.integers(len(SHAPES))]
        text = s if form == "shape" else c if form == "colour" else f"{c} {s}"
        if not matches(text, objects):
            return Query(text, ())
    text = known[0].name
    return Query(text, matches(text, objects))


def twelfth_scene(seed: int, i: int, attempts: int = 8) -> tuple[Scene, Query, int]:
    """Scene i of seed `seed` (deterministic, independent of other indices), its query, attempts used."""
    kind = KINDS[(i + (seed * 7919) % len(KINDS)) % len(KINDS)]
    W, H, n = _layout(seed, i)
    a = 0
    while True:
        # past `attempts`: gentler photographic effects, and past 4x `attempts` fewer objects
        strength = 1.0 if a < attempts else max(0.0, 1.0 - 0.1 * (a - attempts + 1))
        n_a = n if a < 4 * attempts else max(0, n - (a - 4 * attempts + 1))
        res, _why = _attempt(seed, i, a, kind, strength, W, H, n_a)
        a += 1
        if res is not None:
            image, objects, rng = res
            q = _query(rng, objects)
            return Scene(image=image, objects=objects, background=kind), q, a


def twelfth_batch(seed: int = DEFAULT_SEED, n: int = 300) -> list[tuple[Scene, Query]]:
    return [twelfth_scene(seed, i)[:2] for i in range(n)]


# ----------------------------------------------------------------------------------------- CLI

def _draw_labels(scene: Scene, q: Query) -> Image.Image:
    im = scene.image.copy()
    dr = ImageDraw.Draw(im)
    W, H = im.size
    for o in scene.objects:
        x0, y0, x1, y1 = o.box
        hit = o in q.matches
        dr.rectangle([x0 * W, y0 * H, x1 * W - 1, y1 * H - 1], outline=(255, 0, 255) if hit else (0, 255, 255))
        px, py = o.point[0] * W, o.point[1] * H
        dr.ellipse([px - 2, py - 2, px + 2, py + 2], fill=(255, 0, 255))
        dr.text((x0 * W + 1, y0 * H + 1), o.name, fill=(255, 255, 255))
    dr.text((3, H - 12), f"{scene.background}: {q.text!r} -> {len(q.matches)}", fill=(255, 255, 0))
    return im


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--save", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    kinds, tries, empty, nobj = Counter(), Counter(), 0, 0
    t0 = time.perf_counter()
    for i in range(args.n):
        scene, q, a = twelfth_scene(args.seed, i)
        kinds[scene.background] += 1
        tries[scene.background] += a
        empty += not q.matches
        nobj += len(scene.objects)
        if args.save:
            scene.image.save(args.save / f"{i:04d}_{scene.background}.png")
            _draw_labels(scene, q).save(args.save / f"{i:04d}_{scene.background}_labels.png")
    dt = time.perf_counter() - t0
    for k in KINDS:
        print(f"{k:12s} {kinds[k]:4d} scenes, {tries[k] / max(kinds[k], 1):.2f} attempts/scene")
    print(f"{args.n} scenes, {nobj} objects, {empty} absent queries ({empty / max(args.n, 1):.0%}), "
          f"{dt / max(args.n, 1) * 1000:.0f} ms/scene")


if __name__ == "__main__":
    main()
