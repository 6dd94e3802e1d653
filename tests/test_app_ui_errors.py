"""The UI's rough edges, in headless Chromium: a non-image after a sample, errors that stay in
the Status box and clear the old result, the page's own API snippet (which must run), scores
and the Min score filter. Needs what tests/test_app_ui.py needs (playwright + /usr/bin/chromium)."""

from __future__ import annotations

import re

from gradio_client import Client

from tests.browser import page_at
from tests.test_app_ui import OBJECT, case, server  # noqa: F401 - fixtures

STATUS = "#status textarea, #status input"


def run_task(page, task: str, text: str, prefix: str) -> str:
    """Type `text`, click the task's button, wait for a Status starting with `prefix`; returns it."""
    page.locator("#object textarea, #object input").first.fill(text)
    page.locator(f"#{task}-btn").click()
    page.wait_for_function("([sel, prefix]) => { const e = document.querySelector(sel);"
                           " return e && e.value.startsWith(prefix); }", arg=[STATUS, prefix])
    return page.locator(STATUS).first.input_value()


def toasts(page) -> list[str]:
    return page.locator(".toast-body, [data-testid='toast-body']").all_inner_texts()


def test_non_image_after_a_sample_gets_the_friendly_message(server, tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_text("this is not an image")
    with page_at(server["url"]) as page:
        page.locator("#samples button.gallery-item").nth(0).click()
        page.locator("#input-image img").first.wait_for(state="visible")
        page.locator("#input-image input[type=file]").set_input_files(str(bad))
        status = run_task(page, "detect", OBJECT, "Error")
        shown = " ".join(toasts(page)) + " " + status
    assert "Cannot read 'bad.png' as an image" in status
    assert "/tmp" not in shown and "gradio" not in shown.lower() and "preprocess" not in shown.lower()


def test_errors_stay_in_status_and_clear_the_old_result(server, case):
    with page_at(server["url"]) as page:
        page.locator("#input-image input[type=file]").set_input_files(str(case["image"]))
        page.locator("#input-image img").first.wait_for(state="visible")
        assert run_task(page, "detect", OBJECT, "detect ").startswith(f"detect {OBJECT!r}:")
        page.locator("#result-image img").first.wait_for(state="visible")
        status = run_task(page, "point", "   ", "Error")
        assert status == "Error: point failed: Type the object to look for, e.g. 'red circle'."
        page.locator("#result-image img").first.wait_for(state="detached")  # the old result is gone
        assert OBJECT not in page.locator("#result-json").inner_text()
        # and a later success replaces the error
        assert run_task(page, "point", OBJECT, "point ").startswith(f"point {OBJECT!r}:")


def test_min_score_filters_the_shown_objects(server, case):
    scores = sorted(o["score"] for o in case["detect"]["objects"])
    with page_at(server["url"]) as page:
        page.locator("#input-image input[type=file]").set_input_files(str(case["image"]))
        page.locator("#input-image img").first.wait_for(state="visible")
        run_task(page, "detect", OBJECT, "detect ")
        slider = page.locator("#min-score input[type=number]").first
        slider.fill("1")
        slider.press("Enter")
        page.locator("#min-score input[type=range]").first.dispatch_event("pointerup")
        page.wait_for_function("(sel) => document.querySelector(sel).value.includes('with score >= 1')", arg=STATUS)
        status = page.locator(STATUS).first.input_value()
    kept = sum(s >= 1.0 for s in scores)
    assert status.startswith(f"detect {OBJECT!r}: {kept} object") and f"(of {len(scores)})" in status


def test_api_panel_shows_a_snippet_that_runs(server, monkeypatch):
    with page_at(server["url"]) as page:
        page.locator("#api-usage").first.click()
        page.wait_for_function("() => { const e = document.querySelector('#api-snippet pre');"
                               " return e && e.innerText.includes(':' + location.port); }")
        snippet = page.locator("#api-snippet pre").first.inner_text()
        footer = page.locator("footer").inner_text()
    assert "Use via API" not in footer  # Gradio's generic page (obj="Hello!!", an internet image) is not linked
    assert "Hello!!" not in snippet and "http" in snippet and 'api_name="/detect"' in snippet
    image = re.search(r"handle_file\('([^']+)'\)", snippet).group(1)
    assert image.startswith(str(server["samples"]))  # a local file that exists
    printed = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(a))
    monkeypatch.setattr("gradio_client.Client", lambda url, **kw: Client(url, verbose=False))
    exec(snippet, {})  # the snippet as shown, against this server
    assert len(printed) == 2 and isinstance(printed[0][0], list) and isinstance(printed[1][0], list)
