"""Seventh scene set: "photos and screenshots of shapes people send".

Written in session 38 as a blind evaluation set, without reference to the training generator or the
other evaluation sets; it chose among session 51's candidates, so its failures have been read. Since
session 53 it is also a training source (`engine.train --foreign-from`, engine/training/foreign/__init__.py),
so its figures are no longer blind.
Each scene imitates something a user might photograph or screenshot and then ask
"find the red star":

* settings (``Scene.background``), picked uniformly:
  - ``notebook``   off-white paper with faint blue-grey squared grid, paper grain;
                   shapes look like paper cut-outs with a soft drop shadow.
  - ``desk``       warm wood-grain table top (tan stripes, warped); shapes are
                   stickers with a soft drop shadow.
  - ``whiteboard`` bright board with a diagonal glare and faint grey smudges;
                   shapes are marker-drawn: fill plus a darker same-hue outline
                   (objects with radius >= 10 px).
  - ``slide``      presentation screenshot: plain light/dark slide colour, a title
                   band with grey "text" bars; flat fills, sometimes a thin
                   darker outline; only light JPEG, no camera effects.
  - ``felt``       felt board (grey / beige / dark blue-grey fibre noise); shapes
                   are felt cut-outs with grain in the fill and a shadow.
  - ``chalkboard`` dark green-grey board with chalk smudges; painted shapes.
* shapes are polygons rendered with 4x supersampling (anti-aliased edges); the
  mask is coverage >= 0.5 at pixel resolution, box is the tight pixel box of
  that mask; each fill has a mild linear shading gradient (+-3 %).
  Rotation: ~40 % near upright (+-3 deg), else uniform; tilt = angular distance
  to the nearest upright pose under the shape's symmetry.  Square = equal
  diagonals at any rotation; diamond = rhombus, short/long diagonal 0.55-0.70;
  star inner/outer radius 0.40-0.50; cross arm half-width 0.28-0.36 of the arm.
* colours are sampled in HSV inside conservative per-name boxes (e.g. orange hue
  23-32 deg, full saturation; white s < 0.05, v > 0.93).
  Distractors: out-of-vocabulary colours grey / pink (pale) / brown (dark), and
  shapes ellipse (axes 0.45-0.6), rectangle (aspect 0.4-0.6), crescent, heart,
  arrow, semicircle.  Shape-only queries never see that shape in a distractor
  colour; colour-only queries never see a distractor shape in that colour.
* photo settings then get a global illumination ramp plus mild vignette (gain
  clipped to 0.90-1.06), small colour cast (+-3 %), sensor noise (sigma
  1.5-4.5), blur (sigma <= 0.7)
  and JPEG (q 70-92); slide gets JPEG q 85-95 only.  Geometry is untouched by
  these effects, so masks/boxes/points stay exact.
* placement: each object keeps >= 78 % of its pixels visible, same-coloured
  objects never touch, and an object is rejected if > 15 % of a 2-px ring
  around it has a colour within RGB distance 75 of its own (no camouflage).
  Diameter >= max(5 % of short side, 13 px); objects stay inside the image.
  Point = a random visible pixel with >= 70 % of the maximal inner distance
  (and off the outline).  Drop shadows fall on the ground only, not on objects.
* query: form colour+shape 45 % / shape 40 % / colour 15 %; ~20 % planned
  empty; match counts 1-10 skewed to 1-4; every scene also gets 1-4 near misses
  (confusable shape such as square<->diamond, circle<->hexagon/ellipse, or
  confusable colour such as red<->orange/pink) plus 0-14 random extras.
  Image short side 200-520 px, aspect 1-2 either orientation.
"""
import colorsys
import io
import math
import sys

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

from engine.training.scenes import Query, Scene, SceneObject

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
DISTRACTOR_SHAPES = ("ellipse", "rectangle", "crescent", "heart", "arrow", "semicircle")
DISTRACTOR_COLOURS = ("grey", "pink", "brown")
SETTINGS = ("notebook", "desk", "whiteboard", "slide", "felt", "chalkboard")
FORMS = ("colour shape", "shape", "colour")
FORM_P = (0.45, 0.40, 0.15)
EMPTY_P = 0.20
COUNT_P = np.array([0.30, 0.25, 0.17, 0.10, 0.05, 0.04, 0.03, 0.025, 0.02, 0.015])
COUNT_P = COUNT_P / COUNT_P.sum()
MAX_OBJECTS = 25
MIN_VISIBLE = 0.78
SS = 4  # supersampling factor

# HSV boxes: (hue ranges in degrees, saturation range, value range)
COLOUR_HSV = {
    "red": ((-6, 5), (0.78, 0.95), (0.78, 0.95)),
    "green": ((105, 135), (0.65, 0.9), (0.52, 0.78)),
    "blue": ((212, 232), (0.72, 0.95), (0.65, 0.92)),
    "yellow": ((50, 57), (0.78, 0.95), (0.92, 1.0)),
    "purple": ((268, 286), (0.58, 0.8), (0.5, 0.72)),
    "orange": ((23, 32), (0.9, 1.0), (0.94, 1.0)),
    "white": ((0, 360), (0.0, 0.04), (0.94, 1.0)),
    "black": ((0, 360), (0.0, 0.2), (0.05, 0.14)),
    "grey": ((0, 360), (0.0, 0.04), (0.46, 0.58)),
    "pink": ((335, 350), (0.28, 0.4), (0.95, 1.0)),
    "brown": ((20, 28), (0.62, 0.75), (0.33, 0.42)),
}
NEAR_SHAPES = {
    "circle": ("hexagon", "ellipse", "semicircle"), "square": ("diamond", "rectangle"),
    "diamond": ("square", "rectangle"), "hexagon": ("circle", "ellipse"),
    "star": ("cross", "heart"), "cross": ("star", "square", "arrow"),
    "triangle": ("diamond", "arrow", "semicircle"),
}
NEAR_COLOURS = {
    "red": ("orange", "pink", "purple"), "orange": ("yellow", "red", "brown"),
    "yellow": ("orange", "white"), "green": ("blue", "yellow"),
    "blue": ("purple", "green"), "purple": ("blue", "pink", "red"),
    "white": ("grey", "yellow", "pink"), "black": ("grey", "brown", "blue"),
}
SYMMETRY = {"circle": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90,
            "hexagon": 60, "diamond": 180}


# --------------------------------------------------------------------------- colours
def sample_rgb(rng, name):
    (h0, h1), (s0, s1), (v0, v1) = COLOUR_HSV[name]
    h = (rng.uniform(h0, h1) % 360) / 360.0
    r, g, b = colorsys.hsv_to_rgb(h, rng.uniform(s0, s1), rng.uniform(v0, v1))
    return (int(round(r * 255)), int(round(g * 255)), int(round(b * 255)))


def rgb_reads_as(rgb):
    """Name of the HSV box an rgb falls in (with tolerance), or None."""
    h, s, v = colorsys.rgb_to_hsv(*(c / 255.0 for c in rgb))
    hd = h * 360
    for name, ((h0, h1), (s0, s1), (v0, v1)) in COLOUR_HSV.items():
        if not (s0 - 0.02 <= s <= s1 + 0.02 and v0 - 0.02 <= v <= v1 + 0.02):
            continue
        if h1 - h0 >= 360 or (h0 - 1.5 <= hd <= h1 + 1.5) or (h0 - 1.5 <= hd - 360 <= h1 + 1.5):
            return name
    return None


# --------------------------------------------------------------------------- geometry
def _ngon(n, start_deg, radius=1.0):
    a = np.deg2rad(start_deg + 360.0 * np.arange(n) / n)
    return np.stack([radius * np.cos(a), radius * np.sin(a)], 1)


def shape_polys(rng, shape):
    """List of (points Nx2 in units of circumradius, y down, fill 255/0) at upright pose."""
    if shape == "circle":
        return [(_ngon(96, 0), 255)]
    if shape == "square":
        return [(_ngon(4, 45), 255)]
    if shape == "triangle":
        return [(_ngon(3, -90), 255)]
    if shape == "hexagon":
        return [(_ngon(6, 0), 255)]
    if shape == "star":
        inner = rng.uniform(0.40, 0.50)
        a = np.deg2rad(-90 + 36.0 * np.arange(10))
        rad = np.where(np.arange(10) % 2 == 0, 1.0, inner)
        return [(np.stack([rad * np.cos(a), rad * np.sin(a)], 1), 255)]
    if shape == "cross":
        w = rng.uniform(0.28, 0.36)  # half-width / arm length
        L = 1.0 / math.hypot(1.0, w)
        w = w * L
        p = [(-w, -L), (w, -L), (w, -w), (L, -w), (L, w), (w, w), (w, L), (-w, L),
             (-w, w), (-L, w), (-L, -w), (-w, -w)]
        return [(np.array(p), 255)]
    if shape == "diamond":
        q = rng.uniform(0.55, 0.70)
        return [(np.array([(0, -1), (q, 0), (0, 1), (-q, 0)], float), 255)]
    if shape == "ellipse":
        b = rng.uniform(0.45, 0.6)
        t = np.linspace(0, 2 * np.pi, 96, endpoint=False)
        return [(np.stack([np.cos(t), b * np.sin(t)], 1), 255)]
    if shape == "rectangle":
        a = rng.uniform(0.4, 0.6)
        c = 1.0 / math.hypot(1.0, a)
        return [(np.array([(-c, -a * c), (c, -a * c), (c, a * c), (-c, a * c)]), 255)]
    if shape == "semicircle":
        t = np.linspace(np.pi, 2 * np.pi, 48)
        pts = np.stack([np.cos(t), np.sin(t) + 0.4], 1)
        return [(pts / np.abs(pts).max(), 255)]
    if shape == "crescent":
        off = rng.uniform(0.4, 0.5)
        return [(_ngon(96, 0), 255), (_ngon(96, 0, 0.9) + [off, -0.1], 0)]
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 120, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        pts = np.stack([x, y + 2.5], 1)
        return [(pts / np.hypot(pts[:, 0], pts[:, 1]).max(), 255)]
    if shape == "arrow":
        sh, hw, hl = rng.uniform(0.14, 0.2), rng.uniform(0.45, 0.55), rng.uniform(0.45, 0.6)
        p = [(-1, -sh), (1 - hl, -sh), (1 - hl, -hw), (1, 0), (1 - hl, hw), (1 - hl, sh), (-1, sh)]
        return [(np.array(p, float), 255)]
    raise ValueError(shape)


def render_coverage(polys, radius, angle_deg, frac):
    """Anti-aliased coverage patch (float 0..1) and the centre offset inside it."""
    pad = int(math.ceil(radius * 0.25)) + 5
    size = int(math.ceil(2 * radius)) + 2 * pad
    cx, cy = size / 2.0 + frac[0], size / 2.0 + frac[1]
    a = math.radians(angle_deg)
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    img = Image.new("L", (size * SS, size * SS), 0)
    dr = ImageDraw.Draw(img)
    for pts, fill in polys:
        p = (pts @ rot.T) * radius
        p = (p + [cx, cy]) * SS
        dr.polygon([tuple(q) for q in p], fill=fill)
    cov = np.asarray(img, np.float32).reshape(size, SS, size, SS).mean((1, 3)) / 255.0
    return cov


def tilt_of(shape, angle):
    sym = SYMMETRY.get(shape, 360)
    if sym == 0:
        return 0.0
    m = angle % sym
    return float(min(m, sym - m))


# --------------------------------------------------------------------------- backgrounds
def smooth_noise(rng, h, w, cell):
    gh, gw = max(2, h // cell + 2), max(2, w // cell + 2)
    g = rng.standard_normal((gh, gw)).astype(np.float32)
    im = Image.fromarray(g, mode="F").resize((w, h), Image.BICUBIC)
    return np.asarray(im, np.float32)


def make_background(rng, setting, h, w):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    if setting == "notebook":
        base = np.array([246, 244, 236], np.float32) + rng.uniform(-6, 4, 3)
        bg = np.broadcast_to(base, (h, w, 3)).copy()
        bg += smooth_noise(rng, h, w, 24)[..., None] * 3 + rng.normal(0, 2, (h, w, 1))
        g = int(rng.integers(14, 30))
        ox, oy = rng.integers(0, g, 2)
        line = ((xx.astype(int) - ox) % g == 0) | ((yy.astype(int) - oy) % g == 0)
        bg[line] = bg[line] * 0.55 + np.array([175, 195, 225], np.float32) * 0.45
    elif setting == "desk":
        base = np.array([178, 136, 96], np.float32) * rng.uniform(0.9, 1.1)
        warp = smooth_noise(rng, h, w, 60) * 0.8
        horiz = rng.random() < 0.5
        coord = yy if horiz else xx
        period = rng.uniform(10, 22)
        grain = np.sin(2 * np.pi * (coord / period + warp)) * 0.5 + 0.5
        fine = smooth_noise(rng, h, w, 3) if horiz else smooth_noise(rng, h, w, 3)
        shade = 1.0 - 0.12 * grain + 0.03 * fine + 0.05 * smooth_noise(rng, h, w, 80)
        bg = base * shade[..., None]
    elif setting == "whiteboard":
        base = np.array([236, 239, 241], np.float32) + rng.uniform(-5, 3, 3)
        d = (xx / w * rng.uniform(0.5, 1.5) + yy / h) / 2.0
        glare = np.exp(-((d - rng.uniform(0.2, 0.8)) ** 2) / 0.02) * rng.uniform(6, 14)
        smudge = np.clip(smooth_noise(rng, h, w, 50) - 0.5, 0, None) * rng.uniform(3, 7)
        bg = base + (glare - smudge)[..., None]
        bg += rng.normal(0, 1.0, (h, w, 1))
    elif setting == "slide":
        palette = [(250, 250, 250), (232, 238, 247), (246, 241, 228), (38, 44, 58), (224, 229, 226)]
        base = np.array(palette[rng.integers(len(palette))], np.float32)
        bg = np.broadcast_to(base, (h, w, 3)).copy()
        dark = base.mean() < 128
        band = int(h * rng.uniform(0.1, 0.16))
        accents = [(60, 80, 110), (90, 90, 100), (200, 205, 215), (20, 90, 100)]
        acc = np.array(accents[rng.integers(len(accents))], np.float32)
        bg[:band] = acc
        tcol = np.array([235, 235, 235] if acc.mean() < 140 else [70, 70, 70], np.float32)
        x = int(w * 0.05)
        th = max(3, band // 4)
        for _ in range(int(rng.integers(2, 5))):
            tw = int(w * rng.uniform(0.06, 0.16))
            if x + tw > w * 0.9:
                break
            bg[band // 2 - th // 2: band // 2 - th // 2 + th, x:x + tw] = tcol
            x += tw + int(w * 0.02)
        if rng.random() < 0.5:  # thin footer rule
            yf = int(h * 0.94)
            bg[yf:yf + 1, int(w * 0.05):int(w * 0.95)] = [150, 150, 150] if not dark else [110, 110, 120]
    elif setting == "felt":
        palette = [(132, 132, 128), (196, 178, 150), (70, 78, 96), (64, 110, 92)]
        base = np.array(palette[rng.integers(len(palette))], np.float32)
        fib = rng.normal(0, 1, (h, w)).astype(np.float32)
        fib = ndimage.uniform_filter1d(fib, 3, axis=int(rng.integers(2)))
        bg = base * (1 + 0.05 * fib + 0.04 * smooth_noise(rng, h, w, 40))[..., None]
    elif setting == "chalkboard":
        base = np.array([44, 62, 52], np.float32) * rng.uniform(0.85, 1.15)
        smudge = np.clip(smooth_noise(rng, h, w, 40) - 0.3, 0, None) * rng.uniform(5, 10)
        bg = base + smudge[..., None] + rng.normal(0, 2, (h, w, 1))
    else:
        raise ValueError(setting)
    return np.clip(bg, 0, 255).astype(np.float32)


def photo_effects(rng, img, setting):
    h, w = img.shape[:2]
    if setting != "slide":
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        ang = rng.uniform(0, 2 * np.pi)
        ramp = (np.cos(ang) * (xx / w - 0.5) + np.sin(ang) * (yy / h - 0.5))
        lo, hi = rng.uniform(0.92, 0.98), rng.uniform(1.0, 1.05)
        light = (lo + hi) / 2 + ramp * (hi - lo)
        r2 = ((xx / w - 0.5) ** 2 + (yy / h - 0.5) ** 2) / 0.5
        light = np.clip(light * (1 - rng.uniform(0.0, 0.06) * r2), 0.9, 1.06)
        cast = 1 + rng.uniform(-0.03, 0.03, 3)
        img = img * light[..., None] * cast
        sig = rng.uniform(0, 0.7)
        if sig > 0.25:
            img = ndimage.gaussian_filter(img, (sig, sig, 0))
        img = img + rng.normal(0, rng.uniform(1.5, 4.5), img.shape).astype(np.float32)
        q = int(rng.integers(70, 93))
    else:
        q = int(rng.integers(85, 96))
    pil = Image.fromarray(np.clip(np.round(img), 0, 255).astype(np.uint8), "RGB")
    buf = io.BytesIO()
    pil.save(buf, "JPEG", quality=q)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


# --------------------------------------------------------------------------- queries
def matches_query(form, tshape, tcolour, shape, colour):
    if form == "colour shape":
        return shape == tshape and colour == tcolour
    if form == "shape":
        return shape == tshape and colour in COLOURS
    return colour == tcolour and shape in SHAPES


def forbidden(form, tshape, tcolour, shape, colour):
    if form == "shape" and shape == tshape and colour not in COLOURS:
        return True
    if form == "colour" and colour == tcolour and shape not in SHAPES:
        return True
    return False


def query_text(form, tshape, tcolour):
    return {"colour shape": f"{tcolour} {tshape}", "shape": tshape, "colour": tcolour}[form]


def sort_key(o):
    return (min(int(o.point[1] * 8), 7), o.point[0])


def plan_scene(rng):
    form = FORMS[rng.choice(3, p=FORM_P)]
    tshape = SHAPES[rng.integers(len(SHAPES))]
    tcolour = COLOURS[rng.integers(len(COLOURS))]
    empty = rng.random() < EMPTY_P
    k = 0 if empty else int(rng.choice(len(COUNT_P), p=COUNT_P)) + 1
    plan = []
    for _ in range(k):
        if form == "colour shape":
            plan.append((tshape, tcolour))
        elif form == "shape":
            plan.append((tshape, COLOURS[rng.integers(len(COLOURS))]))
        else:
            plan.append((SHAPES[rng.integers(len(SHAPES))], tcolour))

    def ok(s, c):
        return not matches_query(form, tshape, tcolour, s, c) and not forbidden(form, tshape, tcolour, s, c)

    n_near = int(rng.integers(2, 5) if empty else rng.integers(1, 4))
    tries = 0
    while n_near > 0 and tries < 50:
        tries += 1
        if form == "colour shape":
            if rng.random() < 0.5:
                s, c = tshape, str(rng.choice(NEAR_COLOURS[tcolour] + COLOURS))
            else:
                s, c = str(rng.choice(NEAR_SHAPES[tshape] + SHAPES)), tcolour
        elif form == "shape":
            s = str(rng.choice(NEAR_SHAPES[tshape]))
            c = COLOURS[rng.integers(len(COLOURS))] if s in SHAPES or rng.random() < 0.7 else \
                DISTRACTOR_COLOURS[rng.integers(3)]
        else:
            c = str(rng.choice(NEAR_COLOURS[tcolour]))
            s = SHAPES[rng.integers(len(SHAPES))] if rng.random() < 0.6 else \
                DISTRACTOR_SHAPES[rng.integers(len(DISTRACTOR_SHAPES))]
        if ok(s, c):
            plan.append((s, c))
            n_near -= 1
    n_extra = int(rng.integers(0, 8)) if rng.random() < 0.8 else int(rng.integers(8, 15))
    n_extra = min(n_extra, MAX_OBJECTS - len(plan))
    while n_extra > 0:
        s = SHAPES[rng.integers(7)] if rng.random() < 0.75 else DISTRACTOR_SHAPES[rng.integers(6)]
        c = COLOURS[rng.integers(8)] if rng.random() < 0.8 else DISTRACTOR_COLOURS[rng.integers(3)]
        if ok(s, c):
            plan.append((s, c))
            n_extra -= 1
    plan = plan[:MAX_OBJECTS]
    order = rng.permutation(len(plan))
    return form, tshape, tcolour, [plan[i] for i in order]


# --------------------------------------------------------------------------- scene
def _colour_dist(a, b):
    return np.sqrt(((np.asarray(a, np.float32) - np.asarray(b, np.float32)) ** 2).sum(-1))


def make_scene(rng):
    setting = SETTINGS[rng.integers(len(SETTINGS))]
    short = int(rng.integers(200, 521))
    longs = int(min(900, round(short * rng.uniform(1.0, 2.0))))
    w, h = (longs, short) if rng.random() < 0.6 else (short, longs)
    form, tshape, tcolour, plan = plan_scene(rng)
    canvas = make_background(rng, setting, h, w)
    owner = np.full((h, w), -1, np.int32)
    placed = []  # dicts
    n = len(plan)
    smin = max(0.05, 13.0 / short)
    smax = max(smin * 1.6, min(0.34, 0.95 / math.sqrt(n + 2)))
    shadow = setting in ("notebook", "desk", "felt")
    outline = setting == "whiteboard" or (setting == "slide" and rng.random() < 0.4)
    light_dir = rng.uniform(0, 2 * np.pi)
    for shape, cname in plan:
        done = False
        for attempt in range(4):
            size = float(np.exp(rng.uniform(np.log(smin), np.log(smax))))
            radius = size * short / 2.0
            angle = float(rng.uniform(-3, 3)) if rng.random() < 0.4 else float(rng.uniform(0, 360))
            if shape == "circle":
                angle = 0.0
            polys = shape_polys(rng, shape)
            cov = render_coverage(polys, radius, angle, rng.uniform(0, 1, 2))
            mask = cov >= 0.5
            if not mask.any():
                continue
            rows, cols = np.nonzero(mask)
            r0, r1, c0, c1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
            if max(r1 - r0, c1 - c0) < 12:
                continue
            rgb = sample_rgb(rng, cname)
            ps = cov.shape[0]
            ring_local = ndimage.binary_dilation(mask, iterations=2) & ~mask
            for _ in range(12):
                # patch top-left so that the mask stays inside the image with 2px margin
                oy = int(rng.integers(2 - r0, h - 2 - r1 + 1)) if h - 4 > r1 - r0 else None
                ox = int(rng.integers(2 - c0, w - 2 - c1 + 1)) if w - 4 > c1 - c0 else None
                if oy is None or ox is None:
                    break
                y0, x0 = max(oy, 0), max(ox, 0)
                y1, x1 = min(oy + ps, h), min(ox + ps, w)
                sl = (slice(y0, y1), slice(x0, x1))
                lm = mask[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
                lring = ring_local[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
                own = owner[sl]
                covered = own[lm]
                bad = False
                if covered.size and (covered >= 0).any():
                    ids, cnt = np.unique(covered[covered >= 0], return_counts=True)
                    for j, c in zip(ids, cnt):
                        p = placed[j]
                        if p["vis"] - c < MIN_VISIBLE * p["area"]:
                            bad = True
                            break
                if bad:
                    continue
                ring_owners = own[lring]
                ro = np.unique(ring_owners[ring_owners >= 0])
                if any(_colour_dist(placed[j]["rgb"], rgb) < 90 for j in ro):
                    continue
                ring_px = canvas[sl][lring]
                if (_colour_dist(ring_px, rgb) < 75).mean() > 0.15:
                    continue
                # draw ------------------------------------------------------------
                lc = cov[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
                if shadow:
                    off = max(1, int(round(radius * rng.uniform(0.05, 0.1))))
                    sh = ndimage.gaussian_filter(cov, max(1.0, radius * 0.06))
                    sh = np.roll(np.roll(sh, off, 0), off, 1)[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
                    sh = np.where(own < 0, sh, 0.0)  # flat stickers: shadow only on the ground
                    canvas[sl] *= (1 - rng.uniform(0.22, 0.32) * sh)[..., None]
                hh, ww = lc.shape
                gy, gx = np.mgrid[0:hh, 0:ww].astype(np.float32)
                ramp = (np.cos(light_dir) * gx + np.sin(light_dir) * gy) / max(ps, 1) - 0.5
                fill = np.asarray(rgb, np.float32) * (1 + rng.uniform(0.03, 0.06) * ramp)[..., None]
                if setting == "felt":
                    fill = fill * (1 + 0.04 * rng.standard_normal((hh, ww, 1)).astype(np.float32))
                wid = 0
                if outline and radius >= 10:
                    wid = max(1, int(round(radius * 0.06)))
                    band = ~ndimage.binary_erosion(mask, iterations=wid)[y0 - oy:y1 - oy, x0 - ox:x1 - ox]
                    dark = np.asarray(rgb, np.float32) * 0.62
                    if cname in ("white",):
                        dark = np.full(3, 150, np.float32)
                    fill[band] = dark
                fill = np.clip(fill, 0, 255)
                canvas[sl] = canvas[sl] * (1 - lc[..., None]) + fill * lc[..., None]
                idx = len(placed)
                for j, c in (zip(ids, cnt) if covered.size and (covered >= 0).any() else []):
                    placed[j]["vis"] -= int(c)
                own[lm] = idx
                full = np.zeros((h, w), bool)
                full[sl] = lm
                placed.append(dict(shape=shape, colour=cname, rgb=rgb, angle=angle, size=size, wid=wid,
                                   area=int(lm.sum()), vis=int(lm.sum()),
                                   py0=oy + r0, py1=oy + r1, px0=ox + c0, px1=ox + c1,
                                   mask=mask[r0:r1, c0:c1].copy()))
                done = True
                break
            if done:
                break
    image = photo_effects(rng, canvas, setting)
    objs = []
    for i, p in enumerate(placed):
        vis = owner[p["py0"]:p["py1"], p["px0"]:p["px1"]] == i
        edt = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
        cand = np.argwhere(edt >= max(edt.max() * 0.7, min(edt.max(), p["wid"] + 1.5)))
        ry, rx = cand[rng.integers(len(cand))]
        objs.append(SceneObject(
            shape=p["shape"], colour=p["colour"],
            box=(p["px0"] / w, p["py0"] / h, p["px1"] / w, p["py1"] / h),
            point=((p["px0"] + rx + 0.5) / w, (p["py0"] + ry + 0.5) / h),
            rgb=tuple(int(v) for v in p["rgb"]), tilt=tilt_of(p["shape"], p["angle"]),
            size=float(p["size"]), mask=p["mask"]))
    scene = Scene(image=image, objects=tuple(objs), background=setting)
    matches = tuple(sorted((o for o in objs if matches_query(form, tshape, tcolour, o.shape, o.colour)),
                           key=sort_key))
    return scene, Query(text=query_text(form, tshape, tcolour), matches=matches)


def seventh_scene(seed, i):
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) % (1 << 63), int(i), 7]))
    return make_scene(rng)


def seventh_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    return [seventh_scene(seed, i) for i in range(n)]


# --------------------------------------------------------------------------- CLI
def query_form(text):
    parts = text.split()
    if len(parts) == 2:
        return "colour shape"
    return "shape" if parts[0] in SHAPES else "colour"


def contact_sheet(items, path, tile=(330, 250)):
    cols = 4
    rows = (len(items) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * tile[0], rows * (tile[1] + 16)), (255, 255, 255))
    dr = ImageDraw.Draw(sheet)
    for k, (scene, q) in enumerate(items):
        im = scene.image.copy()
        im.thumbnail(tile)
        x, y = (k % cols) * tile[0], (k // cols) * (tile[1] + 16)
        sheet.paste(im, (x, y + 16))
        sx, sy = im.width, im.height
        for o in q.matches:
            px, py = x + o.point[0] * sx, y + 16 + o.point[1] * sy
            dr.ellipse([px - 2, py - 2, px + 2, py + 2], outline=(255, 0, 255))
        dr.text((x + 2, y + 2), f"{q.text!r} -> {len(q.matches)}  [{scene.background}]", fill=(0, 0, 0))
    sheet.save(path)


def main(argv):
    import argparse
    import time
    from collections import Counter
    ap = argparse.ArgumentParser()
    ap.add_argument("--sheet", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-n", type=int, default=500)
    a = ap.parse_args(argv)
    t = time.perf_counter()
    batch = seventh_batch(a.seed, a.n)
    dt = time.perf_counter() - t
    forms = Counter(query_form(q.text) for _, q in batch)
    nm = [len(q.matches) for _, q in batch]
    no = [len(s.objects) for s, _ in batch]
    sizes = np.array([o.size for s, _ in batch for o in s.objects])
    print(f"{a.n} scenes in {dt:.1f}s ({1000 * dt / a.n:.0f} ms/scene)")
    print("query forms:", {k: f"{v / a.n:.0%}" for k, v in forms.items()})
    print(f"empty share: {np.mean([m == 0 for m in nm]):.1%}")
    print("matches per query:", dict(sorted(Counter(nm).items())), f"mean {np.mean(nm):.2f}")
    print(f"objects per scene: mean {np.mean(no):.1f} min {min(no)} max {max(no)}",
          "hist", dict(sorted(Counter(min(x // 5 * 5, 25) for x in no).items())))
    print("settings:", dict(Counter(s.background for s, _ in batch)))
    print("image sizes: short", min(min(s.image.size) for s, _ in batch), "-",
          max(min(s.image.size) for s, _ in batch), " long max", max(max(s.image.size) for s, _ in batch))
    print(f"object size (diam/short): min {sizes.min():.3f} median {np.median(sizes):.3f} max {sizes.max():.3f}")
    shp = Counter(o.shape for s, _ in batch for o in s.objects)
    col = Counter(o.colour for s, _ in batch for o in s.objects)
    print("shapes:", dict(shp))
    print("colours:", dict(col))
    if a.sheet:
        contact_sheet(batch[:12], a.sheet)
        print("sheet ->", a.sheet)


if __name__ == "__main__":
    main(sys.argv[1:])
