"""Per-state mask table: a batch's masks are one gather by global state id.

Each distinct allowed set gets one row, both as bools and as a packed int32 bitmask (bit i of
word i // 32); `register` maps every state of an automaton to the row of its allowed set.
States share rows: point/detect of *any* max_objects use the same four sets ({coord, eos},
{coord}, {size}, {eos}), so a server that sees every max_objects from 1 to 200 still holds a
handful of rows — a row per state would fill any fixed capacity. A step then needs only the
rows' ids: `fill` / `fill_bitmask` gather on the host, or the engine keeps a device copy of
`allowed[:num_rows]` (refreshed when `version` changes) and uploads the ids alone. A large
JSON-schema automaton costs distinct-sets x vocab bytes, the price of precomputed masks.

Row 0 is the unconstrained state (every token allowed) for padding and finished rows.

Rows are never freed one by one; when per-request grammars fill the table, its owner calls
`rebuild(keep)` with the automata still in use: every other row is forgotten and the kept
automata are numbered again from row 1 (their old row ids become invalid).
"""

from __future__ import annotations

import threading

import numpy as np

from .automaton import Automaton


class MaskTable:
    UNCONSTRAINED = 0

    def __init__(self, vocab_size: int, capacity: int = 4096) -> None:
        if vocab_size <= 0 or capacity < 1:
            raise ValueError(f"MaskTable needs vocab_size > 0 and capacity >= 1, got {vocab_size}, {capacity}")
        self.vocab_size = vocab_size
        self.capacity = capacity
        self.words = -(-vocab_size // 32)
        # np.zeros maps untouched rows lazily, so a large capacity costs only the rows used.
        self.allowed = np.zeros((capacity, vocab_size), dtype=np.bool_)
        self.bitmask = np.zeros((capacity, self.words), dtype=np.int32)
        self.allowed[self.UNCONSTRAINED] = True
        self.bitmask[self.UNCONSTRAINED] = _pack(self.allowed[:1])[0]
        self.num_rows = 1
        self.version = 0
        self._row_of: dict[bytes, int] = {np.arange(vocab_size, dtype=np.int32).tobytes(): self.UNCONSTRAINED}
        self._rows: dict[Automaton, np.ndarray] = {}
        self._lock = threading.Lock()  # register may run on a compile thread

    def register(self, auto: Automaton) -> np.ndarray:
        """Row ids for `auto`'s states (computed once per automaton): global id of state s = rows[s]."""
        if auto.vocab_size != self.vocab_size:
            raise ValueError(f"automaton of {auto.spec} has vocab_size {auto.vocab_size}, table has {self.vocab_size}")
        with self._lock:
            rows = self._rows.get(auto)
            if rows is not None:
                return rows
            sets = [auto.allowed_tokens(state) for state in range(auto.num_states)]
            new = {s.tobytes(): s for s in sets if s.tobytes() not in self._row_of}
            if self.num_rows + len(new) > self.capacity:
                raise RuntimeError(
                    f"MaskTable full: {auto.spec} needs {len(new)} new rows, "
                    f"{self.capacity - self.num_rows} of {self.capacity} left; raise capacity"
                )
            for key, tokens in new.items():
                row = self.num_rows
                self.allowed[row, tokens] = True
                self.bitmask[row] = _pack(self.allowed[row : row + 1])[0]
                self._row_of[key] = row
                self.num_rows = row + 1  # a row is complete before any id can point at it
            rows = np.array([self._row_of[s.tobytes()] for s in sets], dtype=np.int64)
            rows.flags.writeable = False
            self._rows[auto] = rows
            if new:
                self.version += 1
            return rows

    def rebuild(self, keep) -> None:
        """Forget every row but row 0, then register the automata in `keep` again, in order."""
        with self._lock:
            self.allowed[1 : self.num_rows] = False
            self.bitmask[1 : self.num_rows] = 0
            self.num_rows = 1
            self._row_of = {np.arange(self.vocab_size, dtype=np.int32).tobytes(): self.UNCONSTRAINED}
            self._rows = {}
            self.version += 1
        for auto in keep:
            self.register(auto)

    def fill(self, global_state_ids: np.ndarray, out: np.ndarray) -> None:
        """out[:B] = allowed[ids] (bool, [>= B, vocab])."""
        ids = self._checked(global_state_ids, out, np.bool_, self.vocab_size)
        np.take(self.allowed, ids, axis=0, out=out[: len(ids)], mode="clip")

    def fill_bitmask(self, global_state_ids: np.ndarray, out: np.ndarray) -> None:
        """out[:B] = bitmask[ids] (int32, [>= B, ceil(vocab / 32)]); bit i of word i // 32."""
        ids = self._checked(global_state_ids, out, np.int32, self.words)
        np.take(self.bitmask, ids, axis=0, out=out[: len(ids)], mode="clip")

    def _checked(self, global_state_ids: np.ndarray, out: np.ndarray, dtype: type, width: int) -> np.ndarray:
        # mode="clip" above skips numpy's buffered bounds check, so ids are checked here.
        ids = np.asarray(global_state_ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"global state ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        if out.dtype != dtype or out.ndim != 2 or out.shape[1] != width or out.shape[0] < len(ids):
            raise ValueError(f"out must be {np.dtype(dtype)} [>= {len(ids)}, {width}], got {out.dtype} {out.shape}")
        if not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous")
        # Viewed as unsigned, a negative id becomes huge: one reduction checks both bounds.
        if len(ids) and ids.view(f"u{ids.itemsize}").max() >= self.num_rows:
            raise IndexError(f"global state ids must lie in [0, {self.num_rows}), got {ids.min()}..{ids.max()}")
        return ids


def _pack(rows: np.ndarray) -> np.ndarray:
    """Bool rows -> int32 words with token i at bit i % 32 of word i // 32."""
    packed = np.packbits(rows, axis=1, bitorder="little")
    pad = (-packed.shape[1]) % 4
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return packed.view("<i4").astype(np.int32)
