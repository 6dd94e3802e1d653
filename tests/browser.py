"""`page_at(url)`: a page of Debian's headless Chromium (through Playwright) at `url`, for the
browser tests; a missing browser or Playwright fails the test with the fix."""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager

import pytest

from app.tools.screenshot import find_chromium


@contextmanager
def page_at(url: str, viewport: dict | None = None):
    try:
        chromium = find_chromium()
    except RuntimeError as e:
        pytest.fail(str(e))
    if importlib.util.find_spec("playwright") is None:
        pytest.fail("the browser test needs the Python package 'playwright' (pip install playwright)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport=viewport or {"width": 1280, "height": 900})
            page.set_default_timeout(60_000)
            page.goto(url, wait_until="domcontentloaded")
            yield page
        finally:
            browser.close()
