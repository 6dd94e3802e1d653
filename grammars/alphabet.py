"""The model's output token alphabet: text tokens plus the special eos/coord/size ids.

Grammars are regexes over characters, but the model emits token ids. outlines-core bridges the
two with a vocabulary that maps each token's *surface bytes* to its ids. Special tokens have no
surface text, so each grammar symbol gets a private-use character instead (`SYMBOL_CHARS`), and
the grammar data files are written over those symbols.

A text token must never be able to spell a reserved character, or a run of text tokens could
impersonate a coord token. All reserved characters lie in U+E000..U+EFFF, whose UTF-8 encodings
(and only theirs) start with the byte 0xEE, so dropping every text token that contains 0xEE makes
such spelling impossible, even from byte-level fragments. The price is that text grammars cannot
emit characters in that private-use block, which real text does not use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

# Private-use characters standing for the special tokens inside regexes.
SYMBOL_CHARS: Mapping[str, str] = MappingProxyType({"coord": "\ue000", "size": "\ue001"})
# Marks the end of a grammar's pattern inside the compiler (see compiler.py); never a real token.
END_CHAR = "\ue0ff"
_RESERVED_LEAD_BYTE = 0xEE
assert all(c.encode()[0] == _RESERVED_LEAD_BYTE for c in [*SYMBOL_CHARS.values(), END_CHAR])


def _byte_level_chars() -> dict[str, int]:
    """Inverse of the GPT-2 byte-level mapping: each byte is shown as one printable character.

    Printable Latin-1 bytes stand for themselves; the remaining 68 bytes are shifted, in order,
    to U+0100 and up. Byte-level BPE vocabularies store tokens in this form.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {chr(b): b for b in printable}
    shifted = sorted(set(range(256)) - set(printable))
    for offset, b in enumerate(shifted):
        chars[chr(256 + offset)] = b
    return chars


_BYTE_LEVEL_CHARS = _byte_level_chars()


@dataclass(frozen=True, eq=False)
class TokenAlphabet:
    """Token ids a grammar may allow, with the surface bytes of the text tokens.

    `text_tokens` is needed only by text grammars (regex / JSON schema). After construction it
    holds a read-only id -> bytes mapping from which special ids, empty tokens (they would let a
    row emit tokens forever without progress) and 0xEE-bearing tokens (see module docstring)
    have been removed. `fingerprint` identifies the content, so equal alphabets built separately
    share compiled automata.
    """

    vocab_size: int
    eos_id: int
    coord_id: int
    size_id: int
    text_tokens: Mapping[int, bytes | str] | None = field(default=None, repr=False)
    fingerprint: str = field(init=False, default="")

    def __post_init__(self) -> None:
        specials = (self.eos_id, self.coord_id, self.size_id)
        if self.vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {self.vocab_size}")
        for name, tid in zip(("eos_id", "coord_id", "size_id"), specials):
            if not 0 <= tid < self.vocab_size:
                raise ValueError(f"{name}={tid} is outside the vocabulary [0, {self.vocab_size})")
        if len(set(specials)) != 3:
            raise ValueError(f"eos, coord and size ids must differ, got {specials}")
        text = _clean_text_tokens(self.text_tokens or {}, self.vocab_size, set(specials))
        object.__setattr__(self, "text_tokens", MappingProxyType(text))
        object.__setattr__(self, "fingerprint", self._content_hash())

    @property
    def symbol_ids(self) -> Mapping[str, int]:
        return {"coord": self.coord_id, "size": self.size_id}

    def _content_hash(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((self.vocab_size, self.eos_id, self.coord_id, self.size_id)).encode())
        for tid in sorted(self.text_tokens):
            h.update(tid.to_bytes(4, "little"))
            h.update(len(self.text_tokens[tid]).to_bytes(4, "little"))
            h.update(self.text_tokens[tid])
        return h.hexdigest()

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, vocab_size: int, eos_id: int = 0, coord_id: int = 5, size_id: int = 6,
        exclude: Iterable[int] = (),
    ) -> TokenAlphabet:
        """Build an alphabet from a byte-level BPE `tokenizers.Tokenizer` (Moondream's kind).

        Model-vocabulary tokens are stored in byte-level form and are converted back to their
        real bytes; non-special added tokens are literal text; special added tokens are excluded
        from text (coord/size still enter grammars as symbols through their ids), and so are the
        ids in `exclude` (e.g. template-only ids a tokenizer does not flag as special).
        """
        if not _uses_byte_level_decoder(json.loads(tokenizer.to_str()).get("decoder")):
            raise ValueError(
                "TokenAlphabet.from_tokenizer supports byte-level BPE tokenizers only; "
                "for other tokenizers pass text_tokens={id: surface bytes} directly"
            )
        added = tokenizer.get_added_tokens_decoder()
        skip = set(exclude)
        text: dict[int, bytes] = {}
        for token, tid in tokenizer.get_vocab(with_added_tokens=True).items():
            if tid >= vocab_size:
                raise ValueError(f"tokenizer id {tid} ({token!r}) does not fit vocab_size={vocab_size}")
            if tid in skip:
                continue
            if tid in added:
                if not added[tid].special:
                    text[tid] = added[tid].content.encode()
                continue
            try:
                text[tid] = bytes(_BYTE_LEVEL_CHARS[ch] for ch in token)
            except KeyError as e:
                raise ValueError(f"token {tid} ({token!r}) is not in byte-level form") from e
        return cls(vocab_size=vocab_size, eos_id=eos_id, coord_id=coord_id, size_id=size_id, text_tokens=text)


def _uses_byte_level_decoder(decoder: dict | None) -> bool:
    if decoder is None:
        return False
    if decoder.get("type") == "Sequence":
        return any(_uses_byte_level_decoder(d) for d in decoder.get("decoders", []))
    return decoder.get("type") == "ByteLevel"


def _clean_text_tokens(tokens: Mapping[int, bytes | str], vocab_size: int, specials: set[int]) -> dict[int, bytes]:
    text: dict[int, bytes] = {}
    for tid, surface in tokens.items():
        tid = int(tid)
        if not 0 <= tid < vocab_size:
            raise ValueError(f"text token id {tid} is outside the vocabulary [0, {vocab_size})")
        raw = surface.encode() if isinstance(surface, str) else bytes(surface)
        if tid in specials or not raw or _RESERVED_LEAD_BYTE in raw:
            continue
        text[tid] = raw
    return text
