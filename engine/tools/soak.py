"""Churn test: many mixed requests with cancellations, deadlines and bad input; nothing may leak.

    python -m engine.soak --requests 10000 [--cancel-rate 0.2] [--weights DIR] [--seed 0]

Runs the serving thread on the CPU (a random `tiny` model unless --weights is given), submits
requests in random bursts from the main thread, cancels some at random moments, gives some a
deadline, and mixes in corrupt images and bad prompts. Prints completed / cancelled / failed /
rejected counts, latency percentiles and peak RSS, then checks that every pool is back to its
baseline; exits 1 if anything leaked.
"""

from __future__ import annotations

import argparse
import io
import random
import resource
import time
from concurrent.futures import CancelledError, TimeoutError

import numpy as np
from PIL import Image

from engine.model.checkpoint import init_random_
from engine.model.config import TINY
from engine import Cancelled, DeadlineExceeded, Engine, EngineBusy, ImageError, RequestError
from engine.model.moondream import MoondreamModel
from engine.training.vocab import build_tokenizer

OBJECTS = ["red circle", "blue square", "star", "green", "triangle", "yellow hexagon"]


def make_engine(weights: str | None, max_batch: int) -> Engine:
    if weights:
        return Engine.from_pretrained(weights, device="cpu", dtype="fp32", max_batch=max_batch, max_queue=256)
    model = init_random_(MoondreamModel(TINY), seed=0).eval()
    return Engine(model, build_tokenizer(TINY.text.vocab_size), max_batch=max_batch, max_queue=256)


def images(rng: np.random.Generator, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        h, w = int(rng.integers(16, 400)), int(rng.integers(16, 400))
        buf = io.BytesIO()
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.soak", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--cancel-rate", type=float, default=0.2)
    p.add_argument("--deadline-rate", type=float, default=0.05)
    p.add_argument("--bad-rate", type=float, default=0.05)
    p.add_argument("--weights", default=None)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--in-flight", type=int, default=48, help="most requests a client keeps open at once")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    pick = random.Random(args.seed)
    engine = make_engine(args.weights, args.max_batch).start()
    baseline = engine.pools()
    pool = images(rng, 24)
    bad_inputs = [(b"\x89PNG\r\n\x1a\n" + b"\0" * 30, "star", 5), (pool[0][: len(pool[0]) // 2], "star", 5),
                  (b"", "star", 5), (pool[1], "", 5), (pool[1], "x" * 10_000, 5), (pool[2], "star", 0),
                  (pool[2], "star", -1), (pool[2], "star", "many")]
    counts = {"completed": 0, "cancelled": 0, "deadline": 0, "failed": 0, "rejected": 0, "busy": 0}
    latencies, live = [], []
    start = time.perf_counter()
    submitted = 0
    while submitted < args.requests or live:
        for _ in range(pick.randint(0, 8)):  # a burst of arrivals, with at most --in-flight live
            if submitted >= args.requests or len(live) >= args.in_flight:
                break
            submitted += 1
            if pick.random() < args.bad_rate:
                image, obj, cap = pick.choice(bad_inputs)
            else:
                image, obj, cap = pick.choice(pool), pick.choice(OBJECTS), pick.randint(1, 12)
            try:
                timeout = 0.001 if pick.random() < args.deadline_rate else None
                handle = engine.submit(image, pick.choice(["point", "detect"]), obj, max_objects=cap, timeout=timeout)
            except (ImageError, RequestError):
                counts["rejected"] += 1
                continue
            except EngineBusy:
                counts["busy"] += 1
                continue
            live.append((handle, time.perf_counter(), pick.random() < args.cancel_rate))
        time.sleep(pick.random() * 0.002)
        still = []
        for handle, t0, cancel in live:
            if cancel and pick.random() < 0.3:
                handle.cancel()
                cancel = False
            if not handle.future.done():
                still.append((handle, t0, cancel))
                continue
            try:
                handle.future.result(timeout=0)
                counts["completed"] += 1
                latencies.append(time.perf_counter() - t0)
            except (Cancelled, CancelledError):
                counts["cancelled"] += 1
            except DeadlineExceeded:
                counts["deadline"] += 1
            except (TimeoutError, Exception):
                counts["failed"] += 1
        live = still
    engine.close()
    elapsed = time.perf_counter() - start
    after = engine.pools()
    lat = np.array(latencies) * 1e3 if latencies else np.zeros(1)
    print(f"{submitted} requests in {elapsed:.1f} s ({submitted / elapsed:.0f}/s): " +
          ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(f"latency ms: p50 {np.percentile(lat, 50):.1f}  p99 {np.percentile(lat, 99):.1f}  "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    leaks = {k: (baseline[k], after[k]) for k in baseline if k != "prefix_cache" and after[k] != baseline[k]}
    if after["prefix_cache"] > engine.prefix_cache.capacity:
        leaks["prefix_cache"] = (engine.prefix_cache.capacity, after["prefix_cache"])
    if counts["failed"]:
        leaks["failed requests"] = (0, counts["failed"])
    print("pools back to baseline" if not leaks else f"LEAKED: {leaks}")
    return 1 if leaks else 0


if __name__ == "__main__":
    raise SystemExit(main())
