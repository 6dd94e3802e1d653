"""The Gradio UI under hostile use, through gradio_client and raw HTTP.

One item of every corpus kind (tests/malformed.py) uploaded, hostile prompts and max_objects,
a full engine queue ("busy"), a missed deadline, oversized uploads, Gradio's file routes, auth,
and the command line's safe defaults. Every failure must reach the client as one clear line
(AppError; no traceback, no server-side temp path), and the server must keep serving.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from app.common import open_engine  # noqa: E402
from app.tools.screenshot import free_port  # noqa: E402
from app.ui import MAX_UPLOAD_BYTES, build_demo, launch, make_handler  # noqa: E402

from .conftest import torch_threads  # noqa: E402
from .malformed import KINDS_NOT_REGULAR, generate, sample  # noqa: E402

OBJECT = "red circle"
LIMIT = 20


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def good_png(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ui-good") / "good.png"
    rng = np.random.default_rng(7)
    Image.fromarray((rng.random((60, 80, 3)) * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def server(tiny_ckpt):
    engine = open_engine(tiny_ckpt, max_batch=4, max_objects=LIMIT).start()
    demo = build_demo(engine, samples=None, concurrency=8, max_objects_limit=LIMIT)
    port = free_port()
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)  # the app's own defaults
    yield {"url": f"http://127.0.0.1:{port}/", "engine": engine, "demo": demo}
    demo.close()
    engine.close()


@pytest.fixture(scope="module")
def client(server):
    return Client(server["url"], verbose=False)


def assert_clear(error: BaseException, *fragments: str) -> None:
    text = str(error)
    assert text and "\n" not in text.strip() and "Traceback" not in text, text
    assert "/tmp/gradio" not in text and "gradio_api" not in text, text  # no server-side paths
    for fragment in fragments:
        assert fragment in text, text


def detect(client, path, obj=OBJECT, limit=3):
    return client.predict(handle_file(str(path)), obj, limit, api_name="/detect")


def test_safe_launch_defaults(server):
    demo = server["demo"]
    assert demo.max_file_size == MAX_UPLOAD_BYTES == 25 * 1024 * 1024
    assert demo.allowed_paths == []
    assert server["url"].startswith("http://127.0.0.1:")
    with pytest.raises(ValueError, match="allowed_paths"):
        launch(demo, allowed_paths=["/"])
    with pytest.raises(ValueError, match="share"):
        launch(demo, share=True)


def test_corpus_sample_through_the_client(client, tmp_path, good_png):
    root = tmp_path / "corpus"
    items = [i for i in sample(generate(root)) if i.kind not in KINDS_NOT_REGULAR]  # those cannot be uploaded
    assert len(items) >= 20
    for item in items:
        try:
            _, payload, status = detect(client, root / item.name)
        except AppError as e:
            assert item.expect in ("error", "either"), (item, str(e))
            assert_clear(e)
            assert item.name in str(e) or "Cannot use this image" in str(e), str(e)
            continue
        assert item.expect in ("ok", "either"), (item, status)
        if item.size is not None:
            assert (payload["width"], payload["height"]) == tuple(item.size), item
    _, payload, _ = detect(client, good_png)  # still serving
    assert (payload["width"], payload["height"]) == (80, 60)


@pytest.mark.parametrize("obj, message", [
    ("", "Type the object"),
    ("\u3000\t", "Type the object"),
    ("\x00\x01\x7f", "empty"),
    ("x" * 10_000, "The object text is 10,000 characters long; the limit is 200"),
    ("🦄" * 40, "tokens; the limit is 56"),
    ("\u200b\u200d\ufeff", "empty"),
])
def test_hostile_objects(client, good_png, obj, message):
    with pytest.raises(AppError) as info:
        detect(client, good_png, obj)
    assert_clear(info.value, message)


@pytest.mark.parametrize("obj, shown", [
    ("red\x00circle", "red circle"), ("\u202eevil", "evil"), ("עיגול", "עיגול"), ("🔴 e\u0301", "🔴 e\u0301"),
])
def test_odd_objects_are_cleaned_and_shown_clean(client, good_png, obj, shown):
    _, payload, status = detect(client, good_png, obj)
    assert payload["object"] == shown and repr(shown) in status


@pytest.mark.parametrize("limit, message", [
    (0, "minimum"), (-1, "minimum"), (LIMIT + 1, f"maximum value {LIMIT}"), (10**30, "maximum value"),
    ("many", "whole number"), (2.5, "whole number"),
])
def test_hostile_max_objects(client, good_png, limit, message):
    with pytest.raises(AppError) as info:
        detect(client, good_png, limit=limit)
    assert_clear(info.value, message)


def raw_call(url: str, data: list, timeout: float = 60) -> str:
    """POST /gradio_api/call/detect with a hand-written JSON body; returns the event stream text."""
    r = requests.post(url + "gradio_api/call/detect", data=data if isinstance(data, str) else None,
                      json=None if isinstance(data, str) else {"data": data},
                      headers={"Content-Type": "application/json"}, timeout=timeout)
    if r.status_code != 200:
        return f"HTTP {r.status_code}: {r.text}"
    event = r.json()["event_id"]
    return requests.get(url + f"gradio_api/call/detect/{event}", timeout=timeout).text


def test_raw_api_payloads(server, client, good_png):
    """What gradio_client cannot send: NaN, lone surrogates, server paths instead of uploads."""
    url = server["url"]
    for body in ['{"data": [null, "red", NaN]}', '{"data": [null, "red", Infinity]}']:
        text = raw_call(url, body)
        assert "event: error" in text and "Traceback" not in text, text
    for path in ["/etc/passwd", str(good_png), "../../../../etc/passwd"]:  # not uploaded: refused by Gradio
        text = raw_call(url, [{"path": path, "meta": {"_type": "gradio.FileData"}}, "red", 3])
        assert "event: error" in text and "root:" not in text and "Traceback" not in text, text
    with open(good_png, "rb") as f:
        r = requests.post(url + "gradio_api/upload", files={"files": ("g.png", f, "image/png")}, timeout=30)
    r.raise_for_status()
    image = {"path": r.json()[0], "meta": {"_type": "gradio.FileData"}}
    text = raw_call(url, [image, "red\ud800 circle", 3])  # json escapes the lone surrogate
    assert "event: complete" in text and "red circle" in text, text
    text = raw_call(url, '{"data": [%s, "red", NaN]}' % json.dumps(image))
    assert "event: error" in text and "whole number" in text, text
    detect(client, good_png)  # still serving


def test_upload_size_limit(server, client, tmp_path, good_png):
    big = tmp_path / "big.png"
    with open(big, "wb") as f:  # sparse-free but cheap: 25 MiB + 1 byte of zeros behind a PNG name
        f.truncate(MAX_UPLOAD_BYTES + 1)
    with open(big, "rb") as f:
        r = requests.post(server["url"] + "gradio_api/upload", files={"files": ("big.png", f, "image/png")},
                          timeout=60)
    assert r.status_code == 413, (r.status_code, r.text[:200])
    assert "maximum allowed size" in r.text or "exceeds" in r.text
    with pytest.raises(Exception, match="exceeds the maximum file size"):  # gradio_client checks it first
        detect(client, big)
    detect(client, good_png)  # still serving


@pytest.mark.parametrize("route", [
    "gradio_api/file=/etc/passwd", "gradio_api/file/etc/passwd", "gradio_api/file=%2Fetc%2Fpasswd",
    "gradio_api/file=..%2F..%2F..%2F..%2Fetc%2Fpasswd", "gradio_api/file=/tmp/gradio/../../etc/passwd",
    "file=/etc/passwd", "gradio_api/file=README.md", "gradio_api/file=pyproject.toml",
])
def test_file_routes_serve_nothing_outside_gradio_folders(server, route):
    r = requests.get(server["url"] + route, timeout=10)
    assert r.status_code in (403, 404), (route, r.status_code)
    assert "root:" not in r.text and "[project]" not in r.text


def test_checkpoint_files_are_not_served(server, tiny_ckpt):
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        r = requests.get(server["url"] + f"gradio_api/file={tiny_ckpt / name}", timeout=10)
        assert r.status_code in (403, 404), (name, r.status_code)


def test_busy_engine_is_a_clear_error(server, good_png):
    """A full engine queue answers "busy" at once (gr.Error); the queued request is still served."""
    engine = server["engine"]
    real_step, gate = engine.step, threading.Event()
    first, second = Client(server["url"], verbose=False), Client(server["url"], verbose=False)
    engine.step = lambda: (gate.wait(timeout=60), real_step())[1]  # the loop stops before draining its inbox
    config = engine.config
    engine.config = config.replace(max_queue=1)
    try:
        job = first.submit(handle_file(str(good_png)), OBJECT, 2, api_name="/detect")
        deadline = time.monotonic() + 60
        while engine.queued() < 1:  # the first request is queued (and held there)
            assert time.monotonic() < deadline and not job.done(), "the first request never reached the engine"
            time.sleep(0.01)
        with pytest.raises(AppError) as info:  # answered while the first request is still held
            detect(second, good_png)
        assert_clear(info.value, "The server is busy")
        gate.set()
        _, payload, _ = job.result(timeout=60)
        assert payload["task"] == "detect"
    finally:
        gate.set()
        del engine.step
        engine.config = config
    detect(second, good_png)


def test_missed_deadline_is_a_clear_error(server, good_png):
    engine = server["engine"]
    real_clock = engine.clock
    ticks = itertools.count()
    # Each reading of the engine's clock is an hour later: the deadline has passed at the first step.
    engine.clock = lambda: real_clock() + 3600.0 * next(ticks)
    try:
        handler = make_handler(engine, "detect", max_objects_limit=LIMIT, timeout=0.2)
        with pytest.raises(gr.Error, match=r"took longer than 0\.2 s"):
            handler(str(good_png), OBJECT, LIMIT)
    finally:
        engine.clock = real_clock
    assert handler(str(good_png), OBJECT, 2)[1]["task"] == "detect"


def test_unexpected_failure_is_one_line(server, good_png, monkeypatch):
    engine = server["engine"]
    handler = make_handler(engine, "point", max_objects_limit=LIMIT)
    monkeypatch.setattr("app.ui.draw_result", lambda *a, **k: (_ for _ in ()).throw(MemoryError("no room")))
    with pytest.raises(gr.Error, match=r"The request failed \(MemoryError: no room\)"):
        handler(str(good_png), OBJECT, 2)


def test_auth(tiny_ckpt, good_png):
    engine = open_engine(tiny_ckpt, max_batch=1, max_objects=4).start()
    demo = build_demo(engine, samples=None, concurrency=2, max_objects_limit=4)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    launch(demo, port=port, prevent_thread_lock=True, quiet=True, auth=("alice", "s3cret"))
    try:
        assert requests.get(url + "config", timeout=10).status_code in (401, 403)
        assert requests.get(url + "gradio_api/info", timeout=10).status_code in (401, 403)
        with pytest.raises(Exception):
            Client(url, verbose=False, auth=("alice", "wrong"))
        c = Client(url, verbose=False, auth=("alice", "s3cret"))
        _, payload, _ = c.predict(handle_file(str(good_png)), OBJECT, 2, api_name="/point")
        assert payload["task"] == "point"
    finally:
        demo.close()
        engine.close()


# ---- python -m app: safe defaults ------------------------------------------------------------

def test_cli_binds_localhost_and_warns_otherwise(tiny_ckpt, monkeypatch, capsys):
    import app.__main__ as cli
    import app.ui as ui

    calls = []
    monkeypatch.setattr(ui, "launch", lambda demo, **kw: calls.append(kw))
    assert cli.main(["--weights", str(tiny_ckpt)]) == 0
    assert calls[-1]["host"] == "127.0.0.1" and calls[-1]["auth"] is None
    assert calls[-1]["max_file_size"] == 25 * 1024 * 1024
    assert "warning" not in capsys.readouterr().err

    assert cli.main(["--weights", str(tiny_ckpt), "--host", "0.0.0.0", "--max-upload-mb", "5", "--timeout", "9"]) == 0
    err = capsys.readouterr().err
    assert "warning: --host 0.0.0.0" in err and "--auth" in err
    assert calls[-1]["host"] == "0.0.0.0" and calls[-1]["max_file_size"] == 5 * 1024 * 1024

    assert cli.main(["--weights", str(tiny_ckpt), "--host", "0.0.0.0", "--auth", "bob:pa:ss"]) == 0
    err = capsys.readouterr().err
    assert "warning: --host 0.0.0.0" in err and "add --auth" not in err
    assert calls[-1]["auth"] == ("bob", "pa:ss")


@pytest.mark.parametrize("argv", [["--auth", "nopassword"], ["--auth", ":x"], ["--auth", "x:"],
                                  ["--max-upload-mb", "0"], ["--timeout", "-1"], ["--timeout", "nan"]])
def test_cli_rejects_bad_options(argv, capsys):
    from app.__main__ import parse_args

    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
