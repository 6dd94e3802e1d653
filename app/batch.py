"""`python -m app.batch`: point/detect one object in every image of a folder.

    python -m app.batch DIR --task detect|point --object TEXT [--out OUT] [--max-objects N]
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
* ``OUT/coco.json``: written at the end for the images of DIR that have a result (see
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
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from app.common import DTYPES, IMAGE_SUFFIXES

RESULTS_NAME = "results.jsonl"
LOADERS = 4  # threads that decode, submit and draw (requests in flight need none)
COCO_NAME = "coco.json"
ANNOTATED_NAME = "annotated"


class UsageError(Exception):
    """Bad invocation or unusable output folder: exit status 2."""


# ---- arguments and files ---------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from engine.skills import DEFAULT_MAX_OBJECTS

    p = argparse.ArgumentParser(prog="python -m app.batch",
                                description="Point/detect one object in every image of a folder (JSONL + COCO).")
    p.add_argument("dir", metavar="DIR", help="folder of images")
    p.add_argument("--task", required=True, choices=("detect", "point"))
    p.add_argument("--object", required=True, metavar="TEXT", help="what to look for, e.g. 'red circle'")
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


def default_out(root: Path) -> Path:
    root = root.resolve()
    if root.parent == root:  # filesystem root
        return Path.cwd() / "annotations"
    return root.parent / f"{root.name}-annotations"


def find_images(root: Path, *, recursive: bool, exclude: Path | None = None) -> list[str]:
    """Relative POSIX paths of the image files under root, sorted; `exclude` (a folder) is skipped."""
    excluded = exclude.resolve() if exclude is not None else None
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if not recursive:
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames
                                 if not d.startswith(".") and (excluded is None or (here / d).resolve() != excluded))
        for name in filenames:
            if name.startswith(".") or Path(name).suffix.lower() not in IMAGE_SUFFIXES:
                continue
            # not only regular files: a FIFO or a broken / looping symlink gets an error record (folders are walked)
            found.append((here / name).relative_to(root).as_posix())
    return sorted(found)


class Journal:
    """results.jsonl: locked for this run, torn tail repaired on open, appended with fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.repaired = 0  # bytes cut off a torn tail
        if path.is_symlink():
            raise UsageError(f"{path} is a symbolic link; refusing to write through it (remove it)")
        self._f = open(path, "a+b")
        try:
            import fcntl
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no lock
            pass
        except OSError:
            self._f.close()
            raise UsageError(f"another app.batch run is using {path.parent} (the results file is locked)") from None
        self._lock = threading.Lock()

    def load(self) -> dict[str, dict]:
        """Records by path (the last line of a path wins), after cutting off a torn tail."""
        self._f.seek(0)
        data = self._f.read()
        records: dict[str, dict] = {}
        good_end, bad_line = 0, None   # byte offset after the last valid line; first invalid line
        offset = 0
        for number, raw in enumerate(data.split(b"\n"), start=1):
            end = offset + len(raw) + 1
            line = raw.strip()
            if line:
                rec = _parse(line)
                if rec is None:
                    bad_line = bad_line or number
                else:
                    if bad_line is not None:
                        raise UsageError(f"{self.path}: line {bad_line} is not a valid record, but later lines are; "
                                         "the file was edited or written by two programs at once; fix or delete "
                                         "that line")
                    records[rec["path"]] = rec
                    good_end = min(end, len(data))
            offset = end
        if good_end < len(data) and bad_line is not None:  # torn tail: cut it off
            self._f.truncate(good_end)
            os.fsync(self._f.fileno())
            self.repaired = len(data) - good_end
        elif data and not data.endswith(b"\n"):  # complete last record missing its newline
            self._write(b"\n")
        return records

    def append(self, record: dict) -> None:
        try:
            line = json.dumps(record, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a file name that is not valid UTF-8: escape it (still round-trips)
            line = json.dumps(record, ensure_ascii=True).encode("ascii")
        self._write(line + b"\n")

    def _write(self, payload: bytes) -> None:
        """One os.write per record (O_APPEND), then fsync: a crash leaves at most a torn last line."""
        with self._lock:
            view = memoryview(payload)
            while view:
                view = view[os.write(self._f.fileno(), view):]
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def _parse(line: bytes) -> dict | None:
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("path"), str):
        return None
    if "result" not in rec and "error" not in rec:
        return None
    return rec


def save_image_atomic(image, target: Path, root: Path) -> None:
    """Save under `root` only (refuses a target that resolves elsewhere), via a temp file + rename."""
    if root.is_symlink() or not target.parent.resolve().is_relative_to(root.resolve()):  # before mkdir creates
        raise OSError(f"refusing to write {target} outside {root}")                    # anything elsewhere
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.parent.resolve().is_relative_to(root.resolve()):
        raise OSError(f"refusing to write {target} outside {root}")
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".tif": "TIFF", ".tiff": "TIFF"}.get(target.suffix.lower(),
                                                                               target.suffix[1:].upper())
    fd, tmp = tempfile.mkstemp(prefix=".draw-", suffix=target.suffix, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            image.save(f, format=fmt, **({"quality": 92} if fmt == "JPEG" else {}))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- the run ---------------------------------------------------------------------------------

@dataclass
class Job:
    root: Path
    task: str
    obj: str
    max_objects: int
    annotated: Path | None
    stop: threading.Event = field(default_factory=threading.Event)


def new_record(job: Job, rel: str) -> dict:
    """The fields every record starts with (width/height filled in once the image is read)."""
    return {"path": rel, "width": None, "height": None, "task": job.task, "object": job.obj,
            "max_objects": job.max_objects}


def request_error(e: Exception) -> str:
    """The recorded error of a request that the engine failed."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def draw_into(job: Job, rel: str, picture, record: dict) -> None:
    """Write OUT/annotated/<rel> for a record with a result; a write failure goes into the record."""
    from app.draw import draw_result

    picture_drawn = draw_result(picture, record["result"], job.obj)
    try:
        save_image_atomic(picture_drawn, job.annotated / rel, job.annotated)
    except OSError as e:
        record["draw_error"] = str(e)


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
    from engine.engine import EngineBusy
    from engine.image import ImageError, load_image

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
            return Submitted(rel, base, start, picture, engine.submit(picture, job.task, job.obj,
                                                                     max_objects=job.max_objects))
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
    record = {**done.base, "result": result, "ms": round((time.perf_counter() - done.start) * 1000.0, 1)}
    if job.annotated is not None:
        draw_into(job, done.rel, done.picture, record)
    return record


def redraw(job: Job, record: dict) -> None:
    """Draw an image recorded by an earlier run (no inference) when its annotated copy is missing."""
    from app.draw import draw_result
    from engine.image import ImageError, load_image

    try:
        picture = load_image(job.root / record["path"])
        drawn = draw_result(picture, record["result"], job.obj)
        save_image_atomic(drawn, job.annotated / record["path"], job.annotated)
    except (ImageError, OSError) as e:
        print(f"warning: could not draw {record['path']}: {e}", file=sys.stderr)


def _install_sigint(handler):
    """Set a SIGINT handler (main thread only); returns the previous one, or None."""
    import signal

    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def drain_on_sigint(job: Job, doing: str):
    """Install the Ctrl-C policy: the first stops new work and lets `doing` finish; the second
    exits at once (every record written so far is complete; a torn one is repaired next run).
    Returns the previous handler, for `_install_sigint` to restore."""

    def on_sigint(signum, frame):
        if job.stop.is_set():
            os._exit(130)
        job.stop.set()
        print(f"\ninterrupted: {doing} (Ctrl-C again to abort)", file=sys.stderr)

    return _install_sigint(on_sigint)


def _show(text: str) -> str:
    """Printable on any UTF-8 stream, even with undecodable file names (shown as \\udcXX)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _count(rec: dict) -> int:
    result = rec.get("result") or {}
    return len(result.get("objects", result.get("points", [])))


def check_prompt_length(weights: str | None, task: str, obj: str) -> None:
    """RequestError when `obj` encodes to more tokens than a prompt may hold (checked once, up front).
    An unreadable checkpoint is left for the model loader to report."""
    from engine.config import TokenConfig
    from engine.engine import DEFAULT_WEIGHTS
    from engine.skills import prompt_ids
    from engine.tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(Path(weights if weights is not None else DEFAULT_WEIGHTS) / "tokenizer.json")
    except Exception:  # noqa: BLE001 - reported by open_engine with the right message
        return
    prompt_ids(TokenConfig(), lambda s: tokenizer.encode(s).ids, task, obj)


def run(args: argparse.Namespace) -> int:
    from engine.skills import validate_request

    if args.ray:
        from app.batch_ray import require_ray
        require_ray()  # UsageError naming the extra when Ray is not installed
    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"{args.dir!r} is not a folder")
    try:
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
            if (rec.get("task"), rec.get("object")) != (args.task, obj):
                raise UsageError(f"{journal.path} holds results for {rec.get('task')} {rec.get('object')!r}, not "
                                 f"{args.task} {obj!r}; choose another --out")
        if args.ray:
            from app.batch_ray import run_ray
            return run_ray(args, root, out, journal, records, images, obj, max_objects)
        return _run(args, root, out, journal, records, images, obj, max_objects)
    finally:
        journal.close()


def plan(args, root: Path, out: Path, records: dict[str, dict], images: list[str], obj: str,
         max_objects: int) -> tuple[list[str], int, Job, list[dict]]:
    """What this run does: (images to infer, images skipped as recorded, the job, records to redraw)."""
    def done(rel: str) -> bool:
        rec = records.get(rel)
        return rec is not None and not ("error" in rec and args.retry_errors)

    todo = [rel for rel in images if not done(rel)]
    skipped = len(images) - len(todo)
    if args.limit is not None:
        todo = todo[: args.limit]
    annotated = out / ANNOTATED_NAME if args.draw else None
    job = Job(root, args.task, obj, max_objects, annotated)
    pending = set(todo)
    redraws = [records[rel] for rel in images if annotated is not None and rel in records
               and "result" in records[rel] and rel not in pending and not (annotated / rel).exists()]
    return todo, skipped, job, redraws


def commit(journal: Journal, records: dict[str, dict], rec: dict, bar) -> bool:
    """Append a finished image's record (and show a failure); returns True when it failed."""
    journal.append(rec)
    records[rec["path"]] = rec
    failed = "error" in rec
    if failed:
        bar.write(_show(f"failed: {rec['path']}: {rec['error']}"), file=sys.stderr)
    bar.update(1)
    return failed


def _run(args, root: Path, out: Path, journal: Journal, records: dict[str, dict], images: list[str], obj: str,
         max_objects: int) -> int:
    from tqdm import tqdm

    from app.common import open_engine
    from engine.checkpoint import CheckpointError

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
    # A few threads load, submit and draw; requests in flight hold no thread. With one thread per
    # request in flight (64 decoding JPEGs beside the engine thread) an H200 run went at 37
    # images/s; with LOADERS threads at 53-58 (README, "Throughput on one GPU").
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
        _install_sigint(previous)
        bar.close()
        pool.shutdown(wait=False, cancel_futures=True)
        if engine is not None:
            engine.close()
    return report(args, root, out, journal, records, images, obj, annotated, skipped=skipped, new_ok=new_ok,
                  new_failed=new_failed, elapsed=time.perf_counter() - started, interrupted=job.stop.is_set())


def report(args, root: Path, out: Path, journal: Journal, records: dict[str, dict], images: list[str], obj: str,
           annotated: Path | None, *, skipped: int, new_ok: int, new_failed: int, elapsed: float,
           interrupted: bool) -> int:
    """Write coco.json, print the summary; returns the exit status."""
    from app.coco import to_coco, write_coco

    current = [records[rel] for rel in images if rel in records]
    write_coco(out / COCO_NAME, to_coco(current, task=args.task, obj=obj))
    failures = [r for r in current if "error" in r]
    objects = sum(_count(r) for r in current)
    new = new_ok + new_failed
    rate = new / elapsed if elapsed > 0 and new else 0.0
    remaining = len(images) - len(current)
    print(f"images: {len(images)} in {root} ({new} new, {skipped} already recorded"
          f"{f', {remaining} left for a later run' if remaining else ''})")
    print(f"objects: {objects} ({args.task} {obj!r})" + (" [points]" if args.task == "point" else ""))
    print(f"failures: {len(failures)}" + (f" ({new_failed} new)" if new_failed else ""))
    for rec in failures[:10]:
        print(_show(f"  {rec['path']}: {rec['error']}"))
    if len(failures) > 10:
        print(f"  ... and {len(failures) - 10} more (see {journal.path})")
    print(f"speed: {rate:.1f} images/s ({new} images in {elapsed:.1f} s)")
    print(f"wrote: {journal.path}, {out / COCO_NAME}" + (f", {annotated}/" if annotated is not None else ""))
    if interrupted:
        return 130
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # argparse exits with 2 on bad arguments
    try:
        return run(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    from app import batch  # the importable module: app.batch_ray raises its UsageError, not __main__'s
    sys.exit(batch.main())
