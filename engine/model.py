"""The Moondream 2 network: vision tower, text decoder, region heads.

State-dict keys are exactly the official checkpoint's minus its leading `model.`.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.config import MoondreamConfig
from engine.image import OverlapCrops, normalize_crops
from engine.region import RegionModel
from engine.text import TextModel
from engine.vision import VisionEncoder


class MoondreamModel(nn.Module):
    def __init__(self, config: MoondreamConfig, *, device=None, dtype=None) -> None:
        super().__init__()
        config.validate()
        self.config = config
        factory = {"device": device, "dtype": dtype}
        self.vision = VisionEncoder(config, **factory)
        self.text = TextModel(config, **factory)
        self.region = RegionModel(config, **factory)

    @property
    def device(self) -> torch.device:
        return self.text.wte.device

    @property
    def dtype(self) -> torch.dtype:
        return self.text.wte.dtype

    @torch.inference_mode()
    def encode_image(self, crops: OverlapCrops) -> torch.Tensor:
        """Overlap crops → [1, prefix_len, D] embeddings: BOS followed by the projected image."""
        x = normalize_crops(crops.crops, dtype=self.dtype, device=self.device)
        image = self.vision(x, crops.tiling)
        bos = self.text.wte[self.config.tokens.bos_id][None]
        return torch.cat([bos, image], dim=0)[None]

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text.wte[ids]
