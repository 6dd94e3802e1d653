"""`python -m app.serve --engine-process`: the engine's step loop in its own interpreter.

In the default mode the server's Python (HTTP parsing, JSON, hashing, submit) shares one GIL
with the engine's step loop. Here the `Engine` lives in a child process (multiprocessing
"spawn": CUDA and libvips are not fork-safe) and the server talks to it through `EngineProcess`,
a proxy with the part of the `Engine` API `app.serve` uses: `submit` (a handle whose `future`
resolves and whose chunks arrive asynchronously), `cancel`, `queued`, `pools`, `decode_steps`,
`prefill_steps`.

Wire: one `multiprocessing` Pipe (a link) of small pickled tuples, one reader thread and one `Sender`
per side. `EngineProcess.open(links=N)` gives the child N links, so that N - 1 other server
processes (`app.serve --http-workers`) each talk to it over their own (`EngineProcess.attach`):
a link's request ids, answers and stats stay on it; the first link's "stop", or its end, stops the
child; another link's "stop" or end closes that link only.
A message without image bytes is written by the thread that sends it when nothing else is being
written or waits (no thread hop, so no wait for the interpreter lock of a busy process); image
bytes, and anything sent while a write is under way, go through the sender's writer thread in
order. A caller of `submit` never blocks on a full pipe, so the server's event loop may call it.

    server → child   ("submit", rid, digest, data | None, skill, obj, options, stream, ack)
                     ("cancel", rid)   ("pause", bool)   ("stop",)
    child → server   ("ready", line) | ("load_error", message)     once, at start
                     ("accepted", rid), only when asked (ack) | ("refused", rid, error) | ("miss", rid)
                     ("chunk", rid, chunk)   ("done", rid, result) | ("failed", rid, error)
                     ("stats", queued, pools, decode_steps, prefill_steps, timing)   every STATS_PERIOD s
                     (timing: the engine thread's ticks, {verb: (wall s, CPU s)}, decode rows and CUDA
                     graphs, as `Engine.steps`, `step_clock.snapshot()`, `decode_rows`, `graphs_held`)

Images: the server sends a data URL's SHA-256 (`payload_digest`) and, the first time, the
encoded file's bytes; the child decodes them on its own threads (Pillow releases the GIL) into
its `ImageCache`. A digest sent alone is submitted by the child's reader at once (no decode, no
thread hop); one the child no longer holds comes back as "miss", and the server's reader sends
it again with the bytes. `submit(..., wait=False)` returns without the "accepted" round trip: a
refusal then arrives as the handle's result. Errors cross as the engine's own exception types with
their one-line messages; a child that dies fails every waiting and later request with
`EngineGone` (503).
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import signal
import threading
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from app.common import one_line, warm_up
from app.serve_images import ImageCache, data_url_payload, decode_payload, payload_digest
from engine import Cancelled, DeadlineExceeded, EngineBusy, ImageError, RequestError
from engine.serving.timing import PHASES

STATS_PERIOD = 0.05     # seconds between the child's queue/pool reports
KNOWN_DIGESTS = 4096    # digests the server believes the child holds (a wrong guess costs one "miss" round trip)
#: Exceptions that cross the pipe as themselves; anything else arrives as a RuntimeError with its one line.
PASSED_ERRORS = (RequestError, EngineBusy, ImageError, Cancelled, DeadlineExceeded)


class EngineGone(RuntimeError):
    """The engine process stopped; requests cannot be served until the server restarts."""


class Sender:
    """One side's writes to the pipe, in the order they were sent, from any thread.

    `send(message)` writes a small message itself, in the caller's thread, when no write is under
    way and none waits; otherwise (or with `bulky`, a message carrying image bytes, which could fill
    the pipe and block) it queues the message for the writer thread (`run`), so the caller never
    waits for the other side to read. A message that cannot be pickled goes to `unsendable(message,
    error)`; a broken pipe stops the sending (the reader sees the end and fails what is pending)."""

    def __init__(self, conn, unsendable: Callable[[tuple, Exception], None]) -> None:
        self.conn, self.unsendable = conn, unsendable
        self.cond = threading.Condition()
        self.waiting: deque = deque()
        self.writing = False   # a write is under way (by a caller or the writer thread)
        self.broken = False
        self.closed = False    # close() was called: what was sent before is written, nothing after
        self.thread = threading.Thread(target=self.run, name="pipe-writer", daemon=True)

    def start(self) -> Sender:
        self.thread.start()
        return self

    def send(self, message: tuple, bulky: bool = False) -> None:
        with self.cond:
            if self.broken or self.closed:
                return
            if self.writing or self.waiting or bulky:
                self.waiting.append(message)
                self.cond.notify()
                return
            self.writing = True
        self.write(message)

    def close(self) -> None:
        """Stop the writer thread once everything sent before is written."""
        with self.cond:
            self.closed = True
            self.waiting.append(None)
            self.cond.notify()

    def run(self) -> None:
        while True:
            with self.cond:
                while self.writing or not self.waiting:
                    self.cond.wait()
                message = self.waiting.popleft()
                if message is None or self.broken:
                    return
                self.writing = True
            self.write(message)

    def write(self, message: tuple) -> None:
        """Write one message (the caller holds the write turn) and hand the turn back."""
        try:
            self.conn.send(message)
        except (OSError, ValueError):
            with self.cond:
                self.broken = True
        except Exception as e:  # noqa: BLE001 - e.g. an option or result that cannot be pickled
            self.unsendable(message, e)
        finally:
            with self.cond:
                self.writing = False
                self.cond.notify()


@dataclass(frozen=True)
class EncodedImage:
    """A request's image as the server holds it: the digest of its data URL and a way to get the
    encoded file's bytes (called only when the child must be sent them)."""

    digest: bytes
    data: Callable[[], bytes]


def encoded(data: bytes) -> EncodedImage:
    """An image file's bytes as an `EncodedImage` (keyed by their SHA-256)."""
    return EncodedImage(hashlib.sha256(data).digest(), lambda: data)


class ImageRefs:
    """`ImageCache`'s counterpart in the server when the engine runs in a child: checks the data
    URL and hashes it, decodes nothing (the child does)."""

    def __init__(self, proxy: EngineProcess) -> None:
        self.proxy = proxy

    def get(self, image_url: object) -> EncodedImage:
        payload = data_url_payload(image_url)
        return EncodedImage(payload_digest(payload), lambda: decode_payload(payload))

    def lookup(self, image_url: object) -> tuple[EncodedImage | None, Callable[[], EncodedImage]]:
        """`ImageCache.lookup`'s shape: (the reference if the child holds its image, else None; a
        call giving the reference). Only hashes; raises BadImageURL."""
        image = self.get(image_url)
        return (image if self.proxy.holds(image.digest) else None), lambda: image


class ReportedClock:
    """`StepClock.snapshot()` of the child's engine thread, as of the child's last report, read
    together with its ticks (one stats message carries both)."""

    def __init__(self, proxy: EngineProcess) -> None:
        self.proxy = proxy

    def snapshot(self) -> dict[str, tuple[float, float]]:
        return dict(self.proxy.stats[4][1])


class ProcessHandle:
    """A request submitted through `EngineProcess`: `future` and `cancel()`, like `RequestHandle`."""

    def __init__(self, rid: int, proxy: EngineProcess, on_object: Callable | None, image: EncodedImage,
                 wait: bool) -> None:
        self.id, self.proxy, self.on_object = rid, proxy, on_object
        self.image, self.wait = image, wait   # to send its bytes again after a "miss"; whether `ack` is used
        self.sent: tuple = ()                 # the "submit" message
        self.future: Future = Future()
        self.ack: Future = Future()

    def cancel(self) -> None:
        self.proxy.cancel(self)

    def result(self, timeout: float | None = None) -> dict:
        return self.future.result(timeout)

    def refuse(self, error: BaseException) -> None:
        """The child (or the pipe) refused it: to the caller still waiting for the "accepted", else
        as its result."""
        (self.ack if self.wait and not self.ack.done() else self.future).set_exception(error)


def portable(e: BaseException) -> BaseException:
    """`e` as it can cross the pipe: the engine's error types as they are, others as one line."""
    if isinstance(e, PASSED_ERRORS):
        return type(e)(one_line(e))
    return RuntimeError(f"{type(e).__name__}: {one_line(e)}")


class EngineProcess:
    """The proxy in the server process. `EngineProcess.open(...)` starts the child and waits for
    its model to load (LOAD_ERRORS' messages come back as `EngineGone`'s)."""

    def __init__(self, process, conn) -> None:
        self.process, self.conn = process, conn   # process: None in a proxy that does not own the child
        self.spare_links: list = []
        self.lock = threading.Lock()
        self.handles: dict[int, ProcessHandle] = {}
        self.ids = itertools.count(1)
        self.known: OrderedDict[bytes, None] = OrderedDict()
        self.resent = 0   # images sent again after the child said "miss"
        self.stats = (0, {"running": 0, "rows_in_use": 0, "waiting": 0, "steps_in_flight": 0}, 0, 0,
                      (0, dict.fromkeys(PHASES, (0.0, 0.0)), 0, 0))
        self.step_clock = ReportedClock(self)   # the child's engine thread, as of its last report
        self.gone: str | None = None
        self.startup = ""
        self.loaded: Future = Future()
        self.sender = Sender(conn, self.unsendable).start()
        self.reader = threading.Thread(target=self.read, name="engine-process-reader", daemon=True)
        self.reader.start()

    @classmethod
    def open(cls, *, links: int = 1, start_timeout: float = 600.0, **options) -> EngineProcess:
        """Start the child with `open_engine`'s options (weights, tokenizer, device, dtype, max_batch,
        max_queue, repeat_guard; `torch_threads` caps its intra-op threads; `image_cache_bytes`; `factory`:
        a class built with the options instead of `open_engine`, for measurements) and wait for its
        model. `links` > 1 opens that many pipes to it: this proxy owns the first, and the server ends
        of the others wait in `spare_links`, each for `EngineProcess.attach` in another process."""
        ctx = multiprocessing.get_context("spawn")
        pairs = [ctx.Pipe() for _ in range(links)]
        process = ctx.Process(target=child_main, args=([theirs for _, theirs in pairs], options), name="mdpipe-engine",
                              daemon=True)
        process.start()
        for _, theirs in pairs:
            theirs.close()
        proxy = cls(process, pairs[0][0])
        proxy.spare_links = [ours for ours, _ in pairs[1:]]
        try:
            proxy.startup = proxy.loaded.result(start_timeout)
        except BaseException:
            proxy.close()
            raise
        return proxy

    @classmethod
    def attach(cls, conn) -> EngineProcess:
        """A proxy over one of `spare_links`, in another process: it submits and reads as the owner
        does, but does not own the child (closing it closes only its link)."""
        return cls(None, conn)

    # ---- the Engine API app.serve uses ---------------------------------------------------
    def submit(self, image: EncodedImage | bytes, skill: str, obj: str = "", *, on_object=None, wait: bool = True,
               **options):
        """Queue a request in the child. With `wait` (default) this returns once the child accepted
        it and raises what `Engine.submit` would (or `EngineGone`); without, it returns at once, never
        blocks, and a refusal arrives as the handle's result."""
        if not isinstance(image, EncodedImage):
            image = encoded(bytes(image))
        handle = ProcessHandle(next(self.ids), self, on_object, image, wait)
        data = None if self.holds(image.digest) else image.data()
        with self.lock:
            if self.gone is not None:
                raise EngineGone(self.gone)
            self.handles[handle.id] = handle
        handle.sent = ("submit", handle.id, image.digest, data, skill, obj, options, on_object is not None, wait)
        self.remember(image.digest)   # before the send: a "miss" for it may come back at once and forget it
        self.post(handle.sent)
        if wait:
            try:
                handle.ack.result()
            except BaseException:
                with self.lock:
                    self.handles.pop(handle.id, None)
                raise
        return handle

    def holds(self, digest: bytes) -> bool:
        """Whether the child is believed to hold this image (a wrong guess costs one "miss" round trip)."""
        with self.lock:
            return digest in self.known

    def remember(self, digest: bytes) -> None:
        with self.lock:
            self.known[digest] = None
            self.known.move_to_end(digest)
            while len(self.known) > KNOWN_DIGESTS:
                self.known.popitem(last=False)

    def cancel(self, handle: ProcessHandle) -> None:
        if not handle.future.done() and self.gone is None:
            try:
                self.post(("cancel", handle.id))
            except EngineGone:
                pass

    def queued(self) -> int:
        return self.stats[0]

    def pools(self) -> dict:
        return dict(self.stats[1])

    @property
    def decode_steps(self) -> int:
        return self.stats[2]

    @property
    def prefill_steps(self) -> int:
        return self.stats[3]

    @property
    def steps(self) -> int:
        """The child's engine loop ticks (as of its last report, at most STATS_PERIOD old)."""
        return self.stats[4][0]

    @property
    def decode_rows(self) -> int:
        return self.stats[4][2]

    @property
    def graphs_held(self) -> int:
        return self.stats[4][3]

    def pause(self, held: bool = True) -> None:
        """Hold (or release) the child's step loop: requests queue but are not decoded (tests)."""
        self.post(("pause", held))

    def point(self, image, obj: str, **options) -> dict:
        return self.submit(image, "point", obj, **options).result()

    def detect(self, image, obj: str, **options) -> dict:
        return self.submit(image, "detect", obj, **options).result()

    def query(self, image, question: str, **options) -> dict:
        return self.submit(image, "query", question, **options).result()

    def caption(self, image, length: str = "normal", **options) -> dict:
        return self.submit(image, "caption", length=length, **options).result()

    def close(self, timeout: float = 60.0) -> None:
        """Let the child finish what it accepted and exit; kill it if it does not within `timeout`.
        A proxy that does not own the child closes its link only (the child ends its side)."""
        try:
            self.post(("stop",))
        except EngineGone:
            pass
        self.sender.close()
        self.sender.thread.join(timeout)
        if self.process is not None:
            self.process.join(timeout)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        for conn in [self.conn] + self.spare_links:
            conn.close()
        self.reader.join(timeout=5)

    # ---- plumbing ------------------------------------------------------------------------
    def post(self, message: tuple) -> None:
        """Send a message to the child (never blocks on the pipe: `Sender`); EngineGone once the
        child stopped."""
        if self.gone is not None:
            raise EngineGone(self.gone)
        self.sender.send(message, bulky=message[0] == "submit" and message[3] is not None)

    def unsendable(self, message: tuple, error: Exception) -> None:
        """A message that cannot be pickled fails its own request."""
        if message[0] == "submit":
            self.refuse(message[1], RuntimeError(f"the request could not be sent ({one_line(error)})"))

    def refuse(self, rid: int, error: BaseException) -> None:
        with self.lock:
            handle = self.handles.pop(rid, None)
        if handle is not None:
            handle.refuse(error)

    def resend(self, handle: ProcessHandle) -> None:
        with self.lock:
            self.known.pop(handle.image.digest, None)
            self.resent += 1
        try:
            data = handle.image.data()
            self.post(("submit", handle.id, handle.image.digest, data) + handle.sent[4:])
        except Exception as e:  # noqa: BLE001 - EngineGone, or bytes that no longer decode: this request fails
            self.refuse(handle.id, e)

    def read(self) -> None:
        """The reader thread: resolve acknowledgements and results, feed chunks, keep the stats."""
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "stats":
                self.stats = message[1:]
                continue
            if kind in ("ready", "load_error"):
                if kind == "ready":
                    self.loaded.set_result(message[1])
                else:
                    self.loaded.set_exception(EngineGone(message[1]))
                continue
            with self.lock:
                handle = self.handles.get(message[1])
                if handle is not None and kind in ("refused", "done", "failed"):
                    del self.handles[message[1]]
            if handle is None:
                continue
            if kind == "accepted":
                handle.ack.set_result(kind)
            elif kind == "miss":   # the child no longer holds the image: send it again with its bytes
                self.resend(handle)
            elif kind == "refused":
                handle.refuse(message[2])
            elif kind == "chunk":
                handle.on_object(message[2])
            elif kind == "done":
                handle.future.set_result(message[2])
            elif kind == "failed":
                handle.future.set_exception(message[2])
        code = None
        if self.process is not None:
            self.process.join(timeout=5)
            code = self.process.exitcode
        with self.lock:
            self.gone = ("the engine process stopped" + ("" if code in (None, 0) else f" (exit code {code})")
                         + "; restart the server")
            handles, self.handles = list(self.handles.values()), {}
        self.sender.close()
        for future in [self.loaded] + [f for h in handles for f in (h.ack, h.future)]:
            if not future.done():
                future.set_exception(EngineGone(self.gone))


# ---- the child --------------------------------------------------------------------------
class Link:
    """One server process's pipe to the child: its `Sender` and the requests it submitted (by the
    ids that server gave them)."""

    def __init__(self, index: int, conn, child: EngineChild) -> None:
        self.index, self.conn = index, conn
        self.sender = Sender(conn, child.unsendable_on(self))
        self.handles: dict[int, object] = {}
        self.cancelled: set[int] = set()
        self.ended = False   # the server at the other end is gone: what it left is cancelled


class EngineChild:
    """The engine's process: a reader per link (the first in this thread, the others in threads of
    their own) that submits requests on images it holds, a small pool for those that need a decode
    (and their grammar's compilation), a `Sender` per link (results leave from the engine thread
    that finished them), the engine's own step loop. The first link is the owner's: its "stop", or
    its end, stops the process; another link's end only drops that link."""

    def __init__(self, conns: list, engine, image_cache_bytes: int) -> None:
        self.engine = engine
        self.images = ImageCache(image_cache_bytes)
        self.links = [Link(i, conn, self) for i, conn in enumerate(conns)]
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(4, thread_name_prefix="submit")
        self.stopping = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.step = engine.step

    def run(self) -> None:
        for link in self.links:
            link.sender.start()
        threading.Thread(target=self.report, name="stats", daemon=True).start()
        for link in self.links[1:]:
            threading.Thread(target=self.serve_spare, args=(link,), name=f"link-{link.index}", daemon=True).start()
        self.engine.start()
        try:
            self.serve_link(self.links[0])
        finally:
            self.gate.set()
            self.pool.shutdown(wait=True)
            self.engine.close()
            self.stopping.set()
            for link in self.links:
                link.sender.close()
            for link in self.links:
                link.sender.thread.join()

    def serve_spare(self, link: Link) -> None:
        """Another server process's link: read it until it ends or says "stop", cancel the requests
        it left (nobody waits for their answers: their rows are freed), then close it."""
        self.serve_link(link)
        with self.lock:
            link.ended = True
            left = list(link.handles.values())
        for handle in left:
            handle.cancel()
        link.sender.close()
        link.sender.thread.join()
        link.conn.close()

    def serve_link(self, link: Link) -> None:
        """Read one link until it ends or says "stop"."""
        while True:
            try:
                message = link.conn.recv()
            except (EOFError, OSError):  # that server went away
                return
            kind = message[0]
            if kind == "submit" and message[3] is None:   # an image it should hold: no decode, no hop
                self.submit(link, *message[1:])
            elif kind == "submit":
                self.pool.submit(self.submit, link, *message[1:])
            elif kind == "cancel":
                self.cancel(link, message[1])
            elif kind == "pause":
                self.pause(message[1])
            elif kind == "stop":
                return

    def submit(self, link: Link, rid: int, digest: bytes, data: bytes | None, skill: str, obj, options: dict,
               stream: bool, ack: bool) -> None:
        send = link.sender.send
        try:
            if data is None:
                image = self.images.cached(digest)
                if image is None:
                    send(("miss", rid))
                    return
            else:
                image = self.images.get_or_decode(digest, lambda: data)
            on_object = (lambda chunk: send(("chunk", rid, chunk))) if stream else None
            handle = self.engine.submit(image, skill, obj, on_object=on_object, **options)
        except Exception as e:  # noqa: BLE001 - every refusal goes back to the waiting server thread
            send(("refused", rid, portable(e)))
            return
        with self.lock:
            link.handles[rid] = handle
            cancel = rid in link.cancelled or link.ended   # ended: its submit was still on the pool
            link.cancelled.discard(rid)
        if ack:
            send(("accepted", rid))
        handle.future.add_done_callback(lambda future: self.finished(link, rid, future))
        if cancel:
            handle.cancel()

    def finished(self, link: Link, rid: int, future: Future) -> None:
        with self.lock:
            link.handles.pop(rid, None)
        error = future.exception()
        link.sender.send(("done", rid, future.result()) if error is None else ("failed", rid, portable(error)))

    def cancel(self, link: Link, rid: int) -> None:
        with self.lock:
            handle = link.handles.get(rid)
            if handle is None:
                link.cancelled.add(rid)  # its submit is still on the pool
        if handle is not None:
            handle.cancel()

    def pause(self, held: bool) -> None:
        if held:
            self.gate.clear()
            self.engine.step = lambda: (self.gate.wait(), self.step())[1]
        else:
            self.gate.set()
            self.engine.step = self.step

    def report(self) -> None:
        while not self.stopping.wait(STATS_PERIOD):
            engine = self.engine
            clock = getattr(engine, "step_clock", None)   # a stand-in engine (app.serve_cost) keeps none
            timing = ((engine.steps, clock.snapshot(), engine.decode_rows, engine.graphs_held) if clock is not None
                      else (0, dict.fromkeys(PHASES, (0.0, 0.0)), 0, 0))
            stats = ("stats", engine.queued(), engine.pools(), engine.decode_steps, engine.prefill_steps, timing)
            for link in self.links:
                link.sender.send(stats)

    @staticmethod
    def unsendable_on(link: Link) -> Callable[[tuple, Exception], None]:
        """An answer that cannot be pickled fails its own request (queued: the write turn is still held)."""
        def unsendable(message: tuple, error: Exception) -> None:
            if message[0] in ("done", "chunk"):
                link.sender.send(("failed", message[1], RuntimeError(f"the answer could not be sent ({one_line(error)})")))
        return unsendable


def child_main(conns: list, options: dict) -> None:
    """The child's entry point (spawned): load the model, report on the first link, serve every
    link until the first says stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the server, which stops this process in order
    threads = options.pop("torch_threads", None)
    cache_bytes = options.pop("image_cache_bytes", 256 << 20)
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    from app.common import LOAD_ERRORS, open_engine, startup_line

    factory = options.pop("factory", None)  # a stand-in engine class (app.serve_cost's NullEngine)
    try:
        engine = open_engine(options.pop("weights", None), **options) if factory is None else factory(**options)
    except LOAD_ERRORS as e:
        conns[0].send(("load_error", f"cannot load the model: {one_line(e)}"))
        for conn in conns:
            conn.close()
        return
    if factory is None:
        warm_up(engine)   # the graphs, before the server says it is ready
    conns[0].send(("ready", startup_line(engine) if factory is None else factory.__name__))
    EngineChild(conns, engine, cache_bytes).run()
    for conn in conns:
        conn.close()
