"""Where the GPU's time goes: kernel categories of a new-image prefill and of a decode step,
against what the hardware allows.

    python -m engine.profile [--preset moondream2] [--images 1,8] [--batch 1,32,64] [--size 640x480]
                             [--peak-tflops 989] [--peak-tbs 4.8] [--top 12] [--pdl off|on] [--json OUT]

Kernels are launched without programmatic dependent launch unless `--pdl on`: with it, the profiled
kernel times overlap (README, "Session 47"), so the per-category split would not add up to the step.

Random weights of the preset (no download), bf16 on CUDA. Two measurements, each under
`torch.profiler` (GPU kernel time, summed by category) and separately timed with CUDA events:

Wall time per run is measured between device-wide synchronisations, apart from the profiled runs.

* prefill of N new images of `--size` (their overlap crops made on the GPU first, as the engine
  makes them from the uploaded pixels, `overlap_crops_tensor`): the vision
  tower over every crop, stitching and projection, and the 730-position text prefix, as
  `ModelRunner.launch_prefill` runs them (`encode_images` + `prefill_prefix`, eagerly); ms per image, and
  the effective TFLOP/s from the model's arithmetic (matrix multiplies and attention, counted from
  the config; elementwise work not counted).
* the engine's decode step at batch B, distinct images, positions just past a 10-object detect
  prompt: the captured forward and sampling graphs replayed (the `gpu_only` column of
  `engine.bench`); ms per step, and the effective TB/s from the bytes a step must read (every
  weight the step uses once, plus each row's K/V up to its position).

The floors printed are those two counts over `--peak-tflops` (dense bf16) and `--peak-tbs`
(memory bandwidth) — the H200's datasheet figures by default. They are arithmetic, not
measurements: no kernel reaches the peak.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np
import torch

from engine.kernels import decode as decode_kernels
from engine.model.config import PRESETS, MoondreamConfig
from engine.model.image import OverlapCrops, overlap_crops_tensor
from engine.serving.engine import Engine
from engine.serving.skills import prompt_ids
from engine.tools.bench import build_model
from engine.training.vocab import stand_in_tokenizer
from engine.worker.sampling import SampleHeads

# Kernel name fragments → category, first match wins (lower-case).
CATEGORIES = (
    ("attention (Triton decode/prompt/prefix)", ("_attn_chunk", "_attn_merge", "_prefix_group", "_prompt_attn",
                                                 "_bidir_attn")),
    ("attention (SDPA flash / efficient)", ("flash", "fmha", "attention", "efficient")),
    ("matrix multiply (cuBLAS / CUTLASS / Triton)", ("gemm", "gemv", "cutlass", "sm90", "xmma", "splitk", "cublas",
                                                     "_skinny")),
    ("rotary + K/V write, fused residual LN", ("_rope_kv", "_rope_prefix", "_residual_ln", "_res_ln")),
    ("layer norm", ("layer_norm", "layernorm")),
    ("GELU", ("gelu",)),
    ("softmax / sampling / reductions", ("softmax", "reduce", "argmax", "max_", "sort", "topk")),
    ("copies, casts, index", ("copy", "cat", "index", "gather", "scatter", "fill", "convert", "to_copy")),
)


def category(name: str) -> str:
    low = name.lower()
    return next((label for label, keys in CATEGORIES if any(k in low for k in keys)), "other elementwise")


def prefill_flops(cfg: MoondreamConfig, n_crops: int) -> float:
    """Matrix-multiply and attention FLOPs of one image's prefill (vision over its crops,
    projection, the text prefix); 2 FLOPs per multiply-add."""
    v, t = cfg.vision, cfg.text
    patches = (v.crop_size // v.patch_size) ** 2
    vision_token = 2 * v.n_layers * (4 * v.dim * v.dim + 2 * v.dim * v.ff_dim)
    vision_attn = 2 * 2 * v.n_layers * patches * patches * v.dim  # QKᵀ and PV, per crop
    projection = 2 * patches * (2 * v.dim * v.proj_inner_dim + v.proj_inner_dim * t.dim)
    n = cfg.prefix_len
    text_token = 2 * t.n_layers * (4 * t.dim * t.dim + 2 * t.dim * t.ff_dim)
    text_attn = 2 * 2 * t.n_layers * n * n * t.dim
    return n_crops * (patches * vision_token + vision_attn) + projection + n * text_token + text_attn


def decode_bytes(model, batch: int, position: int, heads: SampleHeads) -> float:
    """Bytes a decode step and its sampling must read: the text model's weights once (the token
    embedding table excluded: one row is read; the LM head only when `heads.full`), the region
    encoders and the decoders `heads` names, plus every row's K/V up to `position`."""
    region = model.region
    skip = {id(model.text.wte)} | ({id(p) for p in model.text.lm_head.parameters()} if not heads.full else set())
    skip |= {id(p) for p in region.coord_decoder.parameters()} if not heads.coord else set()
    skip |= {id(p) for p in region.size_decoder.parameters()} if not heads.size else set()
    params = [p for p in [*model.text.parameters(), *region.parameters()] if id(p) not in skip]
    weights = sum(p.numel() * p.element_size() for p in params)
    t = model.config.text
    kv = batch * position * t.n_layers * 2 * t.dim * model.text.wte.element_size()
    return float(weights + kv)


def profiled(fn, runs: int, top: int = 12) -> tuple[float, dict[str, float], list[tuple[str, float]]]:
    """(wall ms per run, {category: GPU ms per run}, the top kernels [(name, GPU ms per run)]) for
    `fn` after one warm-up run. Wall time between device-wide synchronisations: `fn` may launch on
    any stream (the runner's graphs replay on its compute stream)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / runs * 1e3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    cats: dict[str, float] = defaultdict(float)
    names: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        device_us = getattr(ev, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(ev, "self_cuda_time_total", 0.0)
        if device_us > 0:
            cats[category(ev.key)] += device_us / 1e3 / runs
            names[ev.key] += device_us / 1e3 / runs
    top = sorted(names.items(), key=lambda kv: -kv[1])[:top]
    return ms, dict(sorted(cats.items(), key=lambda kv: -kv[1])), top


def print_breakdown(title: str, ms: float, cats: dict[str, float], top: list, floor_ms: float, what: str) -> None:
    kernels = sum(cats.values())
    print(f"\n{title}: {ms:.3f} ms (kernels {kernels:.3f} ms; {what}; floor at peak {floor_ms:.3f} ms, "
          f"{floor_ms / ms:.0%} of it reached)")
    for name, v in cats.items():
        print(f"  {name:<42} {v:8.3f} ms  {v / kernels:6.1%}")
    print("  top kernels:")
    for name, v in top:
        print(f"    {v:8.3f} ms  {name[:110]}")


@torch.inference_mode()
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.profile", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="moondream2", choices=sorted(PRESETS))
    p.add_argument("--images", default="1,8", help="new images per prefill")
    p.add_argument("--batch", default="1,32,64", help="decode batch sizes (distinct images)")
    p.add_argument("--size", default="640x480", help="image size WxH for the prefill")
    p.add_argument("--objects", type=int, default=10, help="decode positions: those of a detect of this many objects")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H200 datasheet)")
    p.add_argument("--peak-tbs", type=float, default=4.8, help="memory bandwidth, TB/s (H200 datasheet)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--top", type=int, default=12, help="kernels listed by name")
    p.add_argument("--pdl", choices=("off", "on"), default="off",
                   help="programmatic dependent launch (as served: on). With it a kernel starts before the one "
                        "before it ends and waits inside, so kernel times overlap and their sum exceeds the step")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("error: engine.profile needs a CUDA GPU (it profiles the GPU's kernels)")
    decode_kernels.PDL = args.pdl == "on"  # read at every launch: the graphs below are captured with it
    w, h = (int(x) for x in args.size.lower().split("x"))
    model = build_model(args.preset, "cuda", "bf16", args.seed)
    cfg = model.config
    tokenizer = stand_in_tokenizer(cfg)
    rng = np.random.default_rng(args.seed)
    report: dict = {"device": torch.cuda.get_device_name(), "preset": args.preset, "torch": torch.__version__,
                    "pdl": decode_kernels.PDL,
                    "peak_tflops": args.peak_tflops, "peak_tbs": args.peak_tbs, "prefill": [], "decode": []}
    print(f"{args.preset} bf16 on {report['device']}, torch {torch.__version__}, programmatic dependent launch {args.pdl}")

    engine = Engine(model, tokenizer, max_batch=max(int(n) for n in args.images.split(",")), prefix_cache_size=0)
    cache = engine.runner.prefix.as_cache()
    for n in (int(x) for x in args.images.split(",")):
        crops = [OverlapCrops(*overlap_crops_tensor(torch.from_numpy((rng.random((h, w, 3)) * 255).astype(np.uint8))
                                                    .cuda(), cfg.vision)) for _ in range(n)]
        rows = torch.arange(n, device="cuda")

        def prefill():
            model.text.prefill_prefix(model.encode_images(crops, engine.runner.fused_vision), cache, rows,
                                     engine.runner.kernels)

        ms, cats, top = profiled(prefill, args.runs, args.top)
        flops = sum(prefill_flops(cfg, c.n_crops) for c in crops)
        floor = flops / (args.peak_tflops * 1e12) * 1e3
        print_breakdown(f"prefill of {n} new {w}×{h} image(s), {crops[0].n_crops} crops each", ms, cats, top, floor,
                        f"{ms / n:.2f} ms/image, {flops / n / 1e12:.2f} TFLOP/image, {flops / ms / 1e9:.0f} TFLOP/s")
        report["prefill"].append({"images": n, "crops_per_image": crops[0].n_crops, "ms": ms, "ms_per_image": ms / n,
                                  "tflop_per_image": flops / n / 1e12, "tflops": flops / ms / 1e9,
                                  "floor_ms": floor, "categories_ms": cats, "top_kernels_ms": top})
    del engine
    torch.cuda.empty_cache()

    first = cfg.prefix_len + len(prompt_ids(cfg.tokens, lambda t: tokenizer.encode(t).ids, "detect", "object"))
    for batch in (int(b) for b in args.batch.split(",")):
        engine = Engine(model, tokenizer, max_batch=batch, prefix_cache_size=0, repeat_guard=False)
        runner = engine.runner
        engine.runner.capture_all(first + 3 * args.objects + 1)
        images = [(rng.random((378, 378, 3)) * 255).astype(np.uint8) for _ in range(batch)]
        handles = [engine.submit(im, "detect", "object", max_objects=args.objects) for im in images]
        while engine.queued():
            engine.step()  # admission: every row live, each reading its own image's prefix slot
        for _ in range(3):
            engine.step()
        runner.synchronize()
        rows = runner.batch_bucket(batch)
        grouped = runner.group_rows(0, rows)  # as the engine's next step would choose
        position = first + 3 * args.objects // 2  # the middle of a detect's decode
        attn = runner.attn_bucket(position)
        runner.set_positions(rows, position)  # the engine uploads its own positions at its next step

        heads = SampleHeads(full=False, coord=True, size=False)  # a detect step that decodes a coordinate

        def step():
            runner.replay_decode(rows, attn, grouped)
            runner.replay_sample(0, rows, heads)

        ms, cats, top = profiled(step, 20 * args.runs, args.top)
        nbytes = decode_bytes(model, batch, position, heads)
        floor = nbytes / (args.peak_tbs * 1e12) * 1e3
        print_breakdown(f"decode step, batch {batch} (distinct images, {'grouped' if grouped else 'per-row'} prefix "
                        f"reads), position {position}", ms, cats, top, floor,
                        f"{nbytes / 1e9:.2f} GB to read, {nbytes / ms / 1e9:.2f} TB/s")
        while engine.step():
            pass  # the requests finish (their outputs are of no interest)
        assert all(h.future.done() for h in handles)
        report["decode"].append({"batch": batch, "position": position, "grouped": grouped, "ms": ms, "gb": nbytes / 1e9,
                                 "tbs": nbytes / ms / 1e9, "floor_ms": floor, "categories_ms": cats,
                                 "top_kernels_ms": top})
        del engine, runner
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
