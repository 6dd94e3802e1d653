"""`python -m app.serve`: the Moondream HTTP API, driven by the official `moondream` client
(installed with --no-deps; its Photon local mode needs Kestrel, which we never import).

The server runs in-process (uvicorn in a thread) on the embedded model; every answer is compared
with the in-process engine's answer for the same image bytes.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import os
import signal
import subprocess
import sys
import io
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import moondream as md
import pytest
from PIL import Image

from app.common import open_engine
from app.serve import MoondreamAPI, ServeLimits, parse_args
from app.tools.screenshot import free_port
from tests.conftest import torch_threads
from tests.http_server import Server

KEY = "s3cret-key"
SAMPLES = Path(__file__).resolve().parent.parent / "assets" / "samples"


def jpeg_bytes(image: Image.Image) -> bytes:
    """The client's own encoding (RGB JPEG, quality 95): the server decodes exactly these bytes."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=95)
    return buf.getvalue()


@pytest.fixture(scope="module")
def served():
    with torch_threads(1):
        engine = open_engine(None, max_batch=8, max_queue=16).start()
        server = Server(engine, api_key=KEY, limits=ServeLimits(max_body_bytes=2 << 20, timeout=120))
        try:
            yield server
        finally:
            server.close()
            engine.close()


@pytest.fixture(scope="module")
def scene():
    return Image.open(SAMPLES / "scene_0.png").convert("RGB"), None


def post(url: str, payload: dict | bytes, headers: dict | None = None) -> tuple[int, dict]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def data_url(image: Image.Image) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg_bytes(image)).decode()


def test_the_official_client_gets_the_engines_answers(served, scene):
    image, _ = scene
    model = md.vl(endpoint=served.url, api_key=KEY)
    for obj in ("red circle", "star", "blue"):
        want_boxes = served.engine.detect(jpeg_bytes(image), obj, timeout=120)
        want_points = served.engine.point(jpeg_bytes(image), obj, timeout=120)
        assert model.detect(image, obj) == want_boxes
        assert model.point(image, obj) == want_points
    capped = model.detect(image, "star", settings={"max_objects": 1})["objects"]
    assert len(capped) <= 1


def test_a_kept_image_is_queued_from_the_event_loop(served, scene):
    """A point/detect on an image the server has decoded skips the worker-thread hop; a new image
    and a query (a grammar to compile) take it. The answers are the engine's."""
    image, _ = scene
    api = MoondreamAPI(served.engine, limits=ServeLimits(timeout=120))
    hops, hop = [], api.submit_now
    api.submit_now = lambda resolve, skill, obj, **options: (hops.append(skill), hop(resolve, skill, obj, **options))[1]
    url = data_url(image)

    async def submit_all():
        asks = [("point", "star", {}), ("point", "star", {}), ("detect", "star", {}),
                ("query", "Is there a star?", {"max_tokens": 4})]
        return [await api.submit(url, skill, obj, **options) for skill, obj, options in asks]

    handles = asyncio.run(submit_all())
    assert hops == ["point", "query"]
    point, again, boxes, _ = [handle.result(timeout=120) for handle in handles]
    assert point == again == served.engine.point(jpeg_bytes(image), "star", timeout=120)
    assert boxes == served.engine.detect(jpeg_bytes(image), "star", timeout=120)


@pytest.mark.parametrize("payload,status,words", [
    ({"image_url": "data:image/jpeg;base64,@@not base64@@", "object": "star"}, 400, "invalid base64"),
    ({"image_url": "https://example.com/cat.jpg", "object": "star"}, 400, "data URL"),
    ({"object": "star"}, 400, "image_url is missing"),
    ({"image_url": "data:image/png;base64," + base64.b64encode(b"not an image").decode(), "object": "star"}, 400,
     "cannot read image"),
    ("IMAGE", 400, "object to find is empty"),
    ("SETTINGS", 400, "max_objects must be"),
])
def test_bad_requests_get_one_line_reasons(served, scene, payload, status, words):
    image, _ = scene
    if payload == "IMAGE":
        payload = {"image_url": data_url(image), "object": "   "}
    elif payload == "SETTINGS":
        payload = {"image_url": data_url(image), "object": "star", "settings": {"max_objects": 10_000}}
    code, body = post(served.url + "/detect", payload, {"X-Moondream-Auth": KEY})
    assert code == status and words in body["error"], body
    assert "\n" not in body["error"] and "Traceback" not in body["error"] and "/work" not in body["error"]


def test_api_key_is_required_and_checked(served, scene):
    image, _ = scene
    payload = {"image_url": data_url(image), "object": "star"}
    for headers in ({}, {"X-Moondream-Auth": "wrong"}, {"Authorization": "Bearer nope"}):
        code, body = post(served.url + "/detect", payload, headers)
        assert code == 401 and "API key" in body["error"]
    assert post(served.url + "/detect", payload, {"Authorization": f"Bearer {KEY}"})[0] == 200
    with pytest.raises(urllib.error.HTTPError) as info:
        md.vl(endpoint=served.url, api_key="wrong").detect(image, "star")
    assert info.value.code == 401


def test_too_large_and_not_json(served):
    # Refused from the declared length, before the body is read (the client has sent only headers).
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    conn.putrequest("POST", "/v1/detect")
    for name, value in (("Content-Type", "application/json"), ("Content-Length", str(3 << 20)),
                        ("X-Moondream-Auth", KEY)):
        conn.putheader(name, value)
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and "larger than 2 MiB" in json.loads(response.read())["error"]
    conn.close()
    code, body = post(served.url + "/point", b"not json", {"X-Moondream-Auth": KEY})
    assert code == 400 and "not valid JSON" in body["error"]


def test_64_concurrent_clients_all_answered_or_told_busy(served, scene):
    image, _ = scene
    payload = {"image_url": data_url(image), "object": "star", "settings": {"max_objects": 3}}

    def call(_):
        return post(served.url + "/point", payload, {"X-Moondream-Auth": KEY})

    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(call, range(64)))
    codes = [code for code, _ in answers]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(200) >= 16  # the queue holds 16 waiting requests, plus those decoding
    assert all("points" in body for code, body in answers if code == 200)
    assert all("busy" in body["error"] for code, body in answers if code == 429)


def hold(engine, held: bool) -> None:
    """Hold (or release) the step loop of an in-process engine or of an `EngineProcess`."""
    if hasattr(engine, "pause"):
        engine.pause(held)
    elif held:
        gate, real_step = threading.Event(), engine.step
        engine.step = lambda: (gate.wait(timeout=60), real_step())[1]
        engine.release = gate.set
    else:
        engine.release()
        del engine.step, engine.release


def test_disconnect_cancels_the_request_and_frees_its_row(served, scene):
    image, _ = scene
    engine = served.engine
    hold(engine, True)  # hold the engine's step loop until the client is gone
    try:
        body = json.dumps({"image_url": data_url(image), "object": "star"}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
        conn.request("POST", "/v1/detect", body, {"Content-Type": "application/json", "X-Moondream-Auth": KEY})
        deadline = time.monotonic() + 60
        while engine.queued() + engine.pools()["running"] == 0:  # the request reached the engine
            assert time.monotonic() < deadline, "the request never reached the engine"
            time.sleep(0.01)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
    finally:
        hold(engine, False)
    deadline = time.monotonic() + 60
    while any(engine.pools()[k] for k in ("rows_in_use", "running", "waiting", "steps_in_flight")):
        assert time.monotonic() < deadline, engine.pools()
        time.sleep(0.01)


def test_health_and_metrics(served, scene):
    with urllib.request.urlopen(served.url.removesuffix("/v1") + "/health", timeout=30) as r:
        assert json.loads(r.read())["status"] == "ok"
    with urllib.request.urlopen(served.url.removesuffix("/v1") + "/metrics", timeout=30) as r:
        text = r.read().decode()
    for series in ("mdpipe_queue_depth", "mdpipe_running", "mdpipe_decode_steps", "mdpipe_request_seconds_bucket",
                   'mdpipe_requests_total{endpoint="detect",status="200"}'):
        assert series in text, series


def test_metrics_time_the_engine_thread(served, scene):
    """The engine loop's ticks and its thread's seconds per verb (an engine in a child process
    reports them with its stats, so they may lag by STATS_PERIOD)."""
    code, _ = post(served.url + "/detect", {"image_url": data_url(scene[0]), "object": "circle"}, {"X-Moondream-Auth": KEY})
    assert code == 200
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(served.url.removesuffix("/v1") + "/metrics", timeout=30) as r:
            lines = r.read().decode().splitlines()
        values = {name: float(value) for name, _, value in (line.partition(" ") for line in lines)
                  if name.startswith("mdpipe_")}
        if values["mdpipe_engine_ticks"] >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert values["mdpipe_engine_ticks"] >= 1 and values["mdpipe_engine_decode_rows"] >= 1
    assert values["mdpipe_cuda_graphs"] == 0   # the CPU path holds no graphs
    for verb in ("launch", "results", "commit", "finalize"):
        wall = values[f'mdpipe_engine_verb_seconds{{clock="wall",verb="{verb}"}}']
        cpu = values[f'mdpipe_engine_verb_seconds{{clock="cpu",verb="{verb}"}}']
        assert wall > 0 and cpu >= 0, (verb, wall, cpu)


def test_arguments_are_checked(capsys):
    assert parse_args([]).host == "127.0.0.1" and parse_args([]).port == 2020
    assert parse_args(["--image-cache-mb", "0"]).image_cache_mb == 0
    assert parse_args([]).prefill_wait == 2 and parse_args(["--prefill-wait", "0"]).prefill_wait == 0
    assert parse_args([]).prefill_gather == 8 and parse_args(["--prefill-gather", "16"]).prefill_gather == 16
    for bad in (["--port", "0"], ["--timeout", "-1"], ["--max-queue", "0"], ["--image-cache-mb", "-1"],
                ["--prefill-wait", "-1"], ["--prefill-gather", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert "error:" in capsys.readouterr().err


def test_ray_serve_replicas_answer_like_the_engine(served, scene, tmp_path):
    """`--ray --replicas 2`: two engine replicas behind Ray Serve's proxy, same answers and errors."""
    image, _ = scene
    port = free_port()
    root = Path(__file__).resolve().parent.parent
    log = open(tmp_path / "serve.log", "w")  # Ray logs a lot: a file, not a pipe nobody reads
    proc = subprocess.Popen([sys.executable, "-m", "app.serve", "--ray", "--replicas", "2", "--port", str(port),
                             "--api-key", KEY], cwd=root, stdout=subprocess.PIPE, stderr=log, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        for line in proc.stdout:  # blocks until the application is ready (or the process ends)
            if line.startswith("serving on"):
                break
        else:
            pytest.fail(f"the Ray Serve app did not start: {(tmp_path / 'serve.log').read_text()[-3000:]}")
        model = md.vl(endpoint=f"http://127.0.0.1:{port}/v1", api_key=KEY)
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda obj: model.point(image, obj), ["star", "blue", "red circle", "star"] * 2))
        want = {obj: served.engine.point(jpeg_bytes(image), obj, timeout=120) for obj in ("star", "blue", "red circle")}
        assert got == [want[obj] for obj in ["star", "blue", "red circle", "star"] * 2]
        code, body = post(f"http://127.0.0.1:{port}/v1/detect", {"object": "star"}, {"X-Moondream-Auth": KEY})
        assert code == 400 and "image_url is missing" in body["error"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        log.close()


SCHEMA = {"type": "object", "properties": {"present": {"type": "boolean"},
                                           "colour": {"type": "string", "enum": ["red", "blue", "green"]}},
          "required": ["present", "colour"]}


def test_a_ray_replica_captures_its_graphs_before_it_serves(monkeypatch):
    import app.common
    import app.serve_ray

    calls = []

    class Stub:
        def start(self):
            calls.append("start")
            return self

    monkeypatch.setattr(app.common, "open_engine",
                        lambda weights, **kw: calls.append(("open", kw["prefill_wait"], kw["prefill_gather"])) or Stub())
    monkeypatch.setattr(app.common, "warm_up", lambda engine: calls.append("warm_up"))
    monkeypatch.setattr(app.serve_ray, "build_app", lambda engine, **kw: engine)
    app.serve_ray.replica_app_builder(parse_args(["--ray", "--prefill-wait", "1", "--prefill-gather", "4"]), None,
                                      ServeLimits())()
    assert calls == [("open", 1, 4), "warm_up", "start"]


def test_query_and_caption_from_the_client_stream_and_follow_the_schema(served, scene):
    image, _ = scene
    model = md.vl(endpoint=served.url, api_key=KEY)
    question = "Is there a red circle?"
    whole = model.query(image, question, settings={"max_tokens": 12})["answer"]
    chunks = list(model.query(image, question, stream=True, settings={"max_tokens": 12})["answer"])
    assert "".join(chunks) == whole == served.engine.query(jpeg_bytes(image), question, max_tokens=12)["answer"]
    shaped = model.query(image, question, settings={"json_schema": SCHEMA})["answer"]
    jsonschema.validate(shaped, SCHEMA)  # parsed JSON, valid under the schema
    assert model.query(image, question, settings={"choices": ["yes", "no"]})["answer"] in ("yes", "no")
    caption = model.caption(image, length="short", settings={"max_tokens": 8})["caption"]
    assert caption == served.engine.caption(jpeg_bytes(image), "short", max_tokens=8)["caption"]
    assert "".join(model.caption(image, length="short", stream=True, settings={"max_tokens": 8})["caption"]) == caption


def test_bad_answer_formats_are_one_line_400s(served, scene):
    image, _ = scene
    base = {"image_url": data_url(image), "question": "Is there a star?"}
    for settings, words in (({"regex": "a)(b"}, "cannot use this answer format"),
                            ({"choices": "yes,no"}, "choices must be a list"),
                            ({"regex": "a", "choices": ["a"]}, "one of json_schema, regex and choices")):
        code, body = post(served.url + "/query", {**base, "settings": settings}, {"X-Moondream-Auth": KEY})
        assert code == 400 and words in body["error"], body
    code, body = post(served.url + "/query", {**base, "spatial_refs": [[0.5, 0.5]]}, {"X-Moondream-Auth": KEY})
    assert code == 400 and "spatial_refs" in body["error"]


def test_chat_completions_from_the_client(served, scene):
    image, _ = scene
    model = md.vl(endpoint=served.url, api_key=KEY)
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(image)}},
                                             {"type": "text", "text": "Is there a red circle?"}]}]
    reply = model.chat(messages, settings={"max_tokens": 10})
    want = served.engine.query(jpeg_bytes(image), "Is there a red circle?", max_tokens=10)["answer"]
    assert reply["message"] == {"role": "assistant", "content": want} and reply["finish_reason"] == "stop"
    assert "".join(model.chat(messages, stream=True, settings={"max_tokens": 10})["message"]) == want
    code, body = post(served.url + "/chat/completions", {"messages": []}, {"Authorization": f"Bearer {KEY}"})
    assert code == 400 and "messages" in body["error"]


def test_warm_up_comes_before_start_and_is_nothing_on_the_cpu():
    from app.common import open_engine

    engine = open_engine(None, max_batch=2)
    try:
        assert engine.warm_up() == 0           # the CPU path captures no graphs
        engine.start()
        with pytest.raises(RuntimeError, match="before start"):
            engine.warm_up()
    finally:
        engine.close()


def test_warm_up_captures_up_to_the_last_position_of_the_longest_request(monkeypatch):
    from app.common import open_engine
    from engine.serving.limits import MAX_OBJECT_TOKENS, kv_positions

    engine = open_engine(None, max_batch=2)
    asked = []
    monkeypatch.setattr(engine.runner, "capture_all", lambda position: asked.append(position) or 7, raising=False)
    try:
        assert engine.warm_up(max_objects=12) == 7
        cfg = engine.model_config
        t = cfg.tokens
        prompt = max(len(t.detect_prefix), len(t.point_prefix)) + MAX_OBJECT_TOKENS + len(t.prompt_suffix)
        assert asked == [kv_positions(cfg.prefix_len, prompt, "detect", 12)]
        # a point request of as many objects needs fewer positions than that
        assert kv_positions(cfg.prefix_len, prompt, "point", 12) <= asked[0]
    finally:
        engine.close()
