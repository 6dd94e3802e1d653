"""The Gradio 6 Blocks UI: upload an image (or pick a sample), type an object, Point or Detect.

All sessions share one started :class:`~engine.engine.Engine`; the two events run
concurrently (one concurrency group, `concurrency` requests at a time), so requests from
several users are batched together by the engine.

API (for ``gradio_client``), both ``(image filepath, object text, max_objects) ->
(annotated image, JSON dict, status text)``:

    client.predict(handle_file("cat.jpg"), "cat", 10, api_name="/detect")
    client.predict(handle_file("cat.jpg"), "cat eye", None, api_name="/point")

The JSON dict is the engine's result (``objects`` with normalised boxes, or ``points``)
plus ``task``, ``object``, ``width``, ``height`` (pixels) and ``ms``. Bad input (no image,
an unreadable file, an empty object, max_objects out of range) raises ``gr.Error`` with a
one-line message; the client sees it as ``AppError``.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from app.common import IMAGE_SUFFIXES  # noqa: E402
from app.draw import draw_result  # noqa: E402
from engine.engine import Engine, EngineBusy  # noqa: E402
from engine.image import ImageError, load_image  # noqa: E402
from engine.skills import DEFAULT_MAX_OBJECTS, MAX_OBJECTS_LIMIT, RequestError  # noqa: E402

__all__ = ["build_demo", "sample_images", "friendly_upload_errors", "DEFAULT_SAMPLES", "IMAGE_SUFFIXES"]

DEFAULT_SAMPLES = Path(__file__).resolve().parent.parent / "assets" / "samples"
REQUEST_TIMEOUT_S = 300.0

CSS = """
#status textarea { font-family: ui-monospace, monospace; }
"""


def friendly_upload_errors(component: gr.Image) -> gr.Image:
    """Make an unreadable upload raise a clear gr.Error instead of a generic processing failure.

    (gr.Image opens every upload with PIL before the event runs; a non-image file would fail
    there with a developer-facing message. The method is wrapped on the instance, not in a
    subclass: Gradio writes a .pyi stub next to the source file of every component subclass.)
    """
    original = component.preprocess

    def preprocess(payload):
        try:
            return original(payload)
        except gr.Error:
            raise
        except Exception as e:
            name = getattr(payload, "orig_name", None) or "the upload"
            raise gr.Error(f"Cannot read {name!r} as an image ({type(e).__name__}); upload a JPEG, PNG, WebP, "
                           f"BMP, GIF or TIFF file.", print_exception=False) from None

    component.preprocess = preprocess
    return component


def sample_images(folder: str | Path | None) -> list[str]:
    """Image files directly in `folder`, sorted; [] when it is missing."""
    if folder is None:
        return []
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [str(p) for p in sorted(folder.iterdir())
            if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")]


def _user_error(message: str) -> gr.Error:
    return gr.Error(message, print_exception=False)


def _max_objects(value, limit: int) -> int:
    if value is None or value == "":
        return min(DEFAULT_MAX_OBJECTS, limit)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _user_error(f"Max objects must be a whole number between 1 and {limit}.") from None
    if not number.is_integer() or not 1 <= number <= limit:
        raise _user_error(f"Max objects must be a whole number between 1 and {limit}, got {value}.")
    return int(number)


def make_handler(engine: Engine, task: str, *, max_objects_limit: int = MAX_OBJECTS_LIMIT,
                 timeout: float = REQUEST_TIMEOUT_S):
    """The event function for one task: (image path, object, max_objects) -> (image, dict, status)."""

    def handler(image_path, obj, max_objects):
        if not image_path:
            raise _user_error("Upload an image (or pick a sample) first.")
        if not isinstance(obj, str) or not obj.strip():
            raise _user_error("Type the object to look for, e.g. 'red circle'.")
        limit = _max_objects(max_objects, max_objects_limit)
        try:
            picture = load_image(image_path)
        except ImageError as e:
            raise _user_error(f"Cannot use this image: {e}") from None
        start = time.perf_counter()
        try:
            handle = engine.submit(picture, task, obj, max_objects=limit)
        except (RequestError, EngineBusy) as e:
            raise _user_error(str(e)) from None
        try:
            result = handle.result(timeout=timeout)
        except FutureTimeout:
            handle.cancel()
            raise _user_error(f"The request took longer than {timeout:.0f} s and was cancelled; try again.") from None
        except RequestError as e:
            raise _user_error(str(e)) from None
        except Exception as e:  # engine failure: one line, no traceback in the UI
            raise _user_error(f"The engine failed on this request: {' '.join(str(e).split())}") from None
        ms = (time.perf_counter() - start) * 1000.0
        key = "objects" if task == "detect" else "points"
        found = result.get(key, [])
        text = " ".join(obj.split())
        annotated = draw_result(picture, result, text)
        noun = ("object" if task == "detect" else "point") + ("" if len(found) == 1 else "s")
        status = f"{task} {text!r}: {len(found)} {noun} in {ms:.0f} ms ({picture.width}\u00d7{picture.height} px)"
        payload = {"task": task, "object": text, "width": picture.width, "height": picture.height,
                   key: found, "ms": round(ms, 1)}
        return annotated, payload, status

    handler.__name__ = task
    return handler


def build_demo(engine: Engine, *, samples: str | Path | None = DEFAULT_SAMPLES, concurrency: int = 32,
               max_objects_limit: int = MAX_OBJECTS_LIMIT, title: str = "Moondream point & detect") -> gr.Blocks:
    """The Blocks app around a started engine (the caller owns and closes the engine).

    `max_objects_limit` caps the "Max objects" input; size the engine for it
    (app.common.open_engine(..., max_objects=max_objects_limit)).
    """
    limit = max(1, min(int(max_objects_limit), MAX_OBJECTS_LIMIT))
    with gr.Blocks(title=title) as demo:
        gr.Markdown(f"## {title}\nUpload an image or pick a sample, type what to look for, then **Detect** "
                    "(boxes) or **Point** (centres).")
        with gr.Row():
            with gr.Column(scale=1):
                image = friendly_upload_errors(gr.Image(
                    label="Image", type="filepath", image_mode=None, sources=["upload", "clipboard"], height=420,
                    elem_id="input-image"))
                obj = gr.Textbox(label="Object", placeholder="e.g. red circle", max_lines=1, elem_id="object")
                max_objects = gr.Number(label="Max objects", value=min(DEFAULT_MAX_OBJECTS, limit), precision=0,
                                        minimum=1, maximum=limit, elem_id="max-objects")
                with gr.Row():
                    detect_btn = gr.Button("Detect", variant="primary", elem_id="detect-btn")
                    point_btn = gr.Button("Point", variant="secondary", elem_id="point-btn")
                examples = sample_images(samples)
                if examples:
                    gr.Examples(examples=[[p] for p in examples], inputs=[image], label="Samples", elem_id="samples")
            with gr.Column(scale=1):
                annotated = gr.Image(label="Result", type="pil", format="png", interactive=False, height=420,
                                     elem_id="result-image")
                status = gr.Textbox(label="Status", interactive=False, elem_id="status")
                result = gr.JSON(label="JSON result", elem_id="result-json")
        outputs = [annotated, result, status]
        inputs = [image, obj, max_objects]
        # One concurrency group for every event: up to `concurrency` requests at once, all batched
        # by the shared engine. Stable API names "detect" and "point"; Enter in the object box
        # runs Detect through a private (non-API) event.
        run = dict(inputs=inputs, outputs=outputs, concurrency_limit=concurrency, concurrency_id="engine")
        for btn, task in ((detect_btn, "detect"), (point_btn, "point")):
            btn.click(make_handler(engine, task, max_objects_limit=limit), api_name=task, **run)
        obj.submit(make_handler(engine, "detect", max_objects_limit=limit), api_name="detect_enter",
                   api_visibility="private", **run)
    demo.queue(default_concurrency_limit=concurrency)
    return demo
