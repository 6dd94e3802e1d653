"""`DecodeSlot`: the fixed working set of one in-flight step (two of them ping-pong).

Host buffers are pinned on CUDA so both copies are truly asynchronous. They are allocated
once; the pipeline state machine guarantees a slot is reused only after its commit read it.
After reading, commit poisons the result buffers, and finalize refuses to write into a slot
whose previous results were never read — so an ordering bug fails loudly instead of
silently mixing two steps' tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.worker.pipeline import PipelineError
from engine.worker.streams import Streams

POISON_TOKEN = -1


@dataclass
class StepResults:
    """Host copies of one step's sampled tokens and decoded region values."""

    tokens: np.ndarray  # [B] int64
    coords: np.ndarray  # [B] float32
    sizes: np.ndarray  # [B, 2] float32
    probs: np.ndarray  # [B, 4] float32: p(coord vs EOS), p(coordinate), p(width), p(height) (within ±1 % of the value)


class DecodeSlot:
    def __init__(self, index: int, rows: int, streams: Streams, device: torch.device) -> None:
        self.index = index
        # Inputs, written by the CPU: positions at launch; [grammar state id; active flag] at finalize.
        self.positions = streams.pinned(rows, dtype=torch.long)
        self.meta = streams.pinned(2, rows, dtype=torch.long)
        self.meta_dev = torch.zeros(2, rows, dtype=torch.long, device=device)
        # Outputs of sampling: device buffers and their pinned landing zone.
        self.tokens_dev = torch.zeros(rows, dtype=torch.long, device=device)
        self.coords_dev = torch.zeros(rows, dtype=torch.float32, device=device)
        self.sizes_dev = torch.zeros(rows, 2, dtype=torch.float32, device=device)
        self.probs_dev = torch.zeros(rows, 4, dtype=torch.float32, device=device)
        self.tokens = streams.pinned(rows, dtype=torch.long)
        self.coords = streams.pinned(rows, dtype=torch.float32)
        self.sizes = streams.pinned(rows, 2, dtype=torch.float32)
        self.probs = streams.pinned(rows, 4, dtype=torch.float32)
        self.mask_ready = streams.event()  # copy stream: meta uploaded
        self.sampled = streams.event()  # compute stream: tokens/values written
        self.copied = streams.event()  # copy stream: results landed on the host
        self.unread = False
        self.poison()

    def poison(self) -> None:
        self.tokens.fill_(POISON_TOKEN)
        self.coords.fill_(float("nan"))
        self.sizes.fill_(float("nan"))
        self.probs.fill_(float("nan"))

    def claim_for_results(self) -> None:
        if self.unread:
            raise PipelineError(f"slot {self.index}: results would be overwritten before commit read them")
        self.unread = True

    def read_results(self, batch: int, rows: list[int]) -> StepResults:
        """Copy out the first `batch` rows (after `copied` completed), then poison the buffers."""
        self.copied.synchronize()
        out = StepResults(self.tokens[:batch].numpy().copy(), self.coords[:batch].numpy().copy(),
                          self.sizes[:batch].numpy().copy(), self.probs[:batch].numpy().copy())
        if rows and (out.tokens[rows] == POISON_TOKEN).any():
            raise PipelineError(f"slot {self.index}: commit read results that were never written")
        self.poison()
        self.unread = False
        return out

    def reset(self) -> None:
        """After a failed step: forget unread results and poison the buffers."""
        self.poison()
        self.unread = False
