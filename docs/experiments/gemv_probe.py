"""Batch-1 GEMV for the fused decode step's two GEMMs: cuBLAS (torch) against a Triton split-K GEMV
with partials in fp32, on Moondream 2's shapes ([qkv | fc1]: 2048 → 14336, [proj | fc2]: 10240 → 2048),
24 matrices each, back to back as in a step. Session 40, a probe; prints µs and TB/s per config.

    python docs/experiments/gemv_probe.py [--check]   (--check: small shapes, CPU interpreter)
"""

from __future__ import annotations

import itertools
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def gemv_kernel(x_ptr, w_ptr, out_ptr, N, K, stride_w, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                SPLIT: tl.constexpr):
    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_per = tl.cdiv(K, SPLIT)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    end = tl.minimum((s + 1) * k_per, K)
    for k0 in range(s * k_per, end, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + n[:, None] * stride_w + k[None, :], mask=(n[:, None] < N) & (k[None, :] < end), other=0.0)
        x = tl.load(x_ptr + k, mask=k < end, other=0.0)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], 1)
    tl.store(out_ptr + s * N + n, acc, mask=n < N)


def gemv(x, w, out, block_n, block_k, split, warps, stages=None):
    n, k = w.shape
    kw = {} if stages is None else {"num_stages": stages}
    gemv_kernel[(triton.cdiv(n, block_n), split)](x, w, out, n, k, w.stride(0), BLOCK_N=block_n, BLOCK_K=block_k,
                                                   SPLIT=split, num_warps=warps, **kw)


def main() -> int:
    if "--check" in sys.argv:
        w = torch.randn(100, 300)
        x = torch.randn(300)
        out = torch.zeros(3, 100)
        gemv(x, w, out, 16, 64, 3, 1)
        torch.testing.assert_close(out.sum(0), w @ x, rtol=1e-5, atol=1e-4)
        print("check ok")
        return 0
    dev, dt = "cuda", torch.bfloat16
    shapes = {"qkv|fc1": (14336, 2048), "proj|fc2": (2048, 10240)}
    for name, (n, k) in shapes.items():
        ws = [torch.randn(n, k, device=dev, dtype=dt) * 0.02 for _ in range(24)]
        x = torch.randn(1, k, device=dev, dtype=dt)
        gb = 24 * n * k * 2 / 1e9

        def timed(fn, reps=20):
            fn()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            g.replay()
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            best = 1e9
            for _ in range(5):
                e0.record()
                for _ in range(reps):
                    g.replay()
                e1.record()
                torch.cuda.synchronize()
                best = min(best, e0.elapsed_time(e1) / reps)
            return best * 1e3  # µs for 24 matrices

        t = timed(lambda: [torch.mm(x, w.t()) for w in ws])
        print(f"{name}: cuBLAS {t:8.1f} µs for 24, {gb / t * 1e6 / 1e3:5.2f} TB/s", flush=True)
        ref = torch.mm(x, ws[0].t()).float()
        rows = []
        for bn, bk, split, warps in itertools.product((8, 16, 32), (256, 512), (1, 2, 4), (4, 8)):
            if split > 1 and k // split < bk:
                continue
            out = torch.empty(split, n, device=dev, dtype=torch.float32)
            try:
                gemv(x, ws[0], out, bn, bk, split, warps)
                err = (out.sum(0) - ref[0]).abs().max().item()
                t = timed(lambda: [gemv(x, w, out, bn, bk, split, warps) for w in ws])
            except Exception as e:  # a config Triton cannot build
                print("  skip", bn, bk, split, warps, type(e).__name__)
                continue
            rows.append((t, bn, bk, split, warps, err))
        for t, bn, bk, split, warps, err in sorted(rows)[:6]:
            print(f"  triton BLOCK_N {bn:3} BLOCK_K {bk:4} SPLIT {split} warps {warps}: {t:8.1f} µs, "
                  f"{gb / t * 1e6 / 1e3:5.2f} TB/s, max err {err:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
