"""Whole-request load benchmark: closed-loop clients through the public `Engine` API.

    python -m engine.loadbench [--device cuda|cpu] [--preset moondream2|tiny] [--size 640x480]
                               [--tasks detect,point] [--modes unique,same] [--conc 1,32,64]
                               [--max-objects 10] [--max-prefill N] [--crop-threads N] [--json OUT]

The scenario of the Kestrel side-by-side (docs in the README): random weights with the
coordinate logit raised, so every request emits exactly `--max-objects` objects (detect: 3
tokens each, point: 2, then EOS); one `--size` RGB image per request; `c` client threads, each
sending its next request when its last one returns. `unique`: every request a different image
(a few pixels changed: every request misses the prefix cache); `same`: one image for all.
A warm-up wave (one request per client, other images) runs before each timed row.

Per row: requests/s (the requests over the span from the first request sent to the last answer
received, over all clients; `req_per_s_window` divides by the whole timed window instead, which
also holds starting the clients and, over HTTP, two /metrics reads), latency mean/p50/p90 (submit → result), time to first object (submit →
the first `on_object` callback) and decode steps per second. If any request returns a number
of objects other than `--max-objects`, the run stops without printing a table: its rows would
not measure the scenario.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import threading
import time
from typing import Callable

import numpy as np
import torch

from engine.model.checkpoint import save_checkpoint
from engine.model.config import PRESETS
from engine.model.image import load_image, overlap_crop_image
from engine.serving.engine import Engine
from engine.serving.skills import prompt_ids
from engine.serving.limits import kv_positions
from engine.tools.bench import build_model
from engine.tools.loadclients import (OBJECT, ClientProcesses, HttpTarget, ImageSource, MismatchError,
                                      closed_loop_client)
from engine.tools.stacks import StackSampler
from engine.training.vocab import stand_in_tokenizer
from engine.worker.runner import PrefillItem

__all__ = ["OBJECT", "ClientProcesses", "EngineTarget", "HttpTarget", "ImageSource", "MismatchError", "main",
           "run_wave", "summarise"]


class EngineTarget:
    """Requests through the in-process `Engine` API (the first object's time from `on_object`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def send(self, image: np.ndarray, task: str, max_objects: int) -> tuple[dict, float | None]:
        first: list[float] = []
        handle = self.engine.submit(image, task, OBJECT, max_objects=max_objects,
                                    on_object=lambda _obj: first or first.append(time.perf_counter()))
        return handle.result(), (first[0] if first else None)

    def steps(self) -> tuple[int, int]:
        """(decode steps, prefill steps) so far."""
        return self.engine.decode_steps, self.engine.prefill_steps

    def graphs(self) -> int:
        """CUDA graphs the engine holds (a row that adds some captured them while it was timed)."""
        return self.engine.graphs_held

    def thread_id(self) -> int | None:
        """The engine's serving thread (for `StackSampler`)."""
        return self.engine.thread_id

    def engine_times(self) -> tuple[int, dict[str, tuple[float, float]], int]:
        """(ticks, {verb: (wall s, CPU s)}, decode rows) of the engine thread so far
        (`engine.serving.timing`; decode rows: the batch buckets of its decode forwards, summed)."""
        return self.engine.steps, self.engine.step_clock.snapshot(), self.engine.decode_rows


def run_wave(target, images: ImageSource, task: str, clients: int, per_client: int, max_objects: int,
             stacks: int = 0, think: float = 0.0, pause: Callable[[float], None] = time.sleep,
             processes: int = 1) -> dict:
    """`clients` threads, `per_client` requests each, closed loop. Returns raw timings; with
    `stacks`, also the engine thread's `stacks` most sampled stack chains (`StackSampler`). With
    `think` (seconds), each client pauses between two requests for a time drawn uniformly from
    [0, 2 × think] (its own seeded draws): the turnaround an HTTP client and server add, and the
    spread it gives arrivals, without HTTP. With `processes` > 1 (an `HttpTarget` only) the clients
    run in that many processes (`ClientProcesses`)."""
    clients_raw: dict = {"latencies": [], "first_object": [], "errors": [], "spans": []}
    lock = threading.Lock()
    if processes > 1:   # the clients in `processes` interpreters instead (HTTP only)
        pool = ClientProcesses(target, images, task, clients, per_client, max_objects, think, processes)
        threads = [pool]
    else:
        threads = [threading.Thread(target=closed_loop_client, daemon=True, args=(
            target, images, task, per_client, max_objects, think, pause, i, clients_raw, lock)) for i in range(clients)]
    timed = getattr(target, "engine_times", None)
    served = getattr(target, "server_times", None)
    thread_id = getattr(target, "thread_id", lambda: None)()
    sampler = StackSampler(thread_id) if stacks and thread_id is not None else contextlib.nullcontext()
    # the engine's clocks are read inside the timed window, so that its verbs' time in the window
    # never exceeds the window's
    held = getattr(target, "graphs", lambda: None)
    cpu = getattr(target, "server_cpu", lambda: None)
    steps0, served0, graphs0, cpu0 = target.steps(), served() if served else None, held(), cpu()
    start = time.perf_counter()
    times0 = timed() if timed else None
    with sampler:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    times = timed() if timed else None
    wall = time.perf_counter() - start
    steps, served1, graphs1, cpu1 = target.steps(), served() if served else None, held(), cpu()
    latencies, first_object, errors = clients_raw["latencies"], clients_raw["first_object"], clients_raw["errors"]
    if processes > 1:
        pool.close()
        latencies, first_object, errors = pool.latencies, [float("nan")] * len(pool.latencies), pool.errors
        clients_raw["spans"] = pool.spans
    if errors:
        raise errors[0]
    spans = clients_raw["spans"]   # perf_counter is one system-wide clock on Linux: comparable across processes
    raw = {"latencies": latencies, "first_object": first_object, "wall": wall,
           "span": max(e for _, e in spans) - min(s for s, _ in spans),
           "decode_steps": steps[0] - steps0[0], "prefill_steps": steps[1] - steps0[1]}
    if graphs0 is not None and graphs1 is not None:
        raw["graphs_captured"] = graphs1 - graphs0
    if served1:
        raw["server_s"] = {k: v - served0.get(k, 0.0) for k, v in served1.items()}
    if cpu0 is not None and cpu1 is not None:
        raw["server_cpu_s"] = [b - a for a, b in zip(cpu0, cpu1)]   # event-loop thread, whole process
    if isinstance(sampler, StackSampler):
        raw["stacks"] = sampler.top(stacks)
    if times is not None:
        raw["ticks"] = times[0] - times0[0]
        raw["engine_s"] = {k: (w - times0[1][k][0], c - times0[1][k][1]) for k, (w, c) in times[1].items()}
        raw["decode_rows"] = times[2] - times0[2]
    return raw


@torch.inference_mode()
def prefill_probe(engine: Engine, width: int, height: int, counts: list[int], repeats: int = 3) -> dict[int, float]:
    """Milliseconds (best of `repeats`, device synchronised) of one prefill step of n new images:
    vision + image prefix + prompt, on KV rows 0..n-1 before the engine serves anything."""
    cfg = engine.model_config
    source = ImageSource(width, height, "unique", 99)
    crops = overlap_crop_image(load_image(source.next()), cfg.vision)
    prompt = prompt_ids(cfg.tokens, lambda s: engine.tokenizer.encode(s).ids, "detect", OBJECT)
    out = {}
    for n in counts:
        items = [PrefillItem(row, crops, row, prompt) for row in range(n)]  # slot = row: distinct images
        best = float("inf")
        for _ in range(repeats + 1):  # the first run warms the allocator and kernels
            engine.runner.synchronize()
            start = time.perf_counter()
            engine.runner.launch_prefill(items)
            engine.runner.synchronize()
            best = min(best, time.perf_counter() - start)
        out[n] = best * 1e3
    return out


def summarise(task: str, mode: str, clients: int, raw: dict) -> dict:
    lat = np.array(raw["latencies"]) * 1e3
    ttfo = np.array(raw["first_object"]) * 1e3
    n = len(lat)
    return {"task": task, "image": mode, "c": clients, "requests": n, "req_per_s": n / raw["span"],
            "req_per_s_window": n / raw["wall"],
            "latency_mean_ms": float(lat.mean()), "latency_p50_ms": float(np.percentile(lat, 50)),
            "latency_p90_ms": float(np.percentile(lat, 90)),
            "first_object_mean_ms": float(np.nanmean(ttfo)) if np.isfinite(ttfo).any() else None,
            "first_object_p50_ms": float(np.nanpercentile(ttfo, 50)) if np.isfinite(ttfo).any() else None,
            "decode_steps_per_s": raw["decode_steps"] / raw["wall"],
            "prefill_steps_per_request": raw["prefill_steps"] / n,
            **engine_thread(raw), **server_phases(raw, n, float(lat.mean())),
            **({"engine_stacks": raw["stacks"]} if "stacks" in raw else {})}


def server_phases(raw: dict, n: int, latency_ms: float) -> dict:
    """Over HTTP: the server's milliseconds per request by phase, and what the client's latency
    holds beyond them (the client, the network, and the server around the handler)."""
    if not raw.get("server_s"):
        return {}
    per = {k: v / n * 1e3 for k, v in raw["server_s"].items()}
    inside = sum(per.get(k, 0.0) for k in ("body", "submit", "wait", "reply"))
    cpu = {}
    if "server_cpu_s" in raw:   # the event loop's share of the wall time: near 1, requests queue for it
        loop, process = raw["server_cpu_s"]
        cpu = {"server_loop_cpu_ms_per_request": loop / n * 1e3, "server_process_cpu_ms_per_request": process / n * 1e3,
               "server_loop_busy": loop / raw["wall"]}
    return {"server_ms_per_request": per, "outside_server_ms_per_request": latency_ms - inside, **cpu}


def engine_thread(raw: dict) -> dict:
    """The engine thread's milliseconds per tick (in-process, or the server's read from its /metrics):
    per verb, wall and CPU; `outside` is the rest of the tick's period (the loop waiting for work, and
    what surrounds the verbs)."""
    if not raw.get("ticks"):
        return {}
    ticks = raw["ticks"]
    per = {k: [w / ticks * 1e3, c / ticks * 1e3] for k, (w, c) in raw["engine_s"].items()}
    period = raw["wall"] / ticks * 1e3
    return {"ticks_per_s": ticks / raw["wall"], "tick_ms": period, "engine_ms_per_tick": per,
            "outside_ms_per_tick": period - sum(w for w, _ in per.values()),
            "decode_batch_mean": raw["decode_rows"] / raw["decode_steps"] if raw["decode_steps"] else None,
            "graphs_captured": raw.get("graphs_captured")}


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--size must look like 640x480, got {text!r}") from None
    if w < 1 or h < 1:
        raise SystemExit(f"--size must be positive, got {text!r}")
    return w, h


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.loadbench", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--preset", default="moondream2", choices=sorted(PRESETS))
    p.add_argument("--dtype", default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--size", default="640x480", help="image width x height")
    p.add_argument("--tasks", default="detect,point")
    p.add_argument("--modes", default="unique,same")
    p.add_argument("--conc", default="1,32,64", help="closed-loop client counts")
    p.add_argument("--max-objects", type=int, default=10)
    p.add_argument("--requests", type=int, default=20, help="requests of a single client (c=1)")
    p.add_argument("--per-client", type=int, default=6, help="requests per client when c > 1")
    p.add_argument("--max-batch", type=int, default=None, help="engine KV rows (default: the largest --conc)")
    p.add_argument("--prefix-cache", type=int, default=16, help="engine prefix_cache_size")
    p.add_argument("--max-prefill", type=int, default=None, help="engine max_prefill: new images per step")
    p.add_argument("--max-prefill-cached", type=int, default=None, help="engine max_prefill_cached")
    p.add_argument("--crop-threads", type=int, default=None, help="engine crop_threads")
    p.add_argument("--prefill-wait", type=int, default=None, help="engine prefill_wait: decode steps a request on a "
                   "cached image may wait, while rows decode, to share its prefill step")
    p.add_argument("--prefill-gather", type=int, default=None, help="engine prefill_gather: waiting requests that "
                   "end the wait")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stacks", type=int, default=0, metavar="N",
                   help="sample the engine thread's Python stack during each in-process row and print its N most "
                        "frequent places (engine.tools.stacks)")
    p.add_argument("--think-ms", type=float, default=0.0, metavar="MS",
                   help="each client pauses a uniform 0..2×MS ms between its requests (mean MS): an in-process "
                        "stand-in for the turnaround an HTTP round trip adds (default 0)")
    p.add_argument("--json", default=None, help="write the table as JSON here")
    p.add_argument("--url", default=None, metavar="URL",
                   help="drive a running `python -m app.serve` at URL (e.g. http://127.0.0.1:2020/v1) instead of "
                        "an in-process engine; start it with --weights DIR --no-repeat-guard, DIR from --save-checkpoint")
    p.add_argument("--api-key", default=None, help="the server's --api-key (with --url)")
    p.add_argument("--client-processes", type=int, default=1, metavar="P",
                   help="with --url: spread the client threads over P processes, so that they do not queue on one "
                        "interpreter lock (default 1: every client a thread of this process)")
    p.add_argument("--save-checkpoint", default=None, metavar="DIR",
                   help="only write this scenario's model (random weights, coordinate logit raised) as a "
                        "checkpoint directory for `python -m app.serve --weights DIR`, then exit")
    args = p.parse_args(argv)
    tasks, modes = args.tasks.split(","), args.modes.split(",")
    for t in tasks:
        if t not in ("detect", "point"):
            raise SystemExit(f"--tasks: unknown task {t!r} (use detect, point)")
    for m in modes:
        if m not in ("unique", "same"):
            raise SystemExit(f"--modes: unknown mode {m!r} (use unique, same)")
    conc = [int(c) for c in args.conc.split(",")]
    if args.client_processes < 1 or (args.client_processes > 1 and args.url is None):
        raise SystemExit("--client-processes must be 1, or more with --url (the in-process engine's clients are its threads)")
    if not 0 <= args.think_ms <= 60_000:
        raise SystemExit(f"--think-ms must be between 0 and 60000, got {args.think_ms:g}")
    width, height = parse_size(args.size)
    dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    if args.url is not None:
        target, engine, probe, graphs = HttpTarget(args.url, args.api_key), None, {}, 0
        where = f"python -m app.serve at {args.url}"
    else:
        model = build_model(args.preset, args.device, dtype, args.seed)
        cfg = model.config
        tokenizer = stand_in_tokenizer(cfg)
        if args.save_checkpoint:
            state = {"model." + k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
            save_checkpoint(args.save_checkpoint, state, cfg, tokenizer.to_str(), preset=args.preset)
            print(f"wrote the {args.preset} scenario checkpoint (coordinate logit raised) to {args.save_checkpoint}")
            return 0
        tuning = {name: value for name, value in (("max_prefill", args.max_prefill),
                                                   ("max_prefill_cached", args.max_prefill_cached),
                                                   ("crop_threads", args.crop_threads),
                                                   ("prefill_wait", args.prefill_wait),
                                                   ("prefill_gather", args.prefill_gather)) if value is not None}
        try:
            # Random weights repeat boxes: the scenario runs every request to --max-objects, so the
            # repetition guard is off (start `python -m app.serve` with --no-repeat-guard likewise).
            engine = Engine(model, tokenizer, max_batch=args.max_batch or max(conc),
                            prefix_cache_size=args.prefix_cache, max_objects=args.max_objects, repeat_guard=False,
                            **tuning)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        prompt = prompt_ids(cfg.tokens, lambda s: tokenizer.encode(s).ids, "detect", OBJECT)
        graphs = engine.runner.capture_all(kv_positions(cfg.prefix_len, len(prompt), "detect", args.max_objects))
        probe = prefill_probe(engine, width, height, [1, min(8, engine.config.max_batch)])
        engine.start()
        target = EngineTarget(engine)
        where = f"in-process engine, max_batch {engine.config.max_batch}, {graphs} CUDA graphs"
    rows = []
    seed = args.seed
    try:
        for task in tasks:
            for mode in modes:
                for c in conc:
                    seed += 1
                    images = ImageSource(width, height, mode, seed)
                    warm = ImageSource(width, height, mode, seed + 10_000)
                    if isinstance(target, HttpTarget):
                        target.keep(images.base)
                        target.keep(warm.base)
                    run_wave(target, warm, task, c, 1, args.max_objects)
                    raw = run_wave(target, images, task, c, args.requests if c == 1 else args.per_client,
                                   args.max_objects, stacks=args.stacks, think=args.think_ms / 1e3,
                                   processes=min(args.client_processes, c))
                    rows.append(summarise(task, mode, c, raw))
                    print(f"  {task} {mode} c={c}: {rows[-1]['req_per_s']:.1f} req/s", flush=True)
    except MismatchError as e:
        raise SystemExit(f"refusing to report: {e} (the scenario needs every request to reach --max-objects)")
    finally:
        if engine is not None:
            engine.close()
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    think = f"; clients pause {args.think_ms:g} ms on average between requests" if args.think_ms else ""
    if args.client_processes > 1:
        think += f"; clients in {args.client_processes} processes"
    print(f"{args.preset} {dtype} on {gpu}; {width}x{height} images, {args.max_objects} objects/request; {where}{think}")
    if probe:
        print("prefill step of new images (vision + prefix + prompt): "
              + ", ".join(f"{n} image{'s' * (n > 1)} {ms:.1f} ms ({ms / n:.1f} ms/image)" for n, ms in probe.items()))
    print(f"{'task':>6} {'image':>6} {'c':>3} {'reqs':>5} {'req/s':>8} {'mean ms':>8} {'p50 ms':>8} {'p90 ms':>8} "
          f"{'1st obj ms':>10} {'decode steps/s':>14} {'prefills/req':>12}")
    for r in rows:
        print(f"{r['task']:>6} {r['image']:>6} {r['c']:>3} {r['requests']:>5} {r['req_per_s']:>8.1f} "
              f"{r['latency_mean_ms']:>8.1f} {r['latency_p50_ms']:>8.1f} {r['latency_p90_ms']:>8.1f} "
              f"{'n/a' if r['first_object_mean_ms'] is None else format(r['first_object_mean_ms'], '.1f'):>10} "
              f"{r['decode_steps_per_s']:>14.1f} {r['prefill_steps_per_request']:>12.2f}")
    timed_rows = [r for r in rows if "engine_ms_per_tick" in r]
    if timed_rows:
        print("engine thread, ms per tick (wall/CPU; wall beyond CPU is waiting: for the device in 'results', "
              "else mostly for the interpreter lock)")
        print(f"{'task':>6} {'image':>6} {'c':>3} {'tick ms':>8} {'launch':>11} {'results':>11} {'commit':>11} "
              f"{'finalize':>11} {'outside':>8} {'decode batch':>12} {'graphs captured':>15}")
        for r in timed_rows:
            e = r["engine_ms_per_tick"]
            cells = " ".join(f"{e[k][0]:>5.2f}/{e[k][1]:<5.2f}" for k in ("launch", "results", "commit", "finalize"))
            batch = "n/a" if r["decode_batch_mean"] is None else format(r["decode_batch_mean"], ".1f")
            captured = "n/a" if r["graphs_captured"] is None else str(r["graphs_captured"])
            print(f"{r['task']:>6} {r['image']:>6} {r['c']:>3} {r['tick_ms']:>8.2f} {cells} {r['outside_ms_per_tick']:>8.2f}"
                  f" {batch:>12} {captured:>15}")
    for r in (r for r in rows if r.get("engine_stacks")):
        print(f"engine thread, most sampled stacks ({r['task']} {r['image']} c={r['c']}; a line in C shows as its caller):")
        for share, where in r["engine_stacks"]:
            print(f"  {share:5.1f}%  {where}")
    served_rows = [r for r in rows if "server_ms_per_request" in r]
    if served_rows:
        print("server, ms per request (wake: the part of wait after the engine finished, when the server can tell)")
        print("  (loop CPU, process CPU: the server's event-loop thread and whole process, CPU ms per request; "
              "loop busy: the loop thread's CPU over the row's wall time; with --http-workers N, summed over the "
              "N workers)")
        print(f"{'task':>6} {'image':>6} {'c':>3} {'body':>7} {'submit':>7} {'wait':>8} {'wake':>7} {'reply':>6} "
              f"{'outside':>8} {'loop CPU':>8} {'process CPU':>11} {'loop busy':>9}")
        for r in served_rows:
            p = r["server_ms_per_request"]
            wake = "n/a" if "wake" not in p else format(p["wake"], ".2f")
            cpu = (f"{r['server_loop_cpu_ms_per_request']:>8.2f} {r['server_process_cpu_ms_per_request']:>11.2f} "
                   f"{r['server_loop_busy']:>9.2f}" if "server_loop_busy" in r else f"{'n/a':>8} {'n/a':>11} {'n/a':>9}")
            print(f"{r['task']:>6} {r['image']:>6} {r['c']:>3} {p.get('body', 0):>7.2f} {p.get('submit', 0):>7.2f} "
                  f"{p.get('wait', 0):>8.2f} {wake:>7} {p.get('reply', 0):>6.2f} {r['outside_server_ms_per_request']:>8.2f} "
                  f"{cpu}")
    if args.json:
        with open(args.json, "w") as f:
            settings = {} if engine is None else {
                "max_batch": engine.config.max_batch, "max_prefill": engine.config.max_prefill,
                "max_prefill_cached": engine.config.max_prefill_cached, "crop_threads": engine.config.crop_threads,
                "prefill_wait": engine.config.prefill_wait, "prefill_gather": engine.config.prefill_gather,
                "prefix_cache_size": args.prefix_cache}
            json.dump({"device": gpu, "preset": args.preset, "dtype": dtype, "size": [width, height],
                       "max_objects": args.max_objects, "target": where, "think_ms": args.think_ms,
                       "client_processes": args.client_processes, **settings,
                       "prefill_ms": {str(n): ms for n, ms in probe.items()}, "torch": torch.__version__, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
