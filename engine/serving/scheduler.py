"""`Scheduler`: CPU bookkeeping only — queues, KV rows, step plans, commit.

It never touches tensors. It owns the queues: requests wait in `waiting` until `admit`
gives them a KV row; it decides which sequences a step carries, and at commit it advances
each row's grammar automaton by the committed token, records objects, finishes sequences,
turns those still in flight into zombies and releases rows at `inflight_refs == 0`.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

import numpy as np

from engine.serving.errors import Cancelled, DeadlineExceeded, RequestError
from engine.serving.sequence import Sequence, Status
from engine.serving.skills import ObjectBuilder
from engine.worker.slots import StepResults


P = TypeVar("P")


@dataclass
class Admitted(Generic[P]):
    seq: Sequence
    prefix: P | None  # the cached image prefix, or None: the image must be encoded


@dataclass
class DecodePlan:
    rows: list[int]
    batch: int
    positions: np.ndarray  # [batch] write position per row; scratch for padding
    attn_len_needed: int  # highest active position + 1


class Scheduler:
    def __init__(self, rows: int, scratch_pos: int, prefix_len: int, coord_id: int, size_id: int,
                 eos_id: int, repeat_guard: bool = True, on_release: Callable[[Sequence], None] = lambda seq: None) -> None:
        self.rows = rows
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}  # row → sequence (finalized zombies included)
        self.free_rows = list(range(rows))
        heapq.heapify(self.free_rows)
        self.scratch_pos, self.prefix_len = scratch_pos, prefix_len
        self.coord_id, self.size_id, self.eos_id = coord_id, size_id, eos_id
        self.repeat_guard = repeat_guard
        self.on_release = on_release  # called once per released row (the engine frees its prefix slot)
        self.retired = 0  # sequences done with: row released, or dropped from the queue (each once)

    # ---- admission ----------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def queued(self) -> int:
        return len(self.waiting)

    def rows_in_use(self) -> int:
        return self.rows - len(self.free_rows)

    def rows_free(self) -> int:
        return len(self.free_rows)

    def admit(self, new_images: int, cached: int, cached_prefix: Callable[[str], P | None],
              ready: Callable[[Sequence], bool], bucket: Callable[[int], int] | None = None) -> list[Admitted[P]]:
        """Give waiting requests, in order, a KV row reserved for their whole answer: at most
        `new_images` whose image must be encoded and `cached` whose prefix is cached.

        `cached_prefix(image_key)` returns where the image's prefix already is (its slot) or None; `ready(seq)` says
        whether a request that must be encoded has its crops. Admission stops at the first request
        that cannot go now (over a limit, crops not ready, or its image already being encoded in
        this batch: it will hit the cache next step), so requests start in arrival order.

        `bucket(rows)` (the runner's decode batch bucket) keeps the decode batch small: a request
        whose row would raise the bucket of the decoding rows waits while a finished row that would
        raise it less is still riding a launched step (a zombie, released at the next commit).
        Decode steps cost with the bucket (rows 0..B-1 are computed), so one step of waiting beats
        running every later step of its answer at the larger bucket.
        """
        admitted: list[Admitted[P]] = []
        encoding: set[str] = set()
        hits = 0
        live = max((r for r, s in self.running.items() if not s.finalized), default=-1)  # highest decoding row
        zombie = min((r for r, s in self.running.items() if s.finalized), default=self.rows)  # lowest zombie row
        while self.waiting and self.free_rows:
            seq = self.waiting[0]
            prefix = cached_prefix(seq.image_key)
            if prefix is None and (len(encoding) >= new_images or seq.image_key in encoding or not ready(seq)):
                break
            if prefix is not None and hits >= cached:
                break
            if bucket is not None and zombie < self.rows:
                size = bucket(live + 1) if live >= 0 else 0   # the decode bucket now (0: nothing decodes)
                grown = bucket(self.free_rows[0] + 1)
                if grown > size and bucket(zombie + 1) < grown:
                    break  # this row would raise the bucket; a zombie's row, freed at the next commit, would not
            self.waiting.popleft()
            start = self.prefix_len + len(seq.prompt)
            row = heapq.heappop(self.free_rows)
            self.start(seq, row, start, start + seq.budget)
            live = max(live, row)
            if prefix is None:
                encoding.add(seq.image_key)
            else:
                hits += 1
            admitted.append(Admitted(seq, prefix))
        return admitted

    def start(self, seq: Sequence, row: int, position: int, end_position: int) -> None:
        seq.row, seq.position, seq.end_position = row, position, end_position
        seq.status = Status.RUNNING
        seq.builder = seq.make_builder() if seq.make_builder is not None else ObjectBuilder(seq.skill, guard=self.repeat_guard)
        self.running[row] = seq

    def requeue(self, seq: Sequence) -> None:
        """Undo `start` for a request that cannot run yet: its row back to the pool, first in line."""
        assert self.running.pop(seq.row) is seq
        heapq.heappush(self.free_rows, seq.row)
        seq.row, seq.status, seq.builder = -1, Status.WAITING, None
        self.waiting.appendleft(seq)

    # ---- launch -------------------------------------------------------------------------
    def decode_plan(self, bucket) -> DecodePlan | None:
        rows = sorted(r for r, s in self.running.items() if s.can_launch())
        if not rows:
            return None
        batch = bucket(rows[-1] + 1)
        positions = np.full(batch, self.scratch_pos, dtype=np.int64)
        for r in rows:
            positions[r] = self.running[r].position
        return DecodePlan(rows, batch, positions, int(positions[rows].max()) + 1)

    def on_launch(self, rows: list[int], advance_position: bool) -> None:
        for r in rows:
            seq = self.running[r]
            seq.inflight_refs += 1
            if advance_position:
                seq.position += 1

    def mask_states(self, rows: list[int], batch: int) -> tuple[np.ndarray, np.ndarray]:
        """Global grammar-state ids and active flags for finalize; zombies/padding are unconstrained."""
        states = np.zeros(batch, dtype=np.int64)
        active = np.zeros(batch, dtype=np.int64)
        for r in rows:
            seq = self.running[r]
            if not seq.finalized:
                states[r] = seq.mask_rows[seq.state]
                active[r] = 1
        return states, active

    # ---- commit -------------------------------------------------------------------------
    def commit(self, rows: list[int], results: StepResults) -> None:
        for r in rows:
            seq = self.running[r]
            seq.inflight_refs -= 1
            if not seq.finalized:
                self._consume(seq, int(results.tokens[r]), float(results.coords[r]), results.sizes[r], results.probs[r])
            if seq.finalized and seq.inflight_refs == 0:
                self.release(seq)

    def _consume(self, seq: Sequence, token: int, coord: float, size: np.ndarray, probs: np.ndarray) -> None:
        """probs: [4] p(coord vs EOS), p(coordinate), p(width), p(height) (StepResults.probs)."""
        if token == self.eos_id:
            if seq.automaton.accepts_eos(seq.state):
                self.finish(seq)
            else:
                self.finish(seq, RuntimeError(f"request {seq.id}: EOS sampled where the grammar forbids it"))
            return
        try:
            seq.state = seq.automaton.advance(seq.state, token)
        except ValueError as e:  # GrammarViolation
            self.finish(seq, e)
            return
        obj = None
        if token == self.coord_id:
            obj = seq.builder.add_coord(coord, float(probs[0]), float(probs[1]))
        elif token == self.size_id:
            obj = seq.builder.add_size(float(size[0]), float(size[1]), float(probs[2]), float(probs[3]))
        else:
            obj = seq.builder.add_token(token)  # a text chunk (query/caption)
        if obj is not None and seq.on_object is not None:
            try:
                seq.on_object(obj)
            except Exception as e:  # a failing stream consumer ends its own request only
                self.finish(seq, e)
                return
        if seq.builder.repeated or seq.automaton.must_stop(seq.state):   # repetition guard: stop at a duplicate
            self.finish(seq)
        elif seq.builder.at_limit():  # max_tokens: done if the grammar may end here
            self.finish(seq, None if seq.automaton.accepts_eos(seq.state) else RequestError(
                f"request {seq.id}: the answer did not complete within max_tokens={seq.budget}; raise max_tokens"))
        elif seq.position >= seq.end_position and seq.inflight_refs == 0:
            self.finish(seq, RuntimeError(f"request {seq.id}: token budget exhausted before the grammar ended"))

    def finish(self, seq: Sequence, error: BaseException | None = None) -> None:
        """Deliver the result now; the row stays until no launched step still reads it."""
        if seq.finalized:
            return
        seq.finalized = True
        seq.status = Status.DONE
        if not seq.future.done():
            if error is None:
                try:
                    seq.future.set_result(seq.builder.result())
                except Exception as e:  # a result that cannot be built fails its own request only
                    seq.future.set_exception(e)
            else:
                seq.future.set_exception(error)

    def release(self, seq: Sequence) -> None:
        if seq.status is Status.RELEASED:
            raise RuntimeError(f"sequence {seq.id} released twice")
        assert self.running.pop(seq.row) is seq
        heapq.heappush(self.free_rows, seq.row)
        seq.status = Status.RELEASED
        self.retired += 1
        self.on_release(seq)

    def abort_all(self, error: BaseException) -> None:
        """Last resort after a device failure: fail every request and free every row.

        The caller must have synchronised the device: no launched step may still read a row."""
        for seq in list(self.waiting) + list(self.running.values()):
            if not seq.future.done():
                seq.future.set_exception(error)
        self.retired += len(self.waiting)
        self.waiting.clear()
        for seq in list(self.running.values()):
            seq.finalized, seq.inflight_refs = True, 0
            self.release(seq)

    # ---- cancellation and deadlines ------------------------------------------------------
    def reap(self, now: float) -> None:
        """Finish cancelled or overdue requests (deadlines against `now`, the engine's clock);
        release rows that nothing in flight reads."""
        for seq in [s for s in self.waiting if self._stop_reason(s, now)]:
            self.waiting.remove(seq)
            seq.finalized, seq.status = True, Status.RELEASED
            if not seq.future.done():
                seq.future.set_exception(self._stop_reason(seq, now))
            self.retired += 1
        for seq in list(self.running.values()):
            if not seq.finalized and (reason := self._stop_reason(seq, now)):
                self.finish(seq, reason)
            if seq.finalized and seq.inflight_refs == 0:
                self.release(seq)

    @staticmethod
    def _stop_reason(seq: Sequence, now: float) -> BaseException | None:
        if seq.cancel_requested.is_set() or seq.future.cancelled():
            return Cancelled(f"request {seq.id} was cancelled")
        if seq.deadline is not None and now > seq.deadline:
            return DeadlineExceeded(f"request {seq.id} missed its deadline")
        return None

    def is_idle(self) -> bool:
        return not self.waiting and not self.running
