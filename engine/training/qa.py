"""Questions, answers and captions about a synthetic scene, for teaching the embedded model the
query and caption skills (training: `engine.training.train`, `RECIPE["qa_frac"]`; scoring:
`python -m engine.evaluate --qa N`).

A `QA` is one request as a user makes it (a question in varied wording, or a caption length) and
the one canonical answer the model learns to write. Answers are lower-case text, written exactly
as below; the model emits them without a leading space, so `Engine.query` / `Engine.caption`
return them character for character.

Which objects count (the same rule as point/detect queries, `engine.training.scenes.matches`):

* count / yes-no questions name a shape ("stars"), a colour and a shape ("red circles") or a
  colour alone ("red objects"); an object outside the vocabulary counts when the attribute asked
  about is its own (a pink circle is one of the circles, a red pentagon one of the red objects).
  Count questions are asked only where the true count is 0–10 (`MAX_COUNT`).
* the colour, which-shapes, list and caption answers name only vocabulary objects (known colour
  and known shape); out-of-vocabulary distractors are never mentioned.

Canonical answers:

    count       "How many red circles are there?"       → "3"          (digits, 0–10)
    yes/no      "Is there a blue star?"                 → "yes" | "no" (drawn 50/50)
    colour      "What colour is the triangle?"          → "green"      (asked only when exactly one
                                                                        object of that shape is in the
                                                                        scene and its colour is known)
    which       "Which shapes are red?"                 → "circle and star": the distinct vocabulary
                                                          shapes of that colour, singular, in
                                                          alphabetical order, joined "a, b and c";
                                                          "none" when nothing has that colour
    list        "List the objects."                     → "blue star, red circle and red square":
                                                          the distinct (colour shape) kinds, sorted
                                                          alphabetically, no counts; "none" if empty
    caption     short  → "two red circles, a blue star and a green triangle"
                normal → "the image shows two red circles, a blue star and a green triangle."
                every vocabulary kind with its count ("a"/"an" for one, "two" … "ten", digits above
                ten), plural nouns, kinds sorted alphabetically as in `list`; an empty scene (or one
                with only distractors): "no shapes" / "the image shows no shapes."

Scoring parsers (`parse_count`, `named_objects`, `parse_list`) read answers leniently only where
a user would: case, surrounding spaces and punctuation, digits or number words ("3" = "three").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.serving.skills import caption_prompt_ids, query_prompt_ids, singular, validate_question
from engine.training.scenes import COLOURS, SHAPES, Scene, make_query, matches, plural

QA_KINDS: tuple[str, ...] = ("count", "yes_no", "colour", "which", "list", "caption")
QA_MIX: dict[str, float] = {"count": 0.25, "yes_no": 0.2, "colour": 0.15, "which": 0.1, "list": 0.1, "caption": 0.2}
MAX_COUNT = 10
NONE = "none"
NUMBER_WORDS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
EMPTY_CAPTION = "no shapes"
CAPTION_OPENING = "the image shows "   # the normal caption: opening + counted listing + "."
TRAINED_CAPTION_LENGTHS: tuple[str, ...] = ("short", "normal")

# Wording templates; {n} the thing named (singular), {p} plural, {c} a colour, {s} a shape.
COUNT_TEMPLATES = ("How many {p} are there?", "How many {p} are in the image?", "How many {p}?", "Count the {p}.",
                   "What is the number of {p}?", "How many {p} can you see?", "Number of {p} in the picture?",
                   "how many {p} do you see")
YES_NO_TEMPLATES = ("Is there {a} {n}?", "Is there {a} {n} in the image?", "Are there any {p}?", "Do you see {a} {n}?",
                    "Does the image contain {a} {n}?", "Can you see any {p}?", "Is {a} {n} present?",
                    "any {p} in the picture?")
COLOUR_TEMPLATES = ("What colour is the {s}?", "What color is the {s}?", "Which colour is the {s}?",
                    "What is the colour of the {s}?", "The {s} is what color?", "Tell me the colour of the {s}.",
                    "what color is the {s} in the image")
WHICH_TEMPLATES = ("Which shapes are {c}?", "What shapes are {c}?", "Which {c} shapes are there?",
                   "What {c} shapes do you see?", "Name the {c} shapes.", "Which shapes are coloured {c}?")
LIST_TEMPLATES = ("List the objects.", "What objects are in the image?", "What shapes are in the image?",
                  "Name all the objects.", "What do you see?", "Which objects are there?",
                  "List every shape in the picture.", "what is in this image")
COLOUR_NOUNS = ("object", "shape", "thing")   # a colour-only question names "red objects" etc.


@dataclass(frozen=True)
class QA:
    kind: str               # one of QA_KINDS
    question: str | None    # the query text as typed (None for a caption)
    length: str | None      # the caption length (None for a query)
    answer: str             # the canonical answer


# --------------------------------------------------------------------------- canonical forms

def known_counts(scene: Scene) -> Counter:
    """(colour, shape) → number of vocabulary objects of that kind."""
    return Counter((o.colour, o.shape) for o in scene.objects if o.known)


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def join(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def count_phrase(n: int, colour: str, shape: str) -> str:
    if n == 1:
        return f"{article(colour)} {colour} {shape}"
    number = NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)
    return f"{number} {colour} {plural(shape)}"


def caption_text(counts: Counter, length: str) -> str:
    body = join([count_phrase(counts[k], *k) for k in sorted(counts)]) if counts else EMPTY_CAPTION
    return body if length == "short" else f"{CAPTION_OPENING}{body}."


def list_text(counts: Counter) -> str:
    return join([f"{c} {s}" for c, s in sorted(counts)]) if counts else NONE


def which_text(scene: Scene, colour: str) -> str:
    shapes = sorted({o.shape for o in scene.objects if o.known and o.colour == colour})
    return join(shapes) if shapes else NONE


# --------------------------------------------------------------------------- questions

def styled(rng: np.random.Generator, text: str) -> str:
    """Case and end-punctuation variation, as users type."""
    r = rng.random()
    if r < 0.15:
        text = text.lower()
    elif r < 0.25:
        text = text.upper()
    elif r < 0.32:
        text = text.title()
    r = rng.random()
    if r < 0.15:
        text = text.rstrip("?.")
    elif r < 0.2 and text[-1:] in "?.":
        text += text[-1]
    return text


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def query_names(rng: np.random.Generator, text: str) -> tuple[str, str]:
    """(singular, plural) of a scene query text ("red circle", "star", "red")."""
    words = text.split()
    if len(words) == 1 and words[0] in COLOURS:
        noun = _pick(rng, COLOUR_NOUNS)
        return f"{words[0]} {noun}", f"{words[0]} {plural(noun)}"
    return text, " ".join(words[:-1] + [plural(words[-1])])


def count_query(rng: np.random.Generator, scene: Scene):
    """The scene query a count question asks about: up to 4 draws for one with at most MAX_COUNT matches."""
    for _ in range(4):
        query = make_query(rng, scene, empty_rate=0.2)
        if len(query.matches) <= MAX_COUNT:
            return query
    return None


def ask_count(rng: np.random.Generator, scene: Scene) -> QA | None:
    query = count_query(rng, scene)
    if query is None:
        return None
    _, p = query_names(rng, query.text)
    return QA("count", styled(rng, _pick(rng, COUNT_TEMPLATES).format(p=p)), None, str(len(query.matches)))


def ask_yes_no(rng: np.random.Generator, scene: Scene) -> QA:
    query = make_query(rng, scene, empty_rate=0.5)
    n, p = query_names(rng, query.text)
    question = _pick(rng, YES_NO_TEMPLATES).format(a=article(n), n=n, p=p)
    return QA("yes_no", styled(rng, question), None, "yes" if query.matches else "no")


def ask_colour(rng: np.random.Generator, scene: Scene) -> QA | None:
    single = [s for s in SHAPES if len(matches(s, scene.objects)) == 1]
    single = [s for s in single if matches(s, scene.objects)[0].colour in COLOURS]
    if not single:
        return None
    shape = _pick(rng, single)
    return QA("colour", styled(rng, _pick(rng, COLOUR_TEMPLATES).format(s=shape)), None,
              matches(shape, scene.objects)[0].colour)


def ask_which(rng: np.random.Generator, scene: Scene) -> QA | None:
    present = sorted({o.colour for o in scene.objects if o.known})
    every = {o.colour for o in scene.objects}
    absent = [c for c in COLOURS if c not in every]
    pool = absent if (not present or rng.random() < 0.2) and absent else present
    if not pool:
        return None
    colour = _pick(rng, pool)
    return QA("which", styled(rng, _pick(rng, WHICH_TEMPLATES).format(c=colour)), None, which_text(scene, colour))


def ask_list(rng: np.random.Generator, scene: Scene) -> QA:
    return QA("list", styled(rng, _pick(rng, LIST_TEMPLATES)), None, list_text(known_counts(scene)))


def ask_caption(rng: np.random.Generator, scene: Scene) -> QA:
    length = _pick(rng, TRAINED_CAPTION_LENGTHS)
    return QA("caption", None, length, caption_text(known_counts(scene), length))


ASK = {"count": ask_count, "yes_no": ask_yes_no, "colour": ask_colour, "which": ask_which, "list": ask_list,
       "caption": ask_caption}


def make_qa(rng: np.random.Generator, scene: Scene) -> QA:
    """One QA of a kind drawn by QA_MIX; a kind the scene cannot be asked about falls back to yes/no."""
    kind = QA_KINDS[int(rng.choice(len(QA_KINDS), p=[QA_MIX[k] for k in QA_KINDS]))]
    return ASK[kind](rng, scene) or ask_yes_no(rng, scene)


def qa_suite(rng: np.random.Generator, scene: Scene) -> list[QA]:
    """One QA of every kind the scene can be asked about, the caption in a random trained length (evaluation)."""
    return [qa for kind in QA_KINDS for qa in [ASK[kind](rng, scene)] if qa is not None]


def qa_ids(qa: QA, tokens, encode) -> tuple[list[int], list[int]]:
    """(prompt ids exactly as the engine builds them for this request, answer ids without EOS)."""
    if qa.kind == "caption":
        prompt = caption_prompt_ids(tokens, qa.length)
    else:
        prompt = query_prompt_ids(tokens, encode, validate_question(qa.question))
    return prompt, list(encode(qa.answer))


# --------------------------------------------------------------------------- lenient parsing (scoring)

_WORD = re.compile(r"[a-z0-9]+")
_NUMBERS = {**{w: i for i, w in enumerate(NUMBER_WORDS)}, "a": 1, "an": 1, "no": 0, "none": 0}


def words(text: str) -> list[str]:
    return _WORD.findall(text.strip().lower())


def parse_count(text: str) -> int | None:
    """The number an answer states: "3", "three", " 3." → 3; "none"/"no"/"zero" → 0; else None."""
    w = words(text)
    if len(w) != 1:
        return None
    if w[0].isdigit():
        return int(w[0])
    return None if w[0] in ("a", "an") else _NUMBERS.get(w[0])


def parse_word(text: str) -> str:
    """A one-word answer, lower-cased, without surrounding spaces and punctuation."""
    return " ".join(words(text))


def parse_list(text: str) -> set[str]:
    """The singular vocabulary words ("circle", "red circle") an answer lists, as a set."""
    out: set[str] = set()
    w = [singular(x) for x in words(text)]
    i = 0
    while i < len(w):
        if w[i] in COLOURS and i + 1 < len(w) and w[i + 1] in SHAPES:
            out.add(f"{w[i]} {w[i + 1]}")
            i += 2
            continue
        if w[i] in SHAPES:
            out.add(w[i])
        i += 1
    return out


def named_objects(text: str) -> dict[tuple[str, str], int | None]:
    """(colour, shape) → count (None where no number precedes it) for every "colour shape" an
    answer names; "two red circles, a blue star" → {("red", "circle"): 2, ("blue", "star"): 1}."""
    out: dict[tuple[str, str], int | None] = {}
    w = words(text)
    for i in range(len(w) - 1):
        shape = singular(w[i + 1])
        if w[i] in COLOURS and shape in SHAPES:
            before = w[i - 1] if i else ""
            n = int(before) if before.isdigit() else _NUMBERS.get(before)
            out[(w[i], shape)] = n
    return out
