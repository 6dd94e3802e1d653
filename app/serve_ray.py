"""`python -m app.serve --ray --replicas N`: the same HTTP API, one engine replica per GPU, behind
Ray Serve (the optional `.[ray]` extra).

Each replica is a Ray Serve deployment replica (its own process) that loads the checkpoint, captures
its CUDA graphs (`Engine.warm_up`), starts one `Engine` and serves `app.serve.build_app` over it;
Ray Serve's HTTP proxy spreads requests over the replicas. Endpoints, limits, errors and the API key
are those of the single-process server.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from app.serve import ServeLimits, build_app

RAY_SERVE_HINT = "install with pip install -e .[ray]"


def require_serve():
    try:
        import ray
        from ray import serve
    except ImportError as e:
        raise SystemExit(f"error: --ray needs Ray Serve, which is not installed ({e}); {RAY_SERVE_HINT}") from None
    return ray, serve


def replica_app_builder(args: argparse.Namespace, api_key: str | None, limits: ServeLimits):
    """A builder Ray Serve calls inside each replica: load the model there, return the ASGI app."""
    weights, tokenizer, device, dtype = args.weights, args.tokenizer, args.device, args.dtype
    max_batch, max_queue, repeat_guard = args.max_batch, args.max_queue, args.repeat_guard
    prefill_wait, prefill_gather = args.prefill_wait, args.prefill_gather

    def build():
        from app.common import open_engine, warm_up

        engine = open_engine(weights, tokenizer=tokenizer, device=device, dtype=dtype, max_batch=max_batch,
                             max_queue=max_queue, prefill_wait=prefill_wait, prefill_gather=prefill_gather,
                             repeat_guard=repeat_guard)
        warm_up(engine)   # each replica captures its graphs before it serves, as the single server does
        return build_app(engine.start(), api_key=api_key, limits=limits)

    return build


def run_ray(args: argparse.Namespace, api_key: str | None, limits: ServeLimits, *,
            ready: threading.Event | None = None, stop: threading.Event | None = None) -> int:
    ray, serve = require_serve()
    ray.init(address=args.address, include_dashboard=False, logging_level=logging.WARNING)
    gpus = args.gpus_per_replica
    if gpus is None:  # one GPU per replica when the replicas will run on CUDA
        on_cuda = args.device.startswith("cuda") or (args.device == "auto" and ray.cluster_resources().get("GPU"))
        gpus = 1.0 if on_cuda else 0.0
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        deployment = serve.deployment(
            serve.ingress(replica_app_builder(args, api_key, limits))(),
            name="mdpipe", num_replicas=args.replicas,
            # The engine batches internally: let many requests into each replica at once.
            max_ongoing_requests=args.max_batch + args.max_queue,
            ray_actor_options={"num_gpus": gpus, "num_cpus": 1})
        serve.run(deployment.bind(), name="mdpipe", route_prefix="/")
        print(f"serving on http://{args.host}:{args.port}/v1 with {args.replicas} replica(s)", flush=True)
        if ready is not None:
            ready.set()
        done = stop or threading.Event()
        if stop is None:
            signal.signal(signal.SIGINT, lambda *_: done.set())
            signal.signal(signal.SIGTERM, lambda *_: done.set())
        done.wait()
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0
