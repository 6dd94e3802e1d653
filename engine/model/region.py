"""Region heads: Fourier encoders for coordinates/sizes and bin decoders (Moondream 2 §7).

The heads read the decoder's raw hidden state (before the final LayerNorm).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from engine.model.config import MoondreamConfig
from engine.model.layers import MLP


def fourier(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    angles = 2 * math.pi * (v @ w)
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class RegionModel(nn.Module):
    def __init__(self, config: MoondreamConfig, **factory) -> None:
        super().__init__()
        r, d = config.region, config.text.dim
        self.cfg = r
        self.coord_features = nn.Parameter(torch.zeros(1, r.coord_feat_dim // 2, **factory))
        self.coord_encoder = nn.Linear(r.coord_feat_dim, d, **factory)
        self.coord_decoder = MLP(d, r.inner_dim, r.coord_bins, **factory)
        self.size_features = nn.Parameter(torch.zeros(2, r.size_feat_dim // 2, **factory))
        self.size_encoder = nn.Linear(r.size_feat_dim, d, **factory)
        self.size_decoder = MLP(d, r.inner_dim, 2 * r.size_bins, **factory)

    def encode_coord(self, value: torch.Tensor) -> torch.Tensor:
        """[..., 1] normalised coordinate → [..., D] embedding."""
        return self.coord_encoder(fourier(value.to(self.coord_features.dtype), self.coord_features))

    def encode_size(self, wh: torch.Tensor) -> torch.Tensor:
        """[..., 2] normalised (w, h) → [..., D] embedding."""
        return self.size_encoder(fourier(wh.to(self.size_features.dtype), self.size_features))

    def coord_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.coord_decoder(hidden)

    def size_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., D] → [..., 2, bins]: row 0 width, row 1 height."""
        return self.size_decoder(hidden).unflatten(-1, (2, self.cfg.size_bins))

    def decode_coord(self, hidden: torch.Tensor) -> torch.Tensor:
        """Greedy coordinate in [0, 1): argmax bin / bins (the reference's scale), shape [..., 1]."""
        return coord_from_bin(self.coord_logits(hidden).argmax(-1, keepdim=True), self.cfg.coord_bins)

    def decode_size(self, hidden: torch.Tensor) -> torch.Tensor:
        """Greedy (w, h) on the log scale 2^-10 … 1, shape [..., 2]."""
        return size_from_bin(self.size_logits(hidden).argmax(-1), self.cfg.size_bins)

    def decode_coord_p(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode_coord` and the probability that the coordinate lies within `BIN_WINDOW` of
        it (the bins' softmax mass within ±BIN_WINDOW of the argmax), each [..., 1]."""
        logits = self.coord_logits(hidden)
        bins = logits.argmax(-1, keepdim=True)
        return coord_from_bin(bins, self.cfg.coord_bins), window_probability(logits[..., None, :], bins)

    def decode_size_p(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode_size` and the probabilities that width and height lie within `BIN_WINDOW`
        of it, each [..., 2]."""
        logits = self.size_logits(hidden)  # [..., 2, bins]
        bins = logits.argmax(-1)  # [..., 2]
        return size_from_bin(bins, self.cfg.size_bins), window_probability(logits, bins)

    def decode_region_p(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`decode_coord_p` and `decode_size_p` of every row at once (the engine's sampling step):
        coord [..., 1], size [..., 2], probabilities [..., 3] (coordinate, width, height). With
        equal bin counts the three heads share one softmax pass (fewer kernels per step)."""
        coord_logits, size_logits = self.coord_logits(hidden), self.size_logits(hidden)
        coord_bins, size_bins = coord_logits.argmax(-1, keepdim=True), size_logits.argmax(-1)
        value = coord_from_bin(coord_bins, self.cfg.coord_bins), size_from_bin(size_bins, self.cfg.size_bins)
        if self.cfg.coord_bins == self.cfg.size_bins:
            p = window_probability(torch.cat([coord_logits[..., None, :], size_logits], -2),
                                   torch.cat([coord_bins, size_bins], -1))
        else:
            p = torch.cat([window_probability(coord_logits[..., None, :], coord_bins),
                           window_probability(size_logits, size_bins)], -1)
        return *value, p


BIN_WINDOW = 0.01  # a value "agrees" with the greedy one within ±1% of the bin range (coordinates: of the image)


def more_probability(logits: torch.Tensor, coord_id: int, eos_id: int) -> torch.Tensor:
    """p(coord) of the coord-vs-EOS decision that starts each object: softmax over those two
    logits only (the grammar allows nothing else there), i.e. sigmoid(l_coord - l_eos), in
    float32. [..., V] → [...]. Decided by the logits themselves, it never changes a choice."""
    return (logits[..., coord_id].float() - logits[..., eos_id].float()).sigmoid()


def window_reach(n_bins: int) -> int:
    """Bins on each side of the greedy one that count as agreeing with it (`BIN_WINDOW`)."""
    return max(1, round(BIN_WINDOW * n_bins))


def window_probability(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """softmax(logits) summed over the bins within ±BIN_WINDOW·N of `index`, in float32.
    [..., k, N] logits, [..., k] index → [..., k]."""
    n_bins = logits.shape[-1]
    near = (torch.arange(n_bins, device=logits.device) - index[..., None]).abs() <= window_reach(n_bins)  # [..., k, N]
    return (logits.float().softmax(-1) * near).sum(-1)


def coord_from_bin(bins: torch.Tensor, n_bins: int) -> torch.Tensor:
    return bins.float() / n_bins


_SIZE_TABLES: dict[tuple[int, torch.device], torch.Tensor] = {}


def size_from_bin(bins: torch.Tensor, n_bins: int) -> torch.Tensor:
    """2^((bin / (bins - 1)) · 10 - 10) as float32, by table lookup.

    A vectorised exp2 rounds the last bit differently for SIMD lanes and the scalar tail, so
    computing it over a batch made a request's sizes depend on which other requests shared
    the step; a table of the n_bins values (computed once, in float64) is exact and batch-free.
    """
    return value_table("size", n_bins, bins.device)[bins]


def value_table(kind: str, n_bins: int, device: torch.device) -> torch.Tensor:
    """Every bin's value as float32 [n_bins], exactly as `coord_from_bin` / `size_from_bin` give
    it ("coord" or "size"); the fused sampling kernel looks values up here."""
    if kind == "coord":
        return coord_from_bin(torch.arange(n_bins, device=device), n_bins)
    key = (n_bins, torch.device(device))
    if key not in _SIZE_TABLES:
        exponent = torch.arange(n_bins, dtype=torch.float64) / (n_bins - 1) * 10.0 - 10.0
        _SIZE_TABLES[key] = torch.exp2(exponent).float().to(device)
    return _SIZE_TABLES[key]


def coord_to_bin(value: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Training label for a coordinate (inverse of `coord_from_bin`, rounded)."""
    return (value * n_bins).round().clamp(0, n_bins - 1).long()


def size_to_bin(size: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Training label for a size: round((log2(max(s, 2^-10)) + 10) / 10 · (bins - 1))."""
    return ((torch.log2(size.clamp(min=2.0**-10)) + 10.0) / 10.0 * (n_bins - 1)).round().clamp(0, n_bins - 1).long()
