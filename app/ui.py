"""The Gradio 6 Blocks UI: upload an image (or pick a sample), type an object, Point or Detect;
or ask a question (Ask, with an answer format: free text, yes / no, number, JSON schema) or Caption.

All sessions share one started :class:`~engine.serving.engine.Engine`; the two events run
concurrently (one concurrency group, `concurrency` requests at a time), so requests from
several users are batched together by the engine.

API (for ``gradio_client``), both ``(image filepath, object text, max_objects[, min_score]) ->
(annotated image, JSON dict, status text)`` (min_score defaults to 0):

    client.predict(handle_file("cat.jpg"), "cat", 10, api_name="/detect")
    client.predict(handle_file("cat.jpg"), "cat eye", None, 0.5, api_name="/point")

The JSON dict is the engine's result (``objects`` with normalised boxes, or ``points``, each
with its ``score``; those below min_score left out) plus ``task``, ``object``, ``width``,
``height`` (pixels) and ``ms``. Bad input (no image, an unreadable file, an empty object,
max_objects out of range), a full engine queue ("busy") and a missed deadline raise
``gr.Error`` with a one-line message (never a traceback); the client sees it as ``AppError``.
In the browser the message also stays in the Status box and the previous result is cleared.
The page's "Use via API" panel shows this snippet for the server's own address.

Ask and Caption: ``(image filepath, question, answer format, schema text, caption length) ->
(image, JSON dict, status text)``, API names ``/ask`` and ``/caption``; the JSON dict holds
``answer`` (the parsed value for a JSON schema) or ``caption``, and ``ms``.

Serve it with :func:`launch`, which applies the safe defaults: uploads over
``MAX_UPLOAD_BYTES`` refused by Gradio (HTTP 413), no extra ``allowed_paths`` (Gradio serves
only its own upload/cache folders), optional password (``auth``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402

from app.common import IMAGE_SUFFIXES  # noqa: E402
from app.draw import draw_result  # noqa: E402
from engine import DEFAULT_MAX_OBJECTS, MAX_OBJECTS_LIMIT, DeadlineExceeded, Engine, EngineBusy, ImageError, RequestError, load_image, validate_request  # noqa: E402
from engine.model.vocabulary import Vocabulary  # noqa: E402
from engine.serving.answers import PRESET_FORMATS, JsonSchema, answer_grammar  # noqa: E402

__all__ = ["api_snippet", "build_demo", "launch", "sample_images", "friendly_upload_errors", "DEFAULT_SAMPLES", "IMAGE_SUFFIXES",
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


class Refused:
    """What a component's preprocess hands the event instead of raising: the event function
    raises it as a gr.Error, so it is shown in the Status box like every other error."""

    def __init__(self, message: str) -> None:
        self.message = message


def friendly_upload_errors(component: gr.Image) -> gr.Image:
    """Make an unreadable upload a clear error instead of a generic processing failure.

    (gr.Image opens every upload with PIL before the event runs; a non-image file would fail
    there with a developer-facing message. The method is wrapped on the instance, not in a
    subclass: Gradio writes a .pyi stub next to the source file of every component subclass.)
    """
    original = component.preprocess

    def preprocess(payload):
        try:
            return original(payload)
        except gr.Error as e:
            return Refused(e.message)
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
            return Refused(f"Cannot read {name!r} as an image ({reason}); upload a JPEG, PNG, WebP, "
                           f"BMP, GIF or TIFF file.")

    component.preprocess = preprocess
    return component


def friendly_number_errors(component: gr.Number, limit: int) -> gr.Number:
    """Gradio's own bounds messages stay; a value that is not a finite number gets a clear error
    (gr.Number would otherwise fail with a TypeError/ValueError/OverflowError of its own)."""
    original = component.preprocess
    message = f"Max objects must be a whole number between 1 and {limit}"

    def preprocess(payload):
        if isinstance(payload, float) and payload == payload and payload not in (float("inf"), float("-inf")) \
                and not payload.is_integer():  # gr.Number(precision=0) would round it silently
            return Refused(f"{message}, got {payload!r}.")
        try:
            return original(payload)
        except gr.Error as e:
            return Refused(e.message)
        except Exception:
            return Refused(f"{message}, got {payload!r:.40}.")

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


def _min_score(value) -> float:
    if value is None or value == "":
        return 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _user_error(f"Min score must be a number between 0 and 1, got {value!r:.40}.") from None
    if not 0.0 <= number <= 1.0:
        raise _user_error(f"Min score must be a number between 0 and 1, got {value!r:.40}.")
    return number


def status_line(task: str, text: str, n: int, ms: float, width: int, height: int, among: str = "") -> str:
    noun = ("object" if task == "detect" else "point") + ("" if n == 1 else "s")
    return f"{task} {text!r}: {n} {noun}{among} in {ms:.0f} ms ({width}\u00d7{height} px)"


def filtered(image_path, payload: dict | None, min_score):
    """(annotated image, JSON, status) of a kept result showing only objects scoring >= min_score;
    unchanged outputs (gr.skip) when there is no result."""
    if not payload or not image_path or isinstance(image_path, Refused):
        return gr.skip(), gr.skip(), gr.skip()
    floor = _min_score(min_score)
    key = "objects" if payload["task"] == "detect" else "points"
    kept = [o for o in payload[key] if o["score"] >= floor]
    picture = load_image(image_path)
    among = f" with score >= {floor:g} (of {len(payload[key])})" if floor > 0 else ""
    status = status_line(payload["task"], payload["object"], len(kept), payload["ms"], payload["width"],
                         payload["height"], among)
    return draw_result(picture, {key: kept}, payload["object"]), {**payload, key: kept}, status


def filtered_after_run(image_path, payload: dict | None, min_score):
    """`filtered` after a request: nothing to change (gr.skip) when Min score is 0."""
    if _min_score(min_score) == 0:
        return gr.skip(), gr.skip(), gr.skip()
    return filtered(image_path, payload, min_score)


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


class Failures:
    """The last error message of each browser session, for the Status box: a failed event keeps
    its outputs, so a `.failure()` listener shows the message and clears the old result."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}
        self.lock = threading.Lock()

    def note(self, request: gr.Request | None, task: str, error: gr.Error) -> None:
        key = getattr(request, "session_hash", None)
        if key:
            with self.lock:
                self.last[key] = f"{task} failed: {error.message}"
                while len(self.last) > 4096:  # sessions that never came back
                    self.last.pop(next(iter(self.last)))

    def show(self, request: gr.Request = None):
        """(result image, JSON, status) after a failed request: cleared, cleared, the message."""
        with self.lock:
            message = self.last.pop(getattr(request, "session_hash", None) or "", None)
        return None, None, f"Error: {message}" if message else "Error: the request failed; try again."


failures = Failures()


def make_handler(engine: Engine, task: str, *, max_objects_limit: int = MAX_OBJECTS_LIMIT,
                 timeout: float = REQUEST_TIMEOUT_S):
    """The event function for one task: (image path, object, max_objects) -> (image, dict, status).

    `timeout` is the request's deadline inside the engine (DeadlineExceeded -> a clear gr.Error).
    Every failure becomes a one-line gr.Error (noted for the session's Status box); an
    unexpected one is also logged with its traceback.
    """

    def handler(image_path, obj, max_objects, request: gr.Request = None):
        try:
            return serve(image_path, obj, max_objects, request)
        except gr.Error as e:
            failures.note(request, task, e)
            raise
        except Exception as e:  # a bug or resource failure: one line for the user, the traceback in the log
            log.exception("%s request failed", task)
            error = _user_error(f"The request failed ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                                "try again.")
            failures.note(request, task, error)
            raise error from None

    def serve(image_path, obj, max_objects, request):
        for value in (image_path, max_objects):
            if isinstance(value, Refused):
                raise _user_error(value.message)
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
        status = status_line(task, text, len(found), ms, picture.width, picture.height)
        vocabulary = engine.model_info.vocabulary if engine.model_info is not None else None
        caution = vocabulary_warning(vocabulary, text) if vocabulary is not None else ""
        if caution:
            gr.Warning(caution)
            status += f" \u2014 {caution}"
        payload = {"task": task, "object": text, "width": picture.width, "height": picture.height,
                   key: found, "ms": round(ms, 1)}
        return annotated, payload, status

    handler.__name__ = task
    return handler


def api_snippet(url: str, examples: list[str]) -> str:
    """Markdown: a gradio_client snippet for /detect and /point that runs as shown (a local file)."""
    image = examples[0] if examples else "photo.jpg"
    return (f"Call this server from Python (`pip install gradio_client`); errors arrive as "
            f"`gradio_client.exceptions.AppError` with the same one-line message:\n\n"
            f"```python\nfrom gradio_client import Client, handle_file\n\n"
            f"client = Client({url!r})\nimage = handle_file({image!r})  # any local image file\n"
            f"annotated, result, status = client.predict(image, \"red circle\", 10, api_name=\"/detect\")\n"
            f"print(result[\"objects\"])  # boxes normalised to [0, 1], each with a score\n"
            f"annotated, result, status = client.predict(image, \"red circle\", 10, api_name=\"/point\")\n"
            f"print(result[\"points\"])\n```")


def _page_url(request: gr.Request | None) -> str:
    host = request.headers.get("host") if request is not None else None
    return f"http://{host}/" if host else "http://127.0.0.1:7860/"


def vocabulary_note(vocabulary: Vocabulary) -> str:
    """What a narrow model recognises, for the UI (the embedded model: its shapes and colours)."""
    groups = "; ".join(f"{name}: {', '.join(words)}" for name, words in vocabulary.groups.items())
    return (f"**This demo model only recognises** {groups}. It is trained on synthetic scenes, not photos: "
            "for real images run Moondream 2 (`python -m app --weights vikhyatk/moondream2`).")


def vocabulary_warning(vocabulary: Vocabulary, text: str) -> str:
    """A one-line warning naming the words of `text` this model does not know ("" when none)."""
    unknown = vocabulary.unknown_words(text or "")
    if not unknown:
        return ""
    words = ", ".join(repr(w) for w in unknown)
    return (f"\u26a0\ufe0f {words} {'is' if len(unknown) == 1 else 'are'} outside this model's vocabulary; "
            "it will likely find nothing or the wrong thing.")


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
    info = engine.model_info
    vocabulary = info.vocabulary if info is not None else None
    with gr.Blocks(title=title) as demo:
        gr.Markdown(f"## {title}\nUpload an image or pick a sample, type what to look for, then **Detect** "
                    "(boxes) or **Point** (centres).")
        if info is not None:
            gr.Markdown(f"**Model:** `{info.describe()}`", elem_id="model-line")
        if vocabulary is not None:
            gr.Markdown(vocabulary_note(vocabulary), elem_id="vocabulary")
        with gr.Row():
            with gr.Column(scale=1):
                image = friendly_upload_errors(gr.Image(
                    label="Image", type="filepath", image_mode=None, sources=["upload", "clipboard"], height=420,
                    elem_id="input-image"))
                obj = gr.Textbox(label="Object", placeholder="e.g. red circle", max_lines=1, elem_id="object")
                warning = gr.Markdown("", elem_id="query-warning")
                if vocabulary is not None and vocabulary.examples:
                    gr.Examples(examples=[[q] for q in vocabulary.examples], inputs=[obj], label="Example queries",
                                elem_id="query-examples")
                max_objects = friendly_number_errors(gr.Number(
                    label="Max objects", value=min(DEFAULT_MAX_OBJECTS, limit), precision=0, minimum=1, maximum=limit,
                    elem_id="max-objects"), limit)
                min_score = gr.Slider(0.0, 1.0, value=0.0, step=0.01, label="Min score",
                                      info="hide objects the model is less sure of (score shown on each label)",
                                      elem_id="min-score")
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
                    picks = gr.Dataset(components=[image], samples=[[p] for p in examples], type="index",
                                       label="Samples", elem_id="samples")
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
        # A failed request shows its message in Status and clears the previous result.
        shown = dict(outputs=outputs, api_visibility="private", queue=False, show_progress="hidden")
        # Min score filters what the page shows (the API returns every object with its score):
        # after each result, and again when the slider moves, from the full result kept per session.
        full = gr.State(None)
        refilter = dict(inputs=[image, full, min_score], outputs=[annotated, result, status],
                        api_visibility="private", show_progress="hidden")
        for btn, task in ((detect_btn, "detect"), (point_btn, "point")):
            event = btn.click(make_handler(engine, task, max_objects_limit=limit, timeout=timeout), api_name=task, **run)
            event.failure(failures.show, **shown).then(lambda: None, outputs=[full], api_visibility="private")
            event.success(lambda payload: payload, inputs=[result], outputs=[full], api_visibility="private",
                          queue=False).then(filtered_after_run, **refilter)
        event = obj.submit(make_handler(engine, "detect", max_objects_limit=limit, timeout=timeout),
                           api_name="detect_enter", api_visibility="private", **run)
        event.failure(failures.show, **shown).then(lambda: None, outputs=[full], api_visibility="private")
        event.success(lambda payload: payload, inputs=[result], outputs=[full], api_visibility="private",
                      queue=False).then(filtered_after_run, **refilter)
        min_score.release(filtered, **refilter)
        # Samples: a plain value update (gr.Examples sends a property update, which makes Gradio
        # rebuild the image component per session without the friendly upload errors).
        if examples:
            picks.click(lambda i: load_image(examples[i]), inputs=[picks], outputs=[image], api_visibility="private",
                        queue=False, show_progress="hidden")
        with gr.Accordion("Use via API", open=False, elem_id="api-usage"):
            snippet = gr.Markdown(api_snippet("http://127.0.0.1:7860/", examples), elem_id="api-snippet")

        def page_snippet(request: gr.Request) -> str:
            return api_snippet(_page_url(request), examples)

        demo.load(page_snippet, inputs=None, outputs=[snippet], api_visibility="private", queue=False)
        if vocabulary is not None:  # live, while typing: no engine work, no queue
            obj.change(lambda text: vocabulary_warning(vocabulary, text), inputs=[obj], outputs=[warning],
                       api_visibility="private", queue=False, show_progress="hidden")
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
    kwargs.setdefault("footer_links", ["gradio", "settings"])  # the app shows its own API snippet
    quiet = kwargs.pop("quiet", False)
    block = not kwargs.pop("prevent_thread_lock", False)
    # quiet: Gradio's banner suggests share=True, which this app refuses; print the address instead.
    result = demo.launch(server_name=host, server_port=port, auth=auth, max_file_size=max_file_size,
                         allowed_paths=[], share=False, quiet=True, prevent_thread_lock=True, **kwargs)
    if not quiet:
        print(f"* Running on local URL:  {demo.local_url}", flush=True)
    if block:
        demo.block_thread()
    return result
