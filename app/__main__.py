"""`python -m app`: the point/detect web UI on one shared, batching engine.

    python -m app [--port 7860] [--host 127.0.0.1] [--auth USER:PASSWORD] [--weights DIR|ID]
                  [--tokenizer PATH|ID] [--device auto] [--dtype auto] [--max-upload-mb 25] [--timeout 300]

By default it serves the embedded model (assets/model) on 127.0.0.1 only; `--host 0.0.0.0`
exposes it to the network (a warning is printed; add `--auth` to require a password).
`--weights` loads another checkpoint directory or a Hub id, e.g. `vikhyatk/moondream2` (downloaded
once into the Hugging Face cache, with a progress bar; `--device auto` picks CUDA + bf16 when present).
The console shows loading progress and a model line; the UI header names the same.
Uploads larger than `--max-upload-mb` are refused by Gradio; a request not done within
`--timeout` seconds is stopped with a clear error. Gradio serves no files beyond its own
upload/cache folders (no `allowed_paths`).
"""

from __future__ import annotations

import argparse
import os
import sys

from engine import MAX_OBJECTS_LIMIT, UI_MAX_OBJECTS
from engine.model.pretrained import add_model_arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app", description="Moondream point/detect web UI (Gradio).")
    p.add_argument("--port", type=int, default=7860, help="port to listen on (default 7860)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--auth", default=None, metavar="USER:PASSWORD",
                   help="require this user name and password (Gradio login); also read from $APP_AUTH")
    add_model_arguments(p)
    p.add_argument("--max-batch", type=int, default=16, help="most requests decoded together (default 16)")
    p.add_argument("--concurrency", type=int, default=32,
                   help="most requests the UI runs at once, all batched by the engine (default 32)")
    p.add_argument("--max-objects-limit", type=int, default=UI_MAX_OBJECTS, metavar="N",
                   help=f"largest 'Max objects' a user may ask for, 1-{MAX_OBJECTS_LIMIT}; the engine's memory "
                        f"grows with it (default {UI_MAX_OBJECTS})")
    p.add_argument("--samples", default=None, metavar="DIR", help="folder of sample images (default assets/samples)")
    p.add_argument("--max-upload-mb", type=float, default=25.0, metavar="MB",
                   help="largest upload accepted, in MiB (default 25); larger ones are refused")
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                   help="deadline of one request (default 300 s); a slower one is stopped with an error")
    args = p.parse_args(argv)
    if args.auth is None and os.environ.get("APP_AUTH"):
        args.auth = os.environ["APP_AUTH"]
    if args.auth is not None:
        user, sep, password = args.auth.partition(":")
        if not sep or not user or not password:
            p.error("--auth must look like USER:PASSWORD (both non-empty)")
        args.auth = (user, password)
    if not (0 < args.max_upload_mb <= 1024):
        p.error(f"--max-upload-mb must be more than 0 and at most 1024, got {args.max_upload_mb:g}")
    if not (0 < args.timeout <= 24 * 3600):
        p.error(f"--timeout must be more than 0 and at most 86400 seconds, got {args.timeout:g}")
    if not 0 < args.port < 65536:
        p.error(f"--port must be between 1 and 65535, got {args.port}")
    if not 1 <= args.max_objects_limit <= MAX_OBJECTS_LIMIT:
        p.error(f"--max-objects-limit must be between 1 and {MAX_OBJECTS_LIMIT}, got {args.max_objects_limit}")
    if args.max_batch < 1 or args.concurrency < 1:
        p.error("--max-batch and --concurrency must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from app.common import LOAD_ERRORS, open_engine, startup_line, warm_up

    try:
        engine = open_engine(args.weights, tokenizer=args.tokenizer, device=args.device, dtype=args.dtype,
                             max_batch=args.max_batch, max_objects=args.max_objects_limit, progress=sys.stderr.isatty())
    except LOAD_ERRORS as e:
        print(f"error: cannot load the model: {e}", file=sys.stderr)
        return 2
    print(startup_line(engine), file=sys.stderr, flush=True)
    from app.ui import DEFAULT_SAMPLES, LOCAL_HOSTS, build_demo, launch

    if args.host not in LOCAL_HOSTS:
        print(f"warning: --host {args.host} makes the UI reachable from other machines"
              + ("" if args.auth else "; anyone who can connect can use it (add --auth USER:PASSWORD)"),
              file=sys.stderr, flush=True)
    warm_up(engine)   # on a GPU: the CUDA graphs now, not during the first requests
    engine.start()
    try:
        demo = build_demo(engine, samples=args.samples or DEFAULT_SAMPLES, concurrency=args.concurrency,
                          max_objects_limit=args.max_objects_limit, timeout=args.timeout)
        launch(demo, host=args.host, port=args.port, auth=args.auth,
               max_file_size=int(args.max_upload_mb * 1024 * 1024), max_threads=max(40, args.concurrency + 8))
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
