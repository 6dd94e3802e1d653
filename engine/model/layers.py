"""Building blocks shared by the vision and text towers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# cuDNN attention gave run-to-run different bf16 results on an H200 (README, "Choices where the
# official format is ambiguous"); greedy outputs must be reproducible, so attention may use
# every backend but that one.
_DETERMINISTIC_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
              cudnn: bool = False) -> torch.Tensor:
    """SDPA on the reproducible backends; `cudnn`: cuDNN's kernel first, where a caller has checked
    that it is reproducible at its shapes (the vision tower, `engine.model.vision.VISION_CUDNN`)."""
    with sdpa_kernel(([SDPBackend.CUDNN_ATTENTION] if cudnn else []) + _DETERMINISTIC_SDPA):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def gelu(x: torch.Tensor) -> torch.Tensor:
    # Moondream uses the tanh approximation everywhere (vision, text and region heads).
    return F.gelu(x, approximate="tanh")


def linear_gelu(x: torch.Tensor, fc: nn.Linear) -> torch.Tensor:
    """gelu(fc(x)) for x [rows, in] on CUDA as one cuBLASLt GEMM whose epilogue adds the bias and
    applies GELU (the tanh approximation) to the fp32 result before rounding: no second pass over
    the [rows, out] activation. Elsewhere PyTorch's `_addmm_activation` would apply the exact GELU,
    so the CPU keeps the two steps."""
    if not x.is_cuda:
        return gelu(fc(x))
    return torch._addmm_activation(fc.bias, x, fc.weight.t(), use_gelu=True)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One query per row as two batched matmuls (q [B, H, 1, hd], k/v [B, H, L, hd] views of the
    cache, bias [B·H, L, 1] additive mask: 0 or -inf). Returns [B, H, 1, hd].

    The PyTorch decode path (CPU, and the oracle of `engine.kernels.decode.decode_attention`, which
    replaces it on CUDA). For a single query the fused SDPA kernels tile 64 queries and idle, so
    this is two batched GEMMs. Scale and mask ride in the first GEMM (baddbmm); softmax
    accumulates in fp32.
    """
    b, h, _, d = q.shape
    scores = torch.baddbmm(bias, k.flatten(0, 1), q.reshape(b * h, d, 1), alpha=d ** -0.5)  # [B·H, L, 1]
    probs = torch.softmax(scores.view(b * h, 1, -1), -1, dtype=torch.float32).to(v.dtype)
    return torch.bmm(probs, v.flatten(0, 1)).view(b, h, 1, d)


class MLP(nn.Module):
    """fc1 → GELU-tanh → fc2; the names match the checkpoint keys."""

    def __init__(self, dim: int, hidden: int, out: int | None = None, **factory) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, **factory)
        self.fc2 = nn.Linear(hidden, dim if out is None else out, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(gelu(self.fc1(x)))


class QKVAttentionWeights(nn.Module):
    """Fused qkv projection plus output projection (`attn.qkv`, `attn.proj`)."""

    def __init__(self, dim: int, **factory) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim, **factory)
        self.proj = nn.Linear(dim, dim, **factory)
