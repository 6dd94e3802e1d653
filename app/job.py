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
from app.common import IMAGE_SUFFIXES, follow_umask
from engine.serving.limits import TEXT_SKILLS


RESULTS_NAME = "results.jsonl"


LOADERS = 4  # threads that decode, submit and draw (requests in flight need none)


COCO_NAME = "coco.json"


FORMATS = ("coco", "yolo")  # exports besides the journal (coco.json is always written)


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


LIST_SUFFIXES = frozenset({".txt", ".lst"})  # an input with one of these suffixes lists image paths, one a line


def collect_inputs(inputs: list[str], *, recursive: bool, exclude: Path | None = None) -> tuple[Path, list[str]]:
    """The images named by `inputs` (folders, image files, or text files listing paths — one a
    line, relative to the list's folder; blank lines and lines starting with "#" are skipped) as
    (root, relative POSIX paths under root, sorted and without duplicates). root is the one
    folder given, else the deepest folder holding every input."""
    found: list[str] = []   # absolute, not normalised through symlinks
    anchors: list[str] = []  # folders that the common root must contain

    def add(item: str, base: str, listed_in: str | None = None) -> None:
        path = os.path.abspath(os.path.join(base, item))
        if os.path.isdir(path):
            anchors.append(path)
            found.extend(os.path.join(path, rel) for rel in find_images(Path(path), recursive=recursive,
                                                                         exclude=exclude))
        elif listed_in is None and Path(path).suffix.lower() in LIST_SUFFIXES and os.path.isfile(path):
            try:
                lines = Path(path).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as e:
                raise UsageError(f"cannot read the list of images {item!r}: {e}") from None
            for line in lines:
                if line.strip() and not line.strip().startswith("#"):
                    add(line.strip(), os.path.dirname(path), item)
        elif listed_in is None and not os.path.lexists(path):
            raise UsageError(f"{item!r} does not exist")
        elif listed_in is None and Path(path).suffix.lower() not in IMAGE_SUFFIXES:
            raise UsageError(f"{item!r} is neither a folder, an image ({', '.join(sorted(IMAGE_SUFFIXES))}) "
                             f"nor a list of image paths ({', '.join(sorted(LIST_SUFFIXES))})")
        else:  # an image file, or a listed path (a missing one gets an error record, like an unreadable image)
            anchors.append(os.path.dirname(path))
            found.append(path)

    for item in inputs:
        add(item, os.getcwd())
    if not anchors:
        return Path(os.path.abspath(inputs[0]) if inputs else "."), []
    root = os.path.commonpath(anchors)
    return Path(root), sorted({Path(os.path.relpath(p, root)).as_posix() for p in found})


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
        follow_umask(fd)
        with os.fdopen(fd, "wb") as f:
            image.save(f, format=fmt, **({"quality": 92} if fmt == "JPEG" else {}))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


TEXT_TASKS = TEXT_SKILLS  # answers in results.jsonl only: no COCO/YOLO export, no drawing


@dataclass(frozen=True)
class TextSettings:
    """What a query/caption run asks of every image: one request per image. Recorded with every
    answer; a resumed run must ask the same (`identity`)."""
    task: str
    question: str = ""           # query: the cleaned question
    answer: object = None        # query: the answer format (engine.serving.answers), None = free text
    length: str = "normal"       # caption
    max_tokens: int | None = None  # None: the engine's default

    def record_fields(self) -> dict:
        from engine.serving.answers import describe_format

        if self.task == "query":
            return {"question": self.question, "answer_format": describe_format(self.answer),
                    "max_tokens": self.max_tokens}
        return {"length": self.length, "max_tokens": self.max_tokens}

    def request(self) -> tuple[str, dict]:
        """`Engine.submit`'s text and options."""
        if self.task == "query":
            return self.question, {"answer": self.answer, "max_tokens": self.max_tokens}
        return "", {"length": self.length, "max_tokens": self.max_tokens}


@dataclass
class Job:
    root: Path
    task: str
    classes: tuple[str, ...]  # the object texts, in --object order (COCO category i + 1, YOLO class i); () for text
    max_objects: int
    annotated: Path | None
    min_score: float = 0.0
    text: TextSettings | None = None  # query/caption
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def object_field(self) -> str | list[str]:
        """The record's "object": the text of a one-class run, else the list of classes."""
        return object_field(self.classes)

    def requests(self) -> list[tuple[str, dict]]:
        """`Engine.submit`'s (text, options) of every request made for one image: one per class
        (point/detect), or the one query/caption."""
        if self.text is not None:
            return [self.text.request()]
        return [(obj, {"max_objects": self.max_objects}) for obj in self.classes]

    def identity(self) -> dict:
        """The record fields a resumed run must share with the records already in OUT."""
        if self.text is not None:
            return {"task": self.task, **self.text.record_fields()}
        return {"task": self.task, "object": self.object_field}


def object_field(classes: tuple[str, ...]) -> str | list[str]:
    return classes[0] if len(classes) == 1 else list(classes)


def new_record(job: Job, rel: str) -> dict:
    """The fields every record starts with (width/height filled in once the image is read)."""
    base = {"path": rel, "width": None, "height": None}
    if job.text is not None:
        return {**base, **job.identity()}
    return {**base, "task": job.task, "object": job.object_field, "max_objects": job.max_objects}


def check_resume(path: Path, records: dict[str, dict], job: Job) -> None:
    """UsageError when OUT holds records of other settings (another task, classes, question,
    answer format, length or token cap): answers to two questions never share one results file."""
    wanted = job.identity()
    for rec in records.values():
        if job.text is None and (rec.get("task"), rec.get("object")) != (wanted["task"], wanted["object"]):
            raise UsageError(f"{path} holds results for {rec.get('task')} {rec.get('object')!r}, not "
                             f"{job.task} {wanted['object']!r}; choose another --out")
        differ = [k for k, v in wanted.items() if rec.get(k, "(none)") != v]
        if differ:
            k = differ[0]
            there = json.dumps(rec[k], ensure_ascii=False) if k in rec else "(none)"
            raise UsageError(f"{path} holds {rec.get('task')} results of other settings ({k} {there} there, "
                             f"{json.dumps(wanted[k], ensure_ascii=False)} now); resume with the same settings, "
                             "or choose another --out")


def result_fields(task: str, result: dict) -> dict:
    """A record's result fields: `"result"` (what the engine returned) and, for a query or caption,
    its `"answer"` / `"caption"` at the top level too, where a reader of the JSONL looks first."""
    return {"result": result, **(result if task in TEXT_TASKS else {})}


def merge_results(task: str, classes: tuple[str, ...], results: list[dict]) -> dict:
    """One image's result from its per-class results: unchanged for one class (or a query's /
    caption's one answer); with several, every object of every class in one list, class order,
    each with its "label"."""
    if len(results) == 1:
        return results[0]
    key = "objects" if task == "detect" else "points"
    return {key: [{**o, "label": label} for label, result in zip(classes, results) for o in result[key]]}


def kept(classes: tuple[str, ...], result: dict, min_score: float) -> list[tuple[int, dict]]:
    """(class index, object) of a result's objects scoring at least `min_score` (records written
    before scores existed count as 1.0)."""
    items = result.get("objects", result.get("points", []))
    return [(classes.index(o.get("label", classes[0])), o) for o in items if o.get("score", 1.0) >= min_score]


def shown_result(job: Job, result: dict) -> dict:
    """The result with only the objects at or above --min-score (what COCO, YOLO and drawings show)."""
    key = "objects" if "objects" in result else "points"
    return {key: [o for _, o in kept(job.classes, result, job.min_score)]}


def record_timing(handles) -> dict:
    """`ms` (service: first admission to last result) and `queue_ms` (waiting for a KV row) of an
    image's requests, from the engine's clock."""
    seqs = [h.seq for h in handles if h.seq.admitted_at is not None]
    if not seqs:
        return {}
    start = min(s.admitted_at for s in seqs)
    end = max(s.finished_at or s.admitted_at for s in seqs)
    return {"ms": round((end - start) * 1000.0, 1),
            "queue_ms": round((start - min(s.submitted_at for s in seqs)) * 1000.0, 1)}


def request_error(e: Exception) -> str:
    """The recorded error of a request that the engine failed."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def draw_into(job: Job, rel: str, picture, record: dict) -> None:
    """Write OUT/annotated/<rel> for a record with a result; a write failure goes into the record."""
    from app.draw import draw_result

    picture_drawn = draw_result(picture, shown_result(job, record["result"]), job.classes[0])
    try:
        save_image_atomic(picture_drawn, job.annotated / rel, job.annotated)
    except OSError as e:
        record["draw_error"] = str(e)


def redraw(job: Job, record: dict) -> None:
    """Draw an image recorded by an earlier run (no inference) when its annotated copy is missing."""
    from app.draw import draw_result
    from engine import ImageError, load_image

    try:
        picture = load_image(job.root / record["path"])
        drawn = draw_result(picture, shown_result(job, record["result"]), job.classes[0])
        save_image_atomic(drawn, job.annotated / record["path"], job.annotated)
    except (ImageError, OSError) as e:
        print(f"warning: could not draw {record['path']}: {e}", file=sys.stderr)


def install_sigint(handler):
    """Set a SIGINT handler (main thread only); returns the previous one, or None."""
    import signal

    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, handler)


def drain_on_sigint(job: Job, doing: str, on_abort=None):
    """Install the Ctrl-C policy: the first stops new work and lets `doing` finish; the second
    calls `on_abort` (write coco.json from what is recorded) and exits at once (every record
    written so far is complete; a torn one is repaired next run). Returns the previous handler,
    for `install_sigint` to restore."""

    def on_sigint(signum, frame):
        if job.stop.is_set():
            if on_abort is not None:
                try:
                    on_abort()
                except Exception as e:  # noqa: BLE001 - aborting anyway; say why the export is stale
                    print(f"\nwarning: could not write the exports: {e}", file=sys.stderr)
            os._exit(130)
        job.stop.set()
        print(f"\ninterrupted: {doing} (Ctrl-C again to abort)", file=sys.stderr)

    return install_sigint(on_sigint)


def _show(text: str) -> str:
    """Printable on any UTF-8 stream, even with undecodable file names (shown as \\udcXX)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def check_prompt_length(weights: str | None, tokenizer: str | None, task: str, obj: str) -> None:
    """RequestError when `obj` encodes to more tokens than a prompt may hold (checked once, up front,
    with a local tokenizer.json; a Hub id is not fetched here). An unusable one is left for the model
    loader to report."""
    from engine.model.config import TokenConfig
    from engine import DEFAULT_WEIGHTS
    from engine.serving.skills import prompt_ids, query_prompt_ids
    from engine.model.tokenizer import load_tokenizer

    try:
        tok = load_tokenizer(tokenizer if tokenizer is not None
                             else Path(weights if weights is not None else DEFAULT_WEIGHTS) / "tokenizer.json")
    except Exception:  # noqa: BLE001 - reported by open_engine with the right message
        return
    encode = lambda s: tok.encode(s).ids  # noqa: E731
    if task == "query":
        query_prompt_ids(TokenConfig(), encode, obj)
    else:
        prompt_ids(TokenConfig(), encode, task, obj)


def plan(args, root: Path, out: Path, records: dict[str, dict], images: list[str], classes: tuple[str, ...],
         max_objects: int, text: TextSettings | None = None) -> tuple[list[str], int, Job, list[dict]]:
    """What this run does: (images to infer, images skipped as recorded, the job, records to redraw)."""
    def done(rel: str) -> bool:
        rec = records.get(rel)
        return rec is not None and not ("error" in rec and args.retry_errors)

    todo = [rel for rel in images if not done(rel)]
    skipped = len(images) - len(todo)
    if args.limit is not None:
        todo = todo[: args.limit]
    annotated = out / ANNOTATED_NAME if args.draw else None
    job = Job(root, args.task, classes, max_objects, annotated, min_score=args.min_score, text=text)
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


def write_exports(job: Job, out: Path, formats: tuple[str, ...], current: list[dict]) -> list[Path]:
    """coco.json (always) and, with "yolo" in `formats`, the YOLO labels and data.yaml, from the
    records of this run's images; objects below --min-score are left out. Returns what was written
    (nothing for query/caption: their answers are in results.jsonl only)."""
    from app.coco import to_coco, write_coco

    if job.text is not None:
        return []

    shown = [{**r, "result": shown_result(job, r["result"])} if "result" in r else r for r in current]
    write_coco(out / COCO_NAME, to_coco(shown, task=job.task, classes=job.classes))
    written = [out / COCO_NAME]
    if "yolo" in formats:
        from app.yolo import write_yolo

        written += write_yolo(out, job.root, shown, job.classes)
    return written


def report(args, root: Path, out: Path, journal: Journal, records: dict[str, dict], images: list[str], job: Job,
           *, skipped: int, new_ok: int, new_failed: int, elapsed: float, interrupted: bool) -> int:
    """Write coco.json (and the YOLO export), print the summary; returns the exit status."""
    current = [records[rel] for rel in images if rel in records]
    written = write_exports(job, out, args.formats, current)
    failures = [r for r in current if "error" in r]
    new = new_ok + new_failed
    rate = new / elapsed if elapsed > 0 and new else 0.0
    remaining = len(images) - len(current)
    print(f"images: {len(images)} in {root} ({new} new, {skipped} already recorded"
          f"{f', {remaining} left for a later run' if remaining else ''})")
    if job.text is not None:
        answered = sum("result" in r for r in current)
        what = repr(job.text.question) if job.task == "query" else job.text.length
        print(f"{'answers' if job.task == 'query' else 'captions'}: {answered} ({job.task} {what})")
    else:
        objects = sum(len(kept(job.classes, r["result"], job.min_score)) for r in current if "result" in r)
        what = ", ".join(repr(c) for c in job.classes)
        print(f"objects: {objects} ({args.task} {what})" + (" [points]" if args.task == "point" else "")
              + (f", score >= {job.min_score:g}" if job.min_score > 0 else ""))
    print(f"failures: {len(failures)}" + (f" ({new_failed} new)" if new_failed else ""))
    for rec in failures[:10]:
        print(_show(f"  {rec['path']}: {rec['error']}"))
    if len(failures) > 10:
        print(f"  ... and {len(failures) - 10} more (see {journal.path})")
    print(f"speed: {rate:.1f} images/s ({new} images in {elapsed:.1f} s)")
    shown = [str(journal.path)] + [f"{p}/" if p.is_dir() else str(p) for p in written]
    print("wrote: " + ", ".join(shown) + (f", {job.annotated}/" if job.annotated is not None else ""))
    if interrupted:
        return 130
    return 1 if failures else 0
