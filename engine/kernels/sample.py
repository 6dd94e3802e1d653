"""Fused Triton kernels for a point/detect step's sampling (CUDA only; `engine.worker.sampling.Sampler` keeps the
PyTorch path with the same semantics, used on the CPU, for full-vocabulary steps, and as the test oracle).

Why: at batch 1 a decode step's sampling is ~33 tiny kernels (masked argmax over the three
point/detect tokens, p(coord vs EOS), a region decoder's argmax, value and window probability, the
pending inputs and the results' buffers), each a few microseconds of fixed cost in the CUDA graph
(README, "Session 41"). Two kernels do that work here:

* `choose_spatial`: per row, the greedy token among coord/size/EOS under the row's grammar mask,
  p(coord vs EOS), the pending token; the row's region values and their probabilities are set to NaN
  (a region decoder that runs afterwards overwrites its own).
* `region_bins`: per row of a region decoder's logits (a coordinate, or a width or height), the argmax
  bin, its value (looked up in the table of PyTorch's values), the softmax mass within ±reach bins of
  it, and the pending value of an active row.

Numerics: the argmaxes break ties to the first index, as `torch.argmax`; probabilities in fp32 (the
window mass as one sum divided by the total, where PyTorch sums the divided terms: equal to rounding).
"""

from __future__ import annotations

import torch

from engine.kernels.decode import pdl, triton

if triton is not None:
    import triton.language as tl

    from engine.kernels.decode import dependent_launch

    @triton.jit
    def _choose_kernel(logits_ptr, allowed_ptr, states_ptr, act_ptr, ids_ptr, pending_ptr, token_ptr,
                       probs_ptr, coords_ptr, sizes_ptr,
                       K: tl.constexpr, BLOCK: tl.constexpr, COORD: tl.constexpr, EOS: tl.constexpr,
                       PDL: tl.constexpr):
        dependent_launch(PDL)
        r = tl.program_id(0)
        k = tl.arange(0, BLOCK)
        inside = k < K
        logits = tl.load(logits_ptr + r * K + k, mask=inside, other=float("-inf")).to(tl.float32)
        state = tl.load(states_ptr + r)
        ok = tl.load(allowed_ptr + state * K + k, mask=inside, other=0) != 0
        pick = tl.argmax(tl.where(ok, logits, float("-inf")), 0, tie_break_left=True)
        token = tl.load(ids_ptr + pick)
        active = tl.load(act_ptr + r) != 0
        tl.store(pending_ptr + r, tl.where(active, token, tl.load(pending_ptr + r)))
        tl.store(token_ptr + r, token)
        gap = tl.sum(tl.where(k == COORD, logits, 0.0), 0) - tl.sum(tl.where(k == EOS, logits, 0.0), 0)
        more = 1.0 / (1.0 + tl.exp(-gap))
        j = tl.arange(0, 4)
        tl.store(probs_ptr + r * 4 + j, tl.where(j == 0, more, float("nan")))
        tl.store(coords_ptr + r, float("nan"))
        tl.store(sizes_ptr + r * 2 + tl.arange(0, 2), tl.full([2], float("nan"), tl.float32))

    @triton.jit
    def _bins_kernel(logits_ptr, act_ptr, table_ptr, pending_ptr, value_ptr, probs_ptr,
                     N: tl.constexpr, BLOCK: tl.constexpr, PER_ROW: tl.constexpr, PROB_COL: tl.constexpr,
                     REACH: tl.constexpr, PDL: tl.constexpr):
        dependent_launch(PDL)
        r = tl.program_id(0)
        b = r // PER_ROW
        i = tl.arange(0, BLOCK)
        inside = i < N
        x = tl.load(logits_ptr + r * N + i, mask=inside, other=float("-inf")).to(tl.float32)
        top = tl.max(x, 0)
        best = tl.argmax(x, 0, tie_break_left=True)
        e = tl.where(inside, tl.exp(x - top), 0.0)
        near = tl.sum(tl.where(tl.abs(i - best) <= REACH, e, 0.0), 0)
        p = near / tl.sum(e, 0)
        value = tl.load(table_ptr + best)
        tl.store(value_ptr + r, value)
        tl.store(probs_ptr + b * 4 + PROB_COL + r % PER_ROW, p)
        active = tl.load(act_ptr + b) != 0
        tl.store(pending_ptr + r, tl.where(active, value, tl.load(pending_ptr + r)))


def choose_spatial(logits: torch.Tensor, allowed: torch.Tensor, states: torch.Tensor, active: torch.Tensor,
                   ids: torch.Tensor, coord_col: int, eos_col: int, pending: torch.Tensor, tokens: torch.Tensor,
                   probs: torch.Tensor, coords: torch.Tensor, sizes: torch.Tensor) -> None:
    """logits [B, K] of the point/detect tokens `ids` [K] (ascending); allowed [rows, K] bool, the mask
    table's columns of them; states, active [B] long → tokens [B] (the masked greedy id), pending [B]
    (the token where active), probs [B, 4] = (sigmoid(l[coord_col] - l[eos_col]), NaN, NaN, NaN),
    coords [B] and sizes [B, 2] NaN. All contiguous."""
    b, k = logits.shape
    for t in (logits, allowed, states, active, ids, pending, tokens, probs, coords, sizes):
        assert t.is_contiguous()
    assert allowed.shape[1] == k and probs.shape == (b, 4) and sizes.shape == (b, 2)
    on = pdl(logits)
    _choose_kernel[(b,)](logits, allowed, states, active, ids, pending, tokens, probs, coords, sizes,
                         K=k, BLOCK=triton.next_power_of_2(max(k, 2)), COORD=coord_col, EOS=eos_col,
                         PDL=on, launch_pdl=on, num_warps=1)


def region_bins(logits: torch.Tensor, active: torch.Tensor, reach: int, table: torch.Tensor, pending: torch.Tensor,
                values: torch.Tensor, probs: torch.Tensor, prob_col: int) -> None:
    """A region decoder's logits [B, P, N] (P values a row: 1 coordinate, or width and height) →
    values [B, P] = table[argmax bin] (`engine.model.region.value_table`: the values PyTorch computes),
    probs[:, prob_col:prob_col + P] (the softmax mass within ±reach bins of the argmax), pending [B, P]
    (the value where active[b]). All contiguous; table, values and pending float32."""
    b, per_row, n = logits.shape
    for t in (logits, active, table, pending, values, probs):
        assert t.is_contiguous()
    assert values.numel() == pending.numel() == b * per_row and probs.shape == (b, 4) and prob_col + per_row <= 4
    assert table.numel() == n and table.dtype == values.dtype == pending.dtype == torch.float32
    on = pdl(logits)
    _bins_kernel[(b * per_row,)](logits, active, table, pending, values, probs,
                                 N=n, BLOCK=triton.next_power_of_2(n), PER_ROW=per_row, PROB_COL=prob_col,
                                 REACH=reach, PDL=on, launch_pdl=on, num_warps=4 if n >= 1024 else 1)
