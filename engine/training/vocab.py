"""An offline stand-in tokenizer that keeps Moondream's special ids.

The real Moondream 2 tokenizer (starmie-v1) cannot be downloaded here, so the tiny models
we train use a small byte-level BPE built deterministically from a built-in corpus:

* ids 0..9 are the special tokens ``<|endoftext|>`` (BOS = EOS = 0) and
  ``<|md_reserved_0|>`` .. ``<|md_reserved_8|>`` (answer = 3, coord = 5, size = 6), as in
  starmie;
* id 10 is the word ``detect`` and id 11 the word ``point``, so the TINY preset's prompt
  templates ``detect_prefix = (1, 10, 2)`` and ``point_prefix = (1, 11, 2)`` read
  ``<|md_reserved_0|>detect<|md_reserved_1|>`` and ``<|md_reserved_0|>point<|md_reserved_1|>``;
* the 256 byte symbols follow, so any text encodes without unknown tokens;
* the rest are BPE merges learned from the scene vocabulary (colours and shapes, with and
  without a leading space, weighted highest), a few prompt words and common English words,
  digits and the caller's ``extra_words``.

No post-processor is attached: ``encode(text).ids`` never adds special tokens.
"""

from __future__ import annotations

import json
from typing import Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.model.config import TINY
from engine.model.tokenizer import STARMIE_SPECIAL_TOKENS

SPECIAL_TOKENS: list[str] = list(STARMIE_SPECIAL_TOKENS)
DETECT_ID = TINY.tokens.detect_prefix[1]   # the prompt words the small presets' templates use
POINT_ID = TINY.tokens.point_prefix[1]
PINNED_WORDS: tuple[str, ...] = ("detect", "point")   # ids 10, 11

# Words beyond the scene vocabulary (engine.training.scenes.QUERY_WORDS), in decreasing priority.
PROMPT_WORDS: tuple[str, ...] = ("detect", "point", "query", "caption", "object", "objects", "all", "the", "a", "an")
ENGLISH_WORDS: tuple[str, ...] = (
    "and", "of", "in", "on", "is", "are", "there", "this", "that", "with", "to", "it", "what",
    "how", "many", "where", "which", "color", "colour", "shape", "shapes", "image", "picture",
    "left", "right", "top", "bottom", "big", "small", "large", "no", "yes", "one", "two", "three",
)
DIGITS: tuple[str, ...] = tuple("0123456789")
# specials + bytes + the merges spelling the pinned words (d-e-t-e-c-t: 5, p-o-i-n-t: 4)
MIN_VOCAB = len(SPECIAL_TOKENS) + 256 + sum(len(w) - 1 for w in PINNED_WORDS)


def _corpus(extra_words: Sequence[str]) -> list[str]:
    """Training lines. Each word appears both bare and after a space; repetition sets merge priority."""
    from engine.training.scenes import COLOURS, QUERY_WORDS, SHAPES

    lines: list[str] = [w for w in PINNED_WORDS for _ in range(2000)]   # their merges come first
    weighted: list[tuple[str, int]] = []
    weighted += [(w, 200) for w in PINNED_WORDS]
    weighted += [(w, 200) for w in QUERY_WORDS]
    weighted += [(w, 60) for w in PROMPT_WORDS if w not in PINNED_WORDS]
    weighted += [(w, 30) for w in extra_words]
    weighted += [(w, 10) for w in ENGLISH_WORDS]
    weighted += [(w, 10) for w in DIGITS]
    for word, reps in weighted:
        lines += [word, " " + word] * reps
    # A few phrases as they appear in prompts ("red circle") so spacing/pairs look natural.
    for c in COLOURS:
        for s in SHAPES:
            lines.append(f" {c} {s}")
    return lines


def build_tokenizer(vocab_size: int = 512, extra_words: Sequence[str] = ()) -> Tokenizer:
    """Train the stand-in BPE (deterministic: same arguments, same tokenizer.json)."""
    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB} (10 specials, 256 bytes, the merges "
                         f"spelling {' and '.join(PINNED_WORDS)}), got {vocab_size}")
    for w in extra_words:
        if not isinstance(w, str) or not w.strip():
            raise ValueError(f"extra_words must be non-empty strings, got {w!r}")

    # 1. Learn merges. The trainer puts the special tokens first (ids 0..9), then the byte alphabet.
    draft = Tokenizer(models.BPE())
    draft.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    draft.train_from_iterator(_corpus(extra_words), trainer=trainer)
    spec = json.loads(draft.to_str())["model"]
    vocab: dict[str, int] = spec["vocab"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    for word in PINNED_WORDS:
        if word not in vocab:
            raise ValueError(f"BPE training did not produce a single token for {word!r}; raise vocab_size")

    # 2. Renumber: specials 0..9, pinned words 10, 11, then the rest in trained order.
    order = list(SPECIAL_TOKENS) + list(PINNED_WORDS)
    order += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in set(order)]
    new_vocab = {t: i for i, t in enumerate(order)}
    assert len(new_vocab) == len(vocab) <= vocab_size

    tok = Tokenizer(models.BPE(vocab=new_vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i
    assert tok.token_to_id("detect") == DETECT_ID and tok.token_to_id("point") == POINT_ID
    return tok


def stand_in_tokenizer(config) -> Tokenizer:
    """The stand-in BPE for a model of `config` (a `MoondreamConfig`), for random checkpoints and
    benchmarks: at most 512 learned tokens, then placeholder tokens ``<|stand_in_k|>`` up to the
    highest prompt-template id, so every id the templates use exists (the real starmie tokenizer
    has words there; random weights do not care which) and the tokenizer checks of
    `engine.model.tokenizer` accept it."""
    t = config.tokens
    tok = build_tokenizer(vocab_size=min(512, config.text.vocab_size))
    highest = max(*t.detect_prefix, *t.point_prefix, *t.prompt_suffix)
    size = tok.get_vocab_size()
    if highest >= size:
        tok.add_tokens([AddedToken(f"<|stand_in_{i}|>", special=True, normalized=False)
                        for i in range(size, highest + 1)])
    return tok
