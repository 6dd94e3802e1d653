"""Scheduler, zombies, cancellation and deadlines through the real `Engine` with a CPU fake
runner (tests/fake_runner.py): no model, so each schedule runs in milliseconds."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Cancelled, DeadlineExceeded, Engine
from engine.model.config import TINY
from tests.conftest import random_image
from tests.fake_runner import FakeRunner, RowScript

IMAGES = [random_image(i, 50 + 30 * i, 90) for i in range(3)]
MODEL = SimpleNamespace(config=TINY)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_engine(tokenizer, *, pipelined=True, max_batch=4, clock=None, **config) -> tuple[Engine, FakeRunner]:
    t = TINY.tokens
    runner = FakeRunner(rows=max_batch, max_len=TINY.text.max_context, coord_id=t.coord_id, size_id=t.size_id,
                        eos_id=t.eos_id, vocab_size=TINY.text.vocab_size)
    engine = Engine(MODEL, tokenizer, runner=runner, max_batch=max_batch, pipelined=pipelined,
                    clock=clock or Clock(), **config)
    return engine, runner


def idle(engine: Engine) -> bool:
    pools = engine.pools()
    return all(pools[k] == 0 for k in ("rows_in_use", "running", "waiting", "steps_in_flight", "slots_unread"))


request = st.fixed_dictionaries({
    "arrival": st.integers(0, 10),
    "skill": st.sampled_from(["point", "detect"]),
    "obj": st.sampled_from(["red circle", "star", "blue", "green square"]),
    "max_objects": st.integers(1, 5),
    "image": st.integers(0, len(IMAGES) - 1),
    "cancel_at": st.one_of(st.none(), st.integers(0, 12)),
    "timeout": st.one_of(st.none(), st.integers(1, 8)),
})


def run(engine: Engine, clock: Clock, schedule: list[dict]) -> list:
    """One tick = one engine step = one second of the engine's clock."""
    handles: dict[int, object] = {}
    for tick in itertools.count():
        for n, req in enumerate(schedule):
            if req["arrival"] == tick:
                handles[n] = engine.submit(IMAGES[req["image"]], req["skill"], req["obj"],
                                           max_objects=req["max_objects"], timeout=req["timeout"])
            if req["cancel_at"] == tick and n in handles:
                handles[n].cancel()
        busy = engine.step()
        clock.now += 1.0
        if not busy and len(handles) == len(schedule):
            break
        assert tick < 10_000, "the engine never went idle"
    out = []
    for n in range(len(schedule)):
        try:
            out.append(handles[n].future.result(timeout=0))
        except (Cancelled, DeadlineExceeded) as e:
            out.append(type(e).__name__)
    return out


@settings(max_examples=60, deadline=None)
@given(schedule=st.lists(request, min_size=1, max_size=10), max_batch=st.integers(1, 4),
       max_prefill=st.integers(1, 3), cache=st.integers(0, 2), wait=st.integers(0, 3), gather=st.integers(1, 4))
def test_pipelined_equals_blocking_on_random_schedules(tokenizer, schedule, max_batch, max_prefill, cache, wait,
                                                       gather):
    outcomes = {}
    for pipelined in (True, False):
        clock = Clock()
        engine, runner = fake_engine(tokenizer, pipelined=pipelined, max_batch=max_batch, clock=clock,
                                     max_prefill=max_prefill, prefix_cache_size=cache, prefill_wait=wait,
                                     prefill_gather=gather)
        outcomes[pipelined] = run(engine, clock, schedule)
        assert idle(engine), engine.pools()
        assert engine.scheduler.retired == len(schedule)  # each request retired once
        assert sorted(engine.scheduler.free_rows) == list(range(max_batch))
        for req, got in zip(schedule, outcomes[pipelined]):
            if isinstance(got, dict):
                items = got["objects" if req["skill"] == "detect" else "points"]
                assert len(items) <= req["max_objects"]
    # Cancels and deadlines land on the same ticks in both modes, but a pipelined request can finish
    # a step earlier or later relative to them; finished results must agree wherever both finished.
    for req, a, b in zip(schedule, outcomes[True], outcomes[False]):
        if isinstance(a, dict) and isinstance(b, dict):
            assert a == b, req
        elif req["cancel_at"] is None and req["timeout"] is None:
            pytest.fail(f"{req} did not finish: {a!r} / {b!r}")


def test_without_cancels_or_deadlines_both_modes_give_the_same_results(tokenizer):
    schedule = [{"arrival": i % 3, "skill": ["point", "detect"][i % 2], "obj": ["star", "blue"][i % 2],
                 "max_objects": 1 + i % 4, "image": i % 3, "cancel_at": None, "timeout": None} for i in range(9)]
    results = []
    for pipelined in (True, False):
        clock = Clock()
        engine, _ = fake_engine(tokenizer, pipelined=pipelined, max_batch=3, clock=clock)
        results.append(run(engine, clock, schedule))
    assert results[0] == results[1]
    assert all(isinstance(r, dict) for r in results[0])
    assert sum(len(r.get("objects", r.get("points", []))) for r in results[0]) > 0


def test_zombie_rows_are_released_only_after_their_last_step(tokenizer, monkeypatch):
    for pipelined, expect_zombie in ((True, True), (False, False)):
        engine, _ = fake_engine(tokenizer, pipelined=pipelined, max_batch=2)
        finished_refs, released_refs = [], []
        finish, release = engine.scheduler.finish, engine.scheduler.release
        monkeypatch.setattr(engine.scheduler, "finish",
                            lambda seq, error=None: (finished_refs.append(seq.inflight_refs) if not seq.finalized else None,
                                                     finish(seq, error)))
        monkeypatch.setattr(engine.scheduler, "release",
                            lambda seq: (released_refs.append(seq.inflight_refs), release(seq)))
        handles = [engine.submit(IMAGES[i], "detect", "star", max_objects=3) for i in range(2)]
        engine.run_until_idle()
        assert all("objects" in h.future.result(timeout=0) for h in handles)
        assert released_refs == [0, 0]
        assert any(refs > 0 for refs in finished_refs) is expect_zombie, finished_refs
        assert idle(engine)


def test_deadline_uses_the_engine_clock_not_sleep(tokenizer):
    clock = Clock()
    engine, _ = fake_engine(tokenizer, max_batch=1, clock=clock)
    slow = engine.submit(IMAGES[0], "detect", "star", max_objects=5, timeout=2.5)
    engine.step()
    clock.now += 3.0  # three seconds pass on the engine's clock between two steps
    engine.run_until_idle()
    with pytest.raises(DeadlineExceeded):
        slow.future.result(timeout=0)
    assert idle(engine)


def test_cancel_while_waiting_never_takes_a_row(tokenizer):
    engine, runner = fake_engine(tokenizer, max_batch=1)
    first = engine.submit(IMAGES[0], "point", "star", max_objects=2)
    second = engine.submit(IMAGES[1], "point", "star", max_objects=2)
    engine.step()  # admits the first (one row)
    second.cancel()
    engine.run_until_idle()
    assert "points" in first.future.result(timeout=0)
    with pytest.raises(Cancelled):
        second.future.result(timeout=0)
    assert runner.admitted == 1 and engine.scheduler.retired == 2 and idle(engine)


def test_admission_encodes_each_new_image_once_and_respects_the_limits(tokenizer):
    engine, runner = fake_engine(tokenizer, max_batch=4, max_prefill=3, prefix_cache_size=4)
    for _ in range(3):  # the same image three times, then a new one
        engine.submit(IMAGES[0], "detect", "star", max_objects=1)
    engine.submit(IMAGES[1], "detect", "star", max_objects=1)
    engine.step()
    # The first copy is encoded; its twins wait one step for the cache instead of encoding again.
    assert runner.prefills[0] == [0] and runner.encoded == 1
    engine.run_until_idle()
    assert runner.encoded == 2  # IMAGES[0] once, IMAGES[1] once
    assert all(len(rows) <= 3 for rows in runner.prefills)
    assert idle(engine)


def test_a_failing_step_fails_what_is_in_flight_and_the_engine_keeps_serving(tokenizer, monkeypatch):
    engine, runner = fake_engine(tokenizer, max_batch=2)
    engine.start()
    try:
        real = runner.finalize
        calls = itertools.count()
        monkeypatch.setattr(runner, "finalize", lambda *a: (_ for _ in ()).throw(RuntimeError("device lost"))
                            if next(calls) == 0 else real(*a))
        doomed = engine.submit(IMAGES[0], "point", "star", max_objects=2)
        with pytest.raises(RuntimeError, match="engine error: device lost"):
            doomed.result(timeout=30)
        assert "points" in engine.point(IMAGES[1], "star", max_objects=2, timeout=30)
    finally:
        engine.close()
    assert idle(engine)


def test_the_fake_runner_refuses_out_of_order_use():
    runner = FakeRunner(rows=2, max_len=400, coord_id=5, size_id=6, eos_id=0, vocab_size=512)
    with pytest.raises(Exception, match="never written"):
        runner.read_results(0, 2, [0])
    runner.scripts = {0: RowScript(target=1, seed=0)}
    states = np.zeros(1, dtype=np.int64)
    runner.finalize(0, 1, states, np.ones(1, dtype=np.int64))
    with pytest.raises(Exception, match="overwritten"):
        runner.finalize(0, 1, states, np.ones(1, dtype=np.int64))


def test_timing_splits_queue_wait_from_service(tokenizer, small_image):
    """A request that waits for a KV row reports that wait as queue_ms, not as service time."""
    clock = Clock()
    engine, _ = fake_engine(tokenizer, max_batch=1, clock=clock)
    first = engine.submit(small_image, "point", "red circle", max_objects=3)
    second = engine.submit(small_image, "point", "blue", max_objects=3)
    assert not first.started() and first.timing() == {"queue_ms": None, "service_ms": None}
    while not second.future.done():
        engine.step()
        clock.now += 1.0
    engine.run_until_idle()
    a, b = first.timing(), second.timing()
    assert first.started() and second.started()
    assert a["queue_ms"] == 0.0 and a["service_ms"] > 0
    assert b["queue_ms"] >= a["service_ms"]  # it waited for the one row the first request held
    assert b["service_ms"] > 0 and b["queue_ms"] + b["service_ms"] > a["service_ms"]


def test_a_cached_image_is_never_cropped_and_crops_run_off_the_caller(tokenizer, monkeypatch):
    import threading

    from engine.serving import crops as crops_module

    made = []
    real = crops_module.overlap_crop_image
    monkeypatch.setattr(crops_module, "overlap_crop_image",
                        lambda picture, cfg: made.append(threading.current_thread().name) or real(picture, cfg))
    engine, runner = fake_engine(tokenizer, max_batch=2, prefix_cache_size=2)
    engine.submit(IMAGES[0], "point", "star", max_objects=1)
    engine.submit(IMAGES[0].copy(), "point", "blue", max_objects=1)  # same pixels: shares the first's crops
    engine.run_until_idle()
    late = engine.submit(IMAGES[0].copy(), "detect", "star", max_objects=1)  # prefix cached: no crops at all
    assert late.seq.crops is None
    engine.run_until_idle()
    assert runner.encoded == 1 and len(made) == 1 and made[0].startswith("crops")
    assert idle(engine)


def test_cached_prompts_are_prefilled_together_beyond_the_image_limit(tokenizer):
    engine, runner = fake_engine(tokenizer, max_batch=6, max_prefill=1, prefix_cache_size=2)
    for _ in range(6):
        engine.submit(IMAGES[1], "point", "star", max_objects=1)
    engine.run_until_idle()
    # One step encodes the image; the five twins share one prompt-only prefill step (in rows 1-5, or
    # in 0-4 when they waited for row 0 to finish: prefill_wait).
    assert runner.prefills[0] == [0] and len(runner.prefills[1]) == 5 and runner.encoded == 1
    assert idle(engine)


def test_requests_on_cached_images_wait_a_few_steps_to_share_a_prefill(tokenizer):
    """prefill_wait / prefill_gather: while rows decode, a request on a cached image waits up to
    `prefill_wait` decode steps for others, and goes at once when `prefill_gather` wait; with no
    row decoding nothing waits. Every answer is the one it gets alone."""
    for wait, gather, arrivals, expect in ((2, 8, [1], [3]), (2, 2, [1, 1], [1, 1]), (3, 8, [1, 2], [4, 3]),
                                           (0, 8, [1], [1])):
        engine, runner = fake_engine(tokenizer, max_batch=4, pipelined=False, prefix_cache_size=2,
                                     prefill_wait=wait, prefill_gather=gather)
        first = engine.submit(IMAGES[1], "point", "star", max_objects=5)   # decodes 5 objects' worth of steps
        engine.step()
        assert runner.prefills == [[0]]
        late, waited = [], {}
        for tick in range(1, 12):   # one engine step per tick; a request submitted before a step may go in it
            late += [(tick, engine.submit(IMAGES[1], "point", "blue", max_objects=1)) for at in arrivals if at == tick]
            before = len(runner.prefills)
            engine.step()
            for rows in runner.prefills[before:]:
                for n, (at, handle) in enumerate(late):
                    if n not in waited and handle.seq.row in rows:
                        waited[n] = tick - at + 1
        assert [waited.get(n) for n in range(len(late))] == expect, (wait, gather, waited, runner.prefills)
        late = [handle for _, handle in late]
        engine.run_until_idle()
        alone, _ = fake_engine(tokenizer, max_batch=4, pipelined=False)
        assert first.result() == alone.point(IMAGES[1], "star", max_objects=5)
        assert all(h.result() == alone.point(IMAGES[1], "blue", max_objects=1) for h in late)
        assert idle(engine)
    idle_engine, runner = fake_engine(tokenizer, max_batch=4, pipelined=False, prefix_cache_size=2, prefill_wait=3)
    idle_engine.point(IMAGES[1], "star", max_objects=1)
    idle_engine.submit(IMAGES[1], "point", "blue", max_objects=1)   # nothing decodes: no wait
    idle_engine.step()
    assert len(runner.prefills) == 2


def test_a_request_does_not_wait_to_gather_more_than_the_free_rows_take(tokenizer):
    """With one row decoding and one free, a request on a cached image goes at the next step:
    no later arrival could share its prefill step (prefill_gather 8 could never be reached)."""
    for max_batch, expect in ((2, 1), (3, 4)):   # with two free rows it waits prefill_wait steps
        engine, runner = fake_engine(tokenizer, max_batch=max_batch, pipelined=False, prefix_cache_size=2,
                                     prefill_wait=3, prefill_gather=8)
        first = engine.submit(IMAGES[1], "point", "star", max_objects=5)
        engine.step()
        late = engine.submit(IMAGES[1], "point", "blue", max_objects=1)
        for tick in range(1, 8):
            engine.step()
            if late.seq.row >= 0:
                break
        assert tick == expect, (max_batch, tick, runner.prefills)
        engine.run_until_idle()
        assert first.result()["points"] and late.result()["points"] and idle(engine)


def test_rows_keep_decoding_through_prefills_and_image_steps_alternate(tokenizer):
    engine, runner = fake_engine(tokenizer, max_batch=4, max_prefill=1, pipelined=False)
    kinds, calls = [], []
    launch = engine.pipeline.launch
    engine.pipeline.launch = lambda kind, rows, batch: kinds.append(kind) or launch(kind, rows, batch)
    launch_prefill, launch_decode = runner.launch_prefill, runner.launch_decode
    runner.launch_prefill = lambda items, **kw: calls.append("prefill") or launch_prefill(items, **kw)
    runner.launch_decode = lambda *a: calls.append("decode") or launch_decode(*a)
    handles = [engine.submit(IMAGES[i], "point", "star", max_objects=3) for i in range(3)]
    engine.run_until_idle()
    # A step that encodes an image is followed by one that does not; once rows decode, a prefill
    # rides in the same step as their decode forward (launched first), so no row waits for it.
    assert kinds[:5] == ["prefill", "decode", "mixed", "decode", "mixed"]
    assert calls[:7] == ["prefill", "decode", "decode", "prefill", "decode", "decode", "prefill"]
    for i, handle in enumerate(handles):  # each result is what the request gets alone
        alone, _ = fake_engine(tokenizer, max_batch=4, max_prefill=1, pipelined=False)
        assert handle.result() == alone.point(IMAGES[i], "star", max_objects=3)
    assert idle(engine)


def test_an_array_and_its_pil_image_share_one_key_and_the_array_is_copied():
    from PIL import Image

    from engine.serving.crops import decode_image

    array = np.ascontiguousarray(IMAGES[2])
    key, pixels = decode_image(array)
    assert key == decode_image(Image.fromarray(array))[0] == decode_image(array[::-1][::-1].copy())[0]
    assert pixels is not array and np.array_equal(pixels, array)
    changed = array.copy()
    changed[0, 0, 0] ^= 1
    assert decode_image(changed)[0] != key
    assert decode_image(array[:, :-1])[0] != key  # same bytes prefix, other size


def test_known_pixels_are_shared_not_copied_again_and_a_changed_array_is_not_mistaken_for_them():
    import weakref

    from engine.serving.crops import decode_image

    known = weakref.WeakValueDictionary()
    array = np.ascontiguousarray(IMAGES[2])
    key, pixels = decode_image(array, known)
    assert pixels is not array and known[key] is pixels
    again_key, again = decode_image(array.copy(), known)  # same pixels, another array
    assert again_key == key and again is pixels
    array[0, 0, 0] ^= 1  # the caller reuses its buffer: a new key and a new copy
    changed_key, changed = decode_image(array, known)
    assert changed_key != key and changed is not pixels and np.array_equal(changed, array)
    assert decode_image(array[:, ::-1], known)[0] == decode_image(np.ascontiguousarray(array[:, ::-1]))[0]
    del pixels, again
    assert key not in known  # kept only while a request holds the pixels


def test_a_failed_crop_fails_its_request_alone(tokenizer, monkeypatch):
    from engine import RequestError
    from engine.serving import crops as crops_module

    real = crops_module.overlap_crop_image
    broken = IMAGES[1].shape

    def crop(picture, cfg):
        if np.asarray(picture).shape == broken:
            raise MemoryError("no room\nfor the tiles")
        return real(picture, cfg)

    monkeypatch.setattr(crops_module, "overlap_crop_image", crop)
    engine, runner = fake_engine(tokenizer, max_batch=2)
    doomed = engine.submit(IMAGES[1], "point", "star", max_objects=1)
    fine = engine.submit(IMAGES[0], "point", "star", max_objects=1)
    engine.run_until_idle()
    with pytest.raises(RequestError, match="cannot crop the image: no room for the tiles"):
        doomed.future.result(timeout=0)
    assert "points" in fine.future.result(timeout=0)
    assert runner.encoded == 1 and engine.scheduler.retired == 2 and idle(engine)


def test_admission_waits_a_step_rather_than_raise_the_decode_bucket():
    from engine.serving.scheduler import Scheduler
    from engine.serving.sequence import Sequence
    from engine.worker.runner import batch_buckets

    buckets = batch_buckets(64)
    bucket = lambda n: next(b for b in buckets if b >= n)  # noqa: E731
    sched = Scheduler(64, 999, 10, 1, 2, 3)
    seqs = [Sequence(i, "point", [5], 1, 4, "img", None, None) for i in range(34)]
    for seq in seqs[:32]:
        sched.add(seq)
    assert len(sched.admit(0, 64, lambda key: "prefix", lambda s: True, bucket)) == 32  # rows 0..31: bucket 32
    sched.finish(seqs[5])        # row 5 finished but still rides a launched step: a zombie
    seqs[5].inflight_refs = 1
    sched.add(seqs[32])
    # Row 32 would make every decode step compute 48 rows; row 5 is free at the next commit.
    assert sched.admit(0, 64, lambda key: "prefix", lambda s: True, bucket) == []
    assert sched.admit(0, 64, lambda key: "prefix", lambda s: True) != []  # without buckets: row 32 at once
    seqs[5].inflight_refs = 0
    sched.release(seqs[5])
    sched.add(seqs[33])
    (got,) = sched.admit(0, 64, lambda key: "prefix", lambda s: True, bucket)
    assert got.seq is seqs[33] and seqs[33].row == 5
    # Nothing decoding, zombies in rows 1..7, row 0 free: one request takes row 0, the next waits
    # for the zombies' rows instead of taking row 8 (a bucket of 16 rather than 8).
    idle = Scheduler(16, 999, 10, 1, 2, 3)
    first = [Sequence(200 + i, "point", [5], 1, 4, "img", None, None) for i in range(8)]
    for seq in first:
        idle.add(seq)
    idle.admit(0, 64, lambda key: "prefix", lambda s: True, bucket)
    for seq in first:
        idle.finish(seq)
        seq.inflight_refs = 1
    first[0].inflight_refs = 0
    idle.release(first[0])
    for i in range(2):
        idle.add(Sequence(300 + i, "point", [5], 1, 4, "img", None, None))
    assert [a.seq.row for a in idle.admit(0, 64, lambda key: "prefix", lambda s: True, bucket)] == [0]
    # With no zombie to wait for, a request takes the next row even though the bucket grows.
    fresh = Scheduler(64, 999, 10, 1, 2, 3)
    for i in range(33):
        fresh.add(Sequence(100 + i, "point", [5], 1, 4, "img", None, None))
    assert [a.seq.row for a in fresh.admit(0, 64, lambda key: "prefix", lambda s: True, bucket)] == list(range(33))


def bucketed_engine(tokenizer, max_batch: int, objects_for, record: str):
    """A fake engine whose runner rounds batches up to the real runner's buckets and records the
    batch of every call of its method `record` (launch_decode or finalize): (engine, runner,
    buckets, the batches recorded)."""
    from engine.worker.runner import batch_buckets

    engine, runner = fake_engine(tokenizer, max_batch=max_batch, prefix_cache_size=4)
    buckets = batch_buckets(max_batch)
    runner.batch_bucket = lambda n: next(b for b in buckets if b >= n)
    runner.objects_for = objects_for
    seen, method = [], getattr(runner, record)
    setattr(runner, record, lambda slot, batch, *a: seen.append(batch) or method(slot, batch, *a))
    return engine, runner, buckets, seen


def test_closed_loop_clients_keep_the_decode_bucket_at_their_number(tokenizer):
    # 32 clients that resubmit as soon as their answer arrives, on a 64-row engine: their
    # requests come back while the finished rows still ride a launched step; without waiting for
    # those rows the decode batch drifts to buckets of 48 and 64 rows (a mean of ~52 here).
    engine, runner, _, batches = bucketed_engine(tokenizer, 64, lambda prompt: 3 + sum(prompt) % 5, "launch_decode")
    handles = [engine.submit(IMAGES[0], "detect", "car", max_objects=10) for _ in range(32)]
    answered = 0
    while answered < 400:
        engine.step()
        for i, h in enumerate(handles):
            if h.future.done():
                answered += 1
                handles[i] = engine.submit(IMAGES[0], "detect", "car", max_objects=10)
    assert np.mean(batches) < 34 and max(batches) <= 48


def test_every_step_samples_a_batch_bucket_so_no_graph_is_captured_while_serving(tokenizer):
    # Sampling runs a CUDA graph per batch size, captured up front for the buckets only. A
    # prefill step with no row decoding used to sample max(rows) + 1 rows (3 for rows 0..2),
    # a size no graph existed for: it was captured in the middle of serving.
    engine, runner, buckets, sampled = bucketed_engine(tokenizer, 16, lambda prompt: 1 + sum(prompt) % 3, "finalize")
    rng = np.random.default_rng(3)
    handles = []
    for _ in range(40):   # waves of 1-3 requests, arriving on an idle engine or while rows decode
        handles += [engine.submit(IMAGES[int(rng.integers(2))], "point", "car") for _ in range(rng.integers(1, 4))]
        for _ in range(rng.integers(4)):
            engine.step()
        if rng.random() < 0.5:
            while not all(h.future.done() for h in handles):
                engine.step()
    while not all(h.future.done() for h in handles):
        engine.step()
    assert [len(rows) for rows in runner.prefills].count(3) > 0   # e.g. rows 0..2 on an idle engine
    assert set(sampled) <= set(buckets)
