"""Building blocks shared by the vision and text towers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def gelu(x: torch.Tensor) -> torch.Tensor:
    # Moondream uses the tanh approximation everywhere (vision, text and region heads).
    return F.gelu(x, approximate="tanh")


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
