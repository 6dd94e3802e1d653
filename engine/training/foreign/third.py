"""A third, separately written synthetic scene generator.

Written as a blind evaluation generator (sessions 36-38); since session 51 also a training source
(`engine.train --foreign`, engine/training/foreign/__init__.py), so its figures are no longer blind.

    from engine.training.foreign.third import third_batch
    pairs = third_batch(seed, n)     # [(Scene, Query), ...], deterministic for the seed

Drawing: every object is rasterised with PIL at 4x supersampling on its own small canvas and box-
downsampled to a coverage map (anti-aliased edge); its mask is coverage >= 0.5 and its box is the
tight box of that mask on the pixel grid. Objects never touch (1 px gap), lie fully inside the
image and must contrast with the background under them. Backgrounds: flat, linear / radial
gradients, smooth noise, polka dots, grid lines, soft blobs, diagonal bands, checker. Optional
mild blur, JPEG re-encoding and brightness/contrast change afterwards.
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from engine.training.scenes import Query, Scene, SceneObject

VOCAB_SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
VOCAB_COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
EXTRA_SHAPES = ("pentagon", "ellipse", "rectangle", "heart", "arrow", "ring", "crescent", "trapezoid", "octagon")
EXTRA_COLOURS = ("pink", "cyan", "brown", "gray", "teal", "olive")

# my own shades (several per name); each draw jitters every channel by up to +-10
SHADES = {
    "red": [(214, 36, 32), (186, 18, 30), (236, 58, 48), (160, 12, 18), (225, 20, 60)],
    "green": [(46, 168, 62), (24, 128, 44), (96, 196, 72), (56, 150, 40), (20, 100, 35)],
    "blue": [(34, 74, 206), (22, 44, 158), (64, 116, 236), (40, 96, 186), (20, 30, 120)],
    "yellow": [(244, 216, 44), (250, 232, 96), (228, 196, 24), (255, 240, 60)],
    "purple": [(128, 52, 178), (98, 32, 146), (156, 84, 198), (118, 40, 130)],
    "orange": [(248, 138, 24), (236, 108, 28), (255, 162, 48), (226, 122, 10)],
    "white": [(250, 250, 250), (236, 236, 240), (244, 242, 234), (255, 255, 255)],
    "black": [(14, 14, 14), (34, 34, 40), (6, 6, 10), (26, 22, 20)],
    "pink": [(248, 152, 192), (240, 112, 172), (252, 186, 210)],
    "cyan": [(40, 220, 232), (0, 196, 214), (110, 236, 244)],
    "brown": [(128, 80, 40), (106, 64, 34), (150, 100, 56)],
    "gray": [(128, 128, 128), (160, 160, 162), (96, 96, 98)],
    "teal": [(0, 126, 126), (22, 140, 128), (10, 104, 110)],
    "olive": [(128, 128, 10), (110, 116, 32), (140, 136, 40)],
}

# symmetry period (degrees) of each vocabulary shape, for `tilt`; 0 = fully symmetric
PERIOD = {"circle": 0, "square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60, "diamond": 180,
          "pentagon": 72, "octagon": 45, "ellipse": 180, "rectangle": 180, "trapezoid": 360, "heart": 360,
          "arrow": 360, "ring": 0, "crescent": 360}

BACKGROUNDS = ("flat", "linear", "radial", "noise", "polka", "grid", "blobs", "bands", "checker")
SS = 4  # supersampling factor


# ------------------------------------------------------------------------------------ geometry

def _regular(k: int, start_deg: float = -90.0) -> np.ndarray:
    a = np.radians(start_deg + 360.0 * np.arange(k) / k)
    return np.stack([np.cos(a), np.sin(a)], 1)


def _outline(shape: str, rng) -> list[tuple[np.ndarray, bool]]:
    """Polygons (unit circumradius, y down, upright pose) and whether each adds (True) or erases."""
    if shape == "circle":
        return [(_regular(72), True)]
    if shape == "square":
        return [(_regular(4, 45.0), True)]
    if shape == "triangle":
        return [(_regular(3), True)]
    if shape == "hexagon":
        return [(_regular(6), True)]
    if shape == "pentagon":
        return [(_regular(5), True)]
    if shape == "octagon":
        return [(_regular(8, 22.5), True)]
    if shape == "star":
        inner = rng.uniform(0.38, 0.5)
        pts = _regular(10) * np.where(np.arange(10) % 2 == 0, 1.0, inner)[:, None]
        return [(pts, True)]
    if shape == "cross":
        w = rng.uniform(0.2, 0.3)
        L = math.sqrt(1 - w * w)
        pts = [(w, -L), (w, -w), (L, -w), (L, w), (w, w), (w, L), (-w, L), (-w, w), (-L, w), (-L, -w), (-w, -w), (-w, -L)]
        return [(np.array(pts), True)]
    if shape == "diamond":
        q = rng.uniform(0.52, 0.73)
        return [(np.array([(0, -1), (q, 0), (0, 1), (-q, 0)], float), True)]
    if shape == "ellipse":
        b = rng.uniform(0.45, 0.7)
        return [(_regular(72) * np.array([1.0, b]), True)]
    if shape == "rectangle":
        r = rng.uniform(0.35, 0.62)
        a = 1 / math.sqrt(1 + r * r)
        b = r * a
        return [(np.array([(-a, -b), (a, -b), (a, b), (-a, b)]), True)]
    if shape == "trapezoid":
        top, bot, h = rng.uniform(0.35, 0.6), 1.0, rng.uniform(0.55, 0.8)
        pts = np.array([(-top, -h / 2), (top, -h / 2), (bot, h / 2), (-bot, h / 2)])
        return [(pts / np.hypot(*pts.T).max(), True)]
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 80, endpoint=False)
        x = 16 * np.sin(t) ** 3
        y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
        pts = np.stack([x, y + 2.5], 1)
        return [(pts / np.hypot(*pts.T).max(), True)]
    if shape == "arrow":
        sw, hw, hl = rng.uniform(0.12, 0.2), rng.uniform(0.38, 0.5), rng.uniform(0.35, 0.5)
        pts = np.array([(-1, -sw), (1 - hl, -sw), (1 - hl, -hw), (1, 0), (1 - hl, hw), (1 - hl, sw), (-1, sw)])
        return [(pts / np.hypot(*pts.T).max(), True)]
    if shape == "ring":
        return [(_regular(72), True), (_regular(72) * rng.uniform(0.5, 0.7), False)]
    if shape == "crescent":
        off = rng.uniform(0.35, 0.55)
        return [(_regular(72), True), (_regular(72) * rng.uniform(0.85, 1.0) + np.array([off, -0.1]), False)]
    raise ValueError(shape)


def _tilt(shape: str, angle: float) -> float:
    p = PERIOD[shape]
    if p == 0:
        return 0.0
    a = angle % p
    return float(min(a, p - a))


def _rasterise(shape: str, radius: float, angle: float, rng):
    """Coverage (float32 (n, n), 0..1) of the shape centred in an n x n canvas."""
    n = int(math.ceil(2 * radius)) + 4
    c = n / 2 + rng.uniform(-0.5, 0.5, 2)
    th = math.radians(angle)
    rot = np.array([[math.cos(th), -math.sin(th)], [math.sin(th), math.cos(th)]])
    canvas = Image.new("L", (n * SS, n * SS), 0)
    draw = ImageDraw.Draw(canvas)
    for pts, add in _outline(shape, rng):
        xy = (pts @ rot.T * radius + c) * SS
        draw.polygon([tuple(p) for p in xy], fill=255 if add else 0)
    cov = np.asarray(canvas, np.float32).reshape(n, SS, n, SS).mean((1, 3)) / 255.0
    return cov


# ------------------------------------------------------------------------------------ colours

def _shade(rng, name: str) -> np.ndarray:
    base = np.array(SHADES[name][rng.integers(len(SHADES[name]))], float)
    return np.clip(base + rng.integers(-10, 11, 3), 0, 255)


def _bg_colour(rng) -> np.ndarray:
    kind = rng.choice(["pastel", "mid", "dark", "vivid", "grey"], p=[0.3, 0.25, 0.2, 0.1, 0.15])
    h = rng.uniform(0, 1)
    s, v = {"pastel": (rng.uniform(0.05, 0.35), rng.uniform(0.8, 1.0)),
            "mid": (rng.uniform(0.15, 0.55), rng.uniform(0.45, 0.8)),
            "dark": (rng.uniform(0.1, 0.6), rng.uniform(0.08, 0.35)),
            "vivid": (rng.uniform(0.6, 0.95), rng.uniform(0.55, 0.95)),
            "grey": (0.0, rng.uniform(0.1, 0.95))}[kind]
    i = int(h * 6) % 6
    f = h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    rgb = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i]
    return np.array(rgb) * 255


def _shifted(rng, c: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """A colour differing from c by a moderate brightness step (lighter or darker, whichever fits)."""
    step = rng.uniform(lo, hi)
    if c.mean() + step > 245 or (c.mean() - step > 10 and rng.random() < 0.5):
        step = -step
    return np.clip(c + step + rng.uniform(-8, 8, 3), 0, 255)


def _mix(a, b, t) -> np.ndarray:
    t = np.asarray(t, np.float32)[..., None]
    return a + (np.asarray(b, np.float32) - a) * t


def _background(rng, W: int, H: int) -> tuple[np.ndarray, str]:
    kind = str(rng.choice(BACKGROUNDS, p=[0.2, 0.11, 0.11, 0.11, 0.1, 0.1, 0.1, 0.1, 0.07]))
    a = _bg_colour(rng)
    yy = np.arange(H, dtype=np.float32)[:, None]
    xx = np.arange(W, dtype=np.float32)[None, :]
    a = a.astype(np.float32)
    short = min(W, H)
    if kind == "flat":
        img = np.broadcast_to(a, (H, W, 3)).copy()
    elif kind == "linear":
        b = _bg_colour(rng)
        th = rng.uniform(0, 2 * np.pi)
        t = xx * math.cos(th) + yy * math.sin(th)
        t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
        img = _mix(a, b, t)
    elif kind == "radial":
        b = _bg_colour(rng)
        cx, cy = rng.uniform(0.2, 0.8) * W, rng.uniform(0.2, 0.8) * H
        t = np.clip(np.hypot(xx - cx, yy - cy) / (rng.uniform(0.5, 1.0) * math.hypot(W, H)), 0, 1)
        img = _mix(a, b, t)
    elif kind == "noise":
        g = int(rng.integers(4, 24))
        low = rng.normal(0, 1, (g, g, 3)).astype(np.float32)
        up = np.stack([np.asarray(Image.fromarray(low[..., k]).resize((W, H), Image.BICUBIC)) for k in range(3)], -1)
        amp = rng.uniform(12, 34)
        img = a + amp * (0.7 * up + 0.3 * up.mean(-1, keepdims=True)) + rng.normal(0, rng.uniform(2, 8), (H, W, 1))
    elif kind == "polka":
        b = _shifted(rng, a, 20, 45)
        sp = rng.uniform(0.04, 0.08) * short
        r = rng.uniform(0.1, 0.16) * sp      # dots stay below ~2.6 % of the short side (objects: >= 4 %)
        row = np.floor(yy / sp)
        xs = xx + (row % 2) * sp / 2
        d = np.hypot(xs % sp - sp / 2, yy % sp - sp / 2)
        t = np.clip(r + 0.5 - d, 0, 1)
        img = _mix(a, b, t)
    elif kind == "grid":
        b = _shifted(rng, a, 25, 60)
        sp = rng.uniform(12, 48)
        lw = rng.uniform(0.8, 2.2)
        t = ((xx % sp) < lw) | ((yy % sp) < lw)
        img = np.where(t[..., None], b.astype(np.float32), a)
    elif kind == "blobs":
        f = 4    # smooth: computed at 1/4 resolution, upsampled
        h4, w4 = -(-H // f), -(-W // f)
        y4 = (np.arange(h4, dtype=np.float32) * f)[:, None]
        x4 = (np.arange(w4, dtype=np.float32) * f)[None, :]
        low = np.broadcast_to(a, (h4, w4, 3)).copy()
        for _ in range(int(rng.integers(3, 8))):
            b = _bg_colour(rng).astype(np.float32)
            cx, cy, s = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(0.12, 0.35) * short
            t = rng.uniform(0.4, 0.9) * np.exp(-((x4 - cx) ** 2 + (y4 - cy) ** 2) / (2 * s * s))
            low = _mix(low, b, t)
        img = np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(low[..., k])).resize((w4 * f, h4 * f), Image.BILINEAR))
                        for k in range(3)], -1)[:H, :W]
    elif kind == "bands":
        b = _shifted(rng, a, 25, 60) if rng.random() < 0.6 else _bg_colour(rng)
        th = rng.uniform(0, np.pi)
        period = rng.uniform(18, 90)
        u = (xx * math.cos(th) + yy * math.sin(th)) / period
        t = np.clip(np.abs((u % 1.0) - 0.5) * 8 - 1.0, 0, 1)   # soft-edged stripes
        img = _mix(a, b, t)
    else:  # checker
        b = _shifted(rng, a, 15, 35)
        sp = rng.uniform(16, 60)
        t = ((np.floor(xx / sp) + np.floor(yy / sp)) % 2).astype(bool)
        img = np.where(t[..., None], b.astype(np.float32), a)
    return np.clip(img, 0, 255).astype(np.float32), kind


# ------------------------------------------------------------------------------------ scene

def _image_size(rng) -> tuple[int, int]:
    while True:
        aspect = math.exp(rng.uniform(math.log(0.6), math.log(1.7)))
        area = rng.uniform(200, 700) ** 2
        W, H = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
        if 200 <= W <= 700 and 200 <= H <= 700:
            return W, H


def _pick_kind(rng) -> tuple[str, str]:
    r = rng.random()
    if r < 0.80:
        return str(rng.choice(VOCAB_SHAPES)), str(rng.choice(VOCAB_COLOURS))
    if r < 0.92:   # distractor shape, any colour
        return str(rng.choice(EXTRA_SHAPES)), str(rng.choice(VOCAB_COLOURS + EXTRA_COLOURS))
    return str(rng.choice(VOCAB_SHAPES)), str(rng.choice(EXTRA_COLOURS))   # vocab shape, distractor colour


def _dilate(m: np.ndarray) -> np.ndarray:
    out = m.copy()
    out[1:] |= m[:-1]
    out[:-1] |= m[1:]
    out[:, 1:] |= out[:, :-1]
    out[:, :-1] |= out[:, 1:]
    return out


def make_third_scene(rng) -> Scene:
    W, H = _image_size(rng)
    short = min(W, H)
    bg, kind = _background(rng, W, H)
    img = bg.copy()
    occ = np.zeros((H, W), bool)
    r = rng.random()
    count = 0 if r < 0.05 else int(rng.integers(1, 6)) if r < 0.45 else int(rng.integers(6, 11)) if r < 0.75 \
        else int(rng.integers(11, 21))
    crowd_kind = _pick_kind(rng) if count >= 6 and rng.random() < 0.45 else None
    # size cap so that many objects fit: area budget
    cap = min(0.35, max(0.06, 0.9 / math.sqrt(max(count, 1))))
    objects = []
    for i in range(count):
        shape, colour = crowd_kind if crowd_kind and rng.random() < 0.65 else _pick_kind(rng)
        placed = None
        for _attempt in range(3):      # sizes: shrink if it does not fit
            d = math.exp(rng.uniform(math.log(0.04), math.log(cap)))
            radius = d * short / 2
            if radius < 3.2:
                radius = 3.2
                d = 2 * radius / short
            angle = rng.uniform(-8, 8) if rng.random() < 0.3 else rng.uniform(0, 360)
            cov = _rasterise(shape, radius, angle, rng)
            n = cov.shape[0]
            if n >= min(W, H):
                continue
            m = cov >= 0.5
            if not m.any():
                continue
            ink = cov > 0.02
            rgb = _shade(rng, colour)
            for _try in range(25):
                ox, oy = int(rng.integers(0, W - n + 1)), int(rng.integers(0, H - n + 1))
                if (occ[oy:oy + n, ox:ox + n] & ink).any():
                    continue
                under = bg[oy:oy + n, ox:ox + n][m]
                dist = np.linalg.norm(under - rgb, axis=1)
                if np.median(dist) < 90 or np.percentile(dist, 10) < 50:
                    continue
                placed = (ox, oy)
                break
            if placed:
                break
        if not placed:
            continue
        ox, oy = placed
        occ[oy:oy + n, ox:ox + n] |= _dilate(ink)
        a = cov[..., None]
        col = np.broadcast_to(rgb, (n, n, 3))
        if rng.random() < 0.2:   # subtle shading across the object
            g = np.linspace(-1, 1, n)[:, None, None] * rng.uniform(6, 14)
            col = np.clip(col + g, 0, 255)
        region = img[oy:oy + n, ox:ox + n]
        img[oy:oy + n, ox:ox + n] = region * (1 - a) + col * a
        rows, cols = np.nonzero(m.any(1))[0], np.nonzero(m.any(0))[0]
        r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        mask = m[r0:r1, c0:c1].copy()
        ys, xs = np.nonzero(mask)
        cy, cx = ys.mean(), xs.mean()
        k = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))   # mask pixel nearest the centroid
        px, py = ox + c0 + xs[k], oy + r0 + ys[k]
        objects.append(SceneObject(
            shape=shape, colour=colour,
            box=((ox + c0) / W, (oy + r0) / H, (ox + c1) / W, (oy + r1) / H),
            point=((px + 0.5) / W, (py + 0.5) / H),
            rgb=tuple(int(v) for v in rgb), tilt=_tilt(shape, angle), size=float(d), mask=mask))
    im = Image.fromarray(np.clip(img + 0.5, 0, 255).astype(np.uint8), "RGB")
    if rng.random() < 0.2:
        im = im.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.9)))
    if rng.random() < 0.15:
        im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.9, 1.1))
        im = ImageEnhance.Contrast(im).enhance(rng.uniform(0.88, 1.12))
    if rng.random() < 0.3:
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=int(rng.integers(40, 91)))
        im = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    return Scene(image=im, objects=tuple(objects), background=kind)


# ------------------------------------------------------------------------------------ queries

def _case(rng, text: str) -> str:
    r = rng.random()
    if r < 0.5:
        return text
    if r < 0.75:
        return text.title()
    if r < 0.88:
        return text.upper()
    return text[:1].upper() + text[1:]


def _plural(shape: str) -> str:
    return shape + "es" if shape.endswith(("ss", "sh", "ch", "x")) else shape + "s"


def _reading(objs) -> tuple[SceneObject, ...]:
    return tuple(sorted(objs, key=lambda o: ((o.box[1] + o.box[3]) / 2, (o.box[0] + o.box[2]) / 2)))


def make_query(rng, scene: Scene) -> Query:
    objs = scene.objects
    vocab = [o for o in objs if o.shape in VOCAB_SHAPES and o.colour in VOCAB_COLOURS]
    # unambiguous targets only: a shape query never asked about a shape drawn in a non-vocab colour,
    # a colour query never about a colour carried by a non-vocab shape
    bad_shapes = {o.shape for o in objs if o.colour not in VOCAB_COLOURS}
    bad_colours = {o.colour for o in objs if o.shape not in VOCAB_SHAPES}
    absent = rng.random() < 0.28 or not vocab
    for _ in range(40):
        form = rng.choice(["cs", "s", "c"], p=[0.42, 0.35, 0.23])
        if form == "cs":
            if absent:
                shape = str(rng.choice(VOCAB_SHAPES))
                colour = str(rng.choice(VOCAB_COLOURS))
                if rng.random() < 0.6 and vocab:          # hard negative: a shape or colour that is present
                    o = vocab[rng.integers(len(vocab))]
                    shape, colour = (o.shape, colour) if rng.random() < 0.5 else (shape, o.colour)
            else:
                o = vocab[rng.integers(len(vocab))]
                shape, colour = o.shape, o.colour
            matches = [o for o in vocab if o.shape == shape and o.colour == colour]
        elif form == "s":
            shape = str(rng.choice(VOCAB_SHAPES)) if absent else vocab[rng.integers(len(vocab))].shape
            colour = None
            if shape in bad_shapes:
                continue
            matches = [o for o in vocab if o.shape == shape]
        else:
            colour = str(rng.choice(VOCAB_COLOURS)) if absent else vocab[rng.integers(len(vocab))].colour
            shape = None
            if colour in bad_colours:
                continue
            matches = [o for o in vocab if o.colour == colour]
        if bool(matches) == absent:
            continue
        if shape is None:
            text = colour if rng.random() < 0.85 else f"the {colour}"
        else:
            many = len(matches) > 1
            plural = rng.random() < (0.75 if many else 0.2)
            noun = _plural(shape) if plural else shape
            words = f"{colour} {noun}" if colour else noun
            r = rng.random()
            if r < 0.55:
                art = ""
            elif r < 0.8:
                art = "the "
            elif plural:
                art = "all "
            else:
                art = "an " if words[0] in "aeiou" else "a "
            text = art + words
        return Query(text=_case(rng, text), matches=_reading(matches))
    # fallback: the first vocab object's kind, or a shape absent from the scene
    if vocab:
        o = vocab[0]
        return Query(text=f"{o.colour} {o.shape}", matches=_reading([v for v in vocab if v.shape == o.shape and v.colour == o.colour]))
    # no vocabulary object: any colour + shape query matches nothing and is never ambiguous
    return Query(text=f"{rng.choice(VOCAB_COLOURS)} {rng.choice(VOCAB_SHAPES)}", matches=())


def third_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i, 3333])
        scene = make_third_scene(rng)
        out.append((scene, make_query(rng, scene)))
    return out
