"""`Runner`: what the engine needs from a device worker.

`engine.worker.runner.ModelRunner` is the real one (model, KV cache, streams, CUDA graphs);
tests drive the scheduler, zombies, cancellation and deadlines through a CPU fake with no
model (`tests/fake_runner.py`). Slots are named by index, as `PipelineState` hands them out.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from engine.worker.slots import StepResults


class Runner(Protocol):
    rows: int          # KV rows (= the largest decode batch)
    scratch_pos: int   # the KV position padding rows write to; requests must end before it

    def batch_bucket(self, rows_needed: int) -> int: ...

    def attn_bucket(self, max_position: int) -> int: ...

    def upload_mask_rows(self, table: np.ndarray, num_rows: int, start: int | None = None) -> None:
        """Copy grammar mask-table rows registered since the last call (or from `start` on) to the device."""

    def launch_prefill(self, items: list[Any]) -> None:
        """Enqueue the prefill of `items` (PrefillItem): new images into their prefix slots, each row
        pointed at its slot, then the prompts."""

    def launch_decode(self, slot: int, batch: int, positions: np.ndarray, attn_len: int) -> None:
        """Enqueue the decode forward of rows 0..batch-1. A mixed step calls it before `launch_prefill`
        (whose rows are padding here); one `finalize` then samples both."""

    def finalize(self, slot: int, batch: int, state_ids: np.ndarray, active: np.ndarray) -> None: ...

    def read_results(self, slot: int, batch: int, rows: list[int]) -> StepResults: ...

    def synchronize(self) -> None: ...

    def reset_slots(self) -> None: ...

    def slots_unread(self) -> int: ...
