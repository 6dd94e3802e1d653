"""Drive the UI in a headless Chromium (Playwright + the system browser) and take a screenshot.

    python -m app.screenshot IMAGE "OBJECT" [--weights DIR] [--out docs/screenshot.png]
                             [--task detect|point] [--chromium /usr/bin/chromium]

It starts the UI on a free localhost port, uploads IMAGE, types OBJECT, clicks Detect (or
Point), waits for the annotated result and saves a full-page screenshot. Playwright's own
browser downloads are not needed: the Debian ``chromium`` package is used
(``apt-get install chromium``; ``pip install playwright``). The tests use `run_in_browser`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
from pathlib import Path

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def find_chromium(explicit: str | None = None) -> str:
    """Path of a Chromium binary, or RuntimeError saying how to install one."""
    for candidate in ([explicit] if explicit else []) + [os.environ.get("CHROMIUM", "")] + list(CHROMIUM_CANDIDATES):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    raise RuntimeError("no Chromium browser found (looked at $CHROMIUM, " + ", ".join(CHROMIUM_CANDIDATES)
                       + "); install it with: apt-get install -y chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_in_browser(url: str, image: str | Path | None, text: str, *, task: str = "detect",
                   screenshot: str | Path | None = None, chromium: str | None = None, timeout_s: float = 60.0,
                   sample_index: int | None = None) -> dict:
    """Upload `image` (or click sample `sample_index`), type `text`, click the task's button and
    wait for the result. Returns {"status", "result_src", "result_png" (bytes of the shown result)}.
    """
    from playwright.sync_api import sync_playwright

    ms = int(timeout_s * 1000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(chromium),
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
            page.set_default_timeout(ms)
            page.goto(url, wait_until="domcontentloaded")
            if sample_index is None:
                page.locator("#input-image input[type=file]").set_input_files(str(image))
            else:
                page.locator("#samples button.gallery-item").nth(sample_index).click()
            page.locator("#input-image img").first.wait_for(state="visible")
            page.locator("#object textarea, #object input").first.fill(text)
            page.locator(f"#{task}-btn").click()
            page.wait_for_function(
                """(task) => { const e = document.querySelector('#status textarea, #status input');
                               return e && e.value.startsWith(task + ' '); }""", arg=task, timeout=ms)
            result = page.locator("#result-image img").first
            result.wait_for(state="visible")
            page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=result.element_handle())
            status = page.locator("#status textarea, #status input").first.input_value()
            src = result.get_attribute("src")
            png = page.request.get(src).body() if src and src.startswith("http") else b""
            if screenshot is not None:
                Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
                page.mouse.move(0, 0)
                page.screenshot(path=str(screenshot), full_page=True)
            return {"status": status, "result_src": src, "result_png": png}
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.screenshot", description=__doc__.splitlines()[0])
    p.add_argument("image")
    p.add_argument("object")
    p.add_argument("--task", choices=("detect", "point"), default="detect")
    p.add_argument("--weights", default=None, metavar="DIR")
    p.add_argument("--samples", default=None, metavar="DIR")
    p.add_argument("--out", default="docs/screenshot.png")
    p.add_argument("--chromium", default=None)
    args = p.parse_args(argv)

    from app.common import open_engine
    from app.ui import CSS, DEFAULT_SAMPLES, build_demo

    engine = open_engine(args.weights).start()
    port = free_port()
    demo = build_demo(engine, samples=args.samples or DEFAULT_SAMPLES)
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, css=CSS)
    try:
        out = run_in_browser(f"http://127.0.0.1:{port}/", args.image, args.object, task=args.task,
                             screenshot=args.out, chromium=args.chromium)
        print(out["status"])
        print(f"wrote {args.out}")
    finally:
        demo.close()
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
