"""Back-pressure and isolation in the Engine: one failing, cancelled, late or refused request never
stalls or breaks the others, and every pool returns to idle afterwards."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine import Cancelled, DeadlineExceeded, Engine, EngineBusy

from .conftest import random_image, torch_threads

IMAGES = [random_image(40 + i, 60 + 7 * i, 80 + 5 * i) for i in range(6)]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


def idle(pools: dict) -> dict:
    return {k: v for k, v in pools.items() if k != "prefix_cache"}


def test_failing_callback_cancel_and_deadline_never_stall_the_batch(eager_ckpt):
    """The eager checkpoint always finds max_objects, so every request runs its full length."""
    engine = Engine.from_pretrained(eager_ckpt, max_batch=4, repeat_guard=False).start()
    baseline = engine.pools()
    try:
        first_object = threading.Event()

        def explode(obj):
            raise RuntimeError("stream consumer crashed")

        good = [engine.submit(IMAGES[i], "detect", "star", max_objects=6) for i in range(5)]
        failing = engine.submit(IMAGES[0], "detect", "star", max_objects=40, on_object=explode)
        running = engine.submit(IMAGES[1], "point", "star", max_objects=60, on_object=lambda o: first_object.set())
        queued = engine.submit(IMAGES[2], "point", "star", max_objects=60)
        queued.cancel()  # cancelled while waiting (or just admitted)
        late = engine.submit(IMAGES[3], "detect", "star", max_objects=40, timeout=0.0)  # overdue at once
        assert first_object.wait(timeout=60)
        running.cancel()  # cancelled mid-decode
        more = [engine.submit(IMAGES[5 - i], "point", "star", max_objects=4) for i in range(3)]  # arrive later

        for handle in good:
            assert len(handle.result(timeout=60)["objects"]) == 6
        for handle in more:
            assert len(handle.result(timeout=60)["points"]) == 4
        with pytest.raises(RuntimeError, match="stream consumer crashed"):
            failing.result(timeout=60)
        with pytest.raises(Cancelled):
            running.result(timeout=60)
        with pytest.raises(Cancelled):
            queued.result(timeout=60)
        with pytest.raises(DeadlineExceeded):
            late.result(timeout=60)
        assert len(engine.detect(IMAGES[4], "star", max_objects=3, timeout=60)["objects"]) == 3
    finally:
        engine.close()
    assert idle(engine.pools()) == idle(baseline)


def test_bounded_queue_answers_busy_then_recovers(tiny_ckpt):
    engine = Engine.from_pretrained(tiny_ckpt, max_batch=1, max_queue=3)  # not started: nothing drains
    handles = [engine.submit(IMAGES[i], "point", "star", max_objects=2) for i in range(3)]
    for _ in range(20):  # refused at once: nothing drains the queue, so waiting would never return
        with pytest.raises(EngineBusy, match="busy.*try again"):
            engine.submit(IMAGES[3], "point", "star", max_objects=2)
    engine.start()
    try:
        for handle in handles:
            assert "points" in handle.result(timeout=60)
        assert "points" in engine.point(IMAGES[3], "star", max_objects=2, timeout=60)
    finally:
        engine.close()
    assert idle(engine.pools())["waiting"] == 0 and idle(engine.pools())["rows_in_use"] == 0


def test_abandoned_stream_is_cancelled_and_released(eager_ckpt):
    engine = Engine.from_pretrained(eager_ckpt, max_batch=2, repeat_guard=False).start()
    baseline = engine.pools()
    try:
        stream = engine.stream(IMAGES[0], "detect", "star", max_objects=40)
        assert next(stream)  # one object, then the consumer walks away
        stream.close()
        assert len(engine.detect(IMAGES[1], "star", max_objects=3, timeout=60)["objects"]) == 3
    finally:
        engine.close()
    assert idle(engine.pools()) == idle(baseline)


def test_huge_images_are_refused_before_decoding(tiny_ckpt):
    engine = Engine.from_pretrained(tiny_ckpt, max_batch=1)
    with pytest.raises(Exception, match="too large"):
        engine.submit(np.zeros((8000, 7000, 3), np.uint8), "point", "star")  # 56 M pixels > MAX_PIXELS
    assert engine.pools()["waiting"] == 0
