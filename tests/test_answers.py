"""query and caption: prompt templates, answer grammars, limits, streaming, and the pipelined
engine against the blocking mode and the grammar-masked reference decoder (CPU, float64)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.serving.engine as engine_module
from engine import Cancelled, Engine, EngineConfig, RequestError
from engine.model.config import EMBEDDED, MOONDREAM2, TINY
from engine.model.image import load_image, overlap_crop_image
from engine.model.reference import reference_answer
from engine.serving.answers import Choices, JsonSchema, Regex, as_answer_format
from engine.serving.limits import kv_positions
from engine.serving.skills import caption_prompt_ids, prompt_ids, query_prompt_ids
from tests.conftest import random_image, torch_threads
from tests.fake_runner import FakeRunner


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield

IMAGES = [random_image(i, 60 + 40 * i, 200 - 30 * i) for i in range(3)]
QUESTIONS = ["How many red circles are there?", "Is there a blue star?", "What colour is the square?"]


# ---- templates ------------------------------------------------------------------------------

def test_moondream2_templates_are_the_official_ids(tokenizer):
    encode = lambda s: tokenizer.encode(s).ids  # noqa: E731
    t = MOONDREAM2.tokens
    assert query_prompt_ids(t, encode, "What is this?") == [1, 15381, 2, *encode("What is this?"), 3, 3]
    assert caption_prompt_ids(t, "short") == [1, 32708, 2, 12492, 3]
    assert caption_prompt_ids(t, "normal") == [1, 32708, 2, 6382, 3]
    assert caption_prompt_ids(t, "long") == [1, 32708, 2, 4059, 3]
    with pytest.raises(RequestError, match="caption length must be one of short, normal, long"):
        caption_prompt_ids(t, "medium")


@pytest.mark.parametrize("preset", [TINY, EMBEDDED])
def test_small_presets_spell_the_templates_with_the_stand_in_tokenizer(tokenizer, preset):
    t = preset.tokens
    special = {1: "<|md_reserved_0|>", 2: "<|md_reserved_1|>", 3: "<|md_reserved_2|>"}
    show = lambda ids: "".join(special.get(i) or tokenizer.decode([i]) for i in ids)  # noqa: E731
    assert show(t.query_prefix) == "<|md_reserved_0|>query<|md_reserved_1|>"
    assert show(t.query_suffix) == "<|md_reserved_2|><|md_reserved_2|>"
    for length in ("short", "normal", "long"):
        assert show(caption_prompt_ids(t, length)) == f"<|md_reserved_0|>caption<|md_reserved_1|>{length}<|md_reserved_2|>"


# ---- engines --------------------------------------------------------------------------------

def tiny_engine(model, tokenizer, **config) -> Engine:
    return Engine(model, tokenizer, **config)


def fake_engine(tokenizer, model_config=TINY, **config) -> Engine:
    t = model_config.tokens
    rows = config.get("max_batch", 2)
    max_len = EngineConfig(**config).kv_positions(model_config)
    runner = FakeRunner(rows=rows, max_len=max_len, coord_id=t.coord_id, size_id=t.size_id, eos_id=t.eos_id,
                        vocab_size=model_config.text.vocab_size, mask_capacity=config.get("mask_capacity", 256))
    return Engine(SimpleNamespace(config=model_config), tokenizer, runner=runner, **config)


def test_rows_hold_the_context_so_detect_69_objects_fits_moondream2(tokenizer):
    """Issue #17 item 4: 'detect --max-objects 69' needed 946 positions of a 945-position row."""
    assert EngineConfig().kv_positions(MOONDREAM2) == MOONDREAM2.text.max_context
    prompt = prompt_ids(MOONDREAM2.tokens, lambda s: tokenizer.encode(s).ids, "detect", "star")
    assert kv_positions(MOONDREAM2.prefix_len, len(prompt), "detect", 200) < MOONDREAM2.text.max_context - 1
    engine = fake_engine(tokenizer, MOONDREAM2, max_batch=2)
    engine.runner.objects_for = lambda prompt: 69
    assert len(engine.detect(IMAGES[0], "star", max_objects=69)["objects"]) == 69
    # 200 objects (the API's limit) fit too; a caller may still cap the engine lower.
    assert len(engine.detect(IMAGES[0], "star", max_objects=200)["objects"]) == 69
    capped = fake_engine(tokenizer, MOONDREAM2, max_batch=2, max_objects=50)
    with pytest.raises(RequestError, match="max_objects 69 exceeds this engine's limit of 50"):
        capped.detect(IMAGES[0], "star", max_objects=69)


def test_text_requests_are_checked_before_they_queue(tiny_model64, tokenizer):
    engine = tiny_engine(tiny_model64, tokenizer, max_batch=1)
    room = engine.runner.scratch_pos - TINY.prefix_len - len(TINY.tokens.caption_normal) - 1
    bad = {
        "question is empty": dict(skill="query", obj="  \x00 "),
        "question must be text": dict(skill="query", obj=42),
        "caption length must be one of": dict(skill="caption", length="huge"),
        "caption takes no answer format": dict(skill="caption", answer=Choices(["a"])),
        f"max_tokens must be a whole number from 1 to {room}": dict(skill="caption", max_tokens=room + 1),
        "max_tokens must be a whole number": dict(skill="query", obj="hi", max_tokens=0),
        "between 1 and 256 choices": dict(skill="query", obj="hi", answer=Choices([])),
        "every choice must be non-empty text": dict(skill="query", obj="hi", answer=["yes", ""]),
        "invalid regex": dict(skill="query", obj="hi", answer=Regex("a)(b")),
        "cannot use this JSON schema": dict(skill="query", obj="hi", answer=JsonSchema("{not json")),
        "answer must be None, Choices": dict(skill="query", obj="hi", answer=42),
        "uses minimum, maximum, which answer grammars cannot enforce": dict(
            skill="query", obj="hi", answer={"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                                                   "maximum": 9}}}),
    }
    for message, request in bad.items():
        skill = request.pop("skill")
        with pytest.raises(RequestError, match=re.escape(message)):
            engine.submit(IMAGES[0], skill, **request)
    assert engine.queued() == 0
    assert engine.query(IMAGES[0], "Is there a star?", answer=["yes", "no"])["answer"] in ("yes", "no")


def test_a_grammar_too_large_or_without_mask_rows_is_refused(tokenizer, monkeypatch):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}, "required": ["a", "b"]}
    engine = fake_engine(tokenizer, mask_capacity=6)
    with pytest.raises(RequestError, match=r"needs \d+ mask rows; this engine holds 5"):
        engine.submit(IMAGES[0], "query", "hi", answer=JsonSchema(schema))
    monkeypatch.setattr(engine_module, "MAX_GRAMMAR_CELLS", 512 * 10)
    with pytest.raises(RequestError, match=r"answer grammar is too large: \d+ states x 512 tokens"):
        fake_engine(tokenizer).submit(IMAGES[0], "query", "hi", answer=Regex("[a-z]{20}"))
    assert fake_engine(tokenizer).point(IMAGES[0], "star", max_objects=2)["points"]  # point still serves


def test_answer_formats_accept_plain_values_and_pydantic_models():
    pydantic = pytest.importorskip("pydantic")

    class Count(pydantic.BaseModel):
        count: int

    assert as_answer_format(["yes", "no"]) == Choices(("yes", "no"))
    assert json.loads(as_answer_format({"type": "integer"}).schema) == {"type": "integer"}
    assert json.loads(as_answer_format(Count).schema)["required"] == ["count"]


def test_stream_yields_text_chunks_that_make_the_answer(tiny_model64, tokenizer):
    engine = tiny_engine(tiny_model64, tokenizer, max_batch=2)
    chunks = list(engine.stream(IMAGES[1], "query", QUESTIONS[0], answer=Regex("[a-z ]{3,12}")))
    result = engine.query(IMAGES[1], QUESTIONS[0], answer=Regex("[a-z ]{3,12}"))
    assert all(isinstance(c, str) and c for c in chunks) and len(chunks) > 1
    assert "".join(chunks) == result["answer"]
    assert re.fullmatch("[a-z ]{3,12}", result["answer"])


def test_max_tokens_cuts_free_text_and_fails_an_unfinished_schema(tiny_model64, tokenizer):
    engine = tiny_engine(tiny_model64, tokenizer, max_batch=2)
    caption = engine.caption(IMAGES[0], "short", max_tokens=3)["caption"]
    tokens = reference_tokens(tiny_model64, tokenizer, 0, "caption", "short", None, 3)[0]
    assert caption == surface(tokenizer, tokens) and len(tokens) == 3
    with pytest.raises(RequestError, match="did not complete within max_tokens=2"):
        engine.query(IMAGES[0], "hi", answer=JsonSchema({"type": "object", "properties": {"x": {"type": "boolean"}},
                                                         "required": ["x"]}), max_tokens=2)
    engine.run_until_idle()  # the failed request's row is released once its in-flight step drains
    assert engine.pools()["rows_in_use"] == 0


# ---- random grammars and schedules: pipelined ≡ blocking ≡ reference ---------------------------

WORDS = ["yes", "no", "red", "blue", "circle", "two", "3", "a b", "x.y", "?!"]
REGEXES = ["[a-z]{1,6}", "(yes|no)", "[0-9]{1,3}", "(red|blue|green) [a-z]{2,5}", "[A-Za-z ,.]{2,10}", "-?[0-9]+"]
FIELDS = {
    "bool": {"type": "boolean"},
    "colour": {"enum": ["red", "blue", "green"]},
    "count": {"enum": [0, 1, 2, 3, 10]},
    "number": {"type": "integer"},
    "name": {"type": "string", "maxLength": 4},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
}


@st.composite
def answer_formats(draw):
    kind = draw(st.sampled_from(["free", "choices", "regex", "schema"]))
    if kind == "free":
        return None
    if kind == "choices":
        return Choices(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True)))
    if kind == "regex":
        return Regex(draw(st.sampled_from(REGEXES)))
    names = draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3, unique=True))
    return JsonSchema({"type": "object", "properties": {n: FIELDS[n] for n in names}, "required": names})


request = st.fixed_dictionaries({
    "arrival": st.integers(0, 8),
    "skill": st.sampled_from(["query", "query", "caption"]),
    "question": st.integers(0, len(QUESTIONS) - 1),
    "answer": answer_formats(),
    "length": st.sampled_from(["short", "normal"]),
    "max_tokens": st.integers(1, 24),
    "image": st.integers(0, len(IMAGES) - 1),
    "cancel_after": st.one_of(st.none(), st.integers(0, 6)),
})

_reference: dict = {}


def reference_tokens(model, tokenizer, image, skill, question_or_length, answer, max_tokens):
    key = (image, skill, question_or_length, answer, max_tokens)
    if key not in _reference:
        cfg = model.config
        engine = Engine(model, tokenizer, max_batch=1)  # for its compiled grammar only
        if skill == "query":
            prompt = query_prompt_ids(cfg.tokens, lambda s: tokenizer.encode(s).ids, question_or_length)
            handle = engine.submit(IMAGES[image], "query", question_or_length, answer=answer, max_tokens=max_tokens)
        else:
            prompt = caption_prompt_ids(cfg.tokens, question_or_length)
            handle = engine.submit(IMAGES[image], "caption", length=question_or_length, max_tokens=max_tokens)
        crops = overlap_crop_image(load_image(IMAGES[image]), cfg.vision)
        _reference[key] = reference_answer(model, crops, prompt, handle.seq.automaton, max_tokens)
    return _reference[key]


def submit(engine: Engine, req: dict):
    if req["skill"] == "query":
        return engine.submit(IMAGES[req["image"]], "query", QUESTIONS[req["question"]], answer=req["answer"],
                             max_tokens=req["max_tokens"])
    return engine.submit(IMAGES[req["image"]], "caption", length=req["length"], max_tokens=req["max_tokens"])


def outcome(handle):
    try:
        return handle.future.result(timeout=0)
    except (Cancelled, RequestError) as e:
        return type(e).__name__


def in_language(answer, fmt) -> bool:
    if isinstance(fmt, Choices):
        return answer in fmt.options
    if isinstance(fmt, Regex):
        return re.fullmatch(fmt.pattern, answer) is not None
    if isinstance(fmt, JsonSchema):
        jsonschema.validate(answer, json.loads(fmt.schema))
        return True
    return isinstance(answer, str)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(schedule=st.lists(request, min_size=1, max_size=5), max_batch=st.integers(1, 3),
       mask_capacity=st.sampled_from([64, 1024]))
def test_random_grammars_and_schedules_match_blocking_and_reference(tiny_model64, tokenizer, schedule, max_batch,
                                                                     mask_capacity):
    """64 mask rows hold one schema's rows (≤ 48 here) but not several: the table is rebuilt."""
    outcomes = {}
    for pipelined in (True, False):
        engine = Engine(tiny_model64, tokenizer, max_batch=max_batch, pipelined=pipelined, prefix_cache_size=2,
                        mask_capacity=mask_capacity)
        handles, cancels, tick = {}, {}, 0
        while len(handles) < len(schedule) or not engine.scheduler.is_idle() or not engine.pipeline.is_idle():
            for n, req in enumerate(schedule):
                if req["arrival"] == tick:
                    handles[n] = submit(engine, req)
                    if req["cancel_after"] is not None:
                        cancels.setdefault(tick + req["cancel_after"], []).append(handles[n])
            for h in cancels.pop(tick, []):
                h.cancel()
            engine.step()
            tick += 1
            assert tick < 2000, "schedule did not finish"
        outcomes[pipelined] = {n: outcome(h) for n, h in handles.items()}
        assert engine.scheduler.retired == len(schedule)
        assert engine.pools()["rows_in_use"] == 0 and engine.pools()["steps_in_flight"] == 0
    for n, req in enumerate(schedule):
        which = QUESTIONS[req["question"]] if req["skill"] == "query" else req["length"]
        fmt = req["answer"] if req["skill"] == "query" else None
        tokens, complete = reference_tokens(tiny_model64, tokenizer, req["image"], req["skill"], which, fmt,
                                            req["max_tokens"])
        key = "answer" if req["skill"] == "query" else "caption"
        text = surface(tokenizer, tokens)
        expected = ({key: json.loads(text) if isinstance(fmt, JsonSchema) else text} if complete else "RequestError")
        for pipelined in (True, False):
            got = outcomes[pipelined][n]
            if req["cancel_after"] is None:
                assert got == expected, (pipelined, req)
            else:
                assert got in ("Cancelled", expected), (pipelined, req)
            if isinstance(got, dict):
                assert in_language(got[key], fmt), (got, fmt)
                assert len(tokens) <= req["max_tokens"]


def surface(tokenizer, tokens: list[int]) -> str:
    """The answer text of `tokens`, independently of the engine's alphabet: each byte-level BPE
    token's characters mapped back to bytes (GPT-2's byte map), decoded with replacement."""
    raw = b"".join(bytes(_BYTE_OF[ch] for ch in tokenizer.id_to_token(t)) for t in tokens)
    return raw.decode("utf-8", errors="replace")


def _byte_map() -> dict[str, int]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out = {chr(b): b for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in keep):
        out[chr(256 + n)] = b
    return out


_BYTE_OF = _byte_map()


def test_enum_and_boolean_schemas_always_finish_and_validate(tiny_model64, tokenizer):
    """Non-vacuous: bounded schemas finish within max_tokens, so every answer is checked."""
    schema = {"type": "object", "properties": {"colour": FIELDS["colour"], "bool": FIELDS["bool"],
                                               "tags": FIELDS["tags"]}, "required": ["colour", "bool", "tags"]}
    engine = Engine(tiny_model64, tokenizer, max_batch=3)
    handles = [engine.submit(img, "query", q, answer=JsonSchema(schema), max_tokens=60)
               for img, q in zip(IMAGES, QUESTIONS)]
    for h in handles:
        answer = h.result()["answer"]
        jsonschema.validate(answer, schema)


# ---- command line and batch tool ------------------------------------------------------------

def test_cli_query_and_caption_print_json(tiny_ckpt, small_image_png, tmp_path, capsys):
    from engine.__main__ import main

    image, weights = str(small_image_png), ["--weights", str(tiny_ckpt)]
    assert main(["query", image, "Is there a star?", "--choices", "yes,no", *weights]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] in ("yes", "no")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"c": FIELDS["colour"]}, "required": ["c"]}))
    assert main(["query", image, "What colour?", "--schema", str(schema), "--max-tokens", "30", *weights]) == 0
    assert json.loads(capsys.readouterr().out)["answer"]["c"] in ("red", "blue", "green")
    assert main(["caption", image, "--length", "short", "--max-tokens", "4", *weights]) == 0
    assert isinstance(json.loads(capsys.readouterr().out)["caption"], str)
    assert main(["query", image, "hi", "--regex", "a)(b", *weights]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot use this answer format") and err.count("\n") == 1
    assert main(["query", image, "hi", "--schema", str(tmp_path / "missing.json"), *weights]) == 2
    assert "neither a JSON file nor inline JSON" in capsys.readouterr().err


# ---- the UI's Ask and Caption handlers --------------------------------------------------------

def test_ui_ask_yes_no_and_json_schema_and_caption(tiny_model64, tokenizer, small_image_png):
    import gradio as gr
    from app.ui import make_text_handler

    engine = Engine(tiny_model64, tokenizer, max_batch=2).start()
    try:
        ask, caption = make_text_handler(engine, "query"), make_text_handler(engine, "caption")
        _, payload, status = ask(str(small_image_png), "Is there a star?", "yes / no", "", "normal")
        assert payload["answer"] in ("yes", "no") and status.startswith(f"answer: {payload['answer']} (")
        schema = json.dumps({"type": "object", "properties": {"c": FIELDS["colour"], "ok": FIELDS["bool"]},
                             "required": ["c", "ok"]})
        _, payload, _ = ask(str(small_image_png), "What colour?", "JSON schema", schema, "normal")
        jsonschema.validate(payload["answer"], json.loads(schema))
        _, payload, _ = caption(str(small_image_png), "", "free text", "", "short")
        assert isinstance(payload["caption"], str) and payload["length"] == "short"
        for args, message in (((None, "q", "free text", "", "normal"), "Upload an image"),
                              ((str(small_image_png), " ", "free text", "", "normal"), "Type a question"),
                              ((str(small_image_png), "q", "JSON schema", "{oops", "normal"), "not valid JSON")):
            with pytest.raises(gr.Error, match=message):
                ask(*args)
    finally:
        engine.close()


# ---- a full mask table is rebuilt with the running requests' grammars -------------------------

def test_a_small_mask_table_serves_many_grammars_identically(tiny_model64, tokenizer):
    """Distinct schemas overflow a 40-row table again and again; each overflow renumbers the
    running requests' rows. Results equal those of an engine whose table never fills."""
    names = ["bool", "colour", "count", "tags"]  # bounded fields: the answers finish
    schemas = [JsonSchema({"type": "object", "properties": {a: FIELDS[a], b: FIELDS[b]}, "required": [a, b]})
               for a in names for b in names if a != b][:5]
    small = Engine(tiny_model64, tokenizer, max_batch=2, mask_capacity=40)
    big = Engine(tiny_model64, tokenizer, max_batch=2)
    outcomes = {}
    for name, engine in (("small", small), ("big", big)):
        handles = [engine.submit(IMAGES[i % 3], "query", QUESTIONS[i % 3], answer=s, max_tokens=60)
                   for i, s in enumerate(schemas)]
        engine.run_until_idle()
        outcomes[name] = [outcome(h) for h in handles]
        assert engine.pools()["rows_in_use"] == 0
    assert outcomes["small"] == outcomes["big"]
    assert all(isinstance(o, dict) for o in outcomes["big"])
    assert small.masks.version > big.masks.version  # the small table was rebuilt
    with pytest.raises(RequestError, match=r"needs \d+ mask rows; this engine holds 39"):
        small.submit(IMAGES[0], "query", "hi", answer=JsonSchema({"type": "object", "properties": {
            n: FIELDS[n] for n in FIELDS}, "required": sorted(FIELDS)}))
