"""The pipelined engine against the blocking mode and the reference decoder (CPU, float64).

Random request schedules (arrival step, skill, object, max_objects, image, cancellation)
run through both modes; every finished request must equal the reference output, every row
must be released exactly once, and every pool must be empty afterwards.
"""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Cancelled, DeadlineExceeded, Engine, EngineBusy, RequestError
from engine.model.image import ImageError, load_image, overlap_crop_image
from engine.worker.pipeline import PipelineError, PipelineState, SlotState
from engine.model.reference import reference_generate
from engine.serving.skills import prompt_ids
from tests.conftest import random_image

IMAGES = [random_image(i, 60 + 40 * i, 200 - 30 * i) for i in range(4)]
OBJECTS = ["red circle", "blue", "star"]
_reference: dict = {}


def reference(model, tokenizer, image: int, skill: str, obj: str, max_objects: int, resizer: str | None = None) -> dict:
    key = (image, skill, obj, max_objects, resizer)
    if key not in _reference:
        crops = overlap_crop_image(load_image(IMAGES[image]), model.config.vision, resizer=resizer)
        prompt = prompt_ids(model.config.tokens, lambda s: tokenizer.encode(s).ids, skill, obj)
        _reference[key] = reference_generate(model, crops, prompt, skill, max_objects)
    return _reference[key]


def idle_pools(engine: Engine) -> dict:
    return {"rows_in_use": 0, "running": 0, "waiting": 0, "steps_in_flight": 0, "slots_unread": 0,
            "prefix_cache": engine.pools()["prefix_cache"]}


request = st.fixed_dictionaries({
    "arrival": st.integers(0, 12),
    "skill": st.sampled_from(["point", "detect"]),
    "obj": st.sampled_from(OBJECTS),
    "max_objects": st.integers(1, 6),
    "image": st.integers(0, len(IMAGES) - 1),
    "cancel_after": st.one_of(st.none(), st.integers(0, 8)),
})


def run_schedule(engine: Engine, schedule: list[dict]) -> dict[int, tuple[dict, object]]:
    """Submit each request at its arrival tick, cancel where asked; step until everything is done."""
    handles: dict[int, tuple[dict, object]] = {}
    cancels: dict[int, list] = {}
    tick = 0
    while len(handles) < len(schedule) or not engine.scheduler.is_idle() or not engine.pipeline.is_idle():
        for n, req in enumerate(schedule):
            if req["arrival"] == tick:
                h = engine.submit(IMAGES[req["image"]], req["skill"], req["obj"], max_objects=req["max_objects"])
                handles[n] = (req, h)
                if req["cancel_after"] is not None:
                    cancels.setdefault(tick + req["cancel_after"], []).append(h)
        for h in cancels.pop(tick, []):
            h.cancel()
        engine.step()
        tick += 1
        assert tick < 2000, "schedule did not finish"
    return handles


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=st.lists(request, min_size=1, max_size=9), max_batch=st.integers(1, 4), max_prefill=st.integers(1, 3),
       static_prompts=st.booleans())
def test_random_schedules_match_blocking_and_reference(tiny_model64, tokenizer, schedule, max_batch, max_prefill,
                                                       static_prompts):
    outcomes = {}
    for pipelined in (True, False):
        engine = Engine(tiny_model64, tokenizer, max_batch=max_batch, pipelined=pipelined, max_prefill=max_prefill,
                        prefix_cache_size=2)
        engine.runner.static_prompts = static_prompts  # the padded prompt prefill CUDA captures, here eager
        handles = run_schedule(engine, schedule)
        outcomes[pipelined] = {}
        for n, (req, h) in handles.items():
            try:
                outcomes[pipelined][n] = h.future.result(timeout=0)
            except Cancelled:
                outcomes[pipelined][n] = "cancelled"
        # Every admitted sequence released exactly once; all pools back to empty.
        assert engine.scheduler.retired == len(schedule)  # a second release of one sequence raises
        assert engine.pools() == idle_pools(engine)
        assert sorted(engine.scheduler.free_rows) == list(range(max_batch))
    for n, req in enumerate(schedule):
        ref = reference(tiny_model64, tokenizer, req["image"], req["skill"], req["obj"], req["max_objects"])
        for pipelined in (True, False):
            got = outcomes[pipelined][n]
            if req["cancel_after"] is None:
                assert got == ref, (pipelined, req)
            else:  # a cancel may land after the request already finished
                assert got in ("cancelled", ref), (pipelined, req)
            if got != "cancelled":
                items = got["objects"] if req["skill"] == "detect" else got["points"]
                assert len(items) <= req["max_objects"]
                assert all(0.0 <= v <= 1.0 for item in items for v in item.values())


def test_zombies_ride_one_step_and_never_emit(tiny_model64, tokenizer, monkeypatch):
    """A request that ends at commit t is already in batch t+1: it is finalized at once, its
    extra token is ignored, and its row is released only when no step in flight reads it."""
    for pipelined, expect_zombies in ((True, True), (False, False)):
        engine = Engine(tiny_model64, tokenizer, max_batch=4, pipelined=pipelined)
        finished_with_refs, released_refs = [], []
        finish, release = engine.scheduler.finish, engine.scheduler.release

        def spy_finish(seq, error=None):
            if not seq.finalized:
                finished_with_refs.append(seq.inflight_refs)
            finish(seq, error)

        def spy_release(seq):
            released_refs.append(seq.inflight_refs)
            release(seq)

        monkeypatch.setattr(engine.scheduler, "finish", spy_finish)
        monkeypatch.setattr(engine.scheduler, "release", spy_release)
        emitted: dict[int, list] = {}
        handles = []
        for i in range(6):
            sink = emitted.setdefault(i, [])
            handles.append(engine.submit(IMAGES[i % 4], ["point", "detect"][i % 2], OBJECTS[i % 3],
                                         max_objects=1 + i, on_object=sink.append))
        engine.run_until_idle()
        assert (max(finished_with_refs) > 0) == expect_zombies
        assert released_refs and all(r == 0 for r in released_refs)
        for i, h in enumerate(handles):
            result = h.result()
            assert emitted[i] == (result["objects"] if i % 2 else result["points"])
            assert result == reference(tiny_model64, tokenizer, i % 4, ["point", "detect"][i % 2], OBJECTS[i % 3], 1 + i)
        assert engine.pools() == idle_pools(engine)


def test_cancel_running_request_frees_everything(eager_ckpt, tokenizer):
    engine = Engine.from_pretrained(eager_ckpt, dtype="fp64", max_batch=2, repeat_guard=False)
    keep = engine.submit(IMAGES[0], "detect", "star", max_objects=4)
    victim = engine.submit(IMAGES[1], "point", "star", max_objects=50)
    for _ in range(6):
        engine.step()
    assert not victim.future.done()
    victim.cancel()
    engine.run_until_idle()
    with pytest.raises(Cancelled):
        victim.result()
    assert len(keep.result()["objects"]) == 4
    assert engine.pools() == idle_pools(engine)


def test_future_cancel_and_deadline_are_honoured(tiny_model64, tokenizer):
    engine = Engine(tiny_model64, tokenizer, max_batch=1)
    first = engine.submit(IMAGES[0], "point", "blue", max_objects=3)
    waiting = engine.submit(IMAGES[1], "point", "blue", max_objects=3)
    late = engine.submit(IMAGES[2], "detect", "blue", max_objects=3, timeout=0.0)
    assert waiting.future.cancel()
    engine.run_until_idle()
    assert first.result() == reference(tiny_model64, tokenizer, 0, "point", "blue", 3)
    with pytest.raises(CancelledError):
        waiting.future.result()
    with pytest.raises(DeadlineExceeded):
        late.result()
    assert engine.pools() == idle_pools(engine)


def test_stream_yields_objects_as_committed(eager_ckpt, tokenizer):
    engine = Engine.from_pretrained(eager_ckpt, dtype="fp64", max_batch=2, repeat_guard=False)
    streamed = list(engine.stream(IMAGES[3], "detect", "red circle", max_objects=5))
    assert len(streamed) == 5
    assert engine.detect(IMAGES[3], "red circle", max_objects=5) == {"objects": streamed}


def test_identical_image_reuses_cached_prefix(tiny_model64, tokenizer, monkeypatch):
    engine = Engine(tiny_model64, tokenizer, max_batch=4)
    calls = []
    encode = tiny_model64.encode_images
    monkeypatch.setattr(tiny_model64, "encode_images", lambda images, **kw: calls.extend(images) or encode(images, **kw))
    a = engine.submit(IMAGES[2], "point", "star", max_objects=2)
    b = engine.submit(IMAGES[2].copy(), "detect", "blue", max_objects=2)
    engine.run_until_idle()
    assert len(calls) == 1
    assert a.result() == reference(tiny_model64, tokenizer, 2, "point", "star", 2)
    assert b.result() == reference(tiny_model64, tokenizer, 2, "detect", "blue", 2)


def test_crops_made_on_the_device_give_the_reference_results(tiny_model64, tokenizer, monkeypatch):
    # device_crops: the crop threads hand over pixels; the runner crops them (torch, libvips' arithmetic).
    engine = Engine(tiny_model64, tokenizer, max_batch=4, device_crops=True)
    seen = []
    encode = tiny_model64.encode_images
    monkeypatch.setattr(tiny_model64, "encode_images", lambda images, **kw: seen.extend(images) or encode(images, **kw))
    handles = [engine.submit(IMAGES[i], skill, obj, max_objects=3)
               for i, (skill, obj) in enumerate([("point", "star"), ("detect", "blue"), ("detect", "red circle")])]
    engine.run_until_idle()
    assert len(seen) == 3 and all(isinstance(c.crops, torch.Tensor) for c in seen)
    for i, (h, (skill, obj)) in enumerate(zip(handles, [("point", "star"), ("detect", "blue"), ("detect", "red circle")])):
        assert h.result() == reference(tiny_model64, tokenizer, i, skill, obj, 3, resizer="torch")
    assert engine.pools() == idle_pools(engine)


def test_concurrent_callers_on_the_serving_thread(tiny_model64, tokenizer):
    engine = Engine(tiny_model64, tokenizer, max_batch=4).start()
    results, errors = {}, []

    def call(i):
        try:
            results[i] = engine.detect(IMAGES[i % 4], OBJECTS[i % 3], max_objects=3)
        except Exception as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    engine.close()
    assert not errors
    for i in range(8):
        assert results[i] == reference(tiny_model64, tokenizer, i % 4, "detect", OBJECTS[i % 3], 3)
    assert engine.pools() == idle_pools(engine)


def test_bad_requests_fail_alone_and_the_engine_keeps_serving(tiny_model64, tokenizer, tmp_path):
    engine = Engine(tiny_model64, tokenizer, max_batch=2)
    corrupt = tmp_path / "broken.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(ImageError, match="broken.png"):
        engine.submit(str(corrupt), "detect", "star")
    for bad in ("", "   ", "\x00\x07"):
        with pytest.raises(RequestError, match="empty"):
            engine.submit(IMAGES[0], "detect", bad)
    for bad in (0, -3, 10_000, "5", 2.5, True):
        with pytest.raises(RequestError, match="max_objects"):
            engine.submit(IMAGES[0], "point", "star", max_objects=bad)
    with pytest.raises(RequestError, match="skill"):
        engine.submit(IMAGES[0], "segment", "star")
    assert engine.point(IMAGES[1], "star", max_objects=2) == reference(tiny_model64, tokenizer, 1, "point", "star", 2)


def test_queue_limit_answers_busy(tiny_model64, tokenizer):
    engine = Engine(tiny_model64, tokenizer, max_batch=1, max_queue=2)
    engine.submit(IMAGES[0], "point", "star")
    engine.submit(IMAGES[1], "point", "star")
    with pytest.raises(EngineBusy, match="busy"):
        engine.submit(IMAGES[2], "point", "star")
    engine.run_until_idle()
    engine.submit(IMAGES[2], "point", "star", max_objects=1).result()


def test_request_too_long_for_the_kv_row_is_refused_clearly(tiny_model64, tokenizer):
    engine = Engine(tiny_model64, tokenizer, max_batch=1, max_len=tiny_model64.config.prefix_len + 20)
    with pytest.raises(RequestError, match="KV positions"):
        engine.point(IMAGES[0], "star", max_objects=50)
    assert engine.point(IMAGES[0], "star", max_objects=2) == reference(tiny_model64, tokenizer, 0, "point", "star", 2)


# ---- the pure state machine and the slot guards -------------------------------------------

def test_pipeline_ping_pongs_and_commits_in_order():
    p = PipelineState()
    a = p.launch("decode", [0], 1)
    assert not p.can_launch()  # the launched step must be finalized first
    p.finalize(a)
    b = p.launch("decode", [0], 1)
    p.finalize(b)
    assert (a.slot, b.slot) == (0, 1) and not p.can_launch()  # both slots hold unread results
    with pytest.raises(PipelineError):
        p.commit(b)
    p.commit(a)
    assert p.slots == [SlotState.FREE, SlotState.SAMPLED]
    c = p.launch("decode", [0], 1)
    assert c.slot == 0
    with pytest.raises(PipelineError):
        PipelineState(n_slots=3)


def test_slot_refuses_to_overwrite_unread_results(tiny_model64, tokenizer):
    engine = Engine(tiny_model64, tokenizer, max_batch=2)
    slot = engine.runner.slots[0]
    states = np.zeros(2, dtype=np.int64)
    engine.runner.finalize(0, 2, states, states)
    with pytest.raises(PipelineError, match="overwritten"):
        engine.runner.finalize(0, 2, states, states)
    slot.read_results(2, [0, 1])
    slot.unread = True  # pretend a D2H was claimed but never landed: the buffers hold poison
    with pytest.raises(PipelineError, match="never written"):
        slot.read_results(2, [0])
