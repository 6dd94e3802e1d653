"""Skills: what a request asks for (point, detect, query, caption), its prompt, its result.

The scheduler never interprets payloads; it hands committed (token, value) pairs to a
skill's builder (`ObjectBuilder` here, `engine.serving.answers.TextBuilder` for text answers)
and asks it for the result at the end.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from engine.model.config import TokenConfig
from engine.serving.errors import RequestError
from engine.serving.limits import (CAPTION_LENGTHS, MAX_OBJECT_CHARS, MAX_OBJECT_TOKENS, MAX_OBJECTS_LIMIT,
                                   MAX_QUESTION_CHARS, MAX_QUESTION_TOKENS, TEXT_SKILLS)

SkillName = Literal["point", "detect", "query", "caption"]
OBJECT_SKILLS: tuple[str, ...] = ("point", "detect")
SKILLS: tuple[str, ...] = (*OBJECT_SKILLS, *TEXT_SKILLS)

# Repetition guard (ObjectBuilder): a new object this close to an earlier one of the same request
# is a duplicate; it is dropped and the request ends there.
DUPLICATE_IOU = 0.9          # detect: box IoU above this
DUPLICATE_DISTANCE = 0.01    # point: distance below this, in normalised image units

# Query wording that carries no meaning for point/detect: leading articles and quantifiers.
_LEADING_WORDS = ("a", "an", "the", "all", "any", "every", "each", "some")
_NO_SINGULAR = ("ss", "us", "is", "ous")   # "cross", "circus", "axis", "various": no plural -s to drop


class Point(TypedDict):
    x: float  # normalised to [0, 1] of the image width
    y: float
    score: float  # confidence in [0, 1] (see `object_score`)


class Box(TypedDict):
    x_min: float  # normalised to [0, 1]; clamped to the image
    y_min: float
    x_max: float
    y_max: float
    score: float  # confidence in [0, 1] (see `object_score`)


class PointResult(TypedDict):
    points: list[Point]


class DetectResult(TypedDict):
    objects: list[Box]


class QueryResult(TypedDict):
    answer: object  # the answer text; the parsed JSON value when a JSON schema shaped it


class CaptionResult(TypedDict):
    caption: str


def clean_text(value: object, what: str, limit: int, empty: str) -> str:
    """User text with control characters turned into spaces, invisible characters dropped and
    whitespace runs collapsed; RequestError when it is not text, empty or over `limit` characters."""
    if not isinstance(value, str):
        raise RequestError(f"the {what} must be text, got {type(value).__name__}")
    if len(value) > 16 * limit:  # refuse megabytes of text before scanning it character by character
        raise RequestError(f"the {what} is {len(value):,} characters long; the limit is {limit}")
    # Control characters separate words; other invisible characters (format marks such as
    # zero-width spaces and bidi overrides, lone surrogates, private-use and unassigned
    # code points) are dropped; whitespace runs collapse to one space.
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in value)
    text = " ".join("".join(ch for ch in text if ch.isprintable() or ch.isspace()).split())
    if not text:
        raise RequestError(empty)
    if len(text) > limit:
        raise RequestError(f"the {what} is {len(text)} characters long; the limit is {limit}")
    return text


def validate_request(skill: str, obj: object, max_objects: object) -> tuple[str, int]:
    """Check the user-facing parts of a request; return the cleaned object text and cap."""
    if skill not in SKILLS:
        raise RequestError(f"unknown skill {skill!r}; choose one of {', '.join(SKILLS)}")
    empty = "the object to find is empty; type what to look for, e.g. 'red circle'"
    text = normalize_query(clean_text(obj, "object text", MAX_OBJECT_CHARS, empty))
    if not text:  # only articles or punctuation
        raise RequestError(empty)
    if isinstance(max_objects, bool) or not isinstance(max_objects, numbers.Integral):
        raise RequestError(f"max_objects must be a whole number, got {max_objects!r}")
    max_objects = int(max_objects)
    if not 1 <= max_objects <= MAX_OBJECTS_LIMIT:
        raise RequestError(f"max_objects must be between 1 and {MAX_OBJECTS_LIMIT}, got {max_objects}")
    return text, max_objects


def singular(word: str) -> str:
    """English plural → singular by suffix rules ("circles" → "circle", "crosses" → "cross",
    "boxes" → "box", "berries" → "berry"); words that are not plurals come back unchanged."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(_NO_SINGULAR):
        return word[:-1]
    return word


def normalize_query(text: str) -> str:
    """The canonical wording of an object query, as the model sees it: lower case, punctuation
    (Unicode category P) other than hyphens and apostrophes turned into spaces (symbols, emoji and
    accents stay), one space between words, leading
    articles and quantifiers ("the", "a", "all", …) dropped, every word singular.
    "The Red Circles." → "red circle". A query made only of such words is kept as it is."""
    words = "".join(" " if unicodedata.category(ch).startswith("P") and ch not in "'-" else ch
                    for ch in text.lower()).split()
    k = 0
    while k < len(words) - 1 and words[k] in _LEADING_WORDS:
        k += 1
    kept = [singular(w) for w in words[k:]]
    return " ".join(kept) if kept else " ".join(text.lower().split())


def prompt_ids(tokens: TokenConfig, encode, skill: str, obj: str) -> list[int]:
    """Template ids around the object text; the object is encoded with a leading space.

    Raises RequestError when the object encodes to more than MAX_OBJECT_TOKENS tokens."""
    prefix = tokens.detect_prefix if skill == "detect" else tokens.point_prefix
    ids = encode(" " + obj)
    if len(ids) > MAX_OBJECT_TOKENS:
        raise RequestError(f"the object text encodes to {len(ids)} tokens; the limit is {MAX_OBJECT_TOKENS} "
                           "(describe the object in a few words)")
    return [*prefix, *ids, *tokens.prompt_suffix]


def validate_question(question: object) -> str:
    return clean_text(question, "question", MAX_QUESTION_CHARS,
                      "the question is empty; type a question, e.g. 'How many red circles are there?'")


def query_prompt_ids(tokens: TokenConfig, encode, question: str) -> list[int]:
    """Moondream 2's query template; the question is encoded without a leading space."""
    ids = encode(question)
    if len(ids) > MAX_QUESTION_TOKENS:
        raise RequestError(f"the question encodes to {len(ids)} tokens; the limit is {MAX_QUESTION_TOKENS}")
    return [*tokens.query_prefix, *ids, *tokens.query_suffix]


def caption_prompt_ids(tokens: TokenConfig, length: object) -> list[int]:
    if length not in CAPTION_LENGTHS:
        raise RequestError(f"caption length must be one of {', '.join(CAPTION_LENGTHS)}, got {length!r}")
    return list({"short": tokens.caption_short, "normal": tokens.caption_normal, "long": tokens.caption_long}[length])


def clamp01(v: float) -> float:
    return min(1.0, max(0.0, v))


def is_duplicate(a: dict, b: dict) -> bool:
    """Are two objects of one answer the same object twice (the repetition guard's rule)?"""
    if "x" in a:
        return math.hypot(a["x"] - b["x"], a["y"] - b["y"]) < DUPLICATE_DISTANCE
    ix = min(a["x_max"], b["x_max"]) - max(a["x_min"], b["x_min"])
    iy = min(a["y_max"], b["y_max"]) - max(a["y_min"], b["y_min"])
    inter = max(0.0, ix) * max(0.0, iy)
    union = ((a["x_max"] - a["x_min"]) * (a["y_max"] - a["y_min"])
             + (b["x_max"] - b["x_min"]) * (b["y_max"] - b["y_min"]) - inter)
    return union > 0 and inter / union > DUPLICATE_IOU


def object_score(p_start: float, p_bins: list[float]) -> float:
    """An object's confidence from the model's own probabilities, rounded to 4 decimals:
    p(another object) at the coord-vs-EOS decision that started it, times the geometric mean
    of its coordinate (and size) probabilities (each the bins' mass within ±1 % of the decoded
    value; engine/model/region.py). Deterministic; in [0, 1]."""
    spread = 1.0
    for p in p_bins:
        spread *= p
    return round(min(1.0, max(0.0, p_start * spread ** (1.0 / len(p_bins)))), 4)


@dataclass
class ObjectBuilder:
    """Accumulates committed coord/size values (and their probabilities) into objects, one
    per complete tuple.

    Repetition guard: an object that duplicates an earlier one (`is_duplicate`) is not kept and
    sets `repeated`; the caller (scheduler commit, reference decoder) then ends the request."""

    skill: str
    guard: bool = True      # False: keep duplicates (EngineConfig.repeat_guard)
    objects: list[dict] = field(default_factory=list)
    repeated: bool = False
    _pending: list[float] = field(default_factory=list)
    _p_start: float = 1.0
    _p_bins: list[float] = field(default_factory=list)

    def add_coord(self, value: float, p_token: float = 1.0, p_bin: float = 1.0) -> dict | None:
        """`p_token`: p(coord) at the coord-vs-EOS decision (used for the first coordinate of an
        object: the decision to emit one); `p_bin`: the probability of the value's bins."""
        if not self._pending:
            self._p_start, self._p_bins = p_token, []
        self._pending.append(value)
        self._p_bins.append(p_bin)
        if self.skill == "point" and len(self._pending) == 2:
            x, y = self._pending
            self._pending = []
            return self._emit({"x": x, "y": y})
        return None

    def add_token(self, token: int) -> None:
        """Text tokens carry nothing for point/detect (their grammars never allow one)."""
        return None

    def at_limit(self) -> bool:
        return False  # the grammar ends point/detect: max_objects is in it

    def add_size(self, w: float, h: float, p_w: float = 1.0, p_h: float = 1.0) -> dict | None:
        x, y = self._pending
        self._pending = []
        self._p_bins += [p_w, p_h]
        return self._emit({"x_min": clamp01(x - w / 2), "y_min": clamp01(y - h / 2),
                           "x_max": clamp01(x + w / 2), "y_max": clamp01(y + h / 2)})

    def _emit(self, obj: dict) -> dict | None:
        if self.guard and any(is_duplicate(obj, earlier) for earlier in self.objects):
            self.repeated = True
            return None
        obj["score"] = object_score(self._p_start, self._p_bins)
        self.objects.append(obj)
        return obj

    def result(self) -> dict:
        return {"points": list(self.objects)} if self.skill == "point" else {"objects": list(self.objects)}
