"""Deepening a trained model without changing what it computes: `grow(model, text_layers=N, vision_layers=M)`.

New blocks go just before the last block of their tower (the text tower's last layer has a job
of its own in training: its attention is what the grounding loss supervises). Each new block is
a copy of the block below it with its output projections (attention `proj`, MLP `fc2`: weights and
biases) set to zero, so it adds nothing to the residual stream (both towers are residual: the
text blocks parallel, the vision blocks sequential), and the grown model's outputs equal the
original's. Training then has the new blocks to use: their output projections get gradients
at once, the rest from the step after. `engine.train --init DIR --grow-text-layers N
--grow-vision-layers M` starts from such a model.
"""

from __future__ import annotations

import dataclasses

import torch

from engine.model.config import MoondreamConfig
from engine.model.moondream import MoondreamModel

ZEROED = ("attn.proj.", "mlp.fc2.")   # a block's writes to the residual stream


def with_depth(config: MoondreamConfig, text_layers: int, vision_layers: int) -> MoondreamConfig:
    return dataclasses.replace(config, text=dataclasses.replace(config.text, n_layers=text_layers),
                               vision=dataclasses.replace(config.vision, n_layers=vision_layers))


def grown_config(config: MoondreamConfig, *, text_layers: int = 0, vision_layers: int = 0) -> MoondreamConfig:
    if text_layers < 0 or vision_layers < 0:
        raise ValueError(f"layers to add must be 0 or more, got text {text_layers}, vision {vision_layers}")
    return with_depth(config, config.text.n_layers + text_layers, config.vision.n_layers + vision_layers)


def with_tiling_of(a: MoondreamConfig, b: MoondreamConfig) -> MoondreamConfig:
    """`a` with `b`'s tiling cap (`vision.max_crops`): the crop path's limit, not a weight's shape, so a
    checkpoint served with more tiles than its preset's still continues training (with its own cap)."""
    return dataclasses.replace(a, vision=dataclasses.replace(a.vision, max_crops=b.vision.max_crops))


def same_but_depth(a: MoondreamConfig, b: MoondreamConfig) -> bool:
    """Whether two configs differ at most in their towers' layer counts (what `grow` changes)."""
    return with_depth(a, b.text.n_layers, b.vision.n_layers) == b


def _grown_tower(state: dict[str, torch.Tensor], tower: str, layers: int, added: int) -> dict[str, torch.Tensor]:
    """`state`'s `{tower}.blocks.*` entries renumbered for `added` blocks inserted before the last one."""
    prefix = f"{tower}.blocks."
    out = {k: v for k, v in state.items() if not k.startswith(prefix)}
    source = max(0, layers - 2)   # the block below the insertion point (the only one in a 1-layer tower)
    for key, value in state.items():
        if not key.startswith(prefix):
            continue
        index, rest = key[len(prefix):].split(".", 1)
        index = int(index)
        out[f"{prefix}{index if index < layers - 1 else index + added}.{rest}"] = value
        if index == source:
            for k in range(added):
                out[f"{prefix}{layers - 1 + k}.{rest}"] = torch.zeros_like(value) if rest.startswith(ZEROED) else value.clone()
    return out


@torch.no_grad()
def grow(model: MoondreamModel, *, text_layers: int = 0, vision_layers: int = 0) -> MoondreamModel:
    """A new model, `text_layers` / `vision_layers` blocks deeper, computing what `model` computes."""
    config = grown_config(model.config, text_layers=text_layers, vision_layers=vision_layers)
    state = model.state_dict()
    state = _grown_tower(state, "text", model.config.text.n_layers, text_layers)
    state = _grown_tower(state, "vision", model.config.vision.n_layers, vision_layers)
    grown = MoondreamModel(config, device=model.device, dtype=model.dtype)
    grown.load_state_dict(state, strict=True)
    return grown.train(model.training)
