"""The UI's Ask action in a headless Chromium: a yes/no question and a JSON-schema question.

Needs what tests/test_app_ui.py needs (gradio, playwright, the Debian `chromium` package); a
missing browser fails with the install command, nothing is skipped.
"""

from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest
from PIL import Image

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from app.common import open_engine  # noqa: E402
from app.tools.screenshot import free_port  # noqa: E402
from app.ui import build_demo  # noqa: E402
from tests.browser import page_at  # noqa: E402
from tests.conftest import random_image  # noqa: E402

SCHEMA = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "present": {"type": "boolean"}},
          "required": ["colour", "present"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_ckpt):
    image = tmp_path_factory.mktemp("ask") / "scene.png"
    Image.fromarray(random_image(3, 120, 160)).save(image)
    engine = open_engine(tiny_ckpt, max_batch=4).start()
    demo = build_demo(engine, samples=None, concurrency=4)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield {"url": f"http://127.0.0.1:{port}/", "image": image, "engine": engine}
    demo.close()
    engine.close()


def ask_in_browser(page, question: str, answer_format: str, schema: str | None = None) -> tuple[str, object]:
    """Type the question, pick the answer format (and schema), click Ask; the status line's answer."""
    page.locator("#question textarea, #question input").first.fill(question)
    page.locator("#answer-format label", has_text=answer_format).first.click()
    if schema is not None:
        editor = page.locator("#schema .cm-content").first
        editor.click()
        editor.fill(schema)
    before = page.locator("#status textarea, #status input").first.input_value()
    page.locator("#ask-btn").click()
    page.wait_for_function(
        """(before) => { const e = document.querySelector('#status textarea, #status input');
                         return e && e.value.startsWith('answer: ') && e.value !== before; }""", arg=before)
    status = page.locator("#status textarea, #status input").first.input_value()
    match = re.fullmatch(r"answer: (.*) \(\d+ ms\)", status, flags=re.S)
    assert match, status
    return status, match.group(1)


def test_browser_asks_yes_no_and_json_schema_questions(served):
    engine = served["engine"]
    expected_yes_no = engine.query(str(served["image"]), "Is there a red circle?", answer=["yes", "no"])["answer"]
    expected_json = engine.query(str(served["image"]), "Describe the main shape.", answer=SCHEMA)["answer"]
    with page_at(served["url"], viewport={"width": 1280, "height": 1000}) as page:
        page.locator("#input-image input[type=file]").set_input_files(str(served["image"]))
        page.locator("#input-image img").first.wait_for(state="visible")

        _, answer = ask_in_browser(page, "Is there a red circle?", "yes / no")
        assert answer in ("yes", "no") and answer == expected_yes_no

        _, answer = ask_in_browser(page, "Describe the main shape.", "JSON schema", json.dumps(SCHEMA))
        value = json.loads(answer)
        jsonschema.validate(value, SCHEMA)
        assert value == expected_json

