"""`python -m app`: the point/detect web UI on one shared, batching engine.

    python -m app [--port 7860] [--host 127.0.0.1] [--weights DIR] [--device cpu] [--dtype fp32]

By default it serves the embedded model (assets/model) on 127.0.0.1 only; `--host 0.0.0.0`
exposes it to the network. `--weights DIR` loads another checkpoint directory, for example
an official Moondream 2 one.
"""

from __future__ import annotations

import argparse
import sys

from app.common import DTYPES
from engine.skills import MAX_OBJECTS_LIMIT


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app", description="Moondream point/detect web UI (Gradio).")
    p.add_argument("--port", type=int, default=7860, help="port to listen on (default 7860)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--weights", default=None, metavar="DIR", help="checkpoint directory (default: the embedded model)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default cpu)")
    p.add_argument("--dtype", default="fp32", choices=DTYPES, help="weights/compute dtype (default fp32)")
    p.add_argument("--max-batch", type=int, default=16, help="most requests decoded together (default 16)")
    p.add_argument("--concurrency", type=int, default=32,
                   help="most requests the UI runs at once, all batched by the engine (default 32)")
    p.add_argument("--max-objects-limit", type=int, default=100, metavar="N",
                   help=f"largest 'Max objects' a user may ask for, 1-{MAX_OBJECTS_LIMIT}; the engine's memory "
                        "grows with it "
                        "(default 100)")
    p.add_argument("--samples", default=None, metavar="DIR", help="folder of sample images (default assets/samples)")
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error(f"--port must be between 1 and 65535, got {args.port}")
    if not 1 <= args.max_objects_limit <= MAX_OBJECTS_LIMIT:
        p.error(f"--max-objects-limit must be between 1 and {MAX_OBJECTS_LIMIT}, got {args.max_objects_limit}")
    if args.max_batch < 1 or args.concurrency < 1:
        p.error("--max-batch and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from app.common import open_engine
    from engine.checkpoint import CheckpointError

    try:
        engine = open_engine(args.weights, device=args.device, dtype=args.dtype, max_batch=args.max_batch,
                             max_objects=args.max_objects_limit)
    except (CheckpointError, OSError) as e:
        print(f"error: cannot load the model: {e}", file=sys.stderr)
        return 2
    from app.ui import DEFAULT_SAMPLES, CSS, build_demo

    engine.start()
    try:
        demo = build_demo(engine, samples=args.samples or DEFAULT_SAMPLES, concurrency=args.concurrency,
                          max_objects_limit=args.max_objects_limit)
        demo.launch(server_name=args.host, server_port=args.port, css=CSS, show_error=True,
                    max_threads=max(40, args.concurrency + 8))
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
