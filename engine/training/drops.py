"""Small round marks on the background that are not objects (`make_scene(drops=True)`,
`engine.train --drops`; training only).

Rain on a window, soap bubbles, glints and out-of-focus lights put many small round marks over a
scene. On the thirteenth blind generator (rainy glass) 39 of the shipped model's 83 missed points
fell on rain drops: small translucent blobs with a bright rim or highlight, answered as whatever
shape the query named. Training had never shown it a small round mark that is not an object.
`add_drops` draws one kind of such marks over the background of a finished scene:

* "rain": water drops, discs whose inside shows the background seen through a lens (a magnified,
  sometimes inverted and shifted, sometimes blurred copy of what lies under the drop), a little
  lighter or darker, with a thin rim dark on the side of the light and bright on the other, and a
  small specular dot offset toward the light; never an opaque flat fill;
* "bubbles": thin bright rings with a clear inside and a highlight dot;
* "glints": tiny bright points with a soft glow;
* "bokeh": large soft discs of light at low alpha.

Every mark, with everything it changes (glow and rim included) and a MARGIN_PX margin, lies on the
background: a placement that would touch an object pixel is drawn again (up to TRIES per mark), and a
mark that never fits is left out. A drop's lens reads the scene no further than RAIN_LENS × its radius
(+ 1.5 px) from its centre, so it only ever shows background.
The labels (owner map, masks, boxes, points) stay exactly as they were.
"""

from __future__ import annotations

import math

import numpy as np

DROPS_P = 0.3               # share of the scenes given drops when the flag is on
KINDS = ("rain", "bubbles", "glints", "bokeh")
COUNT = {"rain": (8, 60), "bubbles": (5, 30), "glints": (10, 80), "bokeh": (3, 15)}   # marks per scene
TRIES = 20                  # placements tried per mark before it is left out
MARGIN_PX = 2               # clear background kept between a mark's reach and any object pixel
# Rain: radius log-uniform from RAIN_RADIUS[0] px to RAIN_RADIUS[1] × the short side.
RAIN_RADIUS = (1.5, 0.04)
RAIN_ZOOM = (0.45, 0.85)    # the lens shows the disc's inner zoom × radius, spread over the whole disc
RAIN_INVERT_P = 0.5         # share of the drops whose lens image is upside down (a real lens inverts)
RAIN_SHIFT = 0.25           # the lens image's largest offset, × the radius ...
RAIN_LENS = 0.95            # ... with |zoom| + offset at most this: the lens reads inside the drop only
RAIN_BLUR_P = 0.35          # share of the drops whose inside is blurred toward its mean
RAIN_BLUR = (0.35, 0.75)    # how far toward the mean
RAIN_LEVEL = (5, 25)        # ± levels added inside the drop
RAIN_ALPHA = (0.55, 0.9)    # weight of the lens image over the plain background (never 1: translucent)
RAIN_RIM = (15.0, 55.0)     # the rim's levels: − on the side of the light, + on the other
RAIN_HIGHLIGHT = (0.55, 1.0)    # the specular dot's weight toward white
# Bubbles: radius log-uniform from BUBBLE_RADIUS[0] px to BUBBLE_RADIUS[1] × the short side.
BUBBLE_RADIUS = (2.5, 0.05)
BUBBLE_WIDTH = (1.0, 2.0)   # px, the ring's width
BUBBLE_ALPHA = (0.45, 0.9)  # the ring's weight toward its light colour, brightest facing the light
GLINT_RADIUS = (1.0, 2.5)   # px, a glint's bright core
GLINT_GLOW = (2.5, 4.5)     # the glow's reach, × the core's radius
GLINT_GLOW_ALPHA = (0.15, 0.45)
BOKEH_RADIUS = (0.03, 0.10)  # × the short side, uniform
BOKEH_SOFT = (0.1, 0.35)    # the edge's half-width, × the radius (+ 1 px)
BOKEH_ALPHA = (0.1, 0.35)
LIGHT_TINT = 0.35           # largest saturation of a bubble's, glint's or bokeh disc's light colour
DRAWS = 15                  # random numbers per mark, drawn for all marks at once (the most any kind reads)


def add_drops(rng: np.random.Generator, pixels: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, str] | None:
    """The scene with marks of one random kind drawn on its background: (pixels, kind), or None
    when no mark found room. pixels (h, w, 3) uint8 (not changed; a new array is returned);
    owner (h, w) int, -1 on the background. Pixels where owner >= 0 are never changed."""
    h, w = owner.shape
    short = min(h, w)
    kind = KINDS[int(rng.integers(len(KINDS)))]
    n = int(rng.integers(COUNT[kind][0], COUNT[kind][1] + 1))
    t = rng.uniform(0.0, 2.0 * math.pi)
    light = (math.sin(t), math.cos(t))          # (y, x) unit vector from a mark's centre toward the light
    draws = rng.random((n, DRAWS))              # (marks, DRAWS) each mark's numbers in [0, 1)
    tries = rng.random((n, TRIES, 2)) * (h, w)  # (marks, TRIES, 2) candidate centres (y, x)
    out = pixels.copy()
    drawn = 0
    for u, centres in zip(draws, tries):
        radius, edge, reach = _size(kind, short, u)
        spot = _place(owner, centres, reach + MARGIN_PX)
        if spot is None:
            continue
        cy, cx = spot
        y0, y1 = max(int(cy - reach) - 1, 0), min(int(cy + reach) + 2, h)
        x0, x1 = max(int(cx - reach) - 1, 0), min(int(cx + reach) + 2, w)
        dy = np.arange(y0, y1, dtype=np.float32) + np.float32(0.5 - cy)    # (wh,) from the centre
        dx = np.arange(x0, x1, dtype=np.float32) + np.float32(0.5 - cx)    # (ww,)
        grid = (dy[:, None], dx[None, :], np.sqrt(dy[:, None] ** 2 + dx[None, :] ** 2))   # (wh, 1), (1, ww), (wh, ww)
        region = out[y0:y1, x0:x1].astype(np.float32)                     # (wh, ww, 3)
        if kind == "rain":
            new = _rain(u, pixels, region, (cy, cx), (dy, dx), grid, radius, light)
        elif kind == "bubbles":
            new = _bubble(u, region, grid, radius, edge, light)
        elif kind == "glints":
            new = _glint(u, region, grid[2], radius, edge)
        else:
            new = _bokeh(u, region, grid[2], radius, edge)
        out[y0:y1, x0:x1] = np.clip(np.rint(new), 0, 255).astype(np.uint8)
        drawn += 1
    if not drawn:
        return None
    return out, kind


def _span(limits: tuple[float, float], v: float) -> float:
    """The point v ∈ [0, 1) of the way from limits[0] to limits[1]."""
    return limits[0] + v * (limits[1] - limits[0])


def _unit(x: np.ndarray) -> np.ndarray:
    """x clipped to [0, 1] in place (cheaper than np.clip on small arrays)."""
    return np.minimum(np.maximum(x, 0.0, out=x), 1.0, out=x)


def _size(kind: str, short: int, u: np.ndarray) -> tuple[float, float, float]:
    """A mark's (radius, edge, reach) in px from its numbers u[0], u[1]. radius: rain and bubbles
    log-uniform, glints uniform in px, bokeh uniform × short; edge: a bubble ring's half-width, a
    glint's glow reach, a bokeh disc's soft edge (rain: 0); reach: how far from its centre the mark
    changes any pixel."""
    if kind in ("rain", "bubbles"):
        lo, frac = RAIN_RADIUS if kind == "rain" else BUBBLE_RADIUS
        hi = max(lo, frac * short)
        r = math.exp(_span((math.log(lo), math.log(hi)), u[0]))
        if kind == "rain":
            return r, 0.0, r + 1.5                  # the rim ends by r + 0.7
        half = 0.5 * _span(BUBBLE_WIDTH, u[1])
        return r, half, r + half + 0.5
    if kind == "glints":
        r = _span(GLINT_RADIUS, u[0])
        glow = r * _span(GLINT_GLOW, u[1])
        return r, glow, glow
    r = _span(BOKEH_RADIUS, u[0]) * short
    soft = r * _span(BOKEH_SOFT, u[1]) + 1.0
    return r, soft, r + soft


def _place(owner: np.ndarray, centres: np.ndarray, clear: float) -> tuple[float, float] | None:
    """The first of the candidate centres (TRIES, 2) (y, x) whose disc of radius `clear` holds no
    object pixel (the disc may leave the frame), or None."""
    h, w = owner.shape
    for cy, cx in centres.tolist():
        if owner[int(cy), int(cx)] >= 0:
            continue
        y0, y1 = max(int(cy - clear) - 1, 0), min(int(cy + clear) + 2, h)
        x0, x1 = max(int(cx - clear) - 1, 0), min(int(cx + clear) + 2, w)
        objects = owner[y0:y1, x0:x1] >= 0                                 # (wh, ww)
        if not objects.any():
            return cy, cx
        dy = (np.arange(y0, y1, dtype=np.float32) + np.float32(0.5 - cy))[:, None]
        dx = (np.arange(x0, x1, dtype=np.float32) + np.float32(0.5 - cx))[None, :]
        # a pixel counts as touched when any part of it comes within `clear` (its centre within clear + 0.71)
        if not (objects & (dy * dy + dx * dx <= (clear + 0.71) ** 2)).any():
            return cy, cx
    return None


def _rain(u: np.ndarray, under: np.ndarray, region: np.ndarray, centre: tuple[float, float],
          axes: tuple[np.ndarray, np.ndarray], grid: tuple[np.ndarray, np.ndarray, np.ndarray], r: float,
          light: tuple[float, float]) -> np.ndarray:
    """(wh, ww, 3) float: a water drop of radius r over `region`, from the numbers u[2:15]. The lens
    reads `under` (the scene before any mark, (h, w, 3) uint8) within RAIN_LENS · r (+ 1.5 px) of
    the centre, inside the drop's own reach, so it sees background only."""
    h, w = under.shape[:2]
    cy, cx = centre
    dy, dx, d = grid
    zoom = _span(RAIN_ZOOM, u[2]) * (-1.0 if u[3] < RAIN_INVERT_P else 1.0)
    s = u[4] * min(RAIN_SHIFT, RAIN_LENS - abs(zoom)) * r
    a = u[5] * 2.0 * math.pi
    # the lens: bilinear, one axis at a time (a row's source row depends on that row only)
    fy = np.clip(axes[0] * zoom + (cy + s * math.sin(a) - 0.5), 0.0, h - 1.0)    # (wh,) source rows
    fx = np.clip(axes[1] * zoom + (cx + s * math.cos(a) - 0.5), 0.0, w - 1.0)    # (ww,)
    iy, ix = fy.astype(np.int32), fx.astype(np.int32)
    iy1, ix1 = np.minimum(iy + 1, h - 1), np.minimum(ix + 1, w - 1)
    r0, c0 = int(min(iy.min(), iy1.min())), int(min(ix.min(), ix1.min()))
    src = under[r0:int(max(iy.max(), iy1.max())) + 1, c0:int(max(ix.max(), ix1.max())) + 1].astype(np.float32)
    ty, tx = (fy - iy)[:, None, None], (fx - ix)[None, :, None]
    rows = src[iy - r0] * (1 - ty) + src[iy1 - r0] * ty                   # (wh, cw, 3)
    lens = rows[:, ix - c0] * (1 - tx) + rows[:, ix1 - c0] * tx           # (wh, ww, 3)
    inside = _unit(r + 0.5 - d)                                            # (wh, ww) anti-aliased disc
    if u[6] < RAIN_BLUR_P:
        mean = (lens * inside[..., None]).sum((0, 1)) / max(float(inside.sum()), 1e-6)   # (3,)
        lens += _span(RAIN_BLUR, u[7]) * (mean - lens)
    level = _span(RAIN_LEVEL, u[8]) * (1.0 if u[9] < 0.5 else -1.0)
    out = region + (_span(RAIN_ALPHA, u[10]) * inside)[..., None] * (lens + level - region)
    toward = np.clip((dy * light[0] + dx * light[1]) / r, -1.0, 1.0)      # (wh, ww): +1 at the lit edge, −1 opposite
    rim = _unit(1.0 - np.abs(d - (r - 0.6)) / _span((0.7, 1.3), u[11]))   # (wh, ww) a thin ring at the edge
    out -= (_span(RAIN_RIM, u[12]) * rim * toward)[..., None]
    # the specular dot: toward the light from the centre, a soft spot of radius hr
    hr = max(0.5, _span((0.1, 0.2), u[13]) * r)
    hy, hx = dy - 0.45 * r * light[0], dx - 0.45 * r * light[1]
    q = _unit(1.0 - (hy * hy + hx * hx) / (2.0 * hr) ** 2)
    spot = _span(RAIN_HIGHLIGHT, u[14]) * q * q                            # (wh, ww)
    return out + spot[..., None] * (255.0 - out)


def _light_colour(hue: float, tint: float) -> np.ndarray:
    """(3,) float: a light's colour from two numbers in [0, 1): near white, tinted toward the hue
    with a saturation up to LIGHT_TINT."""
    c = np.cos(hue * 2.0 * math.pi - np.array([0.0, 2.0944, 4.1888]))    # (3,) a hue wheel's R, G, B
    c = (c - c.min()) / (c.max() - c.min())                               # the hue's channel nearest 1, farthest 0
    return 255.0 * (1.0 - tint * LIGHT_TINT * (1.0 - c))


def _bubble(u: np.ndarray, region: np.ndarray, grid: tuple[np.ndarray, np.ndarray, np.ndarray],
            r: float, half: float, light: tuple[float, float]) -> np.ndarray:
    """(wh, ww, 3) float: a thin bright ring of radius r (half-width `half` px, anti-aliased),
    brightest where it faces the light, a clear inside and a highlight dot (numbers u[2:6])."""
    dy, dx, d = grid
    colour = _light_colour(u[2], u[3])
    toward = (dy * light[0] + dx * light[1]) / np.maximum(d, 1e-6)         # (wh, ww) cosine to the light
    ring = _unit(half + 0.5 - np.abs(d - r)) * (_span(BUBBLE_ALPHA, u[4]) * (0.6 + 0.4 * toward))
    hr = max(0.6, 0.12 * r)
    hy, hx = dy - 0.55 * r * light[0], dx - 0.55 * r * light[1]
    q = _unit(1.0 - (hy * hy + hx * hx) / (2.0 * hr) ** 2)
    weight = np.maximum(ring, _span((0.6, 1.0), u[5]) * q * q)            # (wh, ww)
    return region + weight[..., None] * (colour - region)


def _glint(u: np.ndarray, region: np.ndarray, d: np.ndarray, r: float, reach: float) -> np.ndarray:
    """(wh, ww, 3) float: a bright core of radius r and a glow fading to nothing at `reach`
    (numbers u[2:6])."""
    colour = _light_colour(u[2], u[3])
    core = _unit(r + 0.5 - d) * _span((0.85, 1.0), u[4])
    q = _unit(1.0 - (d / reach) ** 2)
    weight = np.maximum(core, _span(GLINT_GLOW_ALPHA, u[5]) * q * q)       # (wh, ww)
    return region + weight[..., None] * (colour - region)


def _bokeh(u: np.ndarray, region: np.ndarray, d: np.ndarray, r: float, soft: float) -> np.ndarray:
    """(wh, ww, 3) float: a disc of light of radius r, its edge a smoothstep `soft` px either side,
    at low alpha, sometimes a little brighter along the edge (numbers u[2:7])."""
    colour = _light_colour(u[2], u[3])
    t = _unit((r + soft - d) / (2.0 * soft))
    cover = t * t * (3.0 - 2.0 * t)                                        # (wh, ww) 1 inside, 0 past r + soft
    if u[4] < 0.5:
        cover *= 1.0 + _span((0.15, 0.35), u[5]) * _unit(1.0 - np.abs(d - (r - soft)) / soft)
    weight = _span(BOKEH_ALPHA, u[6]) * cover
    return region + weight[..., None] * (colour - region)
