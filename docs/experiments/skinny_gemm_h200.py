"""Experiment, not kept (README, "Decode-step performance"): a linear layer for few rows (the decode step: 1–64 rows against weights of thousands), as one
Triton kernel that streams the weight matrix once (CUDA only; `torch.nn.functional.linear` is the
oracle and the path everywhere else).

At decode batch sizes a linear layer is a read of its weights: `F.linear` (cuBLAS) reads them
at about half the H200's bandwidth (`python -m engine.profile`). Here one program owns BN output
columns for every row: it walks the K dimension BK at a time, loads the [BN, BK] weight tile and
the rows' [BM, BK] inputs, multiplies on the tensor cores (rows padded to BM ≥ 16) and accumulates
in fp32, then adds the bias and, optionally, applies GELU-tanh before a single rounding to the
output dtype. No split over K and no atomics: every output is summed in one fixed order, so the
results are reproducible and a row's output does not depend on the other rows.

    y = linear(x [M, K], weight [N, K], bias [N] | None, gelu=False) → [M, N]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.decode import INTERPRETED, dot_precision, triton

# usage on a CUDA machine, from the repository root:
#     PYTHONPATH=. OUT=/tmp python docs/experiments/skinny_gemm_h200.py
# (writes gemm-bench-h200.json: cuBLAS vs this kernel per decode weight shape, then the whole chain)

MAX_ROWS = 64  # more rows: F.linear (cuBLAS is compute-efficient there)

# (BN, BK, warps, stages) by (N, K): the weight shapes of Moondream 2's decode step, from a sweep on
# an H200 (README, "Decode-step performance"); other shapes use DEFAULT.
DEFAULT = (32, 128, 4, 4)
CONFIGS: dict[tuple[int, int], tuple[int, int, int, int]] = {}


def rows_tile(m: int) -> int:
    """BM: rows padded to a power of two ≥ 16 (tl.dot's smallest tile)."""
    return max(16, 1 << (m - 1).bit_length())


if triton is not None:
    import triton.language as tl

    @triton.jit
    def _gelu_tanh(x):
        # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), tanh(u) = 2σ(2u) − 1
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        return x * tl.sigmoid(2.0 * u)

    @triton.jit
    def _linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr,
                       GELU: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr):
        n = tl.program_id(0) * BN + tl.arange(0, BN)
        m = tl.arange(0, BM)
        k = tl.arange(0, BK)
        row_ok = m < M
        col_ok = n < N
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            kk = k0 + k
            if EVEN_K:
                x = tl.load(x_ptr + m[:, None] * stride_xm + kk[None, :], mask=row_ok[:, None], other=0.0)
                w = tl.load(w_ptr + n[:, None] * stride_wn + kk[None, :], mask=col_ok[:, None], other=0.0)
            else:
                x = tl.load(x_ptr + m[:, None] * stride_xm + kk[None, :], mask=row_ok[:, None] & (kk < K)[None, :],
                            other=0.0)
                w = tl.load(w_ptr + n[:, None] * stride_wn + kk[None, :], mask=col_ok[:, None] & (kk < K)[None, :],
                            other=0.0)
            acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)   # [BM, BN]
        if HAS_BIAS:
            acc += tl.load(b_ptr + n, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        if GELU:
            acc = _gelu_tanh(acc)
        tl.store(out_ptr + m[:, None] * stride_om + n[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])


def usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` runs the kernel for these operands (else it is F.linear)."""
    on_device = x.is_cuda or (INTERPRETED and x.device.type == "cpu")
    return (triton is not None and on_device and x.dim() == 2 and 1 <= x.shape[0] <= MAX_ROWS
            and weight.dtype == x.dtype and weight.is_contiguous() and x.stride(1) == 1)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, gelu: bool = False,
           config: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """x [M, K] @ weight [N, K]ᵀ + bias, GELU-tanh applied when `gelu`; [M, N] in x's dtype.
    F.linear (then `engine.model.layers.gelu`) where the kernel does not apply (`usable`)."""
    if not usable(x, weight):
        y = F.linear(x, weight, bias)
        return F.gelu(y, approximate="tanh") if gelu else y
    m, k = x.shape
    n = weight.shape[0]
    bn, bk, warps, stages = config or CONFIGS.get((n, k), DEFAULT)
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    _linear_kernel[(triton.cdiv(n, bn),)](x, weight, bias if bias is not None else weight, out, m, n, k,
                                          x.stride(0), weight.stride(0), out.stride(0),
                                          BM=rows_tile(m), BN=bn, BK=bk, HAS_BIAS=bias is not None, GELU=gelu,
                                          EVEN_K=k % bk == 0, PRECISION=dot_precision(x.dtype),
                                          num_warps=warps, num_stages=stages)
    return out


# ---- the benchmark (docs/skinny-gemm-h200.json) ----
import json, os, sys, time


class L:  # the kernel above, as the benchmark calls it
    linear = staticmethod(linear)


if __name__ != "__main__":
    raise SystemExit(0)
torch.manual_seed(0)
dev = "cuda"; dt = torch.bfloat16
SHAPES = {"qkv": (6144, 2048, False), "proj": (2048, 2048, False), "fc1": (8192, 2048, True), "fc2": (2048, 8192, False),
          "lm_head": (51200, 2048, False)}
LAYERS = 24
W = {name: [torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5 for _ in range(LAYERS if name != "lm_head" else 4)]
     for name, (n, k, g) in SHAPES.items()}
B = {name: [torch.randn(n, device=dev, dtype=dt) * 0.1 for _ in range(len(W[name]))] for name, (n, k, g) in SHAPES.items()}
out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": {}, "chain": {}}

def graph_time(fn, reps=20):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(); fn()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay(); torch.cuda.synchronize()
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps): g.replay()
        torch.cuda.synchronize(); best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e3

def cublas(name, x):
    n, k, g = SHAPES[name]
    def fn():
        for w, b in zip(W[name], B[name]):
            y = F.linear(x, w, b)
            if g: y = F.gelu(y, approximate="tanh")
    return fn

def triton_fn(name, x, cfg):
    n, k, g = SHAPES[name]
    def fn():
        for w, b in zip(W[name], B[name]):
            L.linear(x, w, b, gelu=g, config=cfg)
    return fn

CFGS = [(bn, bk, w, s) for bn in (16, 32, 64, 128) for bk in (128, 256) for (w, s) in ((4, 4), (4, 6), (8, 4))]
best_cfg = {}
for name, (n, k, g) in SHAPES.items():
    nbytes = n * k * 2 * len(W[name])
    for m in (1, 64, 32):
        x = torch.randn(m, k, device=dev, dtype=dt)
        ref = F.linear(x, W[name][0], B[name][0]); ref = F.gelu(ref, approximate="tanh") if g else ref
        t_cub = graph_time(cublas(name, x))
        rows = []
        cands = CFGS if m != 32 else sorted({best_cfg[(name, 1)], best_cfg[(name, 64)]})
        for cfg in cands:
            try:
                got = L.linear(x, W[name][0], B[name][0], gelu=g, config=cfg)
                err = float((got.float() - ref.float()).abs().max())
                t = graph_time(triton_fn(name, x, cfg))
                rows.append((t, cfg, err))
            except Exception as e:
                print("fail", name, m, cfg, repr(e)[:200], flush=True)
        rows.sort()
        t, cfg, err = rows[0]
        best_cfg[(name, m)] = cfg
        out["shapes"][f"{name} m={m}"] = {"cublas_ms": t_cub, "triton_ms": t, "cfg": cfg, "max_abs_err": err,
                                          "cublas_tbs": nbytes / t_cub / 1e9, "triton_tbs": nbytes / t / 1e9,
                                          "top3": [(r[0], r[1]) for r in rows[:3]]}
        print(f"{name:8} m={m:2}  cublas {t_cub:.4f} ms ({nbytes / t_cub / 1e9:.2f} TB/s)  triton {t:.4f} ms "
              f"({nbytes / t / 1e9:.2f} TB/s) cfg {cfg} err {err:.3g}  top3 {[(round(r[0],4), r[1]) for r in rows[:3]]}", flush=True)

# the decode step's linears end to end: 24 layers of qkv, proj, fc1+gelu, fc2, then lm_head (one copy)
for m in (1, 8, 32, 64):
    xs = {name: torch.randn(m, SHAPES[name][1], device=dev, dtype=dt) for name in SHAPES}
    def chain(use):
        def fn():
            for l in range(LAYERS):
                for name in ("qkv", "proj", "fc1", "fc2"):
                    n, k, g = SHAPES[name]
                    if use == "cublas":
                        y = F.linear(xs[name], W[name][l], B[name][l]); y = F.gelu(y, approximate="tanh") if g else y
                    else:
                        L.linear(xs[name], W[name][l], B[name][l], gelu=g, config=best_cfg[(name, 64 if m > 32 else (32 if m > 16 else 1))])
            if use == "cublas": F.linear(xs["lm_head"], W["lm_head"][0], B["lm_head"][0])
            else: L.linear(xs["lm_head"], W["lm_head"][0], B["lm_head"][0], config=best_cfg[("lm_head", 64 if m > 32 else (32 if m > 16 else 1))])
        return fn
    tc, tt = graph_time(chain("cublas")), graph_time(chain("triton"))
    out["chain"][m] = {"cublas_ms": tc, "triton_ms": tt}
    print(f"chain m={m}: cublas {tc:.3f} ms, triton {tt:.3f} ms ({tc / tt:.2f}x)", flush=True)
out["best_cfg"] = {f"{a} {b}": c for (a, b), c in best_cfg.items()}
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "gemm-bench-h200.json"), "w"), indent=1)
