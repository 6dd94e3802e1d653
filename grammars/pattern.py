"""How a `GrammarSpec` becomes one regex over the token alphabet's characters.

Data grammars live next to this file as `<name>.json` with three keys:

- `pattern`: a regex in which `<coord>` / `<size>` name the special tokens and `{param}` is
  replaced by the spec's parameter of that name (regex repeats such as `{2}` are left alone);
- `text`: whether ordinary text tokens belong to the grammar's alphabet;
- `description`: for people.

eos is never written: every grammar accepts eos exactly where its pattern may end.
`regex` and `json_schema` specs are text grammars whose regex comes from the request.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from outlines_core.json_schema import build_regex_from_schema

from .alphabet import SYMBOL_CHARS
from .spec import GrammarSpec

_SYMBOL = re.compile(r"<([a-z_]+)>")
_PARAM = re.compile(r"\{([a-z_]+)\}")
_DATA_KEYS = {"description", "pattern", "text"}


@dataclass(frozen=True)
class Pattern:
    """A regex over text bytes and symbol characters, with the alphabet it draws from."""

    regex: str
    symbols: frozenset[str]  # special tokens the regex uses, by name
    text: bool  # whether text tokens may appear


def resolve(spec: GrammarSpec) -> Pattern:
    if spec.name == "regex":
        return Pattern(str(spec.param("pattern")), frozenset(), text=True)
    if spec.name == "json_schema":
        try:
            regex = build_regex_from_schema(str(spec.param("schema")))
        except (TypeError, ValueError) as e:
            raise ValueError(f"grammar {spec}: unsupported JSON schema: {e}") from e
        return Pattern(regex, frozenset(), text=True)
    return _from_data(spec)


def _from_data(spec: GrammarSpec) -> Pattern:
    data = _load(spec.name)
    params = dict(spec.params)

    def param(m: re.Match[str]) -> str:
        if m.group(1) not in params:
            raise ValueError(f"grammar file {spec.name}.json uses {{{m.group(1)}}} but {spec} has no such parameter")
        return str(params[m.group(1)])

    def symbol(m: re.Match[str]) -> str:
        if m.group(1) not in SYMBOL_CHARS:
            raise ValueError(f"grammar file {spec.name}.json uses unknown symbol <{m.group(1)}>; known: {sorted(SYMBOL_CHARS)}")
        return SYMBOL_CHARS[m.group(1)]

    template = data["pattern"]
    symbols = frozenset(_SYMBOL.findall(template))
    regex = _SYMBOL.sub(symbol, _PARAM.sub(param, template))
    return Pattern(regex, symbols, text=data["text"])


@lru_cache(maxsize=None)
def _load(name: str) -> dict:
    folder = resources.files(__package__)
    if not re.fullmatch(r"[a-z_]+", name) or not (folder / f"{name}.json").is_file():
        known = sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))
        raise ValueError(f"unknown grammar {name!r}; grammar files: {known}, plus 'regex' and 'json_schema'")
    data = json.loads((folder / f"{name}.json").read_text())
    if set(data) != _DATA_KEYS or not isinstance(data["pattern"], str) or not isinstance(data["text"], bool):
        raise ValueError(f"grammar file {name}.json must hold exactly {sorted(_DATA_KEYS)} (pattern: str, text: bool)")
    return data
