"""Property tests: automata agree with independent checkers, token by token and end to end.

Each checker below is written from the grammar's meaning (object counts, Python `re`, `json`),
not from outlines-core, and encodes the alphabet policy: special ids are never text, and text
tokens that are empty or contain the byte 0xEE are never allowed.
"""

from __future__ import annotations

import json
import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grammars import GrammarCompiler, GrammarViolation, TokenAlphabet, detect_grammar, json_schema_grammar, point_grammar, regex_grammar

EOS, COORD, SIZE = 0, 5, 6
VOCAB = 64
TEXT: dict[int, bytes] = {
    10: b"0", 11: b"1", 12: b"2", 13: b"3", 14: b"4", 15: b"5", 16: b"6", 17: b"7", 18: b"8", 19: b"9",
    20: b"12", 21: b"123", 22: b"1234", 23: b"a", 24: b"b", 25: "€".encode(), 26: b"\xe2\x82", 27: b"\xac",
    28: b"\xe2", 29: b"\x82\xac", 30: "\ue000".encode(), 31: b"\xee\x80", 32: b"\x80", 33: b"",
    34: b"<|md_reserved_4|>", 35: b"{", 36: b"}", 37: b'"', 38: b"count", 39: b":", 40: b" ", 41: b'{"count":',
    42: b"-", 43: b"a1", 44: b"1b", 45: b"c", 46: b"o", 47: b"u", 48: b"n", 49: b"t", 50: b"0}",
}
ALPHABET = TokenAlphabet(vocab_size=VOCAB, eos_id=EOS, coord_id=COORD, size_id=SIZE, text_tokens=TEXT)
USABLE_TEXT = {t for t, raw in TEXT.items() if raw and 0xEE not in raw}
# Characters that some usable token spells alone: generated text must be tokenizable.
SPELLABLE = st.sampled_from(sorted(c for c in (TEXT[t].decode("utf-8", "ignore") for t in USABLE_TEXT) if len(c) == 1))
ALL_IDS = sorted({EOS, COORD, SIZE, 7, *TEXT})
COMPILER = GrammarCompiler()
SETTINGS = settings(max_examples=150, deadline=None)


def run(auto, tokens: list[int]) -> bool:
    """Whether the automaton accepts `tokens` (ending in eos), checking masks against advance."""
    state = auto.initial_state
    for i, token in enumerate(tokens):
        allowed = set(auto.allowed_tokens(state).tolist())
        if token == EOS:
            assert (EOS in allowed) == auto.accepts_eos(state)
            return i == len(tokens) - 1 and auto.accepts_eos(state)
        try:
            state = auto.advance(state, token)
        except GrammarViolation:
            assert token not in allowed
            return False
        assert token in allowed
    return False


# --- point / detect --------------------------------------------------------------------------

UNITS = {"point": [COORD, COORD], "detect": [COORD, COORD, SIZE]}
FACTORIES = {"point": point_grammar, "detect": detect_grammar}


def answer_ok(kind: str, lo: int, hi: int, tokens: list[int]) -> bool:
    unit = UNITS[kind]
    if not tokens or tokens[-1] != EOS:
        return False
    body = tokens[:-1]
    count, rest = divmod(len(body), len(unit))
    return rest == 0 and body == unit * count and lo <= count <= hi


def prefix_ok(kind: str, hi: int, prefix: list[int]) -> bool:
    """Some continuation of `prefix` is a valid answer."""
    unit = UNITS[kind]
    started = -(-len(prefix) // len(unit))
    return prefix == (unit * (started + 1))[: len(prefix)] and started <= hi


@st.composite
def object_case(draw):
    kind = draw(st.sampled_from(sorted(UNITS)))
    hi = draw(st.integers(0, 5))
    lo = draw(st.integers(0, hi))
    if draw(st.booleans()):  # near-valid: some whole objects, then a few edits
        tokens = UNITS[kind] * draw(st.integers(0, hi + 1)) + [EOS]
        for _ in range(draw(st.integers(0, 2))):
            at = draw(st.integers(0, len(tokens)))
            edit = draw(st.sampled_from(["insert", "delete", "replace"]))
            token = draw(st.sampled_from(ALL_IDS))
            if edit == "insert":
                tokens.insert(at, token)
            elif at < len(tokens):
                tokens[at : at + 1] = [] if edit == "delete" else [token]
    else:
        tokens = draw(st.lists(st.sampled_from(ALL_IDS), max_size=18))
    return kind, lo, hi, tokens


@SETTINGS
@given(object_case())
def test_object_grammar_accepts_exactly_valid_answers(case):
    kind, lo, hi, tokens = case
    auto = COMPILER.compile(FACTORIES[kind](max_objects=hi, min_objects=lo), ALPHABET)
    assert run(auto, tokens) == answer_ok(kind, lo, hi, tokens)


@SETTINGS
@given(object_case())
def test_object_grammar_masks_are_exactly_the_viable_tokens(case):
    kind, lo, hi, tokens = case
    auto = COMPILER.compile(FACTORIES[kind](max_objects=hi, min_objects=lo), ALPHABET)
    state, prefix = auto.initial_state, []
    for token in tokens:
        expected = {t for t in ALL_IDS if t != EOS and prefix_ok(kind, hi, prefix + [t])}
        if answer_ok(kind, lo, hi, prefix + [EOS]):
            expected.add(EOS)
        assert set(auto.allowed_tokens(state).tolist()) == expected
        assert auto.must_stop(state) == (expected == {EOS})
        if token not in expected or token == EOS:
            break
        state, prefix = auto.advance(state, token), prefix + [token]


# --- regex -----------------------------------------------------------------------------------

PATTERNS = [r"[0-9]{1,3}", r"(€|a[0-9])+b?", r"(a1|b)*", r"a.b?"]


def text_ok(pattern: str, tokens: list[int]) -> bool:
    if not tokens or tokens[-1] != EOS or not set(tokens[:-1]) <= USABLE_TEXT:
        return False
    try:
        text = b"".join(TEXT[t] for t in tokens[:-1]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return re.fullmatch(pattern, text) is not None


def split_into_tokens(data, text: bytes) -> list[int]:
    """A random tokenization of `text` over the usable text tokens."""
    tokens, at = [], 0
    while at < len(text):
        options = sorted(t for t in USABLE_TEXT if text.startswith(TEXT[t], at))
        token = data.draw(st.sampled_from(options))
        tokens.append(token)
        at += len(TEXT[token])
    return tokens


def random_walk(data, auto, max_steps: int) -> list[int] | None:
    """Tokens drawn from each state's mask until eos, or None if it runs past max_steps."""
    state, tokens = auto.initial_state, []
    for _ in range(max_steps):
        token = data.draw(st.sampled_from(auto.allowed_tokens(state).tolist()))
        tokens.append(token)
        if token == EOS:
            return tokens
        state = auto.advance(state, token)
    return None


@SETTINGS
@given(st.sampled_from(PATTERNS), st.lists(st.sampled_from(ALL_IDS), max_size=8).map(lambda ts: ts + [EOS]))
def test_regex_accepts_exactly_matching_text(pattern, tokens):
    assert run(COMPILER.compile(regex_grammar(pattern), ALPHABET), tokens) == text_ok(pattern, tokens)


@SETTINGS
@given(st.sampled_from(PATTERNS), st.data())
def test_regex_accepts_every_tokenization_of_matching_text(pattern, data):
    text = data.draw(st.from_regex(pattern, fullmatch=True, alphabet=SPELLABLE)).encode()
    tokens = split_into_tokens(data, text) + [EOS]
    assert run(COMPILER.compile(regex_grammar(pattern), ALPHABET), tokens)


@SETTINGS
@given(st.sampled_from(PATTERNS), st.data())
def test_regex_walks_spell_matching_text(pattern, data):
    tokens = random_walk(data, COMPILER.compile(regex_grammar(pattern), ALPHABET), max_steps=12)
    assume(tokens is not None)
    assert text_ok(pattern, tokens)


@SETTINGS
@given(st.lists(st.sampled_from(sorted(USABLE_TEXT)), max_size=5))
def test_count_mask_is_exactly_the_viable_tokens(tokens):
    auto = COMPILER.compile(regex_grammar(r"[0-9]{1,3}"), ALPHABET)
    state, text = auto.initial_state, b""
    for token in tokens:
        expected = {t for t in USABLE_TEXT if re.fullmatch(rb"[0-9]{0,3}", text + TEXT[t])}
        if re.fullmatch(rb"[0-9]{1,3}", text):
            expected.add(EOS)
        assert set(auto.allowed_tokens(state).tolist()) == expected
        if token not in expected:
            break
        state, text = auto.advance(state, token), text + TEXT[token]


# --- JSON schema -----------------------------------------------------------------------------

COUNT_SCHEMA = json.dumps({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})


def json_ok(tokens: list[int]) -> bool:
    try:
        value = json.loads(b"".join(TEXT[t] for t in tokens[:-1]))
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"count"} and type(value["count"]) is int


@SETTINGS
@given(st.integers(-(10**6), 10**6), st.lists(st.sampled_from([b"", b" "]), min_size=4, max_size=4), st.data())
def test_json_accepts_every_tokenization_of_valid_documents(count, spaces, data):
    text = b"{%s\"count\"%s:%s%d%s}" % (spaces[0], spaces[1], spaces[2], count, spaces[3])
    assert json_ok([*split_into_tokens(data, text), EOS])
    assert run(COMPILER.compile(json_schema_grammar(COUNT_SCHEMA), ALPHABET), split_into_tokens(data, text) + [EOS])


@SETTINGS
@given(st.data())
def test_json_walks_spell_valid_documents(data):
    tokens = random_walk(data, COMPILER.compile(json_schema_grammar(COUNT_SCHEMA), ALPHABET), max_steps=40)
    assume(tokens is not None)
    assert json_ok(tokens)
