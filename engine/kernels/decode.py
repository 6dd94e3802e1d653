"""Fused Triton kernels for the decode step (CUDA only; `engine.model.text` keeps a PyTorch path
with the same semantics, used on the CPU and as the test oracle).

Why: in a CUDA graph a decode step is a chain of ~19 small kernels per layer, and at batch 1
their fixed cost, not memory traffic, is the step time; at batch 32 the two batched GEMMs of
single-query attention read K and V at about a third of the H200's bandwidth. Three kernels
replace the hot spots:

* `rope_kv_write`: partial rotary embedding of q and k, and the K/V cache write at each row's
  own position, in one pass over the qkv projection (was 6 kernels: 4 rotary + 2 index_put).
  `rope_kv_prefix` does the same for whole image prefixes (`TextModel.prefill_prefix`).
* `decode_attention`: one query per (row, head) against that row's cached keys 0..position,
  split-K ("flash decoding"): every (row, head, key chunk) is one program, so even batch 1
  fills the GPU; a second kernel merges the chunks in a fixed order, so results are
  bit-for-bit reproducible (was 4 kernels: baddbmm, softmax, cast, bmm). Large batches take
  longer chunks whose image-prefix blocks stream through shared memory (`decode_shape`).
* `residual_layernorm`: the parallel block's residual and the next block's LayerNorm (was 3 kernels);
  the vision tower's prefill uses it too, for each block's two residual adds and the LayerNorms after them.

With a layer's projections fused into two GEMMs (`engine.model.text.FusedProjections`), the rotary
kernel also applies the MLP's GELU (`gelu_out`), the attention merge writes beside it (`out`), and the
residual kernel adds the two projections' biases: six kernels a layer. `rope_attention` runs the
rotary, the K/V write and the GELU inside the attention's own launch for batches read in 64-key chunks
(five kernels a layer); grouped and pipelined batches keep the separate rotary kernel.

Their measured effect is in the README ("Decode-step performance").

Numerics: rotary in fp32 rounded once to the cache dtype, as `engine.model.text.apply_rope_`;
scores, softmax and the weighted sum in fp32 (the PyTorch path rounds scores to bf16 before
its fp32 softmax), output rounded once.
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch path is used
    triton = None

# Split-K shape, chosen by a sweep on an H200 (moondream2 heads, 832 keys): 64 keys per program
# in one 64-key tile with 2 warps was the fastest at batch 1 and 32 (README, "Decode-step performance").
CHUNK = 64     # keys per split-K program
BLOCK_N = 64   # keys per inner iteration
ATTN_WARPS = 2
GELU_BLOCK = 1024  # MLP activations per GELU program of `rope_kv_write`
# `rope_kv_prefix`: a program rotates the heads of PREFIX_ROPE_PAIRS // H tokens (those (token,
# head) pairs), or applies GELU to PREFIX_GELU_ELEMENTS of their MLP columns. With Moondream 2's
# 32 heads that is one token, 86 registers a thread (ptxas, sm_90); 16 tokens spilled 10 KB a
# thread and ran the kernel at ~0.4 TB/s on an H200, 2 tokens took 166 registers (session 43).
PREFIX_ROPE_PAIRS = 32
PREFIX_GELU_ELEMENTS = 2048
# Decode batches of at least PIPELINE_MIN_BATCH rows that read their image prefixes per row take
# PIPELINE_CHUNK keys per program and keep PIPELINE_STAGES prefix blocks in flight (Triton's
# asynchronous copies; `decode_shape`), chosen by a sweep on an H200 (README, "Whole requests under
# load", session 42); smaller batches need 64-key programs to fill the GPU.
PIPELINE_MIN_BATCH = 32
PIPELINE_CHUNK = 384
PIPELINE_STAGES = 3


# Rows that read one prefix slot are handled G at a time (tl.dot needs ≥ 16 rows of queries), by
# up to GROUP_PROGRAMS programs per (head, chunk) that stride over the groups (8 programs of 4 warps
# beat 16 of 4 and one program per group of 2 or 4 warps in a sweep on an H200; README).
GROUP_ROWS = 16
GROUP_PROGRAMS = 8
GROUP_MIN_BATCH = 8   # smaller decode batches read the prefix per row (one kernel less per layer)
# With distinct images every group is one row and the per-row kernel is faster; with two or more rows
# per image the grouped one is (README, "Whole requests under load"). "auto" groups a step's rows when
# there are at most GROUP_MAX_SHARE groups per row, a point between those two measured ends.
GROUP_MAX_SHARE = 0.75
GROUP_CHOICES: tuple[str, ...] = ("auto", "always", "never")


def grouping_pays(n_groups: int, rows: int, choice: str = "auto") -> bool:
    """Does a decode step of `rows` rows in `n_groups` slot groups (`group_table`'s count) read the
    image prefix once per group? `choice`: "auto" (by the share of groups), "always", "never"
    (the latter two for A/B runs); batches under GROUP_MIN_BATCH never do."""
    if choice not in GROUP_CHOICES:
        raise ValueError(f"group_prefix must be one of {', '.join(GROUP_CHOICES)}, got {choice!r}")
    if rows < GROUP_MIN_BATCH or choice == "never":
        return False
    return choice == "always" or n_groups <= GROUP_MAX_SHARE * rows


def group_table_size(rows: int) -> int:
    """Entries of a group table for decode batches of up to `rows` rows."""
    return rows * (GROUP_ROWS + 1) + 1


def group_table(slots: np.ndarray, out: np.ndarray) -> None:
    """Fill `out` (int64, groups_max·(G+1) + 1: [groups_max, G] rows, -1 where none; [groups_max]
    slot per group; the number of groups) with rows 0..len(slots)-1 grouped by their prefix slot,
    at most G = GROUP_ROWS rows a group."""
    g_rows = GROUP_ROWS
    groups_max = (out.size - 1) // (g_rows + 1)
    n = len(slots)
    order = np.argsort(slots, kind="stable")
    ordered = slots[order]
    run_start = np.r_[True, ordered[1:] != ordered[:-1]]
    index = np.arange(n)
    within = index - np.maximum.accumulate(np.where(run_start, index, 0))  # place in its slot's run
    gid = np.cumsum(within % g_rows == 0) - 1
    table = out[: groups_max * g_rows].reshape(groups_max, g_rows)
    table.fill(-1)
    table[gid, within % g_rows] = order
    out[groups_max * g_rows: groups_max * (g_rows + 1)] = 0
    out[groups_max * g_rows + gid] = ordered
    out[-1] = gid[-1] + 1 if n else 0


# Under TRITON_INTERPRET=1 (read by Triton when the kernels are defined) they run on CPU tensors
# through Triton's interpreter: that is how tests/test_kernels.py checks them without a GPU.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Programmatic dependent launch (Hopper and later): every Triton kernel in engine/kernels/ (checked by
# tests/test_pdl.py) is launched so that the GPU may start each one while the kernel before it is
# still running. Every such kernel first waits (griddepcontrol.wait) until the kernel before it has finished
# and its writes are visible, and only then reads or writes memory, so results are unchanged; what is
# saved is the gap between kernels, ~150 of them a step (README, "Session 46"). False: plain launches.
PDL = True


@functools.cache
def _capability(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def pdl(t: torch.Tensor) -> bool:
    """Whether kernels on t's device are launched with programmatic dependent launch (`PDL`): CUDA
    devices of compute capability 9 or later (never under the interpreter)."""
    return PDL and t.is_cuda and not INTERPRETED and _capability(t.device.index if t.device.index is not None
                                                                  else torch.cuda.current_device()) >= 9


def available(t: torch.Tensor, head_dim: int) -> bool:
    """Whether the fused kernels run for tensors like `t` (tl.arange needs a power-of-two head)."""
    if triton is None or head_dim & (head_dim - 1):
        return False
    return t.is_cuda or (INTERPRETED and t.device.type == "cpu")


if triton is not None:
    @triton.jit
    def dependent_launch(PDL: tl.constexpr):
        """Under programmatic dependent launch (`PDL`), a kernel's first step: wait until the kernel
        before it has finished (its writes visible), then let the GPU start the kernel after this one
        (which waits in turn); before this, a kernel must not touch memory another kernel writes."""
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()

    @triton.jit
    def gelu_block(x_ptr, g_ptr, ff, GELU_BLOCK: tl.constexpr):
        """GELU-tanh (as layers.gelu) of GELU_BLOCK columns x_ptr[0..] (masked at ff) into g_ptr."""
        j = tl.arange(0, GELU_BLOCK)
        inside = j < ff
        x = tl.load(x_ptr + j, mask=inside, other=0.0).to(tl.float32)
        # tanh(u) = 1 - 2 / (exp(2u) + 1) saturates cleanly
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
        tl.store(g_ptr + j, y.to(g_ptr.dtype.element_ty), mask=inside)

    @triton.jit
    def rotary(src, cos, sin, d, partner):
        """NeoX-halves rotary of one head's HD values at src, in fp32."""
        return tl.load(src + d).to(tl.float32) * cos + tl.load(src + partner).to(tl.float32) * sin

    @triton.jit
    def _rope_kv_kernel(qkv_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_ptr, v_ptr, g_ptr,
                        stride_qkv, stride_row, stride_head, stride_pos, stride_g, ff,
                        H: tl.constexpr, HD: tl.constexpr, ROT: tl.constexpr, GELU_BLOCK: tl.constexpr,
                        PDL: tl.constexpr):
        dependent_launch(PDL)
        b = tl.program_id(0)
        h = tl.program_id(1)
        if h >= H:  # a GELU program: block h - H of the MLP's first projection, past q, k, v
            col = (h - H) * GELU_BLOCK
            gelu_block(qkv_ptr + b * stride_qkv + 3 * H * HD + col, g_ptr + b * stride_g + col, ff - col, GELU_BLOCK)
        else:
            pos = tl.load(pos_ptr + b)
            d = tl.arange(0, HD)
            rotated = d < ROT
            # NeoX halves: dim i of the rotary part pairs with i ± ROT/2; the rest pass through
            # (cos 1, sin 0 gives x exactly).
            partner = tl.where(rotated, (d + ROT // 2) % ROT, d)
            cos = tl.load(cos_ptr + pos * ROT + d, mask=rotated, other=1.0)
            sin = tl.load(sin_ptr + pos * ROT + d, mask=rotated, other=0.0)
            src = qkv_ptr + b * stride_qkv + h * HD
            q = rotary(src, cos, sin, d, partner)
            k = rotary(src + H * HD, cos, sin, d, partner)
            v = tl.load(src + 2 * H * HD + d)
            tl.store(q_ptr + (b * H + h) * HD + d, q.to(q_ptr.dtype.element_ty))
            dst = b * stride_row + h * stride_head + pos * stride_pos + d
            tl.store(k_ptr + dst, k.to(k_ptr.dtype.element_ty))
            tl.store(v_ptr + dst, v)

    @triton.jit
    def _rope_prefix_kernel(qkv_ptr, cos_ptr, sin_ptr, rows_ptr, k_ptr, v_ptr, g_ptr,
                            stride_qkv, stride_row, stride_head, stride_pos, stride_g, ff, seq, tokens,
                            H: tl.constexpr, HD: tl.constexpr, ROT: tl.constexpr, GELU_BLOCK: tl.constexpr,
                            TOKENS: tl.constexpr, PDL: tl.constexpr):
        # `_rope_kv_kernel` for whole image prefixes, TOKENS tokens a program: program (i, 0) rotates
        # every head of tokens i·TOKENS.. (token t: position t % seq of cache row rows[t // seq]),
        # program (i, g > 0) applies GELU to their MLP columns' block g - 1. The rotated q and k
        # replace their inputs in qkv.
        dependent_launch(PDL)
        t0 = tl.program_id(0) * TOKENS
        g = tl.program_id(1)
        if g > 0:
            tg = t0 + tl.arange(0, TOKENS)
            j = (g - 1) * GELU_BLOCK + tl.arange(0, GELU_BLOCK)
            inside = (tg < tokens)[:, None] & (j < ff)[None, :]
            at = tg.to(tl.int64)[:, None] * stride_qkv + 3 * H * HD + j[None, :]
            x = tl.load(qkv_ptr + at, mask=inside, other=0.0).to(tl.float32)
            u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
            y = 0.5 * x * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
            tl.store(g_ptr + tg.to(tl.int64)[:, None] * stride_g + j[None, :], y.to(g_ptr.dtype.element_ty), mask=inside)
        else:
            r = tl.arange(0, TOKENS * H)  # (token, head) pairs
            t = t0 + r // H
            hh = r % H
            real = (t < tokens)[:, None]
            pos = t % seq
            row = tl.load(rows_ptr + t // seq, mask=t < tokens, other=0)
            d = tl.arange(0, HD)
            rotated = (d < ROT)[None, :]
            partner = tl.where(d < ROT, (d + ROT // 2) % ROT, d)[None, :]
            cos = tl.load(cos_ptr + pos[:, None] * ROT + d[None, :], mask=real & rotated, other=1.0)
            sin = tl.load(sin_ptr + pos[:, None] * ROT + d[None, :], mask=real & rotated, other=0.0)
            src = qkv_ptr + (t.to(tl.int64) * stride_qkv + hh * HD)[:, None]  # [TOKENS·H, 1]
            q = (tl.load(src + d[None, :], mask=real, other=0.0).to(tl.float32) * cos
                 + tl.load(src + partner, mask=real, other=0.0).to(tl.float32) * sin)
            k = (tl.load(src + H * HD + d[None, :], mask=real, other=0.0).to(tl.float32) * cos
                 + tl.load(src + H * HD + partner, mask=real, other=0.0).to(tl.float32) * sin).to(k_ptr.dtype.element_ty)
            v = tl.load(src + 2 * H * HD + d[None, :], mask=real, other=0.0)
            tl.debug_barrier()  # every load of these tokens is done before they are overwritten
            tl.store(src + d[None, :], q.to(qkv_ptr.dtype.element_ty), mask=real)
            tl.store(src + H * HD + d[None, :], k, mask=real)
            dst = (row.to(tl.int64) * stride_row + hh * stride_head + pos * stride_pos)[:, None] + d[None, :]
            tl.store(k_ptr + dst, k, mask=real)
            tl.store(v_ptr + dst, v, mask=real)

    @triton.jit
    def prefix_or_row_block(k_ptr, v_ptr, offs, pk_ptr, pv_ptr, poffs, n, n0, valid, prefix_len,
                             BLOCK: tl.constexpr):
        """A block of keys and values: from the shared prefix slot below `prefix_len`, from the row
        above it. Only the block that straddles the boundary pays for two masked loads."""
        if n0 + BLOCK <= prefix_len:
            k = tl.load(pk_ptr + poffs, mask=valid[:, None], other=0.0)
            v = tl.load(pv_ptr + poffs, mask=valid[:, None], other=0.0)
        elif n0 >= prefix_len:
            k = tl.load(k_ptr + offs, mask=valid[:, None], other=0.0)
            v = tl.load(v_ptr + offs, mask=valid[:, None], other=0.0)
        else:
            own = (valid & (n >= prefix_len))[:, None]
            shared = (valid & (n < prefix_len))[:, None]
            k = tl.load(k_ptr + offs, mask=own, other=0.0) + tl.load(pk_ptr + poffs, mask=shared, other=0.0)
            v = tl.load(v_ptr + offs, mask=own, other=0.0) + tl.load(pv_ptr + poffs, mask=shared, other=0.0)
        return k, v

    @triton.jit
    def _prefix_group_kernel(q_ptr, pk_ptr, pv_ptr, table_ptr, m_ptr, l_ptr, acc_ptr, qk_scale,
                             pstride_slot, pstride_head, pstride_pos, groups_max,
                             H: tl.constexpr, HD: tl.constexpr, SPLITS: tl.constexpr, G: tl.constexpr,
                             BLOCK: tl.constexpr, STEP: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
        """Key chunks that lie wholly inside the image prefix, for groups of up to G rows that read
        one prefix slot: the chunk is loaded once per group and multiplied with all the group's
        queries on the tensor cores (rows of one image then share one read, not G). Writes the
        same per-(row, head, chunk) partials as `_attn_chunk_kernel`; every row sees the whole prefix.
        table: [groups_max, G] rows (-1: none), [groups_max] slot per group, [1] number of groups."""
        dependent_launch(PDL)
        h = tl.program_id(0)
        split = tl.program_id(1)
        n = split * BLOCK + tl.arange(0, BLOCK)
        d = tl.arange(0, HD)
        r = tl.arange(0, G)
        n_groups = tl.load(table_ptr + groups_max * (G + 1)).to(tl.int32)
        for g in range(tl.program_id(2), n_groups, STEP):
            rows = tl.load(table_ptr + g * G + r)
            valid = rows >= 0
            slot = tl.load(table_ptr + groups_max * G + g)
            q = tl.load(q_ptr + (rows[:, None] * H + h) * HD + d[None, :], mask=valid[:, None], other=0.0)
            offs = slot * pstride_slot + h * pstride_head + n[:, None] * pstride_pos + d[None, :]
            k = tl.load(pk_ptr + offs)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * qk_scale  # [G, BLOCK], log2 domain
            m = tl.max(s, 1)
            p = tl.exp2(s - m[:, None])
            v = tl.load(pv_ptr + offs)
            acc = tl.dot(p.to(v.dtype), v, input_precision=PRECISION).to(tl.float32)  # [G, HD]
            out = (rows * H + h) * SPLITS + split
            tl.store(m_ptr + out, m, mask=valid)
            tl.store(l_ptr + out, tl.sum(p, 1), mask=valid)
            tl.store(acc_ptr + out[:, None] * HD + d[None, :], acc, mask=valid[:, None])

    @triton.jit
    def softmax_step(m, l, acc, s, v):
        """One block of the online softmax: scores s [BLOCK] (log2 domain, -inf where masked) and
        values v [BLOCK, HD] into the running max m, sum l and weighted sum acc [HD]."""
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp2(s - m_new)
        alpha = tl.exp2(m - m_new)
        return m_new, l * alpha + tl.sum(p, 0), acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)

    @triton.jit
    def _attn_chunk_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr,
                           stride_row, stride_head, stride_pos, attn_len, qk_scale,
                           pk_ptr, pv_ptr, slot_ptr, prefix_len, pstride_slot, pstride_head, pstride_pos,
                           cos_ptr, sin_ptr, g_ptr, stride_q, stride_g, ff, heads_rows, gelu_blocks,
                           H: tl.constexpr, HD: tl.constexpr, SPLITS: tl.constexpr,
                           CHUNK_: tl.constexpr, BLOCK: tl.constexpr, SHARED: tl.constexpr, FIRST: tl.constexpr,
                           STAGES: tl.constexpr, ROPE: tl.constexpr, ROT: tl.constexpr, GELU_BLOCK: tl.constexpr,
                           PDL: tl.constexpr):
        # ROPE: q_ptr is the [qkv | fc1] projection (rows stride_q apart), not rotated queries. Each
        # program then rotates its own head's query; the program whose chunk holds the row's position
        # also rotates k and writes k, v there (what `_rope_kv_kernel` does) before reading its keys;
        # programs past the B·H attention programs (heads_rows) apply GELU to fc1's blocks into g_ptr.
        dependent_launch(PDL)
        bh = tl.program_id(0)
        # Chunks before FIRST are `_prefix_group_kernel`'s. A compile-time constant: as a runtime argument
        # it made the per-row step measurably slower (README, "Whole requests under load").
        split = tl.program_id(1) + FIRST
        if bh >= heads_rows:  # only with ROPE: GELU block number (bh - heads_rows, split), row-major
            if ROPE:
                blk = (bh - heads_rows) * (SPLITS - FIRST) + split - FIRST
                if blk < gelu_blocks:
                    per_row = tl.cdiv(ff, GELU_BLOCK)
                    row = blk // per_row
                    col = (blk % per_row) * GELU_BLOCK
                    gelu_block(q_ptr + row * stride_q + 3 * H * HD + col, g_ptr + row * stride_g + col, ff - col,
                               GELU_BLOCK)
        else:
            attend_chunk(q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, stride_row, stride_head, stride_pos,
                         attn_len, qk_scale, pk_ptr, pv_ptr, slot_ptr, prefix_len, pstride_slot, pstride_head,
                         pstride_pos, cos_ptr, sin_ptr, stride_q, bh, split, H, HD, SPLITS, CHUNK_, BLOCK, SHARED,
                         STAGES, ROPE, ROT)

    @triton.jit
    def attend_chunk(q_ptr, k_ptr, v_ptr, pos_ptr, m_ptr, l_ptr, acc_ptr, stride_row, stride_head, stride_pos,
                     attn_len, qk_scale, pk_ptr, pv_ptr, slot_ptr, prefix_len, pstride_slot, pstride_head,
                     pstride_pos, cos_ptr, sin_ptr, stride_q, bh, split,
                     H: tl.constexpr, HD: tl.constexpr, SPLITS: tl.constexpr, CHUNK_: tl.constexpr,
                     BLOCK: tl.constexpr, SHARED: tl.constexpr, STAGES: tl.constexpr, ROPE: tl.constexpr,
                     ROT: tl.constexpr):
        b = bh // H
        h = bh % H
        # Keys 0..position are visible; padding rows sit at the scratch position, beyond any
        # bucket, and so see the whole bucket (their output is discarded).
        pos = tl.load(pos_ptr + b).to(tl.int32)
        length = tl.minimum(pos + 1, attn_len)
        start = split * CHUNK_
        end = tl.minimum(start + CHUNK_, length)
        d = tl.arange(0, HD)
        base = b * stride_row + h * stride_head
        if ROPE:
            # As `_rope_kv_kernel`: NeoX halves, dim i of the rotary part pairs with i ± ROT/2, the rest
            # pass through (cos 1, sin 0); q rounded to the input dtype as that kernel stores it.
            rotated = d < ROT
            partner = tl.where(rotated, (d + ROT // 2) % ROT, d)
            cos = tl.load(cos_ptr + pos * ROT + d, mask=rotated, other=1.0)
            sin = tl.load(sin_ptr + pos * ROT + d, mask=rotated, other=0.0)
            src = q_ptr + b * stride_q + h * HD
            q = rotary(src, cos, sin, d, partner).to(q_ptr.dtype.element_ty).to(tl.float32) * qk_scale
            if split == tl.minimum(pos, attn_len - 1) // CHUNK_:  # the chunk that reads the new key
                dst = base + pos * stride_pos + d
                tl.store(k_ptr + dst, rotary(src + H * HD, cos, sin, d, partner).to(k_ptr.dtype.element_ty))
                tl.store(v_ptr + dst, tl.load(src + 2 * H * HD + d))
                tl.debug_barrier()  # the writes are visible to this program's loads below
        else:
            q = tl.load(q_ptr + bh * HD + d).to(tl.float32) * qk_scale  # log2-domain scores
        if SHARED:  # keys 0..prefix_len-1 come from the row's prefix slot (SharedPrefix)
            pbase = tl.load(slot_ptr + b) * pstride_slot + h * pstride_head
        m = float("-inf")
        l = 0.0
        acc = tl.zeros([HD], dtype=tl.float32)
        rest = start
        if SHARED and STAGES > 1:
            # Blocks wholly inside the prefix: unmasked, branch-free loads that Triton's pipeliner turns
            # into STAGES-deep asynchronous copies, so a program keeps several blocks in flight in
            # shared memory instead of one in registers (README, "Whole requests under load", session 42).
            rest = tl.maximum(start, tl.minimum(end // BLOCK, prefix_len // BLOCK) * BLOCK)  # whole blocks only
            for n0 in tl.range(start, rest, BLOCK, num_stages=STAGES):
                offs = pbase + (n0 + tl.arange(0, BLOCK))[:, None] * pstride_pos + d[None, :]
                s = tl.sum(tl.load(pk_ptr + offs).to(tl.float32) * q[None, :], 1)
                m, l, acc = softmax_step(m, l, acc, s, tl.load(pv_ptr + offs))
        for n0 in range(rest, end, BLOCK):
            n = n0 + tl.arange(0, BLOCK)
            valid = n < end
            offs = base + n[:, None] * stride_pos + d[None, :]
            if SHARED:
                k, v = prefix_or_row_block(k_ptr, v_ptr, offs, pk_ptr, pv_ptr,
                                            pbase + n[:, None] * pstride_pos + d[None, :], n, n0, valid,
                                            prefix_len, BLOCK)
            else:
                k = tl.load(k_ptr + offs, mask=valid[:, None], other=0.0)
                v = tl.load(v_ptr + offs, mask=valid[:, None], other=0.0)
            s = tl.where(valid, tl.sum(k.to(tl.float32) * q[None, :], 1), float("-inf"))
            m, l, acc = softmax_step(m, l, acc, s, v)
        # A chunk past the row's length keeps m = -inf, l = 0: weight exactly 0 in the merge.
        out = bh * SPLITS + split
        tl.store(m_ptr + out, m)
        tl.store(l_ptr + out, l)
        tl.store(acc_ptr + out * HD + d, acc)

    @triton.jit
    def _attn_merge_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, stride_out,
                           H: tl.constexpr, HD: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
                           PDL: tl.constexpr):
        dependent_launch(PDL)
        bh = tl.program_id(0)
        s = tl.arange(0, SPLITS_P2)
        d = tl.arange(0, HD)
        inside = s < SPLITS
        m = tl.load(m_ptr + bh * SPLITS + s, mask=inside, other=float("-inf"))
        l = tl.load(l_ptr + bh * SPLITS + s, mask=inside, other=0.0)
        acc = tl.load(acc_ptr + (bh * SPLITS + s)[:, None] * HD + d[None, :], mask=inside[:, None], other=0.0)
        w = tl.exp2(m - tl.max(m, 0))  # chunk 0 always holds key 0, so the max is finite
        total = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
        tl.store(out_ptr + (bh // H) * stride_out + (bh % H) * HD + d, total.to(out_ptr.dtype.element_ty))

    @triton.jit
    def _residual_ln_kernel(x_ptr, a_ptr, b_ptr, c_ptr, w_ptr, bias_ptr, x_out_ptr, h_out_ptr, eps, stride_split,
                            D: tl.constexpr, BLOCK_D: tl.constexpr, BIASES: tl.constexpr, NORM: tl.constexpr,
                            SPLITS: tl.constexpr, PDL: tl.constexpr):
        dependent_launch(PDL)
        row = tl.program_id(0).to(tl.int64)
        d = tl.arange(0, BLOCK_D)
        inside = d < D
        # x + a (+ b + c, bias vectors [D]), summed in fp32 and rounded once; with SPLITS, a is the
        # fp32 partial sums [SPLITS, rows, D] of a split-K product (`skinny_linear`), added in order
        if SPLITS == 0:
            a = tl.load(a_ptr + row * D + d, mask=inside, other=0.0).to(tl.float32)
        else:
            a = tl.load(a_ptr + row * D + d, mask=inside, other=0.0)
            for s in tl.static_range(1, SPLITS):
                a += tl.load(a_ptr + s * stride_split + row * D + d, mask=inside, other=0.0)
        x = tl.load(x_ptr + row * D + d, mask=inside, other=0.0).to(tl.float32) + a
        if BIASES:
            x += (tl.load(b_ptr + d, mask=inside, other=0.0).to(tl.float32)
                  + tl.load(c_ptr + d, mask=inside, other=0.0).to(tl.float32))
        x = x.to(x_ptr.dtype.element_ty)
        tl.store(x_out_ptr + row * D + d, x, mask=inside)
        if NORM:
            xf = x.to(tl.float32)
            mean = tl.sum(xf, 0) / D
            centred = tl.where(inside, xf - mean, 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, 0) / D + eps)
            w = tl.load(w_ptr + d, mask=inside, other=0.0).to(tl.float32)
            bias = tl.load(bias_ptr + d, mask=inside, other=0.0).to(tl.float32)
            tl.store(h_out_ptr + row * D + d, (centred * rstd * w + bias).to(h_out_ptr.dtype.element_ty), mask=inside)


def residual_layernorm(x: torch.Tensor, a: torch.Tensor, biases: tuple[torch.Tensor, torch.Tensor] | tuple[()],
                       ln: torch.nn.LayerNorm | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A residual add and the next LayerNorm in one pass: x + a (+ biases[0] + biases[1]), summed
    in fp32 and rounded once, and, when `ln` is given, its LayerNorm: (x_new, ln(x_new) or None).
    x, a [rows, D] and the bias vectors [D], contiguous; a may instead be the fp32 partial sums
    [splits, rows, D] of a split-K `skinny_linear`, added in order. The decode step's parallel block passes
    both projections' biases (one GEMM over both, `FusedProjections`); the vision tower's blocks,
    whose GEMMs add their bias, pass none."""
    rows, dim = x.shape
    splits = a.shape[0] if a.dim() == 3 else 0
    assert x.is_contiguous() and a.is_contiguous() and a.shape[-2:] == x.shape
    assert splits == 0 or a.dtype == torch.float32
    assert len(biases) in (0, 2) and all(b.is_contiguous() and b.shape == (dim,) for b in biases)
    b1, b2 = biases if biases else (x, x)
    x_new = torch.empty_like(x)
    h = torch.empty_like(x) if ln is not None else x_new
    on = pdl(x)
    _residual_ln_kernel[(rows,)](x, a, b1, b2, ln.weight if ln is not None else x, ln.bias if ln is not None else x,
                                 x_new, h, ln.eps if ln is not None else 0.0, a.stride(0) if splits else 0,
                                 D=dim, BLOCK_D=triton.next_power_of_2(dim), BIASES=bool(biases), NORM=ln is not None,
                                 SPLITS=splits, PDL=on, launch_pdl=on, num_warps=4 if dim >= 1024 else 1)
    return x_new, h if ln is not None else None


def rope_kv_write(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, rotary_dims: int, *,
                  gelu_out: torch.Tensor | None = None) -> torch.Tensor:
    """qkv [B, 3·H·hd] → rotated q [B, H, hd]; rotated k and v written to row b, position
    positions[b] of k_cache/v_cache [rows, H, max_len, hd]. cos/sin: fp32 [max_len, rotary_dims].

    With `gelu_out` [B, F] (rows may be strided): qkv is [B, 3·H·hd + F], the MLP's first
    projection after q, k, v (`FusedProjections`), and the same launch writes GELU-tanh of those
    F columns to gelu_out."""
    b = qkv.shape[0]
    _, h, _, hd = k_cache.shape
    ff = 0 if gelu_out is None else gelu_out.shape[1]
    assert qkv.shape[1] == 3 * h * hd + ff and qkv.stride(1) == 1 and k_cache.stride() == v_cache.stride()
    assert gelu_out is None or (gelu_out.shape[0] == b and gelu_out.stride(1) == 1 and gelu_out.dtype == qkv.dtype)
    assert cos.is_contiguous() and sin.is_contiguous() and cos.shape[1] == rotary_dims
    positions = positions.contiguous()  # read as positions[b] at offset b
    q = torch.empty(b, h, hd, device=qkv.device, dtype=qkv.dtype)
    g = q if gelu_out is None else gelu_out
    on = pdl(qkv)
    _rope_kv_kernel[(b, h + triton.cdiv(ff, GELU_BLOCK))](
        qkv, cos, sin, positions, q, k_cache, v_cache, g,
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), g.stride(0), ff,
        H=h, HD=hd, ROT=rotary_dims, GELU_BLOCK=GELU_BLOCK, PDL=on, launch_pdl=on, num_warps=1)
    return q


def rope_kv_prefix(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: torch.Tensor, seq: int,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, rotary_dims: int, gelu_out: torch.Tensor) -> None:
    """`rope_kv_write` for whole image prefixes: qkv [B·seq, 3·H·hd + F] holds B prefixes of `seq`
    tokens (positions 0..seq-1), prefix b going to cache row rows[b] of k_cache/v_cache
    [rows, H, ≥ seq, hd]. Rotates q and k in place in qkv (so qkv then holds what attention
    reads), writes the rotated k and v to the cache, and GELU-tanh of the F MLP columns to
    gelu_out [B·seq, F] (rows may be strided), all in one launch."""
    tokens = qkv.shape[0]
    _, h, _, hd = k_cache.shape
    ff = gelu_out.shape[1]
    assert not h & (h - 1), "the prefix kernel holds tokens' heads in one block: a power-of-two head count"
    assert tokens % seq == 0 and rows.shape == (tokens // seq,) and seq <= k_cache.shape[2]
    assert qkv.shape[1] == 3 * h * hd + ff and qkv.stride(1) == 1 and k_cache.stride() == v_cache.stride()
    assert gelu_out.shape[0] == tokens and gelu_out.stride(1) == 1 and gelu_out.dtype == qkv.dtype
    assert cos.is_contiguous() and sin.is_contiguous() and cos.shape[1] == rotary_dims and cos.shape[0] >= seq
    per = max(1, PREFIX_ROPE_PAIRS // h)  # tokens a program
    cols = min(max(PREFIX_GELU_ELEMENTS // per, 16), triton.next_power_of_2(ff))  # GELU columns a program
    on = pdl(qkv)
    _rope_prefix_kernel[(triton.cdiv(tokens, per), 1 + triton.cdiv(ff, cols))](
        qkv, cos, sin, rows.contiguous(), k_cache, v_cache, gelu_out,
        qkv.stride(0), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), gelu_out.stride(0), ff, seq, tokens,
        H=h, HD=hd, ROT=rotary_dims, GELU_BLOCK=cols, TOKENS=per, PDL=on, launch_pdl=on, num_warps=4)


def dot_precision(dtype: torch.dtype) -> str:
    """`tl.dot`'s input precision: fp32 inputs are multiplied exactly ("ieee"; Triton's default would
    round them to TF32, and the fp32 engine would then drift from the PyTorch path); 16-bit inputs
    are exact on the tensor cores either way."""
    return "ieee" if dtype == torch.float32 else "tf32"


def shared_prefix_args(prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None, k_cache: torch.Tensor,
                       any_long: torch.Tensor) -> tuple:
    """The kernels' shared-prefix arguments: (k, v, slots, P, slot/head/position strides); without a
    prefix, placeholders the kernels never read (SHARED=False)."""
    if prefix is None:
        return k_cache, k_cache, any_long, 0, 0, 0, 0
    pk, pv, slots = prefix
    assert pk.stride() == pv.stride() and pk.stride(3) == 1 and pk.shape[1:] == (k_cache.shape[1], pk.shape[2], k_cache.shape[3])
    return pk, pv, slots.contiguous(), pk.shape[2], pk.stride(0), pk.stride(1), pk.stride(2)


def decode_shape(rows: int, shared: bool, grouped: bool) -> tuple[int, int]:
    """(keys per split-K program, prefix blocks in flight) for a decode step of `rows` rows; `shared`:
    the rows read their image prefixes from slots (only those blocks are pipelined); `grouped`: read
    per group of rows (`grouping_pays`), whose kernel needs 64-key chunks."""
    if rows >= PIPELINE_MIN_BATCH and shared and not grouped:
        return PIPELINE_CHUNK, PIPELINE_STAGES
    return CHUNK, 1


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor,
                     attn_len: int, *, prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                     groups: torch.Tensor | None = None, chunk: int | None = None, block: int = BLOCK_N,
                     num_warps: int = ATTN_WARPS, stages: int | None = None,
                     out: torch.Tensor | None = None) -> torch.Tensor:
    """q [B, H, hd]; row b attends to keys 0..min(positions[b], attn_len - 1) of cache row b
    ([rows, H, max_len, hd]). `prefix` (k, v [slots, H, P, hd], slots [B]): keys 0..P-1 of row b
    are those of slot slots[b] instead. `groups` (with `prefix`; `group_table` builds it): the rows
    grouped by slot, so that the chunks inside the prefix are read once per group (the caller
    decides when that pays: `grouping_pays`); then every position must be ≥ P. Returns [B, H·hd] in q's dtype,
    written to `out` when given (a [B, H·hd] view whose rows may be strided, e.g. part of a wider buffer).
    `chunk` keys per split-K program and `stages` prefix blocks in flight (with `prefix`): by default
    `decode_shape`'s for the batch."""
    assert q.is_contiguous()
    return _split_k_attention(q, q.shape, k_cache, v_cache, positions, attn_len, prefix, groups, chunk, block,
                              num_warps, stages, out, None)


def rope_attention(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, rotary_dims: int, attn_len: int, *,
                   prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                   groups: torch.Tensor | None = None, gelu_out: torch.Tensor | None = None,
                   out: torch.Tensor | None = None, chunk: int | None = None, stages: int | None = None,
                   one_launch: bool | None = None) -> torch.Tensor:
    """`rope_kv_write` and then `decode_attention`, with the same results bit for bit. Arguments as
    those two functions' (qkv [B, 3·H·hd + F], rows may be strided).

    `one_launch` (default: for the 64-key, ungrouped shape of `decode_shape`, i.e. batches below
    PIPELINE_MIN_BATCH or without shared prefixes): one kernel less. The attention programs rotate
    their own queries from qkv, the one whose key chunk holds a row's position writes that row's
    rotated k and v to the cache before reading its keys, and extra programs apply GELU to the MLP
    columns into `gelu_out`. The grouped kernel reads rotated queries, and the longer pipelined
    chunks ran slower with the work inside (README, "Session 47"), so those keep two launches."""
    b = qkv.shape[0]
    _, h, _, hd = k_cache.shape
    grouped = groups is not None and prefix is not None
    if one_launch is None:
        one_launch = not grouped and (stages or decode_shape(b, prefix is not None, grouped)[1]) == 1
    if not one_launch:
        q = rope_kv_write(qkv, cos, sin, positions, k_cache, v_cache, rotary_dims, gelu_out=gelu_out)
        return decode_attention(q, k_cache, v_cache, positions, attn_len, prefix=prefix, groups=groups, chunk=chunk,
                                stages=stages, out=out)
    assert not grouped, "the grouped prefix kernel reads rotated queries: one_launch=False"
    ff = 0 if gelu_out is None else gelu_out.shape[1]
    assert qkv.shape[1] == 3 * h * hd + ff and qkv.stride(1) == 1
    assert gelu_out is None or (gelu_out.shape[0] == b and gelu_out.stride(1) == 1 and gelu_out.dtype == qkv.dtype)
    assert cos.is_contiguous() and sin.is_contiguous() and cos.shape[1] == rotary_dims
    return _split_k_attention(qkv, (b, h, hd), k_cache, v_cache, positions, attn_len, prefix, None, chunk, BLOCK_N,
                              ATTN_WARPS, stages, out, (cos, sin, rotary_dims, gelu_out))


def _split_k_attention(q: torch.Tensor, shape: tuple[int, int, int], k_cache: torch.Tensor, v_cache: torch.Tensor,
                       positions: torch.Tensor, attn_len: int,
                       prefix: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None, groups: torch.Tensor | None,
                       chunk: int | None, block: int, num_warps: int, stages: int | None, out: torch.Tensor | None,
                       rope: tuple[torch.Tensor, torch.Tensor, int, torch.Tensor | None] | None) -> torch.Tensor:
    """`decode_attention` (rope None: q [B, H, hd] rotated queries) and `rope_attention` (rope: cos, sin,
    rotary dims, GELU output; q the [qkv | fc1] rows) launched: the chunk programs, then the merge."""
    b, h, hd = shape
    grouped = groups is not None and prefix is not None
    chunk_keys, default_stages = decode_shape(b, prefix is not None, grouped)
    chunk, stages = chunk or chunk_keys, stages or default_stages
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(3) == 1
    positions = positions.contiguous()  # read as positions[b] at offset b (a no-op for the runner's)
    shared = shared_prefix_args(prefix, k_cache, positions)
    splits = triton.cdiv(attn_len, chunk)
    m = torch.empty(b * h * splits, device=q.device, dtype=torch.float32)
    l = torch.empty_like(m)
    acc = torch.empty(b * h * splits, hd, device=q.device, dtype=torch.float32)
    first = 0
    on = pdl(q)
    if grouped:
        assert chunk == block and attn_len >= shared[3], "grouped prefix chunks need chunk == block and attn_len ≥ P"
        first = shared[3] // chunk  # chunks wholly inside the prefix
        groups_max = (groups.numel() - 1) // (GROUP_ROWS + 1)
        step = min(GROUP_PROGRAMS, groups_max)
        if first:
            _prefix_group_kernel[(h, first, step)](
                q, shared[0], shared[1], groups, m, l, acc, hd ** -0.5 * math.log2(math.e), *shared[4:], groups_max,
                H=h, HD=hd, SPLITS=splits, G=GROUP_ROWS, BLOCK=block, STEP=step,
                PRECISION=dot_precision(q.dtype), PDL=on, launch_pdl=on, num_warps=4)
    cos, sin, rot, gelu_out = rope if rope is not None else (q, q, 0, None)
    g = gelu_out if gelu_out is not None else q
    ff = 0 if gelu_out is None else gelu_out.shape[1]
    gelu_blocks = b * triton.cdiv(ff, GELU_BLOCK)
    extra = triton.cdiv(gelu_blocks, splits - first)  # GELU programs, (splits - first) per grid row
    _attn_chunk_kernel[(b * h + extra, splits - first)](
        q, k_cache, v_cache, positions, m, l, acc, k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), attn_len,
        hd ** -0.5 * math.log2(math.e), *shared, cos, sin, g, q.stride(0), g.stride(0), ff, b * h, gelu_blocks,
        H=h, HD=hd, SPLITS=splits, CHUNK_=chunk, BLOCK=block, SHARED=prefix is not None, FIRST=first, STAGES=stages,
        ROPE=rope is not None, ROT=rot, GELU_BLOCK=GELU_BLOCK, PDL=on, launch_pdl=on, num_warps=num_warps)
    if out is None:
        out = torch.empty(b, h * hd, device=q.device, dtype=q.dtype)
    assert out.shape == (b, h * hd) and out.stride(1) == 1 and out.dtype == q.dtype
    _attn_merge_kernel[(b * h,)](m, l, acc, out, out.stride(0), H=h, HD=hd, SPLITS=splits,
                                 SPLITS_P2=triton.next_power_of_2(splits), PDL=on, launch_pdl=on, num_warps=1)
    return out
