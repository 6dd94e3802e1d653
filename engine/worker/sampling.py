"""`Sampler`: a step's sampling on the device, and `SampleHeads`, what one step's sampling computes.

From the rows' last hidden states (the forwards leave only those): logits, the grammar masks, the
greedy token, the region decoders' values and their probabilities (an object's score), then the
next forward's inputs — the pending token and coord/size values and their input embeddings — so
nothing goes through the CPU between two forwards. `ModelRunner.finalize` runs it as a CUDA graph
per (slot, batch bucket, `SampleHeads`).

The host knows every active row's grammar state at finalize, so sampling computes only what those
states can use: when every active row is a point/detect row (whose grammars emit only coord, size
and EOS), the logits of those three tokens instead of the whole vocabulary, only the region decoder
some row can take, and only the input embeddings of the values it decoded; there the fused Triton
kernels (`engine.kernels.sample`) replace ~30 small PyTorch kernels where the fused kernels run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.kernels import choose_spatial, region_bins
from engine.model.moondream import MoondreamModel
from engine.model.region import more_probability, value_table, window_reach
from engine.worker.slots import DecodeSlot


@dataclass(frozen=True)
class SampleHeads:
    """What one step's sampling computes, chosen at finalize from the active rows' grammar states.

    full: logits over the whole vocabulary (some row may emit a token other than coord, size or
    EOS); else only those three. coord / size: the region decoder whose value some row may take
    (its state allows that token). Every variant writes the three tokens' logits with the same
    small GEMM, so a point/detect row's choice and scores do not depend on what shares its batch."""

    full: bool
    coord: bool
    size: bool

    @classmethod
    def variants(cls) -> list[SampleHeads]:
        """Every variant `Sampler.heads` gives: the full vocabulary takes both decoders."""
        return [cls(True, True, True)] + [cls(False, c, s) for c in (True, False) for s in (True, False)]


ALL = SampleHeads(True, True, True)


class Sampler:
    """The grammar masks' device table, the next forward's inputs (`pending_*`, `embeds`) and the
    sampling of rows 0..B-1; `fused`: point/detect steps run `engine.kernels.sample`."""

    def __init__(self, model: MoondreamModel, *, max_batch: int, mask_capacity: int, fused: bool) -> None:
        cfg = model.config
        self.model, self.cfg, self.fused = model, cfg, fused
        dev, dt, v, d = model.device, model.dtype, cfg.text.vocab_size, cfg.text.dim
        self.pending_token = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self.pending_coord = torch.zeros(max_batch, 1, dtype=torch.float32, device=dev)
        self.pending_size = torch.zeros(max_batch, 2, dtype=torch.float32, device=dev)
        self.embeds = torch.zeros(max_batch, d, dtype=dt, device=dev)  # the next decode forward's inputs
        self.logits = torch.zeros(max_batch, v, dtype=dt, device=dev)  # written by full-vocabulary sampling only
        self.allowed = torch.ones(mask_capacity, v, dtype=torch.bool, device=dev)
        # The point/detect tokens (ascending, as the full argmax breaks ties), their rows of the
        # LM head, their logits at the last sampling, and per mask row: their columns of `allowed`
        # on the device; on the host whether the row allows a token outside them, coord, size.
        tok = cfg.tokens
        self.spatial_ids = sorted({tok.coord_id, tok.size_id, tok.eos_id})
        self.spatial_index = torch.tensor(self.spatial_ids, device=dev)
        head = model.text.lm_head
        self.spatial_weight = head.weight.detach()[self.spatial_ids].clone()  # [3, D]
        self.spatial_bias = head.bias.detach()[self.spatial_ids].clone()
        self.spatial_logits = torch.zeros(max_batch, len(self.spatial_ids), dtype=dt, device=dev)
        self.spatial_cols = (self.spatial_ids.index(tok.coord_id), self.spatial_ids.index(tok.eos_id))
        self.allowed_spatial = torch.ones(mask_capacity, len(self.spatial_ids), dtype=torch.bool, device=dev)
        self.mask_needs = np.ones((mask_capacity, 3), dtype=np.bool_)  # [row, (outside, coord, size)]
        r = cfg.region
        self.bin_values = {kind: value_table(kind, n, dev) for kind, n in (("coord", r.coord_bins), ("size", r.size_bins))}
        self.heads_log: list[SampleHeads] | None = None  # benchmarks: a list records every step's SampleHeads

    def load_mask_rows(self, start: int, rows: np.ndarray, rows_device: torch.Tensor) -> None:
        """Grammar-state rows start.. of the mask table (bool [n, V]), on the host and on the device."""
        end = start + len(rows)
        outside = rows.copy()
        outside[:, self.spatial_ids] = False
        tok = self.cfg.tokens
        self.mask_needs[start:end] = np.stack([outside.any(1), rows[:, tok.coord_id], rows[:, tok.size_id]], 1)
        self.allowed[start:end].copy_(rows_device)
        self.allowed_spatial[start:end] = self.allowed[start:end][:, self.spatial_index]

    def heads(self, states: np.ndarray) -> SampleHeads:
        """What sampling must compute for active rows in grammar states (mask rows) `states`."""
        outside, coord, size = self.mask_needs[states].any(0) if states.size else (False, False, False)
        heads = ALL if outside else SampleHeads(False, bool(coord), bool(size))
        if self.heads_log is not None:
            self.heads_log.append(heads)
        return heads

    def sample(self, slot: DecodeSlot, hidden: torch.Tensor, heads: SampleHeads) -> None:
        """The graph body of finalize for rows 0..B-1 (hidden [B, D]): logits, masked greedy token,
        region values, their probabilities (the scores' factors), pending inputs and the next
        forward's embeddings (`embed_pending`). A region decoder `heads` leaves out writes NaN values
        and probabilities: no active row can take them at this step."""
        model, batch = self.model, hidden.shape[0]
        states, active = slot.meta_dev[0, :batch], slot.meta_dev[1, :batch]
        h = model.text.post_ln(hidden)
        spatial = torch.addmm(self.spatial_bias, h, self.spatial_weight.t(), out=self.spatial_logits[:batch])  # [B, 3]
        if self.fused and not heads.full:
            self._sample_fused(slot, hidden, heads, spatial)
            return
        act = active.bool()
        if heads.full:
            logits = model.text.lm_head(h)  # [B, V]
            logits[:, self.spatial_index] = spatial
            self.logits[:batch] = logits
            token = logits.masked_fill(~self.allowed.index_select(0, states), float("-inf")).argmax(-1)  # a row gather, not an index kernel
        else:
            allowed = self.allowed_spatial.index_select(0, states)
            token = self.spatial_index[spatial.masked_fill(~allowed, float("-inf")).argmax(-1)]
        more = more_probability(spatial, *self.spatial_cols)
        nan = torch.full((batch, 3), float("nan"), dtype=torch.float32, device=hidden.device)
        coord, p_coord = model.region.decode_coord_p(hidden) if heads.coord else (nan[:, :1], nan[:, :1])  # [B, 1] each
        size, p_size = model.region.decode_size_p(hidden) if heads.size else (nan[:, 1:], nan[:, 1:])  # [B, 2] each
        slot.probs_dev[:batch] = torch.cat([more[:, None], p_coord, p_size], -1)
        self.pending_token[:batch] = torch.where(act, token, self.pending_token[:batch])
        if heads.coord:
            self.pending_coord[:batch] = torch.where(act[:, None], coord, self.pending_coord[:batch])
        if heads.size:
            self.pending_size[:batch] = torch.where(act[:, None], size, self.pending_size[:batch])
        slot.tokens_dev[:batch] = token
        slot.coords_dev[:batch] = coord[:, 0]
        slot.sizes_dev[:batch] = size
        self.embed_pending(batch, heads, active)

    def _sample_fused(self, slot: DecodeSlot, hidden: torch.Tensor, heads: SampleHeads, spatial: torch.Tensor) -> None:
        """`sample` of point/detect rows in three kernels besides the region decoders' GEMMs."""
        region, cfg, batch = self.model.region, self.cfg.region, hidden.shape[0]
        states, active, probs = slot.meta_dev[0, :batch], slot.meta_dev[1, :batch], slot.probs_dev[:batch]
        choose_spatial(spatial, self.allowed_spatial, states, active, self.spatial_index, *self.spatial_cols,
                       self.pending_token[:batch], slot.tokens_dev[:batch], probs, slot.coords_dev[:batch],
                       slot.sizes_dev[:batch])
        if heads.coord:
            region_bins(region.coord_logits(hidden)[:, None], active, window_reach(cfg.coord_bins),
                        self.bin_values["coord"], self.pending_coord[:batch], slot.coords_dev[:batch], probs, 1)
        if heads.size:
            region_bins(region.size_logits(hidden), active, window_reach(cfg.size_bins),
                        self.bin_values["size"], self.pending_size[:batch], slot.sizes_dev[:batch], probs, 2)
        self.embed_pending(batch, heads, active)

    def embed_pending(self, batch: int, heads: SampleHeads = ALL, active: torch.Tensor | None = None) -> None:
        """`embeds` of rows 0..batch-1 from their pending token and region values: the token's
        embedding, or the region encoder's of a coord / size value. `heads` says which kinds a row
        can hold (the sampling variant that chose them): a point/detect step encodes only the values
        it decoded, and no token embedding (the only other token, EOS, ends the request). With
        `active` ([B] long) inactive rows keep theirs."""
        model, tok = self.model, self.cfg.tokens
        token = self.pending_token[:batch]
        coord = model.region.encode_coord(self.pending_coord[:batch]) if heads.coord else None
        size = model.region.encode_size(self.pending_size[:batch]) if heads.size else None
        if heads.full:
            embeds = torch.where((token == tok.coord_id)[:, None], coord,
                                 torch.where((token == tok.size_id)[:, None], size, model.embed_ids(token)))
        elif coord is not None and size is not None:
            embeds = torch.where((token == tok.coord_id)[:, None], coord, size)
        elif coord is not None or size is not None:
            embeds = coord if coord is not None else size
        else:
            return  # every active row chose EOS
        embeds = embeds.to(model.dtype)
        self.embeds[:batch] = embeds if active is None else torch.where(active.bool()[:, None], embeds, self.embeds[:batch])
