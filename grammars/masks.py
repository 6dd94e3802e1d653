"""Per-state mask table: a batch's masks are one gather by global state id.

Every registered automaton gets a contiguous block of rows, one per state, holding that state's
allowed set both as bools and as a packed int32 bitmask (bit i of word i // 32). A step then
needs only the rows' global state ids: `fill` / `fill_bitmask` gather on the host, or the engine
keeps a device copy of `allowed[:num_rows]` (refreshed when `version` changes) and uploads the
ids alone. point/detect automata have a few hundred states, so the table stays small; a large
JSON-schema automaton costs states x vocab bytes here, the price of precomputed masks.

Row 0 is the unconstrained state (every token allowed) for padding and finished rows.
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
        self._bases: dict[Automaton, int] = {}
        self._lock = threading.Lock()  # register may run on a compile thread

    def register(self, auto: Automaton) -> int:
        """Rows for `auto`'s states (once per automaton); returns base: global id = base + state."""
        if auto.vocab_size != self.vocab_size:
            raise ValueError(f"automaton of {auto.spec} has vocab_size {auto.vocab_size}, table has {self.vocab_size}")
        with self._lock:
            base = self._bases.get(auto)
            if base is not None:
                return base
            base, end = self.num_rows, self.num_rows + auto.num_states
            if end > self.capacity:
                raise RuntimeError(
                    f"MaskTable full: {auto.spec} needs {auto.num_states} rows, "
                    f"{self.capacity - self.num_rows} of {self.capacity} left; raise capacity"
                )
            rows = self.allowed[base:end]
            for state in range(auto.num_states):
                rows[state, auto.allowed_tokens(state)] = True
            self.bitmask[base:end] = _pack(rows)
            self._bases[auto] = base
            self.num_rows = end  # rows are complete before any id can point at them
            self.version += 1
            return base

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
