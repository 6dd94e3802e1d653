"""What a request asks for: a grammar name plus its parameters, small and hashable.

A `GrammarSpec` is the cache key of a compiled automaton (together with the alphabet), so it is
frozen and holds only plain values; turning it into a regex happens at compile time
(`grammars.pattern`). Parameters are validated here so a bad request fails before it queues.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass

# Each object adds 2-3 automaton states and mask-table rows; Moondream's 1,318-position answer
# budget fits at most 659 points anyway, so larger counts can only be mistakes.
MAX_OBJECTS_LIMIT = 1000


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar name (`point`, `detect`, `regex`, `json_schema`) and sorted (key, value) params."""

    name: str
    params: tuple[tuple[str, int | str], ...] = ()

    def param(self, key: str) -> int | str:
        for k, v in self.params:
            if k == key:
                return v
        raise KeyError(f"grammar {self.name!r} has no parameter {key!r}")

    def __str__(self) -> str:
        def show(v: int | str) -> str:
            text = repr(v)
            return text if len(text) <= 60 else text[:57] + "..."

        return f"{self.name}({', '.join(f'{k}={show(v)}' for k, v in self.params)})"


def point_grammar(max_objects: int = 50, min_objects: int = 0) -> GrammarSpec:
    """Between min and max (x coord, y coord) pairs, then eos."""
    return _object_grammar("point", max_objects, min_objects)


def detect_grammar(max_objects: int = 50, min_objects: int = 0) -> GrammarSpec:
    """Between min and max (x coord, y coord, size) triples, then eos."""
    return _object_grammar("detect", max_objects, min_objects)


def regex_grammar(pattern: str) -> GrammarSpec:
    """Text that matches `pattern` as a whole (Rust regex syntax, no ^ / $ anchors), then eos."""
    if not isinstance(pattern, str):
        raise ValueError(f"regex_grammar needs a str pattern, got {type(pattern).__name__}")
    return GrammarSpec("regex", (("pattern", pattern),))


def text_grammar() -> GrammarSpec:
    """Free text: any text token, any number of times, then eos (one state, no regex)."""
    return GrammarSpec("text")


def choice_grammar(choices) -> GrammarSpec:
    """Exactly one of `choices` (non-empty strings), then eos: a regex of escaped alternatives."""
    if isinstance(choices, str) or not all(isinstance(c, str) and c for c in choices) or not choices:
        raise ValueError("choice_grammar needs a non-empty list of non-empty strings")
    options = sorted(set(choices))
    return regex_grammar("|".join(_literal(c) for c in options))


def _literal(text: str) -> str:
    r"""`text` as a regex matching only itself: letters and digits stay, every other character is \x{..}."""
    return "".join(ch if ch.isalnum() else f"\\x{{{ord(ch):x}}}" for ch in text)


def json_schema_grammar(schema: str) -> GrammarSpec:
    """JSON text valid under `schema` (a JSON string, kept verbatim: key order matters), then eos."""
    if not isinstance(schema, str):
        raise ValueError(f"json_schema_grammar needs the schema as a JSON string, got {type(schema).__name__}")
    try:
        json.loads(schema)
    except json.JSONDecodeError as e:
        raise ValueError(f"json_schema_grammar: schema is not valid JSON: {e}") from e
    return GrammarSpec("json_schema", (("schema", schema),))


def _object_grammar(name: str, max_objects: int, min_objects: int) -> GrammarSpec:
    counts = {"max_objects": max_objects, "min_objects": min_objects}
    for key, value in counts.items():
        if isinstance(value, bool):
            raise ValueError(f"{name} grammar: {key} must be an integer, got {value!r}")
        try:
            counts[key] = operator.index(value)
        except TypeError:
            raise ValueError(f"{name} grammar: {key} must be an integer, got {value!r}") from None
        if not 0 <= counts[key] <= MAX_OBJECTS_LIMIT:
            raise ValueError(f"{name} grammar: {key}={counts[key]} is outside [0, {MAX_OBJECTS_LIMIT}]")
    if counts["min_objects"] > counts["max_objects"]:
        raise ValueError(
            f"{name} grammar: min_objects={counts['min_objects']} exceeds max_objects={counts['max_objects']}"
        )
    return GrammarSpec(name, tuple(sorted(counts.items())))
