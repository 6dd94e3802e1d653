"""A compiled grammar as a dense token automaton: O(1) advance, precomputed allowed sets.

The compiler hands over outlines-core's automaton with its sparse state ids; `from_edges`
copies it once into dense states 0..n-1 (initial = 0). eos is not an edge: it is termination,
shown only in the allowed set of final states. States from which no final state can be reached
are dropped (outlines-core keeps, e.g., a loop of tokens that can never be completed), so any
allowed token keeps the answer completable. Nothing here calls outlines-core.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .spec import GrammarSpec


class GrammarViolation(ValueError):
    """A token the grammar does not allow in the current state."""

    def __init__(self, message: str, state: int, token: int) -> None:
        super().__init__(message)
        self.state = state
        self.token = token


class Automaton:
    """Token-level automaton of one grammar over one alphabet. Immutable and shared by requests."""

    initial_state = 0

    def __init__(
        self,
        spec: GrammarSpec,
        vocab_size: int,
        eos_id: int,
        transitions: list[dict[int, int]],
        final: list[bool],
    ) -> None:
        self.spec = spec
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.num_states = len(transitions)
        self._next = transitions
        self._final = tuple(final)
        allowed = []
        for state, edges in enumerate(transitions):
            ids = np.array(sorted([*edges, eos_id] if final[state] else edges), dtype=np.int32)
            ids.flags.writeable = False  # handed out without copying
            allowed.append(ids)
        self._allowed = tuple(allowed)
        # Mask-table rows this automaton can take at most (one per distinct allowed set).
        self.num_distinct_sets = len({ids.tobytes() for ids in allowed})
        self._must_stop = tuple(f and not edges for f, edges in zip(final, transitions))

    @classmethod
    def from_edges(
        cls,
        spec: GrammarSpec,
        vocab_size: int,
        eos_id: int,
        initial: int,
        edges: Mapping[int, Mapping[int, int]],
        finals: set[int],
    ) -> Automaton:
        """Dense copy of a token automaton with sparse state ids and no eos edges."""
        live = _coreachable(edges, finals)
        if initial not in live:
            raise ValueError(f"grammar {spec} accepts no complete token sequence over this vocabulary")
        # Breadth-first numbering from the initial state, tokens in id order: deterministic ids.
        dense = {initial: 0}
        order = [initial]
        for state in order:
            for token in sorted(edges.get(state, {})):
                target = edges[state][token]
                if target in live and target not in dense:
                    dense[target] = len(order)
                    order.append(target)
        transitions = [{t: dense[n] for t, n in edges.get(s, {}).items() if n in live} for s in order]
        return cls(spec, vocab_size, eos_id, transitions, [s in finals for s in order])

    def allowed_tokens(self, state: int) -> np.ndarray:
        """Sorted int32 ids allowed in `state` (read-only), eos included where it may end."""
        return self._allowed[state]

    def accepts_eos(self, state: int) -> bool:
        return self._final[state]

    def must_stop(self, state: int) -> bool:
        """eos is the only allowed token: the row is done without sampling again."""
        return self._must_stop[state]

    def advance(self, state: int, token_id: int) -> int:
        try:
            return self._next[state][token_id]
        except KeyError:
            raise self._violation(state, token_id) from None

    def _violation(self, state: int, token_id: int) -> GrammarViolation:
        if token_id == self.eos_id:
            where = "a final state" if self._final[state] else "not allowed here either"
            message = f"eos (token {token_id}) cannot advance state {state}: eos terminates the row ({where})"
        else:
            allowed = self._allowed[state].tolist()
            shown = ", ".join(map(str, allowed[:8])) + (f", ... ({len(allowed)} in all)" if len(allowed) > 8 else "")
            message = f"token {token_id} is not allowed in state {state}; allowed: [{shown}]"
        return GrammarViolation(f"grammar {self.spec}: {message}", state, token_id)


def _coreachable(edges: Mapping[int, Mapping[int, int]], finals: set[int]) -> set[int]:
    """States from which some final state can be reached."""
    preds: dict[int, set[int]] = {}
    for state, out in edges.items():
        for target in out.values():
            preds.setdefault(target, set()).add(state)
    live = set(finals)
    stack = list(finals)
    while stack:
        for p in preds.get(stack.pop(), ()):
            if p not in live:
                live.add(p)
                stack.append(p)
    return live
