"""A sixth scene generator: photographs of physical coloured shapes.

Written as a blind evaluation generator (sessions 36-38); since session 51 also a training source
(`engine.train --foreign`, engine/training/foreign/__init__.py), so its figures are no longer blind.

Written without seeing the training generator. Every scene is a *photograph of a surface*: a
pinhole camera (field of view 48-68 degrees, tilted up to ~36 degrees off the surface normal,
rolled a few degrees, a sketchbook up to 14) looks at a flat world plane, so the surface and every
object on it are foreshortened through one homography (far objects look smaller; vocabulary
shapes are squashed at most to 0.8).
The background is textured in world coordinates and warped with the same homography; objects are
polygons in world coordinates, mapped through it and rasterised (3x supersampled) in the image, so
masks, boxes and points follow the perspective exactly. Six settings, each with its own material:

- ``table``: wood planks (oak, walnut, washed, painted), linen cloth or laminate; the objects are
  paper/card cut-outs with slightly rough edges, fibre grain and a faint curl gradient, casting
  short soft shadows.
- ``floor``: carpet or parquet seen from standing height; objects are foam/felt pieces with a
  visible darker side (thickness) on the camera's side, felt texture and longer soft shadows.
- ``chalkboard``: slate or green board with chalk-dust haze, sometimes a wooden frame; objects are
  chalk drawings (lighter, streaky fill with small gaps, rough edges). No black/brown/grey objects.
- ``fridge``: white, cream, black or brushed-steel door; objects are glossy plastic magnets with a
  light-side gradient, darker rim, specular highlight and drop shadow; paper notes with lines.
- ``screen``: a monitor (landscape) or phone (portrait) with bezel, photographed at an angle in a
  dim room; flat UI-style shapes on a light, dark or wallpaper theme, moire banding and glare.
- ``sketchbook``: a paper sheet (ruled, grid, dotted or blank) on a desk; objects are marker
  drawings with streaky fill and a darker rim.

Clutter (never vocabulary look-alikes, recorded as objects): hearts, crescents, arrows, lightning
bolts, beans (kidney shapes), pencils, leaves, paper notes (rectangles with aspect >= 2),
scribbles and looped handwriting strokes. Out-of-vocabulary colours: pink, brown, grey. Apparent
rotation (in the image, after perspective, both axes): squares <= 8 degrees, diamonds <= 4 (and
0.55-0.75 as wide as tall, the vocabulary's diamond: README), crosses <= 14, triangles mostly upright; other shapes any angle.
Query first, objects second: the form (45 % colour+shape, 40 % shape, 15 % colour), emptiness
(~20 %) and target count (1-10, mostly 1-4) are drawn first; near misses (same shape in another
colour, same colour on another shape, neighbouring colours, look-alike shapes) are added, then
vocabulary fillers and clutter that cannot match. Every object keeps >= 80 % of its pixels
visible, is >= 16-20 px and >= 4.5 % of the short side across, and differs from the ground
(CIELAB dE >= 34) and from every object it overlaps or comes within ~1.5 % of the short side of
(dE >= 32). After drawing: a lamp light field (0.9-1.06) with mild vignette, a +-5 % colour cast,
exposure 0.96-1.1, sometimes focus or one-axis motion blur, 1-px chromatic aberration, sensor
noise (stronger in 15 % 'low light' shots) and JPEG compression (q 40-91, 65 %). Image sizes
200-900 px (even), aspect 1-2.4, landscape or portrait.
"""
import io
import math
import sys
import time
from collections import Counter
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage

from engine.training.scenes import Query, Scene, SceneObject

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
OFF_COLOURS = ("pink", "brown", "grey")
CLUTTER = ("heart", "crescent", "arrow", "bolt", "bean", "pencil", "leaf", "note", "scribble",
           "writing")
SETTINGS = ("table", "floor", "chalkboard", "fridge", "screen", "sketchbook")

PALETTE = {
    "red": [(205, 30, 35), (222, 44, 40), (182, 22, 32)],
    "green": [(40, 150, 62), (62, 168, 50), (22, 124, 72)],
    "blue": [(35, 78, 200), (30, 104, 222), (42, 60, 172)],
    "yellow": [(246, 212, 30), (250, 226, 62), (238, 198, 22)],
    "purple": [(126, 50, 172), (142, 72, 192), (106, 40, 152)],
    "orange": [(246, 130, 24), (250, 146, 40), (236, 112, 20)],
    "white": [(246, 246, 242), (252, 252, 252), (240, 240, 234)],
    "black": [(26, 26, 28), (36, 33, 31), (16, 16, 21)],
    "pink": [(250, 160, 196), (246, 142, 186)],
    "brown": [(116, 72, 40), (100, 62, 38)],
    "grey": [(120, 120, 122), (128, 128, 128)],
}
NEAR_COLOUR = {"red": ("orange", "pink", "purple", "brown"), "green": ("yellow", "blue"),
               "blue": ("purple", "green", "grey"), "yellow": ("orange", "white", "green"),
               "purple": ("blue", "pink", "red"), "orange": ("red", "yellow", "brown"),
               "white": ("grey", "yellow", "pink"), "black": ("grey", "brown", "blue", "purple")}
NEAR_SHAPE = {"circle": ("hexagon", "bean", "crescent"), "square": ("diamond", "note", "hexagon"),
              "triangle": ("diamond", "arrow", "star"), "star": ("cross", "bolt", "hexagon"),
              "cross": ("star", "square", "arrow"), "hexagon": ("circle", "square", "star"),
              "diamond": ("square", "triangle", "leaf")}
STYLE_CLUTTER = {
    "table": ("heart", "crescent", "arrow", "bolt", "bean", "pencil", "leaf", "note"),
    "floor": ("heart", "crescent", "arrow", "bolt", "bean", "pencil", "leaf"),
    "chalkboard": ("heart", "crescent", "arrow", "bolt", "bean", "scribble", "writing"),
    "fridge": ("heart", "crescent", "arrow", "bolt", "bean", "note", "leaf"),
    "screen": ("heart", "crescent", "arrow", "bolt", "bean", "writing"),
    "sketchbook": ("heart", "crescent", "arrow", "bolt", "bean", "scribble", "writing", "pencil"),
}
CLUTTER_COLOURS = {"leaf": ("green", "yellow", "orange", "red", "brown"),
                   "note": ("yellow", "pink", "white", "orange", "green", "blue"),
                   "writing": ("black", "blue", "grey", "red", "white", "purple")}
MATERIAL = {"table": "paper", "floor": "foam", "chalkboard": "chalk", "fridge": "magnet",
            "screen": "flat", "sketchbook": "marker"}
# symmetry period (degrees) used to fold the apparent rotation into a tilt
PERIOD = {"circle": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60,
          "diamond": 180}
FORM_P = {"cs": 0.45, "s": 0.40, "c": 0.15}
COUNT_P = np.array([32, 26, 17, 11, 5, 3, 2, 1.5, 1.25, 1.25])
SS = 3  # supersampling of the rasteriser


# ------------------------------------------------------------------ colour
def _lab(rgb):
    c = np.asarray(rgb, dtype=np.float64) / 255.0
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = c @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                        [0.0193, 0.1192, 0.9505]]).T / np.array([0.9505, 1.0, 1.089])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]),
                     200 * (f[..., 1] - f[..., 2])], -1)


@lru_cache(maxsize=None)
def _lab_cached(rgb):
    return _lab(rgb)


def _de(a, b):
    la = _lab_cached(a) if isinstance(a, tuple) else _lab(a)
    lb = _lab_cached(b) if isinstance(b, tuple) else _lab(b)
    return float(np.linalg.norm(la - lb))


# ------------------------------------------------------------------ camera
def _rot(axis_deg, ang_deg):
    a, t = math.radians(axis_deg), math.radians(ang_deg)
    kx, ky = math.cos(a), math.sin(a)
    K = np.array([[0, 0, ky], [0, 0, -kx], [-ky, kx, 0]])
    return np.eye(3) + math.sin(t) * K + (1 - math.cos(t)) * K @ K


class _Cam:
    """World plane (X, Y) -> image pixels by a pinhole camera; 1 world unit ~ 1 px at centre."""

    def __init__(self, W, H, fov, tilt, axis, roll):
        f = (max(W, H) / 2) / math.tan(math.radians(fov) / 2)
        R = _rot(axis, tilt)
        M = np.column_stack([R[:, 0], R[:, 1], [0.0, 0.0, f]])
        c, s = math.cos(math.radians(roll)), math.sin(math.radians(roll))
        A = np.array([[f * c, -f * s, W / 2], [f * s, f * c, H / 2], [0, 0, 1.0]])
        self.H = A @ M / f
        self.Hi = np.linalg.inv(self.H)
        self.f, self.R = f, R

    def fwd(self, p):
        q = p @ self.H[:, :2].T + self.H[:, 2]
        return q[:, :2] / q[:, 2:3]

    def inv(self, p):
        q = p @ self.Hi[:, :2].T + self.Hi[:, 2]
        return q[:, :2] / q[:, 2:3]

    def depth(self, p):  # camera z of world points (relative to the centre's depth)
        return (p @ self.R[2, :2] + self.f) / self.f

    def jac(self, p):
        """2x2 Jacobian: image displacement per world unit along X (column 0) and Y (column 1)."""
        q = self.fwd(np.array([p, p + (1.0, 0.0), p + (0.0, 1.0)]))
        return np.column_stack([q[1] - q[0], q[2] - q[0]])


def _angle(v):  # clockwise angle of an image vector from image 'up', degrees
    return math.degrees(math.atan2(v[0], -v[1]))


def _camera(style, rng, W, H):
    fov = rng.uniform(48, 68)
    for _ in range(8):
        if style == "table":
            tilt, axis, roll = -rng.uniform(5, 36), rng.normal(0, 5), rng.normal(0, 4)
        elif style == "floor":
            tilt, axis, roll = -rng.uniform(0, 30), rng.normal(0, 8), rng.normal(0, 5)
        elif style in ("chalkboard", "fridge"):
            tilt, axis, roll = rng.uniform(0, 16), rng.uniform(0, 360), rng.normal(0, 3)
        elif style == "screen":
            tilt, axis, roll = rng.uniform(6, 28), rng.uniform(0, 360), rng.normal(0, 4)
        else:
            tilt, axis, roll = -rng.uniform(0, 24), rng.normal(0, 10), rng.uniform(-14, 14)
        cam = _Cam(W, H, fov, tilt, axis, roll)
        corners = np.array([[0, 0], [W, 0], [W, H], [0, H]], float)
        hom = np.c_[corners, np.ones(4)] @ cam.Hi.T
        if (hom[:, 2] > 0).all():
            world = hom[:, :2] / hom[:, 2:3]
            if cam.depth(world).min() > 0.3 and np.abs(world).max() < 6 * max(W, H):
                return cam, world
        fov = 50
    raise RuntimeError("no camera")  # pragma: no cover


# ------------------------------------------------------------------ textures
def _noise(rng, h, w, cy, cx):
    """Smooth N(0,1)-ish noise of shape (h, w) with cells of cy x cx pixels."""
    sh, sw = max(2, int(h / max(cy, 1)) + 2), max(2, int(w / max(cx, 1)) + 2)
    small = rng.standard_normal((sh, sw)).astype(np.float32)
    return np.asarray(Image.fromarray(small, "F").resize((w, h), Image.BICUBIC))


def _planks(rng, xs, ys, q, base, width, length):
    Y = ys[:, None]
    n = _noise(rng, len(ys), len(xs), 4 * q, 70 * q)
    grain = np.sin(2 * np.pi * (Y / rng.uniform(5, 11) + 2.5 * n))
    row = (np.floor(ys / width) - math.floor(ys[0] / width)).astype(int)
    tone = 1 + 0.05 * rng.standard_normal(row.max() + 1)
    shade = (0.94 + 0.05 * grain) * tone[row][:, None]
    seam = ((ys % width) < 1.8)[:, None]
    if length:
        off = rng.uniform(0, length, row.max() + 1)[row][:, None]
        seam = seam | (((xs[None, :] + off) % length) < 1.8)
    shade = np.where(seam, 0.6, shade)
    return np.asarray(base, np.float32) * shade[..., None]


def _texture(style, rng, xs, ys, q, surf):
    """World-space background (th, tw, 3) float and the surface indicator (th, tw) bool."""
    th, tw = len(ys), len(xs)
    X, Y = xs[None, :], ys[:, None]
    inside = np.ones((th, tw), bool)
    if surf is not None:
        x0, y0, x1, y1 = surf
        inside = (X >= x0) & (X <= x1) & (Y >= y0) & (Y <= y1)
    low = _noise(rng, th, tw, 90 * q, 90 * q)
    if style == "table":
        kind = rng.choice(["wood", "wood", "cloth", "laminate"])
        if kind == "wood":
            base = [(200, 162, 118), (110, 76, 52), (168, 156, 142), (226, 222, 214),
                    (182, 132, 84)][rng.integers(5)]
            img = _planks(rng, xs, ys, q, base, rng.uniform(80, 170), None)
        else:
            base = np.array([(214, 200, 178), (150, 165, 182), (168, 176, 160), (205, 205, 200),
                             (92, 96, 104)][rng.integers(5)], np.float32)
            img = base * (1 + 0.025 * low)[..., None]
            if kind == "cloth":  # woven: fine warp and weft streaks
                img = img * (1 + 0.03 * _noise(rng, th, tw, 1, 30 * q)
                             + 0.03 * _noise(rng, th, tw, 30 * q, 1))[..., None]
    elif style == "floor":
        if rng.random() < 0.55:
            base = np.array([(95, 105, 125), (186, 172, 146), (72, 72, 76), (120, 108, 100),
                             (150, 150, 146)][rng.integers(5)], np.float32)
            img = base * (1 + 0.06 * low)[..., None]
        else:
            base = [(190, 146, 98), (150, 104, 66), (205, 180, 140)][rng.integers(3)]
            img = _planks(rng, xs, ys, q, base, rng.uniform(45, 75), rng.uniform(250, 450))
    elif style == "chalkboard":
        base = np.array([(40, 48, 46), (34, 66, 52), (30, 32, 34)][rng.integers(3)], np.float32)
        haze = np.clip(_noise(rng, th, tw, 60 * q, 140 * q), 0, None) * rng.uniform(0.03, 0.1)
        img = base * (1 + 0.04 * low)[..., None]
        img = img + (200 - img) * haze[..., None]
        wood = 0.9 + 0.05 * _noise(rng, th, tw, 3, 30)
        frame = np.array((150, 106, 62), np.float32) * wood[..., None]
        img = np.where(inside[..., None], img, frame)
    elif style == "fridge":
        kind = rng.integers(4)
        base = np.array([(238, 238, 235), (240, 232, 206), (36, 36, 40), (178, 181, 184)][kind],
                        np.float32)
        img = base * (1 + 0.04 * np.sin(X / rng.uniform(80, 200) + 0.5 * low))[..., None]
        if kind == 3:
            img = img * (1 + 0.04 * _noise(rng, th, tw, 1, 60 * q))[..., None]
    elif style == "screen":
        theme = rng.integers(3)
        if theme == 0:
            inner = np.broadcast_to(np.float32([243, 244, 246]), (th, tw, 3))
        elif theme == 1:
            inner = np.broadcast_to(np.float32([28, 30, 36]), (th, tw, 3))
        else:
            c0, c1 = np.float32(rng.uniform(50, 130, 3)), np.float32(rng.uniform(50, 130, 3))
            c0[:] = c0.mean() + 0.35 * (c0 - c0.mean())
            c1[:] = c1.mean() + 0.35 * (c1 - c1.mean())
            t = np.clip((Y - surf[1]) / (surf[3] - surf[1]), 0, 1)[..., None]
            inner = c0 * (1 - t) + c1 * t + 0 * X[..., None]
        bar = (Y >= surf[1]) & (Y < surf[1] + 0.06 * (surf[3] - surf[1]))
        inner = np.where(bar[..., None], inner * 0.85 + 10, inner)
        b = 0.04 * (surf[2] - surf[0])
        bezel = (X >= surf[0] - b) & (X <= surf[2] + b) & (Y >= surf[1] - b) & (Y <= surf[3] + b)
        room = np.float32(rng.uniform(60, 120)) * np.float32([1.0, 0.95, 0.88]) * \
            (1 + 0.1 * low)[..., None]
        img = np.where(inside[..., None], inner, np.where(bezel[..., None], np.float32(20), room))
    else:  # sketchbook
        paper = np.float32([(247, 245, 238), (251, 251, 248), (240, 234, 218)][rng.integers(3)])
        img = np.broadcast_to(paper, (th, tw, 3)) * (1 + 0.015 * low)[..., None]
        pat, gap = rng.integers(4), rng.uniform(20, 32)
        line = np.float32([188, 202, 222]) if pat == 0 else np.float32([205, 205, 205])
        if pat == 0:
            m = np.broadcast_to((Y % gap) < 1.3, (th, tw))
        elif pat == 1:
            m = ((Y % gap) < 1.0) | ((X % gap) < 1.0)
        elif pat == 2:
            m = ((Y % gap) < 2.0) & ((X % gap) < 2.0)
        else:
            m = np.zeros((th, tw), bool)
        img = np.where(m[..., None], line, img)
        desk = np.float32([(110, 76, 52), (70, 70, 74), (182, 140, 96)][rng.integers(3)])
        img = np.where(inside[..., None], img, desk * (1 + 0.05 * low)[..., None])
    return np.ascontiguousarray(img, np.float32), inside


def _surface(style, rng, W, H):
    if style == "screen":
        if H > W:  # a phone held upright
            hx = W / 2 * rng.uniform(0.55, 0.8)
            hy = min(hx * rng.uniform(1.7, 2.1), H / 2 * 0.88)
        else:
            hx = W / 2 * rng.uniform(0.72, 0.92)
            hy = min(hx * rng.uniform(0.56, 0.66), H / 2 * 0.9)
        return (-hx, -hy, hx, hy)
    if style == "sketchbook" or (style == "chalkboard" and rng.random() < 0.5):
        hx, hy = W / 2 * rng.uniform(0.8, 1.15), H / 2 * rng.uniform(0.8, 1.15)
        dx, dy = rng.normal(0, 0.05 * W), rng.normal(0, 0.05 * H)
        return (dx - hx, dy - hy, dx + hx, dy + hy)
    return None


def _background(style, rng, cam, corners, W, H, surf):
    bx0, by0 = corners.min(0) - 4
    bx1, by1 = corners.max(0) + 4
    q = min(1.0, math.sqrt(2.5e5 / ((bx1 - bx0) * (by1 - by0))))
    tw, th = int(math.ceil((bx1 - bx0) * q)), int(math.ceil((by1 - by0) * q))
    xs = (bx0 + (np.arange(tw, dtype=np.float32) + 0.5) / q).astype(np.float32)
    ys = (by0 + (np.arange(th, dtype=np.float32) + 0.5) / q).astype(np.float32)
    tex, inside = _texture(style, rng, xs, ys, q, surf)
    S = np.array([[q, 0, -bx0 * q], [0, q, -by0 * q], [0, 0, 1.0]])
    M = S @ cam.Hi
    coeffs = tuple((M / M[2, 2]).flatten()[:8])
    tex = Image.fromarray(np.clip(tex, 0, 255).astype(np.uint8))
    if W * H > 1.2e5:  # warp at half resolution (a photo of a surface is never razor sharp)
        Mh = M @ np.diag([2.0, 2.0, 1.0])
        tex = tex.transform(((W + 1) // 2, (H + 1) // 2), Image.Transform.PERSPECTIVE,
                            tuple((Mh / Mh[2, 2]).flatten()[:8]), Image.BILINEAR)
        tex = tex.resize(((W + 1) // 2 * 2, (H + 1) // 2 * 2), Image.BILINEAR).crop((0, 0, W, H))
    else:
        tex = tex.transform((W, H), Image.Transform.PERSPECTIVE, coeffs, Image.BILINEAR)
    bg = np.asarray(tex, np.float32)
    if surf is None:
        surf_mask = np.ones((H, W), bool)
    else:
        surf_mask = np.asarray(Image.fromarray(inside.astype(np.uint8) * 255).transform(
            (W, H), Image.Transform.PERSPECTIVE, coeffs, Image.NEAREST)) > 127
    grain = {"table": 0.02, "floor": 0.07, "chalkboard": 0.04, "fridge": 0.01, "screen": 0.0,
             "sketchbook": 0.012}[style]
    if grain:
        bg *= 1 + grain * rng.standard_normal((H, W, 1), dtype=np.float32)
    return bg, surf_mask


# ------------------------------------------------------------------ outlines (unit radius, up = -y)
def _ngon(n, r=1.0, phase=-90.0):
    a = np.radians(phase + 360.0 * np.arange(n) / n)
    return np.c_[r * np.cos(a), r * np.sin(a)]


def _norm(parts):
    body = np.concatenate([p for k, p, *_ in parts if k in ("poly", "line")])
    c = (body.max(0) + body.min(0)) / 2
    r = np.linalg.norm(body - c, axis=1).max()
    return [(k, (p - c) / r, *rest) for k, p, *rest in parts]


def _outline(shape, rng, aspect=None):
    """Parts: (kind, points, line width in px or None, tag) with kind poly|erase|line."""
    if shape == "circle":
        return [("poly", _ngon(60), None, "body")]
    if shape == "square":
        return [("poly", _ngon(4, 1.0, -45), None, "body")]
    if shape == "triangle":
        return [("poly", _ngon(3), None, "body")]
    if shape == "hexagon":
        return [("poly", _ngon(6), None, "body")]
    if shape == "star":
        pts = _ngon(10)
        pts[1::2] *= rng.uniform(0.42, 0.5)
        return [("poly", pts, None, "body")]
    if shape == "cross":
        w = rng.uniform(0.27, 0.34)
        L = math.sqrt(1 - w * w)
        p = [(-w, -L), (w, -L), (w, -w), (L, -w), (L, w), (w, w), (w, L), (-w, L), (-w, w), (-L, w),
             (-L, -w), (-w, -w)]
        return [("poly", np.array(p), None, "body")]
    if shape == "diamond":
        a = aspect or rng.uniform(0.55, 0.75)
        return [("poly", np.array([(0, -1), (a, 0), (0, 1), (-a, 0)], float), None, "body")]
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 64, endpoint=False)
        p = np.c_[16 * np.sin(t) ** 3, -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t)
                                         - np.cos(4 * t))]
        return _norm([("poly", p, None, "body")])
    if shape == "crescent":
        d = rng.uniform(0.38, 0.52)
        return [("poly", _ngon(60), None, "body"),
                ("erase", _ngon(60, rng.uniform(0.78, 0.88)) + (d, -0.25 * d), None, "body")]
    if shape == "arrow":
        w, hw = rng.uniform(0.12, 0.18), rng.uniform(0.38, 0.48)
        p = [(-1, -w), (0.3, -w), (0.3, -hw), (1, 0), (0.3, hw), (0.3, w), (-1, w)]
        return _norm([("poly", np.array(p), None, "body")])
    if shape == "bolt":
        p = [(-0.1, -1), (0.55, -1), (0.15, -0.2), (0.55, -0.2), (-0.35, 1), (-0.05, 0.12),
             (-0.45, 0.12)]
        return _norm([("poly", np.array(p), None, "body")])
    if shape == "bean":  # kidney: an oval with a dent in one long side
        t = np.linspace(0, 2 * np.pi, 64, endpoint=False)
        x, y = np.cos(t), 0.55 * np.sin(t)
        y = y + rng.uniform(0.3, 0.4) * np.exp(-x * x / 0.12) * (y < 0)
        return _norm([("poly", np.c_[x, y], None, "body")])
    if shape == "pencil":
        w = rng.uniform(0.06, 0.085)
        body = np.array([(-1, -w), (0.72, -w), (1, 0), (0.72, w), (-1, w)])
        tip = np.array([(0.9, -0.36 * w), (1, 0), (0.9, 0.36 * w)])
        return [("poly", body, None, "body"), ("poly", tip, None, "mark")]
    if shape == "leaf":
        x = np.linspace(-1, 1, 31)
        h = rng.uniform(0.32, 0.4) * (1 - x ** 2) ** 0.8
        p = np.r_[np.c_[x, -h + 0.05 * x], np.c_[x[::-1], h[::-1] + 0.05 * x[::-1]]]
        return _norm([("poly", p, None, "body"), ("line", np.array([(-0.95, 0), (0.9, 0.04)]),
                                                   0.035, "mark")])
    if shape == "note":
        h = rng.uniform(0.36, 0.47)
        parts = [("poly", np.array([(-1, -h), (1, -h), (1, h), (-1, h)]), None, "body")]
        for yy in np.arange(-h + 0.17, h - 0.1, 0.16):
            parts.append(("line", np.array([(-0.85, yy), (rng.uniform(0.2, 0.85), yy)]), 0.025,
                          "mark"))
        return _norm(parts)
    if shape == "scribble":
        t = np.linspace(-1, 1, 40)
        y = sum(rng.uniform(0.1, 0.3) * np.sin(rng.uniform(2, 7) * t + rng.uniform(0, 6))
                for _ in range(3))
        return _norm([("line", np.c_[t, y], None, "body")])
    # writing: looped strokes like cursive words
    parts = []
    x = -1.0
    for _ in range(rng.integers(1, 4)):
        n = rng.integers(3, 7)
        t = np.linspace(0, 2 * np.pi * n, 14 * n)
        px = x + 0.045 * t - 0.09 * np.sin(t)
        parts.append(("line", np.c_[px, -0.2 * np.cos(t) * rng.uniform(0.8, 1.3)], None, "body"))
        x = px[-1] + 0.15
    return _norm(parts)


# ------------------------------------------------------------------ raster
def _roughen(pts, rng, amp):
    closed = np.r_[pts, pts[:1]]
    out = []
    for a, b in zip(closed[:-1], closed[1:]):
        n = max(1, int(np.linalg.norm(b - a) / 3))
        out.append(a + (b - a) * (np.arange(n) / n)[:, None])
    p = np.concatenate(out)
    nrm = np.roll(p, -1, 0) - np.roll(p, 1, 0)
    nrm = np.c_[-nrm[:, 1], nrm[:, 0]] / (np.linalg.norm(nrm, axis=1, keepdims=True) + 1e-9)
    j = ndimage.uniform_filter1d(rng.standard_normal(len(p)), 3, mode="wrap") * amp
    return p + nrm * j[:, None]


def _draw(parts, x0, y0, w, h, tags, dy=0.0):
    im = Image.new("L", (w * SS, h * SS), 0)
    d = ImageDraw.Draw(im)
    for kind, pts, width, tag in parts:
        if tag not in tags:
            continue
        p = [((x - x0) * SS - 0.5, (y - y0 + dy) * SS - 0.5) for x, y in pts]
        if kind == "poly":
            d.polygon(p, fill=255)
        elif kind == "erase":
            d.polygon(p, fill=0)
        else:
            lw = max(1, int(round(width * SS)))
            d.line(p, fill=255, width=lw, joint="curve")
            for e in (p[0], p[-1]):
                d.ellipse([e[0] - lw / 2, e[1] - lw / 2, e[0] + lw / 2, e[1] + lw / 2], fill=255)
    return np.asarray(im.reduce(SS), np.float32) / 255.0


def _raster(parts, W, H, thick):
    body = np.concatenate([p for k, p, _w, t in parts if k != "erase" and t == "body"])
    pad = 2 + max([wd for _k, _p, wd, _t in parts if wd] + [0])
    x0, y0 = int(math.floor(body[:, 0].min() - pad)), int(math.floor(body[:, 1].min() - pad))
    x1 = int(math.ceil(body[:, 0].max() + pad))
    y1 = int(math.ceil(body[:, 1].max() + pad + thick))
    if x0 < 1 or y0 < 1 or x1 > W - 1 or y1 > H - 1:
        return None
    w, h = x1 - x0, y1 - y0
    top = _draw(parts, x0, y0, w, h, ("body",))
    full = top
    if thick > 0:
        for i in range(1, int(math.ceil(thick)) + 1):
            full = np.maximum(full, _draw(parts, x0, y0, w, h, ("body",), dy=min(i, thick)))
    marks = _draw(parts, x0, y0, w, h, ("mark",)) if any(t == "mark" for *_, t in parts) else None
    return x0, y0, top, full, marks


# ------------------------------------------------------------------ placement
class _Obj:
    pass


def _place(rng, spec, cam, surf, bg, top, objs, W, H, style, n_total, room):
    shape, colour = spec
    short = min(W, H)
    vocab = shape in SHAPES
    detail = shape in ("star", "hexagon", "cross", "diamond")
    base = float(np.clip(0.62 * math.sqrt(room / (n_total + 1.5)), 0.08, 0.3))
    if shape in ("note", "pencil", "writing", "scribble", "leaf", "arrow"):
        base *= 1.35
    dmin_px = max(0.045 * short, 20 if detail else 16)
    rgb = PALETTE[colour][rng.integers(len(PALETTE[colour]))]
    mat = MATERIAL[style]
    s0 = math.sqrt(abs(np.linalg.det(cam.jac(np.zeros(2)))))
    for attempt in range(30):
        if attempt == 15:
            base *= 0.8
        u = np.array([rng.uniform(0.04, 0.96) * W, rng.uniform(0.04, 0.96) * H])
        cw = cam.inv(u[None])[0]
        J = cam.jac(cw)
        s, up = math.sqrt(abs(np.linalg.det(J))), _angle(J @ (0.0, -1.0))
        sv = np.linalg.svd(J, compute_uv=False)
        if vocab and sv[1] < 0.8 * sv[0]:  # only slight foreshortening of vocabulary shapes
            continue
        d_out = base * math.exp(rng.normal(0, 0.3)) * (s / s0) ** 0.6 * short
        d_out = float(np.clip(d_out, dmin_px, 0.45 * short))
        lim = {"square": 8.0, "diamond": 4.0, "cross": 14.0}.get(shape)
        if lim:
            ang = float(np.clip(rng.normal(0, lim / 2), -lim, lim))
        elif shape == "triangle" and rng.random() < 0.7:
            ang = rng.uniform(-12, 12)
        else:
            ang = rng.uniform(-180, 180)
        rw = d_out / 2 / s
        th = math.radians(ang - up)
        rot = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
        aspect = None
        if lim:  # both axes must look near-upright, so a square never reads as a diamond
            vx, vy = J @ rot @ (1.0, 0.0), J @ rot @ (0.0, 1.0)
            if abs(_angle(vx) - 90) > lim:
                continue
        if shape == "diamond":  # apparent width/height 0.55-0.75 whatever the foreshortening
            aspect = rng.uniform(0.55, 0.75) * np.linalg.norm(vy) / np.linalg.norm(vx)
            if not 0.45 < aspect < 0.95:
                continue
        parts, world_pts = [], []
        line_w = rng.uniform(2.6, 4.5) if mat in ("chalk", "marker") else rng.uniform(2.2, 3.5)
        for kind, p, wd, tag in _outline(shape, rng, aspect):
            wp = cw + (p * rw) @ rot.T
            world_pts.append(wp)
            op = cam.fwd(wp)
            if kind != "line" and mat in ("paper", "chalk") and tag == "body":
                op = _roughen(op, rng, 0.45 if mat == "paper" else 0.7)
            width = None if kind != "line" else (line_w if wd is None else max(1.2, wd * d_out / 2))
            parts.append((kind, op, width, tag))
        if surf is not None:
            wp = np.concatenate(world_pts)
            m = 0.02 * (surf[2] - surf[0])
            if (wp[:, 0].min() < surf[0] + m or wp[:, 0].max() > surf[2] - m
                    or wp[:, 1].min() < surf[1] + m or wp[:, 1].max() > surf[3] - m):
                continue
        thick = max(2.0, rng.uniform(0.05, 0.09) * d_out) if mat == "foam" else 0.0
        r = _raster(parts, W, H, thick)
        if r is None:
            continue
        x0, y0, top_a, full_a, marks = r
        mask = full_a >= 0.5
        if mask.sum() < 40:
            continue
        rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
        py0, py1, px0, px1 = y0 + rows[0], y0 + rows[-1] + 1, x0 + cols[0], x0 + cols[-1] + 1
        tmask = mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
        # occlusion of earlier objects
        sub = top[py0:py1, px0:px1]
        hit = np.bincount(sub[tmask] + 1, minlength=len(objs) + 1)[1:]
        if any(hit[i] and objs[i].vis - hit[i] < 0.8 * objs[i].area for i in range(len(objs))):
            continue
        # contrast with the ground and with touching objects
        rr = max(3, int(0.18 * d_out))
        qx0, qy0, qx1, qy1 = max(0, px0 - rr), max(0, py0 - rr), min(W, px1 + rr), min(H, py1 + rr)
        inm = np.zeros((qy1 - qy0, qx1 - qx0), bool)
        inm[py0 - qy0:py1 - qy0, px0 - qx0:px1 - qx0] = tmask
        ring_n = int((~inm).sum())
        ground = bg[qy0:qy1, qx0:qx1][~inm & (top[qy0:qy1, qx0:qx1] < 0)]
        if len(ground) > 0.15 * ring_n and _de(ground.mean(0), rgb) < 34:
            continue
        g = max(3, round(0.015 * short))  # gap that separates it from similar colours
        dx0, dy0, dx1, dy1 = max(0, px0 - g), max(0, py0 - g), min(W, px1 + g), min(H, py1 + g)
        pads = ((py0 - dy0, dy1 - py1), (px0 - dx0, dx1 - px1))
        dil = ndimage.maximum_filter(np.pad(tmask, pads), size=2 * g + 1)
        ids = top[dy0:dy1, dx0:dx1][dil]
        near = set(np.unique(ids[ids >= 0]).tolist())  # everything it overlaps or nearly touches
        if any(_de(objs[i].rgb, rgb) < 32 for i in near):
            continue
        for i in np.flatnonzero(hit):
            objs[i].vis -= int(hit[i])
        o = _Obj()
        j = len(objs)
        sub[tmask] = j
        o.shape, o.colour, o.rgb, o.mat = shape, colour, rgb, mat
        o.box = (px0, py0, px1, py1)
        o.mask, o.area, o.vis = tmask, int(tmask.sum()), int(tmask.sum())
        o.rx, o.ry, o.top_a, o.full_a, o.marks = x0, y0, top_a, full_a, marks
        o.d_out = d_out
        cen = cam.fwd(cw[None])[0]
        body = np.concatenate([p for k, p, _w, t in parts if k != "erase" and t == "body"])
        o.size = float(np.clip(2 * np.linalg.norm(body - cen, axis=1).max() / short, 1e-3, 0.59))
        per = PERIOD.get(shape, 360) if vocab else 360
        o.tilt = 0.0 if per == 0 else float(min(ang % per, per - ang % per))
        objs.append(o)
        return o
    return None


# ------------------------------------------------------------------ painting
def _shadow(img, alpha, x0, y0, dx, dy, sigma, strength):
    H, W = img.shape[:2]
    pad = int(abs(dx) + abs(dy) + 3 * sigma + 2)
    h, w = alpha.shape
    cv = Image.new("L", (w + 2 * pad, h + 2 * pad), 0)
    cv.paste(Image.fromarray((alpha * 255).astype(np.uint8)), (pad + round(dx), pad + round(dy)))
    s = np.asarray(cv.filter(ImageFilter.GaussianBlur(sigma)), np.float32) * (strength / 255)
    gx0, gy0 = x0 - pad, y0 - pad
    cx0, cy0 = max(0, gx0), max(0, gy0)
    cx1, cy1 = min(W, gx0 + w + 2 * pad), min(H, gy0 + h + 2 * pad)
    s = s[cy0 - gy0:cy1 - gy0, cx0 - gx0:cx1 - gx0]
    img[cy0:cy1, cx0:cx1] *= (1 - s)[..., None]


def _ramp(h, w, ang):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    v = xx * math.cos(ang) + yy * math.sin(ang)
    return (v - v.min()) / max(1e-6, float(v.max() - v.min())) - 0.5


def _paint(img, o, rng, light):
    """Draw one object in its material; light = direction the light travels (radians)."""
    x0, y0, top, full = o.rx, o.ry, o.top_a, o.full_a
    h, w = top.shape
    base = np.asarray(o.rgb, np.float32)
    mat, d = o.mat, o.d_out
    lx, ly = math.cos(light), math.sin(light)
    physical = o.shape in ("pencil", "leaf")
    if mat in ("paper", "foam", "magnet") or (physical and mat == "marker"):
        k = {"paper": 0.03, "foam": 0.08, "magnet": 0.07}.get(mat, 0.06) * d
        if o.shape == "pencil":
            k = max(k, 0.06 * d)
        _shadow(img, full, x0, y0, lx * max(1.0, k), ly * max(1.0, k), max(1.0, 0.6 * k + 0.6),
                rng.uniform(0.25, 0.42))
    reg = img[y0:y0 + h, x0:x0 + w]
    tex = np.ones((h, w), np.float32)
    alpha = top
    col_add = 0.0
    if mat == "foam":
        side = np.clip(full - top, 0, 1)[..., None]
        reg[:] = reg * (1 - side) + base * 0.62 * side
        tex += 0.06 * _noise(rng, h, w, 1.5, 1.5)
    elif mat == "paper":
        tex += 0.02 * rng.standard_normal((h, w), dtype=np.float32) + 0.06 * _ramp(h, w, -light)
    elif mat == "chalk":
        base = base * 0.86 + 36
        streak = _noise(rng, h, w, 1, 7) if rng.random() < 0.5 else _noise(rng, h, w, 7, 1)
        tex += 0.12 * streak
        alpha = top * (streak > -1.4)
    elif mat == "magnet" and not physical:
        tex += 0.22 * _ramp(h, w, light + math.pi) * 0.9
        dist = ndimage.distance_transform_edt(top > 0.5)
        tex *= 1 - 0.18 * np.exp(-dist / 1.5)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        cy, cx = h / 2 - ly * 0.25 * h, w / 2 - lx * 0.25 * w
        spot = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * (0.1 * d + 1) ** 2))
        col_add = 90 * spot[..., None] * (top > 0.5)[..., None]
    elif mat == "marker" and not physical:
        tex += 0.06 * np.sin(_ramp(h, w, rng.uniform(0, 6.3)) * d / 2.5 + _noise(rng, h, w, 3, 3))
        er = ndimage.minimum_filter(top, size=5)
        tex *= 1 - 0.22 * np.clip(top - er, 0, 1)
    elif mat == "flat":
        tex += 0.04 * _ramp(h, w, math.pi / 2)
    if o.shape == "pencil":
        dist = ndimage.distance_transform_edt(top > 0.5)
        tex *= 0.82 + 0.3 * np.clip(dist / max(1.0, dist.max()), 0, 1)
    col = base * tex[..., None] + col_add
    if o.marks is not None:
        col = col * (1 - 0.45 * o.marks[..., None])
    a = alpha[..., None]
    reg[:] = reg * (1 - a) + col * a


# ------------------------------------------------------------------ camera effects
def _photo(img, rng, style, surf_mask):
    H, W = img.shape[:2]
    h, w = H // 8 + 2, W // 8 + 2
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) * 8
    lx, ly = rng.uniform(-0.3, 1.3) * W, rng.uniform(-0.3, 1.3) * H
    sig = rng.uniform(0.6, 1.4) * max(W, H)
    lo = rng.uniform(0.9, 0.97)
    light = lo + (1.06 - lo) * np.exp(-((xx - lx) ** 2 + (yy - ly) ** 2) / (2 * sig * sig))
    v = rng.uniform(0, 0.08)
    light *= 1 - v * 0.5 * (((xx - W / 2) / (W / 2)) ** 2 + ((yy - H / 2) / (H / 2)) ** 2)
    light = np.asarray(Image.fromarray(light, "F").resize((w * 8, h * 8), Image.BILINEAR))[:H, :W]
    cast = 1 + rng.uniform(-0.05, 0.05, 3)
    gains = np.float32(cast / cast.mean() * rng.uniform(0.96, 1.1))
    img *= light[..., None] * gains
    if style == "screen":
        yy, xx = np.ogrid[0:H, 0:W]
        yy, xx = yy.astype(np.float32), xx.astype(np.float32)
        m = surf_mask[..., None].astype(np.float32)
        f, ang = rng.uniform(0.15, 0.5), rng.uniform(0, np.pi)
        moire = 0.025 * np.sin(f * (xx * math.cos(ang) + yy * math.sin(ang)) +
                               0.02 * (xx * xx - yy * yy) / max(W, H))
        img *= 1 + moire[..., None] * m
        gx, gy = rng.uniform(0, W), rng.uniform(0, H)
        glare = np.exp(-(((xx - gx) * 0.8 + (yy - gy) * 0.6) ** 2) / (2 * (0.12 * W) ** 2))
        img += (255 - img) * (rng.uniform(0.04, 0.14) * glare)[..., None] * m
    if rng.random() < 0.25:  # 1-px lateral chromatic aberration
        img[:, 1:, 0] = img[:, :-1, 0].copy()
        img[:, :-1, 2] = img[:, 1:, 2].copy()
    sigma = rng.uniform(4, 8) if rng.random() < 0.15 else rng.uniform(1, 3.5)
    img += sigma * rng.standard_normal((H, W, 1), dtype=np.float32)
    chroma = rng.standard_normal((H // 2, 1, W // 2, 1, 3), dtype=np.float32) * (0.45 * sigma)
    img.reshape(H // 2, 2, W // 2, 2, 3)[:] += chroma  # W and H are even
    pic = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    r = rng.random()
    if r < 0.3:
        pic = pic.filter(ImageFilter.GaussianBlur(rng.uniform(0.4, 1.0)))
    elif r < 0.42:  # camera shake along one axis
        k = float(rng.uniform(0.8, 2.0))
        pic = pic.filter(ImageFilter.BoxBlur((k, 0) if rng.random() < 0.6 else (0, k)))
    if rng.random() < 0.65:
        buf = io.BytesIO()
        pic.save(buf, "JPEG", quality=int(rng.integers(40, 92)))
        pic = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return pic


# ------------------------------------------------------------------ planning
def _plan(rng, style, vocab_cols, off_cols):
    form = rng.choice(list(FORM_P), p=list(FORM_P.values()))
    empty = rng.random() < 0.19
    k = 0 if empty else int(rng.choice(np.arange(1, 11), p=COUNT_P / COUNT_P.sum()))
    shape = str(rng.choice(SHAPES))
    colour = str(rng.choice(vocab_cols))
    text = {"cs": f"{colour} {shape}", "s": shape, "c": colour}[form]
    clutter = STYLE_CLUTTER[style]
    all_cols = list(vocab_cols) + list(off_cols)

    def ok(s, c):  # a non-target may neither match nor be an ambiguous distractor
        if form == "cs":
            return not (s == shape and c == colour)
        return s != shape if form == "s" else c != colour

    specs = []
    for _ in range(k):
        specs.append((shape if form != "c" else str(rng.choice(SHAPES)),
                      colour if form != "s" else str(rng.choice(vocab_cols))))
    extra = []
    n_near = int(rng.integers(1, 4)) if (empty or rng.random() < 0.7) else 0
    for _ in range(n_near):
        if form == "cs" and rng.random() < 0.5 or form == "s":
            s = shape if form == "cs" else str(rng.choice(NEAR_SHAPE[shape]))
            c = str(rng.choice(all_cols))
        else:
            near = [c for c in NEAR_COLOUR[colour] if c in all_cols] or all_cols
            c = str(rng.choice(near)) if form == "c" else colour
            s = str(rng.choice(NEAR_SHAPE[shape])) if form == "cs" else str(
                rng.choice(SHAPES + clutter))
        extra.append((s, c))
    for _ in range(int(rng.integers(0, 7)) if k < 6 else int(rng.integers(0, 3))):
        extra.append((str(rng.choice(SHAPES)), str(rng.choice(vocab_cols))))
    for _ in range(int(rng.integers(0, 3))):
        extra.append((str(rng.choice(SHAPES)), str(rng.choice(off_cols))) if off_cols else None)
    for _ in range(int(rng.integers(0, 5))):
        s = str(rng.choice(clutter))
        cols = [c for c in CLUTTER_COLOURS.get(s, all_cols) if c in all_cols] or all_cols
        extra.append((s, str(rng.choice(cols))))
    for e in extra:
        if e is None or e[1] not in all_cols:
            continue
        s, c = e
        if s not in SHAPES and s not in clutter:
            s = str(rng.choice(clutter))
        if ok(s, c) and len(specs) < 25:
            specs.append((s, c))
    order = rng.permutation(len(specs))
    specs = [specs[i] for i in order]
    # notes and pencils lie underneath: draw them first
    specs.sort(key=lambda sc: sc[0] not in ("note", "pencil"))
    return text, specs


def _reading_key(o):
    return (min(int(o.point[1] * 8), 7), o.point[0])


def _matches(objects, text):
    w = text.split()
    if len(w) == 2:
        m = [o for o in objects if o.colour == w[0] and o.shape == w[1]]
    elif w[0] in SHAPES:
        m = [o for o in objects if o.shape == w[0] and o.colour in COLOURS]
    else:
        m = [o for o in objects if o.colour == w[0] and o.shape in SHAPES]
    return tuple(sorted(m, key=_reading_key))


def _image_size(rng):
    ar = float(rng.choice([1.0, 1.25, 1.333, 1.5, 1.6, 1.778, 2.0, 2.4]))
    short = int(rng.uniform(200, min(620, 900 / ar)))
    long = min(900, int(round(short * ar)))
    short, long = short // 2 * 2, long // 2 * 2
    return (short, long) if rng.random() < 0.35 else (long, short)


def _scene(seed, i):
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) % (1 << 63), i, 6]))
    W, H = _image_size(rng)
    style = str(rng.choice(SETTINGS))
    cam, corners = _camera(style, rng, W, H)
    surf = _surface(style, rng, W, H)
    bg, surf_mask = _background(style, rng, cam, corners, W, H, surf)
    ry, rx = rng.integers(0, H, 3000), rng.integers(0, W, 3000)
    keep = surf_mask[ry, rx]
    ground = bg[ry[keep], rx[keep]].mean(0) if keep.any() else bg[ry, rx].mean(0)
    room = max(0.3, float(keep.mean()))  # share of the picture objects may occupy
    ok_col = [c for c in COLOURS + OFF_COLOURS
              if _de(tuple(np.mean(PALETTE[c], 0).tolist()), ground) >= 34]
    if style == "chalkboard":
        ok_col = [c for c in ok_col if c not in ("black", "brown", "grey")]
    vocab_cols = [c for c in COLOURS if c in ok_col]
    off_cols = [c for c in OFF_COLOURS if c in ok_col]
    text, specs = _plan(rng, style, vocab_cols, off_cols)
    top = np.full((H, W), -1, np.int16)
    objs = []
    for spec in specs:
        _place(rng, spec, cam, surf, bg, top, objs, W, H, style, len(specs), room)
    img = bg.copy()
    light = rng.uniform(math.radians(25), math.radians(155))
    if style == "fridge":
        light = math.pi / 2 + rng.normal(0, 0.35)
    for o in objs:
        _paint(img, o, rng, light)
    pic = _photo(img, rng, style, surf_mask)
    objects = []
    for j, o in enumerate(objs):
        px0, py0, px1, py1 = o.box
        vis = np.pad(top[py0:py1, px0:px1] == j, 1)
        dist = ndimage.distance_transform_edt(vis)[1:-1, 1:-1]
        r, c = np.unravel_index(int(np.argmax(dist)), dist.shape)
        objects.append(SceneObject(
            shape=o.shape, colour=o.colour, box=(px0 / W, py0 / H, px1 / W, py1 / H),
            point=((px0 + c + 0.5) / W, (py0 + r + 0.5) / H), rgb=tuple(int(v) for v in o.rgb),
            tilt=o.tilt, size=o.size, mask=o.mask))
    objects = tuple(objects)
    return Scene(image=pic, objects=objects, background=style), Query(text, _matches(objects, text))


def sixth_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    """n (scene, query) pairs; scene i depends only on (seed, i)."""
    return [_scene(seed, i) for i in range(n)]


def _sheet(pairs, path, cols=4, cell=300):
    rows = (len(pairs) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * cell, rows * (cell + 18)), (255, 255, 255))
    d = ImageDraw.Draw(sheet)
    for k, (scene, q) in enumerate(pairs):
        im = scene.image.copy()
        im.thumbnail((cell - 4, cell - 4))
        sx, sy = (k % cols) * cell, (k // cols) * (cell + 18)
        sheet.paste(im, (sx + 2, sy + 2))
        d.text((sx + 4, sy + cell + 2), f"{scene.background}: '{q.text}' x{len(q.matches)}",
               fill=(0, 0, 0))
    sheet.save(path)


def _summary(seed=6, n=500):
    t = time.perf_counter()
    pairs = sixth_batch(seed, n)
    dt = time.perf_counter() - t
    forms = Counter("colour+shape" if len(q.text.split()) == 2 else
                    ("shape" if q.text in SHAPES else "colour") for _, q in pairs)
    counts = Counter(min(len(q.matches), 10) for _, q in pairs)
    nobj = [len(s.objects) for s, _ in pairs]
    print(f"{n} scenes in {dt:.1f} s ({1000 * dt / n:.0f} ms each)")
    print("query forms:", dict(forms))
    print(f"empty: {counts[0] / n:.1%}; matches per query:", dict(sorted(counts.items())))
    print(f"objects per scene: mean {np.mean(nobj):.1f}, min {min(nobj)}, max {max(nobj)}")
    print("backgrounds:", dict(Counter(s.background for s, _ in pairs)))
    shapes = Counter(o.shape for s, _ in pairs for o in s.objects)
    print("object shapes:", dict(shapes.most_common()))
    colours = Counter(o.colour for s, _ in pairs for o in s.objects)
    print("object colours:", dict(colours.most_common()))
    sizes = [s.image.size for s, _ in pairs]
    print(f"image sizes: W {min(w for w, _ in sizes)}-{max(w for w, _ in sizes)}, "
          f"H {min(h for _, h in sizes)}-{max(h for _, h in sizes)}")
    return pairs


if __name__ == "__main__":
    out = _summary()
    if len(sys.argv) > 2 and sys.argv[1] == "--sheet":
        _sheet(out[:12], sys.argv[2])
