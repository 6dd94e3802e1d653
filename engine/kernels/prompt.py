"""A fused Triton kernel for the prompt prefill's attention (CUDA only; `TextModel.prefill_at` is
the PyTorch path with the same semantics, used on the CPU and as the test oracle).

Why: after its image prefix is in its KV row, each admitted request's prompt (16–64 tokens,
padded) is prefilled in one batched forward. In PyTorch, its attention gathers every row's
keys and values (`k[rows, :, :end]`: ~750 positions × all heads × all layers, ≈ 200 MB per
layer at 32 rows) into a new tensor and runs a masked attention on it; on an H200 the gather
alone took ~3 ms of a 32-row prompt prefill's 6.6 ms (NVIDIA profile, README). Here every
program reads its row's keys in place: one (prompt, head) per program, the prompt's queries as
one tile, causal by each token's own position, online softmax in fp32.
"""

from __future__ import annotations

import math

import torch

from engine.kernels.decode import dot_precision, pdl, shared_prefix_args, triton

BLOCK_N = 64   # keys per inner iteration


if triton is not None:
    import triton.language as tl

    from engine.kernels.decode import dependent_launch, prefix_or_row_block

    @triton.jit
    def _prompt_attn_kernel(q_ptr, k_ptr, v_ptr, rows_ptr, pos_ptr, out_ptr, end, qk_scale,
                            stride_row, stride_head, stride_pos,
                            pk_ptr, pv_ptr, slot_ptr, prefix_len, pstride_slot, pstride_head, pstride_pos,
                            H: tl.constexpr, HD: tl.constexpr, L: tl.constexpr, BLOCK: tl.constexpr,
                            SHARED: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
        dependent_launch(PDL)
        bh = tl.program_id(0)
        b = bh // H
        h = bh % H
        row = tl.load(rows_ptr + b)
        i = tl.arange(0, L)
        d = tl.arange(0, HD)
        # q, out: [B, L, H, HD] contiguous
        q_offs = ((b * L + i[:, None]) * H + h) * HD + d[None, :]
        q = tl.load(q_ptr + q_offs)
        pos = tl.load(pos_ptr + b * L + i)  # [L]; a padding token sits at the scratch position: sees all
        base = row * stride_row + h * stride_head
        if SHARED:  # keys 0..prefix_len-1 come from the prompt's prefix slot (SharedPrefix)
            pbase = tl.load(slot_ptr + b) * pstride_slot + h * pstride_head
        m = tl.full([L], float("-inf"), tl.float32)
        l = tl.zeros([L], dtype=tl.float32)
        acc = tl.zeros([L, HD], dtype=tl.float32)
        for n0 in range(0, end, BLOCK):
            n = n0 + tl.arange(0, BLOCK)
            inside = n < end
            offs = base + n[:, None] * stride_pos + d[None, :]
            if SHARED:
                k, v = prefix_or_row_block(k_ptr, v_ptr, offs, pk_ptr, pv_ptr,
                                            pbase + n[:, None] * pstride_pos + d[None, :], n, n0, inside,
                                            prefix_len, BLOCK)
            else:
                k = tl.load(k_ptr + offs, mask=inside[:, None], other=0.0)
                v = tl.load(v_ptr + offs, mask=inside[:, None], other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * qk_scale  # [L, BLOCK], log2 domain
            visible = inside[None, :] & (n[None, :] <= pos[:, None])
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))  # key 0 is in the first block: finite from then on
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)
            l = l * alpha + tl.sum(p, 1)
            m = m_new
        out = acc / l[:, None]
        tl.store(out_ptr + q_offs, out.to(out_ptr.dtype.element_ty))


def prompt_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, rows: torch.Tensor,
                     pos: torch.Tensor, end: int, *, prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                     block: int = BLOCK_N) -> torch.Tensor:
    """q [B, L, H, hd] (L ≥ 16, a power of two); prompt b's token i attends to keys
    0..min(pos[b, i], end - 1) of cache row rows[b] ([rows, H, max_len, hd]), whose own K/V are
    already written. Every real position must lie after the image prefix (whose bidirectional
    block this kernel does not model). `prefix` (k, v [slots, H, P, hd], slots [B]): keys 0..P-1
    of prompt b are those of slot slots[b]. Returns [B, L, H·hd] in q's dtype."""
    b, n, h, hd = q.shape
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
    assert n >= 16 and n & (n - 1) == 0, "the prompt tile needs a power-of-two length of at least 16"
    q = q.contiguous()
    rows = rows.contiguous()  # the kernel reads rows[b] at offset b: a strided view (the runner's) needs a copy
    out = torch.empty_like(q)
    on = pdl(q)
    _prompt_attn_kernel[(b * h,)](q, k_cache, v_cache, rows, pos.contiguous(), out, end,
                                  hd ** -0.5 * math.log2(math.e), k_cache.stride(0), k_cache.stride(1),
                                  k_cache.stride(2), *shared_prefix_args(prefix, k_cache, rows),
                                  H=h, HD=hd, L=n, BLOCK=block, SHARED=prefix is not None,
                                  PRECISION=dot_precision(q.dtype), PDL=on, launch_pdl=on, num_warps=4)
    return out.view(b, n, h * hd)
