"""Tokenizer files: reading and writing `tokenizer.json`.

Moondream 2's starmie tokenizer reserves ids 0..9 for special tokens (`<|endoftext|>` =
BOS = EOS, then `<|md_reserved_0..8|>`); the ids the engine uses are `engine.model.config.TokenConfig`.
The offline stand-in BPE our small models use is built by `engine.training.vocab`.
"""

from __future__ import annotations

import os
from pathlib import Path

from tokenizers import Tokenizer

STARMIE_SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", *(f"<|md_reserved_{i}|>" for i in range(9)))


def save_tokenizer(tok: Tokenizer, path: str | os.PathLike) -> Path:
    """Write `tok` as tokenizer.json. `path` may be a directory (tokenizer.json goes inside) or a file path."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(p), pretty=True)
    return p


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Read a tokenizer.json (or a directory holding one); ValueError if missing or unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise ValueError(f"tokenizer file not found: {p}")
    try:
        return Tokenizer.from_file(str(p))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON / schema
        raise ValueError(f"cannot load tokenizer from {p}: {exc}") from exc
