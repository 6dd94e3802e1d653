"""Text answers (query, caption): the answer formats a caller may ask for, and the builder that
turns committed text tokens into streamed chunks and the final result.

    answer=None                      free text, until EOS or max_tokens
    answer=Choices(["yes", "no"])    exactly one of the options (a plain list means the same)
    answer=Regex(r"[0-9]+")          text matching the regex as a whole (Rust regex syntax)
    answer=JsonSchema({...})         JSON valid under the schema (a dict, JSON text, or a Pydantic
                                     model class); the result holds the parsed value

Every format becomes a `GrammarSpec` (`answer_grammar`) that the grammar compiler turns into a
token automaton over the model's own vocabulary.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from engine.serving.errors import RequestError
from engine.serving.limits import MAX_CHOICE_CHARS, MAX_CHOICES, MAX_GRAMMAR_CHARS
from grammars import GrammarSpec, choice_grammar, json_schema_grammar, regex_grammar, text_grammar
from grammars.pattern import resolve
from outlines_core.json_schema import NUMBER


@dataclass(frozen=True)
class Choices:
    options: tuple[str, ...]

    def __init__(self, options) -> None:
        if isinstance(options, str) or not isinstance(options, (list, tuple)):
            raise RequestError(f"choices must be a list of strings, got {type(options).__name__}")
        object.__setattr__(self, "options", tuple(options))


@dataclass(frozen=True)
class Regex:
    pattern: str


@dataclass(frozen=True)
class JsonSchema:
    schema: str  # JSON text; key order is kept (it orders the answer's fields)

    def __init__(self, schema) -> None:
        if hasattr(schema, "model_json_schema"):  # a Pydantic model class
            schema = schema.model_json_schema()
        if isinstance(schema, Mapping):
            schema = json.dumps(schema)
        if not isinstance(schema, str):
            raise RequestError(f"a JSON schema must be a dict, JSON text or a Pydantic model, got {type(schema).__name__}")
        object.__setattr__(self, "schema", schema)


AnswerFormat = Choices | Regex | JsonSchema | None

#: Ready-made formats (the UI's "Answer format" choices besides a JSON schema).
PRESET_FORMATS: dict[str, AnswerFormat] = {"free text": None, "yes / no": Choices(("yes", "no")),
                                           "number": Regex(NUMBER)}


def as_answer_format(answer: object) -> AnswerFormat:
    """Accept the format classes, a plain list (choices) or a dict (JSON schema)."""
    if answer is None or isinstance(answer, (Choices, Regex, JsonSchema)):
        return answer
    if isinstance(answer, (list, tuple)):
        return Choices(answer)
    if isinstance(answer, Mapping) or hasattr(answer, "model_json_schema"):
        return JsonSchema(answer)
    raise RequestError(f"answer must be None, Choices([...]), Regex('...') or JsonSchema({{...}}), got {answer!r:.80}")


def answer_from_options(*, choices: str | None = None, regex: str | None = None,
                        schema: str | None = None) -> AnswerFormat:
    """The answer format of the command-line / batch options: `choices` comma-separated,
    `regex` as is, `schema` a JSON file's path or inline JSON text (RequestError if unreadable)."""
    given = [name for name, v in (("choices", choices), ("regex", regex), ("schema", schema)) if v is not None]
    if len(given) > 1:
        raise RequestError(f"give one answer format, not {' and '.join(given)}")
    if choices is not None:
        return Choices([c.strip() for c in choices.split(",") if c.strip()])
    if regex is not None:
        return Regex(regex)
    if schema is None:
        return None
    text = schema
    if not schema.lstrip().startswith(("{", "[")):
        path = Path(schema)
        if not path.is_file():
            raise RequestError(f"--schema {schema!r:.80} is neither a JSON file nor inline JSON")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise RequestError(f"cannot read the schema file {path.name}: {type(e).__name__}") from None
    return JsonSchema(text)


def describe_format(answer: AnswerFormat) -> dict | None:
    """An answer format as JSON data, in the shape `app.serve` takes it in `settings`:
    None (free text), `{"choices": [...]}`, `{"regex": "..."}` or `{"json_schema": {...}}` (the
    schema parsed; its text when it is not JSON). Equal formats give equal data."""
    if answer is None:
        return None
    if isinstance(answer, Choices):
        return {"choices": list(answer.options)}
    if isinstance(answer, Regex):
        return {"regex": answer.pattern}
    try:
        return {"json_schema": json.loads(answer.schema)}
    except json.JSONDecodeError:
        return {"json_schema": answer.schema}


def answer_grammar(answer: AnswerFormat) -> GrammarSpec:
    """The grammar of an answer format; RequestError naming the problem when it is malformed."""
    if answer is None:
        return text_grammar()
    if isinstance(answer, Choices):
        options = answer.options
        if not 1 <= len(options) <= MAX_CHOICES:
            raise RequestError(f"give between 1 and {MAX_CHOICES} choices, got {len(options)}")
        for option in options:
            if not isinstance(option, str) or not option:
                raise RequestError(f"every choice must be non-empty text, got {option!r:.80}")
            if len(option) > MAX_CHOICE_CHARS:
                raise RequestError(f"a choice is {len(option)} characters long; the limit is {MAX_CHOICE_CHARS}")
        return choice_grammar(options)
    text = answer.pattern if isinstance(answer, Regex) else answer.schema
    what = "regex" if isinstance(answer, Regex) else "JSON schema"
    if not isinstance(text, str) or not text:
        raise RequestError(f"the {what} must be non-empty text")
    if len(text) > MAX_GRAMMAR_CHARS:
        raise RequestError(f"the {what} is {len(text):,} characters long; the limit is {MAX_GRAMMAR_CHARS:,}")
    if isinstance(answer, JsonSchema):
        _refuse_ignored_keywords(text)
    try:
        spec = regex_grammar(text) if isinstance(answer, Regex) else json_schema_grammar(text)
        resolve(spec)  # schema → regex now, so an unsupported schema fails here, not at compile time
    except ValueError as e:
        raise RequestError(f"cannot use this {what}: {one_line(e)}") from None
    return spec


#: Schema keywords outlines-core's regex builder ignores: an answer could match the grammar and
#: still break them, so schemas that use them are refused rather than silently not enforced.
IGNORED_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _refuse_ignored_keywords(schema_text: str) -> None:
    try:
        schema = json.loads(schema_text)
    except json.JSONDecodeError:
        return  # json_schema_grammar reports it
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            used = [k for k in IGNORED_KEYWORDS if k in node and isinstance(node[k], (int, float))]
            if used:
                raise RequestError(f"the JSON schema uses {', '.join(used)}, which answer grammars cannot enforce; "
                                   'list the allowed values instead, e.g. {"enum": [0, 1, 2, 3]}')
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def one_line(error: BaseException, limit: int = 300) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class TextBuilder:
    """Committed text tokens → UTF-8 text chunks (streamed) and the result at the end.

    `key` names the result field ("answer" or "caption"); `parse_json` returns the answer as the
    parsed JSON value. A token's bytes may end inside a multi-byte character: the chunk then
    waits for the bytes that complete it."""

    key: str
    token_bytes: Mapping[int, bytes]
    max_tokens: int
    parse_json: bool = False
    tokens: int = 0
    repeated: bool = False  # the repetition guard is for objects; a text answer never repeats one
    _raw: bytearray = field(default_factory=bytearray)
    _decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def add_token(self, token: int) -> str | None:
        self.tokens += 1
        piece = self.token_bytes[token]
        self._raw += piece
        chunk = self._decoder.decode(piece)
        return chunk or None

    def add_coord(self, value: float, *probs: float) -> None:
        raise ValueError("a text answer has no coordinates")

    def add_size(self, w: float, h: float, *probs: float) -> None:
        raise ValueError("a text answer has no sizes")

    def at_limit(self) -> bool:
        return self.tokens >= self.max_tokens

    def text(self) -> str:
        return self._raw.decode("utf-8", errors="replace")

    def result(self) -> dict:
        text = self.text()
        if self.parse_json:
            try:
                return {self.key: json.loads(text)}
            except json.JSONDecodeError as e:
                raise RuntimeError(f"the constrained answer is not JSON ({e}): {text[:80]!r}") from None
        return {self.key: text}
