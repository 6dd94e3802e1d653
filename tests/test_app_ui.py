"""The Gradio UI, launched on localhost and driven through gradio_client and a headless Chromium.

Needs: gradio, gradio_client, playwright (Python package only: no browser download) and the
Debian `chromium` package (/usr/bin/chromium). A missing browser fails the browser test with
the install command; nothing is skipped.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client, handle_file  # noqa: E402

from app.common import open_engine  # noqa: E402
from app.draw import PALETTE, draw_result  # noqa: E402
from app.tools.screenshot import find_chromium, free_port, run_in_browser  # noqa: E402
from app.ui import build_demo, launch, sample_images  # noqa: E402
from engine.model.image import load_image  # noqa: E402
from tests.conftest import make_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OBJECT = "red circle"


def scene(path: Path, size=(320, 240), bg=(205, 222, 240)) -> Path:
    im = Image.new("RGB", size, bg)
    d = ImageDraw.Draw(im)
    d.ellipse((40, 50, 120, 130), fill=(225, 30, 35))
    d.rectangle((190, 120, 270, 200), fill=(35, 80, 235))
    im.save(path)
    return path


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A tiny random checkpoint and an image on which it finds at least one box and one point
    (a random model finds nothing on some seeds; search a few so the drawing is really tested)."""
    tmp = tmp_path_factory.mktemp("ui")
    image = scene(tmp / "scene.png")
    for seed in range(12):
        weights = make_checkpoint(tmp / f"tiny{seed}", seed)
        engine = open_engine(weights, max_batch=1)
        boxes = engine.detect(str(image), OBJECT, max_objects=5)
        points = engine.point(str(image), OBJECT, max_objects=5)
        if boxes["objects"] and points["points"]:
            return {"weights": weights, "image": image, "detect": boxes, "point": points, "tmp": tmp}
    pytest.fail("no tiny random checkpoint (seeds 0-11) finds any object; the drawing cannot be tested")


@pytest.fixture(scope="module")
def server(case):
    samples = case["tmp"] / "samples"
    samples.mkdir()
    scene(samples / "a.png", bg=(30, 30, 40))
    scene(samples / "b.jpg", size=(280, 280))
    (samples / "notes.txt").write_text("not an image")
    engine = open_engine(case["weights"], max_batch=8, max_objects=60).start()
    demo = build_demo(engine, samples=samples, concurrency=16, max_objects_limit=60)
    port = free_port()
    launch(demo, port=port, prevent_thread_lock=True, quiet=True)  # the app's own launch (its safe defaults)
    url = f"http://127.0.0.1:{port}/"
    yield {"url": url, "engine": engine, "samples": samples}
    demo.close()
    engine.close()


@pytest.fixture(scope="module")
def client(server):
    return Client(server["url"], verbose=False)


def close_to(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(abs(x[k] - y[k]) < 1e-4 for k in x)
                                    for x, y in zip(a, b))


def test_api_has_stable_names(client):
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name in ("/detect", "/point"):
        assert name in endpoints
        assert len(endpoints[name]["parameters"]) == 3
        assert len(endpoints[name]["returns"]) == 3


@pytest.mark.parametrize("task", ["detect", "point"])
def test_client_round_trip(client, case, task):
    image_path, payload, status = client.predict(handle_file(str(case["image"])), OBJECT, 5, api_name=f"/{task}")
    key = "objects" if task == "detect" else "points"
    expected = case[task][key]
    assert payload["task"] == task and payload["object"] == OBJECT
    assert (payload["width"], payload["height"]) == (320, 240)
    assert close_to(payload[key], expected)
    assert re.fullmatch(rf"{task} 'red circle': {len(expected)} (object|point)s? in \d+ ms \(320×240 px\)", status)
    annotated = Image.open(image_path).convert("RGB")
    assert annotated.size == (320, 240)
    original = load_image(case["image"])
    assert annotated.tobytes() == draw_result(original, {key: payload[key]}, OBJECT).tobytes()
    assert annotated.tobytes() != original.tobytes()
    colours = {c for _, c in annotated.getcolors(maxcolors=1 << 20)}
    assert PALETTE[0] in colours  # the first mark's colour is really drawn


def test_max_objects_optional(client, case):
    _, payload, _ = client.predict(handle_file(str(case["image"])), OBJECT, None, api_name="/detect")
    assert "objects" in payload


@pytest.mark.parametrize("name, content, text, limit, message", [
    ("bad.png", b"this is not an image", OBJECT, 5, "Cannot read 'bad.png' as an image"),
    ("truncated.png", None, OBJECT, 5, "Cannot use this image"),
    ("ok.png", "scene", "   ", 5, "Type the object to look for"),
    ("ok.png", "scene", OBJECT, 0, "minimum"),
    ("ok.png", "scene", OBJECT, 61, "maximum value 60"),
])
def test_client_errors_are_clear(client, tmp_path, name, content, text, limit, message):
    from gradio_client.exceptions import AppError

    path = tmp_path / name
    if content == "scene":
        scene(path)
    elif content is None:  # a real PNG header, then the data cut short
        buf = io.BytesIO()
        Image.new("RGB", (64, 64), (10, 200, 30)).save(buf, format="PNG")
        path.write_bytes(buf.getvalue()[:60])
    else:
        path.write_bytes(content)
    with pytest.raises(AppError) as info:
        client.predict(handle_file(str(path)), text, limit, api_name="/detect")
    assert message in str(info.value)
    assert "Traceback" not in str(info.value)


def test_concurrent_requests_are_batched(server, case):
    """Eight users at once: all answered, and several requests were in the engine together.

    Each engine step is slowed down (the tiny model is so fast that a request could finish
    before the next one arrives), so overlap is certain whenever the UI lets requests run
    concurrently; with a UI concurrency limit of 1 the peak stays 1.
    """
    engine = server["engine"]
    real_step, real_submit = engine.step, engine.submit
    lock, in_engine, peak = threading.Lock(), [0], [0]

    def slow_step():
        time.sleep(0.02)
        return real_step()

    def counting_submit(*args, **kwargs):
        handle = real_submit(*args, **kwargs)
        with lock:
            in_engine[0] += 1
            peak[0] = max(peak[0], in_engine[0])

        def finished(_):
            with lock:
                in_engine[0] -= 1

        handle.future.add_done_callback(finished)
        return handle

    # The eight identical annotated images land on one cached file in Gradio, which a concurrent
    # download can catch half-replaced; the answers checked here are the JSON outputs.
    clients = [Client(server["url"], verbose=False, download_files=False) for _ in range(8)]
    engine.step, engine.submit = slow_step, counting_submit  # instance attributes shadow the methods
    try:
        jobs = [c.submit(handle_file(str(case["image"])), OBJECT, 50, api_name="/detect") for c in clients]
        results = [job.result(timeout=120) for job in jobs]
    finally:
        del engine.step, engine.submit
    first = results[0][1]["objects"]
    assert all(close_to(r[1]["objects"], first) for r in results)
    assert peak[0] >= 2, f"requests never overlapped in the engine (peak in flight {peak[0]})"


def test_samples_are_listed(server):
    assert [Path(p).name for p in sample_images(server["samples"])] == ["a.png", "b.jpg"]
    assert sample_images(server["samples"] / "missing") == []


def test_browser_detect_and_sample_point(server, case, tmp_path):
    """Headless Chromium: upload, type, click Detect, see the annotated image; then a sample + Point."""
    try:
        chromium = find_chromium()
    except RuntimeError as e:
        pytest.fail(str(e))
    if importlib.util.find_spec("playwright") is None:
        pytest.fail("the browser test needs the Python package 'playwright' (pip install playwright; "
                    "no browser download: it drives the system chromium)")
    shot = tmp_path / "ui.png"
    out = run_in_browser(server["url"], case["image"], OBJECT, task="detect", screenshot=shot, chromium=chromium)
    n = len(case["detect"]["objects"])
    assert out["status"].startswith(f"detect 'red circle': {n} object")
    shown = Image.open(io.BytesIO(out["result_png"])).convert("RGB")
    expected = draw_result(load_image(case["image"]), case["detect"], OBJECT)
    assert shown.size == expected.size
    diff = sum(a != b for a, b in zip(shown.tobytes(), expected.tobytes()))
    assert diff < len(expected.tobytes()) * 0.001  # the annotated image the engine produced is shown
    assert Image.open(shot).size[0] >= 1000

    out = run_in_browser(server["url"], None, OBJECT, task="point", sample_index=1, chromium=chromium)
    assert out["status"].startswith("point 'red circle':") and out["status"].endswith("(280×280 px)")
    assert Image.open(io.BytesIO(out["result_png"])).size == (280, 280)


def test_cli_serves_on_localhost(case):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app", "--weights", str(case["weights"]), "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.3)
        else:
            pytest.fail("python -m app did not answer within 60 s")
        endpoints = Client(f"http://127.0.0.1:{port}/", verbose=False).view_api(
            return_format="dict", print_info=False)["named_endpoints"]
        assert {"/detect", "/point"} <= set(endpoints)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert f"http://127.0.0.1:{port}" in out
    assert "share=True" not in out  # the app refuses sharing; Gradio's hint would mislead


def test_cli_defaults_and_errors(tmp_path):
    from app.__main__ import parse_args

    args = parse_args([])
    assert (args.host, args.port, args.weights, args.device, args.dtype) == ("127.0.0.1", 7860, None, "auto", "auto")
    assert args.max_objects_limit == 100
    with pytest.raises(SystemExit):
        parse_args(["--max-objects-limit", "201"])
    r = subprocess.run([sys.executable, "-m", "app", "--weights", str(tmp_path / "nope")], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "error: cannot load the model" in r.stderr and "Traceback" not in r.stderr


def test_missing_browser_is_reported_with_the_fix(monkeypatch):
    import app.tools.screenshot as shot

    monkeypatch.setattr(shot, "CHROMIUM_CANDIDATES", ("/nonexistent/chromium",))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CHROMIUM", raising=False)
    with pytest.raises(RuntimeError, match="apt-get install -y chromium"):
        shot.find_chromium()
