"""What a narrow model can recognise, as metadata beside its weights.

A checkpoint's config.json may carry a top-level `"vocabulary"` object, e.g. the embedded model's
`{"groups": {"shapes": [...], "colours": [...]}, "examples": ["red circle", ...]}`. The UI lists the
groups, offers the examples and warns about query words outside them. Full Moondream 2 has none:
it reads any text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"[^\W\d_]+|\d+")


@dataclass(frozen=True)
class Vocabulary:
    groups: dict[str, tuple[str, ...]]
    examples: tuple[str, ...] = ()

    @property
    def words(self) -> frozenset[str]:
        return frozenset(w.lower() for group in self.groups.values() for w in group)

    def unknown_words(self, text: str) -> list[str]:
        """Words of `text` outside the vocabulary (lower case, first occurrence order)."""
        known, seen = self.words, []
        for w in _WORD.findall(text.lower()):
            if w not in known and w not in seen:
                seen.append(w)
        return seen

    def to_dict(self) -> dict[str, Any]:
        return {"groups": {k: list(v) for k, v in self.groups.items()}, "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, data: Any) -> Vocabulary:
        """Parse the `"vocabulary"` entry; ValueError on a malformed one."""
        if not isinstance(data, dict) or not isinstance(data.get("groups"), dict):
            raise ValueError('"vocabulary" must be an object with a "groups" object')
        groups = {}
        for name, words in data["groups"].items():
            if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
                raise ValueError(f'"vocabulary.groups.{name}" must be a list of words')
            groups[str(name)] = tuple(words)
        examples = data.get("examples", [])
        if not isinstance(examples, list) or not all(isinstance(e, str) and e.strip() for e in examples):
            raise ValueError('"vocabulary.examples" must be a list of queries')
        return cls(groups, tuple(examples))
