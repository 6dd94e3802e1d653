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
  which this follows; vertically it restarts in every region, so rows use their own index.
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


def _reduce(axis: int, n: int, shrink: float) -> tuple[list[Pass], int]:
    """vips_reducev / vips_reduceh by `shrink` > 1 of an axis of n pixels: its passes and the size they leave."""
    n_out = int(math.floor(n / shrink + 0.5))
    extra = n_out * shrink - n
    passes = []
    k = max(1, int(math.floor(n / n_out / GAP)))
    if k > 1:
        passes.append(Pass(axis, box=k))
        n, shrink, extra = -(-n // k), shrink / k, extra / k
        if shrink == 1.0:
            return passes, n
    taps = int(2 * np.rint(3 * shrink) + 1)
    offset = (1 + extra) / 2.0 - 1
    masks = _lanczos_masks(taps, shrink)
    pad = math.ceil(taps / 2.0) - 1                  # libvips embeds this many edge pixels first
    if axis == 0:   # each region restarts the position: rows from their own index
        position = (np.arange(n_out) + 0.5) * shrink - 0.5 - offset
    else:           # along a row libvips adds `shrink` to the first position, in order (so does cumsum)
        position = np.cumsum(np.r_[0.5 * shrink - 0.5 - offset, np.full(n_out - 1, shrink)])
    first = position.astype(np.int64) - pad
    return passes + [Pass(axis, weights=_matrix(n, first, masks[_subpixel(position)]))], n_out


def _enlarge(n: int, scale: float, step: float, accumulate: bool) -> np.ndarray:
    """[round(n·scale), n]: the Catmull-Rom taps of vips_affine with idx 0.5 (scale ≥ 1).

    `step` is the inverse matrix's entry for this axis, as libvips computes it (1/det times the other
    axis' scale, so not always 1/scale to the bit). Along a row libvips starts each line at 1.5 in its
    bordered input (i/s − 0.5 + 2 at i = 0) and adds `step` per pixel (`accumulate`; scale-only
    affines render whole lines); down a column it multiplies: step·i − (0.5 − 1) + 1."""
    n_out = int(n * scale + 0.5)
    if accumulate:
        position = np.cumsum(np.r_[0.0 - (0.5 - 1) + 1, np.full(n_out - 1, step)])   # in order, as C adds
    else:
        position = step * np.arange(n_out) - (0.5 - 1) + 1
    return _matrix(n, position.astype(np.int64) - 3, _CUBIC[_subpixel(position)])


@functools.lru_cache(maxsize=64)
def resize_plan(height: int, width: int, out_height: int, out_width: int) -> tuple[Pass, ...]:
    """The passes of `pyvips.Image.resize(out_width / width, vscale=out_height / height,
    kernel="lanczos3")` on a height × width image, in libvips' order."""
    hscale = max(out_width / width, 1.0 / width)
    vscale = max(out_height / height, 1.0 / height)
    passes: list[Pass] = []
    rows, cols = height, width
    if vscale < 1.0:
        steps, rows = _reduce(0, height, 1.0 / vscale)
        passes += steps
    if hscale < 1.0:
        steps, cols = _reduce(1, width, 1.0 / hscale)
        passes += steps
    if hscale > 1.0 or vscale > 1.0:   # one vips_affine(a, 0, 0, d): 1.0 on an axis it does not enlarge
        a, d = max(hscale, 1.0), max(vscale, 1.0)
        inverse = 1.0 / (a * d - 0.0 * 0.0)   # vips__transform_calc_inverse: ia = d / det, id = a / det
        passes.append(Pass(1, weights=_enlarge(cols, a, inverse * d, accumulate=True), clip=False))
        passes.append(Pass(0, weights=_enlarge(rows, d, inverse * a, accumulate=False)))
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
