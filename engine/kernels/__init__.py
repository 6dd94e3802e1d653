"""Fused Triton kernels with their PyTorch fallbacks, chosen by an explicit option.

`KernelChoice` is what callers pass (`Engine(kernels=...)`, `ModelRunner(kernels=...)`,
`TextModel.decode(..., kernels=...)`): "auto" runs the fused kernels where they can run (CUDA
tensors, power-of-two head dim, Triton importable) and the PyTorch path elsewhere; "torch"
always runs the PyTorch path (the A/B baseline and the CPU path); "triton" insists on the
fused kernels and raises when they cannot run.
"""

from __future__ import annotations

from typing import Literal

import torch

from engine.kernels.bidirectional import BIDIRECTIONAL_SHAPE, AttnShape, bidirectional_attention, split_head
from engine.kernels.decode import (GROUP_CHOICES, GROUP_MIN_BATCH, available, decode_attention, decode_shape,
                                   group_table, group_table_size, grouping_pays, residual_layernorm, rope_attention,
                                   rope_kv_prefix, rope_kv_write)
from engine.kernels.prompt import prompt_attention
from engine.kernels.sample import choose_spatial, region_bins
from engine.kernels.skinny import (SKINNY_DEFAULT, SKINNY_MAX_ROWS, SKINNY_SHAPES, SkinnyShape, skinny_applies,
                                   skinny_linear, skinny_shape)

KernelChoice = Literal["auto", "triton", "torch"]
KERNEL_CHOICES: tuple[str, ...] = ("auto", "triton", "torch")


def use_fused(choice: KernelChoice, t: torch.Tensor, head_dim: int) -> bool:
    """Resolve `choice` for tensors like `t`: True runs the fused Triton kernels."""
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_CHOICES)}, got {choice!r}")
    if choice == "torch":
        return False
    ok = available(t, head_dim)
    if choice == "triton" and not ok:
        raise ValueError("the fused Triton kernels cannot run here (they need CUDA tensors, Triton and a "
                         f"power-of-two head dim, got {head_dim}); use kernels='auto' or 'torch'")
    return ok


__all__ = ["BIDIRECTIONAL_SHAPE", "AttnShape", "bidirectional_attention", "GROUP_CHOICES", "GROUP_MIN_BATCH", "KERNEL_CHOICES", "KernelChoice", "available", "choose_spatial",
           "decode_attention", "decode_shape", "group_table", "group_table_size", "grouping_pays", "prompt_attention",
           "region_bins", "residual_layernorm", "rope_attention", "rope_kv_prefix", "rope_kv_write", "split_head", "use_fused",
           "SKINNY_DEFAULT", "SKINNY_MAX_ROWS", "SKINNY_SHAPES", "SkinnyShape", "skinny_applies", "skinny_linear",
           "skinny_shape"]
