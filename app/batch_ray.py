"""`python -m app.batch DIR ... --ray`: the bulk annotation job as a Ray Data pipeline.

    image paths ──► decode on CPU workers ──► N engine replicas ──► driver: JSONL, COCO, drawings
    (driver)        map_batches (tasks)       map_batches (actors)    iter_batches, as results stream

* **decode** (Ray tasks, one CPU each): every image is read and decoded with
  ``engine.model.image.load_image`` (EXIF, colour modes, size limit: exactly what the single-process
  path does) into RGB uint8 pixels, shipped on as raw bytes + width/height. An image that cannot
  be read becomes an error row, never an exception.
* **infer** (:class:`EngineReplica`, an actor pool of ``--replicas`` actors with
  ``--gpus-per-replica`` GPUs each): each actor holds one :class:`~engine.serving.engine.Engine`, submits
  a whole batch (``--window`` images) at once so the engine decodes them together, then collects
  the results.
* **driver**: consumes the rows as they stream, turns each into the record the single-process
  path writes (``app.job.new_record`` / ``commit`` / ``report``: same JSONL lines, same COCO, same
  ``--draw`` output, same resume and exit rules), drawing on a small local thread pool.

Nothing here imports Ray at module level; ``require_ray`` turns a missing install into a usage
error naming the extra. Requirements on a multi-node cluster: the ``mdpipe`` package (with the
``ray`` extra) installed on every node, and DIR and ``--weights`` readable at the same paths on
every node (a shared filesystem); OUT is written by the driver only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from app.job import (Job, result_fields, write_exports, UsageError, commit, drain_on_sigint, draw_into, install_sigint, new_record,
                       plan, redraw, report, request_error)

RAY_EXTRA_HINT = "install with pip install -e .[ray]"
DECODE_BATCH = 8        # images per decode batch (and per input block, for small folders)
MAX_INPUT_BLOCKS = 1000  # larger folders get larger input blocks
DRAW_THREADS = 4


def require_ray():
    """Import Ray (Data) or raise a UsageError that says how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise UsageError(f"--ray needs Ray Data, which is not installed ({e}); {RAY_EXTRA_HINT}") from None
    return ray


# ---- stage 1: decode on CPU workers -----------------------------------------------------------

def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "surrogatepass")


def _blob(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8", "surrogatepass")


def decode_batch(batch):
    """Rows (idx, file) -> (idx, width, height, pixels, error, ms): RGB uint8 bytes, or the read error."""
    import numpy as np
    import pyarrow as pa

    from engine import ImageError, load_image

    out = {"idx": [], "width": [], "height": [], "pixels": [], "error": [], "ms": []}
    for idx, file in zip(batch.column("idx").to_pylist(), batch.column("file").to_pylist()):
        start = time.perf_counter()
        width = height = pixels = error = None
        try:
            picture = load_image(os.fsdecode(file))
            pixels = np.asarray(picture, dtype=np.uint8).tobytes()  # H x W x 3
            width, height = picture.size
        except ImageError as e:
            error = _blob(str(e))
        except Exception as e:  # MemoryError, a decoder bug: this image only (as app.batch.start_one)
            error = _blob(request_error(e))
        out["idx"].append(idx)
        out["width"].append(width)
        out["height"].append(height)
        out["pixels"].append(pixels)
        out["error"].append(error)
        out["ms"].append((time.perf_counter() - start) * 1000.0)
    return pa.table({"idx": pa.array(out["idx"], pa.int64()), "width": pa.array(out["width"], pa.int64()),
                     "height": pa.array(out["height"], pa.int64()),
                     "pixels": pa.array(out["pixels"], pa.large_binary()),  # large: no 2 GiB limit per column
                     "error": pa.array(out["error"], pa.large_binary()), "ms": pa.array(out["ms"], pa.float64())})


# ---- stage 2: engine replicas -----------------------------------------------------------------

class EngineReplica:
    """One engine per actor; each call submits its whole batch, then collects every result.
    Two calls may run at once (threads of the actor): the engine is thread-safe and batches them."""

    def __init__(self, *, weights: str | None, tokenizer: str | None, device: str, dtype: str, max_batch: int,
                 max_objects: int, task: str, classes: tuple[str, ...], requests: list[tuple[str, dict]]) -> None:
        from app.common import open_engine

        self.task, self.classes, self.requests = task, tuple(classes), list(requests)  # requests: Job.requests()
        self.engine = open_engine(weights, tokenizer=tokenizer, device=device, dtype=dtype, max_batch=max_batch,
                                  max_objects=max_objects)
        for obj, options in self.requests:  # a request no image can pass fails the run, not every image
            self.engine.check_request(task, obj, **options)
        self.engine.start()

    def __call__(self, batch):
        import numpy as np
        import pyarrow as pa

        from engine import EngineBusy
        from engine import ImageError

        from app.job import merge_results, record_timing

        rows = batch.select(["idx", "width", "height", "pixels", "error", "ms"]).to_pylist()
        handles: list[list] = [[] for _ in rows]
        results: list[str | None] = [None] * len(rows)
        errors: list[bytes | None] = [row["error"] for row in rows]
        timing: list[dict] = [{} for _ in rows]

        for i, row in enumerate(rows):  # submit everything (one request per class), then collect
            if row["error"] is not None:
                continue
            pixels = np.frombuffer(row["pixels"], dtype=np.uint8).reshape(row["height"], row["width"], 3)
            for obj, options in self.requests:
                while errors[i] is None:
                    try:
                        handles[i].append(self.engine.submit(pixels, self.task, obj, **options))
                        break
                    except EngineBusy:  # queue full: wait for an earlier request of this batch, then retry
                        pending = [h for hs in handles[:i + 1] for h in hs if not h.future.done()]
                        if pending:
                            wait([pending[0].future], timeout=1.0)
                        else:
                            time.sleep(0.05)
                    except ImageError as e:
                        errors[i] = _blob(str(e))
                    except Exception as e:  # a request the engine refuses or cannot take: this image only
                        errors[i] = _blob(request_error(e))
        for i, hs in enumerate(handles):
            if not hs:
                continue
            try:
                found = [h.result() for h in hs]
            except Exception as e:  # engine or request failure for this image only
                if errors[i] is None:
                    errors[i] = _blob(request_error(e))
                continue
            if errors[i] is None:
                results[i] = json.dumps(merge_results(self.task, self.classes, found))
                timing[i] = record_timing(hs)
        return pa.table({"idx": pa.array([row["idx"] for row in rows], pa.int64()),
                         "width": pa.array([row["width"] for row in rows], pa.int64()),
                         "height": pa.array([row["height"] for row in rows], pa.int64()),
                         "result": pa.array(results, pa.large_string()),
                         "error": pa.array(errors, pa.large_binary()),
                         "load_ms": pa.array([row["ms"] for row in rows], pa.float64()),
                         "ms": pa.array([t.get("ms") for t in timing], pa.float64()),
                         "queue_ms": pa.array([t.get("queue_ms") for t in timing], pa.float64())})

    def __del__(self):
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


# ---- the driver -------------------------------------------------------------------------------

def _connect(ray, address: str | None) -> bool:
    """Join the cluster at `address`, or start a local one; False when this process already had a session."""
    import signal

    if ray.is_initialized():
        return False
    # A local cluster's processes inherit an ignored SIGINT: a terminal Ctrl-C then reaches only this
    # driver, which records what has arrived and shuts the cluster down (instead of the cluster
    # dying under it and leaving orphaned agents behind).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread and address is None else None
    try:
        if address is not None:
            ray.init(address=address, logging_level=logging.WARNING)
        else:
            ray.init(include_dashboard=False, logging_level=logging.WARNING)
    except Exception as e:
        raise UsageError(f"cannot start or join the Ray cluster{f' at {address!r}' if address else ''}: "
                         f"{_first_line(e)}") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return True


def _first_line(e: BaseException) -> str:
    """The user-facing line of an exception, Ray's wrapped ones included (their last line)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return lines[-1] if len(lines) > 1 else lines[0]


def _check_weights(args) -> None:
    """Fail like the single-process path (exit 2) on an unusable checkpoint, before Ray starts.

    Only headers are read (config, tokenizer, safetensors header against the model's tensors), not
    the weights; a Hub id is downloaded here once, into the cache the local replicas read. With
    --address, a directory that does not exist here may exist on the cluster's nodes: it is then
    left to the replicas.
    """
    import dataclasses

    from app.common import LOAD_ERRORS, weights_or_default
    from engine.model.pretrained import check_pretrained

    if args.address is not None and args.weights is not None and _local(args.weights) is None \
            and not _is_hub_id(args.weights):
        return
    try:
        info = check_pretrained(weights_or_default(args.weights), tokenizer=args.tokenizer)
    except LOAD_ERRORS as e:
        raise UsageError(f"cannot load the model: {e}") from None
    info = dataclasses.replace(info, device=_device(args), dtype=args.dtype)
    print(f"model: {info.describe()} (each of {args.replicas} replica{'s' if args.replicas > 1 else ''})",
          file=sys.stderr, flush=True)


def _is_hub_id(spec: str) -> bool:
    from engine.model.hub import parse_source

    return parse_source(spec).repo_id is not None


def _local(spec: str | None) -> str | None:
    """An existing local path as an absolute one (what the replicas are given), else None."""
    return os.path.abspath(spec) if spec is not None and os.path.exists(spec) else None


def _device(args) -> str:
    """--device with `auto` resolved as this machine sees it (cuda when it has a GPU)."""
    if args.device != "auto":
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _gpus(args) -> float:
    if args.gpus_per_replica is not None:
        return args.gpus_per_replica
    return 1.0 if _device(args).startswith("cuda") else 0.0


def _check_resources(ray, args) -> None:
    """Refuse (local cluster) or warn (a cluster that may autoscale) when the replicas cannot all be placed."""
    gpus, cpus = _gpus(args), (1.0 if _gpus(args) > 0 else 0.5)
    have = ray.cluster_resources()
    need = {"GPU": gpus * args.replicas, "CPU": cpus * args.replicas + 1}  # + one CPU for decoding
    short = [f"{need[k]:g} {k}s (the cluster has {have.get(k, 0):g})" for k in need if have.get(k, 0) < need[k]]
    if not short:
        return
    text = f"{args.replicas} replica(s) with {gpus:g} GPU(s) each need " + " and ".join(short)
    if args.address is None:
        raise UsageError(text + "; lower --replicas or --gpus-per-replica")
    print(f"warning: {text}; waiting for the cluster to provide them", file=sys.stderr)


def _build(ray, args, root: Path, todo: list[str], job: Job):
    from ray.data import ActorPoolStrategy, DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False  # the driver shows its own
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "progress bars disabled"

    gpus = _gpus(args)
    device = _device(args)
    if gpus > 0 and device.startswith("cuda"):
        device = "cuda"  # Ray sets CUDA_VISIBLE_DEVICES to the replica's GPU(s)
    items = [{"idx": i, "file": os.fsencode(_worker_path(root, rel))} for i, rel in enumerate(todo)]
    per_call = max(1, min(args.window, math.ceil(len(items) / args.replicas)))  # images per replica call
    # Input blocks no larger than a replica call (so small folders still spread over every replica),
    # and at most MAX_INPUT_BLOCKS of them (so huge folders do not become a million tiny tasks).
    rows_per_block = max(min(DECODE_BATCH, per_call), math.ceil(len(items) / MAX_INPUT_BLOCKS))
    ds = ray.data.from_items(items, override_num_blocks=math.ceil(len(items) / rows_per_block))
    # (a batch_size above the block size would make Ray bundle several input blocks into one task)
    ds = ds.map_batches(decode_batch, batch_size=min(DECODE_BATCH, rows_per_block), batch_format="pyarrow",
                        num_cpus=1)
    return ds.map_batches(
        EngineReplica,
        fn_constructor_kwargs=dict(weights=_local(args.weights) or args.weights,
                                   tokenizer=_local(args.tokenizer) or args.tokenizer,
                                   device=device, dtype=args.dtype, max_batch=args.max_batch,
                                   max_objects=job.max_objects, task=job.task, classes=job.classes,
                                   requests=job.requests()),
        batch_size=per_call, batch_format="pyarrow",
        # Two calls run at once in each replica: the engine takes the next batch while the last
        # requests of the previous one finish, instead of draining to a small decode batch.
        compute=ActorPoolStrategy(size=args.replicas, max_tasks_in_flight_per_actor=3,
                                  max_concurrent_calls_per_actor=2, enable_true_multi_threading=True),
        num_gpus=gpus, num_cpus=1.0 if gpus > 0 else 0.5)


def _worker_path(root: Path, rel: str) -> str:
    """The path the decode workers open: absolute (their working folder is not ours), not normalised
    (".." after a symbolic link means what the single-process path's open means)."""
    return str((root / rel).absolute())


def _record(job: Job, rel: str, shown_file: str, row: dict) -> dict:
    """The single-process path's record for one output row."""
    rec = new_record(job, rel)
    if row["width"] is not None:
        rec.update(width=row["width"], height=row["height"])
    error = _text(row["error"])
    if error is not None:
        # The worker read the absolute path; name the image as the single-process path does.
        read_as = f"cannot read image {shown_file!r}"
        worker_name = f"cannot read image {_worker_path(job.root, rel)!r}"
        if error.startswith(worker_name):
            error = read_as + error[len(worker_name):]
        return {**rec, "error": error}
    return {**rec, **result_fields(job.task, json.loads(row["result"])), "ms": row["ms"], "queue_ms": row["queue_ms"]}


def _draw(job: Job, rec: dict) -> dict:
    from engine import ImageError, load_image

    try:
        picture = load_image(job.root / rec["path"])
    except ImageError as e:  # changed or unreachable since it was decoded on a worker
        rec["draw_error"] = str(e)
        return rec
    draw_into(job, rec["path"], picture, rec)
    return rec


def run_ray(args, root: Path, out: Path, journal, records: dict[str, dict], images: list[str],
            classes: tuple[str, ...], max_objects: int, text=None) -> int:
    from tqdm import tqdm

    todo, skipped, job, redraws = plan(args, root, out, records, images, classes, max_objects, text)
    annotated = job.annotated
    ray = owned = None
    if todo:
        if _device(args).startswith("cuda") and _gpus(args) == 0:
            raise UsageError("--device cuda needs --gpus-per-replica above 0 (Ray places replicas by the GPUs "
                             "they reserve)")
        _check_weights(args)
        ray = require_ray()
        owned = _connect(ray, args.address)
        try:
            _check_resources(ray, args)
        except UsageError:
            if owned:
                ray.shutdown()
            raise

    new_ok = new_failed = 0
    started = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=DRAW_THREADS, thread_name_prefix="batch-draw")
    bar = tqdm(total=len(todo), unit="img", disable=args.quiet or not todo, file=sys.stderr, dynamic_ncols=True)
    rows: queue.Queue = queue.Queue(maxsize=8)
    consumer_stop = threading.Event()
    failure: BaseException | None = None

    def hand_over(item) -> bool:
        while not consumer_stop.is_set():
            try:
                rows.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def consume(ds) -> None:  # streams the output batches to the main thread
        try:
            for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                if not hand_over(("rows", batch.to_pylist())):
                    return  # stopped: leaving the loop tears the pipeline down
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            hand_over(("error", e))
        finally:
            hand_over(("done", None))

    previous = drain_on_sigint(job, "recording the results already received",
                               lambda: write_exports(job, out, args.formats, [records[r] for r in images if r in records]))
    try:
        side = [pool.submit(redraw, job, rec) for rec in redraws]
        drawing: set[Future] = set()

        def settle(futures) -> None:
            nonlocal new_ok, new_failed
            for fut in futures:
                if commit(journal, records, fut.result(), bar):
                    new_failed += 1
                else:
                    new_ok += 1

        if todo:
            ds = _build(ray, args, root, todo, job)
            consumer = threading.Thread(target=consume, args=(ds,), name="batch-ray", daemon=True)
            consumer.start()
            while True:
                try:  # after Ctrl-C: only what has already arrived
                    kind, payload = rows.get_nowait() if job.stop.is_set() else rows.get(timeout=0.2)
                except queue.Empty:
                    if job.stop.is_set():
                        break
                    continue
                if kind == "done":
                    break
                if kind == "error":
                    failure = payload
                    continue
                for row in payload:
                    rel = todo[row["idx"]]
                    rec = _record(job, rel, str(root / rel), row)
                    if annotated is not None and "result" in rec:
                        drawing.add(pool.submit(_draw, job, rec))
                    elif commit(journal, records, rec, bar):
                        new_failed += 1
                    else:
                        new_ok += 1
                done_drawing = {f for f in drawing if f.done()}
                drawing -= done_drawing
                settle(done_drawing)
            consumer_stop.set()
            consumer.join(timeout=10)  # it stops at its next batch; then the pipeline is torn down
        wait(drawing)
        settle(drawing)
        wait(side)
    finally:
        install_sigint(previous)
        bar.close()
        pool.shutdown(wait=False, cancel_futures=True)
        if owned:
            ray.shutdown()
    if failure is not None and not job.stop.is_set():
        write_exports(job, out, args.formats, [records[rel] for rel in images if rel in records])
        line = _first_line(failure)
        what = "the Ray pipeline failed"
        if "CheckpointError: " in line:  # a replica could not load the weights (raised on a worker)
            what, line = "cannot load the model", line.split("CheckpointError: ", 1)[1]
        elif "RequestError: " in line:  # a replica refused the request options (EngineReplica.__init__)
            raise UsageError(line.split("RequestError: ", 1)[1])
        raise UsageError(f"{what}: {line} ({new_ok + new_failed} new results kept in {journal.path}; "
                         "re-run to resume)")
    return report(args, root, out, journal, records, images, job, skipped=skipped, new_ok=new_ok,
                  new_failed=new_failed, elapsed=time.perf_counter() - started, interrupted=job.stop.is_set())
