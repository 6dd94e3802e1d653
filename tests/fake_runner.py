"""`FakeRunner`: the `engine.worker.protocol.Runner` protocol on the CPU with no model.

The engine, scheduler, pipeline and grammar masks run for real; only the forward and the
sampling are replaced by a scripted policy, so scheduling, zombies, cancellation and deadlines
are tested in milliseconds. The policy is deterministic per request: its prompt decides how
many objects it emits (`objects_for(prompt)`), the grammar mask decides every other choice,
and the coordinates are a function of (prompt, token index) — so a request gets the same
result whatever its row, its batch-mates or the mode (pipelined or blocking).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.worker.pipeline import PipelineError
from engine.worker.slots import StepResults


@dataclass
class RowScript:
    target: int          # objects this request will try to emit
    seed: int            # from the prompt: coordinates depend on it, not on the row or the schedule
    begun: int = 0       # objects started (coord chosen where coord or EOS was allowed)
    tokens: int = 0      # tokens sampled for it so far


@dataclass
class FakeSlot:
    batch: int = 0
    results: StepResults | None = None
    unread: bool = False
    launched: bool = False


@dataclass
class FakeRunner:
    rows: int
    max_len: int
    coord_id: int
    size_id: int
    eos_id: int
    vocab_size: int
    mask_capacity: int = 256
    objects_for: Callable[[list[int]], int] = lambda prompt: 1 + sum(prompt) % 4
    scripts: dict[int, RowScript] = field(default_factory=dict)
    slots: list[FakeSlot] = field(default_factory=lambda: [FakeSlot(), FakeSlot()])
    prefills: list[list[int]] = field(default_factory=list)   # rows of each prefill step, for tests
    encoded: int = 0                                          # images encoded (prefix-cache misses)
    admitted: int = 0

    def __post_init__(self) -> None:
        self.scratch_pos = self.max_len - 1
        self.allowed = np.ones((self.mask_capacity, self.vocab_size), dtype=bool)
        self.pending_prefill: list[int] = []

    # ---- shapes ------------------------------------------------------------------------
    def batch_bucket(self, rows_needed: int) -> int:
        return rows_needed

    def attn_bucket(self, max_position: int) -> int:
        return min(max_position + 1, self.max_len)

    def upload_mask_rows(self, table: np.ndarray, num_rows: int, start: int | None = None) -> None:
        self.allowed[:num_rows] = table[:num_rows]

    # ---- forwards ----------------------------------------------------------------------
    def launch_prefill(self, items) -> None:
        self.prefills.append([item.row for item in items])
        for item in items:
            self.scripts[item.row] = RowScript(self.objects_for(item.prompt), sum(i * (k + 1) for k, i in enumerate(item.prompt)))
            self.admitted += 1
            if item.crops is not None:
                self.encoded += 1

    def launch_decode(self, slot: int, batch: int, positions: np.ndarray, attn_len: int) -> None:
        if self.slots[slot].launched:
            raise PipelineError(f"fake slot {slot} launched twice")
        self.slots[slot].launched = True

    def finalize(self, slot: int, batch: int, state_ids: np.ndarray, active: np.ndarray) -> None:
        s = self.slots[slot]
        if s.unread:
            raise PipelineError(f"fake slot {slot}: results would be overwritten before commit read them")
        tokens = np.full(batch, self.eos_id, dtype=np.int64)
        coords = np.zeros(batch, dtype=np.float32)
        sizes = np.zeros((batch, 2), dtype=np.float32)
        probs = np.ones((batch, 4), dtype=np.float32)
        for row in range(batch):
            if not active[row]:
                continue  # padding or zombie: its sample is ignored, its script untouched
            script = self.scripts[row]
            tokens[row] = self._choose(self.allowed[state_ids[row]], script)
            script.tokens += 1
            coords[row] = ((script.seed * 37 + script.tokens * 11) % 97) / 97.0
            sizes[row] = (0.05 + (script.tokens % 5) / 20.0, 0.1)
            probs[row] = (1.0 if tokens[row] != self.coord_id else 0.5 + (script.seed % 5) / 10.0, 0.9, 0.8, 0.7)
        s.results, s.batch, s.unread, s.launched = StepResults(tokens, coords, sizes, probs), batch, True, False

    def _choose(self, allowed: np.ndarray, script: RowScript) -> int:
        if allowed[self.coord_id] and allowed[self.eos_id]:
            if script.begun < script.target:
                script.begun += 1
                return self.coord_id
            return self.eos_id
        for token in (self.coord_id, self.size_id, self.eos_id):
            if allowed[token]:
                return token
        raise AssertionError("the grammar allows none of coord, size, EOS")

    def read_results(self, slot: int, batch: int, rows: list[int]) -> StepResults:
        s = self.slots[slot]
        if not s.unread or s.results is None:
            raise PipelineError(f"fake slot {slot}: commit read results that were never written")
        s.unread = False
        out, s.results = s.results, None
        return StepResults(out.tokens[:batch], out.coords[:batch], out.sizes[:batch], out.probs[:batch])

    # ---- housekeeping ------------------------------------------------------------------
    def synchronize(self) -> None:
        pass

    def reset_slots(self) -> None:
        for s in self.slots:
            s.results, s.unread, s.launched = None, False, False

    def slots_unread(self) -> int:
        return sum(s.unread for s in self.slots)
