"""The load's clients, for `engine.loadbench`: request images, the closed-loop client, and the
HTTP target (`python -m app.serve` in the moondream client's wire format) with its client
processes.

Nothing here imports torch or the engine, so the client processes that `ClientProcesses`
spawns start in a fraction of a second (`python -m engine.loadbench` imports the benchmark
only under `__main__`, so a spawned child does not load it either).
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import multiprocessing
import queue
import re
import threading
import time
import urllib.parse
import urllib.request
from typing import Callable

import numpy as np
from PIL import Image

OBJECT = "car"
class ImageSource:
    """Request images: `same` returns one image; `unique` changes 4 pixels of it per request."""

    def __init__(self, width: int, height: int, mode: str, seed: int) -> None:
        self.base = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
        self.mode = mode
        self.counter = 0
        self.lock = threading.Lock()

    def next(self) -> np.ndarray:
        if self.mode == "same":
            return self.base
        with self.lock:
            self.counter += 1
            n = self.counter
        image = self.base.copy()
        flat = image.reshape(-1, 3)
        for k in range(4):  # a distinct pixel pattern per request (n < 256**4)
            flat[k] = (n >> (8 * k)) & 0xFF
        return image


class MismatchError(RuntimeError):
    pass


class HttpTarget:
    """Requests to `python -m app.serve` over HTTP, in the moondream client's wire format (a JPEG
    data URL, quality 95, encoded in the client thread as the client does); decode and prefill
    steps from the server's /metrics. Over HTTP an answer arrives whole: no time to first object.

    The client's own work is kept small, so that what the rows add to the in-process ones is the
    server's cost: each client thread keeps one HTTP/1.1 connection open (keep-alive, as the
    `requests` library does), and the `same` image's request bodies are encoded once (`keep`)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        parts = urllib.parse.urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SystemExit(f"--url must look like http://HOST:PORT/v1, got {url!r}")
        self.url, self.api_key = url.rstrip("/"), api_key
        self.path = parts.path
        self.connect = lambda: (http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection)(
            parts.hostname, parts.port, timeout=600)
        self.headers = {"Content-Type": "application/json", **({"X-Moondream-Auth": api_key} if api_key else {})}
        self.encoded: dict[int, str] = {}  # one encoding of the `same` image
        self.bodies: dict[tuple[int, str, int], bytes] = {}
        self.local = threading.local()     # each client thread's connection

    def image_url(self, image: np.ndarray) -> str:
        key = id(image)
        if key in self.encoded:
            return self.encoded[key]
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="JPEG", quality=95)
        url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
        return url

    def body(self, image: np.ndarray, task: str, max_objects: int) -> bytes:
        key = (id(image), task, max_objects)
        body = self.bodies.get(key)
        if body is None:
            body = json.dumps({"image_url": self.image_url(image), "object": OBJECT,
                               "settings": {"max_objects": max_objects}}).encode()
            if id(image) in self.encoded:
                self.bodies[key] = body
        return body

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """One POST on this thread's connection; a connection the server closed while it sat idle
        is replaced once."""
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = self.connect()
            try:
                conn.request("POST", path, body, self.headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def send(self, image: np.ndarray, task: str, max_objects: int) -> tuple[dict, float | None]:
        status, data = self.post(f"{self.path}/{task}", self.body(image, task, max_objects))
        if status != 200:
            raise RuntimeError(f"{task} answered HTTP {status}: {data[:300]!r}")
        return json.loads(data), None

    def keep(self, image: np.ndarray) -> None:
        """Encode `image` once, before the timed wave (the `same` mode's one image)."""
        self.encoded[id(image)] = self.image_url(image)

    def metrics(self) -> dict[str, float]:
        root = self.url.removesuffix("/v1")
        with urllib.request.urlopen(f"{root}/metrics", timeout=60) as r:
            return {name: float(value) for name, _, value in
                    (line.partition(" ") for line in r.read().decode().splitlines()) if name.startswith("mdpipe_")}

    def steps(self) -> tuple[int, int]:
        """(decode steps, prefill steps) so far, from the server's /metrics."""
        values = self.metrics()
        try:
            return int(values["mdpipe_decode_steps"]), int(values["mdpipe_prefill_steps"])
        except KeyError:
            raise RuntimeError(f"{self.url.removesuffix('/v1')}/metrics has no mdpipe_decode_steps / "
                               "mdpipe_prefill_steps: is this python -m app.serve?") from None

    def engine_times(self) -> tuple[int, dict[str, tuple[float, float]], int] | None:
        """As `EngineTarget.engine_times`, read from the server's /metrics (mdpipe_engine_*; with
        `--engine-process`, as its child last reported them), or None when the server has none."""
        values = self.metrics()
        if "mdpipe_engine_ticks" not in values:
            return None
        spans: dict[str, list[float]] = {}
        for name, value in values.items():
            m = re.fullmatch(r'mdpipe_engine_verb_seconds\{(.*)\}', name)
            if m:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                spans.setdefault(labels["verb"], [0.0, 0.0])[labels["clock"] == "cpu"] = value
        return (int(values["mdpipe_engine_ticks"]), {k: (w, c) for k, (w, c) in spans.items()},
                int(values["mdpipe_engine_decode_rows"]))

    def graphs(self) -> int | None:
        """CUDA graphs the server's engine holds (mdpipe_cuda_graphs), or None when it does not say."""
        value = self.metrics().get("mdpipe_cuda_graphs")
        return None if value is None else int(value)

    def server_cpu(self) -> tuple[float, float] | None:
        """(CPU seconds of the server's event-loop thread, of its whole process) so far, from its
        /metrics, or None when it does not say."""
        values = self.metrics()
        if "mdpipe_server_loop_cpu_seconds" not in values:
            return None
        return values["mdpipe_server_loop_cpu_seconds"], values["mdpipe_server_process_cpu_seconds"]

    def server_times(self) -> dict[str, float]:
        """{phase: seconds so far} of the server's detect/point requests (app.serve's
        mdpipe_request_phase_seconds): body, submit, wait (its part after the engine finished: wake), reply."""
        prefix = 'mdpipe_request_phase_seconds_total{phase="'
        return {name[len(prefix):-2]: value for name, value in self.metrics().items() if name.startswith(prefix)}


class ClientProcesses:
    """`run_wave`'s clients over HTTP spread over `processes` spawned interpreters (threads in each),
    so that the clients do not queue on one interpreter lock: a server's users are separate programs.
    Each process starts and encodes its `same` image before the wave; `start()` releases them all
    at once and `join()` collects every latency (the `Thread` interface `run_wave` uses)."""

    def __init__(self, target: HttpTarget, images: ImageSource, task: str, clients: int, per_client: int,
                 max_objects: int, think: float, processes: int) -> None:
        if not isinstance(target, HttpTarget):
            raise SystemExit("--client-processes needs --url (the in-process engine's clients share its process)")
        ctx = multiprocessing.get_context("spawn")
        self.go, self.results = ctx.Event(), ctx.Queue()
        shares = [clients // processes + (k < clients % processes) for k in range(processes)]
        first = np.cumsum([0] + shares[:-1]).tolist()
        self.children = [ctx.Process(target=client_process, daemon=True, args=(
            target.url, target.api_key, images.base, images.mode, k, first[k], shares[k], task, per_client, max_objects,
            think, self.go, self.results)) for k in range(processes) if shares[k]]
        for child in self.children:
            child.start()
        for _ in self.children:   # each says "ready" once it can send: before the timed window
            self.receive()
        self.latencies: list[float] = []
        self.errors: list[BaseException] = []
        self.spans: list[tuple[float, float]] = []

    def start(self) -> None:
        self.go.set()

    def receive(self):
        """The next message of any child; a child that died fails the wave with one line."""
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [c.exitcode for c in self.children if c.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a client process exited with code {dead[0]}") from None

    def join(self) -> None:
        """Every child's latencies (each sends them when its last request is answered)."""
        for _ in self.children:
            latencies, errors, spans = self.receive()
            self.latencies += latencies
            self.spans += spans
            self.errors += [MismatchError(e[1]) if e[0] == "mismatch" else RuntimeError(e[1]) for e in errors]

    def close(self) -> None:
        """Wait for the children to exit (outside the timed window: an interpreter's exit takes ~1 s)."""
        for child in self.children:
            child.join()


def client_process(url: str, api_key: str | None, base: np.ndarray, mode: str, index: int, first_client: int,
                   clients: int, task: str, per_client: int, max_objects: int, think: float, go, results) -> None:
    """One `ClientProcesses` interpreter: `clients` threads (numbered from `first_client`, for their
    pause draws) on their own connections; latencies and errors back through `results`."""
    target, images = HttpTarget(url, api_key), ImageSource(1, 1, mode, 0)
    images.base, images.counter = base, index * 1_000_000   # unique images differ across processes
    target.keep(images.base)
    raw: dict = {"latencies": [], "first_object": [], "errors": [], "spans": []}
    lock = threading.Lock()
    threads = [threading.Thread(target=closed_loop_client, daemon=True, args=(
        target, images, task, per_client, max_objects, think, time.sleep, first_client + i, raw, lock))
        for i in range(clients)]
    results.put("ready")
    go.wait()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [("mismatch", str(e)) if isinstance(e, MismatchError) else ("error", f"{type(e).__name__}: {e}")
              for e in raw["errors"]]   # as (kind, line): any exception crosses the queue
    results.put((raw["latencies"], errors, raw["spans"]))


def closed_loop_client(target, images: ImageSource, task: str, per_client: int, max_objects: int, think: float,
                       pause: Callable[[float], None], number: int, raw: dict, lock: threading.Lock) -> None:
    """One client of a wave: `per_client` requests one after another (a pause of uniform
    0..2×`think` s between two, its own draws seeded by `number`), each checked for `max_objects`
    objects; latencies, times to first object and errors appended to `raw`'s lists under `lock`.
    A failed request ends this client."""
    draws = np.random.default_rng(number)
    first_start = last_end = None
    for i in range(per_client):
        if think and i:
            pause(float(draws.uniform(0.0, 2.0 * think)))
        image = images.next()
        start = time.perf_counter()
        try:
            result, first = target.send(image, task, max_objects)
        except BaseException as e:  # reported after the wave
            with lock:
                raw["errors"].append(e)
            return
        end = time.perf_counter()
        first_start, last_end = start if first_start is None else first_start, end
        found = len(result["objects" if task == "detect" else "points"])
        with lock:
            if i == per_client - 1:
                raw["spans"].append((first_start, last_end))
            if found != max_objects:
                raw["errors"].append(MismatchError(f"a {task} request returned {found} objects, not {max_objects}"))
            raw["latencies"].append(end - start)
            raw["first_object"].append(first - start if first is not None else float("nan"))
