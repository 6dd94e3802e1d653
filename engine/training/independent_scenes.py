"""An independent check: scenes drawn by other code than `engine.training.scenes`, never trained on.

    python -m engine.evaluate --generator independent

Written separately from the training generator, on purpose with other means and other numbers,
so that a score here measures how the model generalises to pictures someone else drew:

* drawing: Pillow `ImageDraw.regular_polygon` / `ellipse` / `polygon` on a canvas 4× larger,
  then box-filtered down, so edges are anti-aliased (the training scenes are aliased). An
  object's mask is its coverage ≥ 50 % at the final resolution; its box is the mask's pixel box;
* colours: a fixed palette per name (Matplotlib's "tab" colours, CSS gold, pure white and black)
  with ±6 jitter; distractors in hot pink, dark turquoise, saddle brown and mid grey;
* shapes at any rotation (uniform 0–360°); a diamond is a rhombus with diagonals 0.55–0.7;
  distractor shapes include two the training set never shows (octagon, semicircle);
* sizes: circumscribed diameter uniform in 3–38 % of the short side; images 160–640 px,
  aspect 1:2 to 2:1; scene kinds: sparse (0–6 objects), busy (7–14) and crowd (11–25 objects of
  one or two kinds);
* backgrounds: solid (light, dark or pastel), two-colour linear gradient, stripes at any angle,
  blurred "photo" noise with grain, checkerboard; then sometimes a blur and/or JPEG;
* queries: a shape, a colour and a shape, or a colour, typed as users do (capitals, plurals,
  articles); 25 % name something absent.

Ground truth uses the scene types of `engine.training.scenes` (SceneObject / Scene / Query) so the
same metric code scores both generators; `tilt` and `size` are filled for the breakdowns.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from engine.training.scenes import Query, Scene, SceneObject

SS = 4  # supersampling factor

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (214, 39, 40), "green": (44, 160, 44), "blue": (31, 119, 180), "yellow": (255, 215, 0),
    "purple": (148, 103, 189), "orange": (255, 127, 14), "white": (255, 255, 255), "black": (0, 0, 0),
}
OTHER_COLOURS: dict[str, tuple[int, int, int]] = {
    "hotpink": (255, 105, 180), "turquoise": (0, 190, 205), "saddlebrown": (139, 69, 19), "grey": (128, 128, 128),
}
KNOWN_SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
OTHER_SHAPES = ("pentagon", "octagon", "ellipse", "rectangle", "semicircle")
PERIOD = {"square": 90, "triangle": 120, "star": 72, "cross": 90, "hexagon": 60, "diamond": 180}


def _rot(points, deg: float, cx: float, cy: float):
    t = math.radians(deg)
    ct, st = math.cos(t), math.sin(t)
    return [(cx + x * ct - y * st, cy + x * st + y * ct) for x, y in points]


def _draw(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, deg: float, rng) -> None:
    """Fill one shape (255) of circumradius r around (cx, cy) on a supersampled 'L' canvas."""
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=255)
    elif shape in ("square", "triangle", "hexagon", "pentagon", "octagon"):
        sides = {"square": 4, "triangle": 3, "hexagon": 6, "pentagon": 5, "octagon": 8}[shape]
        draw.regular_polygon((cx, cy, r), sides, rotation=deg, fill=255)
    elif shape == "star":
        inner = r * 0.4
        pts = [((r if k % 2 == 0 else inner) * math.sin(math.pi * k / 5),
                -(r if k % 2 == 0 else inner) * math.cos(math.pi * k / 5)) for k in range(10)]
        draw.polygon(_rot(pts, deg, cx, cy), fill=255)
    elif shape == "cross":
        half = r * 0.3
        arm = r * math.cos(math.asin(0.3))   # corners of the arms on the circumscribed circle
        for w, h in ((arm, half), (half, arm)):
            draw.polygon(_rot([(-w, -h), (w, -h), (w, h), (-w, h)], deg, cx, cy), fill=255)
    elif shape == "diamond":
        k = rng.uniform(0.55, 0.7)
        draw.polygon(_rot([(0, -r), (k * r, 0), (0, r), (-k * r, 0)], deg, cx, cy), fill=255)
    elif shape in ("ellipse", "rectangle"):
        k = rng.uniform(0.4, 0.55)
        a, b = r / math.hypot(1, k), r * k / math.hypot(1, k)
        if shape == "rectangle":
            draw.polygon(_rot([(-a, -b), (a, -b), (a, b), (-a, b)], deg, cx, cy), fill=255)
        else:
            pts = [(r * math.cos(2 * math.pi * i / 48), r * k * math.sin(2 * math.pi * i / 48)) for i in range(48)]
            draw.polygon(_rot(pts, deg, cx, cy), fill=255)
    elif shape == "semicircle":
        pts = [(r * math.cos(math.pi * i / 32), -r * math.sin(math.pi * i / 32) + r / 2) for i in range(33)]
        draw.polygon(_rot(pts, deg, cx, cy), fill=255)
    else:
        raise ValueError(f"independent generator cannot draw {shape!r}")


def _coverage(shape: str, diameter: float, deg: float, rng) -> np.ndarray:
    """Float coverage (0–1) of the shape on a tight pixel canvas, box-filtered from SS×."""
    n = int(math.ceil(diameter)) + 3
    canvas = Image.new("L", (n * SS, n * SS), 0)
    _draw(ImageDraw.Draw(canvas), shape, n * SS / 2, n * SS / 2, diameter * SS / 2, deg, rng)
    cov = np.asarray(canvas.resize((n, n), Image.BOX), dtype=np.float32) / 255.0
    on = cov >= 0.5
    if not on.any():
        return np.zeros((0, 0), np.float32)
    rows, cols = np.flatnonzero(on.any(1)), np.flatnonzero(on.any(0))
    return cov[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


def _far_from_palette(rgb: np.ndarray, limit: float = 75.0) -> bool:
    pal = np.array(list(PALETTE.values()), dtype=np.float64)
    return bool(np.linalg.norm(pal - rgb, axis=1).min() >= limit)


def _bg_colour(rng) -> np.ndarray:
    while True:
        style = rng.integers(3)
        if style == 0:   # light
            rgb = rng.uniform(185, 235) + rng.uniform(-15, 15, 3)
        elif style == 1:  # dark
            rgb = rng.uniform(40, 90) + rng.uniform(-12, 12, 3)
        else:            # pastel / muted
            rgb = rng.uniform(110, 200, 3)
            rgb = rgb.mean() + 0.35 * (rgb - rgb.mean())
        rgb = np.clip(rgb, 0, 255)
        if _far_from_palette(rgb):
            return rgb


def _background(rng, w: int, h: int) -> tuple[np.ndarray, str]:
    kind = ("solid", "gradient", "stripes", "photo", "checker")[int(rng.integers(5))]
    a, b = _bg_colour(rng), _bg_colour(rng)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    if kind == "solid":
        t = np.zeros((h, w), np.float32)
    elif kind in ("gradient", "stripes"):
        ang = rng.uniform(0, math.pi)
        proj = xx * math.cos(ang) + yy * math.sin(ang)
        if kind == "gradient":
            t = (proj - proj.min()) / max(float(proj.max() - proj.min()), 1.0)
        else:
            t = (np.floor(proj / rng.uniform(4, 30)) % 2).astype(np.float32)
    elif kind == "photo":
        noise = Image.fromarray((rng.random((h, w)) * 255).astype(np.uint8))
        t = np.asarray(noise.filter(ImageFilter.GaussianBlur(rng.uniform(6, 25))), np.float32)
        t = (t - t.min()) / max(float(t.max() - t.min()), 1.0)
    else:
        c = rng.uniform(8, 40)
        t = ((np.floor(xx / c) + np.floor(yy / c)) % 2).astype(np.float32)
    img = a[None, None, :] * (1 - t[..., None]) + b[None, None, :] * t[..., None]
    if kind == "photo":
        img = img + rng.normal(0, 5, (h, w, 1))
    return np.clip(img, 0, 255), kind


def _colour(rng, table: dict) -> tuple[str, np.ndarray]:
    name = list(table)[int(rng.integers(len(table)))]
    return name, np.clip(np.array(table[name], np.float64) + rng.uniform(-6, 6, 3), 0, 255)


def _tilt(shape: str, deg: float) -> float:
    p = PERIOD.get(shape)
    if not p:
        return 0.0
    d = deg % p
    return float(min(d, p - d))


def independent_scene(rng: np.random.Generator) -> Scene:
    w = int(rng.integers(160, 641))
    h = int(np.clip(w * math.exp(rng.uniform(-math.log(2), math.log(2))), 160, 640))
    canvas, kind = _background(rng, w, h)
    short = min(w, h)
    mode = ("sparse", "busy", "crowd")[int(rng.choice(3, p=(0.45, 0.3, 0.25)))]
    if mode == "crowd":
        count = int(rng.integers(11, 26))
        kinds = [(_colour(rng, PALETTE)[0], KNOWN_SHAPES[int(rng.integers(7))]) for _ in range(int(rng.integers(1, 3)))]
    else:
        count = int(rng.integers(0, 7)) if mode == "sparse" else int(rng.integers(7, 15))
        kinds = None
    owner = np.full((h, w), -1, np.int32)
    objs: list[dict[str, Any]] = []
    for _ in range(count + int(rng.integers(0, 3))):
        roll = rng.random()
        if kinds is not None and len(objs) < count:
            cname, shape = kinds[int(rng.integers(len(kinds)))]
            rgb = np.clip(np.array(PALETTE[cname], np.float64) + rng.uniform(-6, 6, 3), 0, 255)
        elif roll < 0.12:     # distractor: unknown shape, any colour
            shape = OTHER_SHAPES[int(rng.integers(len(OTHER_SHAPES)))]
            cname, rgb = _colour(rng, {**PALETTE, **OTHER_COLOURS})
        elif roll < 0.2:      # distractor: known shape, unknown colour
            shape = KNOWN_SHAPES[int(rng.integers(7))]
            cname, rgb = _colour(rng, OTHER_COLOURS)
        else:
            shape = KNOWN_SHAPES[int(rng.integers(7))]
            cname, rgb = _colour(rng, PALETTE)
        crowd_scale = 0.5 if mode == "crowd" else 1.0
        diameter = max(8.0, rng.uniform(0.03, 0.38 * crowd_scale) * short)
        deg = rng.uniform(0, 360)
        cov = _coverage(shape, diameter, deg, rng)
        mh, mw = cov.shape
        if mh == 0 or mh >= h or mw >= w:
            continue
        for _try in range(30):
            y0, x0 = int(rng.integers(0, h - mh)), int(rng.integers(0, w - mw))
            full = cov >= 0.5
            region = owner[y0:y0 + mh, x0:x0 + mw]
            ok = True
            for j in np.unique(region[full]):
                if j < 0:
                    continue
                o = objs[j]
                lost = int(((region == j) & full).sum())
                if o["visible"] - lost < 0.75 * o["area"] or (o["colour"] == cname):
                    ok = False
                    break
                py, px = o["pix"]
                if y0 <= py < y0 + mh and x0 <= px < x0 + mw and full[py - y0, px - x0]:
                    ok = False
                    break
            if ok:   # same colour: keep a 3-px gap between boxes
                for o in objs:
                    if o["colour"] == cname:
                        oy0, ox0, oy1, ox1 = o["rect"]
                        if x0 < ox1 + 3 and ox0 < x0 + mw + 3 and y0 < oy1 + 3 and oy0 < y0 + mh + 3:
                            ok = False
                            break
            if ok:
                break
        else:
            continue
        idx = len(objs)
        for j in np.unique(owner[y0:y0 + mh, x0:x0 + mw][cov >= 0.5]):
            if j >= 0:
                objs[j]["visible"] -= int(((owner[y0:y0 + mh, x0:x0 + mw] == j) & (cov >= 0.5)).sum())
        patch = canvas[y0:y0 + mh, x0:x0 + mw]
        patch[:] = patch * (1 - cov[..., None]) + rgb[None, None, :] * cov[..., None]
        owner[y0:y0 + mh, x0:x0 + mw][cov >= 0.5] = idx
        ys, xs = np.nonzero(cov >= 0.5)
        k = int(np.argmin((ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2))
        objs.append({"shape": shape, "colour": cname, "rect": (y0, x0, y0 + mh, x0 + mw), "mask": cov >= 0.5,
                     "area": int((cov >= 0.5).sum()), "visible": int((cov >= 0.5).sum()),
                     "pix": (y0 + int(ys[k]), x0 + int(xs[k])), "rgb": tuple(int(v) for v in rgb),
                     "tilt": _tilt(shape, deg), "size": diameter / short})
    image = Image.fromarray(np.rint(canvas).astype(np.uint8), "RGB")
    if rng.random() < 0.2:
        image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 1.0)))
    if rng.random() < 0.25:
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=int(rng.integers(50, 96)))
        image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    objects = []
    for o in objs:
        y0, x0, y1, x1 = o["rect"]
        py, px = o["pix"]
        o["mask"].setflags(write=False)
        objects.append(SceneObject(shape=o["shape"], colour=o["colour"], box=(x0 / w, y0 / h, x1 / w, y1 / h),
                                   point=((px + 0.5) / w, (py + 0.5) / h), rgb=o["rgb"], tilt=o["tilt"],
                                   size=o["size"], mask=o["mask"]))
    return Scene(image=image, objects=tuple(objects), background=kind)


def _typed(rng, colour: str | None, shape: str | None) -> str:
    """How a user might type the query."""
    words = [w for w in (colour, shape) if w]
    if shape and rng.random() < 0.3:
        words[-1] = words[-1] + ("es" if words[-1].endswith("ss") else "s")
    text = " ".join(words)
    style = rng.random()
    if style < 0.2:
        text = text.capitalize()
    elif style < 0.3:
        text = text.upper()
    if rng.random() < 0.2:
        text = ("the ", "a ", "all ")[int(rng.integers(3))] + text
    return text


def independent_query(rng: np.random.Generator, scene: Scene) -> Query:
    form = ("shape", "both", "colour")[int(rng.choice(3, p=(0.4, 0.45, 0.15)))]
    present = [o for o in scene.objects if o.colour in PALETTE or o.shape in KNOWN_SHAPES]
    if present and rng.random() >= 0.25:
        o = present[int(rng.integers(len(present)))]
        colour = o.colour if o.colour in PALETTE else None
        shape = o.shape if o.shape in KNOWN_SHAPES else None
        if colour and shape:
            colour, shape = (None, shape) if form == "shape" else (colour, None) if form == "colour" else (colour, shape)
    else:
        for _ in range(200):
            colour = None if form == "shape" else list(PALETTE)[int(rng.integers(8))]
            shape = None if form == "colour" else KNOWN_SHAPES[int(rng.integers(7))]
            if not any((colour is None or o.colour == colour) and (shape is None or o.shape == shape)
                       for o in scene.objects):
                break
            form = ("shape", "both", "colour")[int(rng.integers(3))]
    hits = tuple(o for o in scene.objects
                 if (colour is None or o.colour == colour) and (shape is None or o.shape == shape))
    return Query(text=_typed(rng, colour, shape), matches=hits)


def independent_batch(seed: int, n: int) -> list[tuple[Scene, Query]]:
    """n (scene, query) pairs; item i depends only on (seed, i)."""
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, 7919, i])
        scene = independent_scene(rng)
        out.append((scene, independent_query(rng, scene)))
    return out
