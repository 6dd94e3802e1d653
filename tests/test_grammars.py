"""Unit tests of grammars/: specs, alphabet, compiler cache, automata, mask table."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import grammars.compiler
from grammars import (
    GrammarCompiler,
    GrammarSpec,
    GrammarViolation,
    MaskTable,
    TokenAlphabet,
    detect_grammar,
    json_schema_grammar,
    point_grammar,
    regex_grammar,
)

EOS, COORD, SIZE = 0, 5, 6
VOCAB = 64
# Text tokens chosen to be awkward: digits alone and merged, bytes of multi-byte characters,
# things that look like (or spell the bytes of) the special symbols, and an empty token.
TEXT = {
    10: "0", 11: "1", 12: "2", 13: "3", 14: "4", 15: "5", 16: "6", 17: "7", 18: "8", 19: "9",
    20: "12", 21: "123", 22: "1234", 23: "a", 24: "b", 25: "€", 26: b"\xe2\x82", 27: b"\xac",
    28: b"\xe2", 29: b"\x82\xac", 30: "\ue000", 31: b"\xee\x80", 32: b"\x80", 33: "",
    34: "<|md_reserved_4|>", 35: "{", 36: "}", 37: '"', 38: "count", 39: ":", 40: " ", 41: '{"count":',
    42: "-", 43: "x", 44: "ab",
}


def alphabet(text=TEXT) -> TokenAlphabet:
    return TokenAlphabet(vocab_size=VOCAB, eos_id=EOS, coord_id=COORD, size_id=SIZE, text_tokens=text)


def walk(auto, tokens) -> int:
    state = auto.initial_state
    for t in tokens:
        state = auto.advance(state, t)
    return state


def allowed(auto, state) -> list[int]:
    return auto.allowed_tokens(state).tolist()


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    return GrammarCompiler()


# --- specs -----------------------------------------------------------------------------------


def test_specs_are_hashable_values():
    assert detect_grammar(50) == detect_grammar(max_objects=50, min_objects=0)
    assert hash(point_grammar(3)) == hash(point_grammar(3))
    assert point_grammar(3) != point_grammar(4) != detect_grammar(4)
    assert point_grammar().param("max_objects") == 50
    assert point_grammar(np.int64(7)).param("max_objects") == 7
    with pytest.raises(AttributeError):
        point_grammar().name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_objects": 2, "min_objects": 3}, "exceeds max_objects"),
        ({"max_objects": -1}, "outside"),
        ({"max_objects": 5, "min_objects": -1}, "outside"),
        ({"max_objects": 1001}, "outside"),
        ({"max_objects": 2.5}, "integer"),
        ({"max_objects": True}, "integer"),
    ],
)
def test_object_counts_are_validated(kwargs, message):
    for factory in (point_grammar, detect_grammar):
        with pytest.raises(ValueError, match=message):
            factory(**kwargs)


def test_text_specs_are_validated():
    with pytest.raises(ValueError, match="str pattern"):
        regex_grammar(123)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not valid JSON"):
        json_schema_grammar('{"type": ')


# --- object grammars -------------------------------------------------------------------------


def test_detect_shape(compiler):
    auto = compiler.compile(detect_grammar(2), alphabet())
    assert auto.num_states == 7
    assert allowed(auto, auto.initial_state) == [EOS, COORD]
    assert allowed(auto, walk(auto, [COORD])) == [COORD]
    assert allowed(auto, walk(auto, [COORD, COORD])) == [SIZE]
    one = walk(auto, [COORD, COORD, SIZE])
    assert allowed(auto, one) == [EOS, COORD] and auto.accepts_eos(one) and not auto.must_stop(one)
    two = walk(auto, [COORD, COORD, SIZE] * 2)
    assert allowed(auto, two) == [EOS] and auto.must_stop(two)


def test_point_min_objects_forbids_early_eos(compiler):
    auto = compiler.compile(point_grammar(max_objects=3, min_objects=2), alphabet())
    assert allowed(auto, auto.initial_state) == [COORD]
    assert not auto.accepts_eos(walk(auto, [COORD, COORD]))
    assert auto.accepts_eos(walk(auto, [COORD] * 4))
    assert auto.must_stop(walk(auto, [COORD] * 6))


def test_zero_objects_stops_at_once(compiler):
    auto = compiler.compile(detect_grammar(0), alphabet())
    assert auto.num_states == 1 and auto.must_stop(auto.initial_state)
    assert allowed(auto, auto.initial_state) == [EOS]


def test_states_are_dense_and_initial_is_zero(compiler):
    auto = compiler.compile(detect_grammar(5), alphabet())
    assert auto.initial_state == 0
    seen = {auto.initial_state}
    state = auto.initial_state
    for token in [COORD, COORD, SIZE] * 5:
        state = auto.advance(state, token)
        seen.add(state)
    assert seen == set(range(auto.num_states))


def test_eos_is_never_advanced(compiler):
    auto = compiler.compile(point_grammar(2), alphabet())
    final, middle = auto.initial_state, walk(auto, [COORD])
    with pytest.raises(GrammarViolation, match=r"eos \(token 0\) cannot advance state 0: eos terminates the row \(a final"):
        auto.advance(final, EOS)
    with pytest.raises(GrammarViolation, match="terminates the row \\(not allowed here"):
        auto.advance(middle, EOS)
    assert EOS in allowed(auto, final) and EOS not in allowed(auto, middle)


def test_violation_names_token_state_and_allowed(compiler):
    auto = compiler.compile(detect_grammar(2), alphabet())
    state = walk(auto, [COORD, COORD])
    with pytest.raises(GrammarViolation) as info:
        auto.advance(state, COORD)
    assert info.value.state == state and info.value.token == COORD
    assert f"token {COORD} is not allowed in state {state}; allowed: [{SIZE}]" in str(info.value)
    assert "detect(max_objects=2, min_objects=0)" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_object_grammars_ignore_text_tokens(compiler):
    """Text that is, or spells the bytes of, a symbol character never counts as that symbol."""
    with_text = compiler.compile(detect_grammar(3), alphabet())
    without = compiler.compile(detect_grammar(3), TokenAlphabet(vocab_size=VOCAB, eos_id=EOS, coord_id=COORD, size_id=SIZE))
    assert with_text.num_states == without.num_states
    for state in range(with_text.num_states):
        assert allowed(with_text, state) == allowed(without, state)
        for token in (30, 31, 32, 34):
            with pytest.raises(GrammarViolation):
                with_text.advance(state, token)


def test_special_ids_follow_the_alphabet(compiler):
    """The same grammar data serves a tokenizer with other special ids."""
    other = TokenAlphabet(vocab_size=VOCAB, eos_id=50, coord_id=51, size_id=52)
    auto = compiler.compile(detect_grammar(1), other)
    assert allowed(auto, 0) == [50, 51]
    assert allowed(auto, walk(auto, [51, 51])) == [52]
    assert auto.must_stop(walk(auto, [51, 51, 52]))


# --- alphabet --------------------------------------------------------------------------------


def test_alphabet_drops_tokens_that_cannot_be_text():
    text = alphabet().text_tokens
    assert 30 not in text and 31 not in text  # contain the symbols' lead byte 0xEE
    assert 33 not in text  # empty: would allow endless tokens without progress
    assert text[32] == b"\x80" and text[25] == "€".encode() and text[26] == b"\xe2\x82"
    with_specials = alphabet({**TEXT, EOS: "x", COORD: "y", SIZE: "z"}).text_tokens
    assert EOS not in with_specials and COORD not in with_specials and SIZE not in with_specials


def test_alphabet_fingerprint_identifies_content():
    assert alphabet().fingerprint == alphabet(dict(TEXT)).fingerprint
    assert alphabet().fingerprint != alphabet({**TEXT, 45: "y"}).fingerprint
    assert alphabet().fingerprint != TokenAlphabet(vocab_size=VOCAB + 1, eos_id=EOS, coord_id=COORD, size_id=SIZE, text_tokens=TEXT).fingerprint


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"eos_id": 0, "coord_id": 0, "size_id": 6}, "must differ"),
        ({"eos_id": 0, "coord_id": 5, "size_id": VOCAB}, "size_id"),
        ({"eos_id": 0, "coord_id": 5, "size_id": 6, "text_tokens": {VOCAB: "x"}}, "outside"),
    ],
)
def test_alphabet_rejects_bad_ids(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenAlphabet(vocab_size=VOCAB, **kwargs)


def _byte_level_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>"] + [f"<|md_reserved_{i}|>" for i in range(9)]
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["count 12 apples, 345 pears: 6 € each", "hello world café"] * 20, trainer)
    tok.add_tokens(["<plain added>"])
    return tok


def test_from_tokenizer_converts_byte_level_tokens(compiler):
    tok = _byte_level_tokenizer()
    alpha = TokenAlphabet.from_tokenizer(tok, vocab_size=400)
    text = alpha.text_tokens
    vocab = tok.get_vocab()
    assert text[vocab["Ġworld"]] == b" world"
    assert text[vocab["âĤ"]] == b"\xe2\x82"  # the first two bytes of "€"
    assert all(tid not in text for tid in range(10))  # special added tokens are not text
    assert text[vocab["<plain added>"]] == b"<plain added>"  # a non-special added token is literal
    # Text grammars see exactly what the tokenizer encodes.
    for sentence in ["hello world café", "6 € each"]:
        auto = compiler.compile(regex_grammar(sentence), alpha)
        assert auto.accepts_eos(walk(auto, tok.encode(sentence).ids))


def test_from_tokenizer_rejects_other_tokenizers_and_small_vocab():
    tok = _byte_level_tokenizer()
    with pytest.raises(ValueError, match="does not fit vocab_size"):
        TokenAlphabet.from_tokenizer(tok, vocab_size=100)
    word_level = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="byte-level BPE"):
        TokenAlphabet.from_tokenizer(word_level, vocab_size=10, eos_id=0, coord_id=1, size_id=2)


# --- text grammars ---------------------------------------------------------------------------


def test_count_regex(compiler):
    auto = compiler.compile(regex_grammar(r"[0-9]{1,3}"), alphabet())
    assert allowed(auto, 0) == [*range(10, 22)]  # digits and merged digits up to three long
    after_12 = walk(auto, [20])
    assert allowed(auto, after_12) == [EOS, *range(10, 20)]
    assert auto.must_stop(walk(auto, [21]))
    with pytest.raises(GrammarViolation):
        auto.advance(0, 22)


def test_multibyte_character_from_byte_tokens(compiler):
    auto = compiler.compile(regex_grammar(r"€[0-9]"), alphabet())
    for spelling in ([25], [26, 27], [28, 29]):
        assert auto.accepts_eos(walk(auto, [*spelling, 15]))
    assert not auto.accepts_eos(walk(auto, [26]))
    with pytest.raises(GrammarViolation):
        walk(auto, [26, 32])  # \xe2\x82\x80 spells "₀", not "€"


def test_json_schema_grammar(compiler):
    schema = json.dumps({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})
    auto = compiler.compile(json_schema_grammar(schema), alphabet())
    for tokens in ([41, 21, 36], [35, 37, 38, 37, 39, 40, 42, 15, 36], [41, 10, 36]):
        assert auto.accepts_eos(walk(auto, tokens))
    with pytest.raises(GrammarViolation):
        walk(auto, [41, 23])
    with pytest.raises(GrammarViolation):
        walk(auto, [41, 10, 10])  # leading zero is not JSON


def test_regex_and_schema_errors(compiler):
    with pytest.raises(ValueError, match=r"cannot compile grammar regex\(pattern='\('\)"):
        compiler.compile(regex_grammar("("), alphabet())
    with pytest.raises(ValueError, match="invalid regex"):
        compiler.compile(regex_grammar("a)(b"), alphabet())  # valid only inside the compiler's group
    with pytest.raises(ValueError, match="incompatible"):
        compiler.compile(regex_grammar("q"), alphabet())
    with pytest.raises(ValueError, match="unsupported JSON schema"):
        compiler.compile(json_schema_grammar('{"type": "frobnicate"}'), alphabet())
    with pytest.raises(ValueError, match="no text_tokens"):
        compiler.compile(regex_grammar("a"), TokenAlphabet(vocab_size=VOCAB, eos_id=EOS, coord_id=COORD, size_id=SIZE))
    with pytest.raises(ValueError, match="unknown grammar 'nope'.*'detect', 'point'"):
        compiler.compile(GrammarSpec("nope"), alphabet())
    with pytest.raises(ValueError, match=r"uses \{min_objects\} but point\(\) has no such parameter"):
        compiler.compile(GrammarSpec("point"), alphabet())


def test_repeats_over_single_byte_tokens(compiler):
    """outlines-core 0.2.14 alone loses these transitions out of final states (see compiler.py)."""
    alpha = alphabet({23: "a", 24: "b", 10: "1", 45: "."})
    pairs = compiler.compile(regex_grammar("(ab)+"), alpha)
    assert pairs.accepts_eos(walk(pairs, [23, 24] * 3))
    up_to_three = compiler.compile(regex_grammar("(ab){0,3}"), alpha)
    assert up_to_three.must_stop(walk(up_to_three, [23, 24] * 3))
    decimal = compiler.compile(regex_grammar(r"[0-9]+(\.[0-9]+)?"), alpha)
    assert decimal.accepts_eos(walk(decimal, [10, 45, 10]))
    assert not decimal.accepts_eos(walk(decimal, [10, 45]))


def test_any_character_is_not_the_end_of_the_pattern(compiler):
    """`.` could match the compiler's end marker; only reaching the real end counts as final."""
    auto = compiler.compile(regex_grammar("a.b"), alphabet())
    assert not auto.accepts_eos(walk(auto, [23])) and EOS not in allowed(auto, walk(auto, [23]))
    optional = compiler.compile(regex_grammar("a(.b)?"), alphabet())
    after_a = walk(optional, [23])
    assert optional.accepts_eos(after_a) and 43 in allowed(optional, after_a)


def test_uncompletable_states_are_pruned(compiler):
    """outlines-core keeps a state after 'a' that loops on 'b' forever; it must not be offered."""
    alpha = alphabet({23: "a", 24: "b", 43: "x"})
    auto = compiler.compile(regex_grammar("ab*c|x"), alpha)
    assert allowed(auto, 0) == [43] and auto.num_states == 2
    with pytest.raises(ValueError, match="accepts no complete token sequence"):
        compiler.compile(regex_grammar("ab*c"), alpha)


# --- compiler cache --------------------------------------------------------------------------


@pytest.fixture
def count_builds(monkeypatch):
    builds = []
    real = grammars.compiler.build_automaton

    def counting(spec, alpha):
        builds.append(spec)
        return real(spec, alpha)

    monkeypatch.setattr(grammars.compiler, "build_automaton", counting)
    return builds


def test_compile_is_cached_per_spec_and_alphabet_content(count_builds):
    compiler = GrammarCompiler()
    compiler.warm([point_grammar(4), detect_grammar(4)], alphabet())
    assert len(count_builds) == 2
    auto = compiler.compile(point_grammar(4), alphabet())  # equal alphabet, built anew
    assert compiler.compile(point_grammar(max_objects=4), alphabet()) is auto
    assert len(count_builds) == 2
    assert compiler.compile(point_grammar(5), alphabet()) is not auto
    assert compiler.compile(point_grammar(4), alphabet({10: "0"})) is not auto
    assert len(count_builds) == 4


def test_cache_evicts_least_recently_used(count_builds):
    compiler = GrammarCompiler(max_cached=2)
    a, b, c = point_grammar(1), point_grammar(2), point_grammar(3)
    first = compiler.compile(a, alphabet())
    compiler.compile(b, alphabet())
    compiler.compile(a, alphabet())  # a is now the most recent
    compiler.compile(c, alphabet())  # evicts b
    assert compiler.compile(a, alphabet()) is first
    compiler.compile(b, alphabet())
    assert count_builds == [a, b, c, b]


def test_concurrent_compiles_build_once(count_builds):
    compiler = GrammarCompiler()
    alpha = alphabet()
    results = []
    threads = [threading.Thread(target=lambda: results.append(compiler.compile(detect_grammar(200), alpha))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(r is results[0] for r in results)
    assert count_builds == [detect_grammar(200)]


def test_failed_build_is_not_cached(count_builds):
    compiler = GrammarCompiler()
    for _ in range(2):
        with pytest.raises(ValueError):
            compiler.compile(regex_grammar("("), alphabet())
    assert len(count_builds) == 2


# --- mask table ------------------------------------------------------------------------------


def test_mask_table_rows_match_automata(compiler):
    autos = [compiler.compile(s, alphabet()) for s in (point_grammar(3), detect_grammar(2), regex_grammar("[0-9]{1,3}"))]
    table = MaskTable(vocab_size=VOCAB, capacity=64)
    rows = [table.register(a) for a in autos]
    assert [len(r) for r in rows] == [a.num_states for a in autos]
    distinct = {tuple(allowed(a, s)) for a in autos for s in range(a.num_states)} - {tuple(range(VOCAB))}
    assert table.num_rows == 1 + len(distinct)  # one row per distinct allowed set
    version = table.version
    assert table.register(autos[1]) is rows[1] and table.version == version  # idempotent, no new rows

    pairs = [(None, 0)] + [(a, s) for a in autos for s in range(a.num_states)]
    rng = np.random.default_rng(0)
    pairs = [pairs[i] for i in rng.permutation(len(pairs))]
    ids = np.array([0 if a is None else r[s] for a, s in pairs for r in [rows[autos.index(a)] if a else None]],
                   dtype=np.int64)
    out = np.zeros((len(ids) + 2, VOCAB), dtype=np.bool_)
    out[len(ids):] = True  # rows past the batch must stay untouched
    table.fill(ids, out)
    bits = np.zeros((len(ids), 2), dtype=np.int32)
    table.fill_bitmask(ids, bits)
    for row, (a, s) in enumerate(pairs):
        expected = list(range(VOCAB)) if a is None else allowed(a, s)
        assert np.flatnonzero(out[row]).tolist() == expected
        unpacked = np.unpackbits(bits[row].astype("<i4").view(np.uint8), bitorder="little")
        assert np.flatnonzero(unpacked).tolist() == expected
    assert out[len(ids):].all()


def test_mask_rows_are_shared_across_object_caps(compiler):
    """Every max_objects of point and detect needs the same few rows: a long-running server
    seeing all caps from 1 to 200 cannot fill the table."""
    table = MaskTable(vocab_size=VOCAB, capacity=8)
    for cap in range(1, 201):
        table.register(compiler.compile(detect_grammar(cap), alphabet()))
        table.register(compiler.compile(point_grammar(cap), alphabet()))
    assert table.num_rows == 5  # unconstrained, {coord, eos}, {coord}, {size}, {eos}


def test_bitmask_padding_bits_stay_clear():
    table = MaskTable(vocab_size=40, capacity=2)
    bits = np.zeros((1, 2), dtype=np.int32)
    table.fill_bitmask(np.array([0]), bits)
    assert bits[0, 0] == -1 and bits[0, 1] == 0xFF  # 40 tokens: 32 + 8 bits


def test_mask_table_errors(compiler):
    auto = compiler.compile(detect_grammar(2), alphabet())
    table = MaskTable(vocab_size=VOCAB, capacity=2)
    with pytest.raises(RuntimeError, match="MaskTable full"):
        table.register(auto)
    assert table.num_rows == 1 and table.version == 0
    with pytest.raises(ValueError, match="vocab_size"):
        MaskTable(vocab_size=VOCAB + 1).register(auto)
    table = MaskTable(vocab_size=VOCAB, capacity=16)
    table.register(auto)
    out = np.zeros((2, VOCAB), dtype=np.bool_)
    with pytest.raises(IndexError, match=rf"\[0, {table.num_rows}\)"):
        table.fill(np.array([table.num_rows]), out)
    with pytest.raises(IndexError):
        table.fill(np.array([-1]), out)
    with pytest.raises(ValueError, match="out must be"):
        table.fill(np.array([0, 1, 2]), out)
    with pytest.raises(ValueError, match="out must be"):
        table.fill_bitmask(np.array([0]), np.zeros((1, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="1-D integer"):
        table.fill(np.array([0.0]), out)
