"""`engine.model.resize`: libvips' Lanczos3 resize in torch gives pyvips' pixels, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.model.config import PRESETS
from engine.model.image import overlap_crop_image, overlap_crops_tensor
from engine.model.resize import resize_plan, vips_resize

pyvips = pytest.importorskip("pyvips")  # a dependency; the reference's resizer

# (input H, W) → (output h, w), one per path of vips_resize (see the module docstring)
CASES = {
    "reduce both axes (the 378-px global crop)": ((480, 640), (378, 378)),
    "reduce, residual under 2 (the 224-px global crop)": ((300, 500), (224, 224)),
    "box shrink by k, then Lanczos": ((1500, 2100), (224, 378)),
    "box shrink alone (an exact multiple)": ((900, 600), (300, 200)),
    "enlarge both axes (the tiling canvas)": ((480, 640), (644, 910)),
    "enlarge one axis, the other kept": ((97, 131), (97, 350)),
    "reduce one axis, enlarge the other": ((650, 377), (851, 192)),
    "reduce rows by ~3: each 16-row region from its top row": ((1178, 100), (384, 100)),
    "reduce rows, enlarge columns: the affine's overlapping row ranges": ((1178, 100), (384, 300)),
    "rows box-shrunk: 128-row tiles": ((1411, 300), (352, 300)),
    "rows box-shrunk, columns reduced: 128-column tiles": ((1411, 943), (352, 258)),
    "rows box-shrunk, columns enlarged: tiles and overlapping row ranges": ((1411, 300), (352, 700)),
    "tiny to large": ((9, 13), (378, 378)),
    "one pixel out": ((200, 300), (1, 1)),
}


def reference(pixels: np.ndarray, h: int, w: int) -> np.ndarray:
    image = pyvips.Image.new_from_array(np.ascontiguousarray(pixels))
    return image.resize(w / pixels.shape[1], vscale=h / pixels.shape[0], kernel="lanczos3").numpy()


@pytest.mark.parametrize("case", CASES)
def test_every_path_gives_pyvips_pixels(case):
    (height, width), (h, w) = CASES[case]
    rng = np.random.default_rng(len(case))
    for pixels in (rng.integers(0, 256, (height, width, 3), dtype=np.uint8),         # noise: clipping, negative lobes
                   np.repeat(np.linspace(0, 255, width, dtype=np.uint8)[None, :, None], height, 0).repeat(3, 2)):
        want = reference(pixels, h, w)
        got = vips_resize(torch.from_numpy(pixels), h, w)
        assert got.dtype == torch.uint8 and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_random_sizes_give_pyvips_pixels():
    rng = np.random.default_rng(0)
    for _ in range(12):
        height, width = (int(v) for v in rng.integers(16, 900, 2))
        h, w = (int(v) for v in rng.integers(8, 1200, 2))
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        np.testing.assert_array_equal(vips_resize(torch.from_numpy(pixels), h, w).numpy(), reference(pixels, h, w),
                                      err_msg=f"{(height, width)} -> {(h, w)}")


def test_slight_enlargements_of_both_axes_follow_libvips_positions():
    # Just below the embedded preset's 384-px canvas. libvips steps along a row by its inverse
    # matrix's entry (1/det times the other axis' scale), added pixel by pixel; the earlier
    # 1/scale, multiplied, missed by up to 7 levels on 24 of these 136 size pairs.
    rng = np.random.default_rng(5)
    for height in range(360, 384, 3):
        for width in range(350, 384, 2):
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            np.testing.assert_array_equal(vips_resize(torch.from_numpy(pixels), 384, 384).numpy(),
                                          reference(pixels, 384, 384), err_msg=f"{(height, width)} -> (384, 384)")


def test_the_crops_of_every_preset_match_the_reference_crops():
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    for name in ("moondream2", "embedded"):
        cfg = PRESETS[name].vision
        want = overlap_crop_image(pixels, cfg, resizer="pyvips")
        got = overlap_crop_image(pixels, cfg, resizer="torch")
        crops, tiling = overlap_crops_tensor(torch.from_numpy(pixels), cfg)
        assert got.tiling == want.tiling == tiling
        np.testing.assert_array_equal(got.crops, want.crops)
        np.testing.assert_array_equal(crops.numpy(), want.crops)


def test_plans_are_integer_matrices_built_once():
    plan = resize_plan(480, 640, 378, 378)
    assert resize_plan(480, 640, 378, 378) is plan
    for p in plan:
        if p.weights is not None:
            assert np.array_equal(p.weights, np.round(p.weights))      # 12-bit integers: exact in float64
            # each row sums to 1.0 in 12 bits, less what truncating its (at most 25) coefficients lost
            assert np.all(np.abs(p.weights.sum(1) - 4096) < 25)


def test_cropbench_checks_and_times_both_paths(capsys):
    from engine.tools import cropbench

    assert cropbench.main(["--device", "cpu", "--preset", "tiny", "--size", "160x120", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "identical to libvips': True" in out and "libvips (CPU)" in out and "torch (cpu)" in out
