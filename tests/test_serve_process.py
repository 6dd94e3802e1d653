"""`python -m app.serve --engine-process`: the same HTTP API with the engine in a child process.

The client-facing tests of tests/test_serve.py run again here against one server whose engine is
an `EngineProcess` (one child for the module); the child's answers are compared with an
in-process engine's; a child that dies gives 503s, not hangs; closing leaves no process behind.
"""

from __future__ import annotations

import os
import signal

import moondream as md
import pytest

from app.common import open_engine
from app.serve import ServeLimits
from app.serve_process import EngineGone, EngineProcess
from tests.conftest import torch_threads
from tests.http_server import Server
from tests.test_serve import (KEY, data_url, jpeg_bytes, post, scene,  # noqa: F401 - fixtures and tests run here too
                              test_64_concurrent_clients_all_answered_or_told_busy, test_api_key_is_required_and_checked,
                              test_bad_answer_formats_are_one_line_400s, test_bad_requests_get_one_line_reasons,
                              test_chat_completions_from_the_client, test_disconnect_cancels_the_request_and_frees_its_row,
                              test_health_and_metrics, test_query_and_caption_from_the_client_stream_and_follow_the_schema,
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
    finally:
        server.close()
        proxy.close()
    assert not proxy.process.is_alive()


def test_a_bad_checkpoint_fails_to_start_with_one_line(tmp_path):
    with pytest.raises(EngineGone, match="cannot load the model") as info:
        EngineProcess.open(weights=str(tmp_path / "missing"), torch_threads=1)
    assert "\n" not in str(info.value)
