"""Sixteenth evaluation scene generator, written BLIND (session 59).

Written without seeing how the training scenes or any other evaluation generator draw their images. What was read:
in engine/training/scenes.py only the dataclasses `SceneObject`, `Scene`, `Query`, the functions `matches`,
`parse_query`, `reading_order` and the names and values of the vocabulary constants `SHAPES`, `COLOURS`,
`DISTRACTOR_SHAPES`, `DISTRACTOR_COLOURS` (extracted node by node with `ast`; the `reading_order_key` that
`reading_order` calls was not read), tests/scene_labels.py and tests/test_blind_scenes.py (the test contract), the
module docstring, the signature lines of `fifteenth_scene` / `fifteenth_batch` and the `__main__` block of
docs/experiments/fifteenth_scenes.py (extracted with `ast`; its conventions, label rules and checks are followed),
docs/experiments/scene_sample.py (the shared command line), and in docs/experiments/blind_eval.py the docstring,
imports, `GENERATORS` and the `--seed` line (to register this file).  Seen in passing: see the slips at the end; no
drawing code.  All shapes, shade anchors, textures and effects below are this file's own choices.  Of the brief's
suggestions, embroidery / cross-stitch, chalk, mosaic, rainy or frosted windows, spray paint on brick, cake icing,
low-light shaky phone photos and halftone scans were left out: blind_eval's docstring lists them (or their near
twins: cross-stitch, night photos, shaky rolling-shutter photos) as drawn by the tenth to fourteenth; the seven
kinds below appear in no generator's description there nor in the fifteenth's.

Scene kinds (`Scene.background`):
  carpet      felt cut-outs (fibres fraying the outline, mottled felt, a soft shadow) on a woollen rug in muted dye
              colours: kilim bands with zigzag lines, sinuous vines with 2 px dabs, or a plain abrash field with
              border stripes; per-knot pile noise, tufts and sheen; hairs and tiny lint (at most 5 px) on top;
              photographed at an angle (a keystone homography: the near corners pulled in by 5-10 % of the canvas,
              the far ones by up to 3 %; image and labels alike).
  bubblewrap  a printed card (white, cream, pastel, dark grey or navy; a broad printed wash, sometimes a faint grid)
              under a sheet of bubble wrap: a hexagonal lattice of bubbles (pitch 9-16 px) that each magnify the
              print a little (under 0.6 px shift, image and labels alike), with a shaded rim, a specular spot and a
              back-lit arc; some bubbles popped (flat); a white haze of the film and a few creases.
  acrylic     laser-cut acrylic pieces on the bed they were cut on (birch plywood or MDF with grain, a black rubber
              mat, grey felt, a pale sheet): tinted translucent bodies that let the bed's texture through a little,
              a glowing cut edge inside the outline and a thin halo outside it, a lit chamfer on the upper left, a
              soft offset shadow, frosted engraved "text" rows on some large pieces; scorch smudges, the bright
              edges of clear offcut strips and curled ribbons of peeled masking paper as non-objects.
  terrazzo    coloured resin inlays in a polished terrazzo floor (light grey, white, beige, blush, charcoal or sage
              cement): angular stone chips of at most 8 px and one-pixel grit everywhere, a few chips in the resin,
              a 1 px zinc or brass divider strip round each inlay of 28 px or more, sometimes a divider strip across
              the floor, hairline cracks, a broad band of window glare on the polish, a mild camera angle
              (homography, image and labels alike).
  video       a frame grabbed from low-bitrate streamed video of a cartoon (sky and hills, or a studio backdrop with
              a floor): flat cel-shaded shapes with a highlight sliver, often a dark outline and a hard drop shadow;
              colour banding, a half-transparent channel logo of open letter strokes, a news ticker with text,
              sometimes letterbox bars and interlace combing (odd rows shifted 1-2 px, image and labels alike); then
              a soft upscale from 50-80 % resolution, chroma on a 2-3x coarser grid and JPEG at quality 22-40 with
              4:2:0 chroma.
  lacquer     painted wooden blocks on a glossy lacquered table (black, walnut, white, oxblood, slate blue, cream)
              seen a little from above: a darker side face under each top face (1-4 px, part of the label mask), a
              satin gradient and a lit front edge on the top, the side's mirrored glint and a faint smeared
              reflection on the table below; the polish brighter towards the far edge, a lamp's hot spot and a sheen
              band; dust and faint fingerprint whorls.
  book        a phone photo of an open picture book (one or two pages, the table round it): printed washes (pastel
              day scenes or dark night scenes) and a second wash for the ground, blocks of grey text, page numbers,
              the page stack at the outer edges; shapes printed in slightly transparent ink, in 40 % of books with a
              dark outline; the pages curl up towards the gutter (lines bend and crowd into it, up to about 10 px;
              image and labels alike), a shaded gutter and the phone's soft shadow from one side.
Every kind except video also gets mild photographic effects: exposure (about 6 %) and white-balance (up to 5 % per
channel) shifts, an off-centre vignette (up to 15 % darker), a slight blur (up to 0.7 px), sensor noise (luminance
and colour) and JPEG (quality 60-92).

Objects: the seven vocabulary shapes in the eight vocabulary colours (84 %), else distractor shapes (pentagon,
ellipse, rectangle, heart, arrow, ring, crescent, trapezoid) in vocabulary colours (7 %), vocabulary shapes in
distractor colours (pink, cyan, brown, gray; 6 %) or both (3 %).  Shades: vocabulary colours mixed between the
canonical `COLOURS` value and one of this file's anchors of the name (`SHADES`) plus a little noise, distractor
colours uniform in their `DISTRACTOR_COLOURS` ranges read as (hue lo, hue hi, sat lo, sat hi, value lo, value hi);
every drawing shade reads as its own name with a 10 Lab margin (`colour_margin`).  Any rotation (upright within 20
degrees half the time), except that the square stays within 22 degrees of upright and the diamond is a rhombus
(width 0.56-0.66 of its height, never a square) within 18 degrees of standing on a tip or (35 %) lying, so neither
reads as the other (the fourteenth's and fifteenth's convention).  Upright poses: a vertex up for triangle, star,
pentagon and hexagon, arms on the axes for the cross, sides on the axes for the square and rectangle, tip up for the
arrow, horns up and down for the crescent, long side down for the trapezoid.  Sizes (circumscribed diameter)
log-uniform from 15 px (circle, square, triangle, ellipse, rectangle), 21 px (diamond) or 18 px (the rest), 15 %
more in video, 30 % more under bubble wrap, and at least 4 % of the short side, up to 36 / 28 / 21 / 15 / 13 % of
the short side for 1-2 / 3-6 / 7-10 / 11-17 / 18-25 objects (80-88 % of that under the magnifying camera angles);
canvases with a short side of 136-384 px (at least 150 + 6 per object when crowded), 1:1 to 1.65:1, a third
portrait; 0-25 objects (6 % none, 47 % 1-6, 23 % 7-10, 24 % 11-25).  Objects go down mostly largest first; at
placement an object may leave no earlier one less than 82 % visible, objects of the same colour name never come
within 3 px of each other, and its colour must differ by at least 25 Lab from the mean of the uncovered pixels
within 3 px around it on the picture drawn so far, else another shade of its name or another place is taken, and
after eight places another colour of its group (vocabulary or distractor) -- so colours that match a kind's ground
are rarer there (white most of all).  Objects stay out of the video's bars, ticker and logo, the book's text, gutter
zone (10 % of the width) and margins, and the bottom 8 px of the lacquered table.

Labels: box = tight box of the object's whole (unoccluded) silhouette in whole pixels (anti-aliased coverage >= 0.5,
after any warp: the coverage is warped bilinearly like the image), mask = that silhouette cropped to the box, point
= the visible pixel farthest from the visible region's edge, size = the mask's largest width over 32 directions /
the short side, tilt = degrees from the nearest upright pose given the shape's rotational symmetry, including the
warp's local rotation (0 for circles and rings).  Checked on the FINAL image: every object's visible core colour
(median of the visible pixels at least 0.4 of the maximum distance from the visible edge) reads, in CIE Lab against
this file's shade anchors, as its colour with a margin of 3 Lab (8 for white, which reads as grey when dimmed;
distractor colours as their own distractor name, so as no vocabulary colour; `rgb` is that core colour, rounded);
it differs by at least 16 Lab from the mean of the uncovered pixels within 3 px around the object; at least 76 % of
each object is visible and it lies inside the canvas (1 px clear), with a size of 10 px to 40 % of the short side.
A scene that fails is redrawn (next attempt; effects halved from the fifth attempt and off from the ninth); canvas
size, kind and object count of scene i are fixed across attempts (`canvas_and_count`, `kind_for`).  Kinds come in
shuffled blocks of seven.  Queries: 50 % "colour shape", 28 % "shape", 22 % "colour"; 17 % asked absent on purpose
(70 % near misses that share a word with an object), plus scenes with nothing nameable.

Slips (what was seen beyond the rules above): file listings of the repository root, docs/experiments/ and tests/,
`git status` (one untracked eval result JSON of the fifteenth), the first 40 lines of pyproject.toml, the file name
of a log in /tmp/s59 (not opened), and that the scenes.py dataclasses are frozen (checked at run time). `git diff`
of this session's edit to blind_eval.py showed, as context, its `import json` / `import time` lines, the signature
line of its `decode_bf16(generator, weights, n)` and its `--generator`, `--weights`, `--n`, `--dtype`, `--json` and
`--split` argument lines (no drawing code).  Also a `git diff --stat` of README.md, which changed during the
session without this file's doing (not read).  The other blind generators were run (not read) by the shared test.
"""

from __future__ import annotations

import colorsys
import io
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))      # the repository root, when run as a script
from engine.training.scenes import (COLOURS, DISTRACTOR_COLOURS, DISTRACTOR_SHAPES, SHAPES, Query, Scene,  # noqa: E402
                                    SceneObject, matches)

DEFAULT_SEED = 16161
KINDS = ("carpet", "bubblewrap", "acrylic", "terrazzo", "video", "lacquer", "book")
FAILS: Counter = Counter()          # why scene attempts were redrawn (for the command line's report)

# ----------------------------------------------------------------------------------------------------------------
# Colour: sRGB -> CIE Lab, shade families, reading a colour back as a name
# ----------------------------------------------------------------------------------------------------------------

_RGB_TO_XYZ = np.array([[0.4124564, 0.3575761, 0.1804375],
                        [0.2126729, 0.7151522, 0.0721750],
                        [0.0193339, 0.1191920, 0.9503041]])
_D65 = np.array([0.95047, 1.0, 1.08883])


def to_lab(rgb) -> np.ndarray:
    """CIE Lab (D65) of sRGB colours given in 0-255: shape (..., 3) -> (..., 3)."""
    c = np.asarray(rgb, np.float64) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = lin @ _RGB_TO_XYZ.T / _D65
    eps = (6 / 29) ** 3
    f = np.where(xyz > eps, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


# What each colour name looks like: a few sRGB anchors per name (this file's own choice). A colour reads as the
# name of the nearest anchor in Lab. The vocabulary's canonical shade is always one of its anchors.
SHADES: dict[str, list[tuple[int, int, int]]] = {
    "red": [(196, 24, 36), (238, 72, 56), (168, 20, 32)],
    "green": [(25, 130, 45), (100, 200, 70), (40, 160, 100)],
    "blue": [(25, 50, 175), (70, 130, 245), (40, 100, 200)],
    "yellow": [(235, 200, 35), (255, 240, 110)],
    "purple": [(105, 35, 150), (175, 100, 225), (130, 50, 170)],
    "orange": [(235, 105, 25), (255, 165, 60)],
    "white": [(232, 232, 226), (224, 228, 236)],
    "black": [(45, 45, 48), (35, 30, 25)],
    "pink": [(255, 198, 222), (250, 160, 196), (245, 128, 172)],
    "cyan": [(0, 225, 235), (70, 240, 250), (0, 200, 212), (60, 210, 205)],
    "brown": [(135, 78, 30), (100, 55, 22), (130, 88, 48)],
    "gray": [(115, 115, 115), (136, 136, 136), (156, 156, 156)],
}
for _name, _rgb in COLOURS.items():
    SHADES[_name].insert(0, tuple(_rgb))

FAMILY_NAME = np.array([name for name, anchors in SHADES.items() for _ in anchors])      # (K,)
FAMILY_LAB = to_lab(np.array([a for anchors in SHADES.values() for a in anchors]))      # (K, 3)


def read_colour(rgb) -> str:
    """The colour name an sRGB colour (0-255) reads as: that of the nearest shade anchor in Lab."""
    d = np.linalg.norm(FAMILY_LAB - to_lab(rgb), axis=-1)
    return str(FAMILY_NAME[int(np.argmin(d))])


def colour_margin(rgb, name: str) -> float:
    """How clearly `rgb` reads as `name`: Lab distance to the nearest anchor of another name less the distance
    to the nearest anchor of `name` (negative: it reads as something else)."""
    d = np.linalg.norm(FAMILY_LAB - to_lab(rgb), axis=-1)
    own = FAMILY_NAME == name
    return float(d[~own].min() - d[own].min())


def draw_shade(rng: np.random.Generator, name: str) -> np.ndarray:
    """A drawing shade of a colour name (float32 (3,), 0-255) that reads as that name with a 10 Lab margin.
    Vocabulary colours: between the canonical value and one of the name's anchors, plus a little noise;
    distractor colours: uniform in their `DISTRACTOR_COLOURS` (hue lo, hue hi, sat lo, sat hi, val lo, val hi)."""
    for _ in range(24):
        if name in COLOURS:
            anchors = SHADES[name]
            a = np.array(anchors[rng.integers(len(anchors))], np.float64)
            t = rng.random()
            rgb = (1 - t) * np.array(COLOURS[name], np.float64) + t * a + rng.normal(0, 5, 3)
        else:
            h0, h1, s0, s1, v0, v1 = DISTRACTOR_COLOURS[name]
            hue = (rng.uniform(h0, h1) % 360) / 360
            rgb = 255 * np.array(colorsys.hsv_to_rgb(hue, rng.uniform(s0, s1), rng.uniform(v0, v1)))
        rgb = np.clip(rgb, 0, 255)
        if colour_margin(rgb, name) >= 10:
            return rgb.astype(np.float32)
    return np.array(SHADES[name][0], np.float32)


# ----------------------------------------------------------------------------------------------------------------
# Small image helpers (float32 pictures in 0-255, shape (H, W, 3); alphas in 0-1, shape (H, W))
# ----------------------------------------------------------------------------------------------------------------

def pixel_noise(rng, h, w) -> np.ndarray:
    """White noise, unit variance: shape (h, w)."""
    return rng.standard_normal((h, w), dtype=np.float32)


def smooth_noise(rng, h, w, cell: float) -> np.ndarray:
    """Smooth value noise of about unit amplitude varying over `cell` px: shape (h, w)."""
    gh, gw = int(h / cell) + 3, int(w / cell) + 3
    grid = rng.standard_normal((gh, gw), dtype=np.float32)                       # (gh, gw)
    big = Image.fromarray(grid).resize((max(w, int(gw * cell)), max(h, int(gh * cell))), Image.BICUBIC)
    return np.asarray(big, np.float32)[:h, :w]                                  # (h, w)


def blend(pic: np.ndarray, alpha: np.ndarray, colour, x0: int = 0, y0: int = 0) -> None:
    """In place: pic[y0:y0+h, x0:x0+w] moves towards `colour` ((3,) or (h, w, 3)) by alpha (h, w); the part
    outside the picture is dropped."""
    H, W = pic.shape[:2]
    h, w = alpha.shape
    ax0, ay0 = max(0, -x0), max(0, -y0)
    ax1, ay1 = min(w, W - x0), min(h, H - y0)
    if ax0 >= ax1 or ay0 >= ay1:
        return
    a = alpha[ay0:ay1, ax0:ax1, None]                                           # (h', w', 1)
    col = colour if np.ndim(colour) == 1 else colour[ay0:ay1, ax0:ax1]
    reg = pic[y0 + ay0:y0 + ay1, x0 + ax0:x0 + ax1]                             # view (h', w', 3)
    reg += a * (np.asarray(col, np.float32) - reg)


def scale_region(pic: np.ndarray, factor: np.ndarray, x0: int, y0: int) -> None:
    """In place: multiply pic[y0:y0+h, x0:x0+w] by factor ((h, w) or (h, w, 3)), clipped to the picture."""
    H, W = pic.shape[:2]
    h, w = factor.shape[:2]
    ax0, ay0 = max(0, -x0), max(0, -y0)
    ax1, ay1 = min(w, W - x0), min(h, H - y0)
    if ax0 >= ax1 or ay0 >= ay1:
        return
    f = factor[ay0:ay1, ax0:ax1]
    pic[y0 + ay0:y0 + ay1, x0 + ax0:x0 + ax1] *= f[..., None] if f.ndim == 2 else f


def new_layer(W: int, H: int) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    im = Image.new("L", (W, H), 0)
    return im, ImageDraw.Draw(im)


def layer_alpha(im: Image.Image, blur: float = 0.0) -> np.ndarray:
    """An "L" layer as alpha, optionally blurred: shape (H, W), 0-1."""
    if blur > 0:
        im = im.filter(ImageFilter.GaussianBlur(blur))
    return np.asarray(im, np.float32) / 255.0


def shifted(a: np.ndarray, dx: int, dy: int, pad: int) -> np.ndarray:
    """a (h, w) padded by `pad` on every side and moved by (dx, dy): shape (h + 2 pad, w + 2 pad)."""
    h, w = a.shape
    out = np.zeros((h + 2 * pad, w + 2 * pad), a.dtype)
    out[pad + dy:pad + dy + h, pad + dx:pad + dx + w] = a
    return out


def moved(a: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """a (h, w) moved by (dx, dy) within its own box (what moves out is dropped, zeros move in): shape (h, w)."""
    pad = max(abs(dx), abs(dy))
    return shifted(a, dx, dy, pad)[pad:pad + a.shape[0], pad:pad + a.shape[1]]


def inner_band(cov: np.ndarray, width: float) -> np.ndarray:
    """Alpha of the part of a coverage within `width` px inside its edge: shape as cov."""
    dist = ndimage.distance_transform_edt(np.pad(cov >= 0.5, 1))[1:-1, 1:-1]
    return cov * np.clip(width + 0.5 - dist, 0, 1).astype(np.float32)


def jitter(rng, rgb, amount: float = 8.0) -> np.ndarray:
    return np.clip(np.asarray(rgb, np.float32) + rng.normal(0, amount, 3), 0, 255).astype(np.float32)


def wood_grain(rng, H: int, W: int, depth: float) -> np.ndarray:
    """Relative brightness of a wood surface: long straight-ish fibres at a random angle near an axis, growth
    rings a few px apart, slow figure: shape (H, W), about +-depth."""
    a = rng.uniform(-0.15, 0.15) + (np.pi / 2 if rng.random() < 0.5 else 0)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    across = xx * np.sin(a) - yy * np.cos(a) + 1.5 * smooth_noise(rng, H, W, 40)     # (H, W), px across the grain
    across -= across.min()
    n = int(across.max()) + 2
    prof = np.convolve(rng.standard_normal(n + 6), np.ones(3) / 3, "same")[:n]    # fibre by fibre
    rings = np.sin(np.arange(n) / rng.uniform(2, 4) + np.cumsum(rng.normal(0, 0.15, n)))
    prof = 0.5 * prof + 0.6 * np.clip(rings, 0, 1) ** 3
    grain = np.interp(across.ravel(), np.arange(n), prof).reshape(H, W).astype(np.float32)
    return depth * (grain - grain.mean()) + 0.3 * depth * smooth_noise(rng, H, W, 35)


def text_rows(draw: ImageDraw.ImageDraw, rng, box, colour, pitch: float, bar: int) -> None:
    """Lines of grey "words" (bars `bar` px high, rows `pitch` px apart) filling box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    y = y0
    while y + bar <= y1:
        x = x0 + (rng.uniform(6, 14) if rng.random() < 0.2 else 0)      # an indented first line now and then
        end = x1 - (rng.uniform(0, 0.5) * (x1 - x0) if rng.random() < 0.15 else 0)
        while x < end - 3:
            wlen = min(rng.uniform(4, 16), end - x)
            draw.rectangle([x, y, x + wlen, y + (bar - 1)], fill=colour)
            x += wlen + rng.uniform(2.5, 4.5)
        y += pitch


def sample(arr: np.ndarray, sx: np.ndarray, sy: np.ndarray, zero_outside: bool = False) -> np.ndarray:
    """Bilinear samples of arr (h, w) or (h, w, c) at continuous coordinates (pixel centres at +0.5):
    sx, sy (...) -> (...) or (..., c). Outside the array: its edge value, or 0 with `zero_outside`."""
    if zero_outside:
        arr = np.pad(arr, [(1, 1), (1, 1)] + [(0, 0)] * (arr.ndim - 2))
        sx, sy = sx + 1, sy + 1
    h, w = arr.shape[:2]
    fx, fy = sx - 0.5, sy - 0.5
    ix, iy = np.floor(fx), np.floor(fy)
    tx, ty = (fx - ix).astype(np.float32), (fy - iy).astype(np.float32)
    xa, ya = np.clip(ix, 0, w - 1).astype(np.intp), np.clip(iy, 0, h - 1).astype(np.intp)
    xb, yb = np.clip(ix + 1, 0, w - 1).astype(np.intp), np.clip(iy + 1, 0, h - 1).astype(np.intp)
    if arr.ndim == 3:
        tx, ty = tx[..., None], ty[..., None]
    top = arr[ya, xa] * (1 - tx) + arr[ya, xb] * tx
    bottom = arr[yb, xa] * (1 - tx) + arr[yb, xb] * tx
    return top * (1 - ty) + bottom * ty


# ----------------------------------------------------------------------------------------------------------------
# Geometric warps: design picture -> final picture, applied to the image and the labels alike
# ----------------------------------------------------------------------------------------------------------------

def homography(src, dst) -> np.ndarray:
    """The 3x3 projective map taking the four points src (4, 2) onto dst (4, 2)."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(src, dst):
        rows += [[x, y, 1, 0, 0, 0, -u * x, -u * y], [0, 0, 0, x, y, 1, -v * x, -v * y]]
        rhs += [u, v]
    h = np.linalg.solve(np.array(rows, np.float64), np.array(rhs, np.float64))
    return np.append(h, 1.0).reshape(3, 3)


def apply_homography(M, x, y):
    d = M[2, 0] * x + M[2, 1] * y + M[2, 2]
    return (M[0, 0] * x + M[0, 1] * y + M[0, 2]) / d, (M[1, 0] * x + M[1, 1] * y + M[1, 2]) / d


class PerspectiveWarp:
    """A camera looking at a flat design at an angle: the output canvas shows the quadrilateral `quad` (design
    coordinates, corners clockwise from top left) of the design."""

    def __init__(self, quad, W: int, H: int):
        self.inv = homography([(0, 0), (W, 0), (W, H), (0, H)], quad)     # output -> design
        self.fwd = np.linalg.inv(self.inv)                                # design -> output

    def inverse(self, x, y):
        return apply_homography(self.inv, x, y)

    def out_box(self, x0, y0, x1, y1):
        xs, ys = apply_homography(self.fwd, np.array([x0, x1, x1, x0], float), np.array([y0, y0, y1, y1], float))
        return int(np.floor(xs.min())) - 1, int(np.floor(ys.min())) - 1, int(np.ceil(xs.max())) + 1, \
            int(np.ceil(ys.max())) + 1

    def allowed(self, W: int, H: int, margin: float) -> np.ndarray:
        """Design pixels that land inside the output canvas, `margin` px clear: shape (H, W)."""
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32) + 0.5
        fx, fy = apply_homography(self.fwd, xx, yy)
        return (fx >= margin) & (fx <= W - margin) & (fy >= margin) & (fy <= H - margin)


class ShiftWarp:
    """A small displacement field: output pixel p shows design point p + shift(p), |shift| <= bound."""

    def __init__(self, shift, bound: float):
        self.shift, self.bound = shift, bound

    def inverse(self, x, y):
        dx, dy = self.shift(x, y)
        return x + dx, y + dy

    def out_box(self, x0, y0, x1, y1):
        b = int(np.ceil(self.bound)) + 1
        return x0 - b, y0 - b, x1 + b, y1 + b

    def allowed(self, W: int, H: int, margin: float) -> np.ndarray:
        m = int(np.ceil(margin + self.bound))
        ok = np.zeros((H, W), bool)
        ok[m:H - m, m:W - m] = True
        return ok


def local_rotation(warp, x: float, y: float) -> float:
    """Degrees the warp turns things by around output point (x, y) (the rotation part of its Jacobian)."""
    h = 3.0
    px, py = warp.inverse(np.array([x - h, x + h, x, x]), np.array([y, y, y - h, y + h]))
    J = np.array([[px[1] - px[0], px[3] - px[2]], [py[1] - py[0], py[3] - py[2]]]) / (2 * h)   # d design / d out
    J = np.linalg.inv(J)                                                                         # d out / d design
    return float(np.degrees(np.arctan2(J[1, 0] - J[0, 1], J[0, 0] + J[1, 1])))


# ----------------------------------------------------------------------------------------------------------------
# Shapes: outlines in a unit frame (y down, upright pose, circumscribed radius 1), rendered with anti-aliasing
# ----------------------------------------------------------------------------------------------------------------

def regular(k: int, r: float = 1.0, start: float = -90.0) -> np.ndarray:
    """k points evenly round a circle of radius r, the first at angle `start` (degrees; -90 is straight up)."""
    a = np.radians(start + 360.0 * np.arange(k) / k)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


def outline(shape: str, rng: np.random.Generator) -> tuple[list[tuple[np.ndarray, bool]], float]:
    """The shape as polygon layers [(points (k, 2), filled?)] drawn in order, and its rotational period in
    degrees (0: round, its tilt is 0)."""
    if shape in ("circle", "ring", "crescent"):
        layers = [(regular(96), True)]
        if shape == "ring":
            layers.append((regular(96, rng.uniform(0.5, 0.62)), False))
        if shape == "crescent":          # upright: the horns point up and down, the opening to the right
            layers.append((regular(96, rng.uniform(0.8, 0.9)) + [rng.uniform(0.4, 0.55), 0], False))
        return layers, 0.0 if shape != "crescent" else 360.0
    if shape == "square":
        return [(regular(4, 1, -45), True)], 90.0
    if shape == "triangle":
        return [(regular(3), True)], 120.0
    if shape == "hexagon":
        return [(regular(6), True)], 60.0
    if shape == "pentagon":
        return [(regular(5), True)], 72.0
    if shape == "star":
        pts = regular(10)
        pts[1::2] *= rng.uniform(0.4, 0.48)
        return [(pts, True)], 72.0
    if shape == "cross":                 # a plus sign, arms on the axes
        a = rng.uniform(0.27, 0.33)
        L = 1 / np.hypot(1, a)
        a *= L
        q = [(a, -L), (a, -a), (L, -a), (L, a), (a, a), (a, L), (-a, L), (-a, a), (-L, a), (-L, -a), (-a, -a),
             (-a, -L)]
        return [(np.array(q), True)], 90.0
    if shape == "diamond":               # a rhombus standing on a tip, never a square
        r = rng.uniform(0.56, 0.66)
        return [(np.array([(0, -1), (r, 0), (0, 1), (-r, 0)], float), True)], 180.0
    if shape == "ellipse":
        b = rng.uniform(0.52, 0.66)
        pts = regular(96)
        pts[:, 1] *= b
        return [(pts, True)], 180.0
    if shape == "rectangle":
        b = rng.uniform(0.45, 0.6)
        c, s = 1 / np.hypot(1, b), b / np.hypot(1, b)
        return [(np.array([(-c, -s), (c, -s), (c, s), (-c, s)]), True)], 180.0
    if shape == "heart":
        t = np.linspace(0, 2 * np.pi, 80, endpoint=False)
        lobes = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
        pts = np.stack([16 * np.sin(t) ** 3, -lobes], 1)                        # (80, 2), point down
        pts -= (pts.max(0) + pts.min(0)) / 2
        return [(pts / np.linalg.norm(pts, axis=1).max(), True)], 360.0
    if shape == "arrow":                 # upright: tip up
        head, shaft = rng.uniform(0.55, 0.68), rng.uniform(0.2, 0.27)
        base = rng.uniform(-0.2, -0.05)
        pts = np.array([(0, -1), (head, base), (shaft, base), (shaft, 1), (-shaft, 1), (-shaft, base), (-head, base)])
        pts[:, 1] -= (pts[:, 1].max() + pts[:, 1].min()) / 2
        return [(pts / np.linalg.norm(pts, axis=1).max(), True)], 360.0
    if shape == "trapezoid":             # upright: the long side down
        top, hh = rng.uniform(0.45, 0.62), rng.uniform(0.5, 0.66)
        pts = np.array([(-top, -hh), (top, -hh), (1, hh), (-1, hh)])
        return [(pts / np.linalg.norm(pts, axis=1).max(), True)], 360.0
    raise ValueError(shape)


def render(layers, cx: float, cy: float, radius: float, angle: float) -> tuple[np.ndarray, int, int]:
    """Anti-aliased coverage of the shape centred at (cx, cy), circumscribed radius `radius` px, turned by `angle`
    degrees: (coverage (h, w) in 0-1, x0, y0) with (x0, y0) the top left pixel of the box."""
    c, s = np.cos(np.radians(angle)), np.sin(np.radians(angle))
    rot = np.array([[c, -s], [s, c]])
    placed = [(pts @ rot.T * radius + (cx, cy), filled) for pts, filled in layers]
    allpts = np.concatenate([p for p, filled in placed if filled])
    x0, y0 = int(np.floor(allpts[:, 0].min())) - 1, int(np.floor(allpts[:, 1].min())) - 1
    x1, y1 = int(np.ceil(allpts[:, 0].max())) + 1, int(np.ceil(allpts[:, 1].max())) + 1
    ss = 4 if radius < 24 else 3 if radius < 48 else 2                          # supersampling
    w, h = x1 - x0, y1 - y0
    im = Image.new("L", (w * ss, h * ss), 0)
    draw = ImageDraw.Draw(im)
    for pts, filled in placed:
        draw.polygon([tuple(p) for p in (pts - (x0, y0)) * ss], fill=255 if filled else 0)
    cov = np.asarray(im, np.float32).reshape(h, ss, w, ss).mean((1, 3)) / 255.0   # (h*ss, w*ss) -> (h, w)
    return cov, x0, y0


# ----------------------------------------------------------------------------------------------------------------
# Placed objects (before the warp)
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Piece:
    shape: str
    colour: str
    rgb: np.ndarray          # drawing shade (3,)
    angle: float             # degrees turned from the upright pose
    period: float            # rotational period (0: round)
    diameter: float          # design circumscribed diameter, px
    top: np.ndarray          # coverage of the visible face, (h, w)
    sil: np.ndarray          # coverage of the whole silhouette (labels), (hs, w), same top left as `top`
    x0: int
    y0: int
    mask: np.ndarray = field(default=None)        # sil >= 0.5
    vis: np.ndarray = field(default=None)         # part of mask not covered by later pieces so far
    extra: dict = field(default_factory=dict)


def overlap(a_x0, a_y0, a_mask, b_x0, b_y0, b_mask):
    """Slices of a's and b's boxes where they overlap (None when they do not)."""
    ah, aw = a_mask.shape
    bh, bw = b_mask.shape
    ix0, iy0 = max(a_x0, b_x0), max(a_y0, b_y0)
    ix1, iy1 = min(a_x0 + aw, b_x0 + bw), min(a_y0 + ah, b_y0 + bh)
    if ix0 >= ix1 or iy0 >= iy1:
        return None
    return ((slice(iy0 - a_y0, iy1 - a_y0), slice(ix0 - a_x0, ix1 - a_x0)),
            (slice(iy0 - b_y0, iy1 - b_y0), slice(ix0 - b_x0, ix1 - b_x0)))


_DISK3 = np.hypot(*np.mgrid[-3:4, -3:4]) <= 3.2      # same-coloured objects stay this far apart


# ----------------------------------------------------------------------------------------------------------------
# Scene kinds
# ----------------------------------------------------------------------------------------------------------------

class Kind:
    """One scene kind: its ground, how objects are drawn on it, what goes over them, its warp and its camera."""
    name = ""
    size_scale = 1.0         # design diameters are multiplied by this (for magnifying warps)
    min_scale = 1.0          # and the smallest diameters by this

    def __init__(self, rng: np.random.Generator, W: int, H: int, tone: float):
        self.rng, self.W, self.H, self.tone = rng, W, H, tone
        self.warp = None
        self.allowed = None  # bool (H, W): design pixels an object may cover (set by ground)

    # -- hooks ------------------------------------------------------------------------------------------------
    def ground(self) -> np.ndarray:
        raise NotImplementedError

    def silhouette(self, cov: np.ndarray, diameter: float) -> tuple[np.ndarray, dict]:
        return cov, {}

    def shadow(self, pic: np.ndarray, covered: np.ndarray, p: Piece) -> None:
        pass

    def body(self, pic: np.ndarray, p: Piece) -> None:
        blend(pic, p.top, p.rgb, p.x0, p.y0)

    def over(self, pic: np.ndarray, pieces: list[Piece]) -> None:
        pass

    def after(self, img: np.ndarray) -> None:
        pass

    def camera(self, img: np.ndarray) -> Image.Image:
        return photo_effects(self.rng, img, self.tone)

    # -- shared pieces ----------------------------------------------------------------------------------------
    def default_allowed(self, margin: float = 3) -> np.ndarray:
        if self.warp is not None:
            return self.warp.allowed(self.W, self.H, margin)
        ok = np.zeros((self.H, self.W), bool)
        m = int(margin)
        ok[m:self.H - m, m:self.W - m] = True
        return ok

    def drop_shadow(self, pic, covered, p: Piece, dx: int, dy: int, blur: float, strength: float) -> None:
        """Darken the ground (not earlier objects) under a soft copy of the silhouette moved by (dx, dy)."""
        pad = int(np.ceil(2 * blur)) + max(abs(dx), abs(dy)) + 1
        sh = shifted(p.sil, dx, dy, pad)                                        # (hs + 2 pad, w + 2 pad)
        if blur > 0:
            sh = ndimage.gaussian_filter(sh, blur)
        x0, y0 = p.x0 - pad, p.y0 - pad
        hs, ws = sh.shape
        cy0, cx0 = max(0, y0), max(0, x0)
        cy1, cx1 = min(self.H, y0 + hs), min(self.W, x0 + ws)
        free = np.ones_like(sh)
        free[cy0 - y0:cy1 - y0, cx0 - x0:cx1 - x0] = 1 - covered[cy0:cy1, cx0:cx1]
        scale_region(pic, 1 - strength * sh * free, x0, y0)


class Carpet(Kind):
    """Felt cut-outs lying on a patterned rug, photographed at an angle."""
    name = "carpet"
    size_scale = 0.8
    GROUNDS = [(120, 42, 48), (40, 52, 90), (200, 180, 144), (98, 104, 72), (68, 66, 70), (152, 88, 62),
               (44, 90, 92), (178, 144, 100), (92, 60, 84)]

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        order = rng.permutation(len(self.GROUNDS))
        field_c, acc1, acc2 = (jitter(rng, self.GROUNDS[k], 6) for k in order[:3])
        flip = rng.random() < 0.4                     # bands across the other way: draw transposed
        w, h = (H, W) if flip else (W, H)
        img = Image.new("RGB", (w, h), tuple(int(v) for v in field_c))
        d = ImageDraw.Draw(img)
        style = rng.integers(3)
        if style == 0:                                # kilim: bands across, each with a zigzag line
            y = rng.uniform(-12, 0)
            while y < h:
                bh = rng.uniform(10, 30)
                if rng.random() < 0.5:
                    d.rectangle([0, y, w, y + bh], fill=tuple(int(v) for v in acc1))
                per, amp = rng.uniform(8, 16), bh * rng.uniform(0.2, 0.35)
                xs = np.arange(-per, w + per, per / 2)
                ys = y + bh / 2 + amp * ((np.arange(len(xs)) % 2) * 2 - 1)
                d.line(list(zip(xs, ys)), fill=tuple(int(v) for v in acc2), width=2)
                y += bh + rng.uniform(4, 14)
        elif style == 1:                              # vines: sinuous lines with little dabs along them
            for _ in range(rng.integers(4, 9)):
                y0, amp, f, ph = rng.uniform(0, h), rng.uniform(6, 22), rng.uniform(0.02, 0.06), rng.uniform(0, 6.3)
                xs = np.arange(-5, w + 6, 3.0)
                ys = y0 + amp * np.sin(xs * f + ph)
                col = tuple(int(v) for v in (acc1 if rng.random() < 0.5 else acc2))
                d.line(list(zip(xs, ys)), fill=col, width=int(rng.integers(2, 5)))
                for k in range(0, len(xs), int(rng.integers(5, 9))):      # 2 px dabs, too small to be shapes
                    d.ellipse([xs[k] - 1, ys[k] + 3, xs[k] + 1, ys[k] + 5], fill=col)
        else:                                         # abrash: a plain field in uneven dye bands, a border
            for _ in range(rng.integers(3, 7)):
                y0, bh = rng.uniform(0, h), rng.uniform(8, 40)
                tint = tuple(int(v) for v in np.clip(field_c * rng.uniform(0.88, 1.1), 0, 255))
                d.rectangle([0, y0, w, y0 + bh], fill=tint)
            for k in range(int(rng.integers(2, 4))):
                off = rng.uniform(4, 10) + 9 * k
                col = tuple(int(v) for v in (acc1, acc2)[k % 2])
                d.line([(0, off), (w, off)], fill=col, width=int(rng.integers(2, 5)))
        img = img.filter(ImageFilter.GaussianBlur(0.7))
        pic = np.asarray(img, np.float32)
        if flip:
            pic = pic.transpose(1, 0, 2).copy()                                     # (w, h, 3) -> (H, W, 3)
        # woollen pile: per-pixel knots, small tufts and a slow sheen
        pile = 1 + 0.07 * pixel_noise(rng, H, W) + 0.05 * smooth_noise(rng, H, W, 2.5) \
            + 0.05 * smooth_noise(rng, H, W, 40)
        pic *= pile[..., None]
        # a camera above the rug, looking at it at an angle: the far edge shows more rug
        ins = np.array([rng.uniform(0, 0.03), rng.uniform(0, 0.03), rng.uniform(0.05, 0.1), rng.uniform(0.05, 0.1)])
        far = rng.integers(4)                         # which side is far from the camera
        quad = self.keystone(ins, far, rng.uniform(0, 0.05))
        self.warp = PerspectiveWarp(quad, W, H)
        self.allowed = self.default_allowed(4)
        return pic

    def keystone(self, ins, far: int, vjit: float):
        """The design quadrilateral seen by a camera whose far side (0 top, 1 right, 2 bottom, 3 left) is wide:
        corners pulled in by `ins` (near corners more) of the canvas size."""
        W, H, rng = self.W, self.H, self.rng
        # corners clockwise from the top left in a frame where the far side is the top
        tl, tr, br, bl = (ins[0], 0), (1 - ins[1], 0), (1 - ins[2], 1), (ins[3], 1)
        pts = np.array([tl, tr, br, bl], float)
        pts[:, 1] = np.where(pts[:, 1] == 0, rng.uniform(0, vjit, 4), 1 - rng.uniform(0, vjit, 4))
        for _ in range(far):                          # turn the frame by 90 degrees clockwise
            pts = np.stack([1 - pts[:, 1], pts[:, 0]], 1)[[3, 0, 1, 2]]
        return pts * (W, H)

    def body(self, pic, p):
        rng = self.rng
        h, w = p.top.shape
        soft = ndimage.gaussian_filter(p.top, 0.7)
        edge = 4 * soft * (1 - soft)                                            # ~2 px band on the outline
        fray = 0.12 + 0.12 * min(1.0, p.diameter / 50)                        # small pieces fray less
        alpha = np.clip(p.top + fray * edge * pixel_noise(rng, h, w), 0, 1)    # fibres stick out of the felt
        tex = 1 + 0.05 * pixel_noise(rng, h, w) + 0.04 * smooth_noise(rng, h, w, 3)
        blend(pic, alpha, np.clip(p.rgb * tex[..., None], 0, 255), p.x0, p.y0)

    def shadow(self, pic, covered, p):
        self.drop_shadow(pic, covered, p, 1, 2, 1.2, 0.3)

    def over(self, pic, pieces):
        rng, W, H = self.rng, self.W, self.H
        im, d = new_layer(W, H)
        for _ in range(rng.integers(2, 7)):           # hairs: thin curved strands
            x, y = rng.uniform(0, W), rng.uniform(0, H)
            a, L, bend = rng.uniform(0, 2 * np.pi), rng.uniform(15, 60), rng.uniform(-0.06, 0.06)
            pts = []
            for _ in range(12):
                pts.append((x, y))
                x, y, a = x + np.cos(a) * L / 11, y + np.sin(a) * L / 11, a + bend
            d.line(pts, fill=int(rng.uniform(120, 200)), width=1)
        hair = layer_alpha(im)
        blend(pic, hair, (30, 26, 22) if rng.random() < 0.6 else (225, 220, 210))
        im, d = new_layer(W, H)
        for _ in range(rng.integers(3, 12)):          # lint: tiny pale fluff, at most 5 px
            x, y, r = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(0.8, 2.2)
            d.ellipse([x - r, y - r * rng.uniform(0.5, 1), x + r, y + r], fill=170)
        blend(pic, layer_alpha(im, 0.6), (215, 212, 205))


class BubbleWrap(Kind):
    """A printed card under a sheet of bubble wrap: every bubble magnifies a little, catches a highlight and has a
    shaded rim; some bubbles are popped; the film hazes the print and has creases."""
    name = "bubblewrap"
    min_scale = 1.3
    PAPERS = [(244, 243, 238), (241, 234, 214), (216, 224, 232), (224, 237, 222), (238, 226, 232), (70, 72, 80),
              (40, 48, 78)]
    PRINTS = [(250, 228, 180), (200, 226, 240), (214, 236, 200), (242, 210, 220), (225, 215, 240)]

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        paper = jitter(rng, self.PAPERS[rng.integers(len(self.PAPERS))], 4)
        pic = np.empty((H, W, 3), np.float32)
        pic[:] = paper
        if paper.mean() > 150 and rng.random() < 0.7:      # a broad printed wash across the card
            wash = jitter(rng, self.PRINTS[rng.integers(len(self.PRINTS))], 5)
            a = rng.uniform(0, 2 * np.pi)
            yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
            t = (xx * np.cos(a) + yy * np.sin(a)) / (W + H)
            t = np.clip((t - t.min()) / (np.ptp(t) + 1e-6) * rng.uniform(0.6, 1.2), 0, 1)
            blend(pic, t * rng.uniform(0.5, 0.9), wash)
        if rng.random() < 0.4:                              # a faint printed grid
            im, d = new_layer(W, H)
            step = rng.uniform(16, 30)
            for x in np.arange(rng.uniform(0, step), W, step):
                d.line([(x, 0), (x, H)], fill=255)
            for y in np.arange(rng.uniform(0, step), H, step):
                d.line([(0, y), (W, y)], fill=255)
            blend(pic, layer_alpha(im) * 0.25, (120, 130, 140) if paper.mean() > 150 else (200, 200, 205))
        pic *= (1 + 0.015 * pixel_noise(rng, H, W))[..., None]
        # the bubble lattice (hexagonal), in output coordinates
        self.pitch = rng.uniform(9, 16)
        self.radius = self.pitch * rng.uniform(0.38, 0.45)
        self.lat_angle = rng.uniform(0, np.pi / 3)
        self.lat_off = rng.uniform(0, self.pitch, 2)
        self.strength = rng.uniform(0.06, 0.15)        # lens magnification at a bubble's centre (1 / (1 - k))
        self.popped_seed = int(rng.integers(1 << 30))
        self.popped_rate = rng.uniform(0.0, 0.2)
        self.warp = ShiftWarp(self.lens_shift, self.strength * self.radius * 0.4 + 0.1)
        self.allowed = self.default_allowed(3)
        return pic

    def bubbles(self, x, y):
        """For points (x, y) (...): offset from the nearest bubble centre (dx, dy), distance to it, and whether
        that bubble is intact."""
        p, c, s = self.pitch, np.cos(self.lat_angle), np.sin(self.lat_angle)
        u = (x - self.lat_off[0]) * c + (y - self.lat_off[1]) * s
        v = -(x - self.lat_off[0]) * s + (y - self.lat_off[1]) * c
        row = p * np.sqrt(3)
        best = None
        for ou, ov in ((0.0, 0.0), (p / 2, row / 2)):   # a hex lattice is two offset rectangular ones
            iu, iv = np.round((u - ou) / p), np.round((v - ov) / row)
            du, dv = u - (iu * p + ou), v - (iv * row + ov)
            dd = du * du + dv * dv
            key = (iu * 2 + (ou > 0)) * 7919 + iv * 104729
            if best is None:
                best = [du, dv, dd, key]
            else:
                nearer = dd < best[2]
                best = [np.where(nearer, du, best[0]), np.where(nearer, dv, best[1]), np.where(nearer, dd, best[2]),
                        np.where(nearer, key, best[3])]
        du, dv, dd, key = best
        dx, dy = du * c - dv * s, du * s + dv * c                 # back to image axes
        h = (key * 2654435761 + self.popped_seed) % 1000003 / 1000003.0     # a fixed pseudo-random per bubble
        return dx, dy, np.sqrt(dd), h >= self.popped_rate

    def lens_shift(self, x, y):
        dx, dy, d, intact = self.bubbles(x, y)
        k = np.where(intact & (d < self.radius), self.strength * (1 - (d / self.radius) ** 2), 0.0)
        return -dx * k, -dy * k

    def after(self, img):
        rng, W, H = self.rng, self.W, self.H
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32) + 0.5
        dx, dy, d, intact = self.bubbles(xx, yy)
        r = self.radius
        la = rng.uniform(np.pi * 1.1, np.pi * 1.4)                 # light from the upper left
        lx, ly = np.cos(la), np.sin(la)
        rim = np.exp(-((d - r) / 0.9) ** 2) * np.where(intact, 1.0, 0.5)
        spot = np.exp(-(((dx - lx * 0.42 * r) ** 2 + (dy - ly * 0.42 * r) ** 2) / (0.2 * r) ** 2)) * intact
        back = np.exp(-((d - 0.78 * r) / 1.0) ** 2) * np.clip(-(dx * lx + dy * ly) / (d + 1e-3), 0, 1) * intact
        img *= (1 - rng.uniform(0.05, 0.1) * rim)[..., None]
        haze = rng.uniform(0.04, 0.1)
        blend(img, np.clip(haze + 0.75 * spot + 0.18 * back, 0, 1), (255, 255, 255))
        im, dr = new_layer(W, H)                                   # creases in the film
        for _ in range(rng.integers(1, 4)):
            a, cx, cy = rng.uniform(0, np.pi), rng.uniform(0, W), rng.uniform(0, H)
            L = W + H
            dr.line([(cx - np.cos(a) * L, cy - np.sin(a) * L), (cx + np.cos(a) * L, cy + np.sin(a) * L)], fill=255,
                    width=int(rng.integers(1, 3)))
        blend(img, layer_alpha(im, 1.2) * rng.uniform(0.15, 0.3), (255, 255, 255))


class Acrylic(Kind):
    """Laser-cut acrylic pieces on the bed they were cut on: translucent tinted bodies, glowing cut edges, a lit
    chamfer, soft shadows; scorch marks, clear offcut strips and scraps of masking paper lie around."""
    name = "acrylic"
    BEDS = [(222, 198, 162), (172, 132, 98), (40, 40, 42), (124, 126, 128), (200, 200, 196)]

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        k = rng.integers(len(self.BEDS))
        pic = np.empty((H, W, 3), np.float32)
        pic[:] = jitter(rng, self.BEDS[k], 5)
        if k in (0, 1):                                              # wood: grain bands, fibres
            pic *= (1 + wood_grain(rng, H, W, 0.06) + 0.02 * pixel_noise(rng, H, W))[..., None]
        else:
            pic *= (1 + 0.035 * pixel_noise(rng, H, W) + 0.03 * smooth_noise(rng, H, W, 30))[..., None]
        self.light = (int(rng.integers(2, 5)), int(rng.integers(2, 5)))  # shadow offset (light from upper left)
        im, d = new_layer(W, H)                                      # scorch marks: soft brown smudges
        for _ in range(rng.integers(0, 4)):
            x, y, r = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(6, 16)
            d.ellipse([x - r, y - r * 0.6, x + r, y + r * 0.6], fill=int(rng.uniform(60, 120)))
        blend(pic, layer_alpha(im, 6), (60, 38, 22))
        self.leftovers(pic)
        self.allowed = self.default_allowed(3)
        return pic

    def shadow(self, pic, covered, p):
        self.drop_shadow(pic, covered, p, int(self.light[0]), int(self.light[1]), 1.6, 0.32)

    def body(self, pic, p):
        rng = self.rng
        h, w = p.top.shape
        reg = pic[p.y0:p.y0 + h, p.x0:p.x0 + w]
        lum = reg.mean(-1)
        trans = rng.uniform(0.1, 0.18)                             # the bed shows through the tinted body
        bodyc = p.rgb * (1 - trans + trans * (lum / (lum.mean() + 1e-3)))[..., None]
        glow_c = p.rgb + (255 - p.rgb) * 0.45                       # the cut edge gathers light
        band = inner_band(p.top, 1.2)
        col = bodyc * (1 - band[..., None]) + glow_c * band[..., None]
        blend(pic, p.top, np.clip(col, 0, 255), p.x0, p.y0)
        pad = 2                                                      # a thin halo just outside the edge
        halo = ndimage.gaussian_filter(np.pad(p.top, pad), 1.0) * (1 - np.pad(p.top, pad))
        blend(pic, halo * 0.35, np.clip(glow_c, 0, 255), p.x0 - pad, p.y0 - pad)
        lit = np.clip(p.top - moved(p.top, 1, 1), 0, 1)                      # the chamfer facing the light
        blend(pic, lit * 0.45, (255, 255, 255), p.x0, p.y0)
        if p.diameter >= 40 and rng.random() < 0.35:               # engraved rows of text, frosted
            im, d = new_layer(w, h)
            text_rows(d, rng, (w * 0.28, h * 0.35, w * 0.72, h * 0.65), 255, 4.0, 1)
            blend(pic, layer_alpha(im) * p.top * 0.3, (255, 255, 255), p.x0, p.y0)

    def leftovers(self, pic):
        """What lies on the bed under the pieces: clear offcut strips and peeled masking paper."""
        rng, W, H = self.rng, self.W, self.H
        im, d = new_layer(W, H)                                      # clear offcut strips: only their edges show
        for _ in range(rng.integers(0, 3)):
            x, y, a = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(0, np.pi)
            L, t = rng.uniform(50, 140), rng.uniform(3, 6)
            ux, uy, nx, ny = np.cos(a), np.sin(a), -np.sin(a) * t, np.cos(a) * t
            for s in (0, 1):
                d.line([(x + s * nx, y + s * ny), (x + ux * L + s * nx, y + uy * L + s * ny)], fill=200, width=1)
        blend(pic, layer_alpha(im, 0.4), (255, 255, 255))
        for _ in range(rng.integers(0, 3)):                         # peeled masking paper: long curled ribbons
            x, y, a = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(0, 2 * np.pi)
            L, bend, wid = rng.uniform(28, 60), rng.uniform(-0.12, 0.12), int(rng.integers(3, 6))
            pts = []
            for _ in range(10):                                      # a gentle arc, at least 5x its width long
                pts.append((x, y))
                x, y, a = x + np.cos(a) * L / 9, y + np.sin(a) * L / 9, a + bend
            im, d = new_layer(W, H)
            d.line(pts, fill=255, width=wid, joint="curve")
            a = layer_alpha(im, 0.5)
            sh = np.roll(np.roll(a, 2, 0), 2, 1)
            pic *= (1 - 0.25 * sh * (1 - a))[..., None]
            blend(pic, a, jitter(self.rng, (212, 192, 150), 6))


class Terrazzo(Kind):
    """Coloured resin inlays set in a polished terrazzo floor: stone chips everywhere (also a few in the inlays),
    a metal divider strip round each inlay, window glare on the polish, a mild camera angle."""
    name = "terrazzo"
    size_scale = 0.88
    MATRIX = [(206, 205, 200), (232, 229, 222), (214, 200, 180), (222, 198, 190), (84, 84, 88), (182, 190, 174)]
    STONES = [(236, 233, 226), (150, 148, 144), (178, 116, 102), (192, 166, 120), (114, 132, 114), (206, 190, 158),
              (122, 98, 82), (90, 90, 94)]

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        base = jitter(rng, self.MATRIX[rng.integers(len(self.MATRIX))], 5)
        img = Image.new("RGB", (W, H), tuple(int(v) for v in base))
        d = ImageDraw.Draw(img)
        stones = [jitter(rng, self.STONES[k], 6) for k in rng.choice(len(self.STONES), 4, replace=False)]
        n = int(W * H / rng.uniform(60, 120))
        cx, cy = rng.uniform(0, W, n), rng.uniform(0, H, n)
        rad = 1.2 + 2.6 * rng.random(n) ** 2                     # chips of at most 8 px, mostly small
        which = rng.integers(len(stones), size=n)
        for k in range(n):                                         # irregular angular chips
            m = int(rng.integers(5, 9))
            ang = np.sort(rng.uniform(0, 2 * np.pi, m))
            rr = rad[k] * rng.uniform(0.35, 1.0, m)
            col = stones[which[k]] * rng.uniform(0.92, 1.06)
            d.polygon([(cx[k] + r * np.cos(a), cy[k] + r * np.sin(a)) for r, a in zip(rr, ang)],
                      fill=tuple(int(v) for v in np.clip(col, 0, 255)))
        pic = np.asarray(img, np.float32).copy()
        speck = rng.random((H, W)) < 0.03                           # one-pixel grit
        pic[speck] = pic[speck] * rng.uniform(0.7, 1.25, (int(speck.sum()), 1))
        pic *= (1 + 0.025 * pixel_noise(rng, H, W))[..., None]
        if rng.random() < 0.4:                                      # one straight divider strip across
            im, d2 = new_layer(W, H)
            a, x, y = rng.uniform(0, np.pi), rng.uniform(0, W), rng.uniform(0, H)
            L = W + H
            d2.line([(x - np.cos(a) * L, y - np.sin(a) * L), (x + np.cos(a) * L, y + np.sin(a) * L)], fill=255, width=2)
            blend(pic, layer_alpha(im), (178, 152, 96) if rng.random() < 0.5 else (168, 170, 172))
        self.metal = np.array((182, 156, 100) if rng.random() < 0.5 else (170, 172, 174), np.float32)
        ins = np.array([rng.uniform(0, 0.02), rng.uniform(0, 0.02), rng.uniform(0.02, 0.06), rng.uniform(0.02, 0.06)])
        self.warp = PerspectiveWarp(Carpet.keystone(self, ins, rng.integers(4), 0.03), W, H)
        self.allowed = self.default_allowed(4)
        return pic

    def body(self, pic, p):
        rng = self.rng
        h, w = p.top.shape
        col = np.broadcast_to(p.rgb, (h, w, 3)).copy()
        chips = rng.random((h, w)) < 0.05                          # a few small chips in the resin too
        col[chips] *= rng.uniform(0.75, 1.2, (int(chips.sum()), 1))
        col *= (1 + 0.02 * pixel_noise(rng, h, w))[..., None]
        blend(pic, p.top, np.clip(col, 0, 255), p.x0, p.y0)
        if p.diameter >= 28:                                          # the divider strip round the inlay
            blend(pic, inner_band(p.top, 0.7), self.metal, p.x0, p.y0)

    def after(self, img):
        rng, W, H = self.rng, self.W, self.H
        # window glare on the polish: a broad soft band and a soft bright patch
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        a = rng.uniform(0, np.pi)
        t = (xx * np.cos(a) + yy * np.sin(a)) - rng.uniform(0, W * abs(np.cos(a)) + H * abs(np.sin(a)))
        band = np.exp(-(t / (0.18 * (W + H) / 2)) ** 2) * rng.uniform(0.08, 0.2)
        blend(img, band, (255, 255, 255))
        im, d = new_layer(W, H)                                    # fine cracks in the floor
        for _ in range(rng.integers(0, 3)):
            x, y, a = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(0, 2 * np.pi)
            pts = [(x, y)]
            for _ in range(int(rng.integers(4, 10))):
                a += rng.normal(0, 0.5)
                x, y = x + 6 * np.cos(a), y + 6 * np.sin(a)
                pts.append((x, y))
            d.line(pts, fill=int(rng.uniform(60, 120)), width=1)
        blend(img, layer_alpha(im), (60, 58, 56))


class Video(Kind):
    """A frame grabbed from low-bitrate streamed video of a cartoon: flat cel-shaded shapes on a backdrop with
    colour banding, a channel logo, a news ticker, sometimes letterbox bars and interlace combing; then soft
    upscaling, smeared chroma and heavy block compression."""
    name = "video"
    min_scale = 1.15
    SKIES = [((110, 170, 230), (190, 222, 246)), ((250, 196, 150), (252, 232, 204)), ((150, 140, 200), (230, 200, 220))]
    GROUNDS = [(112, 176, 82), (226, 206, 152), (120, 130, 120), (176, 200, 120)]
    STUDIO = [((60, 70, 110), (140, 150, 190)), ((50, 90, 90), (150, 200, 190)), ((110, 60, 80), (220, 170, 170)),
              ((200, 200, 196), (245, 245, 240))]

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        yy = np.linspace(0, 1, H, dtype=np.float32)[:, None, None]            # (H, 1, 1)
        pic = np.empty((H, W, 3), np.float32)
        if rng.random() < 0.55:                                                # outdoors: sky, hills
            top, low = (np.array(c, np.float32) for c in self.SKIES[rng.integers(len(self.SKIES))])
            pic[:] = top + (low - top) * yy
            img = Image.fromarray(pic.astype(np.uint8))
            d = ImageDraw.Draw(img)
            for layer in range(int(rng.integers(1, 3))):
                g = jitter(rng, self.GROUNDS[rng.integers(len(self.GROUNDS))], 8) * (1 - 0.1 * layer)
                hor, amp = H * rng.uniform(0.45, 0.75) + layer * H * 0.1, rng.uniform(4, 0.1 * H)
                xs = np.arange(0, W + 8, 8.0)
                ys = hor + amp * np.sin(xs / rng.uniform(30, 90) + rng.uniform(0, 6.3))
                d.polygon(list(zip(xs, ys)) + [(W, H), (0, H)], fill=tuple(int(v) for v in g))
            pic = np.asarray(img, np.float32).copy()
        else:                                                                   # studio: backdrop and floor
            a, b = (np.array(c, np.float32) for c in self.STUDIO[rng.integers(len(self.STUDIO))])
            pic[:] = a + (b - a) * yy[::-1] if rng.random() < 0.5 else a + (b - a) * yy
            floor = int(H * rng.uniform(0.6, 0.8))
            pic[floor:] *= rng.uniform(0.7, 0.85)
        step = rng.uniform(5, 9)                                               # colour banding
        pic = np.round(pic / step) * step
        # regions objects keep out of: letterbox bars, the ticker, the logo
        self.bars = int(H * rng.uniform(0.06, 0.1)) if rng.random() < 0.35 else 0
        self.ticker = int(H * rng.uniform(0.08, 0.12)) if rng.random() < 0.5 else 0
        self.logo = rng.random() < 0.7
        self.logo_right = rng.random() < 0.6
        ok = np.zeros((H, W), bool)
        y0, y1 = self.bars + 3, H - self.bars - self.ticker - 3
        ok[y0:y1, 3:W - 3] = True
        if self.logo:
            lw, lh = int(W * 0.2), int(H * 0.16) + self.bars
            if self.logo_right:
                ok[:lh, W - lw:] = False
            else:
                ok[:lh, :lw] = False
        self.comb = int(rng.integers(1, 3)) if rng.random() < 0.45 else 0     # interlaced fields out of step
        if self.comb:
            comb = self.comb
            self.warp = ShiftWarp(lambda x, y: (np.where(np.floor(y) % 2 == 1, -comb, 0) + 0 * x, 0 * y), comb)
            ok &= self.warp.allowed(W, H, 3)
        self.allowed = ok
        self.outlined = rng.random() < 0.6
        return pic

    def shadow(self, pic, covered, p):
        if self.outlined:
            self.drop_shadow(pic, covered, p, 2, 3, 0.0, 0.25)

    def body(self, pic, p):
        blend(pic, p.top, p.rgb, p.x0, p.y0)
        sliver = np.clip(p.top - moved(p.top, 2, 2), 0, 1)                    # cel highlight, upper left
        blend(pic, sliver * 0.8, p.rgb + (255 - p.rgb) * 0.35, p.x0, p.y0)
        if self.outlined:
            blend(pic, inner_band(p.top, 1.3), p.rgb * 0.3, p.x0, p.y0)

    def over(self, pic, pieces):
        rng, W, H = self.rng, self.W, self.H
        if self.ticker:
            y0 = H - self.bars - self.ticker
            band = jitter(rng, [(28, 30, 44), (44, 44, 48), (20, 40, 70)][rng.integers(3)], 4)
            pic[y0:H - self.bars] = pic[y0:H - self.bars] * 0.15 + band * 0.85
            im, d = new_layer(W, H)
            text_rows(d, rng, (4 - rng.uniform(0, 30), y0 + self.ticker * 0.35, W, y0 + self.ticker * 0.35 + 3),
                      255, 10, 2)
            blend(pic, layer_alpha(im) * 0.9, (240, 240, 240))
        if self.bars:
            pic[:self.bars] = 8
            pic[H - self.bars:] = 8
        if self.logo:                                     # channel logo: open letter strokes, half transparent
            im, d = new_layer(W, H)
            s = max(6.0, H * 0.05)
            x = W - s * 3.4 - 6 if self.logo_right else 6.0
            y = self.bars + 6
            glyphs = [[(0, 0), (0, 1.2)], [(0.8, 0), (0, 0.6), (0.8, 1.2)], [(0, 1.2), (0, 0), (0.8, 1.2), (0.8, 0)],
                      [(0, 0), (0.8, 0), (0, 1.2), (0.8, 1.2)], [(0, 0), (0.4, 1.2), (0.8, 0)],
                      [(0, 1.2), (0, 0), (0.4, 0.7), (0.8, 0), (0.8, 1.2)]]
            for k in range(3):
                g = glyphs[rng.integers(len(glyphs))]
                d.line([(x + k * s * 1.1 + gx * s, y + gy * s) for gx, gy in g], fill=255, width=max(1, int(s / 5)))
            blend(pic, layer_alpha(im) * 0.55, (255, 255, 255))

    def camera(self, img):
        rng, W, H, tone = self.rng, self.W, self.H, self.tone
        im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
        f = 1 - (1 - rng.uniform(0.5, 0.8)) * tone                              # streamed at a lower resolution
        im = im.resize((max(32, int(W * f)), max(32, int(H * f))), Image.BILINEAR).resize((W, H), Image.BILINEAR)
        ycc = np.asarray(im.convert("YCbCr"), np.float32).copy()
        k = 2 if tone < 1 else int(rng.integers(2, 4))                          # chroma at a coarser grid
        for c in (1, 2):
            ch = Image.fromarray(ycc[..., c]).resize((max(8, W // k), max(8, H // k)), Image.BILINEAR)
            ycc[..., c] = np.asarray(ch.resize((W, H), Image.BILINEAR), np.float32)
        ycc[..., 0] += rng.normal(0, 1.5 * tone, (H, W)).astype(np.float32)
        ycc8 = np.clip(ycc, 0, 255).astype(np.uint8)
        im = Image.merge("YCbCr", [Image.fromarray(np.ascontiguousarray(ycc8[..., c])) for c in range(3)])
        im = im.convert("RGB")
        q = int(round(90 - (90 - rng.uniform(22, 40)) * tone))                  # heavy block compression
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=q, subsampling=2)
        return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


class Lacquer(Kind):
    """Painted wooden blocks standing on a glossy lacquered table, seen a little from above: a darker side face
    under each top face, a mirrored glint of the side and a faint smeared reflection below it, a lamp's hot spot
    and a sheen band on the polish, dust and faint fingerprints."""
    name = "lacquer"
    TABLES = [(20, 20, 23), (74, 50, 36), (234, 232, 226), (88, 36, 32), (66, 78, 96), (220, 208, 186)]

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        k = rng.integers(len(self.TABLES))
        table = jitter(rng, self.TABLES[k], 4)
        pic = np.empty((H, W, 3), np.float32)
        pic[:] = table
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
        if k in (1, 3):                                                    # wood under the lacquer
            pic *= (1 + wood_grain(rng, H, W, 0.08))[..., None]
        # the polish: brighter towards the far edge, a lamp's hot spot, a sheen band
        fres = (1 - yy / H) * rng.uniform(0.04, 0.14)
        lx, ly, ls = rng.uniform(0, W), rng.uniform(0, H * 0.6), rng.uniform(0.15, 0.3) * min(W, H)
        spot = np.exp(-((xx - lx) ** 2 + (yy - ly) ** 2) / (2 * ls * ls)) * rng.uniform(0.15, 0.35)
        a = rng.uniform(0.3, 1.2)
        t = xx * np.cos(a) + yy * np.sin(a) - rng.uniform(0.2, 0.8) * (W * np.cos(a) + H * np.sin(a))
        sheen = np.exp(-(t / (0.06 * (W + H))) ** 2) * rng.uniform(0.05, 0.15)
        blend(pic, np.clip(fres + spot + sheen, 0, 0.6), (255, 252, 246))
        im, d = new_layer(W, H)                                            # fingerprints: faint ridged whorls
        for _ in range(rng.integers(0, 3)):
            x, y, r = rng.uniform(0, W), rng.uniform(0, H), rng.uniform(5, 10)
            for rr in np.arange(1.5, r, 1.6):
                a0 = rng.uniform(0, 360)
                d.arc([x - rr, y - rr * 1.3, x + rr, y + rr * 1.3], a0, a0 + rng.uniform(200, 320), fill=255)
        dust = rng.random((H, W)) < 0.0015
        img_a = layer_alpha(im, 0.5) * 0.07 + dust * 0.5
        blend(pic, img_a, (200, 200, 200) if table.mean() < 128 else (120, 120, 120))
        self.table_dark = table.mean() < 128
        self.allowed = self.default_allowed(3)
        self.allowed[-8:] = False
        return pic

    def silhouette(self, cov, diameter):
        t = int(np.clip(round(0.07 * diameter), 1, 4))
        h, w = cov.shape
        sil = np.zeros((h + t, w), np.float32)                        # the top face and the side face below it
        for k in range(t + 1):
            sil[k:k + h] = np.maximum(sil[k:k + h], cov)
        return sil, {"t": t}

    def shadow(self, pic, covered, p):
        t = p.extra["t"]
        hs, w = p.sil.shape
        pad = 3 * t + 3
        below = shifted(p.sil, 0, t, pad) - np.pad(p.sil, pad)        # the side face's mirror image
        glint = np.clip(below, 0, 1)
        smear = ndimage.gaussian_filter(shifted(p.sil, 0, 2 * t + 1, pad), [1.5 + t, 0.8])
        smear = np.clip(smear - np.pad(p.sil, pad), 0, 1)
        free = 1 - covered[max(0, p.y0 - pad):p.y0 - pad + hs + 2 * pad, max(0, p.x0 - pad):p.x0 - pad + w + 2 * pad]
        full = np.ones((hs + 2 * pad, w + 2 * pad), np.float32)
        oy, ox = max(0, p.y0 - pad) - (p.y0 - pad), max(0, p.x0 - pad) - (p.x0 - pad)
        full[oy:oy + free.shape[0], ox:ox + free.shape[1]] = free
        blend(pic, glint * 0.45 * full, p.rgb * 0.45, p.x0 - pad, p.y0 - pad)
        blend(pic, smear * 0.14 * full, p.rgb * 0.6, p.x0 - pad, p.y0 - pad)

    def body(self, pic, p):
        rng = self.rng
        h, w = p.top.shape
        side = p.rgb * rng.uniform(0.55, 0.68)
        blend(pic, p.sil, side, p.x0, p.y0)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        satin = 1 + 0.05 * (1 - (xx / w + yy / h))                     # a little lighter towards the lamp
        col = p.rgb * satin[..., None] * (1 + 0.015 * pixel_noise(rng, h, w))[..., None]
        blend(pic, p.top, np.clip(col, 0, 255), p.x0, p.y0)
        edge = np.clip(p.top - moved(p.top, 0, -1), 0, 1)                    # the top face's near edge, lit
        blend(pic, edge * 0.3, (255, 255, 255), p.x0, p.y0)


class Book(Kind):
    """A phone photo of an open picture book: two pages (or one and a bit) with printed washes, lines of text and
    page numbers; the pages curl up towards the gutter (image and labels warped alike), the gutter is shaded,
    the page stack shows at the outer edges, the table shows round the book, the phone's shadow falls on it."""
    name = "book"
    TABLES = [(150, 110, 76), (52, 56, 70), (224, 224, 220), (96, 72, 56)]
    PAPERS = [(246, 244, 238), (243, 235, 215), (236, 236, 232)]
    WASHES = [(245, 232, 190), (214, 230, 244), (222, 240, 214), (250, 224, 206), (236, 226, 244), (232, 238, 200),
              (36, 46, 86), (32, 72, 62), (70, 50, 90)]                  # pastel days and dark night scenes

    def ground(self):
        rng, W, H = self.rng, self.W, self.H
        table = jitter(rng, self.TABLES[rng.integers(len(self.TABLES))], 5)
        paper = jitter(rng, self.PAPERS[rng.integers(len(self.PAPERS))], 3)
        img = Image.new("RGB", (W, H), tuple(int(v) for v in table))
        d = ImageDraw.Draw(img)
        # the book: some sides run off the photo
        bx0 = 0 if rng.random() < 0.5 else rng.uniform(0.02, 0.07) * W
        bx1 = W if rng.random() < 0.5 else W - rng.uniform(0.02, 0.07) * W
        by0 = 0 if rng.random() < 0.4 else rng.uniform(0.03, 0.08) * H
        by1 = H if rng.random() < 0.4 else H - rng.uniform(0.03, 0.08) * H
        if W > 1.2 * H:
            gx = bx0 + (bx1 - bx0) * rng.uniform(0.4, 0.6)
        else:                                                          # one page and the edge of the other
            gx = bx0 + (bx1 - bx0) * (rng.uniform(0.06, 0.12) if rng.random() < 0.5 else rng.uniform(0.88, 0.94))
        d.rectangle([bx0, by0, bx1, by1], fill=tuple(int(v) for v in paper))
        ok = np.zeros((H, W), bool)
        tcol = tuple(int(v) for v in jitter(rng, (70, 70, 76), 6))
        for px0, px1 in ((bx0, gx), (gx, bx1)):
            pw = px1 - px0
            if pw < 0.25 * W:
                continue
            m = 0.07 * pw
            ix0, ix1, iy0, iy1 = px0 + m, px1 - m, by0 + 0.06 * H, by1 - 0.06 * H
            text_h = (iy1 - iy0) * rng.uniform(0.18, 0.3) if rng.random() < 0.65 else 0
            text_top = rng.random() < 0.4
            py0, py1 = (iy0 + text_h + 4, iy1) if text_top else (iy0, iy1 - text_h - 4)
            if rng.random() < 0.7:                                     # the illustration's printed wash
                washes = self.WASHES[6:] if rng.random() < 0.3 else self.WASHES[:6]     # night or day
                wash = jitter(rng, washes[rng.integers(len(washes))], 4)
                d.rectangle([ix0, py0, ix1, py1], fill=tuple(int(v) for v in wash))
                if rng.random() < 0.5:                                 # and a second one for the ground
                    g2 = jitter(rng, washes[rng.integers(len(washes))], 4)
                    hy = py0 + (py1 - py0) * rng.uniform(0.55, 0.8)
                    xs = np.arange(ix0, ix1 + 6, 6.0)
                    ys = np.minimum(py1, hy + 4 * np.sin(xs / 20))
                    d.polygon(list(zip(xs, ys)) + [(ix1, py1), (ix0, py1)], fill=tuple(int(v) for v in g2))
            if text_h:
                ty0 = iy0 if text_top else iy1 - text_h
                text_rows(d, rng, (ix0, ty0, ix1, ty0 + text_h), tcol, rng.uniform(5, 7), 2)
            d.rectangle([px0 + pw / 2 - 3, by1 - 0.035 * H, px0 + pw / 2 + 3, by1 - 0.035 * H + 1], fill=tcol)
            # where objects may go: the illustration, clear of the gutter and of the page's edge
            keep = 0.1 * W
            ax0, ax1 = max(ix0, gx + keep) if px0 >= gx else ix0, min(ix1, gx - keep) if px1 <= gx else ix1
            ok[int(py0) + 2:int(py1) - 2, int(ax0) + 2:int(ax1) - 2] = True
        for side in (bx0, bx1):                                        # the page stack at the outer edges
            if 0 < side < W:
                for k in range(1, 4):
                    x = side + (-1 if side == bx0 else 1) * k * 1.5
                    d.line([(x, by0 + k), (x, by1 - k)], fill=tuple(int(v) for v in paper * 0.82), width=1)
        pic = np.asarray(img, np.float32).copy()
        pic *= (1 + 0.02 * pixel_noise(rng, H, W))[..., None]
        # the curl: pages rise towards the gutter, so lines bend and crowd into it
        self.gx, self.curl_w = gx, rng.uniform(0.08, 0.15) * W
        A, B, C = rng.uniform(3, 7), rng.uniform(-2, 2), rng.uniform(2, 5)
        gx_, cw, cy, hh = gx, self.curl_w, H / 2, H / 2

        def curl(x, y):
            g = np.exp(-np.abs(x - gx_) / cw)
            return C * g * np.sign(x - gx_), g * (A * (y - cy) / hh + B)

        self.warp = ShiftWarp(curl, A + abs(B) + C)
        self.allowed = ok & self.default_allowed(3)
        self.outlined = rng.random() < 0.4
        return pic

    def body(self, pic, p):
        h, w = p.top.shape
        reg = pic[p.y0:p.y0 + h, p.x0:p.x0 + w]
        ink = p.rgb * 0.94 + reg * 0.06                                    # ink over paper
        ink *= (1 + 0.025 * pixel_noise(self.rng, h, w))[..., None]
        blend(pic, p.top, np.clip(ink, 0, 255), p.x0, p.y0)
        if self.outlined:
            blend(pic, inner_band(p.top, 1.0) * 0.9, (40, 38, 40), p.x0, p.y0)

    def after(self, img):
        rng, W, H = self.rng, self.W, self.H
        xx = np.arange(W, dtype=np.float32)[None, :]
        gut = 1 - rng.uniform(0.3, 0.55) * np.exp(-np.abs(xx - self.gx) / (self.curl_w * 0.35))   # (1, W)
        img *= gut[..., None]
        # the phone's soft shadow from one side, a warm room light
        yy = np.arange(H, dtype=np.float32)[:, None]
        side = rng.integers(4)
        dist = [yy / H, 1 - xx / W, 1 - yy / H, xx / W][side]
        img *= (1 - rng.uniform(0.08, 0.2) * np.exp(-dist / 0.15))[..., None]


KIND_CLASSES = {c.name: c for c in (Carpet, BubbleWrap, Acrylic, Terrazzo, Video, Lacquer, Book)}
assert tuple(KIND_CLASSES) == KINDS


def photo_effects(rng: np.random.Generator, img: np.ndarray, tone: float) -> Image.Image:
    """A phone camera: exposure, white balance, vignette, a little blur, sensor noise, JPEG. `tone` (0-1)
    scales every effect. img (H, W, 3) float -> RGB image."""
    H, W = img.shape[:2]
    gain = np.exp(rng.normal(0, 0.06 * tone)) * (1 + rng.uniform(-0.05, 0.05, 3) * tone)     # exposure, balance
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    cx, cy = W * rng.uniform(0.35, 0.65), H * rng.uniform(0.35, 0.65)
    r2 = np.minimum(1, ((xx - cx) ** 2 + (yy - cy) ** 2) / ((W * W + H * H) / 4))
    vig = 1 - rng.uniform(0, 0.15) * tone * r2
    out = img * gain.astype(np.float32) * vig[..., None]
    im = Image.fromarray(np.clip(out, 0, 255).astype(np.uint8))
    blur = rng.uniform(0, 0.7) * tone
    if blur > 0.25:
        im = im.filter(ImageFilter.GaussianBlur(blur))
    arr = np.asarray(im, np.float32) + rng.normal(0, rng.uniform(1, 4) * tone + 0.5, (H, W, 1)).astype(np.float32) \
        + rng.normal(0, 1.2 * tone + 0.3, (H, W, 3)).astype(np.float32)
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=int(round(95 - rng.uniform(3, 35) * tone)))
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


# ----------------------------------------------------------------------------------------------------------------
# Canvas, count and kind of scene i (fixed across redraws)
# ----------------------------------------------------------------------------------------------------------------

def canvas_and_count(seed: int, i: int) -> tuple[int, int, int]:
    """(W, H, number of objects) of scene i: 6 % empty, 47 % 1-6, 23 % 7-10, 24 % 11-25 objects; a short side
    of 136-384 px (at least 150 + 6 per object when crowded), 1:1 to 1.65:1, a third of them portrait."""
    rng = np.random.default_rng([seed, i, 0x5CE])
    u = rng.random()
    n = 0 if u < 0.06 else int(rng.integers(1, 7)) if u < 0.53 else int(rng.integers(7, 11)) if u < 0.76 \
        else int(rng.integers(11, 26))
    short = int(rng.integers(136, 385))
    if n >= 11:
        short = max(short, 150 + 6 * n)
    long = int(round(short * rng.uniform(1.0, 1.65)))
    return (short, long, n) if rng.random() < 0.33 else (long, short, n)


def kind_for(seed: int, i: int) -> str:
    """Scene i's kind: every block of seven scenes holds each kind once, in a shuffled order."""
    perm = np.random.default_rng([seed, i // 7, 0x4B1]).permutation(len(KINDS))
    return KINDS[int(perm[i % 7])]


# ----------------------------------------------------------------------------------------------------------------
# Objects: what to draw, where, in which colour
# ----------------------------------------------------------------------------------------------------------------

def smallest(shape: str) -> float:
    """The smallest circumscribed diameter (px, before a kind's `min_scale`) at which the shape still reads
    clearly: simple outlines 15, the thin rhombus 21 (its corners must survive blur), the rest 18."""
    return 15.0 if shape in ("circle", "square", "triangle", "ellipse", "rectangle") else \
        21.0 if shape == "diamond" else 18.0


def pick_objects(rng, n: int) -> list[tuple[str, str]]:
    """(shape, colour group) of n objects: vocabulary shapes and colours 84 %, distractor shapes in vocabulary
    colours 7 %, vocabulary shapes in distractor colours 6 %, both distractors 3 %."""
    out = []
    for _ in range(n):
        u = rng.random()
        odd_shape, odd_colour = (False, False) if u < 0.84 else (True, False) if u < 0.91 else \
            (False, True) if u < 0.97 else (True, True)
        shape = str(rng.choice(DISTRACTOR_SHAPES if odd_shape else SHAPES))
        out.append((shape, "odd" if odd_colour else "vocab"))
    return out


def pose(rng, shape: str) -> float:
    """Degrees turned from the upright pose: squares stay within 22 of upright, diamonds within 18 of standing or
    lying; other shapes upright-ish half the time, else any way."""
    if shape == "square":
        return rng.uniform(-22, 22)
    if shape == "diamond":
        return rng.uniform(-18, 18) + (90 if rng.random() < 0.35 else 0)
    if shape in ("circle", "ring"):
        return 0.0
    return rng.uniform(-20, 20) if rng.random() < 0.5 else rng.uniform(0, 360)


def ring_mean(pic, covered, mask, x0, y0):
    """Mean colour of the uncovered pixels within 3 px round a mask placed at (x0, y0), or None."""
    H, W = covered.shape
    pad = 4
    big = np.pad(mask, pad)
    ring = ndimage.binary_dilation(big, iterations=3) & ~big                    # (h + 8, w + 8)
    gx0, gy0 = x0 - pad, y0 - pad
    h, w = big.shape
    cx0, cy0, cx1, cy1 = max(0, gx0), max(0, gy0), min(W, gx0 + w), min(H, gy0 + h)
    ring = ring[cy0 - gy0:cy1 - gy0, cx0 - gx0:cx1 - gx0] & ~covered[cy0:cy1, cx0:cx1]
    if ring.sum() < 8:
        return None
    return pic[cy0:cy1, cx0:cx1][ring].mean(0)


def choose_colour(rng, group: str, first: str, only_first: bool, around, pieces: list[Piece], mask, x0, y0):
    """A (name, shade) of the group that stands out by 25 Lab from `around` and touches no object of the same
    name (3 px): `first`, or with `only_first` off the group's other names in random order after it. None when
    none fits."""
    names = list(COLOURS) if group == "vocab" else list(DISTRACTOR_COLOURS)
    order = [names[k] for k in rng.permutation(len(names)) if names[k] != first]
    order = [first] if only_first else [first] + order
    grown = None
    for name in order:
        same = [q for q in pieces if q.colour == name]
        if same:
            if grown is None:
                grown = ndimage.binary_dilation(np.pad(mask, 3), _DISK3)
            if any(ov is not None and (grown[ov[0]] & q.mask[ov[1]]).any()
                   for q in same for ov in [overlap(x0 - 3, y0 - 3, grown, q.x0, q.y0, q.mask)]):
                continue
        for _ in range(4):
            rgb = draw_shade(rng, name)
            if around is None or np.linalg.norm(to_lab(rgb) - to_lab(around)) >= 25:
                return name, rgb
    return None


def place(kind: Kind, rng, pic, n: int) -> list[Piece] | None:
    """Put n objects on the picture (drawing their shadows and bodies); None when they do not fit."""
    W, H = kind.W, kind.H
    short = min(W, H)
    covered = np.zeros((H, W), bool)
    top_frac = 0.36 if n <= 2 else 0.28 if n <= 6 else 0.21 if n <= 10 else 0.15 if n <= 17 else 0.13
    wanted = pick_objects(rng, n)
    sizes = []
    for shape, _ in wanted:
        dmin = max(smallest(shape) * kind.min_scale, 0.04 * short)
        dmax = max(dmin * 1.05, top_frac * short * kind.size_scale)
        sizes.append(float(np.exp(rng.uniform(np.log(dmin), np.log(dmax)))))
    order = list(np.argsort(sizes)[::-1])                     # mostly largest first
    for _ in range(n // 4):
        k = int(rng.integers(max(1, n - 1)))
        if k + 1 < n:
            order[k], order[k + 1] = order[k + 1], order[k]
    allowed = kind.allowed
    ys, xs = np.nonzero(allowed)
    if n and len(xs) == 0:
        return None
    pieces: list[Piece] = []
    for idx in order:
        shape, group = wanted[idx]
        diameter = sizes[idx]
        first = str(rng.choice(list(COLOURS) if group == "vocab" else list(DISTRACTOR_COLOURS)))
        done = False
        for attempt in range(40):
            if attempt and attempt % 12 == 0:
                diameter = max(diameter * 0.88, smallest(shape) * kind.min_scale)
            layers, period = outline(shape, rng)
            angle = pose(rng, shape)
            k = int(rng.integers(len(xs)))
            top, x0, y0 = render(layers, xs[k] + rng.random(), ys[k] + rng.random(), diameter / 2, angle)
            sil, extra = kind.silhouette(top, diameter)
            hs, w = sil.shape
            if x0 < 0 or y0 < 0 or x0 + w > W or y0 + hs > H:
                continue
            mask = sil >= 0.5
            if not allowed[y0:y0 + hs, x0:x0 + w][sil > 0.02].all():
                continue
            # no earlier object may drop below 82 % visible
            hurt = False
            for q in pieces:
                ov = overlap(q.x0, q.y0, q.mask, x0, y0, mask)
                if ov is not None and (q.vis[ov[0]] & mask[ov[1]]).any():
                    left = q.vis.sum() - (q.vis[ov[0]] & mask[ov[1]]).sum()
                    if left < 0.82 * q.mask.sum():
                        hurt = True
                        break
            if hurt:
                continue
            cov_here = covered.copy()
            cov_here[y0:y0 + hs, x0:x0 + w] |= mask
            around = ring_mean(pic, cov_here, mask, x0, y0)
            # the intended colour gets a few places to fit before another colour of its group may stand in
            got = choose_colour(rng, group, first, attempt < 8, around, pieces, mask, x0, y0)
            if got is None:
                continue
            name, rgb = got
            p = Piece(shape, name, rgb, angle, period, diameter, top, sil, x0, y0, mask, mask.copy(), extra)
            for q in pieces:
                ov = overlap(q.x0, q.y0, q.mask, x0, y0, mask)
                if ov is not None:
                    q.vis[ov[0]] &= ~mask[ov[1]]
            kind.shadow(pic, covered.astype(np.float32), p)
            kind.body(pic, p)
            covered = cov_here
            pieces.append(p)
            done = True
            break
        if not done:
            return None
    return pieces


# ----------------------------------------------------------------------------------------------------------------
# Labels and checks on the finished image
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Final:
    """An object's label pieces in output pixels: its whole mask, tight, at (x0, y0)."""
    mask: np.ndarray
    x0: int
    y0: int


def final_masks(kind: Kind, pieces: list[Piece]) -> list[Final] | None:
    """Each piece's silhouette through the kind's warp, thresholded at coverage 0.5 and cut to its tight box."""
    W, H = kind.W, kind.H
    out = []
    for p in pieces:
        hs, w = p.sil.shape
        if kind.warp is None:
            cov, ox0, oy0 = p.sil, p.x0, p.y0
        else:
            ox0, oy0, ox1, oy1 = kind.warp.out_box(p.x0, p.y0, p.x0 + w, p.y0 + hs)
            ox0, oy0, ox1, oy1 = max(0, ox0), max(0, oy0), min(W, ox1), min(H, oy1)
            if ox0 >= ox1 or oy0 >= oy1:
                return None
            yy, xx = np.mgrid[oy0:oy1, ox0:ox1].astype(np.float64) + 0.5
            sx, sy = kind.warp.inverse(xx, yy)
            cov = sample(p.sil, sx - p.x0, sy - p.y0, zero_outside=True)         # (oy1 - oy0, ox1 - ox0)
        mask = cov >= 0.5
        rows, cols = np.nonzero(mask.any(1))[0], np.nonzero(mask.any(0))[0]
        if len(rows) == 0:
            return None
        mask = mask[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
        out.append(Final(mask, ox0 + int(cols[0]), oy0 + int(rows[0])))
    return out


def visible_part(finals: list[Final], k: int) -> np.ndarray:
    f = finals[k]
    vis = f.mask.copy()
    for later in finals[k + 1:]:
        ov = overlap(f.x0, f.y0, f.mask, later.x0, later.y0, later.mask)
        if ov is not None:
            vis[ov[0]] &= ~later.mask[ov[1]]
    return vis


def largest_width(mask: np.ndarray) -> float:
    """The mask's largest extent over 32 directions, in px (pixel counts, so the box's sides are included)."""
    edge = mask & ~ndimage.binary_erosion(mask)
    ys, xs = np.nonzero(edge)
    a = np.arange(32) * np.pi / 32
    proj = xs[:, None] * np.cos(a) + ys[:, None] * np.sin(a)                    # (edge pixels, 32)
    return float((proj.max(0) - proj.min(0)).max() + 1)


def check_and_label(kind: Kind, img: np.ndarray, pieces: list[Piece], finals: list[Final]):
    """SceneObjects for the pieces, or the reason the scene fails its checks."""
    W, H = kind.W, kind.H
    short = min(W, H)
    covered = np.zeros((H, W), bool)
    for f in finals:
        h, w = f.mask.shape
        covered[f.y0:f.y0 + h, f.x0:f.x0 + w] |= f.mask
    objects = []
    for k, (p, f) in enumerate(zip(pieces, finals)):
        h, w = f.mask.shape
        if f.x0 < 1 or f.y0 < 1 or f.x0 + w > W - 1 or f.y0 + h > H - 1:
            return "edge"
        vis = visible_part(finals, k)
        if vis.sum() < 0.76 * f.mask.sum():
            return "hidden"
        size = largest_width(f.mask)
        if not 10 <= size <= 0.4 * short:
            return "size"
        dist = ndimage.distance_transform_edt(np.pad(vis, 1))[1:-1, 1:-1]
        core = vis & (dist >= 0.4 * dist.max())
        crop = img[f.y0:f.y0 + h, f.x0:f.x0 + w]
        med = np.median(crop[core if core.sum() >= 8 else vis], 0)
        if colour_margin(med, p.colour) < (8 if p.colour == "white" else 3):     # dimmed white reads as grey
            return f"colour {p.colour} {kind.name}"
        rgb = tuple(int(v) for v in np.round(med))
        if colour_margin(rgb, p.colour) < 1:
            return "colour rounding"
        ring = ring_mean(img.astype(np.float32), covered, f.mask, f.x0, f.y0)
        if ring is not None and np.linalg.norm(to_lab(med) - to_lab(ring)) < 16:
            return f"stand-out {p.colour} {kind.name}"
        # the point: the visible pixel farthest from the visible part's edge
        py, px = np.unravel_index(int(np.argmax(dist)), dist.shape)
        point = ((f.x0 + px + 0.5) / W, (f.y0 + py + 0.5) / H)
        if p.period == 0:
            tilt = 0.0
        else:
            turn = p.angle + (local_rotation(kind.warp, f.x0 + w / 2, f.y0 + h / 2) if kind.warp else 0.0)
            t = turn % p.period
            tilt = float(min(t, p.period - t))
        box = (f.x0 / W, f.y0 / H, (f.x0 + w) / W, (f.y0 + h) / H)
        objects.append(SceneObject(shape=p.shape, colour=p.colour, box=box, point=point, rgb=rgb,
                                   tilt=round(tilt, 3), size=size / short, mask=f.mask))
    return objects


# ----------------------------------------------------------------------------------------------------------------
# Queries
# ----------------------------------------------------------------------------------------------------------------

def make_query(rng, objects) -> Query:
    """50 % "colour shape", 28 % "shape", 22 % "colour"; about 17 % are asked absent on purpose (mostly near misses
    that share a word with an object of the scene)."""
    named = [o for o in objects if o.known]
    form = rng.choice(3, p=[0.5, 0.28, 0.22])

    def texts(f):
        if f == 0:
            return [f"{c} {s}" for c in COLOURS for s in SHAPES]
        return list(SHAPES) if f == 1 else list(COLOURS)

    if named and rng.random() >= 0.17:
        o = named[int(rng.integers(len(named)))]
        text = [f"{o.colour} {o.shape}", o.shape, o.colour][form]
    else:
        absent = [t for t in texts(form) if not matches(t, objects)]
        if not absent:
            absent = [t for f in (0, 1, 2) for t in texts(f) if not matches(t, objects)]
        words = {o.colour for o in objects} | {o.shape for o in objects}
        near = [t for t in absent if set(t.split()) & words]
        pool = near if near and rng.random() < 0.7 else absent
        text = pool[int(rng.integers(len(pool)))]
    return Query(text, matches(text, objects))


# ----------------------------------------------------------------------------------------------------------------
# Scenes
# ----------------------------------------------------------------------------------------------------------------

def draw_attempt(seed: int, i: int, attempt: int, kind_name: str, W: int, H: int, n: int):
    """One try at scene i: (image, objects) or the reason it failed."""
    rng = np.random.default_rng([seed, i, attempt, 0x16])
    tone = 1.0 if attempt < 4 else 0.5 if attempt < 8 else 0.0          # effects toned down after failures
    kind = KIND_CLASSES[kind_name](rng, W, H, tone)
    pic = kind.ground()
    pieces = place(kind, rng, pic, n)
    if pieces is None:
        return "placement"
    kind.over(pic, pieces)
    if kind.warp is not None:
        yy, xx = np.mgrid[0:H, 0:W].astype(np.float64) + 0.5
        sx, sy = kind.warp.inverse(xx, yy)
        img = sample(pic, sx.astype(np.float32), sy.astype(np.float32))          # (H, W, 3)
    else:
        img = pic
    kind.after(img)
    final = kind.camera(img)
    finals = final_masks(kind, pieces)
    if finals is None:
        return "warp"
    objects = check_and_label(kind, np.asarray(final), pieces, finals)
    if isinstance(objects, str):
        return objects
    return final, objects


def sixteenth_scene(seed: int = DEFAULT_SEED, i: int = 0) -> tuple[Scene, Query, int]:
    """Scene i of a seed, its query and how many attempts it took. A function of (seed, i) only."""
    W, H, n = canvas_and_count(seed, i)
    kind_name = kind_for(seed, i)
    for attempt in range(60):
        got = draw_attempt(seed, i, attempt, kind_name, W, H, n)
        if isinstance(got, str):
            FAILS[got.split()[0] + " " + kind_name] += 1
            continue
        image, objects = got
        scene = Scene(image=image, objects=tuple(objects), background=kind_name)
        query = make_query(np.random.default_rng([seed, i, 0x9E]), scene.objects)
        return scene, query, attempt + 1
    raise RuntimeError(f"scene {i} of seed {seed} failed 60 attempts")


def sixteenth_batch(seed: int = DEFAULT_SEED, n: int = 300) -> list[tuple[Scene, Query]]:
    """Scenes 0..n-1 of a seed with their queries."""
    return [sixteenth_scene(seed, i)[:2] for i in range(n)]


if __name__ == "__main__":
    from docs.experiments.scene_sample import sample as sample_cli

    sample_cli(sixteenth_scene, __doc__, DEFAULT_SEED)
    print("failed attempts:", dict(sorted(FAILS.items(), key=lambda kv: -kv[1])))
