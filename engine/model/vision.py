"""SigLIP-style vision encoder and the projection into the text model (Moondream 2 §3–§5)."""

from __future__ import annotations

import torch
from torch import nn

from engine import kernels as _kernels
from engine.model.config import MoondreamConfig
from engine.model.image import patchify, pool_to_grid, reconstruct_from_crops
from engine.model.layers import MLP, QKVAttentionWeights, attention, linear_gelu


# The fused vision blocks' attention (head dim 72, no mask) on cuDNN's kernel, which does not pad the
# head to 96 as flash does: checked bit-reproducible run to run and batch-free on an H200
# (docs/experiments/cudnn_vision_check.py; README "Choices where the official format is ambiguous").
VISION_CUDNN = True


class VisionBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int, ff_dim: int, **factory) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(dim, **factory)
        self.attn = QKVAttentionWeights(dim, **factory)
        self.ln2 = nn.LayerNorm(dim, **factory)
        self.mlp = MLP(dim, ff_dim, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.attn.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, n, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        a = attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.attn.proj(a)
        return x + self.mlp(self.ln2(x))

    def forward_fused(self, x: torch.Tensor, h: torch.Tensor, crops: int,
                      following: nn.LayerNorm) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` on CUDA with fewer passes over the activations: x [crops·patches, dim], the
        residual stream, and h = ln1(x) → (x', following(x')). Each residual add runs with the
        LayerNorm after it (`residual_layernorm`), and fc1 applies GELU in its GEMM (`linear_gelu`):
        three elementwise passes a block instead of five."""
        rows, d = x.shape
        hd = d // self.n_heads
        q, k, v = self.attn.qkv(h).view(crops, rows // crops, 3, self.n_heads, hd).permute(2, 0, 3, 1, 4)
        a = attention(q, k, v, cudnn=VISION_CUDNN).transpose(1, 2).reshape(rows, d)
        x, h = _kernels.residual_layernorm(x, self.attn.proj(a), (), self.ln2)
        return _kernels.residual_layernorm(x, self.mlp.fc2(linear_gelu(h, self.mlp.fc1)), (), following)


class VisionEncoder(nn.Module):
    def __init__(self, config: MoondreamConfig, **factory) -> None:
        super().__init__()
        v = config.vision
        self.cfg = v
        self.patch_emb = nn.Linear(v.patch_dim, v.dim, **factory)
        self.pos_emb = nn.Parameter(torch.zeros(1, v.n_patches, v.dim, **factory))
        self.blocks = nn.ModuleList(VisionBlock(v.dim, v.n_heads, v.ff_dim, **factory) for _ in range(v.n_layers))
        self.post_ln = nn.LayerNorm(v.dim, **factory)
        self.proj_mlp = MLP(2 * v.dim, v.proj_inner_dim, config.text.dim, **factory)

    def encode_crops(self, crops: torch.Tensor, fused: bool = False) -> torch.Tensor:
        """[N, 3, S, S] normalised crops → [N, patches, dim] features (global crop first).
        `fused`: the blocks' `forward_fused` (CUDA and Triton; the runner asks for it when it runs
        the fused kernels), which rounds GELU once instead of twice."""
        x = self.patch_emb(patchify(crops, self.cfg.patch_size)) + self.pos_emb  # [N, patches, dim]
        if not fused:
            for block in self.blocks:
                x = block(x)
            return self.post_ln(x)
        n, patches, d = x.shape
        x = x.reshape(n * patches, d)
        h = self.blocks[0].ln1(x)
        following = [b.ln1 for b in self.blocks[1:]] + [self.post_ln]
        for block, ln in zip(self.blocks, following):
            x, h = block.forward_fused(x, h, n, ln)
        return h.view(n, patches, d)  # post_ln of the last block's output

    def project(self, features: torch.Tensor, tiling: tuple[int, int]) -> torch.Tensor:
        """Stitch the local tiles, pool them to one grid, and project [global | local] to text width.
        features [1 + th·tw, patches, dim] (global crop first) → [patches, text dim]."""
        return self.project_batch(features[:1], features[1:][None], tiling)[0]

    def project_batch(self, glob: torch.Tensor, local: torch.Tensor, tiling: tuple[int, int]) -> torch.Tensor:
        """`project` for B images of one tiling: glob [B, patches, dim], local [B, th·tw, patches, dim]
        → [B, patches, text dim]."""
        g = self.cfg.grid
        b, tiles = local.shape[:2]
        stitched = reconstruct_from_crops(local.reshape(b, tiles, g, g, -1), tiling, self.cfg.overlap_margin)
        pooled = pool_to_grid(stitched, g).to(glob.dtype)  # [B, g², dim]
        return self.proj_mlp(torch.cat([glob, pooled], dim=-1))

    def forward(self, crops: torch.Tensor, tiling: tuple[int, int]) -> torch.Tensor:
        return self.project(self.encode_crops(crops), tiling)
