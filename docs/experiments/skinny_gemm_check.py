"""The decode step's two projections on `engine.kernels.skinny_linear` against cuBLAS, on the GPU.

Moondream 2's text shapes: per layer [qkv | fc1] = [14336, 2048] with bias and [proj | fc2] =
[2048, 10240], 24 layers of distinct random bf16 weights (2.4 GB, so the L2 cache does not hold them).
For each row count, every candidate launch shape runs the 24 layers' products of one matrix in a
CUDA graph; the time is the median of 5 timings of 10 replays. Accuracy: one layer against the
fp32 product, beside cuBLAS's. The winners are printed as `SKINNY_SHAPES` entries;
`--narrow` tries 16- and 32-row weight tiles for [qkv | fc1], `--split-in` splits its K (kernel
time only: in session 45 `rope_kv_write` was made to add such partials with the bias, split 1 still
won at every row count, and that change was reverted).

    python3 docs/experiments/skinny_gemm_check.py [--rows 1,64,8,32] [--quick | --narrow | --split-in] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from engine.kernels.skinny import SkinnyShape, row_bucket, skinny_linear  # noqa: E402

D, F, LAYERS = 2048, 8192, 24


def timed(fn, layers: int) -> float:
    """ms for `layers` calls fn(l), captured in one graph (median of 5 × 10 replays)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for l in range(layers):  # warm-up and compile outside the capture
            fn(l)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for l in range(layers):
            fn(l)
    for _ in range(3):
        g.replay()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(10):
            g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 10)
    del g
    return statistics.median(times)


def candidates(split: bool, quick: bool, narrow: bool = False, split_in: bool = False) -> list[SkinnyShape]:
    if split_in:  # [qkv | fc1] split too (its fp32 partials would need a consumer that adds the bias)
        return [SkinnyShape(bn, bk, sp, 4, st) for bn, bk, sp, st in itertools.product((64, 128), (128, 256), (1, 2, 4), (3, 5))]
    if narrow:  # 16 or 32 weight rows a program: more programs, a shorter tail (not wgmma's 64-row side)
        return [SkinnyShape(bn, bk, 1, w, st) for bn, bk, w, st in
                itertools.product((16, 32), (128, 256, 512), (2, 4), (3, 5)) if bn * bk <= 8192]
    bns, bks, warps, stages = ((64, 128), (128, 256), (4,), (4,)) if quick else ((64, 128), (128, 256), (4, 8), (3, 5))
    if split:  # few output columns: split K instead of more warps
        warps, splits = (4,), ((1, 4) if quick else (1, 2, 4))
    else:
        splits = (1,)
    return [SkinnyShape(bn, bk, s, w, st) for bn, bk, s, w, st in itertools.product(bns, bks, splits, warps, stages)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="1,64,8,32", help="1 and 64 first: the rows between try their best four")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--narrow", action="store_true", help="[qkv | fc1] only, 16- and 32-row weight tiles")
    p.add_argument("--split-in", action="store_true", help="[qkv | fc1] only, split K in 1, 2 or 4")
    p.add_argument("--json")
    args = p.parse_args()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    w_in = [torch.randn(3 * D + F, D, device=dev, dtype=dt) * 0.02 for _ in range(LAYERS)]
    b_in = [torch.randn(3 * D + F, device=dev, dtype=dt) * 0.02 for _ in range(LAYERS)]
    w_out = [torch.randn(D, D + F, device=dev, dtype=dt) * 0.02 for _ in range(LAYERS)]
    gb_in = sum(w.numel() for w in w_in) * 2 / 1e9
    gb_out = sum(w.numel() for w in w_out) * 2 / 1e9
    print(torch.cuda.get_device_name(), f"weights: in {gb_in:.2f} GB, out {gb_out:.2f} GB over {LAYERS} layers")
    report = {"device": torch.cuda.get_device_name(), "rows": []}
    winners, tops = {}, {}
    for m in [int(r) for r in args.rows.split(",")]:
        h = torch.randn(m, D, device=dev, dtype=dt)
        z = torch.randn(m, D + F, device=dev, dtype=dt)
        # accuracy, layer 0
        ref_in = h.float() @ w_in[0].float().t() + b_in[0].float()
        ref_out = z.float() @ w_out[0].float().t()
        rel = lambda y, r: float((y.float() - r).norm() / r.norm())
        err_cublas = (rel(torch.nn.functional.linear(h, w_in[0], b_in[0]), ref_in), rel(torch.mm(z, w_out[0].t()), ref_out))
        row = {"rows": m, "bucket": row_bucket(m)}
        row["cublas_in_ms"] = timed(lambda l: torch.nn.functional.linear(h, w_in[l], b_in[l]), LAYERS)
        row["cublas_out_ms"] = (timed(lambda l: torch.mm(z, w_out[l].t()), LAYERS)
                                if not (args.narrow or args.split_in) else None)
        row["cublas_rel_err"] = err_cublas
        for name, split, fn, ref, gb in (
                ("in", False, lambda sh: (lambda l: skinny_linear(h, w_in[l], b_in[l] if sh.split_k == 1 else None,
                                                                  shape=sh)), ref_in, gb_in),
                ("out", True, lambda sh: (lambda l: skinny_linear(z, w_out[l], shape=sh)), ref_out, gb_out)):
            results = []
            if (args.narrow or args.split_in) and split:
                continue
            shapes = candidates(split, args.quick, args.narrow, args.split_in)
            if m not in (1, 64) and {(name, 1), (name, 64)} <= set(tops):  # in between: the ends' best four
                shapes = list(dict.fromkeys(SkinnyShape(*s) for r in (1, 64) for s in tops[(name, r)]))
            for sh in shapes:
                try:
                    y = fn(sh)(0)
                    y = y.sum(0) + (b_in[0].float() if name == "in" else 0) if y.dim() == 3 else y
                    err = rel(y, ref)
                    ms = timed(fn(sh), LAYERS)
                except Exception as e:  # a shape that does not compile or fit
                    print(f"  {name} {tuple(sh)}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                results.append({"shape": list(sh), "ms": ms, "tbs": gb / ms, "rel_err": err})
            results.sort(key=lambda r: r["ms"])
            row[f"skinny_{name}"] = results
            best = results[0]
            winners[(name, m)] = best["shape"]
            tops[(name, m)] = [r["shape"] for r in results[:4]]
            cub = row[f"cublas_{name}_ms"]
            print(f"rows {m:3d} {name:3s}: cuBLAS {cub:.3f} ms ({gb / cub:.2f} TB/s), best {best['ms']:.3f} ms "
                  f"({best['tbs']:.2f} TB/s, {cub / best['ms']:.2f}×) at {tuple(best['shape'])}; "
                  f"rel. error {best['rel_err']:.2e} (cuBLAS {err_cublas[0 if name == 'in' else 1]:.2e}); "
                  f"next: " + ", ".join(f"{tuple(r['shape'])} {r['ms']:.3f}" for r in results[1:4]))
        report["rows"].append(row)
    print("SKINNY_SHAPES entries (N, K, row bucket): shape")
    for (name, m), sh in winners.items():
        n, k = (3 * D + F, D) if name == "in" else (D, D + F)
        print(f"    ({n}, {k}, {row_bucket(m)}): SkinnyShape{tuple(sh)},  # rows {m}")
    report["winners"] = {f"{name}-{m}": sh for (name, m), sh in winners.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
