"""`python -m engine.cropbench`: the overlap crops of one image, libvips on the CPU against
libvips' arithmetic in torch (`engine.model.resize`) on a device.

    python -m engine.cropbench [--device cuda] [--preset moondream2] [--size 640x480] [--runs 30]

Prints, per resizer, the median wall time and the CPU time of the calling process per image (a
noise image, the preset's crops: the global crop and the tiling canvas), and checks the torch
crops against libvips' pixel for pixel. On CUDA the torch time includes the upload of the
image's uint8 pixels and a synchronisation; the crops stay on the device (as the vision encoder
would take them).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from engine.model.config import PRESETS
from engine.model.image import overlap_crop_image, overlap_crops_tensor


def timed(fn, runs: int, sync) -> tuple[float, float]:
    """(median wall ms, median process-CPU ms) of `fn` after one warm-up."""
    fn()
    sync()
    walls, cpus = [], []
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        sync()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return 1e3 * statistics.median(walls), 1e3 * statistics.median(cpus)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.cropbench", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--preset", default="moondream2", choices=sorted(PRESETS))
    p.add_argument("--size", default="640x480", help="image WIDTHxHEIGHT")
    p.add_argument("--runs", type=int, default=30)
    args = p.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--size must look like 640x480, got {args.size!r}") from None
    cfg = PRESETS[args.preset].vision
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    want = overlap_crop_image(pixels, cfg, resizer="pyvips").crops
    got = overlap_crops_tensor(torch.from_numpy(pixels).to(device), cfg)[0].cpu().numpy()
    same = got.shape == want.shape and np.array_equal(got, want)
    vips_ms = timed(lambda: overlap_crop_image(pixels, cfg, resizer="pyvips"), args.runs, lambda: None)
    torch_ms = timed(lambda: overlap_crops_tensor(torch.from_numpy(pixels).to(device), cfg), args.runs, sync)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{args.preset} crops of a {width}x{height} image ({want.shape[0]} crops of {want.shape[1]} px); "
          f"torch crops identical to libvips': {same}")
    print(f"  {'libvips (CPU)':<28} median {vips_ms[0]:7.2f} ms wall, {vips_ms[1]:7.2f} ms CPU per image")
    print(f"  {'torch (' + name + ')':<28} median {torch_ms[0]:7.2f} ms wall, {torch_ms[1]:7.2f} ms CPU per image")
    return 0 if same else 1
