"""(GrammarSpec, TokenAlphabet) -> Automaton, built with outlines-core and cached.

Index construction costs (automaton states x vocabulary entries), so the outlines-core
vocabulary holds only what the grammar can use: its symbols, and the text tokens only for text
grammars. point/detect thus build over 2-3 entries whatever the model's vocabulary size.
Builds happen once per (spec, alphabet fingerprint) and are kept in an LRU cache; `warm` lets
the engine pay for them at start-up, or on a background thread (Index construction releases the
GIL), rather than on the request path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from outlines_core import Index, Vocabulary

from .alphabet import END_CHAR, SYMBOL_CHARS, TokenAlphabet
from .automaton import Automaton
from .pattern import resolve
from .spec import GrammarSpec


class GrammarCompiler:
    def __init__(self, max_cached: int = 256) -> None:
        self.max_cached = max_cached
        self._cache: OrderedDict[tuple[GrammarSpec, str], Automaton] = OrderedDict()
        self._lock = threading.Lock()  # guards _cache and _building, never held during a build
        # One lock per grammar being built: a second compile of it waits for the first instead
        # of building again, while compiles of other grammars (or cache hits) go ahead.
        self._building: dict[tuple[GrammarSpec, str], threading.Lock] = {}

    def compile(self, spec: GrammarSpec, alphabet: TokenAlphabet) -> Automaton:
        key = (spec, alphabet.fingerprint)
        with self._lock:
            auto = self._lookup(key)
            if auto is not None:
                return auto
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                auto = self._lookup(key)
            if auto is not None:
                return auto
            try:
                auto = build_automaton(spec, alphabet)
            except BaseException:
                with self._lock:
                    self._building.pop(key, None)
                raise
            with self._lock:  # publish and retire the build lock at once: no window to rebuild
                self._cache[key] = auto
                if len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)
                self._building.pop(key, None)
            return auto

    def _lookup(self, key: tuple[GrammarSpec, str]) -> Automaton | None:
        auto = self._cache.get(key)
        if auto is not None:
            self._cache.move_to_end(key)
        return auto

    def warm(self, specs: Iterable[GrammarSpec], alphabet: TokenAlphabet) -> None:
        """Build ahead of time so later `compile` calls are cache hits."""
        for spec in specs:
            self.compile(spec, alphabet)


def build_automaton(spec: GrammarSpec, alphabet: TokenAlphabet) -> Automaton:
    if spec.name == "text":  # free text needs no regex: one final state that every text token loops on
        if not alphabet.text_tokens:
            raise ValueError(f"grammar {spec} is a text grammar but the alphabet has no text_tokens")
        return Automaton(spec, alphabet.vocab_size, alphabet.eos_id, [dict.fromkeys(alphabet.text_tokens, 0)], [True])
    pattern = resolve(spec)
    _check_syntax(spec, pattern.regex, alphabet.eos_id)
    ids: dict[bytes, list[int]] = {}
    for name in sorted(pattern.symbols):
        ids[SYMBOL_CHARS[name].encode()] = [alphabet.symbol_ids[name]]
    if pattern.text:
        if not alphabet.text_tokens:
            raise ValueError(f"grammar {spec} is a text grammar but the alphabet has no text_tokens")
        for tid, surface in alphabet.text_tokens.items():
            ids.setdefault(surface, []).append(tid)
    # outlines-core 0.2.14 drops a token's transition when the token's last byte is the first
    # byte after a point where the pattern could have ended and the pattern is then incomplete:
    # over tokens "a", "b", "(ab)+" accepts only "ab" and "(ab){0,3}" only "". So the index is
    # built for the pattern followed by an end marker, a pseudo-token no real token can spell:
    # the pattern can then only end right before the marker, and a state is final for us exactly
    # when the marker takes it to outlines-core's accepting state. The price is DFA build time
    # for long bounded repeats (detect(max_objects=1000): ~0.3 s instead of ~0.01 s).
    end_id = alphabet.vocab_size
    ids[END_CHAR.encode()] = [end_id]
    try:
        index = Index(f"(?:{pattern.regex}){END_CHAR}", Vocabulary(alphabet.eos_id, ids))
    except ValueError as e:
        raise ValueError(f"cannot compile grammar {spec}: {e}") from e
    raw = index.get_transitions()
    accepting = set(index.get_final_states())
    finals = {state for state, out in raw.items() if out.get(end_id) in accepting}
    # eos and the marker are termination, not transitions (outlines-core cannot advance eos).
    edges = {state: {t: n for t, n in out.items() if t not in (end_id, alphabet.eos_id)} for state, out in raw.items()}
    return Automaton.from_edges(spec, alphabet.vocab_size, alphabet.eos_id, index.get_initial_state(), edges, finals)


def _check_syntax(spec: GrammarSpec, regex: str, eos_id: int) -> None:
    """Reject a regex that only parses once wrapped in a group, such as "a)(b".

    With no tokens, outlines-core either fails to parse the regex or, having built its DFA,
    reports the (empty) vocabulary as incompatible; only the first is an error here.
    """
    try:
        Index(regex, Vocabulary(eos_id, {}))
    except ValueError as e:
        if "incompatible" not in str(e):
            raise ValueError(f"cannot compile grammar {spec}: invalid regex: {e}") from e
