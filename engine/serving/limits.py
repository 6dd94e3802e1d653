"""Every request limit the engine enforces, and the KV-row arithmetic they imply: one home.

A request's KV row holds the image prefix, its prompt and its whole answer:

    kv_positions = prefix_len + prompt tokens + answer budget + 1

The answer budget is `tokens per object · max_objects + 1` (the final EOS) for point/detect and
`max_tokens` for query/caption (an answer stops at `max_tokens` tokens; its EOS is never
written). `+ 1`: one scratch position for padding rows, see `engine.worker.runner`.

Rows are sized to the model's context by default (`EngineConfig.kv_positions`) and each request
reserves only its own budget: the decode step's attention is bucketed by the batch's highest
*written* position (`ModelRunner.attn_bucket`), never by the row's capacity, so longer rows
cost memory, not decode time.
"""

from __future__ import annotations

#: Objects per request when the caller does not say (engine API, CLI, batch tool, UI default).
DEFAULT_MAX_OBJECTS = 50
#: The most objects one request may ask for (engine, CLI, batch tool).
MAX_OBJECTS_LIMIT = 200
#: The UI's default cap (`python -m app --max-objects-limit N`, at most MAX_OBJECTS_LIMIT).
UI_MAX_OBJECTS = 100
#: Object text after cleaning, in characters and in tokens.
MAX_OBJECT_CHARS = 200
MAX_OBJECT_TOKENS = 56
#: Answer tokens of query/caption when the caller does not say (Moondream 2's default), cut to
#: what the engine's row can hold after the prompt.
DEFAULT_MAX_TOKENS = 768
#: Question text after cleaning, in characters and in tokens.
MAX_QUESTION_CHARS = 2000
MAX_QUESTION_TOKENS = 512
#: Caption lengths (Moondream 2's templates).
CAPTION_LENGTHS = ("short", "normal", "long")
#: Answer grammars: the regex / JSON-schema text, the number of choices and each choice's length.
MAX_GRAMMAR_CHARS = 16_384
MAX_CHOICES = 256
MAX_CHOICE_CHARS = 200
#: A compiled answer grammar may hold at most this many (automaton states × vocabulary entries):
#: its build time and its host memory (one transition per state and token) grow with it
#: (measured sizes: `python -m grammars.bench`, README "Answer grammars").
MAX_GRAMMAR_CELLS = 100_000_000

TOKENS_PER_OBJECT = {"point": 2, "detect": 3}
TEXT_SKILLS = ("query", "caption")


def tokens_per_object(skill: str) -> int:
    return TOKENS_PER_OBJECT[skill]


def answer_budget(skill: str, limit: int) -> int:
    """Decode positions a request may write after its prompt. `limit` is max_objects for
    point/detect (every object plus the EOS) and max_tokens for query/caption."""
    if skill in TEXT_SKILLS:
        return limit
    return tokens_per_object(skill) * limit + 1


def kv_positions(prefix_len: int, prompt_len: int, skill: str, limit: int) -> int:
    """KV positions per row for one request (image prefix + prompt + answer + scratch)."""
    return prefix_len + prompt_len + answer_budget(skill, limit) + 1


def max_answer_tokens(row_positions: int, prefix_len: int, prompt_len: int) -> int:
    """The most answer tokens a query/caption with this prompt can write in a row of `row_positions`."""
    return row_positions - prefix_len - prompt_len - 1
