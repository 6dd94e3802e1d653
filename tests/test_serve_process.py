"""`python -m app.serve --engine-process`: the same HTTP API with the engine in a child process.

The client-facing tests of tests/test_serve.py run again here against one server whose engine is
an `EngineProcess` (one child for the module); the child's answers are compared with an
in-process engine's; a child that dies gives 503s, not hangs; closing leaves no process behind.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import time
import urllib.error
import urllib.request

import moondream as md
import pytest

from app.common import open_engine
from app.serve import MoondreamAPI, ServeLimits, parse_args
from app.serve_process import EngineGone, EngineProcess
from engine import Cancelled, DeadlineExceeded, EngineBusy, ImageError, RequestError
from tests.conftest import torch_threads
from tests.http_server import Server
from tests.test_serve import (KEY, data_url, jpeg_bytes, post, scene,  # noqa: F401 - fixtures and tests run here too
                              test_64_concurrent_clients_all_answered_or_told_busy, test_api_key_is_required_and_checked,
                              test_bad_answer_formats_are_one_line_400s, test_bad_requests_get_one_line_reasons,
                              test_chat_completions_from_the_client, test_disconnect_cancels_the_request_and_frees_its_row,
                              test_health_and_metrics, test_metrics_time_the_engine_thread,
                              test_query_and_caption_from_the_client_stream_and_follow_the_schema,
                              test_the_official_client_gets_the_engines_answers, test_too_large_and_not_json)


@pytest.fixture(scope="module")
def served():
    proxy = EngineProcess.open(weights=None, max_batch=8, max_queue=16, torch_threads=1)
    server = Server(proxy, api_key=KEY, limits=ServeLimits(max_body_bytes=2 << 20, timeout=120))
    try:
        yield server
    finally:
        server.close()
        proxy.close()
        assert not proxy.process.is_alive()


def test_the_child_answers_as_the_in_process_engine(served, scene):
    image, _ = scene
    model = md.vl(endpoint=served.url, api_key=KEY)
    with torch_threads(1):
        engine = open_engine(None, max_batch=8)
        for obj in ("red circle", "star"):
            assert model.detect(image, obj) == engine.detect(jpeg_bytes(image), obj)
            assert model.point(image, obj) == engine.point(jpeg_bytes(image), obj)
        question = "Is there a red circle?"
        want = engine.query(jpeg_bytes(image), question, max_tokens=12)["answer"]
    assert "".join(model.query(image, question, stream=True, settings={"max_tokens": 12})["answer"]) == want


def test_a_dead_engine_process_gives_503s_and_the_server_stays_up(scene):
    image, _ = scene
    proxy = EngineProcess.open(weights=None, max_batch=2, torch_threads=1)
    server = Server(proxy, api_key=KEY)
    try:
        payload = {"image_url": data_url(image), "object": "star"}
        assert post(server.url + "/point", payload, {"X-Moondream-Auth": KEY})[0] == 200
        proxy.pause(True)  # a request waits in the child when it dies
        waiting = proxy.submit(jpeg_bytes(image), "point", "star")
        os.kill(proxy.process.pid, signal.SIGKILL)
        with pytest.raises(EngineGone, match="engine process stopped"):
            waiting.result(timeout=60)
        for _ in range(2):
            code, body = post(server.url + "/point", payload, {"X-Moondream-Auth": KEY})
            assert code == 503 and "engine process stopped" in body["error"] and "\n" not in body["error"], body
        with pytest.raises(EngineGone):
            proxy.submit(jpeg_bytes(image), "detect", "star")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(server.url.removesuffix("/v1") + "/health", timeout=30)
        assert info.value.code == 503 and "engine process stopped" in json.loads(info.value.read())["error"]
    finally:
        server.close()
        proxy.close()
    assert not proxy.process.is_alive()


def test_a_bad_checkpoint_fails_to_start_with_one_line(tmp_path):
    with pytest.raises(EngineGone, match="cannot load the model") as info:
        EngineProcess.open(weights=str(tmp_path / "missing"), torch_threads=1)
    assert "\n" not in str(info.value)


def test_errors_cross_the_pipe_as_the_engines_own(served, scene):
    image, _ = scene
    proxy, jpeg = served.engine, jpeg_bytes(image)
    with torch_threads(1):
        engine = open_engine(None, max_batch=8)
    with pytest.raises(RequestError) as here:
        engine.submit(jpeg, "detect", "   ")
    with pytest.raises(RequestError) as there:
        proxy.submit(jpeg, "detect", "   ")
    assert str(there.value) == str(here.value)
    with pytest.raises(ImageError, match="cannot read image"):
        proxy.submit(b"not an image", "point", "star")
    proxy.pause(True)  # nothing leaves the queue: it fills
    try:
        late = proxy.submit(jpeg, "point", "star", timeout=1e-9)
        waiting = [proxy.submit(jpeg, "point", "star") for _ in range(15)]
        with pytest.raises(EngineBusy, match="busy"):
            proxy.submit(jpeg, "point", "star")
        for handle in waiting:
            handle.cancel()
    finally:
        proxy.pause(False)
    with pytest.raises(DeadlineExceeded):
        late.result(timeout=60)
    for handle in waiting:
        with pytest.raises(Cancelled):
            handle.result(timeout=60)
    deadline = time.monotonic() + 60
    while proxy.queued() or any(proxy.pools()[k] for k in ("rows_in_use", "running", "waiting", "steps_in_flight")):
        assert time.monotonic() < deadline, proxy.pools()
        time.sleep(0.01)


def test_the_engine_runs_in_a_child_process_unless_told_otherwise(capsys):
    assert parse_args([]).engine_process and parse_args(["--engine-process"]).engine_process
    assert not parse_args(["--engine-thread"]).engine_process
    assert not parse_args(["--ray"]).engine_process          # Ray's replicas are processes already
    with pytest.raises(SystemExit):
        parse_args(["--engine-process", "--ray"])
    assert "does not combine with --ray" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--engine-process", "--engine-thread"])


def test_a_request_that_does_not_wait_gets_its_refusal_as_its_result(served, scene):
    """`submit(..., wait=False)` (what the server's event loop calls for an image the child holds)
    returns at once; the child's refusal arrives as the handle's result, the engine's own error."""
    image, _ = scene
    proxy, jpeg = served.engine, jpeg_bytes(image)
    proxy.submit(jpeg, "point", "star").result(timeout=60)   # the child holds the image now
    handle = proxy.submit(jpeg, "detect", "   ", wait=False)
    with pytest.raises(RequestError, match="empty"):
        handle.result(timeout=60)
    assert proxy.submit(jpeg, "point", "star", wait=False).result(timeout=60) == proxy.point(jpeg, "star")


def test_an_image_the_child_no_longer_holds_is_sent_again(scene):
    """The server sends a known image's digest alone; a child that dropped it answers "miss" and
    the server's reader sends the bytes again: the request is answered as the first one was."""
    image, _ = scene
    jpeg = jpeg_bytes(image)
    proxy = EngineProcess.open(weights=None, max_batch=2, torch_threads=1, image_cache_bytes=0)  # keeps no image
    try:
        first = proxy.point(jpeg, "circle")
        assert first["points"]
        assert proxy.holds(hashlib.sha256(jpeg).digest()) and proxy.resent == 0
        assert proxy.submit(jpeg, "point", "circle", wait=False).result(timeout=120) == first
        assert proxy.resent == 1 and not proxy.holds(hashlib.sha256(jpeg).digest())  # a miss: forgotten
        assert proxy.point(jpeg, "circle") == first        # sent with its bytes
        assert proxy.point(jpeg, "circle") == first        # its digest alone again: a miss again
        assert proxy.resent == 2
    finally:
        proxy.close()
    assert not proxy.process.is_alive()


class GatedConnection:
    """A pipe end that records what is sent and by which thread; a send of a message whose kind is
    `hold` waits until `release` is set (a write still under way)."""

    def __init__(self, hold: str = "") -> None:
        import threading
        self.sent: list[tuple[tuple, int]] = []
        self.hold, self.release, self.holding = hold, threading.Event(), threading.Event()

    def send(self, message: tuple) -> None:
        import threading
        if message[0] == self.hold:
            self.holding.set()
            assert self.release.wait(30)
        if message[0] == "unpicklable":
            raise TypeError("cannot pickle 'generator' object")
        self.sent.append((message, threading.get_ident()))


def test_the_sender_writes_small_messages_itself_and_keeps_the_order():
    import threading
    from app.serve_process import Sender
    conn, refused = GatedConnection(hold="bulky"), []
    sender = Sender(conn, lambda message, error: refused.append((message, str(error)))).start()
    me = threading.get_ident()
    sender.send(("first",))                      # nothing under way: written by this thread
    assert conn.sent == [(("first",), me)]
    sender.send(("bulky", b"image bytes"), bulky=True)   # always through the writer thread
    assert conn.holding.wait(30)                 # ... which is now blocked writing it
    sender.send(("second",))                     # a write is under way: queued behind it
    sender.send(("unpicklable",))
    sender.send(("third",))
    assert [m for m, _ in conn.sent] == [("first",)]
    conn.release.set()
    sender.close()
    sender.thread.join(30)
    assert [m for m, _ in conn.sent] == [("first",), ("bulky", b"image bytes"), ("second",), ("third",)]
    assert all(tid == sender.thread.ident for _, tid in conn.sent[1:])
    assert refused == [(("unpicklable",), "cannot pickle 'generator' object")]
    sender.send(("after close",))                # nothing writes it any more, and nothing blocks
    assert len(conn.sent) == 4


def test_a_broken_pipe_stops_the_sender_without_raising():
    from app.serve_process import Sender

    class Broken:
        def send(self, message):
            raise BrokenPipeError(32, "Broken pipe")

    sender = Sender(Broken(), lambda message, error: pytest.fail("not an unpicklable message")).start()
    sender.send(("submit", 1))
    sender.send(("submit", 2), bulky=True)
    assert sender.broken
    sender.close()
    sender.thread.join(30)
    assert not sender.thread.is_alive()


def test_a_new_image_is_queued_from_the_event_loop_without_waiting_for_the_child(served, scene):
    """With the engine in a child, a point/detect on an image the child has never seen is queued
    by the event loop itself (no worker-thread hop, no wait for "accepted"): the child decodes it,
    and a file that is no image comes back as the request's one-line 400."""
    image, _ = scene
    api = MoondreamAPI(served.engine)
    api.submit_now = lambda *a, **kw: pytest.fail("a point/detect went through a worker thread")
    new = image.rotate(90, expand=True)   # never sent before: the child does not hold it
    handle = asyncio.run(api.submit(data_url(new), "point", "star"))
    assert handle.wait is False and handle.result(timeout=60) == served.engine.point(jpeg_bytes(new), "star")
    code, body = post(f"{served.url}/detect", {"image_url": "data:image/jpeg;base64,"
                                               + base64.b64encode(b"not an image").decode(), "object": "star"},
                      {"X-Moondream-Auth": KEY})
    assert code == 400 and body["error"].startswith("cannot read image") and "\n" not in body["error"]
