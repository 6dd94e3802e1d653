"""The annotation job that `python -m app.batch` runs, in one process or on Ray (app/batch_ray.py):
its files under OUT (the JSONL journal, coco.json, annotated copies), resume planning, records,
drawing, the Ctrl-C policy and the final report. Both runners import it; neither imports the other
at module level."""

from __future__ import annotations
import json
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from app.common import IMAGE_SUFFIXES


RESULTS_NAME = "results.jsonl"


LOADERS = 4  # threads that decode, submit and draw (requests in flight need none)


COCO_NAME = "coco.json"


ANNOTATED_NAME = "annotated"


class UsageError(Exception):
    """Bad invocation or unusable output folder: exit status 2."""


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
    if not any(key in rec for key in ("result", "answer", "caption", "error")):
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


@dataclass
class Job:
    root: Path
    task: str
    obj: str
    max_objects: int
    annotated: Path | None
    stop: threading.Event = field(default_factory=threading.Event)
    options: dict = field(default_factory=dict)  # Engine.submit's keyword arguments


def subject_key(task: str | None) -> str:
    """The record field naming what a job asks: the object, the question or the caption length."""
    return {"query": "question", "caption": "length"}.get(task, "object")


def new_record(job: Job, rel: str) -> dict:
    """The fields every record starts with (width/height filled in once the image is read)."""
    if job.task in ("query", "caption"):
        return {"path": rel, "width": None, "height": None, "task": job.task, subject_key(job.task): job.obj}
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


def redraw(job: Job, record: dict) -> None:
    """Draw an image recorded by an earlier run (no inference) when its annotated copy is missing."""
    from app.draw import draw_result
    from engine.model.image import ImageError, load_image

    try:
        picture = load_image(job.root / record["path"])
        drawn = draw_result(picture, record["result"], job.obj)
        save_image_atomic(drawn, job.annotated / record["path"], job.annotated)
    except (ImageError, OSError) as e:
        print(f"warning: could not draw {record['path']}: {e}", file=sys.stderr)


def install_sigint(handler):
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

    return install_sigint(on_sigint)


def _show(text: str) -> str:
    """Printable on any UTF-8 stream, even with undecodable file names (shown as \\udcXX)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _count(rec: dict) -> int:
    result = rec.get("result") or {}
    return len(result.get("objects", result.get("points", [])))


def check_prompt_length(weights: str | None, task: str, obj: str) -> None:
    """RequestError when `obj` encodes to more tokens than a prompt may hold (checked once, up front).
    An unreadable checkpoint is left for the model loader to report."""
    from engine.model.config import TokenConfig
    from engine.serving.engine import DEFAULT_WEIGHTS
    from engine.serving.skills import prompt_ids
    from engine.model.tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(Path(weights if weights is not None else DEFAULT_WEIGHTS) / "tokenizer.json")
    except Exception:  # noqa: BLE001 - reported by open_engine with the right message
        return
    prompt_ids(TokenConfig(), lambda s: tokenizer.encode(s).ids, task, obj)


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
    job = Job(root, args.task, obj, max_objects, annotated, options=submit_options(args, obj, max_objects))
    pending = set(todo)
    redraws = [records[rel] for rel in images if annotated is not None and rel in records
               and "result" in records[rel] and rel not in pending and not (annotated / rel).exists()]
    return todo, skipped, job, redraws


def submit_options(args, subject: str, max_objects: int) -> dict:
    """Engine.submit's keyword arguments for the job's task."""
    if args.task == "query":
        from engine.serving.answers import answer_from_options

        return {"answer": answer_from_options(choices=getattr(args, "choices", None), regex=getattr(args, "regex", None),
                                              schema=getattr(args, "schema", None)),
                "max_tokens": getattr(args, "max_tokens", None)}
    if args.task == "caption":
        return {"length": subject, "max_tokens": getattr(args, "max_tokens", None)}
    return {"max_objects": max_objects}


def commit(journal: Journal, records: dict[str, dict], rec: dict, bar) -> bool:
    """Append a finished image's record (and show a failure); returns True when it failed."""
    journal.append(rec)
    records[rec["path"]] = rec
    failed = "error" in rec
    if failed:
        bar.write(_show(f"failed: {rec['path']}: {rec['error']}"), file=sys.stderr)
    bar.update(1)
    return failed


def report(args, root: Path, out: Path, journal: Journal, records: dict[str, dict], images: list[str], obj: str,
           annotated: Path | None, *, skipped: int, new_ok: int, new_failed: int, elapsed: float,
           interrupted: bool) -> int:
    """Write coco.json, print the summary; returns the exit status."""
    from app.coco import to_coco, write_coco

    current = [records[rel] for rel in images if rel in records]
    text_task = args.task in ("query", "caption")
    if not text_task:
        write_coco(out / COCO_NAME, to_coco(current, task=args.task, obj=obj))
    failures = [r for r in current if "error" in r]
    objects = sum(_count(r) for r in current)
    new = new_ok + new_failed
    rate = new / elapsed if elapsed > 0 and new else 0.0
    remaining = len(images) - len(current)
    print(f"images: {len(images)} in {root} ({new} new, {skipped} already recorded"
          f"{f', {remaining} left for a later run' if remaining else ''})")
    if text_task:
        print(f"answered: {len(current) - len(failures)} ({args.task} {obj!r})")
    else:
        print(f"objects: {objects} ({args.task} {obj!r})" + (" [points]" if args.task == "point" else ""))
    print(f"failures: {len(failures)}" + (f" ({new_failed} new)" if new_failed else ""))
    for rec in failures[:10]:
        print(_show(f"  {rec['path']}: {rec['error']}"))
    if len(failures) > 10:
        print(f"  ... and {len(failures) - 10} more (see {journal.path})")
    print(f"speed: {rate:.1f} images/s ({new} images in {elapsed:.1f} s)")
    print(f"wrote: {journal.path}" + ("" if text_task else f", {out / COCO_NAME}")
          + (f", {annotated}/" if annotated is not None else ""))
    if interrupted:
        return 130
    return 1 if failures else 0

