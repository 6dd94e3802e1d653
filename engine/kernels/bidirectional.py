"""A fused Triton kernel for attention where every token of a group sees every other: the text
model's image prefix (730 positions, bidirectional). CUDA and 16-bit only; `engine.model.layers.
attention` on q, k, v views is the PyTorch path with the same semantics, used on the CPU, in fp32
and as the test oracle.

Why: the fused prefix prefill (`TextModel.prefill_prefix`) leaves q, k and v in the rows of its
[qkv | fc1] GEMM and wants the attention's output beside the GELU columns that its [proj | fc2] GEMM
reads. SDPA's flash kernel needed strided views in and a copy out. This kernel reads q, k and v where
they lie and writes straight into that column slice. One program: BLOCK_M queries of one (group,
head) against all of the group's tokens, online softmax in fp32, no mask.

Heads that are no power of two are split into a power-of-two part and a 16-wide rest (72 = 64 + 16,
8 of them padding), so every product runs on the tensor cores. That was built for the vision tower's
72-wide heads, but on an H100 it ran at 0.85× cuDNN's kernel there (docs/experiments/
vision_attention_check.py, README), so the tower stays on cuDNN. In fp32 `tl.dot` must multiply
exactly, off the tensor cores, and was ~30× slower than SDPA: fp32 callers use SDPA.

Batch-invariant by construction: a program's work depends only on its group, so a prefix's output
is the same bits alone or in any batch (the launch shape is fixed, never tuned per call).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from engine.kernels.decode import dot_precision, pdl, triton


class AttnShape(NamedTuple):
    """A launch shape: queries and keys per tile, warps, software-pipeline stages."""
    block_m: int
    block_n: int
    warps: int
    stages: int


# Chosen by a sweep on the device (docs/experiments/vision_attention_check.py, README).
BIDIRECTIONAL_SHAPE = AttnShape(block_m=128, block_n=64, warps=8, stages=3)


def split_head(head_dim: int) -> tuple[int, int]:
    """head_dim → (a, b): a power-of-two part and a rest of 0 or a power of two ≥ 16 (tl.dot's
    smallest depth) covering head_dim - a. 72 → (64, 16); 64 → (64, 0)."""
    a = 1 << (head_dim.bit_length() - 1)
    rest = head_dim - a
    return a, 0 if rest == 0 else max(16, 1 << (rest - 1).bit_length())


if triton is not None:
    import triton.language as tl

    from engine.kernels.decode import dependent_launch

    @triton.jit
    def _bidir_attn_kernel(qkv_ptr, out_ptr, L, qk_scale, stride_in, stride_out,
                           H: tl.constexpr, HD: tl.constexpr, HA: tl.constexpr, HB: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                           PDL: tl.constexpr):
        dependent_launch(PDL)
        # qkv rows [groups·L, ≥ 3·H·HD]: q | k | v, each head's HD columns together; out rows [groups·L, H·HD]
        D: tl.constexpr = H * HD
        group = tl.program_id(1) // H
        head = tl.program_id(1) % H
        m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        m_in = m < L
        da = tl.arange(0, HA)
        q_at = (group * L + m).to(tl.int64)[:, None] * stride_in + head * HD
        qa = tl.load(qkv_ptr + q_at + da[None, :], mask=m_in[:, None], other=0.0)  # [BLOCK_M, HA]
        if HB > 0:
            db = HA + tl.arange(0, HB)
            b_in = db < HD
            qb = tl.load(qkv_ptr + q_at + db[None, :], mask=m_in[:, None] & b_in[None, :], other=0.0)
            acc_b = tl.zeros([BLOCK_M, HB], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc_a = tl.zeros([BLOCK_M, HA], dtype=tl.float32)
        for n0 in range(0, L, BLOCK_N):
            n = n0 + tl.arange(0, BLOCK_N)
            n_in = n < L
            kv_at = (group * L + n).to(tl.int64)[:, None] * stride_in + head * HD
            ka = tl.load(qkv_ptr + kv_at + D + da[None, :], mask=n_in[:, None], other=0.0)  # [BLOCK_N, HA]
            s = tl.dot(qa, tl.trans(ka), input_precision=PRECISION)  # [BLOCK_M, BLOCK_N]
            if HB > 0:
                kb = tl.load(qkv_ptr + kv_at + D + db[None, :], mask=n_in[:, None] & b_in[None, :], other=0.0)
                s += tl.dot(qb, tl.trans(kb), input_precision=PRECISION)
            s = tl.where(n_in[None, :], s * qk_scale, float("-inf"))  # log2 units
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            va = tl.load(qkv_ptr + kv_at + 2 * D + da[None, :], mask=n_in[:, None], other=0.0)
            acc_a = acc_a * alpha[:, None] + tl.dot(p.to(va.dtype), va, input_precision=PRECISION)
            if HB > 0:
                vb = tl.load(qkv_ptr + kv_at + 2 * D + db[None, :], mask=n_in[:, None] & b_in[None, :], other=0.0)
                acc_b = acc_b * alpha[:, None] + tl.dot(p.to(vb.dtype), vb, input_precision=PRECISION)
            m_i = m_new
        o_at = (group * L + m).to(tl.int64)[:, None] * stride_out + head * HD
        tl.store(out_ptr + o_at + da[None, :], (acc_a / l_i[:, None]).to(out_ptr.dtype.element_ty),
                 mask=m_in[:, None])
        if HB > 0:
            tl.store(out_ptr + o_at + db[None, :], (acc_b / l_i[:, None]).to(out_ptr.dtype.element_ty),
                     mask=m_in[:, None] & b_in[None, :])


def bidirectional_attention(qkv: torch.Tensor, groups: int, heads: int, out: torch.Tensor | None = None, *,
                            shape: AttnShape = BIDIRECTIONAL_SHAPE) -> torch.Tensor:
    """Softmax attention of every group's tokens among themselves, straight from a GEMM's output:
    qkv [groups·L, ≥ 3·D] (its first 3·D columns q | k | v, heads of D // heads columns; rows may
    be strided) → out [groups·L, D] (given, e.g. a column slice of the next GEMM's input, or new),
    each row's heads side by side. Scale head_dim^-1/2."""
    rows, width = qkv.shape
    if out is None:
        assert width % 3 == 0
        out = torch.empty(rows, width // 3, device=qkv.device, dtype=qkv.dtype)
    d = out.shape[1]
    hd = d // heads
    assert hd * heads == d and width >= 3 * d and rows % groups == 0 and out.shape[0] == rows
    assert qkv.stride(1) == 1 and out.stride(1) == 1 and out.dtype == qkv.dtype
    a, b = split_head(hd)
    length = rows // groups
    grid = (triton.cdiv(length, shape.block_m), groups * heads)
    on = pdl(qkv)
    _bidir_attn_kernel[grid](qkv, out, length, hd ** -0.5 * math.log2(math.e), qkv.stride(0), out.stride(0),
                             H=heads, HD=hd, HA=a, HB=b, BLOCK_M=shape.block_m, BLOCK_N=shape.block_n,
                             PRECISION=dot_precision(qkv.dtype), PDL=on, launch_pdl=on, num_warps=shape.warps,
                             num_stages=shape.stages)
    return out
