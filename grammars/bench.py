"""`python -m grammars.bench`: compile cost per grammar, then per-step commit + mask cost.

One step of the engine's commit for a batch: advance every row's automaton by its sampled token
and look up the rows' global state ids, then produce the masks for the next step in one of three
ways: nothing more (the `MaskTable` lives on the device and only ids go up), a packed int32
bitmask gather, or a bool [batch, vocab] gather. The vocabulary is a synthetic 51,200-token one
(random text tokens, Moondream's special ids), so text grammars pay a realistic build cost.
Single-threaded; numbers are per step.
"""

from __future__ import annotations

import json
import random
import time

import numpy as np

from . import (
    Automaton,
    GrammarCompiler,
    GrammarSpec,
    MaskTable,
    TokenAlphabet,
    choice_grammar,
    detect_grammar,
    json_schema_grammar,
    point_grammar,
    regex_grammar,
    text_grammar,
)

VOCAB = 51_200
STEPS = 2_000
COUNT_SCHEMA = '{"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}'
# Five fields of the kinds a query answer uses: a count, a flag, a colour, a short label, a list.
FIVE_FIELD_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "present": {"type": "boolean"},
        "colour": {"enum": ["red", "green", "blue", "yellow", "purple", "orange"]},
        "label": {"type": "string", "maxLength": 20},
        "shapes": {"type": "array", "items": {"enum": ["circle", "square", "triangle", "star"]}, "maxItems": 4},
    },
    "required": ["count", "present", "colour", "label", "shapes"],
})


def synthetic_alphabet(seed: int = 0) -> TokenAlphabet:
    """Every printable ASCII character as its own token, then random 2-8 character strings."""
    rng = random.Random(seed)
    chars = [chr(c) for c in range(32, 127)]
    words = set(chars)
    pool = chars + list("eeettaaoinnssrhld     0123456789") + ["é", "ü", "€", "中"]
    while len(words) < VOCAB - 16:
        words.add("".join(rng.choices(pool, k=rng.randint(2, 8))))
    # ids 0..15 are Moondream's special/reserved ids: eos=0, coord=5, size=6, the rest unused.
    text = {16 + i: w for i, w in enumerate(sorted(words))}
    return TokenAlphabet(vocab_size=VOCAB, eos_id=0, coord_id=5, size_id=6, text_tokens=text)


def walks(auto: Automaton, rows: int, steps: int, seed: int) -> list[list[tuple[int, int]]]:
    """Per row, `steps` (state, token) pairs of random valid sequences, restarting when one ends."""
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        state, walk = auto.initial_state, []
        while len(walk) < steps:
            allowed = auto.allowed_tokens(state)
            tokens = allowed[allowed != auto.eos_id]
            if not len(tokens) or (auto.accepts_eos(state) and rng.random() < 0.05):
                state = auto.initial_state
                continue
            token = int(tokens[rng.randrange(len(tokens))])
            walk.append((state, token))
            state = auto.advance(state, token)
        out.append(walk)
    return out


def step_times(auto: Automaton, table: MaskTable, batch: int, mask: str) -> np.ndarray:
    """Per-step nanoseconds of: advance all rows, gather their global ids, then `mask`."""
    rows = table.register(auto)
    plan = walks(auto, batch, STEPS, seed=batch)
    ids = np.zeros(batch, dtype=np.int32)
    bools = np.zeros((batch, table.vocab_size), dtype=np.bool_)
    bits = np.zeros((batch, table.words), dtype=np.int32)
    times = np.empty(STEPS, dtype=np.int64)
    for t in range(STEPS):
        start = time.perf_counter_ns()
        for row in range(batch):
            state, token = plan[row][t]
            ids[row] = rows[auto.advance(state, token)]
        if mask == "bitmask":
            table.fill_bitmask(ids, bits)
        elif mask == "bool":
            table.fill(ids, bools)
        times[t] = time.perf_counter_ns() - start
    return times


def main() -> None:
    alphabet = synthetic_alphabet()
    specs: dict[str, GrammarSpec] = {
        "point(max_objects=50)": point_grammar(50),
        "detect(max_objects=50)": detect_grammar(50),
        "detect(max_objects=1000)": detect_grammar(1000),
        "regex [0-9]{1,3}": regex_grammar(r"[0-9]{1,3}"),
        "json_schema {count: integer}": json_schema_grammar(COUNT_SCHEMA),
        "json_schema, 5 fields": json_schema_grammar(FIVE_FIELD_SCHEMA),
        "free text": text_grammar(),
        "choices yes/no": choice_grammar(["yes", "no"]),
    }
    compiler = GrammarCompiler()
    print(f"compile, vocabulary {VOCAB:,} tokens")
    print(f"{'grammar':<30} {'states':>7} {'mask rows':>9} {'build ms':>9} {'cached us':>10} {'register ms':>12}")
    autos = {}
    for label, spec in specs.items():
        start = time.perf_counter()
        auto = compiler.compile(spec, alphabet)
        build = time.perf_counter() - start
        start = time.perf_counter()
        compiler.compile(spec, alphabet)
        cached = time.perf_counter() - start
        start = time.perf_counter()
        own = MaskTable(VOCAB, auto.num_states + 1)
        own.register(auto)
        register = time.perf_counter() - start
        autos[label] = auto
        print(f"{label:<30} {auto.num_states:>7} {own.num_rows - 1:>9} {build * 1e3:>9.1f} {cached * 1e6:>10.1f} "
              f"{register * 1e3:>12.1f}")

    print(f"\nper step (us, median / p99 over {STEPS} steps): advance every row + global ids, then mask")
    print(f"{'grammar':<30} {'batch':>5} {'ids only':>14} {'+ bitmask':>14} {'+ bool mask':>14}")
    table = MaskTable(VOCAB, capacity=sum(a.num_states for a in autos.values()) + 1)
    for label in ("point(max_objects=50)", "detect(max_objects=50)", "regex [0-9]{1,3}", "json_schema {count: integer}",
                  "json_schema, 5 fields", "free text"):
        for batch in (1, 32):
            cells = []
            for mask in ("none", "bitmask", "bool"):
                us = step_times(autos[label], table, batch, mask) / 1e3
                cells.append(f"{np.median(us):6.1f} / {np.percentile(us, 99):5.1f}")
            print(f"{label:<30} {batch:>5} {cells[0]:>14} {cells[1]:>14} {cells[2]:>14}")


if __name__ == "__main__":
    main()
