"""`python -m app.batch`: point/detect one or several object classes in every image given, or
ask every image one question, or caption every image.

    python -m app.batch INPUT [INPUT ...] --task detect|point --object TEXT [--object TEXT ...]
                        [--objects-file FILE] [--format coco[,yolo]] [--min-score S]
                        [--out OUT] [--max-objects N] [--recursive] [--draw] [--weights DIR|ID]
                        [--tokenizer PATH|ID] [--device auto] [--dtype auto] [--window 64] [--limit N] [--retry-errors]
                        [--quiet] [--ray [--address ADDR] [--replicas N] [--gpus-per-replica G]]
    python -m app.batch INPUT ... --task query --question TEXT [--choices A,B,... | --regex R |
                        --schema FILE_OR_JSON] [--max-tokens N] [same input, output, model and Ray options]
    python -m app.batch INPUT ... --task caption [--length short|normal|long] [--max-tokens N] [...]

An INPUT is a folder, an image file, or a text file (.txt/.lst) listing image paths, one a
line (relative to the list's folder). Images (.jpg .jpeg .png .bmp .gif .webp .tif .tiff, any
case; names starting with "." are ignored) are fed to one engine through a bounded window of
images in flight (`--window`, default 64), so the engine batches them. Every class (`--object`,
repeatable, then the lines of `--objects-file`) is asked of every image: one request per class,
one image encode (the prefix cache serves the other classes). Paths are relative to ROOT: the
one folder given, else the deepest folder holding every input. Everything is written under
OUT, nothing elsewhere:

* ``OUT/results.jsonl``: one line per image, appended (flush + fsync) as each completes:
  ``{"path": "sub/a.jpg", "width": 640, "height": 480, "task": "detect", "object": "cat",
  "max_objects": 50, "result": {"objects": [...]}, "ms": 41.2, "queue_ms": 3.5}``
  (normalised coordinates and a ``score`` per object, as the engine returns them; with several
  classes ``object`` is their list and each object names its class in ``label``). ``ms`` is
  the service time (the image's first request leaving the queue to its last result) and
  ``queue_ms`` the wait for a KV row before that (engine clock). An image that could not be
  read has ``"error": "..."`` instead of ``result`` (and null width/height).
* ``OUT/coco.json``: written at the end for the images that have a result (see app/coco.py:
  one category per class; detect -> bbox annotations; point -> one-keypoint annotations with
  a 1x1 px bbox; ``score`` = the object's score). Loadable with ``pycocotools.coco.COCO``.
* with ``--format coco,yolo`` (detect only): ``OUT/labels/``, ``OUT/images/`` (links) and
  ``OUT/data.yaml`` for YOLO trainers (app/yolo.py).
* ``OUT/annotated/<path>`` with ``--draw``: the image with its boxes/points drawn.

Query and caption (one request per image) write results.jsonl only, with the settings in every
record and the engine's result (``Engine.query`` / ``Engine.caption``) under ``result``, its
``answer`` / ``caption`` also at the top level:
``{"path": "a.jpg", "width": 640, "height": 480, "task": "query", "question": "Is there a cat?",
"answer_format": {"choices": ["yes", "no"]}, "max_tokens": null, "result": {"answer": "yes"}, "answer": "yes", ...}``
(``answer_format`` is null for free text, ``{"regex": ...}`` or ``{"json_schema": {...}}``; with a
schema the answer is the parsed JSON value); a caption record has ``"length"`` and
``"result": {"caption": "..."}, "caption": "..."``. ``--format``, ``--draw``, ``--min-score`` and the object options
are refused for them. The question and the answer format are checked as ``python -m engine query``
checks them, with the same one-line errors, before any image is read.

``--min-score S`` leaves objects scoring below S out of coco.json, the YOLO labels, the
drawings and the summary; results.jsonl keeps every object, so a re-run with another S
re-exports without inference.

OUT defaults to ``<ROOT>-annotations`` beside ROOT, or ``./annotations`` when ROOT is the
filesystem root. An OUT inside an input folder is never scanned. Files follow the umask.

Resuming: a re-run with the same OUT skips every image already in results.jsonl (images
recorded with an error too, unless ``--retry-errors``; the newest line of an image wins).
A torn last line left by a crash is detected and cut off (that image is done again). An OUT
holding results for another task or classes is refused, and so is one holding answers to
another question, answer format, caption length or ``--max-tokens`` (one file never mixes answers
to two questions; choose another OUT). Only one run may use an OUT at a time.
``--limit N`` stops after N new images (resume later). Ctrl-C stops submitting, cancels the
requests still queued (not recorded: done again on resume), lets those being decoded finish,
records them, writes the exports and exits with 130; a second Ctrl-C writes coco.json (and
the YOLO export) from what is recorded and aborts at once.

Exit status: 0 when no image failed, 1 when any did (in this run or an earlier one recorded
in OUT), 2 for usage errors (bad arguments, no images, unusable OUT or weights), 130 after
Ctrl-C. With ``--draw``, a re-run also draws recorded images whose annotated copy is missing
(from the recorded result, without inference).

``--ray`` runs the same job as a Ray Data pipeline (app/batch_ray.py: CPU workers decode, N
engine replicas infer) with the same outputs, resume rules and exit statuses; it needs the
optional extra (``pip install -e .[ray]``). Without ``--ray`` nothing imports Ray.
"""

from __future__ import annotations
import argparse
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from app.job import (FORMATS, RESULTS_NAME, TEXT_TASKS, collect_inputs, merge_results, record_timing, result_fields, write_exports, LOADERS, UsageError, default_out, Journal, Job, TextSettings, check_resume, new_record, request_error, draw_into, redraw, install_sigint, drain_on_sigint, check_prompt_length, plan, commit, report)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from engine import DEFAULT_MAX_OBJECTS
    from engine.model.pretrained import add_model_arguments
    from engine.serving.limits import CAPTION_LENGTHS

    p = argparse.ArgumentParser(prog="python -m app.batch",
                                description="Point/detect objects in, ask a question of or caption every image of "
                                            "folders, files or lists (JSONL; COCO, optionally YOLO, for point/detect).")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="a folder of images, an image file, or a .txt/.lst file listing image paths (one a line); "
                        "several may be given")
    p.add_argument("--task", required=True, choices=("detect", "point", *TEXT_TASKS))
    p.add_argument("--object", action="append", default=[], metavar="TEXT",
                   help="point/detect: what to look for, e.g. 'red circle'; repeat for several classes")
    p.add_argument("--objects-file", default=None, metavar="FILE",
                   help="point/detect: a text file with one object class a line (added after any --object)")
    q = p.add_argument_group("query and caption")
    q.add_argument("--question", default=None, metavar="TEXT", help="query: the question asked of every image")
    shape = q.add_mutually_exclusive_group()
    shape.add_argument("--choices", default=None, metavar="A,B,...", help="query: comma-separated answers, e.g. yes,no")
    shape.add_argument("--regex", default=None, metavar="R", help="query: the answer must match this regex as a whole")
    shape.add_argument("--schema", default=None, metavar="FILE_OR_JSON",
                       help="query: JSON schema (a file or inline JSON); the record holds the parsed answer")
    q.add_argument("--length", default=None, choices=CAPTION_LENGTHS, help="caption: length (default normal)")
    q.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="query/caption: answer tokens at most (default: 768 or what fits)")
    p.add_argument("--format", dest="formats", default=None, metavar="LIST",
                   help="point/detect: exports to write besides results.jsonl: 'coco' (default) or 'coco,yolo'")
    p.add_argument("--min-score", type=float, default=0.0, metavar="S",
                   help="leave objects scoring below S (0-1) out of the exports and drawings (default 0; "
                        "results.jsonl keeps every object)")
    p.add_argument("--out", default=None, metavar="OUT",
                   help="output folder (default: <DIR>-annotations beside DIR)")
    p.add_argument("--max-objects", type=int, default=None, metavar="N",
                   help=f"point/detect: most objects per image (default {DEFAULT_MAX_OBJECTS})")
    p.add_argument("--recursive", action="store_true", help="include sub-folders")
    p.add_argument("--draw", action="store_true", help="also write annotated images under OUT/annotated/")
    add_model_arguments(p)
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
                   help="GPUs reserved per replica (default: 1 on CUDA, i.e. --device cuda, or auto on a "
                        "machine with a GPU; else 0)")
    args = p.parse_args(argv)
    if args.task in TEXT_TASKS:
        check_text_arguments(p, args)
        args.formats, args.max_objects = (), DEFAULT_MAX_OBJECTS
        return check_common_arguments(p, args)
    given = [f"--{name.replace('_', '-')}" for name in ("question", "choices", "regex", "schema", "length", "max_tokens")
             if getattr(args, name) is not None]
    if given:
        p.error(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --task query/caption, "
                f"not {args.task}")
    if args.max_objects is None:
        args.max_objects = DEFAULT_MAX_OBJECTS
    if args.formats is None:
        args.formats = "coco"
    formats = tuple(f.strip().lower() for f in args.formats.split(",") if f.strip())
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        p.error(f"--format {args.formats!r}: choose from {', '.join(FORMATS)} (comma-separated)")
    args.formats = tuple(sorted(set(formats) | {"coco"}, key=FORMATS.index))
    if "yolo" in args.formats and args.task == "point":
        p.error("--format yolo writes boxes; use --task detect (points have no box to train on)")
    if not 0.0 <= args.min_score <= 1.0:
        p.error(f"--min-score must be between 0 and 1, got {args.min_score:g}")
    if not args.object and args.objects_file is None:
        p.error("say what to look for: --object TEXT (repeatable) or --objects-file FILE")
    return check_common_arguments(p, args)


def check_text_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what query/caption cannot use: objects, exports, drawings, scores, the other skill's options."""
    other = {"query": ("length",), "caption": ("question", "choices", "regex", "schema")}[args.task]
    given = [f"--{name.replace('_', '-')}" for name in other if getattr(args, name) is not None]
    if args.object or args.objects_file is not None:
        given.append("--object/--objects-file")
    if args.max_objects is not None:
        given.append("--max-objects")
    if given:
        p.error(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} not for --task {args.task}"
                + ("; ask with --question TEXT" if args.task == "query" else ""))
    if args.formats is not None:
        p.error(f"--format writes boxes and points (COCO, YOLO): only for --task detect or point; "
                f"{args.task} answers are written to results.jsonl")
    if args.draw or args.min_score != 0.0:
        p.error(f"--draw and --min-score are for boxes and points, not --task {args.task}")
    if args.task == "query" and args.question is None:
        p.error("--task query needs the question: --question TEXT")
    if args.max_tokens is not None and args.max_tokens < 1:
        p.error("--max-tokens must be at least 1")


def check_common_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
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


@dataclass
class Submitted:
    """An image handed to the engine (one request per class); its record is built when `done`
    (all of `handles` finished) completes."""
    rel: str
    base: dict
    picture: object
    handles: list
    done: Future


def all_done(futures: list[Future]) -> Future:
    """A future that completes when every one of `futures` has."""
    done, left, lock = Future(), [len(futures)], threading.Lock()

    def one(_):
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            done.set_result(None)

    for fut in futures:
        fut.add_done_callback(one)
    return done


def start_one(engine, job: Job, rel: str) -> Submitted | dict | None:
    """Load one image and submit one request per class. Returns the requests in flight, the
    image's error record, or None when stopped before submitting."""
    from engine import EngineBusy
    from engine import ImageError, load_image

    base = new_record(job, rel)
    try:
        picture = load_image(job.root / rel)
    except ImageError as e:
        return {**base, "error": str(e)}
    except Exception as e:  # MemoryError, a decoder bug: this image only
        return {**base, "error": request_error(e)}
    base.update(width=picture.width, height=picture.height)
    handles = []
    for obj, options in job.requests():  # the first request encodes the image; the prefix cache serves the others
        while True:
            if job.stop.is_set():
                for h in handles:
                    h.cancel()
                return None
            try:
                handles.append(engine.submit(picture, job.task, obj, **options))
                break
            except EngineBusy:
                time.sleep(0.05)
            except ImageError as e:
                return {**base, "error": str(e)}
            except Exception as e:  # a request the engine refuses (RequestError) or cannot take: this image only
                for h in handles:
                    h.cancel()
                return {**base, "error": request_error(e)}
    return Submitted(rel, base, picture, handles, all_done([h.future for h in handles]))


def finish_one(job: Job, done: Submitted) -> dict | None:
    """The record of an image whose requests finished (drawn with --draw); None for an image
    whose requests Ctrl-C cancelled (it is done again on resume)."""
    from engine import Cancelled

    results = []
    for handle in done.handles:
        try:
            results.append(handle.future.result(timeout=0))
        except Cancelled:
            if job.stop.is_set():
                return None
            return {**done.base, "error": "Cancelled: the request was cancelled"}
        except Exception as e:  # engine or request failure for this image only
            return {**done.base, "error": request_error(e)}
    record = {**done.base, **result_fields(job.task, merge_results(job.task, job.classes, results)),
              **record_timing(done.handles)}
    if job.annotated is not None:
        draw_into(job, done.rel, done.picture, record)
    return record


def cancel_unstarted(running) -> None:
    """After Ctrl-C: cancel every request still waiting for a KV row (decoding ones finish)."""
    for sub in running:
        for handle in sub.handles:
            if not handle.started():
                handle.cancel()


def read_classes(args) -> tuple[str, ...]:
    """The --object texts then the --objects-file lines, each validated; duplicates refused."""
    from engine.serving.skills import validate_request

    texts = list(args.object)
    if args.objects_file is not None:
        try:
            lines = Path(args.objects_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read --objects-file {args.objects_file!r}: {e}") from None
        texts += [line for line in lines if line.strip() and not line.strip().startswith("#")]
        if not texts:
            raise UsageError(f"--objects-file {args.objects_file!r} names no object (one class a line)")
    classes: list[str] = []
    for text in texts:
        try:
            obj, _ = validate_request(args.task, text, args.max_objects)
            check_prompt_length(args.weights, args.tokenizer, args.task, obj)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if obj in classes:
            raise UsageError(f"the object {obj!r} is given twice; give each class once")
        classes.append(obj)
    return tuple(classes)


def read_text_settings(args) -> TextSettings:
    """A query's / caption's settings, checked as `python -m engine query|caption` checks them
    (same one-line errors): the question, the answer format (schema file read, grammar built)."""
    from engine.serving.answers import answer_from_options, answer_grammar
    from engine.serving.skills import validate_question

    try:
        if args.task == "caption":
            return TextSettings("caption", length=args.length or "normal", max_tokens=args.max_tokens)
        question = validate_question(args.question)
        check_prompt_length(args.weights, args.tokenizer, "query", question)
        answer = answer_from_options(choices=args.choices, regex=args.regex, schema=args.schema)
        answer_grammar(answer)  # a malformed choice list, regex or schema is refused here, not per image
    except ValueError as e:
        raise UsageError(str(e)) from None
    return TextSettings("query", question=question, answer=answer, max_tokens=args.max_tokens)


def check_requests(engine, job: Job) -> None:
    """Refuse, before any image is read, what the engine would refuse for every image (a regex
    that does not compile, a grammar too large, more tokens than a row holds): UsageError with
    the engine's message. The engine is closed on refusal."""
    from engine import RequestError

    try:
        for obj, options in job.requests():
            engine.check_request(job.task, obj, **options)
    except RequestError as e:
        engine.close()
        raise UsageError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    from engine import validate_request

    if args.ray:
        from app.batch_ray import require_ray
        require_ray()  # UsageError naming the extra when Ray is not installed
    if args.task in TEXT_TASKS:  # checked before any image is read, with the CLI's messages
        classes, max_objects, text = (), args.max_objects, read_text_settings(args)
    else:
        classes, text = read_classes(args), None
        try:
            _, max_objects = validate_request(args.task, classes[0], args.max_objects)
        except ValueError as e:
            raise UsageError(str(e)) from None
    single_dir = len(args.inputs) == 1 and Path(args.inputs[0]).is_dir()
    if args.out is None:
        root, _ = collect_inputs(args.inputs, recursive=args.recursive)
        out = default_out(root)
    else:
        out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} exists and is not a folder")
    root, images = collect_inputs(args.inputs, recursive=args.recursive, exclude=out)
    if not images:
        hint = " (use --recursive for sub-folders)" if not args.recursive and single_dir else ""
        raise UsageError(f"no images found in {', '.join(repr(i) for i in args.inputs)}{hint}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create --out {str(out)!r}: {e.strerror or e}") from None

    journal = Journal(out / RESULTS_NAME)
    try:
        records = journal.load()
        if journal.repaired:
            print(f"note: cut a torn last line ({journal.repaired} bytes) off {journal.path}", file=sys.stderr)
        check_resume(journal.path, records, Job(root, args.task, classes, max_objects, None, text=text))
        if args.ray:
            from app.batch_ray import run_ray
            return run_ray(args, root, out, journal, records, images, classes, max_objects, text)
        return _run(args, root, out, journal, records, images, classes, max_objects, text)
    finally:
        journal.close()


def _run(args, root: Path, out: Path, journal: Journal, records: dict[str, dict], images: list[str],
         classes: tuple[str, ...], max_objects: int, text: TextSettings | None = None) -> int:
    from tqdm import tqdm

    from app.common import LOAD_ERRORS, open_engine, startup_line

    todo, skipped, job, redraws = plan(args, root, out, records, images, classes, max_objects, text)

    engine = None
    if todo:
        try:
            engine = open_engine(args.weights, tokenizer=args.tokenizer, device=args.device, dtype=args.dtype,
                                 max_batch=args.max_batch, max_objects=max_objects,
                                 progress=not args.quiet and sys.stderr.isatty())
        except LOAD_ERRORS as e:
            raise UsageError(f"cannot load the model: {e}") from None
        print(startup_line(engine), file=sys.stderr, flush=True)
        check_requests(engine, job)
        engine.start()

    new_ok = new_failed = 0
    started = time.perf_counter()
    # A few threads load, submit and draw; requests in flight hold no thread (measured effect:
    # README, "Throughput on one GPU").
    pool = ThreadPoolExecutor(max_workers=LOADERS, thread_name_prefix="batch")
    bar = tqdm(total=len(todo), unit="img", disable=args.quiet or not todo, file=sys.stderr, dynamic_ncols=True)

    previous = drain_on_sigint(job, "finishing the images being decoded, cancelling the queued ones",
                               lambda: write_exports(job, out, args.formats, [records[r] for r in images if r in records]))
    try:
        side = [pool.submit(redraw, job, rec) for rec in redraws]
        queue = iter(todo)
        working: set[Future] = set()            # start_one / finish_one on the pool
        running: dict[Future, Submitted] = {}   # engine requests (one done-future per image)
        cancelled = False
        while True:
            while not job.stop.is_set() and len(working) + len(running) < args.window:
                rel = next(queue, None)
                if rel is None:
                    break
                working.add(pool.submit(start_one, engine, job, rel))
            if not working and not running:
                break
            if job.stop.is_set() and not cancelled:
                cancel_unstarted(running.values())
                cancelled = True
            finished, _ = wait(working | running.keys(), timeout=0.2, return_when=FIRST_COMPLETED)
            for fut in finished:
                if fut in running:
                    working.add(pool.submit(finish_one, job, running.pop(fut)))
                    continue
                working.discard(fut)
                outcome = fut.result()
                if isinstance(outcome, Submitted):
                    running[outcome.done] = outcome
                    if job.stop.is_set():
                        cancel_unstarted([outcome])
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
    return report(args, root, out, journal, records, images, job, skipped=skipped, new_ok=new_ok,
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
