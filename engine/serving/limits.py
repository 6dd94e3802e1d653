"""Every request limit the engine enforces, and the KV-row arithmetic they imply: one home.

A request's KV row holds the image prefix, its prompt and its whole answer:

    kv_positions = prefix_len + prompt tokens + tokens per object · max_objects + 2

(`+ 2`: the final EOS and one scratch position for padding rows, see `engine.worker.runner`).
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
#: Prompt tokens a KV row is sized for by default: the template (≤ 5 ids) around the object text.
MAX_PROMPT_TOKENS = 64

TOKENS_PER_OBJECT = {"point": 2, "detect": 3}


def tokens_per_object(skill: str) -> int:
    return TOKENS_PER_OBJECT[skill]


def answer_budget(skill: str, max_objects: int) -> int:
    """Decode positions a request may write after its prompt: every object plus the EOS."""
    return tokens_per_object(skill) * max_objects + 1


def kv_positions(prefix_len: int, prompt_len: int, skill: str, max_objects: int) -> int:
    """KV positions per row for one request (image prefix + prompt + answer + scratch)."""
    return prefix_len + prompt_len + answer_budget(skill, max_objects) + 1
