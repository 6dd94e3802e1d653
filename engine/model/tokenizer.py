"""Tokenizer files: reading and writing `tokenizer.json`.

Moondream 2's starmie tokenizer reserves ids 0..9 for special tokens (`<|endoftext|>` =
BOS = EOS, then `<|md_reserved_0..8|>`); the ids the engine uses are `engine.model.config.TokenConfig`.
The offline stand-in BPE our small models use is built by `engine.training.vocab` and keeps
those ids. `resolve_tokenizer` picks the tokenizer for a checkpoint and refuses, with the fix,
any that would encode prompts with the wrong ids (e.g. the stale GPT-2 one in the Hub repository).
"""

from __future__ import annotations

import os
from pathlib import Path

from tokenizers import Tokenizer

from engine.model import hub
from engine.model.config import MoondreamConfig

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


STARMIE_ID = "moondream/starmie-v1"


def starmie_problems(tok: Tokenizer, config: MoondreamConfig) -> list[str]:
    """Why `tok` cannot encode prompts for a model of `config` ([] when it can).

    A Moondream-2 starmie tokenizer has `<|endoftext|>` = 0 (BOS = EOS) and `<|md_reserved_k|>` =
    k + 1 (answer 3, coord 5, size 6); the special ids `config.tokens` uses are checked by name,
    every other template id must exist, and the vocabulary must fit the model's embedding table.
    """
    problems = []
    vocab, limit = tok.get_vocab_size(), config.text.vocab_size
    if vocab > limit:
        problems.append(f"it has {vocab} tokens but the model only {limit}")
    t = config.tokens
    used = sorted({*t.detect_prefix, *t.point_prefix, *t.prompt_suffix})
    specials = sorted({t.bos_id, t.eos_id, t.answer_id, t.coord_id, t.size_id,
                       *(i for i in used if i < len(STARMIE_SPECIAL_TOKENS))})
    wrong = [f"{STARMIE_SPECIAL_TOKENS[i]} is {tok.token_to_id(STARMIE_SPECIAL_TOKENS[i])}, not {i}"
             for i in specials if i < len(STARMIE_SPECIAL_TOKENS) and tok.token_to_id(STARMIE_SPECIAL_TOKENS[i]) != i]
    if wrong:
        eos = tok.token_to_id("<|endoftext|>")
        style = f" (<|endoftext|> = {eos}: a GPT-2-style tokenizer)" if eos not in (None, 0) else ""
        problems.append("special ids differ from starmie's: " + "; ".join(wrong[:3])
                        + (f"; and {len(wrong) - 3} more" if len(wrong) > 3 else "") + style)
    absent = [i for i in used if i >= min(vocab, limit) or tok.id_to_token(i) is None]
    if absent:
        problems.append(f"the prompt template ids {absent} are not in its vocabulary")
    return problems


def check_tokenizer(tok: Tokenizer, config: MoondreamConfig, label: str, fix: str) -> Tokenizer:
    """`tok` if it passes `starmie_problems`, else a ValueError naming the problems and `fix`."""
    problems = starmie_problems(tok, config)
    if problems:
        raise ValueError(f"tokenizer {label} cannot be used with this model: {'; '.join(problems)}; {fix}")
    return tok


def resolve_tokenizer(spec: str | os.PathLike | None, weights_dir: Path,
                      config: MoondreamConfig) -> tuple[Tokenizer, str]:
    """(tokenizer, where it came from) for `--tokenizer spec` with weights in `weights_dir`.

    `spec` is a tokenizer.json, a directory holding one, or a Hub id (`org/name[@REV]`). Without
    one, the weights directory's tokenizer.json is used if it passes the starmie checks, else
    `moondream/starmie-v1` from the Hub (cached). A tokenizer that fails the checks is never used:
    ValueError (the checkpoint loader reports it as a CheckpointError) says what to pass.
    """
    fix = f"pass --tokenizer with a Moondream-2 starmie tokenizer.json (or the Hub id {STARMIE_ID})"
    if spec is not None:
        source = hub.parse_source(spec)
        return check_tokenizer(load_tokenizer(hub.tokenizer_file(source)), config, source.label, fix), source.label
    local = weights_dir / "tokenizer.json"
    reasons = []
    if local.is_file():
        try:
            tok = load_tokenizer(local)
        except ValueError as e:
            reasons.append(str(e))
        else:
            problems = starmie_problems(tok, config)
            if not problems:
                return tok, str(local)
            reasons.append(f"{local} is not a starmie tokenizer ({'; '.join(problems)})")
    else:
        reasons.append(f"{weights_dir} has no tokenizer.json")
    source = hub.parse_source(STARMIE_ID)
    try:
        path = hub.tokenizer_file(source)
    except ValueError as e:
        raise ValueError(f"no usable tokenizer: {reasons[0]}, and {STARMIE_ID} is unavailable ({e}); {fix}") from None
    return check_tokenizer(load_tokenizer(path), config, STARMIE_ID, fix), STARMIE_ID
