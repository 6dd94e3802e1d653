"""Tests for engine/image.py: loading, overlap-crop tiling, patchify, reconstruction, pooling.

All images are generated here (tmp_path / in memory); no binary fixtures.
"""

from __future__ import annotations

import io
import math
import struct
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from engine.model.config import MOONDREAM2, TINY, VisionConfig
from engine.model.image import (
    MAX_PIXELS,
    ImageError,
    OverlapCrops,
    load_image,
    normalize_crops,
    overlap_crop_image,
    patchify,
    RESIZER,
    pool_to_grid,
    reconstruct_from_crops,
    resize_rgb,
    select_tiling,
    tiling_for_size,
)

OFFICIAL = MOONDREAM2.vision
SMALL = TINY.vision
GEOMETRIES = [pytest.param(OFFICIAL, id="official"), pytest.param(SMALL, id="tiny")]


def _window(cfg: VisionConfig) -> int:
    return (cfg.grid - 2 * cfg.overlap_margin) * cfg.patch_size


def _margin_px(cfg: VisionConfig) -> int:
    return cfg.overlap_margin * cfg.patch_size


def _noise(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# --------------------------------------------------------------------------------------------
# A minimal PNG writer (for 16-bit RGB, forged headers, zero-size headers)
# --------------------------------------------------------------------------------------------

def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(width: int, height: int, bit_depth: int, color_type: int, raw: bytes) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def _patch_ihdr_size(png: bytes, width: int, height: int) -> bytes:
    """Rewrite the IHDR width/height of an existing PNG and fix the chunk CRC."""
    assert png[12:16] == b"IHDR"
    ihdr = bytearray(png[16:29])
    ihdr[0:8] = struct.pack(">II", width, height)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + bytes(ihdr)) & 0xFFFFFFFF)
    return png[:16] + bytes(ihdr) + crc + png[33:]


def _encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# select_tiling
# --------------------------------------------------------------------------------------------

WORKED_EXAMPLES = [
    # (H, W) -> tiling, crops incl. global, resized H x W, stitched grid (section 4.4)
    ((378, 378), (1, 1), 2, (378, 378), (27, 27)),
    ((300, 300), (1, 1), 2, (378, 378), (27, 27)),
    ((480, 640), (2, 4), 9, (644, 1176), (46, 84)),
    ((1080, 1920), (2, 4), 9, (644, 1176), (46, 84)),
    ((500, 2000), (1, 6), 7, (378, 1708), (27, 122)),
]


@pytest.mark.parametrize("size,tiling,n_crops,resized,stitched", WORKED_EXAMPLES)
def test_worked_examples_tiling(size, tiling, n_crops, resized, stitched):
    h, w = size
    assert select_tiling(h - 112, w - 112, 266, 12) == tiling
    assert tiling_for_size(h, w, OFFICIAL) == tiling
    th, tw = tiling
    assert (th * 266 + 112, tw * 266 + 112) == resized
    g, m = OFFICIAL.grid, OFFICIAL.overlap_margin
    assert (th * (g - 2 * m) + 2 * m, tw * (g - 2 * m) + 2 * m) == stitched


@pytest.mark.parametrize("size,tiling,n_crops,resized,stitched", WORKED_EXAMPLES)
def test_worked_examples_crops(size, tiling, n_crops, resized, stitched):
    h, w = size
    oc = overlap_crop_image(_noise(h, w), OFFICIAL)
    assert isinstance(oc, OverlapCrops)
    assert oc.tiling == tiling
    assert oc.crops.shape == (n_crops, 378, 378, 3)
    assert oc.crops.dtype == np.uint8
    assert oc.n_crops == n_crops
    # stitched grid size from the real crop count
    local = torch.zeros(n_crops - 1, 27, 27, 1)
    assert tuple(reconstruct_from_crops(local, oc.tiling, 4).shape[:2]) == stitched


@settings(max_examples=400, deadline=None)
@given(
    h=st.integers(-200, 30000),
    w=st.integers(-200, 30000),
    window=st.sampled_from([266, 80, 1, 7, 100]),
    max_crops=st.integers(1, 64),
)
def test_select_tiling_properties(h, w, window, max_crops):
    th, tw = select_tiling(h, w, window, max_crops)
    assert isinstance(th, int) and isinstance(tw, int)
    assert th >= 1 and tw >= 1
    assert th * tw <= max_crops  # never more tiles than allowed
    if h <= window or w <= window:
        assert (th, tw) == (1, 1)
        return
    need_h, need_w = math.ceil(h / window), math.ceil(w / window)
    if need_h * need_w <= max_crops:
        # The tiles cover the image without shrinking it (every window keeps native resolution or more).
        assert th >= need_h and tw >= need_w
    else:
        # Too large for max_crops: the grid shrinks (the image is downscaled), never grows.
        assert th <= need_h and tw <= need_w


@pytest.mark.parametrize("h,w,expected", [
    # Hand-worked from section 4.2 (margin-reduced sizes, window 266, 12 crops).
    (532, 532, (3, 3)),        # min 2x2; sqrt(12) = 3.46 -> 3 each; 9 <= 12
    (300, 1000, (2, 6)),       # min 2x4; th = max(floor(sqrt(3.6)), 2) = 2, tw = max(floor(6.32), 4) = 6 -> 12
    (600, 600, (3, 3)),        # min 3x3; sqrt(12) -> 3
    (1000, 300, (6, 2)),       # the transpose of the row above
    (2000, 2000, (3, 3)),      # min 8x8 > 12: 8·sqrt(12/64) = 3.46 -> 3
    (3000, 800, (6, 2)),       # min 12x4 = 48 > 12: ratio 0.5 -> (6, 2)
])
def test_select_tiling_worked_by_hand(h, w, expected):
    assert select_tiling(h, w, 266, 12) == expected


def test_select_tiling_rejects_bad_args():
    with pytest.raises(ValueError):
        select_tiling(100, 100, 0, 12)
    with pytest.raises(ValueError):
        select_tiling(100, 100, 266, 0)


# --------------------------------------------------------------------------------------------
# overlap_crop_image
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", GEOMETRIES)
@pytest.mark.parametrize("size", [(480, 640), (333, 1000), (50, 70), (1000, 250)])
def test_tiles_are_windows_of_resized_image(cfg, size):
    h, w = size
    arr = _noise(h, w, seed=h + w)
    oc = overlap_crop_image(arr, cfg)
    th, tw = oc.tiling
    crop, win, mpx = cfg.crop_size, _window(cfg), _margin_px(cfg)
    pil = Image.fromarray(arr)
    np.testing.assert_array_equal(oc.crops[0], resize_rgb(arr, crop, crop))
    resized = resize_rgb(arr, th * win + 2 * mpx, tw * win + 2 * mpx)
    assert oc.crops.shape == (1 + th * tw, crop, crop, 3)
    for i in range(th):
        for j in range(tw):
            np.testing.assert_array_equal(
                oc.crops[1 + i * tw + j], resized[i * win:i * win + crop, j * win:j * win + crop]
            )
    # PIL input (any mode) gives the same as the array
    oc2 = overlap_crop_image(pil, cfg)
    np.testing.assert_array_equal(oc2.crops, oc.crops)


@pytest.mark.parametrize("size,target", [((480, 640), (644, 1176)), ((480, 640), (378, 378)), ((97, 131), (378, 378)),
                                         ((1000, 250), (910, 378))])
def test_pyvips_resize_is_the_reference_call(size, target):
    """The reference implementation resizes with `Image.new_from_array(a).resize(sx, vscale=sy)`
    (libvips' default kernel, Lanczos3) whenever pyvips is importable; ours is that call."""
    import pyvips
    arr = _noise(*size, seed=11)
    want = pyvips.Image.new_from_array(arr).resize(target[1] / size[1], vscale=target[0] / size[0]).numpy()
    got = resize_rgb(arr, *target, "pyvips")
    assert got.shape == (*target, 3) and got.dtype == np.uint8
    h, w = min(target[0], want.shape[0]), min(target[1], want.shape[1])
    np.testing.assert_array_equal(got[:h, :w], want[:h, :w])
    assert not got[h:].any() and not got[:, w:].any()  # a pixel libvips rounds away stays zero, as in the reference


def test_serving_resizes_with_pyvips():
    # pyvips is a dependency: the released weights were made with libvips crops.
    assert RESIZER == "pyvips"


@pytest.mark.parametrize("resizer", ["pyvips", "torch", "pillow"])
def test_resize_facts(resizer):
    flat = np.full((61, 83, 3), (12, 200, 77), dtype=np.uint8)
    np.testing.assert_array_equal(resize_rgb(flat, 378, 378, resizer), np.broadcast_to(flat[:1, :1], (378, 378, 3)))
    # A smooth ramp stays a ramp: each output column is close to the input value at its centre.
    ramp = np.repeat(np.repeat(np.linspace(0, 255, 400)[None, :, None], 50, 0), 3, 2).round().astype(np.uint8)
    out = resize_rgb(ramp, 50, 100, resizer).astype(float)
    centres = (np.arange(100) + 0.5) * 4 - 0.5
    assert np.abs(out[25, 5:95, 0] - np.interp(centres[5:95], np.arange(400), ramp[0, :, 0])).max() <= 2
    with pytest.raises(ValueError, match="unknown resizer"):
        resize_rgb(flat, 10, 10, "bicubic")


def test_pillow_fallback_is_pillow_lanczos():
    arr = _noise(90, 70, seed=4)
    want = np.asarray(Image.fromarray(arr).resize((378, 378), Image.Resampling.LANCZOS))
    np.testing.assert_array_equal(resize_rgb(arr, 378, 378, "pillow"), want)


def test_tiles_cover_resized_image_exactly():
    # Union of the tiles equals the resized image: every pixel lies in some tile and overlaps agree.
    cfg = SMALL
    arr = _noise(300, 500, seed=3)
    oc = overlap_crop_image(arr, cfg)
    th, tw = oc.tiling
    win, crop, mpx = _window(cfg), cfg.crop_size, _margin_px(cfg)
    canvas = np.full((th * win + 2 * mpx, tw * win + 2 * mpx, 3), -1, dtype=np.int32)
    for i in range(th):
        for j in range(tw):
            region = canvas[i * win:i * win + crop, j * win:j * win + crop]
            tile = oc.crops[1 + i * tw + j].astype(np.int32)
            seen = region >= 0
            np.testing.assert_array_equal(region[seen], tile[seen])
            region[...] = tile
    assert (canvas >= 0).all()


def test_exact_size_image_is_not_resampled():
    cfg = OFFICIAL
    arr = _noise(644, 1176, seed=5)
    oc = overlap_crop_image(arr, cfg)
    assert oc.tiling == (2, 4)
    np.testing.assert_array_equal(oc.crops[1], arr[:378, :378])
    np.testing.assert_array_equal(oc.crops[8], arr[266:644, 798:1176])
    one = _noise(378, 378, seed=6)
    oc1 = overlap_crop_image(one, cfg)
    np.testing.assert_array_equal(oc1.crops[0], one)
    np.testing.assert_array_equal(oc1.crops[1], one)


@pytest.mark.parametrize("cfg", GEOMETRIES)
@pytest.mark.parametrize("size", [(1, 1), (5, 3), (3, 5), (20000, 20), (20, 20000), (2, 9000)])
def test_tiny_and_extreme_images(cfg, size):
    h, w = size
    arr = _noise(h, w, seed=7)
    oc = overlap_crop_image(arr, cfg)
    assert oc.tiling == (1, 1)
    assert oc.crops.shape == (2, cfg.crop_size, cfg.crop_size, 3)
    if size == (1, 1):
        assert (oc.crops == arr[0, 0]).all()


@pytest.mark.parametrize("size", [(20000, 400), (400, 20000)])
def test_extreme_aspect_with_wide_short_side_respects_max_crops(size):
    oc = overlap_crop_image(_noise(*size, seed=8), OFFICIAL)
    th, tw = oc.tiling
    assert th * tw <= OFFICIAL.max_crops
    assert oc.crops.shape[0] == 1 + th * tw <= 1 + OFFICIAL.max_crops


@settings(max_examples=60, deadline=None)
@given(h=st.integers(1, 700), w=st.integers(1, 700))
def test_tiny_geometry_crop_counts(h, w):
    oc = overlap_crop_image(np.zeros((h, w, 3), np.uint8), SMALL)
    th, tw = oc.tiling
    assert oc.tiling == tiling_for_size(h, w, SMALL)
    assert oc.crops.shape == (1 + th * tw, 112, 112, 3)
    assert 1 <= th * tw <= SMALL.max_crops


def test_overlap_crop_accepts_non_rgb_pil():
    rgba = Image.new("RGBA", (40, 30), (255, 0, 0, 0))  # fully transparent -> white
    oc = overlap_crop_image(rgba, SMALL)
    assert (oc.crops == 255).all()
    gray = Image.new("L", (40, 30), 77)
    assert (overlap_crop_image(gray, SMALL).crops == 77).all()


def test_overlap_crop_rejects_bad_input():
    with pytest.raises(ImageError):
        overlap_crop_image(np.zeros((0, 5, 3), np.uint8), SMALL)
    with pytest.raises(ImageError):
        overlap_crop_image(np.zeros((5, 5, 3), np.float32), SMALL)
    with pytest.raises(TypeError):
        overlap_crop_image("not an image", SMALL)


# --------------------------------------------------------------------------------------------
# normalize_crops / patchify
# --------------------------------------------------------------------------------------------

def test_normalize_crops():
    crops = np.zeros((2, 4, 6, 3), np.uint8)
    crops[0, ..., 0] = 255
    crops[1, 1, 2] = (0, 51, 102)
    x = normalize_crops(crops)
    assert x.shape == (2, 3, 4, 6) and x.dtype == torch.float32
    assert torch.all(x[0, 0] == 1.0) and torch.all(x[0, 1:] == -1.0)
    torch.testing.assert_close(x[1, :, 1, 2], torch.tensor([0.0, 51, 102]) / 255 * 2 - 1)
    assert x.min() >= -1 and x.max() <= 1
    xb = normalize_crops(crops, dtype=torch.bfloat16, device="cpu")
    assert xb.dtype == torch.bfloat16 and xb.shape == (2, 3, 4, 6)
    ref = torch.from_numpy(crops).permute(0, 3, 1, 2).to(torch.bfloat16).div(255).sub(0.5).div(0.5)
    assert torch.equal(xb, ref)


@pytest.mark.parametrize("cfg", GEOMETRIES)
def test_patchify_matches_conv_and_layout(cfg):
    p, s = cfg.patch_size, cfg.crop_size
    torch.manual_seed(0)
    x = torch.randn(2, 3, s, s, dtype=torch.float64)
    out = patchify(x, p)
    g = s // p
    assert out.shape == (2, g * g, 3 * p * p)
    # explicit layout: patch (r, c) -> row r*g + c, features (channel, row, col)
    for r, c in [(0, 0), (0, g - 1), (g - 1, 0), (3, 5)]:
        torch.testing.assert_close(out[1, r * g + c], x[1, :, r * p:(r + 1) * p, c * p:(c + 1) * p].reshape(-1))
    # same as a stride-p convolution with kernel [D, 3, p, p]
    weight = torch.randn(5, 3, p, p, dtype=torch.float64)
    conv = F.conv2d(x, weight, stride=p).flatten(2).transpose(1, 2)
    torch.testing.assert_close(out @ weight.reshape(5, -1).T, conv)


def test_patchify_rejects_bad_size():
    with pytest.raises(ValueError):
        patchify(torch.zeros(1, 3, 10, 10), 4)


# --------------------------------------------------------------------------------------------
# reconstruct_from_crops / pool_to_grid
# --------------------------------------------------------------------------------------------

def _coordinate_map(hg: int, wg: int, extra: int = 2, seed: int = 0) -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(hg), torch.arange(wg), indexing="ij")
    rnd = torch.randn(hg, wg, extra, generator=torch.Generator().manual_seed(seed))
    return torch.cat([ys[..., None].double(), xs[..., None].double(), rnd.double()], dim=-1)


def _cut_feature_tiles(feature_map: torch.Tensor, tiling, g: int, m: int) -> torch.Tensor:
    th, tw = tiling
    s = g - 2 * m
    return torch.stack(
        [feature_map[i * s:i * s + g, j * s:j * s + g] for i in range(th) for j in range(tw)]
    )


@pytest.mark.parametrize("cfg", GEOMETRIES)
@pytest.mark.parametrize("tiling", [(1, 1), (2, 4), (1, 6), (3, 3), (4, 2), (6, 1), (2, 2), (12, 1)])
def test_reconstruct_is_inverse_of_cropping(cfg, tiling):
    g, m = cfg.grid, cfg.overlap_margin
    th, tw = tiling
    s = g - 2 * m
    hg, wg = th * s + 2 * m, tw * s + 2 * m
    fmap = _coordinate_map(hg, wg, seed=th * 10 + tw)
    tiles = _cut_feature_tiles(fmap, tiling, g, m)
    assert tiles.shape == (th * tw, g, g, fmap.shape[-1])
    out = reconstruct_from_crops(tiles, tiling, m)
    assert out.shape == fmap.shape
    assert torch.equal(out, fmap)


def test_reconstruct_only_uses_interior_and_border_margins():
    # Poison every margin cell that faces another tile: it must never reach the output.
    g, m, tiling = 27, 4, (3, 3)
    th, tw = tiling
    s = g - 2 * m
    fmap = _coordinate_map(th * s + 2 * m, tw * s + 2 * m)
    tiles = _cut_feature_tiles(fmap, tiling, g, m).clone()
    for ty in range(th):
        for tx in range(tw):
            t = tiles[ty * tw + tx]
            if ty > 0:
                t[:m] = float("nan")
            if ty < th - 1:
                t[g - m:] = float("nan")
            if tx > 0:
                t[:, :m] = float("nan")
            if tx < tw - 1:
                t[:, g - m:] = float("nan")
    out = reconstruct_from_crops(tiles, tiling, m)
    assert torch.equal(out, fmap)


@pytest.mark.parametrize("cfg", GEOMETRIES)
@pytest.mark.parametrize("tiling", [(1, 1), (2, 4), (3, 3)])
def test_pixel_tiles_and_feature_stitching_agree(cfg, tiling):
    """End to end: an image whose patch (r, c) carries colour (r, c) is cropped; the patch colours
    of the tiles, stitched, give back the patch-coordinate map of the resized image."""
    p, g, m = cfg.patch_size, cfg.grid, cfg.overlap_margin
    th, tw = tiling
    s = g - 2 * m
    hg, wg = th * s + 2 * m, tw * s + 2 * m
    assert hg < 256 and wg < 256
    ys, xs = np.meshgrid(np.arange(hg), np.arange(wg), indexing="ij")
    patch_img = np.stack([ys, xs, np.full_like(ys, 9)], axis=-1).astype(np.uint8)
    img = np.repeat(np.repeat(patch_img, p, axis=0), p, axis=1)  # exact target size: no resampling
    assert tiling_for_size(img.shape[0], img.shape[1], cfg) == tiling
    oc = overlap_crop_image(img, cfg)
    assert oc.tiling == tiling
    local = torch.from_numpy(oc.crops[1:, ::p, ::p, :].copy()).long()  # patch colour per tile cell
    assert local.shape == (th * tw, g, g, 3)
    stitched = reconstruct_from_crops(local, oc.tiling, m)
    assert torch.equal(stitched, torch.from_numpy(patch_img).long())


def test_forced_tiling_round_trip():
    cfg = OFFICIAL
    p, g, m = cfg.patch_size, cfg.grid, cfg.overlap_margin
    tiling = (1, 6)
    s = g - 2 * m
    hg, wg = s + 2 * m, 6 * s + 2 * m
    ys, xs = np.meshgrid(np.arange(hg), np.arange(wg), indexing="ij")
    patch_img = np.stack([ys, xs, ys + xs], axis=-1).astype(np.uint8)
    img = np.repeat(np.repeat(patch_img, p, axis=0), p, axis=1)
    oc = overlap_crop_image(img, cfg, tiling=tiling)
    assert oc.tiling == tiling and oc.crops.shape == (7, 378, 378, 3)
    local = torch.from_numpy(oc.crops[1:, ::p, ::p, :].copy())
    assert torch.equal(reconstruct_from_crops(local, tiling, m), torch.from_numpy(patch_img))


def test_reconstruct_rejects_wrong_tile_count():
    with pytest.raises(ValueError):
        reconstruct_from_crops(torch.zeros(3, 27, 27, 2), (2, 2), 4)
    with pytest.raises(ValueError):
        reconstruct_from_crops(torch.zeros(1, 8, 8, 2), (1, 1), 4)


@pytest.mark.parametrize("cfg", GEOMETRIES)
@pytest.mark.parametrize("tiling", [(1, 1), (2, 4), (1, 6), (3, 3)])
def test_pool_to_grid(cfg, tiling):
    g, m = cfg.grid, cfg.overlap_margin
    th, tw = tiling
    s = g - 2 * m
    stitched = torch.randn(th * s + 2 * m, tw * s + 2 * m, 6)
    pooled = pool_to_grid(stitched, g)
    assert pooled.shape == (g * g, 6)
    ref = F.adaptive_avg_pool2d(stitched.permute(2, 0, 1)[None], (g, g))[0].permute(1, 2, 0).reshape(g * g, 6)
    torch.testing.assert_close(pooled, ref)
    const = torch.full_like(stitched, 3.25)
    torch.testing.assert_close(pool_to_grid(const, g), torch.full((g * g, 6), 3.25))


def test_pool_identity_for_single_tile():
    x = torch.randn(27, 27, 4)
    torch.testing.assert_close(pool_to_grid(x, 27), x.reshape(729, 4))
    # row-major: cell (r, c) -> row r*grid + c
    coords = _coordinate_map(27, 27, extra=0)
    pooled = pool_to_grid(coords, 27)
    assert pooled[5 * 27 + 9].tolist() == [5.0, 9.0]


# --------------------------------------------------------------------------------------------
# load_image: sources
# --------------------------------------------------------------------------------------------

def test_load_sources_agree(tmp_path):
    arr = _noise(20, 30, seed=11)
    data = _encode(Image.fromarray(arr), "PNG")
    path = tmp_path / "a.png"
    path.write_bytes(data)
    results = [
        load_image(path),
        load_image(str(path)),
        load_image(data),
        load_image(bytearray(data)),
        load_image(io.BytesIO(data)),
        load_image(Image.fromarray(arr)),
        load_image(arr),
    ]
    with open(path, "rb") as fh:
        results.append(load_image(fh))
    for img in results:
        assert isinstance(img, Image.Image)
        assert img.mode == "RGB" and img.size == (30, 20)
        np.testing.assert_array_equal(np.asarray(img), arr)


def test_load_returns_detached_copy(tmp_path):
    src = Image.new("RGB", (4, 4), (1, 2, 3))
    out = load_image(src)
    assert out is not src
    path = tmp_path / "x.png"
    src.save(path)
    img = load_image(path)
    path.unlink()
    assert img.getpixel((0, 0)) == (1, 2, 3)


def test_load_numpy_variants():
    gray = np.full((3, 4), 9, np.uint8)
    assert np.asarray(load_image(gray)).tolist() == np.full((3, 4, 3), 9).tolist()
    rgba = np.zeros((3, 4, 4), np.uint8)
    assert (np.asarray(load_image(rgba)) == 255).all()  # transparent -> white
    with pytest.raises(ImageError, match="uint8"):
        load_image(np.zeros((3, 4, 3), np.float32))
    with pytest.raises(ImageError, match="shape"):
        load_image(np.zeros((3, 4, 2), np.uint8))
    with pytest.raises(ImageError, match="zero size"):
        load_image(np.zeros((0, 4, 3), np.uint8))
    with pytest.raises(ImageError, match="too large"):
        load_image(np.zeros((100, 100, 3), np.uint8), max_pixels=9999)


# --------------------------------------------------------------------------------------------
# load_image: errors
# --------------------------------------------------------------------------------------------

def _assert_clean_error(excinfo, name_part: str, *words: str):
    msg = str(excinfo.value)
    assert type(excinfo.value) is ImageError
    assert isinstance(excinfo.value, ValueError)
    assert "\n" not in msg
    assert msg.startswith("cannot read image ")
    assert name_part in msg
    for w in words:
        assert w in msg.lower(), msg


def test_missing_file(tmp_path):
    with pytest.raises(ImageError) as ei:
        load_image(tmp_path / "nope.png")
    _assert_clean_error(ei, "nope.png", "not found")


def test_directory(tmp_path):
    with pytest.raises(ImageError) as ei:
        load_image(tmp_path)
    _assert_clean_error(ei, str(tmp_path), "directory")


def test_zero_bytes(tmp_path):
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    with pytest.raises(ImageError) as ei:
        load_image(p)
    _assert_clean_error(ei, "empty.jpg", "empty")
    with pytest.raises(ImageError) as ei:
        load_image(b"")
    _assert_clean_error(ei, "<bytes>", "empty")
    with pytest.raises(ImageError):
        load_image(io.BytesIO(b""))


def test_random_bytes_named_png(tmp_path):
    p = tmp_path / "noise.png"
    p.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(ImageError) as ei:
        load_image(p)
    _assert_clean_error(ei, "noise.png", "not a recognised image")
    with pytest.raises(ImageError):
        load_image(b"hello, I am text")


@pytest.mark.parametrize("fmt,ext", [("PNG", "png"), ("JPEG", "jpg"), ("GIF", "gif"), ("BMP", "bmp")])
@pytest.mark.parametrize("fraction", [0.5, 0.9])
def test_truncated(tmp_path, fmt, ext, fraction):
    data = _encode(Image.fromarray(_noise(64, 64, seed=2)), fmt)
    p = tmp_path / f"cut.{ext}"
    p.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ImageError) as ei:
        load_image(p)
    _assert_clean_error(ei, f"cut.{ext}", "truncated")


def test_truncated_header_only(tmp_path):
    data = _encode(Image.fromarray(_noise(64, 64)), "JPEG")
    for cut in (40, 120):
        with pytest.raises(ImageError):
            load_image(data[:cut])


def test_bomb_png_header(tmp_path):
    small = _encode(Image.new("RGB", (8, 8), (10, 20, 30)), "PNG")
    p = tmp_path / "bomb.png"
    p.write_bytes(_patch_ihdr_size(small, 100_000, 100_000))
    with pytest.raises(ImageError) as ei:
        load_image(p)
    _assert_clean_error(ei, "bomb.png", "too large")


def test_size_checked_before_decoding(tmp_path):
    # Declares 8000x8000 (64 M pixels, below Pillow's own guard) over 8x8 worth of data: our limit
    # must fire (a decode would have reported truncation instead).
    small = _encode(Image.new("RGB", (8, 8)), "PNG")
    p = tmp_path / "big.png"
    p.write_bytes(_patch_ihdr_size(small, 8000, 8000))
    assert 8000 * 8000 > MAX_PIXELS
    with pytest.raises(ImageError) as ei:
        load_image(p)
    _assert_clean_error(ei, "big.png", "too large", "64,000,000")
    # the same file with a higher limit is decoded and fails as corrupt
    with pytest.raises(ImageError) as ei:
        load_image(p, max_pixels=70_000_000)
    _assert_clean_error(ei, "big.png", "truncated")


def test_max_pixels_argument(tmp_path):
    p = tmp_path / "ok.png"
    Image.new("RGB", (100, 50)).save(p)
    assert load_image(p, max_pixels=5000).size == (100, 50)
    with pytest.raises(ImageError, match="too large"):
        load_image(p, max_pixels=4999)
    assert load_image(p, max_pixels=None).size == (100, 50)
    with pytest.raises(ValueError):
        load_image(p, max_pixels=0)


def test_zero_size_header(tmp_path):
    small = _encode(Image.new("RGB", (8, 8)), "PNG")
    p = tmp_path / "zero.png"
    p.write_bytes(_patch_ihdr_size(small, 0, 8))
    with pytest.raises(ImageError) as ei:
        load_image(p)
    _assert_clean_error(ei, "zero.png")
    with pytest.raises(ImageError, match="zero size"):
        load_image(Image.new("RGB", (0, 5)))


def test_unsupported_source_type():
    with pytest.raises(ImageError, match="unsupported source"):
        load_image(12345)
    with pytest.raises(ImageError, match="text mode"):
        load_image(io.StringIO("abc"))


# --------------------------------------------------------------------------------------------
# load_image: orientation, modes, frames
# --------------------------------------------------------------------------------------------

def test_exif_orientation_6(tmp_path):
    # 40 wide x 20 tall: left half red, right half blue. Orientation 6 = rotate 90 deg clockwise
    # for display, so the result is 20 wide x 40 tall with red on top.
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)
    arr[:, 20:] = (0, 0, 255)
    img = Image.fromarray(arr)
    exif = Image.Exif()
    exif[0x0112] = 6
    p = tmp_path / "rot.jpg"
    img.save(p, "JPEG", exif=exif, quality=95)
    out = load_image(p)
    assert out.size == (20, 40)
    px = np.asarray(out).astype(int)
    assert px[5, 10, 0] > 200 and px[5, 10, 2] < 60  # top: red
    assert px[35, 10, 2] > 200 and px[35, 10, 0] < 60  # bottom: blue
    # without the tag: unchanged
    p2 = tmp_path / "plain.jpg"
    img.save(p2, "JPEG")
    assert load_image(p2).size == (40, 20)
    # a PIL image carrying the tag is rotated too
    assert load_image(Image.open(p)).size == (20, 40)


def test_rgba_composited_on_white(tmp_path):
    arr = np.zeros((4, 4, 4), np.uint8)
    arr[..., 0] = 200  # red-ish, alpha varies
    arr[0, 0, 3] = 255
    arr[0, 1, 3] = 0
    arr[0, 2, 3] = 128
    p = tmp_path / "a.png"
    Image.fromarray(arr, "RGBA").save(p)
    out = np.asarray(load_image(p)).astype(int)
    assert out[0, 0].tolist() == [200, 0, 0]
    assert out[0, 1].tolist() == [255, 255, 255]
    assert abs(out[0, 2, 0] - 228) <= 2 and abs(out[0, 2, 1] - 127) <= 2


def test_la_and_palette_transparency(tmp_path):
    la = Image.new("LA", (3, 3), (10, 0))
    p = tmp_path / "la.png"
    la.save(p)
    out = load_image(p)
    assert out.mode == "RGB" and (np.asarray(out) == 255).all()
    la_opaque = Image.new("LA", (3, 3), (10, 255))
    assert (np.asarray(load_image(la_opaque)) == 10).all()

    pal = Image.new("P", (4, 2), 0)
    pal.putpalette([0, 255, 0] + [0, 0, 255] + [0] * 762)
    pal.putpixel((1, 0), 1)
    p2 = tmp_path / "p.png"
    pal.save(p2, transparency=1)
    out = np.asarray(load_image(p2))
    assert out[0, 0].tolist() == [0, 255, 0]
    assert out[0, 1].tolist() == [255, 255, 255]  # transparent palette entry -> white
    p3 = tmp_path / "p_opaque.png"
    pal.save(p3)
    assert np.asarray(load_image(p3))[0, 1].tolist() == [0, 0, 255]


def test_cmyk_jpeg(tmp_path):
    cmyk = Image.new("CMYK", (16, 16), (0, 255, 255, 0))  # red
    p = tmp_path / "c.jpg"
    cmyk.save(p, "JPEG", quality=95)
    assert Image.open(p).mode == "CMYK"
    out = load_image(p)
    assert out.mode == "RGB" and out.size == (16, 16)
    r, g, b = np.asarray(out).astype(int)[8, 8]
    assert r > 200 and g < 60 and b < 60


def test_i16_png(tmp_path):
    a = np.array([[0, 257 * 128, 65535, 1000, 65000]], dtype=np.uint16)  # scaled by 1/257
    p = tmp_path / "g16.png"
    Image.fromarray(a).save(p)
    assert Image.open(p).mode.startswith("I")
    out = np.asarray(load_image(p))
    assert out.shape == (1, 5, 3)
    assert out[0, :, 0].tolist() == [0, 128, 255, 4, 253]
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()
    # an in-memory I;16 image too
    assert np.asarray(load_image(Image.fromarray(a)))[0, :, 0].tolist() == [0, 128, 255, 4, 253]


def test_16bit_rgb_png(tmp_path):
    # colour type 2, bit depth 16 (Pillow cannot write this, so build it by hand)
    w, h = 3, 2
    px = np.zeros((h, w, 3), dtype=">u2")
    px[0, 0] = (65535, 0, 0)
    px[0, 1] = (0, 65535, 0)
    px[1, 2] = (0x8000, 0x8000, 0x8000)
    raw = b"".join(b"\x00" + px[y].tobytes() for y in range(h))
    p = tmp_path / "rgb16.png"
    p.write_bytes(_png(w, h, 16, 2, raw))
    out = np.asarray(load_image(p))
    assert out.shape == (2, 3, 3)
    assert out[0, 0].tolist() == [255, 0, 0]
    assert out[0, 1].tolist() == [0, 255, 0]
    assert out[1, 2].tolist() == [128, 128, 128]


def test_one_bit_and_gray(tmp_path):
    bw = Image.new("1", (5, 5), 0)
    bw.putpixel((2, 2), 1)
    p = tmp_path / "bw.png"
    bw.save(p)
    out = np.asarray(load_image(p))
    assert out[2, 2].tolist() == [255, 255, 255] and out[0, 0].tolist() == [0, 0, 0]
    g = tmp_path / "g.png"
    Image.new("L", (2, 2), 42).save(g)
    assert (np.asarray(load_image(g)) == 42).all()


def test_animated_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (10, 8), c) for c in [(255, 0, 0), (0, 0, 255), (0, 255, 0)]]
    p = tmp_path / "anim.gif"
    frames[0].save(p, save_all=True, append_images=frames[1:], duration=50, loop=0)
    with Image.open(p) as im:
        assert im.n_frames == 3
    out = load_image(p)
    assert out.size == (10, 8) and out.mode == "RGB"
    assert np.asarray(out)[4, 4].tolist() == [255, 0, 0]
    # a PIL image positioned at a later frame is rewound to frame 0
    im = Image.open(p)
    im.seek(2)
    assert np.asarray(load_image(im))[4, 4].tolist() == [255, 0, 0]
    im.close()


def test_webp_and_tiff_roundtrip(tmp_path):
    arr = _noise(12, 9, seed=4)
    for fmt, ext, kw in [("TIFF", "tif", {}), ("WEBP", "webp", {"lossless": True})]:
        p = tmp_path / f"x.{ext}"
        try:
            Image.fromarray(arr).save(p, fmt, **kw)
        except (KeyError, OSError):  # codec not built into this Pillow
            continue
        np.testing.assert_array_equal(np.asarray(load_image(p)), arr)


def test_loaded_image_feeds_the_pipeline(tmp_path):
    p = tmp_path / "photo.jpg"
    Image.fromarray(_noise(480, 640, seed=9)).save(p)
    cfg = OFFICIAL
    oc = overlap_crop_image(load_image(p), cfg)
    x = normalize_crops(oc.crops)
    patches = patchify(x, cfg.patch_size)
    assert patches.shape == (9, 729, 588)
    feats = torch.randn(9, 729, 8)
    local = feats[1:].reshape(-1, cfg.grid, cfg.grid, 8)
    stitched = reconstruct_from_crops(local, oc.tiling, cfg.overlap_margin)
    assert stitched.shape == (46, 84, 8)
    assert pool_to_grid(stitched, cfg.grid).shape == (729, 8)
