"""`python -m app.serve`: the Moondream HTTP API over one shared, batching engine.

    python -m app.serve [--host 127.0.0.1] [--port 2020] [--weights DIR|ID] [--device auto] [--dtype auto]
                        [--api-key KEY] [--max-batch 16] [--max-queue 256] [--prefill-wait 2] [--prefill-gather 8]
                        [--timeout 300]
                        [--max-body-mb 32] [--image-cache-mb 256] [--http-workers auto] [--engine-thread]
                        [--ray [--replicas N] [--gpus-per-replica G] [--address ADDR]]

Existing code written for the official `moondream` client runs unchanged against it:

    import moondream as md
    model = md.vl(endpoint="http://127.0.0.1:2020/v1")
    model.detect(image, "car")["objects"]

Endpoints (JSON POST under /v1, the client's wire format): `/detect` and `/point` (`object`,
`image_url` as a data URL, `settings.max_objects`), `/query` (`question`) and `/caption`
(`length`), streamed as server-sent events when `stream` is true, `/chat/completions` (the
OpenAI shape: one image and one question), plus `/health` and
`/metrics` (Prometheus text). A query's answer can be shaped through `settings`:
`{"json_schema": {...}}` (the parsed JSON comes back), `{"regex": "..."}` or `{"choices": [...]}`. Errors are one line, `{"error": "..."}`: 400 a bad request (image, object, settings),
401 a wrong or missing API key (`X-Moondream-Auth` or `Authorization: Bearer`, compared in
constant time), 413 a body over `--max-body-mb`, 429 the engine's queue is full (`Retry-After`),
503 the engine process stopped, 504 the request missed its deadline (`--timeout`). A client that disconnects cancels its request:
the engine frees its row. The engine's step loop runs in a child process (`app.serve_process`), so the
server's Python does not compete with it for the GIL; `--engine-thread` runs it in a thread of the
server's process instead. `--http-workers N` answers HTTP from N server processes on the one port,
each over its own pipe to the engine process (`app.serve_workers`); by default ("auto") 4 where the
engine runs on CUDA on a host with 8 cores or more, else 1. The server binds 127.0.0.1 unless `--host` says otherwise and sends no
CORS headers.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hmac
import json
import logging
import socket
import sys
import time
from contextlib import aclosing
from dataclasses import dataclass

import orjson
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.common import one_line, warm_up
from app.serve_images import BadImageURL, ImageCache
from app.serve_metrics import Metrics
from app.serve_process import EngineGone, EngineProcess, ImageRefs
from engine.model.pretrained import add_model_arguments
from engine import (DEFAULT_MAX_OBJECTS, OBJECT_SKILLS, Cancelled, Choices, DeadlineExceeded, Engine, EngineBusy,
                    EngineConfig, ImageError, JsonSchema, Regex, RequestError)

log = logging.getLogger("app.serve")

# `--http-workers auto`: the server processes measured on an H200 host (README, "Session 32"), and the
# cores a host needs for them beside the engine process.
AUTO_HTTP_WORKERS = 4
AUTO_HTTP_WORKERS_CORES = 8


class FastJSONResponse(JSONResponse):
    """A JSONResponse encoded by orjson (the standard library's encoder for what orjson refuses)."""

    def render(self, content) -> bytes:
        return dumps(content)


def dumps(content) -> bytes:
    try:
        return orjson.dumps(content)
    except TypeError:  # e.g. an integer beyond 64 bits in a schema answer
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()


def sse(content) -> str:
    """One server-sent event carrying `content` as JSON."""
    return f"data: {dumps(content).decode()}\n\n"


class HTTPError(Exception):
    """An answer with a status and a one-line reason."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class ServeLimits:
    max_body_bytes: int = 32 << 20   # base64 images are 4/3 of the file
    timeout: float = 300.0           # seconds per request, enforced by the engine
    retry_after: int = 1             # seconds, with 429
    image_cache_bytes: int = 256 << 20  # decoded pixels kept (a repeated image skips its decode)


def settings_of(body: dict) -> dict:
    settings = body.get("settings") or {}
    if not isinstance(settings, dict):
        raise HTTPError(400, "settings must be a JSON object, e.g. {\"max_objects\": 10}")
    return settings


def answer_format(settings: dict):
    """mdpipe's extras, reachable from the unchanged client through `settings`: `json_schema`
    (an object), `regex` (text) or `choices` (a list) shape a query's answer."""
    given = [k for k in ("json_schema", "regex", "choices") if settings.get(k) is not None]
    if len(given) > 1:
        raise HTTPError(400, f"settings may hold one of json_schema, regex and choices, not {' and '.join(given)}")
    try:
        if "json_schema" in given:
            return JsonSchema(settings["json_schema"])
        if "regex" in given:
            if not isinstance(settings["regex"], str):
                raise HTTPError(400, "settings.regex must be text")
            return Regex(settings["regex"])
        if "choices" in given:
            return Choices(settings["choices"])
    except RequestError as e:
        raise HTTPError(400, one_line(e)) from None
    return None


def chat_question(messages: object) -> tuple[str, object]:
    """(question, image data URL) of OpenAI-style `messages`: the last user message's text, and
    the last image sent in any user message up to it."""
    if not isinstance(messages, list) or not messages:
        raise HTTPError(400, "messages must be a non-empty list of {role, content} objects")
    question, image = None, None
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(parts, list):
            raise HTTPError(400, "a message's content must be text or a list of parts")
        texts = []
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, dict) and part.get("type") == "image_url":
                url = part.get("image_url")
                image = url.get("url") if isinstance(url, dict) else url
        question = " ".join(texts)
    if question is None:
        raise HTTPError(400, "messages hold no user message; send one with the question and an image_url part")
    return question, image


def http_error(e: Exception, limits: ServeLimits) -> HTTPError:
    """The answer to an engine's (or an image's) error: its status and one-line reason; anything
    else is raised again (a 500, its traceback in the log)."""
    if isinstance(e, HTTPError):
        return e
    if isinstance(e, BadImageURL):
        return HTTPError(400, str(e))
    if isinstance(e, (ImageError, RequestError)):
        return HTTPError(400, one_line(e))
    if isinstance(e, EngineBusy):
        return HTTPError(429, one_line(e), {"Retry-After": str(limits.retry_after)})
    if isinstance(e, EngineGone):
        return HTTPError(503, one_line(e))
    if isinstance(e, DeadlineExceeded):
        return HTTPError(504, f"the request took longer than {limits.timeout:g} s and was stopped")
    if isinstance(e, Cancelled):
        return HTTPError(499, "the request was cancelled")
    raise e


class MoondreamAPI:
    """The request handlers; one instance per server, over one started engine."""

    def __init__(self, engine: Engine, *, api_key: str | None = None, limits: ServeLimits = ServeLimits(),
                 images=None) -> None:
        """`images` turns a request's `image_url` into what `engine.submit` takes (default: an
        `ImageCache` of decoded images; `app.serve_process.ImageRefs` for an `EngineProcess`)."""
        self.engine, self.limits = engine, limits
        self.api_key = api_key.encode() if api_key else None
        self.metrics = Metrics(engine)
        process = isinstance(engine, EngineProcess)
        if images is None:
            images = ImageRefs(engine) if process else ImageCache(limits.image_cache_bytes)
        self.images = images
        # Queues a request without blocking: Engine.submit does, given a decoded image; a proxy is told not to wait.
        self.enqueue = functools.partial(engine.submit, wait=False) if process else engine.submit
        # With the engine in a child a new image needs no decoding here either (the child decodes it).
        self.decodes_here = not process

    # ---- plumbing -----------------------------------------------------------------------
    def check_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("x-moondream-auth", "")
        bearer = request.headers.get("authorization", "")
        if not given and bearer.lower().startswith("bearer "):
            given = bearer[7:].strip()
        if not hmac.compare_digest(given.encode(), self.api_key):
            raise HTTPError(401, "missing or wrong API key: send it in the X-Moondream-Auth header")

    async def read_json(self, request: Request) -> dict:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limits.max_body_bytes:
            raise HTTPError(413, self.too_large())
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.limits.max_body_bytes:
                raise HTTPError(413, self.too_large())
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise HTTPError(400, "the request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise HTTPError(400, "the request body must be a JSON object")
        return data

    def too_large(self) -> str:
        return (f"the request is larger than {self.limits.max_body_bytes / (1 << 20):g} MiB; "
                "send a smaller image (the server's --max-body-mb sets the limit)")

    async def submit(self, image_url: object, skill: str, obj: object, **options):
        """Queue a request. A point/detect on an image the engine side already holds, or on any image
        when the engine runs in a child (which decodes it), is queued from the event loop itself
        (hashing the data URL, and for a new image its base64 decoding, is all it costs; hashlib
        releases the GIL) without waiting for the child's acceptance: a refusal arrives as the result.
        Anything else (an image to decode here, a grammar to compile) goes in one worker-thread hop."""
        try:
            image, resolve = self.images.lookup(image_url)
            if skill in OBJECT_SKILLS and (image is not None or not self.decodes_here):
                return self.enqueue(image if image is not None else resolve(), skill, obj,
                                    timeout=self.limits.timeout, **options)
            return await asyncio.to_thread(self.submit_now, resolve, skill, obj, **options)
        except Exception as e:
            raise http_error(e, self.limits) from None

    def submit_now(self, resolve, skill: str, obj: object, **options):
        return self.engine.submit(resolve(), skill, obj, timeout=self.limits.timeout, **options)

    async def result(self, request: Request, handle) -> dict:
        """The request's result, or its cancellation when the client goes away first."""
        done = asyncio.wrap_future(handle.future)
        gone = asyncio.ensure_future(self.disconnected(request))
        try:
            await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not done.done():
            handle.cancel()
            raise HTTPError(499, "the client closed the connection; the request was cancelled")
        try:
            return done.result()
        except Exception as e:   # a refusal arrives here too when the request was queued without waiting
            raise http_error(e, self.limits) from None

    @staticmethod
    async def disconnected(request: Request) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    def endpoint(self, name: str, handler):
        async def route(request: Request) -> Response:
            start = time.perf_counter()
            try:
                self.check_key(request)
                response = await handler(request)
            except HTTPError as e:
                response = FastJSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)
            except Exception as e:  # an engine failure: one line for the client, the traceback in the log
                log.exception("%s failed", name)
                response = FastJSONResponse({"error": f"the request failed ({type(e).__name__}: {one_line(e)[:200]})"},
                                        status_code=500)
            self.metrics.observe(name, response.status_code, time.perf_counter() - start)
            return response
        return route

    # ---- skills -------------------------------------------------------------------------
    async def spatial(self, request: Request, skill: str) -> Response:
        marks = [time.monotonic()]
        body = await self.read_json(request)
        marks.append(time.monotonic())
        image = body.get("image_url")
        max_objects = settings_of(body).get("max_objects", DEFAULT_MAX_OBJECTS)
        handle = await self.submit(image, skill, body.get("object"), max_objects=max_objects)
        marks.append(time.monotonic())
        result = await self.result(request, handle)
        marks.append(time.monotonic())
        response = FastJSONResponse(result)
        marks.append(time.monotonic())
        seq = getattr(handle, "seq", None)  # an in-process engine on the default clock says when it finished
        same_clock = getattr(self.engine, "clock", None) is time.monotonic
        self.metrics.observe_phases(marks, seq.finished_at if seq is not None and same_clock else None)
        return response

    async def detect(self, request: Request) -> Response:
        return await self.spatial(request, "detect")

    async def point(self, request: Request) -> Response:
        return await self.spatial(request, "point")

    async def text(self, request: Request, skill: str) -> Response:
        """query / caption: the whole answer, or server-sent events `data: {"chunk": ...}` ending
        with `data: {"completed": true}` when the client asks to stream."""
        body = await self.read_json(request)
        image = body.get("image_url")
        settings = settings_of(body)
        options = {"max_tokens": settings.get("max_tokens")}
        if skill == "query":
            if body.get("spatial_refs"):
                raise HTTPError(400, "spatial_refs are not supported by this server; ask without them")
            obj, options["answer"] = body.get("question"), answer_format(settings)
        else:
            obj, options["length"] = "", body.get("length", "normal")
        if not body.get("stream"):
            handle = await self.submit(image, skill, obj, **options)
            return FastJSONResponse(await self.result(request, handle))
        handle, chunks = await self.stream(image, skill, obj, **options)

        async def events():
            async with aclosing(chunks):  # closed with the response: a client gone mid-stream cancels
                async for chunk in chunks:
                    yield sse({"chunk": chunk})
            error = handle.future.exception()
            if error is not None:
                yield sse({"error": one_line(error)})
            yield sse({"completed": True})

        return StreamingResponse(events(), media_type="text/event-stream")

    async def stream(self, image: object, skill: str, obj: str, **options):
        """Submit a text request whose chunks arrive as the engine commits them: (handle, async
        iterator of chunks). A consumer that stops early (the client went away) cancels the request."""
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        handle = await self.submit(image, skill, obj,
                                   on_object=lambda chunk: loop.call_soon_threadsafe(queue.put_nowait, chunk),
                                   **options)
        handle.future.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))

        async def chunks():
            try:
                while (chunk := await queue.get()) is not None:
                    yield chunk
            finally:
                if not handle.future.done():
                    handle.cancel()

        return handle, chunks()

    async def query(self, request: Request) -> Response:
        return await self.text(request, "query")

    async def chat(self, request: Request) -> Response:
        """OpenAI chat completions, one image and one question: the last user message's text is
        asked of its (or an earlier message's) image; the answer is the assistant message."""
        body = await self.read_json(request)
        question, image = chat_question(body.get("messages"))
        options = {"max_tokens": body.get("max_completion_tokens") or body.get("max_tokens")}
        model = str(body.get("model") or "mdpipe")
        created, ident = int(time.time()), f"chatcmpl-{time.monotonic_ns():x}"
        if not body.get("stream"):
            handle = await self.submit(image, "query", question, **options)
            answer = (await self.result(request, handle))["answer"]
            content = answer if isinstance(answer, str) else json.dumps(answer)
            return FastJSONResponse({"id": ident, "object": "chat.completion", "created": created, "model": model,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": content}}]})
        handle, chunks = await self.stream(image, "query", question, **options)

        def event(delta: dict, finish: str | None = None) -> str:
            return sse({"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        async def events():
            yield event({"role": "assistant"})
            async with aclosing(chunks):
                async for chunk in chunks:
                    yield event({"content": chunk})
            yield event({}, "error" if handle.future.exception() is not None else "stop")
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def caption(self, request: Request) -> Response:
        return await self.text(request, "caption")

    # ---- operations ---------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if isinstance(self.engine, EngineProcess) and self.engine.gone is not None:
            return FastJSONResponse({"status": "down", "error": self.engine.gone}, status_code=503)
        return FastJSONResponse({"status": "ok", "queued": self.engine.queued(), "running": self.engine.pools()["running"]})

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    def routes(self) -> list[Route]:
        api = [("detect", self.detect), ("point", self.point), ("query", self.query), ("caption", self.caption),
               ("chat/completions", self.chat)]
        routes = [Route(f"/v1/{name}", self.endpoint(name, handler), methods=["POST"]) for name, handler in api]
        routes += [Route("/health", self.health, methods=["GET"]), Route("/v1/health", self.health, methods=["GET"]),
                   Route("/metrics", self.metrics_text, methods=["GET"])]
        return routes


def build_app(engine, *, api_key: str | None = None, limits: ServeLimits = ServeLimits(), images=None) -> Starlette:
    """The ASGI app over a started engine or an `EngineProcess` (tests mount it in-process)."""
    return Starlette(routes=MoondreamAPI(engine, api_key=api_key, limits=limits, images=images).routes())


def http_workers_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number or auto, got {text!r}") from None


def http_workers(args: argparse.Namespace, *, cores: int, cuda: bool) -> int:
    """The HTTP server processes to start: `--http-workers N` as given; "auto" gives AUTO_HTTP_WORKERS
    where the engine runs on CUDA (`cuda`) in its own process on a host with AUTO_HTTP_WORKERS_CORES
    or more `cores` and SO_REUSEPORT, else 1 (each worker is an interpreter of its own, a few hundred MB)."""
    if args.http_workers != "auto":
        return args.http_workers
    fits = args.engine_process and cuda and cores >= AUTO_HTTP_WORKERS_CORES and hasattr(socket, "SO_REUSEPORT")
    return AUTO_HTTP_WORKERS if fits else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app.serve", description="The Moondream HTTP API (detect, point, query, caption, chat).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=2020, help="port (default 2020, the moondream client's local port)")
    add_model_arguments(p)
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require this key (X-Moondream-Auth or Authorization: Bearer); also read from $MDPIPE_API_KEY")
    p.add_argument("--max-batch", type=int, default=16, help="most requests decoded together (default 16)")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests before HTTP 429 (default 256)")
    p.add_argument("--prefill-wait", type=int, default=EngineConfig.prefill_wait, metavar="STEPS",
                   help="decode steps a request on a cached image may wait, while others decode, to share its "
                        f"prefill step (default {EngineConfig.prefill_wait}; 0: none)")
    p.add_argument("--prefill-gather", type=int, default=EngineConfig.prefill_gather, metavar="N",
                   help="waiting requests on cached images that end that wait at once "
                        f"(default {EngineConfig.prefill_gather})")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="deadline of one request")
    p.add_argument("--max-body-mb", type=float, default=32.0, metavar="MB", help="largest request body (default 32)")
    p.add_argument("--image-cache-mb", type=float, default=256.0, metavar="MB",
                   help="decoded images kept, so a repeated image skips its decode (default 256 MB; 0: none)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--engine-process", dest="engine_process", action="store_true", default=None,
                       help="run the engine's step loop in its own process, so the server's Python leaves it alone "
                            "(the default; not with --ray, whose replicas are processes of their own)")
    where.add_argument("--engine-thread", dest="engine_process", action="store_false",
                       help="run the engine's step loop in a thread of the server's process instead")
    p.add_argument("--http-workers", type=http_workers_arg, default="auto", metavar="N|auto",
                   help="server processes answering HTTP on the one port, each with its own pipe to the engine "
                        f"process (default auto: {AUTO_HTTP_WORKERS} when the engine runs on CUDA in its own process on "
                        f"a host with {AUTO_HTTP_WORKERS_CORES} or more cores, else 1)")
    p.add_argument("--no-repeat-guard", dest="repeat_guard", action="store_false",
                   help="keep near-duplicate objects (benchmarks on random weights: engine.loadbench --url)")
    ray = p.add_argument_group("scale-out with Ray Serve (pip install -e .[ray])")
    ray.add_argument("--ray", action="store_true", help="serve engine replicas behind Ray Serve")
    ray.add_argument("--replicas", type=int, default=1, help="engine replicas (default 1; one per GPU)")
    ray.add_argument("--gpus-per-replica", type=float, default=None, metavar="G",
                     help="GPUs per replica (default 1 with --device cuda, else 0)")
    ray.add_argument("--address", default=None, metavar="ADDR", help="join this Ray cluster (default: start a local one)")
    args = p.parse_args(argv)
    if args.ray and args.engine_process:
        p.error("--engine-process does not combine with --ray (each Ray replica is already a process of its own)")
    if args.engine_process is None:   # the default: a child process, unless Ray runs the replicas
        args.engine_process = not args.ray
    if args.replicas < 1:
        p.error(f"--replicas must be at least 1, got {args.replicas}")
    if args.http_workers == "auto":
        pass   # resolved by `http_workers` once the device is known
    elif not 1 <= args.http_workers <= 64:
        p.error(f"--http-workers must be between 1 and 64, got {args.http_workers}")
    elif args.http_workers > 1 and not args.engine_process:
        p.error("--http-workers needs the engine in its own process (not with --engine-thread or --ray)")
    elif args.http_workers > 1 and not hasattr(socket, "SO_REUSEPORT"):
        p.error("--http-workers needs SO_REUSEPORT, which this system lacks; serve with --http-workers 1")
    if not 0 < args.port < 65536:
        p.error(f"--port must be between 1 and 65535, got {args.port}")
    if not 0 <= args.image_cache_mb <= 1 << 20:
        p.error(f"--image-cache-mb must be between 0 and 1048576, got {args.image_cache_mb:g}")
    for name in ("max_batch", "max_queue"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.prefill_wait < 0:
        p.error(f"--prefill-wait must be 0 or more, got {args.prefill_wait}")
    if args.prefill_gather < 1:
        p.error(f"--prefill-gather must be at least 1, got {args.prefill_gather}")
    if not 0 < args.timeout <= 24 * 3600:
        p.error(f"--timeout must be more than 0 and at most 86400 seconds, got {args.timeout:g}")
    if not 0 < args.max_body_mb <= 1024:
        p.error(f"--max-body-mb must be more than 0 and at most 1024, got {args.max_body_mb:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    import importlib.util
    import os

    import uvicorn

    from app.common import LOAD_ERRORS, open_engine, startup_line

    args = parse_args(argv)
    api_key = args.api_key or os.environ.get("MDPIPE_API_KEY") or None
    limits = ServeLimits(max_body_bytes=int(args.max_body_mb * (1 << 20)), timeout=args.timeout,
                         image_cache_bytes=int(args.image_cache_mb * (1 << 20)))
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}: reachable from the network"
              + ("" if api_key else "; pass --api-key to require a key"), file=sys.stderr)
    if args.ray:
        from app.serve_ray import run_ray
        return run_ray(args, api_key, limits)
    options = dict(tokenizer=args.tokenizer, device=args.device, dtype=args.dtype, max_batch=args.max_batch,
                   max_queue=args.max_queue, prefill_wait=args.prefill_wait, prefill_gather=args.prefill_gather,
                   repeat_guard=args.repeat_guard,
                   progress=sys.stderr.isatty())
    from engine.model.device import DeviceError, resolve_device

    try:
        workers = http_workers(args, cores=os.cpu_count() or 1, cuda=resolve_device(args.device).type == "cuda")
    except DeviceError:   # a device this machine lacks: loading the engine below says so, in one line
        workers = 1 if args.http_workers == "auto" else args.http_workers
    try:
        if args.engine_process:
            engine = EngineProcess.open(weights=args.weights, image_cache_bytes=limits.image_cache_bytes,
                                        links=1 if workers == 1 else workers + 1, **options)
            startup = f"{engine.startup} (engine process {engine.process.pid})"
        else:
            engine = open_engine(args.weights, **options)
            startup = startup_line(engine)
    except LOAD_ERRORS as e:
        print(f"error: cannot load the model: {one_line(e)}", file=sys.stderr)
        return 2
    except EngineGone as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(startup, file=sys.stderr, flush=True)
    for fast, slow in (("httptools", "pure-Python HTTP parsing"), ("uvloop", "the asyncio event loop")):
        if importlib.util.find_spec(fast) is None:
            print(f"warning: {fast} is not installed: uvicorn falls back to {slow} (slower); pip install {fast}",
                  file=sys.stderr)
    if not args.engine_process:
        warm_up(engine)
        engine.start()
    if workers > 1:
        from app.serve_workers import serve_workers
        try:
            return serve_workers(engine, args.host, args.port, api_key, limits)
        finally:
            engine.close()
    try:
        uvicorn.run(build_app(engine, api_key=api_key, limits=limits), host=args.host, port=args.port,
                    log_level="warning")
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
