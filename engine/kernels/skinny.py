"""A Triton kernel for the decode step's projections: few rows times a large weight matrix.

Why: at decode a layer's two GEMMs ([qkv | fc1] and [proj | fc2], `FusedProjections`) multiply 1–64
rows by ~100 MB of weights, so the step time is the time to stream the weights. cuBLAS picks narrow
tiles (64 × 8) for these shapes and reads them at 59–76 % of an H100's bandwidth (README, "Session
45" under "Whole requests under load"). This kernel puts the weights on the tensor cores' wide side ("swap
A and B"): a program multiplies BLOCK_N weight rows by all the input rows (padded to 16), streaming
BLOCK_K-wide slices of the weights through a software pipeline of `stages` copies.

Split K: with `shape.split_k` > 1 each program covers one of split_k equal slices of K and writes
fp32 partial sums [split_k, M, N] instead of the output; `residual_layernorm` adds them in a fixed
order, so results stay bit-reproducible (no atomics), and a matrix with few output columns (proj |
fc2: 2048) still gets enough programs to fill the GPU.

Numerics: products of 16-bit inputs, sums in fp32, the bias added in fp32 and the output rounded
once, as cuBLAS does (the order of the sums differs). fp32 inputs multiply exactly ("ieee"); the
engine uses this kernel only for 16-bit weights on CUDA, and in fp32 under Triton's interpreter
(tests). Each row's result depends only on that row: the launch shape is chosen by the matrix and
the row count's bucket (16, 32 or 64 rows), never by the other rows' values.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from engine.kernels.decode import INTERPRETED, dot_precision, pdl, triton


class SkinnyShape(NamedTuple):
    """A launch shape: weight rows per program, K per pipeline slice, K splits, warps, stages."""
    block_n: int
    block_k: int
    split_k: int
    warps: int
    stages: int


# Decode batches of up to this many rows use the kernel; larger ones go to cuBLAS.
SKINNY_MAX_ROWS = 64

# Launch shapes by matrix (output columns N, depth K), from a sweep on an H100 against cuBLAS at 1, 8,
# 32 and 64 rows, where one shape won at every row count (docs/experiments/skinny_gemm_check.py,
# README "Session 45"). Moondream 2's [qkv | fc1] and [proj | fc2]; any other matrix
# takes SKINNY_DEFAULT (not split).
SKINNY_DEFAULT = SkinnyShape(block_n=64, block_k=128, split_k=1, warps=4, stages=3)
SKINNY_SHAPES: dict[tuple[int, int], SkinnyShape] = {
    (14336, 2048): SkinnyShape(block_n=64, block_k=128, split_k=1, warps=4, stages=3),
    (2048, 10240): SkinnyShape(block_n=64, block_k=128, split_k=4, warps=4, stages=5),
}


def row_bucket(rows: int) -> int:
    """The padded row count a launch uses: 16 (tl.dot's least), 32 or 64."""
    return max(16, 1 << (rows - 1).bit_length())


def skinny_applies(x: torch.Tensor) -> bool:
    """Whether a decode step's projections of rows like x [M, K] run on this kernel: 16-bit CUDA
    tensors of at most SKINNY_MAX_ROWS rows (fp32 stays on cuBLAS: exact fp32 products run off the
    tensor cores), or CPU tensors under Triton's interpreter (the tests)."""
    if triton is None or x.shape[0] > SKINNY_MAX_ROWS:
        return False
    return (x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)) or (INTERPRETED and x.device.type == "cpu")


def skinny_shape(n: int, k: int, bias: bool = False) -> SkinnyShape:
    """The launch shape for an [rows, k] × [n, k]ᵀ product (`SKINNY_SHAPES`, else SKINNY_DEFAULT);
    a product with a bias is not split (the bias is added where the output is written)."""
    shape = SKINNY_SHAPES.get((n, k), SKINNY_DEFAULT)
    return shape._replace(split_k=1) if bias else shape


if triton is not None:
    import triton.language as tl

    from engine.kernels.decode import dependent_launch

    @triton.jit
    def _skinny_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, k_split, stride_x, stride_w, stride_out, stride_split,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, STAGES: tl.constexpr,
                       HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr, EVEN: tl.constexpr, PRECISION: tl.constexpr,
                       PDL: tl.constexpr):
        # x [M, K] (rows strided), w [N, K] (K contiguous); out [M, N] or fp32 partials [splits, M, N]
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # weight rows = output columns
        rows = tl.arange(0, BLOCK_M)
        offs_k = tl.arange(0, BLOCK_K)
        k_start = pid_k * k_split
        w_rows = w_ptr + cols.to(tl.int64)[:, None] * stride_w
        dependent_launch(PDL)
        x_rows = x_ptr + rows[None, :] * stride_x
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # transposed: weights on the wide side
        for k0 in tl.range(k_start, k_start + k_split, BLOCK_K, num_stages=STAGES):
            k = k0 + offs_k
            if EVEN:  # N a multiple of BLOCK_N, k_split of BLOCK_K
                w = tl.load(w_rows + k[None, :])
            else:
                w = tl.load(w_rows + k[None, :], mask=(cols[:, None] < N) & (k[None, :] < K), other=0.0)
            x = tl.load(x_rows + k[:, None], mask=(rows[None, :] < M) & (k[:, None] < K), other=0.0)  # [BLOCK_K, BLOCK_M]
            acc = tl.dot(w, x, acc, input_precision=PRECISION)  # [BLOCK_N, BLOCK_M]
        keep = (cols[:, None] < N) & (rows[None, :] < M)
        if PARTIAL:
            tl.store(out_ptr + pid_k * stride_split + rows[None, :] * stride_out + cols[:, None], acc, mask=keep)
        else:
            if HAS_BIAS:
                acc += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[:, None]
            tl.store(out_ptr + rows[None, :] * stride_out + cols[:, None], acc.to(out_ptr.dtype.element_ty), mask=keep)


def skinny_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *,
                  shape: SkinnyShape | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] (rows may be strided) × w [N, K]ᵀ (+ bias [N]) → [M, N] in x's dtype, M ≤ SKINNY_MAX_ROWS.

    With shape.split_k > 1 (no bias): fp32 partial sums [split_k, M, N] instead, to be added in order
    by the consumer (`residual_layernorm`). `shape` defaults to `skinny_shape(N, K)`; `out` may be a
    preallocated result (rows may be strided)."""
    m, k = x.shape
    n = w.shape[0]
    assert m <= SKINNY_MAX_ROWS and w.shape[1] == k and x.stride(1) == 1 and w.stride(1) == 1 and x.dtype == w.dtype
    shape = shape or skinny_shape(n, k, bias is not None)
    splits = shape.split_k
    assert bias is None or (splits == 1 and bias.shape == (n,) and bias.is_contiguous())
    k_split = triton.cdiv(triton.cdiv(k, splits), shape.block_k) * shape.block_k
    if splits > 1:
        assert out is None, "split-K writes its own fp32 partials"
        out = torch.empty(splits, m, n, device=x.device, dtype=torch.float32)
    elif out is None:
        out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    assert out.shape[-2:] == (m, n) and out.stride(-1) == 1
    even = n % shape.block_n == 0 and k % k_split == 0 and k_split * splits == k
    on = pdl(x)
    _skinny_kernel[(triton.cdiv(n, shape.block_n), splits)](
        x, w, bias if bias is not None else w, out, m, n, k, k_split, x.stride(0), w.stride(0),
        out.stride(-2), out.stride(0) if splits > 1 else 0,
        BLOCK_M=row_bucket(m), BLOCK_N=shape.block_n, BLOCK_K=shape.block_k, STAGES=shape.stages,
        HAS_BIAS=bias is not None, PARTIAL=splits > 1, EVEN=even, PRECISION=dot_precision(x.dtype),
        PDL=on, launch_pdl=on, num_warps=shape.warps)
    return out
