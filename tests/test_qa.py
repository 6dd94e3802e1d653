"""engine/training/qa.py: questions and canonical answers on hand-checked scenes, the training
sequences against the serving engine's prompts and answer decoding, and a QA training smoke run."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image

from engine.model.config import TINY
from engine.serving.answers import TextBuilder
from engine.training import qa as Q
from engine.training import train as T
from engine.training.scenes import COLOURS, SHAPES, OWN_SCENES, Scene, SceneObject, make_scene
from engine.training.vocab import build_tokenizer

SMALL_SCENES = {"min_objects": 1, "max_objects": 5, "size_range": (96, 112)}


def obj(colour: str, shape: str, x: float) -> SceneObject:
    return SceneObject(shape=shape, colour=colour, box=(x, 0.4, x + 0.08, 0.48), point=(x + 0.04, 0.44))


# Two red circles, a blue star, a green triangle, a pink circle and a red pentagon (distractors).
HAND = Scene(image=Image.new("RGB", (64, 64)), objects=(
    obj("red", "circle", 0.1), obj("blue", "star", 0.2), obj("red", "circle", 0.3), obj("green", "triangle", 0.4),
    obj("pink", "circle", 0.5), obj("red", "pentagon", 0.6)))
EMPTY = Scene(image=Image.new("RGB", (64, 64)), objects=(obj("gray", "heart", 0.1),))


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def named_in(question: str) -> tuple[str | None, str | None]:
    """(colour, shape) a generated question asks about (independent of qa.py's parsers)."""
    words = question.lower().replace("?", " ").replace(".", " ").split()
    colour = next((w for w in words if w in COLOURS), None)
    shape = next((s for s in SHAPES for w in words if w in (s, s + "s", s + "es")), None)
    return colour, shape


def hand_count(colour, shape) -> int:
    return sum((colour is None or o.colour == colour) and (shape is None or o.shape == shape) for o in HAND.objects)


def test_canonical_answers_of_a_hand_checked_scene():
    counts = Q.known_counts(HAND)
    assert counts == Counter({("red", "circle"): 2, ("blue", "star"): 1, ("green", "triangle"): 1})
    assert Q.caption_text(counts, "short") == "a blue star, a green triangle and two red circles"
    assert Q.caption_text(counts, "normal") == "the image shows a blue star, a green triangle and two red circles."
    assert Q.list_text(counts) == "blue star, green triangle and red circle"
    assert Q.which_text(HAND, "red") == "circle"          # the red pentagon is outside the vocabulary
    assert Q.which_text(HAND, "yellow") == "none"
    assert Q.caption_text(Q.known_counts(EMPTY), "short") == "no shapes"
    assert Q.caption_text(Q.known_counts(EMPTY), "normal") == "the image shows no shapes."
    assert Q.list_text(Q.known_counts(EMPTY)) == "none"
    big = Counter({("orange", "cross"): 1, ("white", "hexagon"): 12, ("black", "square"): 3})
    assert Q.caption_text(big, "short") == "three black squares, an orange cross and 12 white hexagons"


def test_generated_questions_have_the_right_answers():
    seen = Counter()
    for i in range(300):
        rng = np.random.default_rng([1, i])
        qa = Q.make_qa(rng, HAND)
        seen[qa.kind] += 1
        if qa.kind == "count":
            colour, shape = named_in(qa.question)
            assert qa.answer == str(hand_count(colour, shape)), qa
        elif qa.kind == "yes_no":
            colour, shape = named_in(qa.question)
            assert qa.answer == ("yes" if hand_count(colour, shape) else "no"), qa
        elif qa.kind == "colour":   # only the star and the triangle are alone (three circles)
            assert {"star": "blue", "triangle": "green"}[named_in(qa.question)[1]] == qa.answer, qa
        elif qa.kind == "which":
            colour = named_in(qa.question)[0]
            assert qa.answer == {"red": "circle", "blue": "star", "green": "triangle"}.get(colour, "none"), qa
        elif qa.kind == "list":
            assert qa.answer == "blue star, green triangle and red circle"
        else:
            assert qa.question is None and qa.length in ("short", "normal")
    assert set(seen) == set(Q.QA_KINDS)
    # the wording varies: several templates and case forms per kind
    questions = {Q.make_qa(np.random.default_rng([2, i]), HAND).question for i in range(200)}
    assert len(questions) > 60 and any(q and q.isupper() for q in questions) and any(q and q.islower() for q in questions)


def test_yes_no_is_balanced_and_counts_stay_within_ten():
    answers, counts = Counter(), Counter()
    for i in range(400):
        rng = np.random.default_rng([3, i])
        scene = make_scene(rng, **{**OWN_SCENES, "effects": False, "size_range": (96, 128)})
        answers[Q.ask_yes_no(rng, scene).answer] += 1
        c = Q.ask_count(rng, scene)
        if c is not None:
            counts[int(c.answer)] += 1
    assert 0.42 < answers["yes"] / 400 < 0.58, answers
    assert max(counts) <= Q.MAX_COUNT and counts[0] > 0 and len(counts) >= 8, counts


def test_lenient_parsers():
    assert [Q.parse_count(t) for t in ("3", " 3.", "three", "Three", "none", "0", "a", "3 circles", "")] == \
        [3, 3, 3, 3, 0, 0, None, None, None]
    assert Q.parse_word(" Green. ") == "green"
    assert Q.parse_list("Circle and stars") == {"circle", "star"}
    assert Q.parse_list("blue star, red circles and red square") == {"blue star", "red circle", "red square"}
    assert Q.named_objects("Two red circles, a blue star and 12 white hexagons.") == {
        ("red", "circle"): 2, ("blue", "star"): 1, ("white", "hexagon"): 12}
    assert Q.named_objects("the image shows no shapes.") == {}


def test_sequences_use_the_engines_prompt_and_decode_to_the_answer(tokenizer):
    from engine import Engine
    from engine.serving.engine import DEFAULT_WEIGHTS

    engine = Engine.from_pretrained(DEFAULT_WEIGHTS, device="cpu", dtype="fp32", max_batch=2)
    cfg = engine.model_config
    encode = lambda s: tokenizer.encode(s).ids  # noqa: E731
    assert tokenizer.to_str() == engine.tokenizer.to_str()    # training keeps the shipped tokenizer
    image = Image.new("RGB", (96, 96), "white")
    try:
        for i in range(12):
            rng = np.random.default_rng([4, i])
            qa = Q.make_qa(rng, HAND) if i % 2 else Q.ask_caption(rng, HAND)
            if qa.kind == "caption":
                handle = engine.submit(image, "caption", length=qa.length, max_tokens=1)
            else:
                handle = engine.submit(image, "query", qa.question, max_tokens=1)
            prompt, answer = Q.qa_ids(qa, cfg.tokens, encode)
            assert prompt == list(handle.seq.prompt), qa
            handle.result()
            seq = T.qa_sequence(qa, cfg, encode)
            targets = [int(t) for t in seq["lm_tgt"] if t != T.IGNORE]
            assert targets[-1] == cfg.tokens.eos_id and targets[:-1] == answer
            assert list(seq["tok"][len(prompt):]) == answer             # teacher forcing feeds the answer
            builder = TextBuilder("answer", engine.alphabet.text_tokens, max_tokens=len(answer))
            for t in targets[:-1]:
                builder.add_token(t)
            assert builder.result() == {"answer": qa.answer}
    finally:
        engine.close()


def test_make_batch_mixes_qa_sequences(tokenizer):
    prompts = T.prompt_table(TINY, tokenizer)
    plain = T.make_batch(TINY, prompts, 5, 3, batch=2, queries=4, scene_kw=SMALL_SCENES)
    zero = T.make_batch(TINY, prompts, 5, 3, batch=2, queries=4, scene_kw=SMALL_SCENES, qa_frac=0.0, tokenizer=tokenizer)
    assert all(np.array_equal(plain[k], zero[k]) for k in plain) and not plain["lm_qa"].any()
    mixed = T.make_batch(TINY, prompts, 5, 3, batch=3, queries=6, scene_kw=SMALL_SCENES, qa_frac=0.5, tokenizer=tokenizer)
    qa_rows = {int(i) // mixed["tok"].shape[1] for i in mixed["lm_idx"][mixed["lm_qa"]]}
    assert 0 < len(qa_rows) < 18 and mixed["c_idx"].size > 0
    for i in range(mixed["tok"].shape[0]):   # padding after each row's end carries no target
        assert (mixed["lm_tgt"][i, mixed["length"][i]:] == T.IGNORE).all()
    only = T.make_batch(TINY, prompts, 5, 3, batch=2, queries=3, scene_kw=SMALL_SCENES, qa_frac=1.0, tokenizer=tokenizer)
    assert only["lm_qa"].all() and only["c_idx"].size == 0 and only["g_idx"].size == 0


def test_train_smoke_with_questions(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = T.train(tmp_path / "ck", preset="tiny", device="cpu", workers=0, quiet=True, steps=3, batch=2,
                         queries=3, qa_frac=0.5, warmup=1, log_every=1, save_every=1e9, heldout=0, scene=SMALL_SCENES)
        only = T.train(tmp_path / "qa", preset="tiny", device="cpu", workers=0, quiet=True, steps=2, batch=1,
                       queries=2, qa_frac=1.0, warmup=1, log_every=1, save_every=1e9, heldout=0, scene=SMALL_SCENES)
    finally:
        torch.set_num_threads(before)
    assert result.steps == 3 and all(np.isfinite(h["loss"]) for h in result.history + only.history)
    assert all(0.0 <= h["qa_acc"] <= 1.0 for h in result.history)
    assert (tmp_path / "ck" / "model.safetensors").exists()


def test_the_longest_caption_fits_the_context_and_the_evaluation_cap(tokenizer):
    from engine.model.config import EMBEDDED
    from engine.training.evaluate import QA_MAX_TOKENS

    encode = lambda s: tokenizer.encode(s).ids  # noqa: E731
    kinds = [(c, s) for c in COLOURS for s in SHAPES]
    worst = 0
    for n in (1, 2, 12):   # 25 objects: distinct kinds with the longest spellings, or a few kinds many times
        longest = sorted(kinds, key=lambda k: -len(encode(Q.count_phrase(n, *k))))[:max(1, 25 // n)]
        for length in Q.TRAINED_CAPTION_LENGTHS:
            qa = Q.QA("caption", None, length, Q.caption_text(Counter({k: n for k in longest}), length))
            prompt, answer = Q.qa_ids(qa, EMBEDDED.tokens, encode)
            worst = max(worst, len(answer))
            T.qa_sequence(qa, EMBEDDED, encode)   # raises if it does not fit
            assert EMBEDDED.prefix_len + len(prompt) + len(answer) + 1 <= EMBEDDED.text.max_context
    assert worst + 1 <= QA_MAX_TOKENS["caption"]
