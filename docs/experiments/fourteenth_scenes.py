"""Fourteenth evaluation scene generator, written BLIND.

Written without seeing how the training scenes or any other evaluation generator draw their images.
What was read: in engine/training/scenes.py only the dataclasses `SceneObject`, `Scene`, `Query`, the
functions `matches`, `parse_query`, `reading_order` and the names and values of the vocabulary constants
`SHAPES`, `COLOURS`, `DISTRACTOR_SHAPES`, `DISTRACTOR_COLOURS` (extracted node by node with `ast`),
tests/scene_labels.py and tests/test_thirteenth_scenes.py (the test contract; since merged into
tests/test_blind_scenes.py), the module docstring, the
signatures of `thirteenth_scene` / `thirteenth_batch` and the `__main__` block of
docs/experiments/thirteenth_scenes.py (conventions), and in docs/experiments/blind_eval.py the docstring,
imports, `GENERATORS` and the `--seed` help (to register this file).  Seen in passing: the names (no values)
of scenes.py's other module-level constants, the imports and return line of `thirteenth_scene`'s module and
function, and a few neighbouring argparse lines of blind_eval.py; no drawing code.  All shapes, shade ranges,
textures and effects below are this file's own choices.

Scene kinds (`Scene.background`):
  stamp     rubber-stamp ink prints on cream, white, kraft, grey or black card: uneven ink density, grain
            voids, partial impressions fading towards one side, ink pooling at the rim and a slight bleed,
            paper grain and fibres showing through.
  knit      knitted wool (intarsia): the whole picture is made of V-shaped knit stitches (stitch shading,
            per-stitch variation, yarn fuzz), shapes knitted in their colour into a heathered ground.
  origami   folded paper cut-outs on a photo backdrop: each shape is split by one to three folds into
            facets lit differently, with crease lines, paper grain and a soft drop shadow.
  fog       a foggy outdoor view with depth: sky, horizon silhouettes, a receding ground with perspective
            rows; shapes stand at different depths (farther = higher up, smaller and more fogged, the fog
            on a shape capped so its colour still reads) with ground shadows; fog wisps.
  motion    a shaky phone photo of cut-outs on a painted wall: rolling-shutter skew and wobble (applied to
            image and labels alike), camera-shake motion blur (at most about a sixth of the smallest shape's
            size), strong sensor noise and JPEG.
  fisheye   an action-camera photo of foam cut-outs on a foam play mat: barrel distortion (image and labels
            warped alike), dark lens corners, vignetting and a little chromatic aberration.
  screen    a phone photo of an LCD screen showing the shapes on a wallpaper or app window: the screen's
            RGB sub-pixel stripes and row gaps aliasing into moire, extra moire fringes, keystone
            perspective (labels follow), a dark bezel, glare and slight defocus.
Every kind also gets mild photographic effects (noise, JPEG).

Objects: the seven vocabulary shapes in the eight vocabulary colours (85 %), else distractor shapes
(pentagon, ellipse, rectangle, heart, arrow, ring, crescent, trapezoid) and/or distractor colours (pink, cyan,
brown, gray).  Any rotation, except that the square stays within 30 degrees of upright and the diamond is a
rhombus (width 0.62 of its height, never a square) within 30 degrees of an axis pose, so neither reads as the
other.  Upright poses: a vertex up for triangle, star, pentagon and hexagon, arms on the axes for the cross,
sides on the axes for the square, tip up for the arrow.  Sizes from 3 % of the short side (at least 12-16 px
by shape) to about 38 %; 0-25 objects, about a quarter of scenes with 11-25.  At placement an object may hide
at most 15 % of any earlier one, and objects of the same colour name never touch.

Labels: box = tight box of the object's whole (unoccluded) drawn mask in whole pixels (coverage >= 0.5,
after any warp), mask = that mask cropped to the box, point = the visible pixel farthest from the visible
region's edge, size = the mask's largest width over 32 directions / the short side, tilt = degrees from the
nearest upright pose given the shape's rotational symmetry (0 for circles and rings).  Checked on the FINAL
image: every object's visible core colour (median of the visible pixels at least 0.4 of the maximum distance
from the visible edge) reads, in CIE Lab against this file's shade families, as its colour with a margin
(distractor colours as no vocabulary colour; `rgb` is that core colour); it differs by at least 14 Lab units
from the mean of the uncovered pixels within 3 px around the object; at least 75 % of each object is visible
and it lies inside the canvas (1 px clear), with a size of 10 px to 40 % of the short side.  A scene that
fails is redrawn (next attempt, effects toned down after ten failures); canvas size, kind and object count of
scene i are fixed across attempts.  Kinds come in shuffled blocks of seven.  Queries: ~18 % drawn absent on
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
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402
from scipy import ndimage  # noqa: E402

from engine.training.scenes import (COLOURS, DISTRACTOR_COLOURS, DISTRACTOR_SHAPES, SHAPES, Query,  # noqa: E402
                                    Scene, SceneObject, matches)

DEFAULT_SEED = 14141
KINDS = ("stamp", "knit", "origami", "fog", "motion", "fisheye", "screen")

# ---------------------------------------------------------------- colour: shade families in CIE Lab
# The first entries of each family are the shades objects are drawn in; the rest widen what still reads.
SHADES: dict[str, list[tuple[int, int, int]]] = {
    "red": [(225, 30, 35), (200, 25, 30), (232, 52, 48), (175, 20, 28), (210, 62, 60), (150, 18, 25)],
    "green": [(30, 175, 50), (25, 145, 45), (60, 190, 80), (25, 115, 40), (100, 195, 70), (70, 160, 90)],
    "blue": [(35, 80, 235), (30, 60, 200), (60, 110, 240), (30, 45, 150), (80, 120, 215), (50, 90, 190)],
    "yellow": [(250, 225, 20), (240, 215, 35), (245, 230, 80), (225, 200, 30), (255, 240, 120), (205, 185, 40)],
    "purple": [(145, 45, 200), (125, 35, 175), (165, 75, 215), (100, 35, 140), (150, 95, 190), (110, 60, 160)],
    "orange": [(255, 135, 10), (245, 120, 20), (250, 155, 45), (225, 115, 35), (235, 100, 15), (205, 105, 30)],
    "white": [(250, 250, 250), (238, 238, 234), (242, 240, 230), (222, 226, 234), (215, 215, 210)],
    "black": [(15, 15, 15), (30, 30, 32), (40, 38, 44), (52, 50, 48), (22, 26, 34)],
    "pink": [(245, 130, 190), (250, 170, 210), (228, 100, 170), (240, 150, 185)],
    "cyan": [(30, 200, 220), (90, 220, 235), (20, 170, 190), (60, 195, 205)],
    "brown": [(130, 75, 35), (110, 62, 30), (155, 95, 50), (92, 56, 36)],
    "gray": [(128, 128, 128), (110, 110, 114), (148, 148, 146), (135, 131, 126)],
}
DRAW_SHADES = 3           # objects are drawn in the first three shades of their family


def to_lab(rgb) -> np.ndarray:
    """sRGB (0-255, any leading shape) to CIE Lab (D65)."""
    c = np.asarray(rgb, np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


FAMILY_NAME = np.array([name for name, shades in SHADES.items() for _ in shades])
FAMILY_LAB = to_lab(np.array([s for shades in SHADES.values() for s in shades], np.float64))


def colour_reading(rgb) -> tuple[str, float, float]:
    """(nearest family's name, its Lab distance, the distance to the nearest shade of any other name)."""
    d = np.linalg.norm(FAMILY_LAB - to_lab(rgb), axis=-1)
    k = int(np.argmin(d))
    name = str(FAMILY_NAME[k])
    return name, float(d[k]), float(d[FAMILY_NAME != name].min())


def read_colour(rgb) -> str:
    """The colour name an RGB reads as: the nearest shade family in Lab."""
    return colour_reading(rgb)[0]


def reads_as(rgb, name: str, margin: float = 9.0, reach: float = 30.0) -> bool:
    got, d1, d2 = colour_reading(rgb)
    return got == name and d1 <= reach and d2 - d1 >= margin


# ---------------------------------------------------------------- shapes
def _regular(n: int, r: float = 1.0, start: float = -90.0) -> np.ndarray:
    a = np.radians(start + 360.0 * np.arange(n) / n)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


def _unit(p: np.ndarray) -> np.ndarray:
    return p / np.linalg.norm(p, axis=1).max()


def _star() -> np.ndarray:
    out = _regular(5)
    inner = _regular(5, 0.45, -54.0)
    return np.stack([out, inner], 1).reshape(-1, 2)


def _heart() -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, 72, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
    p = np.stack([x, y + 2.5], 1)
    return _unit(p)


# Each shape: list of (polygon, fill) drawn in order (fill 0 cuts a hole), in unit circumradius, y down.
_CIRCLE = _regular(72)
SHAPE_POLYS: dict[str, list[tuple[np.ndarray, int]]] = {
    "circle": [(_CIRCLE, 1)],
    "square": [(_regular(4, 1.0, -45.0), 1)],
    "triangle": [(_regular(3), 1)],
    "star": [(_star(), 1)],
    "cross": [(_unit(np.array([(-.3, -1), (.3, -1), (.3, -.3), (1, -.3), (1, .3), (.3, .3), (.3, 1), (-.3, 1),
                                (-.3, .3), (-1, .3), (-1, -.3), (-.3, -.3)])), 1)],
    "hexagon": [(_regular(6), 1)],
    "diamond": [(np.array([(0, -1), (0.62, 0), (0, 1), (-0.62, 0)]), 1)],
    "pentagon": [(_regular(5), 1)],
    "ellipse": [(_CIRCLE * np.array([1.0, 0.58]), 1)],
    "rectangle": [(_unit(np.array([(-1, -.55), (1, -.55), (1, .55), (-1, .55)])), 1)],
    "heart": [(_heart(), 1)],
    "arrow": [(_unit(np.array([(0, -1), (.62, -.15), (.22, -.15), (.22, 1), (-.22, 1), (-.22, -.15),
                                (-.62, -.15)])), 1)],
    "ring": [(_CIRCLE, 1), (_CIRCLE * 0.58, 0)],
    "crescent": [(_CIRCLE, 1), (_CIRCLE * 0.86 + np.array([0.42, -0.12]), 0)],
    "trapezoid": [(_unit(np.array([(-1, .5), (1, .5), (.5, -.5), (-.5, -.5)])), 1)],
}
SYMMETRY = {"circle": 0, "ring": 0, "square": 90, "cross": 90, "triangle": 120, "star": 72, "pentagon": 72,
            "hexagon": 60, "diamond": 180, "ellipse": 180, "rectangle": 180, "heart": 360, "arrow": 360,
            "crescent": 360, "trapezoid": 360}
MIN_PX = {"star": 16, "cross": 15, "triangle": 14, "crescent": 15, "ring": 15, "arrow": 15, "heart": 13}


def tilt_of(shape: str, rot: float) -> float:
    p = SYMMETRY[shape]
    if p == 0:
        return 0.0
    r = rot % p
    return float(min(r, p - r))


def coverage(shape: str, cx: float, cy: float, r: float, rot: float) -> tuple[int, int, np.ndarray]:
    """Anti-aliased coverage (0-1) of a shape in a local box: (x0, y0, alpha)."""
    x0, y0 = int(math.floor(cx - r)) - 2, int(math.floor(cy - r)) - 2
    w, h = int(math.ceil(cx + r)) + 3 - x0, int(math.ceil(cy + r)) + 3 - y0
    ss = 4 if r < 60 else 2
    im = Image.new("L", (w * ss, h * ss), 0)
    dr = ImageDraw.Draw(im)
    a = math.radians(rot)
    rm = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    for poly, fill in SHAPE_POLYS[shape]:
        p = (poly @ rm.T) * r + np.array([cx - x0, cy - y0])
        dr.polygon([(float(x * ss), float(y * ss)) for x, y in p], fill=255 * fill)
    al = np.asarray(im, np.float32).reshape(h, ss, w, ss).mean((1, 3)) / 255.0
    return x0, y0, al


def mask_size(mask: np.ndarray) -> float:
    """Largest width of the mask over 32 directions, in pixels."""
    ys, xs = np.nonzero(mask)
    a = np.pi * np.arange(32) / 32
    proj = np.outer(xs, np.cos(a)) + np.outer(ys, np.sin(a))
    return float((proj.max(0) - proj.min(0)).max() + 1)


# ---------------------------------------------------------------- texture helpers
def smooth_noise(rng, h: int, w: int, scale: float) -> np.ndarray:
    """Zero-mean, unit-ish noise varying over about `scale` pixels."""
    gh, gw = max(2, int(h / scale) + 2), max(2, int(w / scale) + 2)
    g = rng.standard_normal((gh, gw)).astype(np.float32)
    im = Image.fromarray(g, "F").resize((max(1, int(gw * scale)), max(1, int(gh * scale))), Image.BICUBIC)
    return np.asarray(im, np.float32)[:h, :w]


def fine_noise(rng, h: int, w: int, sigma: float = 0.7) -> np.ndarray:
    n = rng.standard_normal((h, w)).astype(np.float32)
    if sigma > 0:
        n = ndimage.gaussian_filter(n, sigma)
        n /= n.std() + 1e-6
    return n


def blend(img: np.ndarray, x0: int, y0: int, alpha: np.ndarray, colour) -> None:
    """img[box] = img * (1 - alpha) + colour * alpha; colour an RGB or an (h, w, 3) field."""
    h, w = alpha.shape
    reg = img[y0:y0 + h, x0:x0 + w]
    a = alpha[..., None]
    reg *= 1 - a
    reg += a * np.asarray(colour, np.float32)


def jitter(rng, rgb, amount: float = 10.0) -> np.ndarray:
    return np.clip(np.asarray(rgb, np.float32) + rng.uniform(-amount, amount, 3), 0, 255)


def shift2d(a: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """a shifted by whole pixels, edges repeated."""
    H, W = a.shape[:2]
    p = max(abs(dx), abs(dy))
    if p == 0:
        return a
    pad = [(p, p), (p, p)] + [(0, 0)] * (a.ndim - 2)
    b = np.pad(a, pad, mode="edge")
    return b[p - dy:p - dy + H, p - dx:p - dx + W]


# ---------------------------------------------------------------- scene plan
@dataclass
class Spec:
    shape: str
    colour: str
    base: np.ndarray          # drawing RGB
    cx: float
    cy: float
    r: float
    rot: float
    x0: int
    y0: int
    alpha: np.ndarray         # source coverage in its local box
    extra: float = 0.0        # per-kind parameter (fog amount)


def canvas_and_count(seed: int, i: int) -> tuple[int, int, int]:
    """(W, H, planned object count) of scene i: fixed across redraw attempts."""
    rng = np.random.default_rng([seed, i, 7])
    short = int(round(math.exp(rng.uniform(math.log(96), math.log(800)))))
    ratio = rng.choice([1.0, 1.0, rng.uniform(1.0, 1.4), rng.uniform(1.0, 2.0)])
    long = min(800, int(short * ratio), 2 * short + 1)
    W, H = (long, short) if rng.random() < 0.6 else (short, long)
    u = rng.random()
    if u < 0.06:
        n = 0
    elif u < 0.50:
        n = int(rng.integers(1, 7))
    elif u < 0.75:
        n = int(rng.integers(7, 11))
    else:
        n = int(rng.integers(11, 26))
    return W, H, n


def kind_for(seed: int, i: int) -> str:
    """Kinds come in shuffled blocks of seven."""
    perm = np.random.default_rng([seed, i // 7, 77]).permutation(len(KINDS))
    return KINDS[perm[i % 7]]


def pick_identity(rng) -> tuple[str, str]:
    u = rng.random()
    vs, vc = list(SHAPES), list(COLOURS)
    ds, dc = list(DISTRACTOR_SHAPES), list(DISTRACTOR_COLOURS)
    if u < 0.85:
        return str(rng.choice(vs)), str(rng.choice(vc))
    if u < 0.91:
        return str(rng.choice(ds)), str(rng.choice(vc))
    if u < 0.97:
        return str(rng.choice(vs)), str(rng.choice(dc))
    return str(rng.choice(ds)), str(rng.choice(dc))


def pick_rotation(rng, shape: str) -> float:
    if shape == "square":
        return float(rng.uniform(-30, 30))
    if shape == "diamond":
        return float(rng.uniform(-30, 30) + (90 if rng.random() < 0.35 else 0))
    if SYMMETRY[shape] == 0:
        return 0.0
    return float(rng.uniform(0, 360))


def place(rng, W: int, H: int, n: int, bg: np.ndarray, region=None, scale_at=None,
          avoid: float = 32.0) -> list[Spec]:
    """Positions, sizes, identities and coverages: an object hides at most 15 % of any earlier one (each keeps
    at least 80 % visible), objects of one colour name never touch, colours stand apart from the ground."""
    short = min(W, H)
    rx0, ry0, rx1, ry1 = region if region is not None else (0, 0, W, H)
    hi = 0.38 if n <= 4 else 0.28 if n <= 10 else 0.19
    specs: list[Spec] = []
    masks: list[np.ndarray] = []      # full masks (bool) in local boxes
    vis: list[np.ndarray] = []
    for _ in range(n):
        shape, colour = pick_identity(rng)
        done = False
        for tries in range(40):
            lo_px = max(0.034 * short, MIN_PX.get(shape, 12))
            top = max(lo_px * 1.05, hi * short * (0.75 if tries > 20 else 1.0))
            d = math.exp(rng.uniform(math.log(lo_px), math.log(top)))
            cx = rng.uniform(rx0 + d / 2 + 3, max(rx0 + d / 2 + 4, rx1 - d / 2 - 3))
            cy = rng.uniform(ry0 + d / 2 + 3, max(ry0 + d / 2 + 4, ry1 - d / 2 - 3))
            if scale_at is not None:
                d = max(lo_px, d * scale_at(cy))
            r = d / 2
            rot = pick_rotation(rng, shape)
            x0, y0, al = coverage(shape, cx, cy, r, rot)
            h, w = al.shape
            if x0 < 2 or y0 < 2 or x0 + w > W - 2 or y0 + h > H - 2:
                continue
            m = al >= 0.5
            if m.sum() < 20:
                continue
            ok = True
            for k, s in enumerate(specs):
                ox0, oy0 = max(x0, s.x0), max(y0, s.y0)
                ox1, oy1 = min(x0 + w, s.x0 + masks[k].shape[1]), min(y0 + h, s.y0 + masks[k].shape[0])
                if ox0 >= ox1 + 3 or oy0 >= oy1 + 3:
                    continue
                if s.colour == colour:       # same colour name: keep a 3 px gap
                    a0, b0 = max(x0, s.x0 - 3), max(y0, s.y0 - 3)
                    a1, b1 = min(x0 + w, s.x0 + masks[k].shape[1] + 3), min(y0 + h, s.y0 + masks[k].shape[0] + 3)
                    if a0 < a1 and b0 < b1:
                        big = np.zeros((b1 - b0, a1 - a0), bool)
                        sm = masks[k]
                        fx0, fy0 = max(s.x0, a0), max(s.y0, b0)
                        fx1, fy1 = min(s.x0 + sm.shape[1], a1), min(s.y0 + sm.shape[0], b1)
                        if fx0 < fx1 and fy0 < fy1:
                            big[fy0 - b0:fy1 - b0, fx0 - a0:fx1 - a0] = sm[fy0 - s.y0:fy1 - s.y0, fx0 - s.x0:fx1 - s.x0]
                            big = ndimage.binary_dilation(big, iterations=3)
                            if (big & m[b0 - y0:b1 - y0, a0 - x0:a1 - x0]).any():
                                ok = False
                                break
                if ox0 < ox1 and oy0 < oy1:
                    hide = (vis[k][oy0 - s.y0:oy1 - s.y0, ox0 - s.x0:ox1 - s.x0]
                            & m[oy0 - y0:oy1 - y0, ox0 - x0:ox1 - x0])
                    tot = masks[k].sum()
                    if hide.sum() > 0.15 * tot or vis[k].sum() - hide.sum() < 0.8 * tot:
                        ok = False
                        break
            if not ok:
                continue
            # colour against the ground under it
            patch = bg[max(0, y0):y0 + h, max(0, x0):x0 + w]
            ground = to_lab(patch[m[:patch.shape[0], :patch.shape[1]]].mean(0))
            base = None
            for _c in range(4):
                cand = jitter(rng, SHADES[colour][int(rng.integers(DRAW_SHADES))], 6)
                if np.linalg.norm(to_lab(cand) - ground) >= avoid and reads_as(cand, colour, 12, 22):
                    base = cand
                    break
            if base is None:
                if tries % 6 == 5:       # this colour does not stand out here: another of the same sort
                    colour = str(rng.choice(list(COLOURS) if colour in COLOURS else list(DISTRACTOR_COLOURS)))
                continue
            for k, s in enumerate(specs):
                ox0, oy0 = max(x0, s.x0), max(y0, s.y0)
                ox1, oy1 = min(x0 + w, s.x0 + masks[k].shape[1]), min(y0 + h, s.y0 + masks[k].shape[0])
                if ox0 < ox1 and oy0 < oy1:
                    vis[k][oy0 - s.y0:oy1 - s.y0, ox0 - s.x0:ox1 - s.x0] &= ~m[oy0 - y0:oy1 - y0, ox0 - x0:ox1 - x0]
            specs.append(Spec(shape, colour, base, cx, cy, r, rot, x0, y0, al))
            masks.append(m)
            vis.append(m.copy())
            done = True
            break
        if not done:
            continue
    return specs


# ---------------------------------------------------------------- kinds
PAPERS = [(238, 232, 214), (246, 245, 240), (192, 158, 114), (205, 205, 200), (34, 34, 38), (222, 214, 190)]


def kind_stamp(rng, W, H, n, tone):
    paper = jitter(rng, PAPERS[int(rng.integers(len(PAPERS)))], 6)
    bg = np.empty((H, W, 3), np.float32)
    bg[:] = paper
    grain = fine_noise(rng, H, W, 0.6) * 4 + smooth_noise(rng, H, W, max(20, min(W, H) / 4)) * 5
    bg += grain[..., None]
    # fibres
    fib = Image.new("L", (W, H), 0)
    dr = ImageDraw.Draw(fib)
    for _ in range(int(W * H / 1500)):
        x, y = rng.uniform(0, W), rng.uniform(0, H)
        a, ln = rng.uniform(0, np.pi), rng.uniform(3, 12)
        dr.line([(x, y), (x + ln * math.cos(a), y + ln * math.sin(a))], fill=int(rng.integers(40, 120)))
    bg -= (np.asarray(fib, np.float32) / 255 * 18 * (1 if paper.mean() > 100 else -1))[..., None]
    # faint stains / old impressions
    for _ in range(int(rng.integers(0, 3))):
        cx, cy, rr = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(0.05, 0.2) * min(W, H)
        yy, xx = np.ogrid[:H, :W]
        st = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * rr * rr)).astype(np.float32)
        bg -= (st * 10)[..., None] * np.array([0.6, 0.8, 1.0], np.float32)
    bg = np.clip(bg, 0, 255)
    specs = place(rng, W, H, n, bg)
    img = bg.copy()
    for s in specs:
        h, w = s.alpha.shape
        al = ndimage.gaussian_filter(s.alpha, 0.45)
        dens = 0.93 + 0.05 * smooth_noise(rng, h, w, max(4, s.r / 3))
        u = rng.uniform(0, 2 * np.pi)
        yy, xx = np.mgrid[:h, :w]
        t = ((xx + s.x0 - s.cx) * math.cos(u) + (yy + s.y0 - s.cy) * math.sin(u)) / max(s.r, 1)
        fade = rng.uniform(0.0, 0.6) * tone
        dens = dens * (1 - fade * np.clip(t - 0.25, 0, 1))
        voids = fine_noise(rng, h, w, 0.8) > 1.55 - 0.25 * (1 - tone)
        dens = np.where(voids, dens * 0.35, dens)
        inside = ndimage.distance_transform_edt(s.alpha >= 0.5)
        rim = (inside > 0) & (inside < 2.0)
        col = np.broadcast_to(s.base, (h, w, 3)).copy()
        col[rim] *= 0.88
        blend(img, s.x0, s.y0, np.clip(al * dens, 0, 1), col)
    return img, specs, None, dict(noise=2.5, q=(80, 94))


YARNS = [(150, 150, 155), (60, 70, 100), (230, 225, 205), (60, 95, 70), (120, 40, 55), (170, 140, 100),
         (80, 80, 82), (200, 190, 170)]


def knit_texture(rng, H, W, st):
    """Multiplicative shading of V-shaped knit stitches of width `st` px."""
    sh = st * rng.uniform(0.75, 0.95)
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    col, row = np.floor(xx / st), np.floor(yy / sh)
    u, v = xx / st - col, yy / sh - row
    # two legs: from the top corners down to the bottom middle
    d1 = np.abs((u - (0.08 + 0.42 * v)))
    d2 = np.abs((u - (0.92 - 0.42 * v)))
    leg = np.exp(-(np.minimum(d1, d2) / 0.2) ** 2)
    m = 0.78 + 0.32 * leg
    m -= 0.12 * np.exp(-((u - 0.5) / 0.07) ** 2) * (v > 0.55)
    cell = rng.normal(0, 0.035, (int(H / sh) + 2, int(W / st) + 2)).astype(np.float32)
    m += cell[row.astype(int), col.astype(int)]
    m += 0.05 * fine_noise(rng, H, W, 0.5)
    return m / np.median(m)


def kind_knit(rng, W, H, n, tone):
    yarn = jitter(rng, YARNS[int(rng.integers(len(YARNS)))], 10)
    st = max(3.0, min(W, H) / rng.uniform(45, 90))
    bg = np.empty((H, W, 3), np.float32)
    bg[:] = yarn
    bg += (smooth_noise(rng, H, W, st * 2) * 6)[..., None]
    bg += fine_noise(rng, H, W, 0.6)[..., None] * rng.uniform(3, 8, 3)
    if rng.random() < 0.4:        # a few stripes of a second yarn across the ground
        other = jitter(rng, YARNS[int(rng.integers(len(YARNS)))], 10)
        for _ in range(int(rng.integers(1, 4))):
            y = rng.uniform(0, H)
            hh = st * rng.integers(1, 3)
            bg[int(y):int(y + hh)] = other
    bg = np.clip(bg, 0, 255)
    specs = place(rng, W, H, n, bg, avoid=36)
    img = bg.copy()
    for s in specs:
        al = ndimage.gaussian_filter(s.alpha, 0.6)
        blend(img, s.x0, s.y0, al, s.base)
    tex = knit_texture(rng, H, W, st)
    amp = 0.7 + 0.3 * tone
    img = img * (1 + (tex - 1) * amp)[..., None]
    # fuzz: a slight halo blur of the whole knit
    img = 0.85 * img + 0.15 * ndimage.uniform_filter(img, (3, 3, 1))
    return np.clip(img, 0, 255), specs, None, dict(noise=3.0, q=(75, 92))


BACKDROPS = [(200, 196, 188), (90, 98, 110), (170, 185, 195), (225, 215, 200), (60, 62, 66), (150, 160, 140)]


def kind_origami(rng, W, H, n, tone):
    back = jitter(rng, BACKDROPS[int(rng.integers(len(BACKDROPS)))], 10)
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    lx, ly = rng.uniform(0, W), rng.uniform(-0.3, 0.5) * H
    light = 1.08 - 0.25 * np.sqrt((xx - lx) ** 2 + (yy - ly) ** 2) / math.hypot(W, H)
    bg = back * light[..., None] + (fine_noise(rng, H, W, 0.8) * 2.5)[..., None]
    bg = np.clip(bg, 0, 255).astype(np.float32)
    specs = place(rng, W, H, n, bg)
    img = bg.copy()
    sa = rng.uniform(0, 2 * np.pi)
    for s in specs:
        h, w = s.alpha.shape
        off = 2 + s.r * rng.uniform(0.05, 0.12)
        dx, dy = int(round(off * math.cos(sa))), int(round(off * math.sin(sa)))
        pad = int(off + s.r * 0.15 + 4)
        sh = np.zeros((h + 2 * pad, w + 2 * pad), np.float32)
        sh[pad + dy:pad + dy + h, pad + dx:pad + dx + w] = s.alpha
        sh = ndimage.gaussian_filter(sh, 1 + s.r * 0.06) * 0.35 * tone
        X0, Y0 = s.x0 - pad, s.y0 - pad
        a0, b0, a1, b1 = max(0, X0), max(0, Y0), min(W, X0 + w + 2 * pad), min(H, Y0 + h + 2 * pad)
        img[b0:b1, a0:a1] *= (1 - sh[b0 - Y0:b1 - Y0, a0 - X0:a1 - X0])[..., None]
        # facets
        ly_, lx_ = np.mgrid[:h, :w].astype(np.float32)
        px, py = lx_ + s.x0 - s.cx, ly_ + s.y0 - s.cy
        k = int(rng.integers(1, 4))
        fid = np.zeros((h, w), np.int32)
        crease = np.zeros((h, w), np.float32)
        for j in range(k):
            a = rng.uniform(0, np.pi)
            o = rng.uniform(-0.25, 0.25) * s.r
            e = px * math.sin(a) - py * math.cos(a) - o
            fid += (e > 0).astype(np.int32) << j
            crease += np.exp(-(e / 0.8) ** 2) * rng.choice([-1.0, 1.0])
        fac = 1 + rng.uniform(-0.13, 0.1, 1 << k).astype(np.float32) * tone
        f = fac[fid]
        f = f * (1 + 0.12 * np.clip(crease, -1, 1)) + 0.02 * fine_noise(rng, h, w, 0.6)
        col = s.base * f[..., None]
        edge = ndimage.distance_transform_edt(s.alpha >= 0.5)
        col[(edge > 0) & (edge < 1.5)] *= 1.06
        blend(img, s.x0, s.y0, s.alpha, np.clip(col, 0, 255))
    return img, specs, None, dict(noise=2.0, q=(82, 95))


GROUNDS = [(110, 125, 85), (95, 95, 100), (185, 170, 140), (225, 228, 232), (120, 100, 80)]


def kind_fog(rng, W, H, n, tone):
    fogc = jitter(rng, (205, 208, 212), 10)
    yh = rng.uniform(0.22, 0.45) * H
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    ground = jitter(rng, GROUNDS[int(rng.integers(len(GROUNDS)))], 12)
    sky_top = jitter(rng, (175, 185, 200), 12)
    img = np.empty((H, W, 3), np.float32)
    t = np.clip(yy / max(yh, 1), 0, 1)[..., None]
    img[:] = sky_top * (1 - t) + fogc * t
    g = yy > yh
    depth = (H - yh) / np.maximum(yy - yh, 1.0)
    rows = 0.5 + 0.5 * np.sin(depth * rng.uniform(6, 14) + xx * 0.0)
    gtex = (1 + 0.08 * (rows - 0.5) + 0.04 * fine_noise(rng, H, W, 0.7))
    img[g] = (ground * gtex[..., None])[g]
    # horizon silhouettes: trees or buildings
    sil = Image.new("L", (W, H), 0)
    dr = ImageDraw.Draw(sil)
    x = 0.0
    while x < W:
        ww = rng.uniform(0.03, 0.12) * W
        hh = rng.uniform(0.02, 0.12) * H
        if rng.random() < 0.5:
            dr.ellipse([x, yh - hh, x + ww, yh + hh * 0.3], fill=255)
        else:
            dr.rectangle([x, yh - hh, x + ww * 0.6, yh + 1], fill=255)
        x += ww * rng.uniform(0.6, 1.6)
    s_a = np.asarray(sil, np.float32)[..., None] / 255
    img = img * (1 - s_a) + s_a * jitter(rng, (70, 75, 70), 10)
    # poles at a few depths
    for _ in range(int(rng.integers(0, 4))):
        px = rng.uniform(0, W)
        pb = rng.uniform(yh + 5, H)
        ph = (pb - yh) * rng.uniform(1.5, 3)
        pw = max(1.0, (pb - yh) * 0.03)
        img[int(max(0, pb - ph)):int(pb), int(px):int(px + pw)] = (60, 58, 55)
    fy = np.clip(1 - (yy - yh) / max(H - yh, 1), 0, 1)
    fmax, fmin = rng.uniform(0.55, 0.8), rng.uniform(0.0, 0.12)
    fbg = np.where(yy <= yh, fmax, fmin + (fmax - fmin) * fy ** 1.6)
    fbg = np.clip(fbg + 0.08 * smooth_noise(rng, H, W, min(W, H) / 5), 0, 0.92)
    bg = img * (1 - fbg[..., None]) + fogc * fbg[..., None]
    bg = np.clip(bg, 0, 255).astype(np.float32)

    def scale_at(cy):
        tt = float(np.clip((cy - yh) / max(H - yh, 1), 0, 1))
        return 0.55 + 0.45 * tt
    specs = place(rng, W, H, n, bg, scale_at=scale_at, avoid=34)
    out = bg.copy()
    cap = 0.3 * tone
    for s in specs:
        bottom = s.cy + s.r
        tt = float(np.clip((bottom - yh) / max(H - yh, 1), 0, 1))
        want = fmin * 0.5 + (cap - fmin * 0.5) * (1 - tt) ** 1.4
        while want > 0.02 and not reads_as(s.base * (1 - want) + fogc * want, s.colour, 14, 22):
            want -= 0.03        # as much fog as its colour can take and still read
        s.extra = max(0.0, want)
        if bottom > yh:   # ground shadow
            sw, shh = s.r * 0.9, max(1.5, s.r * 0.15)
            a0, b0 = int(max(0, s.cx - sw - 3)), int(max(0, bottom - shh - 3))
            a1, b1 = int(min(W, s.cx + sw + 3)), int(min(H, bottom + shh + 3))
            if a0 < a1 and b0 < b1:
                y_, x_ = np.mgrid[b0:b1, a0:a1]
                e = np.exp(-(((x_ - s.cx) / sw) ** 2 + ((y_ - bottom) / shh) ** 2) * 2).astype(np.float32)
                out[b0:b1, a0:a1] *= (1 - 0.35 * (1 - s.extra) * e)[..., None]
    for s in specs:
        h, w = s.alpha.shape
        lit = 1 + 0.05 * smooth_noise(rng, h, w, max(4, s.r / 2))
        col = s.base * lit[..., None] * (1 - s.extra) + fogc * s.extra
        blend(out, s.x0, s.y0, ndimage.gaussian_filter(s.alpha, 0.3 + 1.5 * s.extra), np.clip(col, 0, 255))
    return out, specs, None, dict(noise=2.0, q=(78, 92))


WALLS = [(220, 214, 200), (180, 196, 205), (200, 200, 196), (150, 160, 140), (230, 225, 215), (120, 110, 100)]


def kind_motion(rng, W, H, n, tone):
    wall = jitter(rng, WALLS[int(rng.integers(len(WALLS)))], 10)
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    lx, ly = rng.uniform(0, W), rng.uniform(-0.5, 0.3) * H
    light = 1.1 - 0.35 * np.sqrt((xx - lx) ** 2 + (yy - ly) ** 2) / math.hypot(W, H)
    bg = wall * light[..., None] + (smooth_noise(rng, H, W, 6) * 3 + fine_noise(rng, H, W, 0.8) * 2)[..., None]
    if rng.random() < 0.6:       # skirting board
        yb = int(H * rng.uniform(0.85, 0.95))
        bg[yb:] = jitter(rng, (235, 232, 225), 10) * 0.95
        bg[yb:yb + 2] *= 0.7
    if rng.random() < 0.5:       # door frame edge
        xd = int(W * rng.choice([rng.uniform(0.02, 0.12), rng.uniform(0.88, 0.98)]))
        bg[:, xd:xd + max(3, W // 40)] = jitter(rng, (240, 238, 232), 8)
        bg[:, xd:xd + 1] *= 0.75
    bg = np.clip(bg, 0, 255).astype(np.float32)
    shear = rng.uniform(-0.05, 0.05) * tone
    wob, per, ph = rng.uniform(0, 3) * tone, rng.uniform(0.3, 1.0) * H, rng.uniform(0, 2 * np.pi)
    mx = int(abs(shear) * H / 2 + wob + 3)
    specs = place(rng, W, H, n, bg, region=(mx, 0, W - mx, H))
    img = bg.copy()
    for s in specs:
        h, w = s.alpha.shape
        g = 1 + 0.06 * smooth_noise(rng, h, w, max(4, s.r))
        blend(img, s.x0, s.y0, ndimage.gaussian_filter(s.alpha, 0.3), np.clip(s.base * g[..., None], 0, 255))
    xs = xx + shear * (yy - H / 2) + wob * np.sin(2 * np.pi * yy / per + ph)
    ys = yy.copy()
    dmin = min([2 * s.r for s in specs], default=40)
    blur = min(rng.uniform(2, 9) * tone, dmin / 6)
    return img, specs, (xs, ys), dict(noise=rng.uniform(3.5, 6.5), q=(68, 88), blur=blur,
                                       blur_dir=rng.uniform(0, np.pi))


MATS = [(200, 120, 120), (120, 170, 200), (140, 190, 140), (220, 200, 120), (170, 150, 200), (150, 150, 150),
        (90, 110, 150)]


def kind_fisheye(rng, W, H, n, tone):
    k = rng.uniform(0.15, 0.5) * tone
    D = math.hypot(W, H) / 2
    a, b = max(W, H) / 2 / D, min(W, H) / 2 / D
    s = 1 / (1 + k * a * a)
    vis_b = b * (1 + k * b * b) * s * D        # source half-extent along the short axis that stays visible
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    # play mat of foam tiles
    T = min(W, H) / rng.uniform(2.2, 4.5)
    cols = [jitter(rng, MATS[j], 12) for j in rng.choice(len(MATS), 3, replace=False)]
    ox, oy = rng.uniform(0, T), rng.uniform(0, T)
    ti, tj = np.floor((xx + ox) / T).astype(int), np.floor((yy + oy) / T).astype(int)
    idx = (ti + 2 * tj) % 3
    bg = np.stack(cols)[idx].astype(np.float32)
    fu, fv = ((xx + ox) / T) % 1, ((yy + oy) / T) % 1
    seam = np.minimum(np.minimum(fu, 1 - fu), np.minimum(fv, 1 - fv)) * T
    bg *= (1 - 0.25 * np.exp(-(seam / 1.2) ** 2))[..., None]
    bg += (fine_noise(rng, H, W, 0.9) * 3.5)[..., None]
    bg = np.clip(bg, 0, 255).astype(np.float32)
    if W >= H:
        region = (0, H / 2 - vis_b + 2, W, H / 2 + vis_b - 2)
    else:
        region = (W / 2 - vis_b + 2, 0, W / 2 + vis_b - 2, H)
    specs = place(rng, W, H, n, bg, region=region)
    img = bg.copy()
    for sp in specs:
        h, w = sp.alpha.shape
        inside = ndimage.distance_transform_edt(sp.alpha >= 0.5)
        col = np.broadcast_to(sp.base, (h, w, 3)).copy() * (1 + 0.03 * fine_noise(rng, h, w, 0.9))[..., None]
        col[(inside > 0) & (inside < 1.6)] *= 0.85
        blend(img, sp.x0, sp.y0, sp.alpha, np.clip(col, 0, 255))
    px, py = (xx - W / 2) / D, (yy - H / 2) / D
    f = (1 + k * (px * px + py * py)) * s
    xs, ys = W / 2 + px * f * D, H / 2 + py * f * D
    return img, specs, (xs, ys), dict(noise=3.0, q=(75, 92), lens=True, ca=rng.uniform(0, 1.0) * tone)


WALLPAPERS = [((40, 60, 110), (120, 150, 190)), ((230, 230, 235), (200, 205, 215)), ((60, 40, 70), (140, 90, 120)),
              ((30, 80, 70), (150, 190, 170)), ((240, 235, 220), (220, 200, 170)), ((50, 50, 55), (90, 95, 100))]


def homography(src, dst) -> np.ndarray:
    A = []
    for (x, y), (u, v) in zip(src, dst):
        A.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        A.append([0, 0, 0, x, y, 1, -v * x, -v * y])
    sol = np.linalg.solve(np.array(A, float), np.array(dst, float).reshape(-1))
    return np.append(sol, 1).reshape(3, 3)


def kind_screen(rng, W, H, n, tone):
    c1, c2 = WALLPAPERS[int(rng.integers(len(WALLPAPERS)))]
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    ang = rng.uniform(0, np.pi)
    t = ((xx * math.cos(ang) + yy * math.sin(ang)) / (W + H) + 0.5)[..., None]
    t = np.clip(t, 0, 1)
    bg = (np.asarray(c1, np.float32) * (1 - t) + np.asarray(c2, np.float32) * t).astype(np.float32)
    if rng.random() < 0.5:       # an app window with a title bar
        wx0, wy0 = rng.uniform(0.05, 0.3) * W, rng.uniform(0.05, 0.3) * H
        wx1, wy1 = rng.uniform(0.65, 0.95) * W, rng.uniform(0.7, 0.95) * H
        winc = jitter(rng, rng.choice([(245, 245, 245), (40, 42, 48), (225, 230, 240)]), 6)
        bg[int(wy0):int(wy1), int(wx0):int(wx1)] = winc
        bar = max(4, int(H * 0.05))
        bg[int(wy0):int(wy0) + bar, int(wx0):int(wx1)] = winc * 0.85
    # the screen is photographed: the screen image fills a keystoned quad inside the frame
    m = rng.uniform(0.02, 0.07, 8) * tone
    quad = [(W * m[0], H * m[1]), (W * (1 - m[2]), H * m[3]), (W * (1 - m[4]), H * (1 - m[5])),
            (W * m[6], H * (1 - m[7]))]
    src = [(0, 0), (W, 0), (W, H), (0, H)]
    Hm = homography(quad, src)       # output -> source
    den = Hm[2, 0] * xx + Hm[2, 1] * yy + Hm[2, 2]
    xs = (Hm[0, 0] * xx + Hm[0, 1] * yy + Hm[0, 2]) / den
    ys = (Hm[1, 0] * xx + Hm[1, 1] * yy + Hm[1, 2]) / den
    specs = place(rng, W, H, n, bg, region=(3, 3, W - 3, H - 3))
    img = bg.copy()
    for s in specs:
        blend(img, s.x0, s.y0, s.alpha, s.base)
    # LCD sub-pixel stripes and row gaps (in screen pixels of pitch p)
    p = rng.uniform(2.1, 3.6)
    amp = rng.uniform(0.08, 0.16) * tone
    u = (xx / p) % 1.0
    sub = np.stack([np.exp(-((((u - c) + 0.5) % 1 - 0.5) / 0.2) ** 2) for c in (1 / 6, 0.5, 5 / 6)], -1)
    sub = sub / sub.mean((0, 1), keepdims=True)
    rows = 1 - amp * 0.8 * np.exp(-((((yy / p) % 1) - 0.0) / 0.15) ** 2)
    img = img * (1 + amp * (sub - 1)) * rows[..., None]
    # moire fringes
    fr = rng.uniform(0.01, 0.04)
    a2 = rng.uniform(0, np.pi)
    warp = smooth_noise(rng, H, W, min(W, H) / 3) * rng.uniform(1, 3)
    phase = (xx * math.cos(a2) + yy * math.sin(a2)) * fr * 2 * np.pi + warp
    mo = np.stack([np.cos(phase + c) for c in (0, 2.1, 4.2)], -1)
    img = img * (1 + rng.uniform(0.03, 0.08) * tone * mo)
    return np.clip(img, 0, 255).astype(np.float32), specs, (xs, ys), dict(
        noise=3.0, q=(72, 90), bezel=True, defocus=rng.uniform(0.3, 0.8),
        glare=rng.uniform(0.04, 0.16) * tone)


KIND_FN = {"stamp": kind_stamp, "knit": kind_knit, "origami": kind_origami, "fog": kind_fog,
           "motion": kind_motion, "fisheye": kind_fisheye, "screen": kind_screen}


# ---------------------------------------------------------------- warps, finishing, labels
def warp_image(img, xs, ys, W, H):
    out = np.empty_like(img)
    for c in range(3):
        out[..., c] = ndimage.map_coordinates(img[..., c], [ys, xs], order=1, mode="nearest")
    outside = (xs < -0.5) | (xs > W - 0.5) | (ys < -0.5) | (ys > H - 0.5)
    return out, outside


def warp_alpha(s: Spec, xs, ys):
    """The object's coverage carried through the output->source map: (x0, y0, alpha) in the output."""
    h, w = s.alpha.shape
    sel = (xs >= s.x0 - 1) & (xs <= s.x0 + w) & (ys >= s.y0 - 1) & (ys <= s.y0 + h)
    rows, cols = np.nonzero(sel.any(1))[0], np.nonzero(sel.any(0))[0]
    if len(rows) == 0:
        return 0, 0, np.zeros((1, 1), np.float32)
    y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    a = ndimage.map_coordinates(s.alpha, [ys[y0:y1, x0:x1] - s.y0, xs[y0:y1, x0:x1] - s.x0], order=1,
                                mode="constant", cval=0.0)
    return int(x0), int(y0), a


def finish(rng, img, fx, W, H):
    if fx.get("blur"):
        L, th = fx["blur"], fx["blur_dir"]
        K = max(2, int(math.ceil(L)) + 1)
        acc = np.zeros_like(img)
        for t in np.linspace(-L / 2, L / 2, K):
            acc += shift2d(img, int(round(t * math.cos(th))), int(round(t * math.sin(th))))
        img = acc / K
    if fx.get("defocus"):
        img = ndimage.gaussian_filter(img, (fx["defocus"], fx["defocus"], 0))
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    if fx.get("glare"):
        a = rng.uniform(0, np.pi)
        d = (xx - rng.uniform(0, W)) * math.cos(a) + (yy - rng.uniform(0, H)) * math.sin(a)
        g = np.exp(-(d / (0.25 * min(W, H))) ** 2) * fx["glare"]
        img = img + (255 - img) * g[..., None]
    if fx.get("lens"):
        r2 = ((xx - W / 2) ** 2 + (yy - H / 2) ** 2) / ((W / 2) ** 2 + (H / 2) ** 2)
        img = img * (1 - 0.25 * r2 ** 1.5)[..., None]
    img = img + rng.normal(0, fx.get("noise", 2.5), img.shape).astype(np.float32)
    im = Image.fromarray(np.clip(img, 0, 255).round().astype(np.uint8), "RGB")
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=int(rng.integers(*fx.get("q", (78, 93)))))
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def draw_scene(kind: str, rng, W: int, H: int, n: int, tone: float):
    """One attempt: (scene objects, image) or None when a check fails."""
    img, specs, warp, fx = KIND_FN[kind](rng, W, H, n, tone)
    full = []      # (x0, y0, bool mask) in output pixels
    if warp is not None:
        xs, ys = warp
        if fx.get("ca"):
            # chromatic aberration: red and blue sampled at slightly different radial scales
            ca = fx["ca"]
            cx, cy = W / 2, H / 2
            out = np.empty_like(img)
            for c, sc in ((0, 1 + ca / max(W, H)), (1, 1.0), (2, 1 - ca / max(W, H))):
                out[..., c] = ndimage.map_coordinates(img[..., c], [cy + (ys - cy) * sc, cx + (xs - cx) * sc],
                                                      order=1, mode="nearest")
            outside = (xs < -0.5) | (xs > W - 0.5) | (ys < -0.5) | (ys > H - 0.5)
            img = out
        else:
            img, outside = warp_image(img, xs, ys, W, H)
        if fx.get("lens"):
            soft = ndimage.gaussian_filter(outside.astype(np.float32), 2.0)
            img = img * (1 - soft[..., None]) + soft[..., None] * np.float32(8)
        if fx.get("bezel"):
            desk = jitter(rng, (120, 105, 90), 20)
            bez = ndimage.binary_dilation(~outside, iterations=max(3, min(W, H) // 40)) & outside
            img[outside] = desk
            img[bez] = (18, 18, 20)
        for s in specs:
            x0, y0, a = warp_alpha(s, xs, ys)
            full.append((x0, y0, a >= 0.5))
    else:
        for s in specs:
            full.append((s.x0, s.y0, s.alpha >= 0.5))
    image = finish(rng, img, fx, W, H)
    arr = np.asarray(image)
    short = min(W, H)
    boxes = []
    for x0, y0, m in full:
        if not m.any():
            return None
        rows, cols = np.nonzero(m.any(1))[0], np.nonzero(m.any(0))[0]
        bx0, by0, bx1, by1 = x0 + cols[0], y0 + rows[0], x0 + cols[-1] + 1, y0 + rows[-1] + 1
        if bx0 < 1 or by0 < 1 or bx1 > W - 1 or by1 > H - 1:
            return None
        boxes.append((bx0, by0, bx1, by1, m[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].copy()))
    covered = np.zeros((H, W), bool)
    for bx0, by0, bx1, by1, m in boxes:
        covered[by0:by1, bx0:bx1] |= m
    objects = []
    for k, (s, (bx0, by0, bx1, by1, m)) in enumerate(zip(specs, boxes)):
        vis = m.copy()
        for ax0, ay0, ax1, ay1, lm in boxes[k + 1:]:
            ix0, iy0, ix1, iy1 = max(bx0, ax0), max(by0, ay0), min(bx1, ax1), min(by1, ay1)
            if ix0 < ix1 and iy0 < iy1:
                vis[iy0 - by0:iy1 - by0, ix0 - bx0:ix1 - bx0] &= ~lm[iy0 - ay0:iy1 - ay0, ix0 - ax0:ix1 - ax0]
        if vis.sum() < 0.75 * m.sum():
            return None
        size_px = mask_size(m)
        if size_px < 10 or size_px > 0.40 * short:
            return None
        dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
        core = vis & (dist >= 0.4 * dist.max())
        med = np.median(arr[by0:by1, bx0:bx1][core if core.sum() >= 8 else vis], 0)
        if s.colour in COLOURS:
            if not reads_as(med, s.colour, 8.0, 32.0):
                return None
        else:
            if read_colour(med) in COLOURS or not reads_as(med, s.colour, 5.0, 40.0):
                return None
        fullm = np.zeros((H, W), bool)
        fullm[by0:by1, bx0:bx1] = m
        ring = ndimage.binary_dilation(fullm, iterations=3) & ~covered
        if ring.sum() >= 8:
            around = arr[ring].astype(np.float64).mean(0)
            if np.linalg.norm(to_lab(med) - to_lab(around)) < 14:
                return None
        iy, ix = np.unravel_index(int(np.argmax(dist)), dist.shape)
        rgb = tuple(int(round(v)) for v in med)
        objects.append(SceneObject(
            shape=s.shape, colour=s.colour, box=(bx0 / W, by0 / H, bx1 / W, by1 / H),
            point=((bx0 + ix + 0.5) / W, (by0 + iy + 0.5) / H), rgb=rgb, tilt=tilt_of(s.shape, s.rot),
            size=size_px / short, mask=m))
    return image, tuple(objects)


def pick_query(rng, objects) -> Query:
    known = [o for o in objects if o.known]
    vs, vc = list(SHAPES), list(COLOURS)
    form = rng.choice(["cs", "cs", "s", "c"])
    if known and rng.random() >= 0.18:
        o = known[int(rng.integers(len(known)))]
        text = {"cs": f"{o.colour} {o.shape}", "s": o.shape, "c": o.colour}[form]
        return Query(text, matches(text, objects))
    # absent on purpose: a near miss of something present when possible
    for _ in range(60):
        if objects and rng.random() < 0.7:
            o = objects[int(rng.integers(len(objects)))]
            c = o.colour if o.colour in COLOURS and rng.random() < 0.5 else str(rng.choice(vc))
            s = o.shape if o.shape in SHAPES and c != o.colour else str(rng.choice(vs))
        else:
            c, s = str(rng.choice(vc)), str(rng.choice(vs))
        text = {"cs": f"{c} {s}", "s": s, "c": c}[form]
        if not matches(text, objects):
            return Query(text, ())
    text = f"{rng.choice(vc)} {rng.choice(vs)}"
    return Query(text, matches(text, objects))


def fourteenth_scene(seed: int = DEFAULT_SEED, i: int = 0) -> tuple[Scene, Query, int]:
    """Scene i of the batch for `seed` (independent of the batch size): (scene, query, attempts used)."""
    W, H, n = canvas_and_count(seed, i)
    kind = kind_for(seed, i)
    for attempt in range(60):
        tone = 1.0 if attempt < 10 else max(0.25, 1.0 - 0.06 * (attempt - 9))
        rng = np.random.default_rng([seed, i, attempt, 1414])
        out = draw_scene(kind, rng, W, H, n, tone)
        if out is None:
            continue
        image, objects = out
        q = pick_query(np.random.default_rng([seed, i, attempt, 99]), objects)
        return Scene(image=image, objects=objects, background=kind), q, attempt + 1
    raise RuntimeError(f"scene {i} of seed {seed} ({kind}) failed every attempt")


def fourteenth_batch(seed: int = DEFAULT_SEED, n: int = 300) -> list[tuple[Scene, Query]]:
    return [fourteenth_scene(seed, i)[:2] for i in range(n)]


if __name__ == "__main__":
    from docs.experiments.scene_sample import sample

    sample(fourteenth_scene, __doc__, DEFAULT_SEED)
