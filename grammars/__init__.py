"""Grammars that constrain decoding, and the masks the engine samples under.

    spec (spec.py) --resolve (pattern.py, *.json)--> regex over symbols and text
        --GrammarCompiler (compiler.py, outlines-core Index, cached)--> Automaton (automaton.py)
        --MaskTable.register (masks.py)--> one mask row per state; a step gathers rows by state id

The alphabet (alphabet.py) is the model's output tokens: text tokens plus the special eos, coord
and size ids. point/detect are data files over the coord/size symbols; free text, choices, regex and
JSON-schema grammars are text grammars. eos ends every grammar and is never advanced.
"""

from .alphabet import TokenAlphabet
from .automaton import Automaton, GrammarViolation
from .compiler import GrammarCompiler
from .masks import MaskTable
from .spec import (GrammarSpec, choice_grammar, detect_grammar, json_schema_grammar, point_grammar, regex_grammar,
                   text_grammar)

__all__ = [
    "Automaton",
    "GrammarCompiler",
    "GrammarSpec",
    "GrammarViolation",
    "MaskTable",
    "TokenAlphabet",
    "choice_grammar",
    "detect_grammar",
    "json_schema_grammar",
    "point_grammar",
    "regex_grammar",
    "text_grammar",
]
