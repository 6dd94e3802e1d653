"""The pipelined engine: point, detect, query and caption in one step loop.

One `step()` is three verbs. In pipelined mode (the default) forward t+1 is queued before
the CPU looks at step t, so the CPU's bookkeeping hides behind the GPU's forward:

    CPU          │ launch t+1 ─┐ commit t ──────────────┐ finalize t+1 ─┐ │ launch t+2 …
                 │ (_launch)   │ (_commit: wait copy t,  │ (_finalize:    │ │
                 │             │  advance automata, emit │  state ids →   │ │
                 │             │  objects, zombies)      │  slot.meta)    │ │
    compute      │ ░░░░░░ forward t+1 (graph) ░░░░░░░░░░░░░░░░░░░░░░░░░░│▒ sample t+1 ▒│ forward t+2 …
    stream       │             │                         │  mask_ready ──►│ (masks, argmax,
                 │             │                         │                │  region values → pending_*)
    copy         │ ▓ D2H t ▓   │                         │ ▓ H2D meta t+1 ▓│ │ ▓ D2H t+1 ▓ …
    stream       │ (slot t%2)  │                         │  (slot (t+1)%2) │ │ (waits `sampled`)

- `_launch` → `Scheduler.decode_plan` + `Runner.launch_decode` for the running rows, and
  `Scheduler.admit` + `Runner.launch_prefill` for new requests: either, or both in one *mixed* step
  (decode forward first, then the prefill; one sampling pass). The decode forward reads token t and
  its region value from device memory (`pending_*`), so nothing round-trips through the CPU.
- `_commit` → `Runner.read_results` + `Scheduler.commit`: the grammar state for t+1 is known
  only after this, which is why sampling (finalize) comes after it: forward now, sample later.
- `_finalize` → `Scheduler.mask_states` + `Runner.finalize`.
- A sequence that ends at commit t is already in batch t+1: it is a *zombie*, finalized at once
  (result delivered), masked as unconstrained, its token t+1 ignored, its KV row released when
  `inflight_refs` reaches zero.

`EngineConfig(pipelined=False)` runs the same three verbs as a blocking loop (launch → finalize → commit,
waiting for each step): the A/B baseline. Under greedy decoding both produce identical outputs.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from engine.model.checkpoint import CheckpointError
from engine.model.config import MoondreamConfig
from engine.model.moondream import MoondreamModel
from engine.model.pretrained import ModelInfo, load_pretrained
from engine.serving.config import EngineConfig
from engine.serving.crops import CropService, decode_image
from engine.serving.errors import Cancelled, DeadlineExceeded, EngineBusy, RequestError
from engine.serving.answers import AnswerFormat, JsonSchema, TextBuilder, answer_grammar, as_answer_format, one_line
from engine.serving.limits import (DEFAULT_MAX_OBJECTS, DEFAULT_MAX_TOKENS, MAX_GRAMMAR_CELLS, MAX_OBJECT_TOKENS,
                                   TEXT_SKILLS, answer_budget, kv_positions, max_answer_tokens)
from engine.serving.prefixes import PrefixSlots
from engine.serving.scheduler import Scheduler
from engine.serving.sequence import Sequence
from engine.serving.timing import StepClock
from engine.serving.skills import (caption_prompt_ids, prompt_ids, query_prompt_ids, validate_question,
                                   validate_request)
from engine.worker.pipeline import PipelineState, Step
from engine.worker.protocol import Runner
from engine.worker.runner import ModelRunner, PrefillItem
from grammars import GrammarCompiler, GrammarSpec, MaskTable, TokenAlphabet, detect_grammar, point_grammar

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[2] / "assets" / "model"


@dataclass
class RequestHandle:
    """A submitted request: wait for its result or cancel it."""

    id: int
    future: Future
    seq: Sequence
    engine: "Engine"

    def cancel(self) -> None:
        self.engine.cancel(self)

    def result(self, timeout: float | None = None) -> dict:
        return self.engine.wait(self.future, timeout)

    def started(self) -> bool:
        """Whether the request has left the queue (it holds a KV row and is being decoded)."""
        return self.seq.admitted_at is not None

    def timing(self) -> dict[str, float | None]:
        """Milliseconds on the engine's clock: `queue_ms` waiting for a KV row, `service_ms` from
        admission to the result (None for a phase not reached)."""
        s = self.seq
        end = s.finished_at
        return {"queue_ms": None if s.admitted_at is None else round((s.admitted_at - s.submitted_at) * 1000.0, 1),
                "service_ms": None if s.admitted_at is None or end is None
                else round((end - s.admitted_at) * 1000.0, 1)}


class Engine:
    """The serving loop over one model. `config` (or keyword overrides of its fields, e.g.
    `Engine(model, tok, max_batch=32)`) sizes it; `runner` replaces the `ModelRunner` over
    `model` (tests pass a CPU fake; then only `model.config` is read); `clock` is what deadlines
    are measured with (seconds; tests inject their own)."""

    def __init__(self, model: MoondreamModel, tokenizer, config: EngineConfig | None = None, *,
                 runner: Runner | None = None, clock: Callable[[], float] = time.monotonic, **overrides) -> None:
        config = (config or EngineConfig()).replace(**overrides) if overrides else (config or EngineConfig())
        cfg: MoondreamConfig = model.config
        self.model, self.tokenizer, self.config, self.model_config = model, tokenizer, config, cfg
        if tokenizer.get_vocab_size() > cfg.text.vocab_size:
            raise CheckpointError(f"tokenizer has {tokenizer.get_vocab_size()} tokens but the model only {cfg.text.vocab_size}")
        self.runner: Runner = runner if runner is not None else ModelRunner(
            model, max_batch=config.max_batch, max_len=config.kv_positions(cfg), mask_capacity=config.mask_capacity,
            prefix_slots=config.prefix_slots(), use_graphs=config.use_graphs, kernels=config.kernels,
            group_prefix=config.group_prefix)
        t = cfg.tokens
        self.scheduler = Scheduler(config.max_batch, self.runner.scratch_pos, cfg.prefix_len, t.coord_id, t.size_id, t.eos_id,
                                   repeat_guard=config.repeat_guard, on_release=self._release_prefix)
        self.pipeline = PipelineState()
        self.alphabet = self._alphabet(tokenizer)
        self.compiler = GrammarCompiler()
        self.masks = MaskTable(vocab_size=cfg.text.vocab_size, capacity=config.mask_capacity)
        self.prefix_cache = PrefixSlots(config.prefix_slots(), config.prefix_cache_size)  # which image each prefix slot holds
        self.clock = clock
        self._ids = itertools.count(1)
        self._inbox: queue.SimpleQueue[Sequence] = queue.SimpleQueue()
        self._pictures: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # decode_image's known pixels
        self._wake = threading.Event()
        on_cuda = torch.device(getattr(self.runner, "device", "cpu")).type == "cuda"
        self.crops = CropService(cfg.vision, config.crop_threads, on_ready=self._wake.set,
                                 on_device=on_cuda if config.device_crops is None else config.device_crops)
        self._encoded_last = False  # the last launch encoded images: decode goes next
        self._held = 0              # decode steps launched in a row while prompt-only requests waited (prefill_wait)
        self._thread: threading.Thread | None = None
        self._stop = False
        self.steps = 0
        self.decode_steps = 0
        self.prefill_steps = 0   # steps that prefilled admitted requests (mixed steps included)
        self.decode_rows = 0     # rows computed by decode forwards (their batch buckets, padding included), summed
        self.step_clock = StepClock()  # the engine thread's wall and CPU time per verb (diagnostics)
        self.model_info: ModelInfo | None = None   # set by from_pretrained

    @classmethod
    def from_pretrained(cls, weights: str | Path | None = None, *, tokenizer: str | None = None, device: str = "auto",
                        dtype: str = "auto", revision: str | None = None, progress: bool = False,
                        config: EngineConfig | None = None, **overrides) -> Engine:
        """Load a checkpoint directory or Hub id `org/name[@REV]` (default: the embedded model in
        assets/); see engine.model.pretrained. `engine.model_info` says what was loaded."""
        model, tok, info = load_pretrained(DEFAULT_WEIGHTS if weights is None else weights, tokenizer=tokenizer,
                                           device=device, dtype=dtype, revision=revision, progress=progress)
        engine = cls(model, tok, config, **overrides)
        engine.model_info = info
        return engine

    # ---- public API ---------------------------------------------------------------------
    def submit(self, image, skill: str, obj: str = "", *, max_objects: int = DEFAULT_MAX_OBJECTS,
               answer: AnswerFormat | list | dict = None, max_tokens: int | None = None, length: str = "normal",
               on_object: Callable[[dict | str], None] | None = None, timeout: float | None = None) -> RequestHandle:
        """Queue a request. Grammar compilation and image decoding and hashing run here, in the
        caller's thread; the crops are made on the crop threads (on CUDA the threads only hand over the
        pixels and the runner resizes them on the GPU: `EngineConfig.device_crops`), and only if the prefix
        is not cached.

        `image` is anything `load_image` reads, or a `DecodedImage` (`prepare_image`: decoded and keyed once).
        `obj` is the object to find (point/detect) or the question (query); caption reads `length`.
        `answer` shapes a query's answer (`engine.serving.answers`); `max_tokens` caps a query's or
        caption's answer (default: DEFAULT_MAX_TOKENS or what the row holds, whichever is less).
        `on_object` is called on the engine thread with each committed object (point/detect) or
        text chunk (query/caption): it must return at once (e.g. put it on a queue), since the
        whole batch waits for it.
        """
        queued = self.queued()
        if queued >= self.config.max_queue:
            raise EngineBusy(f"the engine is busy ({queued} requests queued); try again shortly")
        prompt, max_objects, limit, make_builder, automaton = self._prepare(skill, obj, max_objects, answer,
                                                                            max_tokens, length)
        key, picture = decode_image(image, self._pictures)
        crops = None if key in self.prefix_cache else self.crops.request(key, picture)
        seq = Sequence(next(self._ids), skill, prompt, max_objects, answer_budget(skill, limit), key, picture, crops,
                       on_object=on_object, make_builder=make_builder,
                       deadline=None if timeout is None else self.clock() + timeout, submitted_at=self.clock())
        seq.automaton = automaton
        seq.future.add_done_callback(lambda _: setattr(seq, "finished_at", self.clock()))
        self._inbox.put(seq)
        self._wake.set()
        return RequestHandle(seq.id, seq.future, seq, self)

    def check_request(self, skill: str, obj: str = "", *, max_objects: int = DEFAULT_MAX_OBJECTS,
                      answer: AnswerFormat | list | dict = None, max_tokens: int | None = None,
                      length: str = "normal") -> None:
        """Raise the RequestError `submit` would raise for these options (any image), queueing
        nothing: a caller sending one request shape for many images checks it once, up front."""
        self._prepare(skill, obj, max_objects, answer, max_tokens, length)

    def _prepare(self, skill: str, obj: object, max_objects: object, answer: object, max_tokens: object,
                 length: object):
        """A request's prompt, object cap, answer budget, result builder and compiled grammar
        (RequestError when it is malformed or can never fit this engine)."""
        cfg = self.model_config
        make_builder = None
        if skill in TEXT_SKILLS:
            prompt, spec, limit, make_builder = self._text_request(skill, obj, answer, max_tokens, length)
            max_objects = 0
        else:
            text, max_objects = validate_request(skill, obj, max_objects)
            if max_objects > self.config.max_objects:
                raise RequestError(f"max_objects {max_objects} exceeds this engine's limit of {self.config.max_objects}")
            prompt = prompt_ids(cfg.tokens, lambda s: self.tokenizer.encode(s).ids, skill, text)
            spec = detect_grammar(max_objects=max_objects) if skill == "detect" else point_grammar(max_objects=max_objects)
            limit = max_objects
        # The whole answer's KV is reserved at admission; refuse now what can never fit a row.
        need = kv_positions(cfg.prefix_len, len(prompt), skill, limit)
        if need > self.runner.scratch_pos:
            raise RequestError(f"request needs {need} KV positions; this engine holds {self.runner.scratch_pos} "
                               f"per row (lower max_objects or raise max_len)")
        return prompt, max_objects, limit, make_builder, self._grammar(spec)

    def point(self, image, obj: str, *, max_objects: int = DEFAULT_MAX_OBJECTS, timeout: float | None = None) -> dict:
        return self.submit(image, "point", obj, max_objects=max_objects, timeout=timeout).result()

    def detect(self, image, obj: str, *, max_objects: int = DEFAULT_MAX_OBJECTS, timeout: float | None = None) -> dict:
        return self.submit(image, "detect", obj, max_objects=max_objects, timeout=timeout).result()

    def query(self, image, question: str, *, answer: AnswerFormat | list | dict = None, max_tokens: int | None = None,
              timeout: float | None = None) -> dict:
        """`{"answer": text}`, or `{"answer": value}` (parsed JSON) when `answer` is a JsonSchema."""
        return self.submit(image, "query", question, answer=answer, max_tokens=max_tokens, timeout=timeout).result()

    def caption(self, image, length: str = "normal", *, max_tokens: int | None = None,
                timeout: float | None = None) -> dict:
        """`{"caption": text}`; length is short, normal or long."""
        return self.submit(image, "caption", length=length, max_tokens=max_tokens, timeout=timeout).result()

    def stream(self, image, skill: str, obj: str = "", **options) -> Iterator[dict | str]:
        """Yield objects (point/detect) or text chunks (query/caption) as they are committed;
        raises the request's error, if any, at the end. `options` are `submit`'s."""
        found: queue.SimpleQueue = queue.SimpleQueue()
        handle = self.submit(image, skill, obj, on_object=found.put, **options)
        handle.future.add_done_callback(lambda _: found.put(None))
        try:
            while True:
                if self._thread is None:
                    while found.empty():
                        self.step()
                item = found.get()
                if item is None:
                    break
                yield item
            handle.future.result()
        finally:
            if not handle.future.done():
                handle.cancel()

    def cancel(self, handle: RequestHandle) -> None:
        """Ask the engine to stop a request; it finishes with `Cancelled` and frees its row."""
        handle.seq.cancel_requested.set()
        self._wake.set()

    def wait(self, future: Future, timeout: float | None = None) -> dict:
        """A request's result; without a serving thread the caller drives the loop."""
        if self._thread is None:
            while not future.done() and self.step():
                pass
            return future.result(timeout=0)
        return future.result(timeout)

    def queued(self) -> int:
        """Requests submitted but not yet admitted."""
        return self._inbox.qsize() + self.scheduler.queued()

    # ---- the loop -----------------------------------------------------------------------
    def step(self) -> bool:
        """One tick. Returns False when there was nothing to do (idle, or waiting for crops)."""
        self._drain_inbox()
        self.scheduler.reap(self.clock())
        if self.scheduler.is_idle() and self.pipeline.is_idle():
            return False
        phase = self.step_clock.phase
        if self.config.pipelined:
            with phase("launch"):
                step = self._launch()
            committed = self._commit()
            if step is not None:
                with phase("finalize"):
                    self._finalize(step)
        else:
            with phase("launch"):
                step = self._launch()
            if step is not None:
                with phase("finalize"):
                    self._finalize(step)
            committed = self._commit()
        self.steps += 1
        return step is not None or committed

    def run_until_idle(self) -> None:
        while self.step():
            pass

    @property
    def graphs_held(self) -> int:
        """CUDA graphs the runner holds: captured by `warm_up`, or in a step that first needed one."""
        return len(getattr(self.runner, "graphs", ()))

    def warm_up(self, max_objects: int = DEFAULT_MAX_OBJECTS) -> int:
        """Capture now every CUDA graph that a point/detect request of up to `max_objects` objects
        (and the longest object text) can use: decode and sampling at every batch bucket and KV
        length up to its last position, and the prompt prefills. Otherwise each new shape is
        captured when a step first needs it, inside the serving loop, which then stalls. Call it
        before `start`. Returns the number of graphs held (0 where no graphs are used: the CPU)."""
        if self._thread is not None:
            raise RuntimeError("warm_up() must come before start()")
        capture = getattr(self.runner, "capture_all", None)   # test runners have no graphs
        if capture is None:
            return 0
        t = self.model_config.tokens
        longest = max(len(t.detect_prefix), len(t.point_prefix)) + MAX_OBJECT_TOKENS + len(t.prompt_suffix)
        limit = min(max_objects, self.config.max_objects)
        return capture(kv_positions(self.model_config.prefix_len, longest, "detect", limit))

    def start(self) -> Engine:
        """Serve from a background thread (for the UI and concurrent callers)."""
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._serve, name="engine", daemon=True)
            self._thread.start()
        return self

    @property
    def thread_id(self) -> int | None:
        """The serving thread's identifier (after `start`), or None while callers drive the loop."""
        return None if self._thread is None else self._thread.ident

    def close(self) -> None:
        """Finish what was accepted, then stop the serving thread."""
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join()
            self._thread = None

    def _serve(self) -> None:
        # On close, keep stepping until every accepted request is done and every row released.
        while not (self._stop and self.scheduler.is_idle() and self.pipeline.is_idle() and self._inbox.empty()):
            self._wake.clear()  # before the step: a wake-up during it is not lost
            try:
                busy = self.step()
            except Exception as e:  # never leave callers hanging: fail what is in flight, keep serving
                self._fail_all(e)
                busy = False
            if not busy:
                self._wake.wait(timeout=0.5)

    # ---- the three verbs ------------------------------------------------------------------
    def _launch(self) -> Step | None:
        if not self.pipeline.can_launch():
            return None
        plan = self.scheduler.decode_plan(self.runner.batch_bucket)
        # An image prefill holds the step for its whole forward: one step without one between two.
        new_images = 0 if self._encoded_last and plan is not None else self.config.max_prefill
        admitted = self.scheduler.admit(new_images, self._cached_admissions(plan is not None), self.prefix_cache.get,
                                        self._crops_ready, self.runner.batch_bucket)
        self._held = self._held + 1 if not admitted and self.scheduler.queued() else 0
        admitted = [a for a in admitted if self._has_pixels(a.seq, a.prefix is not None)]
        ready = [a for a in admitted if self._attach_grammar(a.seq)]
        for a in reversed([a for a in admitted if a not in ready]):  # no mask rows yet: wait, first in line
            self.scheduler.requeue(a.seq)
        admitted = ready
        if admitted:
            return self._launch_with_prefill(admitted, plan)
        if plan is None:
            return None
        self._encoded_last = False
        self._launch_decode(self.pipeline.free_slot(), plan)
        return self.pipeline.launch("decode", plan.rows, plan.batch)

    def _cached_admissions(self, decoding: bool) -> int:
        """Requests on cached images this step may admit: none while rows decode and fewer than
        `prefill_gather` wait, for `prefill_wait` steps at most (EngineConfig). Waiting cannot gather
        more than the free rows take: once that many wait, they go."""
        cfg = self.config
        enough = min(cfg.prefill_gather, self.scheduler.rows_free())
        if decoding and self._held < cfg.prefill_wait and self.scheduler.queued() < enough:
            return 0
        return cfg.max_prefill_cached

    def _launch_decode(self, slot: int, plan) -> None:
        """The running rows' decode forward into `slot`, and its bookkeeping."""
        self.runner.launch_decode(slot, plan.batch, plan.positions, self.runner.attn_bucket(plan.attn_len_needed - 1))
        self.scheduler.on_launch(plan.rows, advance_position=True)
        self.decode_steps += 1
        self.decode_rows += plan.batch

    def _launch_with_prefill(self, admitted: list, plan) -> Step:
        """A step that prefills the admitted requests; with rows decoding (`plan`), a mixed step:
        their decode forward goes first, then the prefill (which overwrites the outputs of its rows,
        padding in the decode batch), and one sampling pass covers both, so no row stops decoding."""
        if plan is not None:
            self._launch_decode(self.pipeline.free_slot(), plan)
        for a in admitted:  # cached prefixes referenced first: a new image's slot must not evict them
            if a.prefix is not None:
                self.prefix_cache.ref(a.prefix)
                a.seq.prefix_slot = a.prefix
        items = []
        for a in admitted:
            a.seq.admitted_at = self.clock()
            crops = None
            if a.prefix is None:
                crops, a.seq.prefix_slot = a.seq.crops.result(), self.prefix_cache.acquire(a.seq.image_key)
            items.append(PrefillItem(a.seq.row, crops, a.seq.prefix_slot, a.seq.prompt))
            a.seq.picture = a.seq.crops = None
        self._encoded_last = any(a.prefix is None for a in admitted)
        self.runner.launch_prefill(items)
        rows = [a.seq.row for a in admitted]
        self.scheduler.on_launch(rows, advance_position=False)
        self.prefill_steps += 1
        if plan is not None:
            rows = sorted(rows + plan.rows)
        # Sampled over a batch bucket, as a decode step is: a captured sampling graph of that size exists.
        return self.pipeline.launch("prefill" if plan is None else "mixed", rows, self.runner.batch_bucket(max(rows) + 1))

    def _finalize(self, step: Step) -> None:
        states, active = self.scheduler.mask_states(step.rows, step.batch)
        self.runner.finalize(step.slot, step.batch, states, active)
        self.pipeline.finalize(step)

    def _commit(self) -> bool:
        step = self.pipeline.oldest_sampled()
        if step is None:
            return False
        with self.step_clock.phase("results"):
            results = self.runner.read_results(step.slot, step.batch, step.rows)
        with self.step_clock.phase("commit"):
            self.pipeline.commit(step)
            self.scheduler.commit(step.rows, results)
        return True

    def _release_prefix(self, seq: Sequence) -> None:
        """The scheduler released `seq`'s row: no launched step reads its prefix slot any more."""
        if seq.prefix_slot >= 0:
            self.prefix_cache.unref(seq.prefix_slot)
            seq.prefix_slot = -1

    def _has_pixels(self, seq: Sequence, cached: bool) -> bool:
        """An admitted request whose crops failed ends alone, with its error (reap frees its row)."""
        error = None if cached else seq.crops.exception()
        if error is not None:
            seq.picture = seq.crops = None
            self.scheduler.finish(seq, RequestError(f"cannot crop the image: {' '.join(str(error).split())}"))
        return error is None

    def _crops_ready(self, seq: Sequence) -> bool:
        """Admission: may `seq`, whose prefix is not cached, be encoded now?"""
        if seq.crops is None:  # its prefix was cached at submit and has been evicted since
            seq.crops = self.crops.request(seq.image_key, seq.picture)
        if self._thread is None:  # the caller drives the loop: wait, so every schedule is reproducible
            seq.crops.exception()
        return seq.crops.done()

    def _attach_grammar(self, seq: Sequence) -> bool:
        """Admission time: the grammar (compiled at submit) gets its mask-table rows, new rows go up.

        A full table is rebuilt with the grammars of the running requests only (their rows are
        renumbered; the upload is ordered after every step already sampled). If even that leaves
        no room, returns False: the request waits until running requests finish (submit refused
        any grammar larger than the whole table)."""
        try:
            seq.mask_rows = self.masks.register(seq.automaton)
        except RuntimeError:
            live = [s for s in self.scheduler.running.values()
                    if not s.finalized and s.mask_rows is not None and s is not seq]
            used = set().union(*(s.mask_rows.tolist() for s in live)) - {MaskTable.UNCONSTRAINED}
            if len(used) < self.masks.num_rows - 1:  # rows to win back
                self.masks.rebuild(dict.fromkeys(s.automaton for s in live))
                for s in live:
                    s.mask_rows = self.masks.register(s.automaton)
                self.runner.upload_mask_rows(self.masks.allowed, self.masks.num_rows, start=1)
            try:
                seq.mask_rows = self.masks.register(seq.automaton)
            except RuntimeError:
                seq.mask_rows = None
                return False
        seq.state = seq.automaton.initial_state
        self.runner.upload_mask_rows(self.masks.allowed, self.masks.num_rows)
        return True

    # ---- requests -----------------------------------------------------------------------
    def _alphabet(self, tokenizer) -> TokenAlphabet:
        """The grammar alphabet: the special ids, plus the tokenizer's text tokens for text answers
        (none when the tokenizer is not byte-level BPE: query/caption are then refused)."""
        t, vocab = self.model_config.tokens, self.model_config.text.vocab_size
        try:
            return TokenAlphabet.from_tokenizer(tokenizer, vocab, t.eos_id, t.coord_id, t.size_id,
                                                exclude=(t.bos_id, t.answer_id))
        except (ValueError, AttributeError):
            return TokenAlphabet(vocab_size=vocab, eos_id=t.eos_id, coord_id=t.coord_id, size_id=t.size_id)

    def _text_request(self, skill: str, obj: object, answer: object, max_tokens: object, length: object):
        """A query's or caption's prompt, grammar, token cap and result builder (RequestError if bad)."""
        cfg = self.model_config
        if not self.alphabet.text_tokens:
            raise RequestError("this model's tokenizer is not a byte-level BPE, so it cannot answer in text; "
                               "use point or detect")
        if skill == "query":
            prompt = query_prompt_ids(cfg.tokens, lambda s: self.tokenizer.encode(s).ids, validate_question(obj))
            fmt = as_answer_format(answer)
        else:
            if answer is not None:
                raise RequestError("caption takes no answer format; ask a query to shape the answer")
            prompt, fmt = caption_prompt_ids(cfg.tokens, length), None
        room = max_answer_tokens(self.runner.scratch_pos, cfg.prefix_len, len(prompt))
        if room < 1:
            raise RequestError(f"the prompt ({len(prompt)} tokens) leaves no room for an answer in this engine's "
                               f"rows of {self.runner.scratch_pos} positions; ask a shorter question")
        if max_tokens is None:
            max_tokens = min(DEFAULT_MAX_TOKENS, room)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= room:
            raise RequestError(f"max_tokens must be a whole number from 1 to {room} (what this engine's rows "
                               f"hold after this prompt), got {max_tokens!r}")
        spec = answer_grammar(fmt)
        key, parse = ("answer", isinstance(fmt, JsonSchema)) if skill == "query" else ("caption", False)
        token_bytes = self.alphabet.text_tokens
        return prompt, spec, max_tokens, lambda: TextBuilder(key, token_bytes, max_tokens, parse_json=parse)

    def _grammar(self, spec: GrammarSpec):
        """Compile (cached by grammar and vocabulary) and check the size: a grammar that cannot
        run is refused here, before the request queues (its mask rows are taken at admission)."""
        try:
            auto = self.compiler.compile(spec, self.alphabet)
        except ValueError as e:
            raise RequestError(f"cannot use this answer format: {one_line(e)}") from None
        vocab = self.model_config.text.vocab_size
        if auto.num_states * vocab > MAX_GRAMMAR_CELLS:
            raise RequestError(f"the answer grammar is too large: {auto.num_states:,} states x {vocab:,} tokens "
                               f"exceeds the limit of {MAX_GRAMMAR_CELLS:,}; simplify the schema or regex")
        rows = auto.num_distinct_sets
        if rows > self.masks.capacity - 1:
            raise RequestError(f"the answer grammar needs {rows} mask rows; this engine holds {self.masks.capacity - 1} "
                               "(simplify it, or start the engine with a larger mask_capacity)")
        return auto

    def _drain_inbox(self) -> None:
        while True:
            try:
                self.scheduler.add(self._inbox.get_nowait())
            except queue.Empty:
                return

    def _fail_all(self, error: Exception) -> None:
        """Last resort after an unexpected device error: fail every request, reset the pipeline."""
        self._drain_inbox()
        self.runner.synchronize()
        self.scheduler.abort_all(RuntimeError(f"engine error: {error}"))
        self.pipeline = PipelineState()
        self.runner.reset_slots()

    # ---- accounting ---------------------------------------------------------------------
    def pools(self) -> dict[str, int]:
        """Sizes of every pool, for leak checks: all zero-in-use when idle."""
        return {
            "rows_in_use": self.scheduler.rows_in_use(),
            "running": len(self.scheduler.running),
            "waiting": self.queued(),
            "steps_in_flight": self.pipeline.in_flight,
            "slots_unread": self.runner.slots_unread(),
            "prefix_cache": len(self.prefix_cache),
        }


__all__ = ["DEFAULT_WEIGHTS", "Cancelled", "DeadlineExceeded", "Engine", "EngineBusy", "EngineConfig",
           "RequestError", "RequestHandle"]
