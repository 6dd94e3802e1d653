"""`python -m app.serve_cost`: the HTTP server's own CPU cost per request, on this machine.

    python -m app.serve_cost [--size 640x480] [--requests 200] [--conc 8] [--modes unique,same]
                             [--http auto|h11|httptools] [--loop auto|asyncio|uvloop]
                             [--engines thread,process] [--connections keep|new] [--service-ms MS]

The engine's step loop runs in a thread of the server's process, so every millisecond of
GIL-holding Python work the server does per request slows the engine too. Two parts:

1. Stages, one thread, median ms per request on the scenario's request (a `--size` noise image
   as a JPEG data URL, quality 95, as `engine.loadbench --url` sends it): JSON parse, base64
   decode, payload hash, JPEG decode + pixel hash (`decode_image`), reply encoding.
2. End to end: `app.serve`'s app under uvicorn (in a thread here) over `NullEngine` (the real
   image decode and keying of `Engine.submit`, then an immediate 10-object answer: only the
   server's and the image's cost remain), driven by `--conc` client threads in another process.
   Printed per mode: req/s, server-process CPU ms per request, its event-loop thread's CPU ms per
   request and busy share (from the app's /metrics: requests queue for a busy loop), and how much of its idle speed a
   pure-Python "engine loop" probe thread keeps meanwhile (1.00: the server costs the loop nothing).
   The probe is `NullEngine`'s step loop. `--engines process` runs `NullEngine` in a child behind
   `app.serve_process.EngineProcess` (as `app.serve --engine-process` does): then the engine
   process's CPU per request, less the probe's own, is what serving costs the engine's process.
3. With `--service-ms MS`, `NullEngine` answers each request MS ms after it was submitted (one timer
   thread; the probe does not run), as an engine whose requests take that long would. The row then
   gives the clients' mean latency, the HTTP turnaround (latency − MS) and `kept`: req/s against
   `--conc` / MS, the rate of closed-loop clients that lose no time between requests (what the
   in-process engine's clients do). Set MS to an in-process row's mean latency (`engine.loadbench`)
   to see what the HTTP path alone, with no GPU and no engine, costs that row.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import hashlib
import heapq
import itertools
import io
import json
import multiprocessing
import pstats
import statistics
import threading
import time
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from PIL import Image

from app.serve import build_app
from app.serve_process import EngineProcess
from engine.serving.crops import decode_image
from engine.tools.loadclients import HttpTarget

OBJECT = "car"
ANSWER = {"objects": [{"x_min": 0.1 * i, "y_min": 0.2, "x_max": 0.1 * i + 0.05, "y_max": 0.4, "score": 0.9}
                      for i in range(10)]}


def noise_jpeg(width: int, height: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def request_body(jpeg: bytes) -> bytes:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    return json.dumps({"image_url": url, "object": OBJECT, "settings": {"max_objects": 10}}).encode()


class NullHandle:
    def __init__(self, future: Future) -> None:
        self.future = future

    def cancel(self) -> None:
        pass


class Timer:
    """One thread that completes futures at their deadlines (time.monotonic seconds)."""

    def __init__(self) -> None:
        self.due: list[tuple[float, int, Future]] = []
        self.order = itertools.count()
        self.cond = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def add(self, deadline: float, future: Future) -> None:
        with self.cond:
            heapq.heappush(self.due, (deadline, next(self.order), future))
            self.cond.notify()

    def run(self) -> None:
        with self.cond:
            while not self.stop:
                now = time.monotonic()
                while self.due and self.due[0][0] <= now:
                    heapq.heappop(self.due)[2].set_result(ANSWER)
                self.cond.wait(timeout=None if not self.due else self.due[0][0] - now)

    def close(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify()


class NullEngine:
    """What `Engine.submit` does to a request's image (decode, key), then an answer at once, or
    `service_ms` later (`Timer`); without a delay its "step loop" is a `Probe` (`decode_steps`
    counts its work units)."""

    prefill_steps = 0  # it never prefills

    def __init__(self, service_ms: float = 0.0, **_options) -> None:
        self.probe = Probe()
        self.service = service_ms / 1000.0
        self.timer = Timer() if service_ms else None

    @property
    def decode_steps(self) -> int:
        return self.probe.units

    def submit(self, image, skill: str, obj: str = "", **options) -> NullHandle:
        start = time.monotonic()
        decode_image(image)
        future: Future = Future()
        if self.timer is None:
            future.set_result(ANSWER)
        else:
            self.timer.add(start + self.service, future)
        return NullHandle(future)

    def step(self) -> bool:
        return False

    def start(self) -> NullEngine:
        (self.probe.thread if self.timer is None else self.timer.thread).start()
        return self

    def close(self) -> None:
        self.probe.stop.set()
        if self.timer is not None:
            self.timer.close()

    def queued(self) -> int:
        return 0

    def pools(self) -> dict:
        """`probe_cpu`: the loop's CPU seconds so far (read by the parent through the stats)."""
        return {"running": 0, "probe_cpu": self.probe.cpu}


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far (Linux /proc)."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def stage_costs(body: bytes, repeats: int) -> dict[str, float]:
    from starlette.responses import JSONResponse

    payload = json.loads(body)["image_url"].partition(",")[2]
    raw = base64.b64decode(payload)
    costs = {"json parse (json)": median_ms(lambda: json.loads(body), repeats)}
    try:
        import orjson
        costs["json parse (orjson)"] = median_ms(lambda: orjson.loads(body), repeats)
    except ImportError:
        pass
    costs["base64 decode (base64)"] = median_ms(lambda: base64.b64decode(payload, validate=True), repeats)
    try:
        import pybase64
        costs["base64 decode (pybase64)"] = median_ms(lambda: pybase64.b64decode(payload, validate=True), repeats)
    except ImportError:
        pass
    costs["payload hash (sha256)"] = median_ms(lambda: hashlib.sha256(payload.encode()).digest(), repeats)
    costs["JPEG decode + pixel hash"] = median_ms(lambda: decode_image(raw), repeats)
    costs["reply encoding"] = median_ms(lambda: JSONResponse(ANSWER), repeats)
    return costs


def client_process(url: str, bodies: list[bytes], conc: int, results, keep: bool = True) -> None:
    """`conc` threads send `bodies` (each once, in order) to `url` (.../v1/detect): each thread on
    one keep-alive connection as `engine.loadbench --url` sends (keep), or a new connection per
    request as the `moondream` client does (urllib)."""
    work = iter(range(len(bodies)))
    lock = threading.Lock()
    failures: list[str] = []
    latencies: list[float] = []
    root, _, task = url.rpartition("/")
    target = HttpTarget(root)

    def post(body: bytes) -> bytes:
        if keep:
            status, data = target.post(f"{target.path}/{task}", body)
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {data[:200]!r}")
            return data
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.read()

    def client() -> None:
        while True:
            with lock:
                i = next(work, None)
            if i is None:
                return
            try:
                start = time.perf_counter()
                if len(json.loads(post(bodies[i]))["objects"]) != 10:
                    failures.append("wrong answer")
                latencies.append(time.perf_counter() - start)
            except Exception as e:  # noqa: BLE001 - reported to the parent
                failures.append(f"{type(e).__name__}: {e}")

    start = time.perf_counter()
    with ThreadPoolExecutor(conc) as pool:
        for _ in range(conc):
            pool.submit(client)
    results.put((failures, latencies, time.perf_counter() - start))


class Probe:
    """A pure-Python busy thread standing in for the engine's step loop: its rate of small work
    units while the server runs, against its rate alone, is what the server leaves the loop."""

    def __init__(self) -> None:
        self.units = 0
        self.cpu = 0.0  # this thread's CPU seconds, so far
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for i in range(2000):
                total += i
            self.units += 1
            self.cpu = time.thread_time()



def loop_rate(engine, seconds: float) -> float:
    start = engine.decode_steps
    time.sleep(seconds)
    return (engine.decode_steps - start) / seconds


def end_to_end(bodies: list[bytes], conc: int, http: str, loop: str, port: int, in_child: bool = False,
               profile: cProfile.Profile | None = None, keep: bool = True, service_ms: float = 0.0) -> dict[str, float]:
    import uvicorn

    engine = (EngineProcess.open(factory=NullEngine, service_ms=service_ms) if in_child
              else NullEngine(service_ms).start())
    server = uvicorn.Server(uvicorn.Config(build_app(engine), host="127.0.0.1", port=port, http=http, loop=loop,
                                           log_level="warning"))
    run = server.run if profile is None else (lambda: profile.runcall(server.run))  # the event loop's thread
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    idle = loop_rate(engine, 1.0) if not service_ms else 0.0

    def cpu() -> tuple[float, float]:
        """(server process CPU s, engine process CPU s less the loop's), the loop being the probe."""
        probe = engine.pools().get("probe_cpu", 0.0)  # none before the child first reports
        if in_child:
            return time.process_time(), process_cpu(engine.process.pid) - probe
        return time.process_time() - probe, 0.0

    url = f"http://127.0.0.1:{port}/v1/detect"
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    worker = ctx.Process(target=client_process, args=(url, bodies, conc, results, keep))
    loop0 = loop_cpu(port)
    units, before, start = engine.decode_steps, cpu(), time.perf_counter()
    worker.start()
    failures, latencies, sending = results.get()  # sending: the clients' own wall time
    worker.join()
    if in_child:
        time.sleep(0.1)  # one more stats report from the child
    wall, after = time.perf_counter() - start, cpu()
    loop = loop_cpu(port) - loop0
    busy = (engine.decode_steps - units) / wall / idle if idle else float("nan")
    server.should_exit = True
    thread.join()
    engine.close()
    if failures:
        raise SystemExit(f"error: {len(failures)} requests failed, e.g. {failures[0]}")
    n = len(bodies)
    server_ms, engine_ms = (1000.0 * (b - a) / n for a, b in zip(before, after))
    mean = 1000.0 * statistics.fmean(latencies)
    return {"req/s": n / wall, "server CPU ms/req": server_ms, "loop CPU ms/req": 1000.0 * loop / n,
            "loop busy": loop / sending,
            "engine process ms/req": engine_ms if in_child else server_ms, "probe kept": busy,
            "latency ms": mean, "turnaround ms": mean - service_ms,
            "kept": n / sending / (conc / (service_ms / 1000.0)) if service_ms else float("nan")}


def loop_cpu(port: int) -> float:
    """CPU seconds of the server's event-loop thread so far (its /metrics, served on that thread)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("mdpipe_server_loop_cpu_seconds "):
                return float(line.split()[1])
    raise RuntimeError("the server's /metrics has no mdpipe_server_loop_cpu_seconds")


def parse_size(text: str) -> tuple[int, int]:
    w, _, h = text.partition("x")
    return int(w), int(h)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.serve_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="640x480", help="image WIDTHxHEIGHT (default 640x480)")
    p.add_argument("--requests", type=int, default=200, help="requests per end-to-end mode (default 200)")
    p.add_argument("--conc", type=int, default=8, help="client threads (default 8)")
    p.add_argument("--modes", default="unique,same", help="unique: a new image per request; same: one image")
    p.add_argument("--http", default="auto", choices=["auto", "h11", "httptools"], help="uvicorn's HTTP parser")
    p.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"], help="uvicorn's event loop")
    p.add_argument("--engines", default="thread,process",
                   help="thread: the engine in the server's process (default app.serve); process: in a child "
                        "(app.serve --engine-process)")
    p.add_argument("--connections", default="keep", choices=["keep", "new"],
                   help="keep: one keep-alive connection per client thread (engine.loadbench --url); new: one per "
                        "request (the moondream client)")
    p.add_argument("--service-ms", type=float, default=0.0, metavar="MS",
                   help="the stand-in engine answers MS ms after submit (no probe): the rows add mean latency, "
                        "turnaround (latency - MS) and kept (req/s against conc / MS)")
    p.add_argument("--port", type=int, default=2091)
    p.add_argument("--repeats", type=int, default=30, help="repeats per stage (default 30)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print the N functions of the event loop's thread with the most own time, per mode")
    args = p.parse_args(argv)
    width, height = parse_size(args.size)
    body = request_body(noise_jpeg(width, height, 0))
    print(f"request: {width}x{height} noise JPEG q95, body {len(body) / 1024:.0f} KiB")
    print("stage (one thread)               ms/request")
    for name, ms in stage_costs(body, args.repeats).items():
        print(f"  {name:<31}{ms:8.2f}")
    print(f"end to end: uvicorn http={args.http} loop={args.loop}, {args.conc} clients ({args.connections} "
          f"connections), {args.requests} requests")
    delayed = f"{'latency ms':>12}{'turnaround ms':>15}{'kept':>7}" if args.service_ms else ""
    print(f"  {'engine':<8}{'mode':<8}{'req/s':>8}{'server CPU ms/req':>20}{'loop CPU ms/req':>17}{'loop busy':>11}"
          f"{'engine proc. ms/req':>21}{'probe kept':>12}{delayed}")
    for where, mode in ((w, m) for w in args.engines.split(",") for m in args.modes.split(",")):
        if mode == "same":
            bodies = [body] * args.requests
        else:
            bodies = [request_body(noise_jpeg(width, height, 1 + i)) for i in range(args.requests)]
        profile = cProfile.Profile() if args.profile else None
        row = end_to_end(bodies, args.conc, args.http, args.loop, args.port, where == "process", profile,
                         args.connections == "keep", args.service_ms)
        delayed = (f"{row['latency ms']:12.1f}{row['turnaround ms']:15.2f}{row['kept']:7.3f}"
                   if args.service_ms else "")
        print(f"  {where:<8}{mode:<8}{row['req/s']:8.1f}{row['server CPU ms/req']:20.2f}{row['loop CPU ms/req']:17.2f}"
              f"{row['loop busy']:11.2f}{row['engine process ms/req']:21.2f}{row['probe kept']:12.2f}{delayed}", flush=True)
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    return 0
