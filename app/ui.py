"""The Gradio 6 Blocks UI: upload an image (or pick a sample), type an object, Point or Detect;
or ask a question (Ask, with an answer format: free text, yes / no, number, JSON schema) or Caption.

All sessions share one started :class:`~engine.serving.engine.Engine`; the two events run
concurrently (one concurrency group, `concurrency` requests at a time), so requests from
several users are batched together by the engine.

API (for ``gradio_client``), both ``(image filepath, object text, max_objects) ->
(annotated image, JSON dict, status text)``:

    client.predict(handle_file("cat.jpg"), "cat", 10, api_name="/detect")
    client.predict(handle_file("cat.jpg"), "cat eye", None, api_name="/point")

Ask and Caption: ``(image filepath, question, answer format, schema text, caption length) ->
(image, JSON dict, status text)``, API names ``/ask`` and ``/caption``; the JSON dict holds
``answer`` (the parsed value for a JSON schema) or ``caption``, and ``ms``.

The JSON dict of Detect/Point is the engine's result (``objects`` with normalised boxes, or ``points``)
plus ``task``, ``object``, ``width``, ``height`` (pixels) and ``ms``. Bad input (no image,
an unreadable file, an empty object, max_objects out of range), a full engine queue ("busy")
and a missed deadline raise ``gr.Error`` with a one-line message (never a traceback); the
client sees it as ``AppError``.

Serve it with :func:`launch`, which applies the safe defaults: uploads over
``MAX_UPLOAD_BYTES`` refused by Gradio (HTTP 413), no extra ``allowed_paths`` (Gradio serves
only its own upload/cache folders), optional password (``auth``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from app.common import IMAGE_SUFFIXES  # noqa: E402
from app.draw import draw_result  # noqa: E402
from engine import DEFAULT_MAX_OBJECTS, MAX_OBJECTS_LIMIT, DeadlineExceeded, Engine, EngineBusy, ImageError, RequestError, load_image, validate_request  # noqa: E402
from engine.serving.answers import PRESET_FORMATS, JsonSchema, answer_grammar  # noqa: E402

__all__ = ["build_demo", "launch", "sample_images", "friendly_upload_errors", "DEFAULT_SAMPLES", "IMAGE_SUFFIXES",
           "MAX_UPLOAD_BYTES", "REQUEST_TIMEOUT_S", "QUEUE_SIZE"]

DEFAULT_SAMPLES = Path(__file__).resolve().parent.parent / "assets" / "samples"
#: Per-request deadline (seconds): the engine stops a request that is not done by then.
REQUEST_TIMEOUT_S = 300.0
#: Largest upload Gradio accepts (bytes); larger ones are refused before any handler runs.
MAX_UPLOAD_BYTES = 25 * 1024 * 1024
#: Most events Gradio keeps waiting for a free worker; beyond that a client is told the queue is full.
QUEUE_SIZE = 256
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

log = logging.getLogger(__name__)

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
            reason = type(e).__name__
            path = getattr(payload, "path", None)
            if path:  # our loader names the problem precisely (too large, truncated, not an image, ...)
                try:
                    load_image(path)
                except ImageError as err:
                    reason = _reason(err, path)
                except Exception:  # noqa: BLE001 - keep the generic reason
                    pass
            raise gr.Error(f"Cannot read {name!r} as an image ({reason}); upload a JPEG, PNG, WebP, "
                           f"BMP, GIF or TIFF file.", print_exception=False) from None

    component.preprocess = preprocess
    return component


def friendly_number_errors(component: gr.Number, limit: int) -> gr.Number:
    """Gradio's own bounds messages stay; a value that is not a finite number gets a clear gr.Error
    (gr.Number would otherwise fail with a TypeError/ValueError/OverflowError of its own)."""
    original = component.preprocess

    def preprocess(payload):
        if isinstance(payload, float) and payload == payload and payload not in (float("inf"), float("-inf")) \
                and not payload.is_integer():  # gr.Number(precision=0) would round it silently
            raise _user_error(f"Max objects must be a whole number between 1 and {limit}, got {payload!r}.")
        try:
            return original(payload)
        except gr.Error:
            raise
        except Exception:
            raise _user_error(f"Max objects must be a whole number between 1 and {limit}, got {payload!r:.40}."
                              ) from None

    component.preprocess = preprocess
    return component


def _sentence(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text[:1].upper() + text[1:]


def _reason(error: ImageError, path: str) -> str:
    """The loader's reason without the server-side path (uploads live in Gradio's temp folder)."""
    text = " ".join(str(error).split())
    prefix = f"cannot read image {str(path)!r}: "
    return text[len(prefix):] if text.startswith(prefix) else text.replace(str(path), Path(path).name)


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
    """The event function for one task: (image path, object, max_objects) -> (image, dict, status).

    `timeout` is the request's deadline inside the engine (DeadlineExceeded -> a clear gr.Error).
    Every failure becomes a one-line gr.Error; an unexpected one is also logged with its traceback.
    """

    def handler(image_path, obj, max_objects):
        try:
            return serve(image_path, obj, max_objects)
        except gr.Error:
            raise
        except Exception as e:  # a bug or resource failure: one line for the user, the traceback in the log
            log.exception("%s request failed", task)
            raise _user_error(f"The request failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                              "try again.") from None

    def serve(image_path, obj, max_objects):
        if not image_path:
            raise _user_error("Upload an image (or pick a sample) first.")
        if not isinstance(obj, str) or not obj.strip():
            raise _user_error("Type the object to look for, e.g. 'red circle'.")
        limit = _max_objects(max_objects, max_objects_limit)
        try:
            text, limit = validate_request(task, obj, limit)  # the cleaned text is what is searched and shown
        except RequestError as e:
            raise _user_error(_sentence(e)) from None
        try:
            picture = load_image(image_path)
        except ImageError as e:
            raise _user_error(f"Cannot use this image: {_reason(e, image_path)}") from None
        start = time.perf_counter()
        result = _answer(engine, timeout, picture, task, text, max_objects=limit)
        ms = (time.perf_counter() - start) * 1000.0
        key = "objects" if task == "detect" else "points"
        found = result.get(key, [])
        annotated = draw_result(picture, result, text)
        noun = ("object" if task == "detect" else "point") + ("" if len(found) == 1 else "s")
        status = f"{task} {text!r}: {len(found)} {noun} in {ms:.0f} ms ({picture.width}\u00d7{picture.height} px)"
        payload = {"task": task, "object": text, "width": picture.width, "height": picture.height,
                   key: found, "ms": round(ms, 1)}
        return annotated, payload, status

    handler.__name__ = task
    return handler


def _answer(engine: Engine, timeout: float, picture, task: str, text: str, **options) -> dict:
    """Submit one request and wait for its result; every failure becomes a one-line gr.Error."""
    try:
        handle = engine.submit(picture, task, text, timeout=timeout, **options)
    except RequestError as e:
        raise _user_error(_sentence(e)) from None
    except EngineBusy:
        raise _user_error("The server is busy (its request queue is full); try again in a few seconds.") from None
    too_slow = f"The request took longer than {timeout:g} s and was stopped; try again."
    try:
        return handle.result(timeout=timeout + 30.0)  # backstop: the engine enforces the deadline itself
    except (FutureTimeout, DeadlineExceeded):
        handle.cancel()
        raise _user_error(too_slow) from None
    except RequestError as e:
        raise _user_error(_sentence(e)) from None
    except Exception as e:  # engine failure: one line, no traceback in the UI
        raise _user_error(f"The engine failed on this request: {' '.join(str(e).split())}") from None


def make_text_handler(engine: Engine, task: str, *, timeout: float = REQUEST_TIMEOUT_S):
    """The event function of Ask / Caption: (image path, question, answer format, schema text,
    caption length) -> (image, dict, status)."""

    def handler(image_path, question, answer_format, schema_text, length):
        try:
            return serve(image_path, question, answer_format, schema_text, length)
        except gr.Error:
            raise
        except Exception as e:  # a bug or resource failure: one line for the user, the traceback in the log
            log.exception("%s request failed", task)
            raise _user_error(f"The request failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                              "try again.") from None

    def serve(image_path, question, answer_format, schema_text, length):
        if not image_path:
            raise _user_error("Upload an image (or pick a sample) first.")
        if task == "query":
            if not isinstance(question, str) or not question.strip():
                raise _user_error("Type a question, e.g. 'How many red circles are there?'.")
            if answer_format == "JSON schema":
                if not isinstance(schema_text, str) or not schema_text.strip():
                    raise _user_error("Paste a JSON schema into the schema box, or choose another answer format.")
                try:
                    fmt = JsonSchema(schema_text)
                    answer_grammar(fmt)
                except RequestError as e:
                    raise _user_error(_sentence(e)) from None
            elif answer_format in PRESET_FORMATS:
                fmt = PRESET_FORMATS[answer_format]
            else:
                raise _user_error(f"Choose an answer format: {', '.join([*PRESET_FORMATS, 'JSON schema'])}.")
            options = {"answer": fmt}
        else:
            question, options = "", {"length": length if length in ("short", "normal", "long") else "normal"}
        try:
            picture = load_image(image_path)
        except ImageError as e:
            raise _user_error(f"Cannot use this image: {_reason(e, image_path)}") from None
        start = time.perf_counter()
        result = _answer(engine, timeout, picture, task, question, **options)
        ms = (time.perf_counter() - start) * 1000.0
        key = "answer" if task == "query" else "caption"
        shown = json.dumps(result[key]) if not isinstance(result[key], str) else result[key]
        status = f"{key}: {shown[:300]} ({ms:.0f} ms)"
        payload = {"task": task, **({"question": question} if task == "query" else options), key: result[key],
                   "ms": round(ms, 1)}
        return picture, payload, status

    handler.__name__ = "ask" if task == "query" else "caption"
    return handler


def build_demo(engine: Engine, *, samples: str | Path | None = DEFAULT_SAMPLES, concurrency: int = 32,
               max_objects_limit: int = MAX_OBJECTS_LIMIT, title: str = "Moondream point & detect",
               timeout: float = REQUEST_TIMEOUT_S, queue_size: int | None = QUEUE_SIZE) -> gr.Blocks:
    """The Blocks app around a started engine (the caller owns and closes the engine).

    `max_objects_limit` caps the "Max objects" input; size the engine for it
    (app.common.open_engine(..., max_objects=max_objects_limit)). `timeout` is each request's
    deadline in seconds; `queue_size` the most events Gradio keeps waiting (None: unbounded).
    Serve the result with :func:`launch`.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
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
                max_objects = friendly_number_errors(gr.Number(
                    label="Max objects", value=min(DEFAULT_MAX_OBJECTS, limit), precision=0, minimum=1, maximum=limit,
                    elem_id="max-objects"), limit)
                with gr.Row():
                    detect_btn = gr.Button("Detect", variant="primary", elem_id="detect-btn")
                    point_btn = gr.Button("Point", variant="secondary", elem_id="point-btn")
                question = gr.Textbox(label="Question", placeholder="e.g. How many red circles are there?",
                                      max_lines=2, elem_id="question")
                answer_format = gr.Radio([*PRESET_FORMATS, "JSON schema"], value="free text", label="Answer format",
                                         elem_id="answer-format")
                schema = gr.Code(label="JSON schema (with 'JSON schema')", language="json", lines=4,
                                 elem_id="schema")
                length = gr.Radio(["short", "normal", "long"], value="normal", label="Caption length",
                                  elem_id="caption-length")
                with gr.Row():
                    ask_btn = gr.Button("Ask", variant="primary", elem_id="ask-btn")
                    caption_btn = gr.Button("Caption", variant="secondary", elem_id="caption-btn")
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
            btn.click(make_handler(engine, task, max_objects_limit=limit, timeout=timeout), api_name=task, **run)
        obj.submit(make_handler(engine, "detect", max_objects_limit=limit, timeout=timeout), api_name="detect_enter",
                   api_visibility="private", **run)
        ask = dict(run, inputs=[image, question, answer_format, schema, length])
        ask_btn.click(make_text_handler(engine, "query", timeout=timeout), api_name="ask", **ask)
        caption_btn.click(make_text_handler(engine, "caption", timeout=timeout), api_name="caption", **ask)
    demo.queue(default_concurrency_limit=concurrency, max_size=queue_size)
    return demo


def launch(demo: gr.Blocks, *, host: str = "127.0.0.1", port: int | None = None,
           auth: tuple[str, str] | None = None, max_file_size: int | str | None = MAX_UPLOAD_BYTES, **kwargs):
    """`demo.launch` with the safe defaults: this machine only unless `host` says otherwise, uploads
    capped at `max_file_size` bytes (Gradio answers 413), optional (user, password) `auth`, and no
    `allowed_paths`, so Gradio serves files from its own upload/cache folders only.
    Other keyword arguments go to `demo.launch` (prevent_thread_lock, quiet, max_threads, ...)."""
    for key in ("allowed_paths", "share"):
        if kwargs.get(key):
            raise ValueError(f"{key} is not allowed: it would expose files or the UI beyond this server")
        kwargs.pop(key, None)
    kwargs.setdefault("css", CSS)
    kwargs.setdefault("show_error", True)  # gr.Error messages (one line each); never a traceback
    return demo.launch(server_name=host, server_port=port, auth=auth, max_file_size=max_file_size,
                       allowed_paths=[], share=False, **kwargs)
