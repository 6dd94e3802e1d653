"""The Moondream 2 network: vision tower, text decoder, region heads.

State-dict keys are exactly the official checkpoint's minus its leading `model.`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from engine.model.config import MoondreamConfig
from engine.model.image import OverlapCrops, normalize_crops
from engine.model.region import RegionModel
from engine.model.text import TextModel
from engine.model.vision import VisionEncoder

# Crops per vision-tower forward, by device type: on the CPU, 8 images of a few crops at once
# while a batch of 12-crop images stays within memory (attention materialises [crops, heads,
# patches, patches]); on a GPU (flash attention) a whole prefill step's crops in one pass.
VISION_BATCH = {"cpu": 32, "cuda": 128}


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
    def encode_images(self, images: list[OverlapCrops], fused: bool = False) -> torch.Tensor:
        """Overlap crops of B images → [B, prefix_len, D] embeddings: BOS followed by the projected
        image. The vision tower runs over the crops of all images together, `VISION_BATCH` crops
        at a time: one image at a time, the kernel launches of 27 small forwards, not the GPU,
        set the pace of prefill. Stitching and projection are per image (tilings differ).
        `fused`: the vision tower's fused blocks (`VisionEncoder.encode_crops`)."""
        crops = normalize_crops(torch.cat([(torch.from_numpy(np.ascontiguousarray(c.crops)) if isinstance(c.crops, np.ndarray)
                                            else c.crops).to(self.device) for c in images]), dtype=self.dtype)
        step = VISION_BATCH.get(self.device.type, VISION_BATCH["cpu"])
        features = torch.cat([self.vision.encode_crops(crops[i:i + step], fused) for i in range(0, crops.shape[0], step)])
        starts = np.cumsum([0] + [c.n_crops for c in images[:-1]]).tolist()
        by_tiling: dict[tuple[int, int], list[int]] = {}
        for n, c in enumerate(images):
            by_tiling.setdefault(tuple(c.tiling), []).append(n)
        projected = [None] * len(images)
        for tiling, members in by_tiling.items():  # one stitch/pool/projection per tiling
            tiles = tiling[0] * tiling[1]
            glob = features[[starts[n] for n in members]]  # [G, patches, dim]
            local = torch.stack([features[starts[n] + 1:starts[n] + 1 + tiles] for n in members])
            for n, out in zip(members, self.vision.project_batch(glob, local, tiling)):
                projected[n] = out
        projected = torch.stack(projected)  # [B, patches, text dim]
        bos = self.text.wte[self.config.tokens.bos_id].expand(len(images), 1, -1)
        return torch.cat([bos, projected], dim=1)

    def encode_crops_of_one(self, crops: torch.Tensor, tiling: tuple[int, int], fused: bool = False) -> torch.Tensor:
        """`encode_images` of one image whose uint8 crops [1 + th·tw, S, S, 3] are on the device:
        only slices and fixed shapes (no host index lists), so it can be captured in a CUDA graph.
        → [1, prefix_len, D]."""
        features = self.vision.encode_crops(normalize_crops(crops, dtype=self.dtype), fused)  # [N, patches, dim]
        projected = self.vision.project_batch(features[:1], features[1:][None], tiling)  # [1, patches, text dim]
        return torch.cat([self.text.wte[self.config.tokens.bos_id].expand(1, 1, -1), projected], dim=1)

    def encode_image(self, crops: OverlapCrops) -> torch.Tensor:
        """One image: [1, prefix_len, D]."""
        return self.encode_images([crops])

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return self.text.wte[ids]
