"""`ModelRunner`: every device buffer, the two streams, and the three device-side verbs.

    launch_prefill / launch_decode   enqueue a forward on the compute stream
    finalize                         upload grammar state ids (copy stream) → sample (compute,
                                     `engine.worker.sampling.Sampler`) → results to host (copy)
    read_results                     host side of commit: wait for the copy, read, poison

Decode batches are KV rows 0..B-1 (B a bucket); rows not in the step are padding whose
writes land on the scratch position `max_len - 1` and whose samples are discarded. The
per-row inputs of the next forward — sampled token, decoded coordinate/size and their input
embeddings — stay on the device (the sampler's `pending_*` and `embeds`): nothing goes through the
CPU between two forwards. Forwards leave only the last hidden state per row (`hidden`).

The engine drives it through the `engine.worker.protocol.Runner` protocol; slots are named
by index (0 or 1, as `PipelineState` hands them out).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import numpy as np
import torch

from engine.kernels import GROUP_MIN_BATCH, KernelChoice, group_table, group_table_size, grouping_pays, use_fused
from engine.model.image import OverlapCrops, overlap_crops_tensor
from engine.model.moondream import MoondreamModel
from engine.worker.sampling import Sampler, SampleHeads
from engine.worker.slots import DecodeSlot, StepResults
from engine.worker.streams import Streams
from engine.model.text import KVCache, SharedPrefix


# Prompt lengths a captured prompt prefill is padded to; a longer prompt runs eagerly.
PROMPT_LENGTHS = (16, 32, 64)


def batch_buckets(max_batch: int) -> list[int]:
    sizes = {b for b in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128) if b < max_batch}
    return sorted(sizes | {max_batch})


@dataclass(frozen=True)
class PrefillItem:
    row: int
    crops: OverlapCrops | np.ndarray | None  # pixels [H, W, 3] uint8: crops made here, on the device;
                                             # None: `slot` already holds the image prefix
    slot: int                                # the shared-prefix slot the row reads its image prefix from
    prompt: list[int]


class ModelRunner:
    def __init__(self, model: MoondreamModel, *, max_batch: int, max_len: int, mask_capacity: int,
                 prefix_slots: int | None = None, use_graphs: bool | None = None, len_bucket: int = 64,
                 kernels: KernelChoice = "auto", group_prefix: str = "auto") -> None:
        cfg = model.config
        self.model, self.cfg = model, cfg
        self.device = model.device
        self.streams = Streams(self.device)
        self.rows = max_batch
        self.max_len = max_len
        self.scratch_pos = max_len - 1
        self.len_bucket = len_bucket
        self.kernels = kernels
        self.buckets = batch_buckets(max_batch)
        self.use_graphs = self.streams.cuda and use_graphs is not False  # graphs exist only on CUDA
        dev, dt, d = self.device, model.dtype, cfg.text.dim
        self.kv = KVCache.allocate(cfg.text, max_batch, max_len, device=dev, dtype=dt)
        # Image prefixes, one per slot, read by every row of that image (default: one per row).
        self.prefix = SharedPrefix.allocate(cfg.text, prefix_slots or max_batch, cfg.prefix_len, max_batch,
                                            device=dev, dtype=dt, grouped=True)
        self.slot_of_row = np.zeros(max_batch, dtype=np.int64)  # host copy of prefix.slots
        # The fused kernels read a row's image prefix from its slot. The PyTorch path (the CPU) would
        # have to gather it for every layer of every step, so there each row gets a copy of its
        # slot at admission and reads its own positions, as the reference decoder's rows do.
        # `row_prefix` is what the forwards read the prefix from: the slots, or (None) the rows.
        fused = use_fused(kernels, self.kv.k, cfg.text.head_dim)
        self.row_prefix = self.prefix if fused else None
        if fused:  # the fused decode step's two GEMMs a layer (FusedProjections), before any capture
            model.text.fuse_projections()
        self.fused_vision = fused  # the vision tower's fused blocks (VisionEncoder.encode_crops)
        self.sampler = Sampler(model, max_batch=max_batch, mask_capacity=mask_capacity, fused=fused)
        grouping_pays(0, GROUP_MIN_BATCH, group_prefix)  # a bad choice fails here, not at the first step
        self.group_prefix = group_prefix  # when a decode step reads the prefix once per group of rows
        self.group_host = [self.streams.pinned(group_table_size(max_batch), dtype=torch.long) for _ in range(2)]
        self.positions = torch.full((max_batch,), self.scratch_pos, dtype=torch.long, device=dev)
        self.hidden = torch.zeros(max_batch, d, dtype=dt, device=dev)
        # Inputs and outputs of the captured prompt prefill (_prompt_prefill): token ids, positions,
        # row and last-token index per item, padded; the last token's hidden state.
        self.prompt_in = torch.zeros(4, max_batch, PROMPT_LENGTHS[-1], dtype=torch.long, device=dev)
        self.prompt_hidden = torch.zeros(max_batch, d, dtype=dt, device=dev)
        self.static_prompts = self.use_graphs  # padded prompt prefill; captured only with graphs
        self.mask_rows_uploaded = 0
        self.slots = [DecodeSlot(i, max_batch, self.streams, dev) for i in range(2)]
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.image_in: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # a tiling's captured inputs: crops, slot
        self._graph_pool = None

    # ---- shapes -------------------------------------------------------------------------
    def batch_bucket(self, rows_needed: int) -> int:
        return next(b for b in self.buckets if b >= rows_needed)

    def attn_bucket(self, max_position: int) -> int:
        n = -(-(max_position + 1) // self.len_bucket) * self.len_bucket
        return min(n, self.max_len)

    # ---- grammar masks ------------------------------------------------------------------
    def upload_mask_rows(self, table: np.ndarray, num_rows: int, start: int | None = None) -> None:
        """Copy newly registered grammar-state rows to the device table (admission time only);
        `start`: copy from this row on (after the table was renumbered)."""
        if start is not None:
            self.mask_rows_uploaded = min(self.mask_rows_uploaded, start)
        if num_rows > self.mask_rows_uploaded:
            lo = self.mask_rows_uploaded
            rows = table[lo:num_rows]
            with self.streams.on_compute():
                self.sampler.load_mask_rows(lo, rows, self.streams.upload(torch.from_numpy(rows), self.device))
            self.mask_rows_uploaded = num_rows

    # ---- forwards -----------------------------------------------------------------------
    @torch.inference_mode()
    def launch_prefill(self, items: list[PrefillItem]) -> None:
        """Point each item's row at its prefix slot, encode the new images into their slots (one
        vision batch and one prefix prefill for the step), then one batched prompt prefill."""
        model, text, dev = self.model, self.model.text, self.device
        encode = list({item.slot: item for item in items if item.crops is not None}.values())  # one per slot
        with self.streams.on_compute():
            rows, slots = [i.row for i in items], [i.slot for i in items]
            ids = self.streams.upload(torch.tensor(rows + slots + [i.slot for i in encode]), dev)  # one copy
            n = len(items)
            self.prefix.slots[ids[:n]] = ids[n:2 * n]
            self.slot_of_row[rows] = slots
            if len(encode) == 1 and self.use_graphs:  # one new image: the latency case, as one graph
                self._image_prefill(self._crops_here(encode[0].crops), ids[2 * n:])
            elif encode:
                crops = model.encode_images([self._crops_here(item.crops) for item in encode], fused=self.fused_vision)
                text.prefill_prefix(crops, self.prefix.as_cache(), ids[2 * n:], self.kernels)
            if self.row_prefix is None:  # the PyTorch path: each row its own copy of its slot
                plen = self.prefix.length
                self.kv.k[:, ids[:n], :, :plen] = self.prefix.k[:, ids[n:2 * n]]
                self.kv.v[:, ids[:n], :, :plen] = self.prefix.v[:, ids[n:2 * n]]
            self._prompt_prefill(items)

    def _image_prefill(self, crops: OverlapCrops, slot: torch.Tensor) -> None:
        """One new image's vision tower, projection and prefix prefill into `slot` ([1] long, on
        the device) as a graph replay per tiling: one image at a time the ~1,500 kernel launches
        of the eager forward, not the GPU, set its pace (README, "Whole requests under load").
        Captured at the first image of a tiling (a few prefills' time, inside that step)."""
        key = ("image", *crops.tiling)
        if key not in self.image_in:
            pixels = torch.zeros(crops.crops.shape, dtype=torch.uint8, device=self.device)
            self.image_in[key] = (pixels, torch.zeros(1, dtype=torch.long, device=self.device))
        pixels, slot_in = self.image_in[key]
        source = crops.crops
        pixels.copy_(self.streams.upload(torch.from_numpy(source), self.device) if isinstance(source, np.ndarray)
                     else source)
        slot_in.copy_(slot)

        def body() -> None:
            embeds = self.model.encode_crops_of_one(pixels, crops.tiling, fused=self.fused_vision)
            self.model.text.prefill_prefix(embeds, self.prefix.as_cache(), slot_in, self.kernels)

        self._captured(key, body).replay()

    def _crops_here(self, crops: OverlapCrops | np.ndarray) -> OverlapCrops:
        """OverlapCrops as they are; pixels are uploaded and cropped on this device (libvips' pixels)."""
        if isinstance(crops, np.ndarray):
            pixels = self.streams.upload(torch.from_numpy(crops), self.device)
            return OverlapCrops(*overlap_crops_tensor(pixels, self.cfg.vision))
        return crops

    def prompt_length_bucket(self, longest: int) -> int | None:
        """The padded prompt length a captured prompt prefill runs at, or None: run it eagerly."""
        if not self.static_prompts:
            return None
        return next((n for n in PROMPT_LENGTHS if n >= longest), None)

    def _prompt_prefill(self, items: list[PrefillItem]) -> None:
        """Every item's prompt after its image prefix, in one batched forward; the last prompt
        token's hidden state lands in the items' rows of `hidden`.

        On CUDA the forward is a graph replay per (batch bucket, length bucket): the prompts are
        padded with tokens at the scratch position, and the batch with whole padding items. Its
        host cost is a few copies, not the ~400 kernel launches of the eager forward."""
        model, text, dev, plen = self.model, self.model.text, self.device, self.cfg.prefix_len
        n = len(items)
        longest = max(len(i.prompt) for i in items)
        length = self.prompt_length_bucket(longest)
        if length is None:
            ids = torch.zeros(n, longest, dtype=torch.long)
            for k, item in enumerate(items):
                ids[k, : len(item.prompt)] = torch.tensor(item.prompt)
            meta = torch.tensor([[i.row for i in items], [len(i.prompt) - 1 for i in items]])
            inputs = self.streams.upload(torch.cat([ids.flatten(), meta.flatten()]), dev)  # one copy
            ids, rows, last = inputs[: n * longest].view(n, longest), inputs[n * longest:][:n], inputs[n * longest + n:]
            hidden = text.prefill(model.embed_ids(ids), self.kv, rows, torch.full((n,), plen, device=dev),
                                  prefix=self.row_prefix)
            h = hidden[torch.arange(n, device=dev), last]
            self.hidden[rows] = h
            return
        batch = self.batch_bucket(n)
        host = self.streams.pinned(4, batch, length, dtype=torch.long)  # ids, positions, row, last index
        host[1].fill_(self.scratch_pos)
        host[2].fill_(items[0].row)  # padding items write only the scratch position of a real row
        for k, item in enumerate(items):
            m = len(item.prompt)
            host[0, k, :m] = torch.tensor(item.prompt)
            host[1, k, :m] = torch.arange(plen, plen + m)
            host[2, k], host[3, k] = item.row, m - 1
        self.prompt_in[:, :batch, :length].copy_(host, non_blocking=True)  # pinned: the CPU does not wait
        rows = self.prompt_in[2, :n, 0]
        if self.use_graphs:
            self._captured(("prompt", batch, length), lambda: self._prompt_forward(batch, length)).replay()
        else:  # the same padded forward, eagerly (tests run it on the CPU)
            self._prompt_forward(batch, length)
        self.hidden[rows] = self.prompt_hidden[:n]

    def _prompt_forward(self, batch: int, length: int) -> None:
        """The graph body of a prompt prefill: `prompt_in` rows 0..batch-1 → `prompt_hidden`."""
        text, plen = self.model.text, self.cfg.prefix_len
        ids, pos = self.prompt_in[0, :batch, :length], self.prompt_in[1, :batch, :length]
        rows, last = self.prompt_in[2, :batch, 0], self.prompt_in[3, :batch, 0]
        hidden = text.prefill_at(self.model.embed_ids(ids), self.kv, rows, pos, plen + length,
                                 self.kernels, prefix=self.row_prefix)  # [batch, length, D]
        self.prompt_hidden[:batch] = hidden[torch.arange(batch, device=self.device), last]  # [batch, D]

    def _decode_forward(self, batch: int, attn_len: int, grouped: bool) -> None:
        """The graph body: input embeddings of rows 0..B-1 (`embeds`, made at sampling) → their last
        hidden state."""
        model = self.model
        self.hidden[:batch] = model.text.decode(self.sampler.embeds[:batch], self.kv, self.positions[:batch], attn_len,
                                                self.kernels, prefix=self.row_prefix, grouped=grouped)

    @torch.inference_mode()
    def embed_pending(self, batch: int) -> None:
        """Tests and benchmarks that set the sampler's `pending_*` by hand: its `embeds` of rows
        0..batch-1 from them."""
        with self.streams.on_compute():
            self.sampler.embed_pending(batch)

    @torch.inference_mode()
    def launch_decode(self, slot: int, batch: int, positions: np.ndarray, attn_len: int) -> None:
        """positions: [batch] int64, scratch for padding rows. Enqueues one forward (graph replay on CUDA)."""
        host = self.slots[slot].positions
        host[:batch] = torch.from_numpy(positions)
        with self.streams.on_compute():
            self.positions[:batch].copy_(host[:batch], non_blocking=True)
            grouped = self.group_rows(slot, batch)
            self.replay_decode(batch, attn_len, grouped)

    def group_rows(self, slot: int, batch: int) -> bool:
        """Group rows 0..batch-1 by their prefix slot for the fused decode attention, when that pays
        (`grouping_pays`): the table is enqueued for upload and True returned; else False (each
        row reads its prefix itself). Uses `slot`'s pinned buffer."""
        if self.row_prefix is None or batch < GROUP_MIN_BATCH or self.group_prefix == "never":
            return False
        groups = self.group_host[slot]
        table = groups.numpy()
        group_table(self.slot_of_row[:batch], table)
        if not grouping_pays(int(table[-1]), batch, self.group_prefix):
            return False
        with self.streams.on_compute():
            self.prefix.groups.copy_(groups, non_blocking=True)
        return True

    @torch.inference_mode()
    def replay_decode(self, batch: int, attn_len: int, grouped: bool = False) -> None:
        """The decode forward of rows 0..batch-1 at the current device positions (graph on CUDA);
        `grouped`: with the group table `group_rows` uploaded. `launch_decode` uses it; benchmarks
        replay it alone to time the GPU without the CPU."""
        with self.streams.on_compute():
            if self.use_graphs:
                self._graph(batch, attn_len, grouped).replay()
            else:
                self._decode_forward(batch, attn_len, grouped)

    @torch.inference_mode()
    def replay_sample(self, slot: int, batch: int, heads: SampleHeads) -> None:
        """The sampling of rows 0..batch-1 into `slot` (`Sampler.sample`; a graph on CUDA)."""
        s = self.slots[slot]
        with self.streams.on_compute():
            if self.use_graphs:
                self._captured(("sample", slot, batch, heads), lambda: self.sampler.sample(s, self.hidden[:batch], heads)).replay()
            else:
                self.sampler.sample(s, self.hidden[:batch], heads)

    @torch.inference_mode()
    def set_positions(self, batch: int, position: int | None = None, advance: int = 0) -> None:
        """Benchmarks: set every decode position of rows 0..batch-1, or advance them."""
        with self.streams.on_compute():
            if position is not None:
                self.positions[:batch].fill_(position)
            if advance:
                self.positions[:batch] += advance

    def _graph(self, batch: int, attn_len: int, grouped: bool) -> torch.cuda.CUDAGraph:
        return self._captured(("decode", batch, attn_len, grouped), lambda: self._decode_forward(batch, attn_len, grouped))

    def _captured(self, key: tuple, body) -> torch.cuda.CUDAGraph:
        """Capture `body` once per key on the compute stream, all graphs sharing one memory pool.

        The warm-up runs are idempotent (same inputs, same writes), so capturing lazily in the
        middle of serving is safe; `capture_all` does it up front so no request waits for it.
        Python's cyclic collector is held off while a graph is captured: a collection there can free
        a dead engine's graphs, and destroying a graph during a capture invalidates the capture.
        """
        if key not in self.graphs:
            self.streams.compute.synchronize()
            for _ in range(2):
                body()
            graph = torch.cuda.CUDAGraph()
            collecting = gc.isenabled()
            gc.disable()
            try:
                with torch.cuda.graph(graph, pool=self._graph_pool, stream=self.streams.compute):
                    body()
            finally:
                if collecting:
                    gc.enable()
            self._graph_pool = graph.pool()
            self.graphs[key] = graph
        return self.graphs[key]

    @torch.inference_mode()
    def capture_all(self, max_position: int) -> int:
        """Capture every (batch, length) decode bucket, every sampling bucket and every prompt
        prefill (batch bucket × prompt length) up front, so no request waits for a capture."""
        if not self.use_graphs:
            return 0
        lengths = sorted({self.attn_bucket(p) for p in range(self.cfg.prefix_len, max_position + 1, self.len_bucket)}
                         | {self.attn_bucket(max_position)})
        with self.streams.on_compute():
            for b in reversed(self.buckets):
                groupings = (False, True) if self.row_prefix is not None and grouping_pays(1, b, self.group_prefix) else (False,)
                for n in lengths:
                    for grouped in groupings:
                        self._graph(b, n, grouped)
                for slot in self.slots:
                    for heads in SampleHeads.variants():
                        self._captured(("sample", slot.index, b, heads),
                                       lambda: self.sampler.sample(slot, self.hidden[:b], heads))
            # Prompt prefills captured on padding only: every token writes the scratch position of row 0.
            self.prompt_in.zero_()
            self.prompt_in[1].fill_(self.scratch_pos)
            for b in reversed(self.buckets):
                for n in PROMPT_LENGTHS:
                    self._captured(("prompt", b, n), lambda: self._prompt_forward(b, n))
        self.streams.synchronize()
        return len(self.graphs)

    # ---- sampling -----------------------------------------------------------------------
    @torch.inference_mode()
    def finalize(self, slot_index: int, batch: int, state_ids: np.ndarray, active: np.ndarray) -> None:
        """The step's sampling (`Sampler`): logits under the grammar masks, greedy tokens, region
        values, the next forward's inputs.

        state_ids/active: [batch] (global mask-table row per row; padding/zombie rows use 0,
        the unconstrained row, and active=0 so their pending inputs are left untouched).
        """
        heads = self.sampler.heads(state_ids[:batch][active[:batch] != 0])
        slot = self.slots[slot_index]
        slot.claim_for_results()
        slot.meta[0, :batch] = torch.from_numpy(state_ids)
        slot.meta[1, :batch] = torch.from_numpy(active)
        with self.streams.on_copy():
            # The whole buffer: a slice [:, :batch] is not contiguous, and torch would stage it
            # through pageable memory and wait for the copy.
            slot.meta_dev.copy_(slot.meta, non_blocking=True)
            slot.mask_ready.record()
        with self.streams.on_compute():
            slot.mask_ready.wait()
            self.replay_sample(slot_index, batch, heads)
            slot.sampled.record()
        with self.streams.on_copy():
            slot.sampled.wait()
            slot.tokens[:batch].copy_(slot.tokens_dev[:batch], non_blocking=True)
            slot.coords[:batch].copy_(slot.coords_dev[:batch], non_blocking=True)
            slot.sizes[:batch].copy_(slot.sizes_dev[:batch], non_blocking=True)
            slot.probs[:batch].copy_(slot.probs_dev[:batch], non_blocking=True)
            slot.copied.record()

    def read_results(self, slot: int, batch: int, rows: list[int]) -> StepResults:
        return self.slots[slot].read_results(batch, rows)

    # ---- housekeeping -------------------------------------------------------------------
    def synchronize(self) -> None:
        self.streams.synchronize()

    def reset_slots(self) -> None:
        """After a failed step (device synchronised): forget unread results, poison the buffers."""
        for slot in self.slots:
            slot.reset()

    def slots_unread(self) -> int:
        return sum(s.unread for s in self.slots)
