"""The UI says what runs: the model line, and for the embedded model its vocabulary, example queries
and a warning for words outside it (headless Chromium and gradio_client)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from gradio_client import Client, handle_file  # noqa: E402

from app.common import open_engine  # noqa: E402
from app.tools.screenshot import free_port  # noqa: E402
from app.ui import build_demo, vocabulary_warning  # noqa: E402
from engine.model.vocabulary import Vocabulary  # noqa: E402

from .browser import page_at  # noqa: E402
from .conftest import CPU_AUTO_DTYPE, torch_threads  # noqa: E402

SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon", "diamond")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")


@pytest.fixture(scope="module")
def embedded():
    with torch_threads(1):
        engine = open_engine(None, max_batch=2, max_objects=10).start()
        demo = build_demo(engine, samples=None, concurrency=4, max_objects_limit=10)
        port = free_port()
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
        yield {"url": f"http://127.0.0.1:{port}/", "engine": engine}
        demo.close()
        engine.close()


def test_embedded_model_metadata():
    engine = open_engine(None, max_batch=1, max_objects=5)
    info = engine.model_info
    assert info.vocabulary.groups == {"shapes": SHAPES, "colours": COLOURS}
    assert info.vocabulary.examples and not any(info.vocabulary.unknown_words(q) for q in info.vocabulary.examples)
    assert info.describe().endswith(f"assets/model · 9.79 M parameters · cpu · {CPU_AUTO_DTYPE}")


def test_warning_names_the_unknown_words():
    v = Vocabulary({"shapes": SHAPES, "colours": COLOURS})
    assert vocabulary_warning(v, "Red  Circle") == ""
    text = vocabulary_warning(v, "red cat on a sofa, cat")
    assert "'cat', 'on', 'a', 'sofa' are outside this model's vocabulary" in text
    assert "'dog' is outside" in vocabulary_warning(v, "dog")


def test_no_vocabulary_panel_for_a_general_model(tiny_ckpt):
    engine = open_engine(tiny_ckpt, max_batch=1, max_objects=5)
    assert engine.model_info.vocabulary is None
    ids = {getattr(b, "elem_id", None) for b in build_demo(engine, samples=None).blocks.values()}
    assert "model-line" in ids and not {"vocabulary", "query-examples"} & ids


def test_api_status_carries_the_warning(embedded):
    client = Client(embedded["url"], verbose=False)
    sample = os.path.join(os.path.dirname(__file__), "..", "assets", "samples", "scene_0.png")
    _, payload, status = client.predict(handle_file(sample), "cat", 3, api_name="/detect")
    assert status.startswith("detect 'cat': ") and "'cat' is outside this model's vocabulary" in status
    _, _, status = client.predict(handle_file(sample), "hexagon", 3, api_name="/detect")
    assert "outside" not in status


def test_browser_shows_model_vocabulary_examples_and_warning(embedded):
    with page_at(embedded["url"]) as page:
        model_line = page.locator("#model-line").first
        model_line.wait_for(state="visible")
        assert f"assets/model · 9.79 M parameters · cpu · {CPU_AUTO_DTYPE}" in model_line.inner_text()
        vocab = page.locator("#vocabulary").first.inner_text()
        assert "only recognises" in vocab and all(w in vocab for w in SHAPES + COLOURS), vocab
        examples = page.locator("#query-examples").first
        examples.get_by_text("red circle", exact=True).first.wait_for(state="visible")  # rows render after the block
        assert "red circle" in examples.inner_text()
        box = page.locator("#object textarea, #object input").first
        box.fill("red cat")
        page.wait_for_function("() => (document.querySelector('#query-warning') || {}).innerText"
                               "?.includes(\"'cat' is outside this model's vocabulary\")")
        examples.get_by_text("red circle", exact=True).first.click()
        page.wait_for_function("() => { const e = document.querySelector('#object textarea, #object input');"
                               " return e && e.value === 'red circle'; }")
        page.wait_for_function("() => !(document.querySelector('#query-warning') || {}).innerText"
                               "?.includes('outside')")
