"""libvips' Lanczos3 resize as integer matrices: the reference's crops from torch, on any device.

The reference implementation resizes with `pyvips` (`vips_resize`, kernel lanczos3). This module
reproduces libvips 8.18's arithmetic for uint8 RGB exactly (`tests/test_resize.py` compares it
with pyvips pixel for pixel), so crops can be made where the pixels already are, a GPU included,
without leaving the numbers the released weights were made with. Per axis, in libvips' order:

* Downsizing (`vips_reducev`, then `vips_reduceh`). The output size is round(n / s) for a
  factor s = n / out. First, when k = floor(n / out / 2) > 1, a box shrink by k (`vips_shrinkv/h`
  with ceil: the edge pixel repeated past the end, the mean as (sum + k // 2) · floor(2³² / 256k)
  >> 24). Then a Lanczos3 convolution for the residual factor s' = s / k:
  2·rint(3s') + 1 taps, coefficients computed at 1/64-pixel positions, normalised and truncated
  to 12 bits, sums rounded (+2048 >> 12) and clipped to uint8 after each axis. Output i samples
  the input at (i + 0.5)·s' − 0.5 − offset, where offset = (1 + out·s' − n')/2 − 1 centres what
  rounding left over. libvips advances that position by s' along a row (float64, accumulated),
  which this follows; vertically each region (STRIP rows of a scale-only pipeline) starts from its
  top row's index and adds s' per row. When an enlargement across follows, vips_affine asks for
  overlapping row ranges, each computed from its own top, and each output strip reads its own copy.
* Upsizing, if either factor is above 1 (one `vips_affine` of both axes, with the Catmull-Rom
  "bicubic" interpolator). The output size is round(n · s). Output i samples the input at about
  i / s − 0.5, on both axes, even an axis that keeps its size (libvips 8.18 passes idx = idy = 0.5
  then); to the bit, the step is the inverse matrix's entry (1/det times the other axis' scale),
  added pixel by pixel along a row and multiplied down a column. Four taps, with the edge pixel
  repeated; 12-bit coefficients at 1/64 pixel; the horizontal sums are rounded but not clipped,
  then the vertical ones are rounded and clipped.

Every pass is a product of integer matrices with pixel values, exact in float64 (all sums stay
far below 2⁵³), so CPU and GPU give the same bits. Matrices are built once per size pair
(`functools.lru_cache`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

SUBPIXELS = 64        # VIPS_TRANSFORM_SCALE: positions per pixel at which masks are tabulated
ONE = 4096            # VIPS_INTERPOLATE_SCALE: 12-bit fixed-point coefficients
GAP = 2.0             # vips_resize's default "gap": box-shrink while the factor is at least twice this
STRIP = 16            # vips__fatstrip_height: a region of a FATSTRIP pipeline is the full width × 16 rows
TILE = 128            # vips__tile_width/height: a region of a SMALLTILE pipeline (one with vips_shrinkv)


def _lanczos3(x: float) -> float:
    if not -3.0 <= x <= 3.0:
        return 0.0
    sinc = lambda t: 1.0 if t == 0.0 else math.sin(t * math.pi) / (t * math.pi)  # noqa: E731
    return sinc(x) * sinc(x / 3.0)


def _subpixel(position: np.ndarray) -> np.ndarray:
    """Which of the 65 tabulated masks libvips uses at each position (the nearest 1/64, by its
    integer arithmetic: C casts truncate toward zero, as numpy's do)."""
    return (((position * SUBPIXELS * 2).astype(np.int64) & (SUBPIXELS * 2 - 1)) + 1) >> 1


@functools.lru_cache(maxsize=64)
def _lanczos_masks(taps: int, shrink: float) -> np.ndarray:
    """int64 [65, taps]: libvips' 12-bit Lanczos3 masks of a reduction by `shrink` (the C library's
    sin through `math`, and sums added in order, as libvips adds them)."""
    table = np.zeros((SUBPIXELS + 1, taps), np.int64)
    for t in range(SUBPIXELS + 1):
        half = float(np.float32(t / SUBPIXELS)) + taps / 2.0 - 1
        c = [_lanczos3((i - half) / shrink) for i in range(taps)]
        total = 0.0
        for v in c:
            total += v
        table[t] = [int(v / total * ONE) for v in c]   # C's (short) cast: truncation
    return table


def _catmull_rom(x: float) -> list[float]:
    """libvips' Catmull-Rom coefficients at fraction x (its own sequence of float operations)."""
    cr1 = 1.0 - x
    cr2 = -0.5 * x
    cr3 = cr1 * cr2
    one = cr1 * cr3
    four = x * cr3
    cr4 = four - one
    return [one, cr1 - one + cr4, x - four - cr4, four]


_CUBIC = np.array([[int(v * ONE) for v in _catmull_rom(float(np.float32(t / SUBPIXELS)))]
                   for t in range(SUBPIXELS + 1)], np.int64)                 # [65, 4]


@dataclass(frozen=True)
class Pass:
    """One step along one axis: `box` k > 1 (a box shrink by k), else a matrix `weights` [out, in]
    of 12-bit integer coefficients; `clip`: round and clip to uint8 after it (else round only)."""

    axis: int                       # 0: rows (vertical), 1: columns (horizontal)
    box: int = 1
    weights: np.ndarray | None = None
    clip: bool = True


def _matrix(n_in: int, first_tap: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """Dense [out, n_in] from each output's first tap index and its coefficients (edge taps
    clamped to the image, their weights added up, as an edge-extended image gives)."""
    n_out, taps = coefficients.shape
    cols = np.clip(first_tap[:, None] + np.arange(taps)[None, :], 0, n_in - 1)
    flat = (np.arange(n_out)[:, None] * n_in + cols).reshape(-1)
    return np.bincount(flat, coefficients.reshape(-1).astype(np.float64), n_out * n_in).reshape(n_out, n_in)


def _box_factor(n: int, shrink: float) -> int:
    """The integer box shrink vips_reducev/h does first (its "gap" rule)."""
    n_out = int(math.floor(n / shrink + 0.5))
    return max(1, int(math.floor(n / n_out / GAP)))


def _reduce(axis: int, n: int, shrink: float, tile: int | None, regions=None) -> tuple[list[Pass], int]:
    """vips_reducev / vips_reduceh by `shrink` > 1 of an axis of n pixels: its passes and the size they leave.

    Each region starts from the position of its first row (vertically) or column (horizontally) and
    adds the factor per pixel. Regions are `tile` pixels long along the axis (None: the whole axis),
    or, vertically, the row ranges `regions(n_out)` asks for, in order; rows asked for twice are
    computed twice, and the matrix has a row for each."""
    n_out = int(math.floor(n / shrink + 0.5))
    extra = n_out * shrink - n
    passes = []
    k = _box_factor(n, shrink)
    if k > 1:
        passes.append(Pass(axis, box=k))
        n, shrink, extra = -(-n // k), shrink / k, extra / k
        if shrink == 1.0:
            return passes, n
    taps = int(2 * np.rint(3 * shrink) + 1)
    offset = (1 + extra) / 2.0 - 1
    masks = _lanczos_masks(taps, shrink)
    pad = math.ceil(taps / 2.0) - 1                  # libvips embeds this many edge pixels first
    step = tile or n_out
    spans = regions(n_out) if regions else [(t, min(t + step, n_out)) for t in range(0, n_out, step)]
    position = np.concatenate([np.cumsum(np.r_[(r0 + 0.5) * shrink - 0.5 - offset, np.full(r1 - r0 - 1, shrink)])
                               for r0, r1 in spans])   # in order, as C adds (so does cumsum)
    first = position.astype(np.int64) - pad
    return passes + [Pass(axis, weights=_matrix(n, first, masks[_subpixel(position)]))], n_out


def _enlarge(n: int, scale: float, step: float, accumulate: bool, tile: int | None = None) -> np.ndarray:
    """[round(n·scale), n]: the Catmull-Rom taps of vips_affine with idx 0.5 (scale ≥ 1).

    `step` is the inverse matrix's entry for this axis, as libvips computes it (1/det times the other
    axis' scale, so not always 1/scale to the bit). Along a row (`accumulate`) libvips starts each
    region at step·left + 1.5 in its bordered input (i/s − 0.5 + 2 at i = left) and adds `step` per
    pixel; regions are `tile` pixels wide (None: whole lines). Down a column it multiplies:
    step·i − (0.5 − 1) + 1."""
    n_out = int(n * scale + 0.5)
    if accumulate:
        width = tile or n_out
        position = np.concatenate([np.cumsum(np.r_[step * left - (0.5 - 1) + 1, np.full(min(width, n_out - left) - 1, step)])
                                   for left in range(0, n_out, width)])   # in order, as C adds
    else:
        position = step * np.arange(n_out) - (0.5 - 1) + 1
    return _matrix(n, position.astype(np.int64) - 3, _CUBIC[_subpixel(position)])


def _round_int(x: float) -> int:
    return int(x + 0.5) if x > 0 else int(x - 0.5)   # VIPS_ROUND_INT


def _affine_regions(rows: int, step: float, tile: int) -> list[tuple[int, int]]:
    """The rows vips_affine asks of its input, per `tile` output rows, for a vertical scale of 1
    (output rows = `rows`; `step` the inverse matrix's vertical entry): the need rectangle of its
    corners (id·y − idy, idy = 0.5 − 1, rounded to nearest), a margin of 1, the 4-tap window, then
    clipped to the input bordered by 2 rows (window_offset + 1) on each side, less that border."""
    spans = []
    for top in range(0, rows, tile):
        y0, y1 = step * top + 0.5, step * min(top + tile, rows) + 0.5
        need_top, need_height = _round_int(y0) - 1, _round_int(y1 - y0) + 2 + 3
        first, end = max(0, need_top), min(rows + 5, need_top + need_height)
        spans.append((max(0, first - 2), min(rows, end - 2)))
    return spans


def _blocks(weights: np.ndarray, spans: list[tuple[int, int]], tile: int) -> np.ndarray:
    """`weights` [out, n] applied strip by strip (`tile` output rows each) to stacked copies of rows:
    output rows of strip s read the copy of rows spans[s] (every tap they have lies inside it)."""
    out = np.zeros((weights.shape[0], sum(r1 - r0 for r0, r1 in spans)))
    offset = 0
    for s, (r0, r1) in enumerate(spans):
        strip = slice(s * tile, min((s + 1) * tile, weights.shape[0]))
        assert not weights[strip, :r0].any() and not weights[strip, r1:].any(), "a tap outside its region"
        out[strip, offset:offset + r1 - r0] = weights[strip, r0:r1]
        offset += r1 - r0
    return out


@functools.lru_cache(maxsize=64)
def resize_plan(height: int, width: int, out_height: int, out_width: int) -> tuple[Pass, ...]:
    """The passes of `pyvips.Image.resize(out_width / width, vscale=out_height / height,
    kernel="lanczos3")` on a height × width image, in libvips' order."""
    hscale = max(out_width / width, 1.0 / width)
    vscale = max(out_height / height, 1.0 / height)
    passes: list[Pass] = []
    rows, cols = height, width
    a, d = max(hscale, 1.0), max(vscale, 1.0)   # vips_affine(a, 0, 0, d): 1.0 on an axis it does not enlarge
    inverse = 1.0 / (a * d - 0.0 * 0.0)          # vips__transform_calc_inverse: ia = d / det, id = a / det
    # Regions: vips_shrinkv's SMALLTILE hint, when rows are box-shrunk, reaches the sink (the most
    # restrictive hint wins): 128 × 128 tiles; otherwise full-width strips of 16 rows.
    small = vscale < 1.0 and _box_factor(height, 1.0 / vscale) > 1
    tall, wide = (TILE, TILE) if small else (STRIP, None)
    # Rows reduced and then enlarged across: vips_affine asks reducev for overlapping row ranges,
    # each computed from its own top; the copies are stacked and each strip reads its own.
    spans = (lambda n: _affine_regions(n, inverse * a, tall)) if vscale < 1.0 and hscale > 1.0 else None
    if vscale < 1.0:
        steps, rows = _reduce(0, height, 1.0 / vscale, tall, spans)
        passes += steps
        if steps[-1].box > 1:
            spans = None   # a box shrink alone: no positions, one copy of each row
    if hscale < 1.0:
        steps, cols = _reduce(1, width, 1.0 / hscale, wide)
        passes += steps
    if hscale > 1.0 or vscale > 1.0:
        passes.append(Pass(1, weights=_enlarge(cols, a, inverse * d, accumulate=True, tile=wide), clip=False))
        vertical = _enlarge(rows, d, inverse * a, accumulate=False)
        passes.append(Pass(0, weights=_blocks(vertical, spans(rows), tall) if spans else vertical))
    return tuple(passes)


@functools.lru_cache(maxsize=64)
def _device_plan(height: int, width: int, out_height: int, out_width: int,
                 device: str) -> tuple[tuple[Pass, torch.Tensor | None], ...]:
    """`resize_plan` with its matrices on `device` (float64)."""
    return tuple((p, None if p.weights is None else torch.from_numpy(p.weights).to(device))
                 for p in resize_plan(height, width, out_height, out_width))


def vips_resize(pixels: torch.Tensor, out_height: int, out_width: int) -> torch.Tensor:
    """uint8 [H, W, 3] (any device) → uint8 [h, w, 3] on the same device, the pixels
    `pyvips.Image.resize(out_width / W, vscale=out_height / H, kernel="lanczos3")` gives; h, w
    are libvips' own sizes, which may be a pixel off the ones asked for (see `resize_rgb`)."""
    x = pixels.to(torch.float64)                                      # [H, W, 3]
    for p, w in _device_plan(int(pixels.shape[0]), int(pixels.shape[1]), out_height, out_width, str(pixels.device)):
        x = x.movedim(p.axis, 0)                                      # [n, other, 3]
        if p.box > 1:
            n, k = x.shape[0], p.box
            pad = (-n) % k
            if pad:
                x = torch.cat([x, x[-1:].expand(pad, *x.shape[1:])])
            sums = x.reshape(-1, k, *x.shape[1:]).sum(1)
            x = torch.floor((sums + k // 2) * float((1 << 32) // (256 * k)) / float(1 << 24))
        else:                                                         # w: [out, n]
            x = torch.floor((torch.tensordot(w, x, dims=([1], [0])) + ONE // 2) / ONE)
            if p.clip:
                x = x.clamp_(0, 255)
        x = x.movedim(0, p.axis)
    return x.to(torch.uint8)
