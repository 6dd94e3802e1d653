"""Synthetic scenes with exact ground truth, for training and evaluating detect/point.

A scene is an RGB image of flat-coloured shapes on a varied background, plus, for every
object, its shape and colour names, the tight bounding box of its drawn pixels and a point
inside it. A query names a shape ("circle"), a colour and a shape ("red circle") or a colour
("red"); its matches are the objects it names, in canonical reading order.

Conventions (all coordinates normalised by the image width / height):

* ``box = (x_min, y_min, x_max, y_max)`` covers the object's pixels edge to edge: an object
  whose pixels span columns ``c0..c1`` has ``x_min = c0 / W`` and ``x_max = (c1 + 1) / W``.
  The box is that of the whole shape (as if drawn alone), also when a later object hides
  part of it.
* ``point = (x, y)`` is the centre of one pixel of the object that stays visible in the
  final image (the pixel nearest the shape's centroid): ``x = (col + 0.5) / W``.
* Objects are drawn in list order; a later object may cover at most ``MAX_COVERED`` of an
  earlier object's pixels and never its point. Objects of the same colour never touch, so
  each one stays a separate blob.
* Shapes are drawn without anti-aliasing, each in one flat colour (its named colour with a
  small per-object jitter, kept in ``SceneObject.rgb``), so the pixels of an object are
  exactly the pixels of that colour inside its box.
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw

from engine.model.vocabulary import Vocabulary

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 30, 35),
    "green": (30, 175, 50),
    "blue": (35, 80, 235),
    "yellow": (250, 225, 20),
    "purple": (145, 45, 200),
    "orange": (255, 135, 10),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
}

QUERY_WORDS: tuple[str, ...] = tuple(COLOURS) + SHAPES
# What a model trained on these scenes recognises (written into its config.json for the UI).
SCENE_VOCABULARY = Vocabulary({"shapes": SHAPES, "colours": tuple(COLOURS)},
                              examples=("red circle", "star", "blue square", "green", "yellow triangle", "hexagon"))

BACKGROUNDS: tuple[str, ...] = ("flat", "gradient", "noise", "blotches", "stripes", "checker")

MAX_COVERED = 0.30      # largest fraction of an object's pixels that later objects may hide
READING_BANDS = 8       # reading order: horizontal bands of 1/8 image height, then x
COLOUR_JITTER = 10      # per-channel jitter of an object's fill colour
MIN_BG_DISTANCE = 90.0  # smallest RGB distance from a background base colour to any object colour
SIZE_FRACTION = (0.07, 0.30)  # object size (circumscribed diameter) relative to the image's short side
MIN_OBJECT_PX = 12
MAX_ASPECT = 3.0        # image aspect ratio stays within [1/3, 3]


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    box: tuple[float, float, float, float]
    point: tuple[float, float]
    rgb: tuple[int, int, int] = (0, 0, 0)
    # Full (unoccluded) pixel mask of the shape, cropped to its box: shape (box height, box width).
    mask: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class Scene:
    image: Image.Image
    objects: tuple[SceneObject, ...]   # in drawing order (bottom first)

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


@dataclass(frozen=True)
class Query:
    text: str
    matches: tuple[SceneObject, ...]   # in reading order; empty: the answer is an immediate EOS


# --------------------------------------------------------------------------- shapes

def _polygon(shape: str, r: float, angle: float) -> list[tuple[float, float]] | None:
    """Vertices around the origin (None for the circle), y pointing down."""
    if shape == "circle":
        return None
    if shape == "square":
        a = r / math.sqrt(2.0)
        pts = [(-a, -a), (a, -a), (a, a), (-a, a)]
    elif shape == "triangle":
        pts = [(r * math.cos(t), r * math.sin(t)) for t in (math.radians(d) for d in (-90, 30, 150))]
    elif shape == "star":
        pts = []
        for k in range(10):
            rad = r if k % 2 == 0 else 0.42 * r
            t = math.radians(-90 + 36 * k)
            pts.append((rad * math.cos(t), rad * math.sin(t)))
    elif shape == "cross":
        w = 0.32 * r
        pts = [(-w, -r), (w, -r), (w, -w), (r, -w), (r, w), (w, w), (w, r), (-w, r), (-w, w), (-r, w), (-r, -w), (-w, -w)]
    elif shape == "hexagon":
        pts = [(r * math.cos(math.radians(60 * k)), r * math.sin(math.radians(60 * k))) for k in range(6)]
    elif shape == "diamond":
        pts = [(0.0, -r), (0.62 * r, 0.0), (0.0, r), (-0.62 * r, 0.0)]
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s, x * s + y * c) for x, y in pts]


def render_shape(shape: str, diameter: float, angle_deg: float = 0.0) -> np.ndarray:
    """Boolean mask of a shape whose circumscribed circle has `diameter` px, cropped tight."""
    r = diameter / 2.0
    n = int(math.ceil(diameter)) + 4
    c = n / 2.0
    canvas = Image.new("L", (n, n), 0)
    draw = ImageDraw.Draw(canvas)
    pts = _polygon(shape, r, math.radians(angle_deg))
    if pts is None:
        draw.ellipse([c - r, c - r, c + r, c + r], fill=1)
    else:
        draw.polygon([(c + x, c + y) for x, y in pts], fill=1)
    mask = np.asarray(canvas, dtype=bool)
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        raise ValueError(f"shape {shape!r} of diameter {diameter} draws no pixels")
    return mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


_MAX_ANGLE = {"circle": 0.0, "square": 10.0, "diamond": 10.0, "triangle": 15.0, "star": 15.0,
              "cross": 12.0, "hexagon": 15.0}


def _inner_point(mask: np.ndarray) -> tuple[int, int]:
    """(row, col) of the mask pixel nearest the mask's centroid."""
    ys, xs = np.nonzero(mask)
    cy, cx = ys.mean(), xs.mean()
    iy, ix = int(round(cy)), int(round(cx))
    if 0 <= iy < mask.shape[0] and 0 <= ix < mask.shape[1] and mask[iy, ix]:
        return iy, ix
    k = int(np.argmin((ys - cy) ** 2 + (xs - cx) ** 2))
    return int(ys[k]), int(xs[k])


# --------------------------------------------------------------------------- backgrounds

_OBJECT_RGB = np.array(list(COLOURS.values()), dtype=np.float64)


def _bg_colour(rng: np.random.Generator) -> np.ndarray:
    """A muted mid-tone colour far from every object colour."""
    for _ in range(100):
        h, s, v = rng.random(), rng.uniform(0.0, 0.28), rng.uniform(0.32, 0.72)
        rgb = np.array(colorsys.hsv_to_rgb(h, s, v)) * 255.0
        if np.min(np.linalg.norm(_OBJECT_RGB - rgb, axis=1)) >= MIN_BG_DISTANCE:
            return rgb
    return np.array([128.0, 128.0, 128.0])


def background(rng: np.random.Generator, w: int, h: int) -> tuple[np.ndarray, str]:
    """A (h, w, 3) uint8 background and its kind. Every pixel stays within a small distance of
    a colour returned by _bg_colour (noise: up to ~1.3 sigma on average, clipped at 3 sigma)."""
    kind = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    c1, c2 = _bg_colour(rng), _bg_colour(rng)
    u1, u2 = np.rint(c1).astype(np.uint8), np.rint(c2).astype(np.uint8)
    if kind == "flat":
        return np.broadcast_to(u1, (h, w, 3)).copy(), kind
    if kind in ("gradient", "stripes"):
        t = rng.uniform(0, 2 * math.pi)
        proj = (np.arange(w, dtype=np.float32)[None, :] * np.float32(math.cos(t))
                + np.arange(h, dtype=np.float32)[:, None] * np.float32(math.sin(t)))
        if kind == "stripes":
            half = np.float32(rng.uniform(3, 20))
            band = ((proj - np.float32(proj.min())) / half).astype(np.int32) & 1
            return np.stack([u1, u2])[band], kind
        lo, hi = float(proj.min()), float(proj.max())
        frac = (proj - lo) * np.float32(255.0 / max(hi - lo, 1.0))
    elif kind == "blotches":
        gw, gh = int(rng.integers(3, 9)), int(rng.integers(3, 9))
        small = (rng.random((gh, gw)) * 255.0).astype(np.float32)
        frac = np.asarray(Image.fromarray(small, mode="F").resize((w, h), Image.BILINEAR))
    elif kind == "noise":
        a = int(rng.integers(6, 22))   # half-width of the shared (grey) noise
        b = max(1, a // 3)             # half-width of the per-channel noise
        img = u1.astype(np.int16) + rng.integers(-a, a + 1, size=(h, w, 1), dtype=np.int16) \
            + rng.integers(-b, b + 1, size=(h, w, 3), dtype=np.int16)
        return np.clip(img, 0, 255).astype(np.uint8), kind
    else:  # checker
        cell = int(rng.integers(6, 41))
        band = (np.arange(h, dtype=np.int32)[:, None] // cell + np.arange(w, dtype=np.int32)[None, :] // cell) & 1
        return np.stack([u1, u2])[band], kind
    lut = np.rint(c1[None, :] + np.linspace(0.0, 1.0, 256)[:, None] * (c2 - c1)[None, :]).astype(np.uint8)
    return lut[np.clip(frac, 0, 255).astype(np.uint8)], kind


# --------------------------------------------------------------------------- scenes

def _try_place(rng, owner, placed, shape, colour, diameter, w, h):
    angle = rng.uniform(-_MAX_ANGLE[shape], _MAX_ANGLE[shape])
    mask = render_shape(shape, diameter, angle)
    mh, mw = mask.shape
    if mh > h or mw > w:
        return None
    y0, x0 = int(rng.integers(0, h - mh + 1)), int(rng.integers(0, w - mw + 1))
    y1, x1 = y0 + mh, x0 + mw
    for p in placed:  # same-colour objects: boxes at least 2 px apart
        if p["colour"] == colour:
            py0, px0, py1, px1 = p["rect"]
            if x0 < px1 + 2 and px0 < x1 + 2 and y0 < py1 + 2 and py0 < y1 + 2:
                return None
    under = owner[y0:y1, x0:x1][mask]
    hidden = np.bincount(under[under >= 0], minlength=len(placed))
    for i in np.flatnonzero(hidden):
        p = placed[i]
        if p["visible"] - hidden[i] < (1.0 - MAX_COVERED) * p["area"]:
            return None
        py, px = p["pix"]
        if y0 <= py < y1 and x0 <= px < x1 and mask[py - y0, px - x0]:
            return None
    for i in np.flatnonzero(hidden):
        placed[i]["visible"] -= int(hidden[i])
    iy, ix = _inner_point(mask)
    return {"shape": shape, "colour": colour, "mask": mask, "rect": (y0, x0, y1, x1),
            "area": int(mask.sum()), "visible": int(mask.sum()), "pix": (y0 + iy, x0 + ix)}


def make_scene(rng: np.random.Generator, *, min_objects: int = 0, max_objects: int = 10,
               size_range: tuple[int, int] = (96, 512)) -> Scene:
    """One random scene: width uniform in size_range, height uniform in size_range within an
    aspect ratio of MAX_ASPECT. The object count is drawn uniformly from [min_objects, max_objects];
    in a crowded small image fewer may fit (placement gives up after many tries)."""
    if not 0 <= min_objects <= max_objects:
        raise ValueError(f"need 0 <= min_objects <= max_objects, got {min_objects}, {max_objects}")
    lo, hi = size_range
    if not 16 <= lo <= hi:
        raise ValueError(f"size_range must satisfy 16 <= lo <= hi, got {size_range}")
    w = int(rng.integers(lo, hi + 1))
    h = int(rng.integers(max(lo, math.ceil(w / MAX_ASPECT)), min(hi, int(w * MAX_ASPECT)) + 1))
    pixels, _ = background(rng, w, h)
    owner = np.full((h, w), -1, dtype=np.int32)
    n = int(rng.integers(min_objects, max_objects + 1))
    short = min(w, h)
    placed: list[dict[str, Any]] = []
    colour_names = list(COLOURS)
    for _ in range(n):
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        colour = colour_names[int(rng.integers(len(colour_names)))]
        frac = rng.uniform(*SIZE_FRACTION)
        for attempt in range(40):
            scale = 1.0 if attempt < 20 else 0.6
            diameter = max(MIN_OBJECT_PX, frac * scale * short)
            obj = _try_place(rng, owner, placed, shape, colour, diameter, w, h)
            if obj is not None:
                break
        else:
            continue
        base = np.array(COLOURS[colour])
        rgb = np.clip(base + rng.integers(-COLOUR_JITTER, COLOUR_JITTER + 1, size=3), 0, 255).astype(np.uint8)
        y0, x0, y1, x1 = obj["rect"]
        pixels[y0:y1, x0:x1][obj["mask"]] = rgb
        owner[y0:y1, x0:x1][obj["mask"]] = len(placed)
        obj["rgb"] = tuple(int(v) for v in rgb)
        placed.append(obj)
    objects = []
    for p in placed:
        y0, x0, y1, x1 = p["rect"]
        py, px = p["pix"]
        mask = p["mask"]
        mask.setflags(write=False)
        objects.append(SceneObject(
            shape=p["shape"], colour=p["colour"],
            box=(x0 / w, y0 / h, x1 / w, y1 / h),
            point=((px + 0.5) / w, (py + 0.5) / h),
            rgb=p["rgb"], mask=mask))
    return Scene(image=Image.fromarray(pixels, mode="RGB"), objects=tuple(objects))


# --------------------------------------------------------------------------- queries

def reading_order_key(obj: SceneObject) -> tuple[int, float, float]:
    """Sort key: band of the point's y (READING_BANDS per image height), then x, then y."""
    x, y = obj.point
    return (min(int(y * READING_BANDS), READING_BANDS - 1), x, y)


def reading_order(objects: Sequence[SceneObject]) -> tuple[SceneObject, ...]:
    return tuple(sorted(objects, key=reading_order_key))


def parse_query(text: str) -> tuple[str | None, str | None]:
    """(colour, shape) named by a query text; either may be None. Raises on unknown words."""
    words = text.split()
    colour = shape = None
    if len(words) == 2 and words[0] in COLOURS and words[1] in SHAPES:
        colour, shape = words
    elif len(words) == 1 and words[0] in COLOURS:
        colour = words[0]
    elif len(words) == 1 and words[0] in SHAPES:
        shape = words[0]
    else:
        raise ValueError(f"not a scene query: {text!r} (use 'shape', 'colour shape' or 'colour')")
    return colour, shape


def matches(text: str, objects: Sequence[SceneObject]) -> tuple[SceneObject, ...]:
    """Objects named by `text`, in reading order."""
    colour, shape = parse_query(text)
    return reading_order([o for o in objects if (colour is None or o.colour == colour)
                          and (shape is None or o.shape == shape)])


ALL_QUERIES: tuple[str, ...] = (SHAPES + tuple(f"{c} {s}" for c in COLOURS for s in SHAPES) + tuple(COLOURS))
_FORMS = ("shape", "colour shape", "colour")
_FORM_P = (0.4, 0.45, 0.15)


def _text(form: str, colour: str, shape: str) -> str:
    return shape if form == "shape" else colour if form == "colour" else f"{colour} {shape}"


def make_query(rng: np.random.Generator, scene: Scene, *, empty_rate: float = 0.15) -> Query:
    """A query for `scene`: with probability `empty_rate` (always, for a scene with no
    objects) one that matches nothing, otherwise one naming a random object of the scene."""
    form = _FORMS[int(rng.choice(len(_FORMS), p=_FORM_P))]
    if scene.objects and rng.random() >= empty_rate:
        obj = scene.objects[int(rng.integers(len(scene.objects)))]
        text = _text(form, obj.colour, obj.shape)
    else:
        present = {(o.colour, o.shape) for o in scene.objects}
        candidates = []
        for f in (form,) + tuple(x for x in _FORMS if x != form):
            candidates = [_text(f, c, s) for c in COLOURS for s in SHAPES] if f == "colour shape" else \
                list(SHAPES) if f == "shape" else list(COLOURS)
            taken = {_text(f, c, s) for c, s in present}
            candidates = [t for t in candidates if t not in taken]
            if candidates:
                break
        text = candidates[int(rng.integers(len(candidates)))]
    return Query(text=text, matches=matches(text, scene.objects))


def scene_batch(seed: int, n: int, **kw: Any) -> list[tuple[Scene, Query]]:
    """n (scene, query) pairs. Item i depends only on (seed, i), so batches of different
    lengths from one seed share their prefix. Keyword arguments go to make_scene
    (min_objects, max_objects, size_range) and make_query (empty_rate)."""
    q_kw = {k: kw.pop(k) for k in ("empty_rate",) if k in kw}
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        scene = make_scene(rng, **kw)
        out.append((scene, make_query(rng, scene, **q_kw)))
    return out
