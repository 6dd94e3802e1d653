"""`python -m app.batch`: point/detect one object in, ask a question about, or caption every image of a folder.

    python -m app.batch DIR --task detect|point --object TEXT [--out OUT] [--max-objects N]
    python -m app.batch DIR --task query --question TEXT [--choices A,B | --regex R | --schema FILE] [--max-tokens N]
    python -m app.batch DIR --task caption [--length short|normal|long] [--max-tokens N]
                        [--recursive] [--draw] [--weights DIR] [--device cpu] [--dtype fp32]
                        [--window 64] [--limit N] [--retry-errors] [--quiet]
                        [--ray [--address ADDR] [--replicas N] [--gpus-per-replica G]]

Images (.jpg .jpeg .png .bmp .gif .webp .tif .tiff, any case; names starting with "." are
ignored) are fed to one engine through a bounded window of requests in flight (`--window`,
default 64), so the engine batches them. Everything is written under OUT, nothing elsewhere:

* ``OUT/results.jsonl``: one line per image, appended (flush + fsync) as each completes:
  ``{"path": "sub/a.jpg", "width": 640, "height": 480, "task": "detect", "object": "cat",
  "max_objects": 50, "result": {"objects": [...]}, "ms": 41.2}`` (normalised coordinates,
  as the engine returns them; ``path`` is relative to DIR, with "/"), or, for an image that
  could not be read, ``"error": "..."`` instead of ``result`` (and null width/height).
  query/caption records carry the answer instead of ``result``: ``"question": "How many?",
  "answer": "3"`` (the parsed JSON value with ``--schema``) or ``"length": "normal", "caption": "..."``.
* ``OUT/coco.json`` (point/detect only): written at the end for the images of DIR that have a result (see
  app/coco.py: detect -> bbox annotations; point -> one-keypoint annotations with a 1x1 px
  bbox). Loadable with ``pycocotools.coco.COCO``.
* ``OUT/annotated/<path>`` with ``--draw``: the image with its boxes/points drawn.

OUT defaults to ``<DIR>-annotations`` beside DIR (DIR/../<name of DIR>-annotations), or
``./annotations`` when DIR is the filesystem root. An OUT inside DIR is never scanned.

Resuming: a re-run with the same OUT skips every image already in results.jsonl (images
recorded with an error too, unless ``--retry-errors``; the newest line of an image wins).
A torn last line left by a crash is detected and cut off (that image is done again). An OUT
holding results for another task or object is refused. Only one run may use an OUT at a time.
``--limit N`` stops after N new images (resume later). Ctrl-C finishes the requests in flight,
records them, writes coco.json and exits with 130; a second Ctrl-C aborts at once (every line
already written stays valid).

Exit status: 0 when no image of DIR failed, 1 when any did (in this run or an earlier one
recorded in OUT), 2 for usage errors (bad arguments, no images, unusable OUT or weights),
130 after Ctrl-C. With ``--draw``, a re-run also draws recorded images whose annotated copy
is missing (from the recorded result, without inference).

``--ray`` runs the same job as a Ray Data pipeline (app/batch_ray.py: CPU workers decode, N
engine replicas infer) with the same outputs, resume rules and exit statuses; it needs the
optional extra (``pip install -e .[ray]``). Without ``--ray`` nothing imports Ray.
"""

from __future__ import annotations
import argparse
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from app.common import DTYPES
from app.job import (RESULTS_NAME, LOADERS, UsageError, default_out, find_images, Journal, Job, new_record, request_error, draw_into, redraw, install_sigint, drain_on_sigint, check_prompt_length, plan, commit, report, subject_key)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from engine import DEFAULT_MAX_OBJECTS

    p = argparse.ArgumentParser(prog="python -m app.batch",
                                description="Point/detect one object in every image of a folder (JSONL + COCO).")
    p.add_argument("dir", metavar="DIR", help="folder of images")
    p.add_argument("--task", required=True, choices=("detect", "point", "query", "caption"))
    p.add_argument("--object", metavar="TEXT", help="point/detect: what to look for, e.g. 'red circle'")
    p.add_argument("--question", metavar="TEXT", help="query: the question asked of every image")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--choices", metavar="A,B,…", help="query: the answer is one of these (comma-separated)")
    shape.add_argument("--regex", metavar="R", help="query: the answer matches this regex")
    shape.add_argument("--schema", metavar="FILE", help="query: the answer is JSON valid under this schema (file or JSON)")
    p.add_argument("--length", default="normal", choices=("short", "normal", "long"), help="caption length")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N", help="query/caption: answer tokens at most")
    p.add_argument("--out", default=None, metavar="OUT",
                   help="output folder (default: <DIR>-annotations beside DIR)")
    p.add_argument("--max-objects", type=int, default=DEFAULT_MAX_OBJECTS, metavar="N",
                   help=f"most objects per image (default {DEFAULT_MAX_OBJECTS})")
    p.add_argument("--recursive", action="store_true", help="include sub-folders")
    p.add_argument("--draw", action="store_true", help="also write annotated images under OUT/annotated/")
    p.add_argument("--weights", default=None, metavar="DIR", help="checkpoint directory (default: the embedded model)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=DTYPES)
    p.add_argument("--max-batch", type=int, default=16, metavar="N", help="most requests decoded together (default 16)")
    p.add_argument("--window", type=int, default=64, metavar="N",
                   help="most images in flight (default 64; with --ray: images per replica call)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N new images")
    p.add_argument("--retry-errors", action="store_true", help="redo images recorded with an error")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    r = p.add_argument_group("scale-out with Ray (pip install -e .[ray])")
    r.add_argument("--ray", action="store_true", help="run as a Ray Data pipeline (CPU decode, N engine replicas)")
    r.add_argument("--address", default=None, metavar="ADDR",
                   help="Ray cluster to join: 'auto', 'ray://host:10001', 'host:6379' (default: start a local one)")
    r.add_argument("--replicas", type=int, default=1, metavar="N", help="engine replicas (default 1)")
    r.add_argument("--gpus-per-replica", type=float, default=None, metavar="G",
                   help="GPUs reserved per replica (default: 1 with --device cuda, else 0)")
    args = p.parse_args(argv)
    text_task = args.task in ("query", "caption")
    if args.task in ("detect", "point") and args.object is None:
        p.error(f"--task {args.task} needs --object TEXT")
    if args.task == "query" and args.question is None:
        p.error("--task query needs --question TEXT")
    if args.task != "query" and (args.question or args.choices or args.regex or args.schema):
        p.error("--question, --choices, --regex and --schema go with --task query")
    if text_task and (args.draw or args.ray):
        p.error(f"--task {args.task} writes answers only: --draw and --ray go with point/detect")
    for name in ("max_batch", "window", "replicas"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 0:
        p.error("--limit must be 0 or more")
    if args.gpus_per_replica is not None and args.gpus_per_replica < 0:
        p.error("--gpus-per-replica must be 0 or more")
    if not args.ray and (args.address is not None or args.replicas != 1 or args.gpus_per_replica is not None):
        p.error("--address, --replicas and --gpus-per-replica need --ray")
    return args


def text_job(args: argparse.Namespace) -> str:
    """query/caption: check the question and answer format up front; returns the question (query) or
    the caption length, the job's subject. ValueError (RequestError) names what is wrong."""
    from engine.serving.answers import answer_from_options, answer_grammar
    from engine.serving.skills import validate_question

    if args.task == "caption":
        return args.length
    answer_grammar(answer_from_options(choices=args.choices, regex=args.regex, schema=args.schema))
    return validate_question(args.question)


@dataclass
class Submitted:
    """An image handed to the engine; its record is built when `handle.future` completes."""
    rel: str
    base: dict
    start: float
    picture: object
    handle: object


def start_one(engine, job: Job, rel: str) -> Submitted | dict | None:
    """Load one image and submit it. Returns the request in flight, the image's error record,
    or None when stopped before submitting."""
    from engine import EngineBusy
    from engine.model.image import ImageError, load_image

    base = new_record(job, rel)
    start = time.perf_counter()
    try:
        picture = load_image(job.root / rel)
    except ImageError as e:
        return {**base, "error": str(e)}
    except Exception as e:  # MemoryError, a decoder bug: this image only
        return {**base, "error": request_error(e)}
    base.update(width=picture.width, height=picture.height)
    while True:
        if job.stop.is_set():
            return None
        try:
            return Submitted(rel, base, start, picture, engine.submit(picture, job.task, job.obj, **job.options))
        except EngineBusy:
            time.sleep(0.05)
        except ImageError as e:
            return {**base, "error": str(e)}
        except Exception as e:  # a request the engine refuses (RequestError) or cannot take: this image only
            return {**base, "error": request_error(e)}


def finish_one(job: Job, done: Submitted) -> dict:
    """The record of a finished request (drawn with --draw)."""
    try:
        result = done.handle.future.result(timeout=0)
    except Exception as e:  # engine or request failure for this image only
        return {**done.base, "error": request_error(e)}
    ms = round((time.perf_counter() - done.start) * 1000.0, 1)
    record = {**done.base, **result, "ms": ms} if job.task in ("query", "caption") else \
        {**done.base, "result": result, "ms": ms}
    if job.annotated is not None:
        draw_into(job, done.rel, done.picture, record)
    return record


def run(args: argparse.Namespace) -> int:
    from engine.serving.skills import validate_request

    if args.ray:
        from app.batch_ray import require_ray
        require_ray()  # UsageError naming the extra when Ray is not installed
    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"{args.dir!r} is not a folder")
    try:
        if args.task in ("query", "caption"):
            obj, max_objects = text_job(args), args.max_objects  # max_objects: unused by text tasks
        else:
            obj, max_objects = validate_request(args.task, args.object, args.max_objects)
            check_prompt_length(args.weights, args.task, obj)
    except ValueError as e:
        raise UsageError(str(e)) from None
    out = Path(args.out) if args.out is not None else default_out(root)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} exists and is not a folder")
    images = find_images(root, recursive=args.recursive, exclude=out)
    if not images:
        hint = "" if args.recursive else " (use --recursive for sub-folders)"
        raise UsageError(f"no images found in {str(root)!r}{hint}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create --out {str(out)!r}: {e.strerror or e}") from None

    journal = Journal(out / RESULTS_NAME)
    try:
        records = journal.load()
        if journal.repaired:
            print(f"note: cut a torn last line ({journal.repaired} bytes) off {journal.path}", file=sys.stderr)
        for rec in records.values():
            if (rec.get("task"), rec.get(subject_key(args.task))) != (args.task, obj):
                raise UsageError(f"{journal.path} holds results for {rec.get('task')} "
                                 f"{rec.get(subject_key(rec.get('task')))!r}, not "
                                 f"{args.task} {obj!r}; choose another --out")
        if args.ray:
            from app.batch_ray import run_ray
            return run_ray(args, root, out, journal, records, images, obj, max_objects)
        return _run(args, root, out, journal, records, images, obj, max_objects)
    finally:
        journal.close()


def _run(args, root: Path, out: Path, journal: Journal, records: dict[str, dict], images: list[str], obj: str,
         max_objects: int) -> int:
    from tqdm import tqdm

    from app.common import open_engine
    from engine.model.checkpoint import CheckpointError

    todo, skipped, job, redraws = plan(args, root, out, records, images, obj, max_objects)
    annotated = job.annotated

    engine = None
    if todo:
        try:
            engine = open_engine(args.weights, device=args.device, dtype=args.dtype, max_batch=args.max_batch,
                                 max_objects=max_objects)
        except (CheckpointError, OSError) as e:
            raise UsageError(f"cannot load the model: {e}") from None
        engine.start()

    new_ok = new_failed = 0
    started = time.perf_counter()
    # A few threads load, submit and draw; requests in flight hold no thread (measured effect:
    # README, "Throughput on one GPU").
    pool = ThreadPoolExecutor(max_workers=LOADERS, thread_name_prefix="batch")
    bar = tqdm(total=len(todo), unit="img", disable=args.quiet or not todo, file=sys.stderr, dynamic_ncols=True)

    previous = drain_on_sigint(job, "finishing the images in flight")
    try:
        side = [pool.submit(redraw, job, rec) for rec in redraws]
        queue = iter(todo)
        working: set[Future] = set()            # start_one / finish_one on the pool
        running: dict[Future, Submitted] = {}   # engine requests
        while True:
            while not job.stop.is_set() and len(working) + len(running) < args.window:
                rel = next(queue, None)
                if rel is None:
                    break
                working.add(pool.submit(start_one, engine, job, rel))
            if not working and not running:
                break
            finished, _ = wait(working | running.keys(), return_when=FIRST_COMPLETED)
            for fut in finished:
                if fut in running:
                    working.add(pool.submit(finish_one, job, running.pop(fut)))
                    continue
                working.discard(fut)
                outcome = fut.result()
                if isinstance(outcome, Submitted):
                    running[outcome.handle.future] = outcome
                elif outcome is not None:
                    if commit(journal, records, outcome, bar):
                        new_failed += 1
                    else:
                        new_ok += 1
        wait(side)
    finally:
        install_sigint(previous)
        bar.close()
        pool.shutdown(wait=False, cancel_futures=True)
        if engine is not None:
            engine.close()
    return report(args, root, out, journal, records, images, obj, annotated, skipped=skipped, new_ok=new_ok,
                  new_failed=new_failed, elapsed=time.perf_counter() - started, interrupted=job.stop.is_set())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # argparse exits with 2 on bad arguments
    try:
        return run(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2



if __name__ == "__main__":
    sys.exit(main())
