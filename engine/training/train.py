"""Train a Moondream-2-architecture model for point/detect on synthetic scenes (teacher forcing).

    python -m engine.train --out DIR [--preset embedded] [--steps N] [--batch B] [--queries Q]
                           [--lr LR] [--seed S] [--device cuda|cpu] [--workers K] [--init DIR]
                           [--minutes M] [--save-every SEC] [--heldout N] [--reuse R] [--fixed-batch]
                           [--grow-text-layers N] [--grow-vision-layers N]   (with --init)
                           [--variety]   (the widened training scenes, scenes.VARIETY_SCENES)
                           [--lookalikes]   (look-alike distractor shapes, scenes.LOOKALIKE_SHAPES)
                           [--style]   (shadows, shading, rims and whole-scene warps, engine/training/styles.py)
                           [--clutter]   (printed-text and leaf backgrounds, engine/training/clutter.py)
                           [--poses]   (half the diamonds and squares stand on a vertex, scenes.VERTEX_POSES)
                           [--cells]   (some scenes redrawn as LED panels or tile mosaics, engine/training/cells.py)
                           [--cells-share P]   (the share of scenes tried as cells, with --cells; default cells.CELLS_P)
                           [--drops]   (rain, bubbles, glints or bokeh on some backgrounds, engine/training/drops.py)
                           [--foreign P]   (a share P of the scenes drawn by engine/training/foreign's generators)
                           [--foreign-from NAMES]   (which of them, e.g. third,fourth,fifth,sixth,seventh,eighth)

On every GPU of the host (one rank per GPU, DistributedDataParallel; `engine.training.distributed`):

    torchrun --standalone --nproc-per-node N -m engine.train --out DIR ...

--batch stays per rank (the global batch is N × batch; the log's images/s count every rank),
the learning rate is unchanged, rank r trains on batches r, N + r, 2N + r, … of the seed's stream
(no batch twice; a single process reads 0, 1, 2, … as before), --workers is per rank. Rank 0
alone calibrates --minutes, logs, writes checkpoints and runs the held-out check.

Every default lives in `RECIPE` below; with the same recipe, seed and step count the data, the
initialisation and the schedule are the same on every machine.

What one example is (Moondream 2 §6, §7, §11, §12, exactly the layout the engine decodes):

    image → overlap crops (engine.model.image, as at inference) → vision encoder → projection
    [BOS, image]        positions 0..P-1, bidirectional block
    prompt ids          `skills.prompt_ids(detect|point, query text)`; the skill is drawn 50/50
    per target object   (Query.matches, reading order)
        detect: coord(x) coord(y) size(w, h)     point: coord(x) coord(y)
With `qa_frac` > 0 that share of the sequences are instead a question or a caption request about
the image (engine.training.qa): the prompt ids the engine builds for it (`skills.query_prompt_ids`
/ `caption_prompt_ids`), then the canonical answer's ids; lm targets are the answer tokens and EOS.

Losses, all on the raw (pre post_ln) hidden state of a position:
    lm     at the last prompt position and after each object's final slot: cross-entropy of
           lm_head(post_ln(h)) against coord_id (5) when another object follows, else eos_id (0)
    coord  x bin from the hidden that predicts x (same position as that 5), y bin from the
           hidden after feeding x; bin = coord_to_bin(v, 1024), inference decodes bin / 1024
    size   (detect) width and height bins (size_to_bin, log scale) from the hidden after feeding y
Targets: point skill → SceneObject.point; detect → box centre and box (w, h). Slot inputs are the
values the engine would feed back: bin / 1024 for coordinates, size_from_bin(bin) for sizes.
Learning to localise from scratch is the hard part: with only the losses above the text model
sits for a long time on a plateau where its hidden states carry no object position (it predicts
the marginal). Training-only aids, none of which changes the architecture or the checkpoint,
shorten that plateau. Measured on a CPU proxy (tiny preset, one object per image, 600 steps of
16): x/y error 24% (= guessing) with the plain losses and weight decay 0.05, 19% with grounding +
probes, 4.4% with those and no weight decay:
    - grounding: the last text layer's first `ground_heads` heads, at every position that predicts
      an object's x, y or size, are trained to put their attention on the grid cells of that
      object's box (−log of the attention mass there);
    - probes: linear read-outs of x, y and log-size from those hiddens (MSE), created for the run
      and thrown away, give the text model a direct gradient to carry the position;
    - bin targets are Gaussian-smoothed, wide at first and narrow later (σ 32 → 2 coordinate
      bins, 48 → 3 size bins over the first half), and the region decoders' output rows start as
      smooth functions of the bin, so neighbouring bins share gradient; argmax stays on the true bin;
    - cells: per image token, linear read-outs of the colour and shape of the object in its cell
      (cross-entropy), so the vision tower learns early what queries ask about;
    - the vision pos_emb starts as a 2D sine-cosine grid; no weight decay.

Efficiency: each image carries `queries` (prompt, targets) sequences. The image prefix does not
attend to anything after it, so it is run once per image and every query's tail attends to that
image's prefix K/V plus its own causal keys (`text_forward`); this equals the full-sequence forward
with a [prefix bidirectional | causal] mask, and tests/test_train.py checks it against the
inference path (TextModel.prefill + decode). Vision: all crops of a batch in one encoder batch,
then per-tiling groups are stitched, pooled and projected (`project_batch` = VisionEncoder.project).

Data: worker processes generate whole collated batches (scenes, overlap crops as uint8, token and
target arrays); batch i depends only on (seed, i), so the stream is identical for any worker count.

Schedule: AdamW, linear warmup, cosine to min_lr_frac; bf16 autocast on CUDA; grad-norm clip.
With `--minutes M` the run ends by wall time M (from process start): after the first
`calibrate_s` seconds of steps the total step count is set to what fits the remaining time
(logged as "total_steps"; rerun with `--steps <that> --minutes 0` for the same schedule), and
the cosine also follows elapsed time if the run falls behind, so it always ends annealed.

Outputs in DIR: model.safetensors (bf16, "model." keys, 15.7 MiB for "embedded"), tokenizer.json,
config.json (preset name), train_log.jsonl (start, calibrate, one line per `log_every` steps,
end, heldout). Checkpoints are written every `save_every` seconds and at the end (files replaced
atomically; SIGTERM and Ctrl-C also end through the final save), so a killed run still leaves
loadable weights. After the final save the saved weights are decoded greedily with
engine.model.reference (no grammar library needed) on `heldout` scenes of scene_batch(12345) and scored
with engine.training.evaluate's metrics: a first look at AP50 / hit rate / counts where the engine itself
cannot run.

Why these defaults (full scale, one H200, `--minutes 7`): a data worker makes a 128-image batch
(scenes, Lanczos crops, 1024 sequences) in ~1 s, so 14 workers give ~13 fresh batches/s; each
batch is used twice (`reuse`, the repeat 8 steps later, on the device), so the GPU can run ~25
steps/s if its step (≈400 crops through the ViT, 128 prefixes and 1024 short tails) takes < 40 ms;
if it is slower the run is GPU-bound and the data simply waits. ~6.5 minutes of training is
then 6-10k steps ≈ 0.8-1.3M image views ≈ 6-10M query sequences; the step count is fixed by the
calibration. Eight queries per image multiply the supervision per generated image at little
GPU cost (the prefix is shared). lr 1.5e-3 with 300 warmup steps suits an 8M-parameter
transformer at 1024 sequences per step.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.model.checkpoint import load_model, save_checkpoint
from engine.model.config import PRESETS, MoondreamConfig
from engine.model.image import normalize_crops, overlap_crop_image
from engine.model.moondream import MoondreamModel
from engine.model.region import coord_to_bin, size_from_bin, size_to_bin
from engine.training.scenes import (ALL_QUERIES, COLOURS, OWN_SCENES, SCENE_VOCABULARY, SHAPES, VARIETY_SCENES, make_query,
                                    make_scene, vary_wording)
from engine.serving.skills import normalize_query, prompt_ids
from engine.model.text import rope_tables
from engine.training.distributed import (STOP_INTERRUPTED, STOP_NONE, STOP_REASONS, STOP_TIME, SYNC_EVERY, Ranks,
                                         workers_per_rank)
from engine.training.cells import CELLS_P
from engine.training.foreign import GENERATORS as FOREIGN_GENERATORS, SESSION51, check_names, foreign_scene
from engine.training.grow import grow, same_but_depth, with_tiling_of
from engine.training.qa import make_qa, qa_ids
from engine.training.vocab import build_tokenizer

PROCESS_START = time.monotonic()

RECIPE: dict[str, Any] = {
    "preset": "embedded",
    "seed": 0,               # data stream and initialisation (evaluation uses another seed: 12345)
    "steps": 12000,          # upper bound; with --minutes the run calibrates to what fits
    "batch": 128,            # images per step
    "queries": 8,            # (skill, query) sequences per image
    "reuse": 2,              # each generated batch is trained on this many times …
    "reuse_lag": 8,          # … the repeat coming `reuse_lag` fresh batches later (kept on the device)
    "lr": 1.5e-3,
    "min_lr_frac": 0.05,
    "warmup": 300,
    "weight_decay": 0.0,     # (matrices only) any decay here lengthened the localisation plateau a lot
    "betas": (0.9, 0.95),
    "grad_clip": 1.0,
    "point_frac": 0.5,       # share of point (vs detect) sequences
    "coord_sigma": (32.0, 2.0),   # Gaussian label smoothing of coordinate bins (σ in bins), coarse → fine:
    "size_sigma": (48.0, 3.0),    # geometric from the first to the second value over the first
    "sigma_decay": 0.5,           # `sigma_decay` of the run, then constant (size: ≈ 102 bins per octave)
    "pos_init": "sincos",    # vision pos_emb starts as a 2D sine-cosine grid ("normal": N(0, init_std))
    "loss_weights": {"lm": 1.0, "coord": 1.0, "size": 1.0, "ground": 1.0, "cells": 0.5},
    "ground_heads": 0.5,     # share of the last text layer's heads whose attention is supervised (grounding)
    "probe_weight": 10.0,    # training-only linear read-outs of x / y / log-size from the same hiddens (MSE)
    "decoder_init": "fourier",  # region decoders' output rows start as smooth functions of the bin
    "grow_text_layers": 0,   # blocks added to the --init model's towers, computing nothing at first (grow.py)
    "grow_vision_layers": 0,
    "init_std": 0.02,
    "feature_std": 10.0,     # Fourier feature matrices (coord_features, size_features)
    "scene": OWN_SCENES,     # make_scene arguments: up to 25 objects, distractors, crowds, photo effects
    "empty_rate": 0.2,       # share of queries that match nothing
    "hard_rate": 0.0,        # share of those drawn among near misses (scenes.near_miss); 0: none
    "qa_frac": 0.0,          # share of sequences that are questions / captions (engine.training.qa); 0: none
    "foreign": 0.0,          # share of scenes drawn by engine.training.foreign's generators; 0: none
    "foreign_from": SESSION51,   # which of them (foreign.GENERATORS keys), one at random per scene
    "minutes": None,         # wall-time budget (None: until `steps`)
    "calibrate_s": 60.0,     # the rate is read over its second half (after 30 s the data workers' queues are full)
    "heldout": 150,          # after training: greedy detect + point (engine.model.reference) on this many
    "heldout_seed": 12345,   # held-out scenes of scene_batch(heldout_seed), ≤ heldout_s seconds
    "heldout_s": 30.0,       # (reserved out of --minutes); 0 scenes: skip
    "save_every": 90.0,      # seconds between checkpoints
    "log_every": 50,
}

IGNORE = -100
SLOT_TEXT, SLOT_COORD, SLOT_SIZE = 0, 1, 2


# --------------------------------------------------------------------------------------------
# Data: one collated batch from (seed, index)
# --------------------------------------------------------------------------------------------

def prompt_table(config: MoondreamConfig, tokenizer) -> dict[tuple[str, str], list[int]]:
    """(skill, query text) → prompt ids for every query the scene generator can ask."""
    encode = lambda s: tokenizer.encode(s).ids  # noqa: E731
    return {(skill, q): prompt_ids(config.tokens, encode, skill, q) for skill in ("detect", "point") for q in ALL_QUERIES}


def blank_sequence(n: int) -> dict[str, np.ndarray]:
    """The arrays of one tail of n positions, every target ignored (see `make_batch`)."""
    return {
        "tok": np.zeros(n, np.int64), "kind": np.zeros(n, np.int8),
        "cval": np.zeros(n, np.float32), "sval": np.zeros((n, 2), np.float32),
        "lm_tgt": np.full(n, IGNORE, np.int64), "c_tgt": np.full(n, IGNORE, np.int64),
        "s_tgt": np.full((n, 2), IGNORE, np.int64),
        "g_box": np.full((n, 4), np.nan, np.float32),   # box of the object a position must find
        "c_axis": np.zeros(n, np.int8),                  # 1 where the coordinate target is a y
        "qa": np.zeros(n, np.int8),                      # 1 where the LM target is a text answer's token / EOS
    }


def qa_sequence(qa, config: MoondreamConfig, encode) -> dict[str, np.ndarray]:
    """A query's or caption's tail: the engine's prompt ids, then the canonical answer's ids;
    the LM learns the answer tokens and EOS (targets at the last prompt position onwards)."""
    prompt, answer = qa_ids(qa, config.tokens, encode)
    lp, n = len(prompt), len(prompt) + len(answer)
    if config.prefix_len + n + 1 > config.text.max_context:
        raise ValueError(f"a {qa.kind} sequence of {n} tokens does not fit the context of {config.text.max_context} "
                         f"after the {config.prefix_len}-position image prefix")
    seq = blank_sequence(n)
    seq["tok"][:lp] = prompt
    seq["tok"][lp:] = answer
    seq["lm_tgt"][lp - 1:n - 1] = answer
    seq["lm_tgt"][n - 1] = config.tokens.eos_id
    seq["qa"][lp - 1:] = 1
    return seq


def query_sequence(prompt: list[int], skill: str, matches, config: MoondreamConfig) -> dict[str, np.ndarray]:
    """Token/slot inputs and targets of one query's tail (the positions after the image prefix)."""
    tok_cfg, bins, sbins = config.tokens, config.region.coord_bins, config.region.size_bins
    per = 3 if skill == "detect" else 2
    lp, k = len(prompt), len(matches)
    n = lp + per * k
    seq = blank_sequence(n)
    seq["tok"][:lp] = prompt
    if k:
        if skill == "detect":
            boxes = torch.tensor([o.box for o in matches], dtype=torch.float64)
            xy = (boxes[:, :2] + boxes[:, 2:]) / 2
            wh_bins = size_to_bin(boxes[:, 2:] - boxes[:, :2], sbins)
            wh_vals = size_from_bin(wh_bins, sbins).numpy()
            wh_bins = wh_bins.numpy()
        else:
            xy = torch.tensor([o.point for o in matches], dtype=torch.float64)
        xy_bins = coord_to_bin(xy, bins).numpy()
    p = lp - 1                     # the position that decides "another object?" and predicts its x
    for j in range(k):
        q = lp + per * j
        seq["lm_tgt"][p] = tok_cfg.coord_id
        seq["c_tgt"][p] = xy_bins[j, 0]
        seq["g_box"][p:q + per - 1] = matches[j].box   # the positions predicting x, y (and size)
        seq["kind"][q:q + 2] = SLOT_COORD
        seq["cval"][q:q + 2] = xy_bins[j] / bins      # the value the engine feeds back
        seq["c_tgt"][q] = xy_bins[j, 1]                # after x: predict y
        seq["c_axis"][q] = 1
        if skill == "detect":
            seq["s_tgt"][q + 1] = wh_bins[j]           # after y: predict (w, h)
            seq["kind"][q + 2] = SLOT_SIZE
            seq["sval"][q + 2] = wh_vals[j]
        p = q + per - 1
    seq["lm_tgt"][p] = tok_cfg.eos_id
    return seq


def make_batch(config: MoondreamConfig, prompts: dict, seed: int, index: int, *, batch: int, queries: int,
               point_frac: float = 0.5, scene_kw: dict | None = None, empty_rate: float = 0.15,
               hard_rate: float = 0.0, qa_frac: float = 0.0, foreign: float = 0.0,
               foreign_from: tuple[str, ...] = SESSION51, tokenizer=None) -> dict[str, np.ndarray]:
    """Batch `index` of the stream `seed`: `batch` scenes, `queries` sequences each, collated.

    With `qa_frac` > 0 each sequence is, with that probability, a question or caption about the
    image (`engine.training.qa.make_qa`, encoded with `tokenizer`) instead of a point/detect query;
    qa_frac 0 draws no extra random numbers, so the stream is the same as without QA.
    With `foreign` > 0 each scene is, with that probability, drawn by one of the generators of
    `engine.training.foreign` named in `foreign_from` (written apart from scenes.py) instead of
    `make_scene`; its queries are made here as for any scene. foreign 0 likewise draws nothing extra.

    Returns numpy arrays: crops uint8 [C, S, S, 3] (all images' crops, global first per image),
    n_crops [B], tiling [B, 2], img [N] (image of each sequence), and [N, T] padded sequence arrays
    (see `query_sequence`); padding sits at the end of each row, where causal attention hides it.
    """
    scene_kw = dict(RECIPE["scene"] if scene_kw is None else scene_kw)
    crops, n_crops, tiling, seqs, img, cells = [], [], [], [], [], []
    for b in range(batch):
        rng = np.random.default_rng([seed, index, b])
        scene = foreign_scene(rng, foreign_from) if foreign and rng.random() < foreign else make_scene(rng, **scene_kw)
        oc = overlap_crop_image(scene.image, config.vision)
        crops.append(oc.crops)
        n_crops.append(oc.n_crops)
        tiling.append(oc.tiling)
        cells.append(cell_labels(scene, config.vision.grid))
        seen = set()
        for _ in range(queries):
            if qa_frac and rng.random() < qa_frac:
                seqs.append(qa_sequence(make_qa(rng, scene), config, lambda s: tokenizer.encode(s).ids))
                img.append(b)
                continue
            for _attempt in range(4):   # prefer distinct (skill, text) pairs within an image
                query = make_query(rng, scene, empty_rate=empty_rate, hard_rate=hard_rate)
                skill = "point" if rng.random() < point_frac else "detect"
                if (skill, query.text) not in seen:
                    break
            seen.add((skill, query.text))
            # the user's wording varies; the model sees it as the engine passes it: normalised
            text = normalize_query(vary_wording(rng, query.text))
            if text != query.text:
                raise AssertionError(f"normalize_query maps {query.text!r}'s variant to {text!r}")
            seqs.append(query_sequence(prompts[(skill, text)], skill, query.matches, config))
            img.append(b)
    t = max(len(s["tok"]) for s in seqs)
    out: dict[str, np.ndarray] = {
        "crops": np.concatenate(crops), "n_crops": np.array(n_crops, np.int64),
        "tiling": np.array(tiling, np.int64), "img": np.array(img, np.int64),
        "length": np.array([len(s["tok"]) for s in seqs], np.int64),
        "cell_colour": np.stack([c[0] for c in cells]), "cell_shape": np.stack([c[1] for c in cells]),
    }
    for key, fill in (("tok", 0), ("kind", SLOT_TEXT), ("cval", 0), ("sval", 0), ("lm_tgt", IGNORE),
                      ("c_tgt", IGNORE), ("s_tgt", IGNORE), ("g_box", np.nan), ("c_axis", 0), ("qa", 0)):
        first = seqs[0][key]
        arr = np.full((len(seqs), t) + first.shape[1:], fill, first.dtype)
        for i, s in enumerate(seqs):
            arr[i, : len(s[key])] = s[key]
        out[key] = arr
    out["kind"] = out["kind"].astype(np.int64)
    # Target positions as flat indices into [N*T] (no boolean masking, hence no device sync).
    out["lm_idx"] = np.flatnonzero(out["lm_tgt"] != IGNORE)
    out["lm_y"] = out["lm_tgt"].reshape(-1)[out["lm_idx"]]
    out["lm_qa"] = out.pop("qa").reshape(-1)[out["lm_idx"]] == 1
    out["c_idx"] = np.flatnonzero(out["c_tgt"] != IGNORE)
    out["c_y"] = out["c_tgt"].reshape(-1)[out["c_idx"]]
    out["c_is_y"] = out.pop("c_axis").reshape(-1)[out["c_idx"]] == 1
    out["s_idx"] = np.flatnonzero(out["s_tgt"][..., 0] != IGNORE)
    out["s_y"] = out["s_tgt"].reshape(-1, 2)[out["s_idx"]]
    out["g_idx"] = np.flatnonzero(~np.isnan(out["g_box"][..., 0]))
    out["g_box"] = out["g_box"].reshape(-1, 4)[out["g_idx"]]
    out.update(vision_plan(n_crops, tiling))
    return out


def cell_labels(scene, grid: int, samples: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Per image-token cell (grid × grid over the whole image, aspect ignored, as the prefix):
    colour id (1 + index in COLOURS) and shape id (1 + index in SHAPES, 0 if unknown) of the object covering
    most of the cell's samples² sample points if it covers at least a quarter of them, else 0
    (background). Later objects are drawn on top, as in the image."""
    w, h = scene.image.size
    n = grid * samples
    ys = ((np.arange(n) + 0.5) * h / n).astype(np.int64)
    xs = ((np.arange(n) + 0.5) * w / n).astype(np.int64)
    owner = np.full((n, n), -1, np.int64)
    for i, obj in enumerate(scene.objects):
        x0, y0 = int(round(obj.box[0] * w)), int(round(obj.box[1] * h))
        mh, mw = obj.mask.shape
        ry, rx = ys - y0, xs - x0
        rsel, csel = (ry >= 0) & (ry < mh), (rx >= 0) & (rx < mw)
        if rsel.any() and csel.any():
            hit = obj.mask[np.ix_(ry[rsel], rx[csel])]
            block = owner[np.ix_(rsel, csel)]
            owner[np.ix_(rsel, csel)] = np.where(hit, i, block)
    per_cell = owner.reshape(grid, samples, grid, samples).transpose(0, 2, 1, 3).reshape(grid * grid, -1)
    colour = np.zeros(grid * grid, np.int64)
    shape = np.zeros(grid * grid, np.int64)
    if scene.objects:
        counts = np.stack([(per_cell == i).sum(1) for i in range(len(scene.objects))])    # [objects, cells]
        best = counts.argmax(0)
        on = counts.max(0) * 4 >= samples * samples
        # objects outside the vocabulary: 0 (as the background) for the unknown attribute
        colour_ids = np.array([1 + list(COLOURS).index(o.colour) if o.colour in COLOURS else 0 for o in scene.objects])
        shape_ids = np.array([1 + SHAPES.index(o.shape) if o.shape in SHAPES else 0 for o in scene.objects])
        colour[on] = colour_ids[best[on]]
        shape[on] = shape_ids[best[on]]
    return colour, shape


def vision_plan(n_crops: list[int], tilings: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """Index arrays that let `project_batch` stitch a batch of images grouped by tiling:
    groups [G, 3] = (th, tw, count); glob_idx [B] / local_idx [Σ th·tw]: crop rows of each image's
    global crop / tiles, images in group order; inverse [B]: group order → batch order."""
    offsets = np.concatenate([[0], np.cumsum(n_crops)[:-1]]).astype(np.int64)
    keys = [tuple(int(v) for v in t) for t in tilings]
    distinct = sorted(set(keys))
    order = [i for k in distinct for i in range(len(keys)) if keys[i] == k]
    local = [offsets[i] + 1 + j for i in order for j in range(keys[i][0] * keys[i][1])]
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.arange(len(order))
    return {"groups": np.array([(th, tw, keys.count((th, tw))) for th, tw in distinct], np.int64).reshape(-1, 3),
            "glob_idx": offsets[order], "local_idx": np.array(local, np.int64), "inverse": inverse}


class Packed:
    """Numpy batch that DataLoader passes through untouched (pickled over a pipe, no shared memory)."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays


def stream_index(i: int, rank: int, world: int) -> int:
    """The batch of the seed's stream that is rank `rank`'s i-th: the stream dealt out round-robin,
    so no two ranks ever train on the same batch and a single process (0 of 1) reads 0, 1, 2, …"""
    return i * world + rank


class SceneStream(torch.utils.data.IterableDataset):
    """Endless batches start, start+1, … (of this rank's share, `stream_index`); worker w of K makes
    the indices ≡ w (mod K), and the DataLoader yields workers round-robin, so the order is the
    same for every K."""

    def __init__(self, config, prompts, seed, start, as_tensors: bool, rank: int = 0, world: int = 1, **kw) -> None:
        super().__init__()
        self.config, self.prompts, self.seed, self.start, self.as_tensors, self.kw = config, prompts, seed, start, as_tensors, kw
        self.rank, self.world = rank, world

    def __iter__(self) -> Iterator:
        info = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        i = self.start + wid
        while True:
            arrays = make_batch(self.config, self.prompts, self.seed, stream_index(i, self.rank, self.world), **self.kw)
            yield {k: torch.from_numpy(v) for k, v in arrays.items()} if self.as_tensors else Packed(arrays)
            i += nw


def _shm_free_bytes() -> int:
    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return 0


def batch_stream(config, prompts, seed, *, start: int, workers: int, pin: bool, fixed: bool, shm: bool | None = None,
                 rank: int = 0, world: int = 1, **kw) -> Iterator[dict]:
    """Yields dicts of CPU tensors: rank `rank` of `world`'s share of the seed's stream
    (`stream_index`). Batches travel through shared memory when /dev/shm is large
    enough (shm=None: decide from its free space), otherwise pickled through pipes (containers
    often mount a 64 MB /dev/shm, where shared-memory batches would crash the workers)."""
    if fixed:   # the same batch every step (overfitting checks)
        index = stream_index(start, rank, world)
        batch = {k: torch.from_numpy(v) for k, v in make_batch(config, prompts, seed, index, **kw).items()}
        while True:
            yield batch
    if workers <= 0:
        for item in SceneStream(config, prompts, seed, start, True, rank, world, **kw):
            yield item
        return
    use_shm = _shm_free_bytes() >= 4 << 30 if shm is None else shm
    # Workers come from a fork server, not from this process: libvips (the crops) is not fork-safe
    # once its thread pool runs, and a worker forked from a process that already cropped hangs.
    loader = torch.utils.data.DataLoader(
        SceneStream(config, prompts, seed, start, use_shm, rank, world, **kw), batch_size=None, num_workers=workers,
        prefetch_factor=4 if use_shm else 2, persistent_workers=False, pin_memory=pin and use_shm,
        multiprocessing_context="forkserver")
    for item in loader:
        if isinstance(item, Packed):
            item = {k: torch.from_numpy(v) for k, v in item.arrays.items()}
            if pin:
                item = {k: v.pin_memory() for k, v in item.items()}
        yield item


# --------------------------------------------------------------------------------------------
# Forward: vision batch → prefix, shared-prefix text forward, losses
# --------------------------------------------------------------------------------------------

def project_batch(model: MoondreamModel, features: torch.Tensor, plan: dict[str, torch.Tensor],
                  groups: list[tuple[int, int, int]]) -> torch.Tensor:
    """`VisionEncoder.project` for a batch of images whose crops are concatenated in `features`
    [sum(n_crops), grid², Dv], one stitch/pool/projection per tiling group (`vision_plan`).
    Returns [B, grid², D_text]."""
    outs, gpos, lpos = [], 0, 0
    for th, tw, count in groups:
        glob = rows(features, plan["glob_idx"][gpos:gpos + count])                 # [count, g², Dv]
        local = rows(features, plan["local_idx"][lpos:lpos + count * th * tw])     # [count·th·tw, g², Dv]
        gpos, lpos = gpos + count, lpos + count * th * tw
        outs.append(model.vision.project_batch(glob, local.view(count, th * tw, *local.shape[1:]), (th, tw)))
    return rows(torch.cat(outs), plan["inverse"])


def encode_images(model: MoondreamModel, crops: torch.Tensor, plan: dict[str, torch.Tensor],
                  groups: list[tuple[int, int, int]]) -> torch.Tensor:
    """uint8 crops of B images → [B, prefix_len, D] prefix embeddings (BOS + projected image)."""
    x = normalize_crops(crops, dtype=torch.float32)
    image = project_batch(model, model.vision.encode_crops(x), plan, groups)
    bos = model.text.wte[model.config.tokens.bos_id].float()
    # fp32 residual stream under autocast (as the tails' embeddings), matmuls still in bf16
    return torch.cat([bos.expand(image.shape[0], 1, -1), image.float()], dim=1)


def tail_embeddings(model: MoondreamModel, tok: torch.Tensor, kind: torch.Tensor, cval: torch.Tensor, sval: torch.Tensor) -> torch.Tensor:
    """[N, T] ids / slot kinds / values → [N, T, D]: wte rows, or coord/size encodings at slots.
    The Fourier maps run in fp32 (angles up to ~100 rad lose their phase in bf16)."""
    emb = F.embedding(tok, model.text.wte)
    with torch.autocast(device_type=tok.device.type, enabled=False):
        coord = model.region.encode_coord(cval[..., None].float())
        size = model.region.encode_size(sval.float())
    emb = torch.where((kind == SLOT_COORD)[..., None], coord.to(emb.dtype), emb)
    return torch.where((kind == SLOT_SIZE)[..., None], size.to(emb.dtype), emb)


def _heads(model: MoondreamModel, block, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """h [N, L, D] → q, k, v [N, H, L, hd] through the inference code's `TextModel.heads`
    (cos/sin are `engine.model.text.rope_tables` rows [L, rotary_dims])."""
    return (x.transpose(1, 2) for x in model.text.heads(block, h, (cos[:, None, None], sin[:, None, None])))


def rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x[idx] along dim 0 as `index_select`: its backward is an `index_add_` (on CUDA, plain
    indexing's backward is a sort-based accumulate that took over half of the training step)."""
    return x.index_select(0, idx)


def per_tail(x: torch.Tensor, img: torch.Tensor, queries: int | None) -> torch.Tensor:
    """Per-image rows x [B, ...] → per-tail rows [N, ...] (tail n of image img[n]). With `queries`
    (the tails come image by image, `queries` each) an expand whose backward is a sum."""
    if queries is None:
        return rows(x, img)
    b = x.shape[0]
    return x[:, None].expand(b, queries, *x.shape[1:]).reshape(b * queries, *x.shape[1:])


def grouped_queries(img: torch.Tensor, n_images: int) -> int | None:
    """Q when img (CPU) is [0]*Q + [1]*Q + … + [n_images-1]*Q, else None."""
    n = img.shape[0]
    if n_images == 0 or n % n_images:
        return None
    q = n // n_images
    return q if torch.equal(img.cpu(), torch.arange(n_images).repeat_interleave(q)) else None


def text_forward(model: MoondreamModel, prefix: torch.Tensor, tails: torch.Tensor, img: torch.Tensor,
                 probe: tuple[torch.Tensor, int] | None = None,
                 queries: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Shared-prefix training forward; returns the raw (pre post_ln) hidden of the tails [N, T, D].

    prefix [B, P, D] at positions 0..P-1 (bidirectional); tails [N, T, D] at positions P..P+T-1,
    tail n belonging to image img[n]: each tail position attends to its image's whole prefix
    and causally to its own tail. Identical to one full sequence per tail with the
    [prefix bidirectional | causal] mask, which is what TextModel.prefill/decode compute.
    Uses only the checkpoint modules (ln, attn.qkv, attn.proj, mlp) and the rotary tables.

    probe = (flat tail positions [M], heads h): also return the last layer's attention
    log-probabilities of those positions over the image tokens, [M, h, P-1] (first h heads).

    queries: the tails come image by image, this many each (`grouped_queries`), or None.
    """
    text, cfg = model.text, model.config.text
    b, p, _ = prefix.shape
    n, t, _ = tails.shape
    dev = prefix.device
    cos, sin = rope_tables(cfg, p + t, dev)
    mask = torch.cat([torch.ones(t, p, dtype=torch.bool, device=dev),
                      torch.ones(t, t, dtype=torch.bool, device=dev).tril()], dim=1)
    xp, xt = prefix, tails
    last = len(text.blocks) - 1
    att = None
    for layer, block in enumerate(text.blocks):
        hp = block.ln(xp)
        qp, kp, vp = _heads(model, block, hp, cos[:p], sin[:p])
        ht = block.ln(xt)
        qt, kt, vt = _heads(model, block, ht, cos[p:], sin[p:])
        k = torch.cat([per_tail(kp, img, queries), kt.to(kp.dtype)], dim=2)
        v = torch.cat([per_tail(vp, img, queries), vt.to(vp.dtype)], dim=2)
        at = F.scaled_dot_product_attention(qt.to(k.dtype), k, v, attn_mask=mask)
        xt = xt + block.attn.proj(at.transpose(1, 2).reshape(n, t, -1)) + block.mlp(ht)
        if layer < last:   # the prefix's last-layer output feeds nothing
            ap = F.scaled_dot_product_attention(qp, kp, vp)
            xp = xp + block.attn.proj(ap.transpose(1, 2).reshape(b, p, -1)) + block.mlp(hp)
        elif probe is not None:
            att = _probe_attention(qt, kp, kt, img, probe, p, t)
    return xt, att


def _probe_attention(qt, kp, kt, img, probe, p: int, t: int) -> torch.Tensor:
    """Attention log-probabilities (same softmax as the forward) of selected tail positions."""
    idx, heads = probe
    seq, pos = idx // t, idx % t
    q = qt[seq, :heads, pos].to(kp.dtype)                                  # [M, h, hd]
    scale = q.shape[-1] ** -0.5
    s_img = torch.einsum("mhd,mhkd->mhk", q, rows(kp[:, :heads], img[seq])).float() * scale
    s_tail = torch.einsum("mhd,mhkd->mhk", q, rows(kt[:, :heads], seq).to(kp.dtype)).float() * scale
    future = torch.arange(t, device=idx.device)[None, None, :] > pos[:, None, None]
    scores = torch.cat([s_img, s_tail.masked_fill(future, float("-inf"))], dim=-1)
    return scores.log_softmax(-1)[..., 1:p]                               # image tokens (BOS excluded)


def grounding_loss(att_logp: torch.Tensor, boxes: torch.Tensor, grid: int) -> torch.Tensor:
    """−log of the attention mass on the grid cells a target object's box overlaps (mean over
    positions and probed heads): teaches the positions that emit x, y and size to look at the
    object they describe. att_logp [M, h, grid²]; boxes [M, 4] normalised."""
    edges = torch.arange(grid, device=boxes.device, dtype=torch.float32) / grid
    cols = (edges[None] < boxes[:, 2:3]) & (edges[None] + 1 / grid > boxes[:, 0:1])   # [M, grid]
    rows = (edges[None] < boxes[:, 3:4]) & (edges[None] + 1 / grid > boxes[:, 1:2])
    cells = (rows[:, :, None] & cols[:, None, :]).flatten(1)                          # [M, grid²]
    mass = att_logp.masked_fill(~cells[:, None, :], float("-inf")).logsumexp(-1)
    return -mass.clamp(min=-30.0).mean()


def soft_bin_ce(logits: torch.Tensor, target: torch.Tensor, sigma: float) -> torch.Tensor:
    """Cross-entropy against a Gaussian (σ in bins) around the target bin; σ = 0: one-hot."""
    logp = F.log_softmax(logits.float(), dim=-1)
    if sigma <= 0:
        return F.nll_loss(logp, target)
    bins = torch.arange(logits.shape[-1], device=logits.device, dtype=torch.float32)
    q = torch.exp(-0.5 * ((bins - target[:, None].float()) / sigma) ** 2)
    q = q / q.sum(-1, keepdim=True)
    return -(q * logp).sum(-1).mean()


def sigmas(recipe: dict, progress: float) -> tuple[float, float]:
    """Label-smoothing widths (coord, size) at training progress 0..1 (see RECIPE)."""
    t = min(1.0, progress / recipe["sigma_decay"]) if recipe["sigma_decay"] > 0 else 1.0
    out = []
    for key in ("coord_sigma", "size_sigma"):
        v = recipe[key]
        a, b = (v, v) if isinstance(v, (int, float)) else v
        out.append(float(a) if a <= 0 or b <= 0 else math.exp(math.log(a) + t * (math.log(b) - math.log(a))))
    return out[0], out[1]


def compute_losses(model: MoondreamModel, batch: dict[str, torch.Tensor], meta: dict, recipe: dict,
                   progress: float = 1.0, probes: Probes | None = None, touch_all: bool = False) -> dict[str, torch.Tensor]:
    """Forward one batch (tensors on the device, see `to_device`); returns the losses and, detached,
    lm_acc (continue/stop decisions right), coord_err (mean |x̂ − x| as a fraction of the image)
    and size_err (mean |log2 ŵ − log2 w|). Nothing here waits for the device: every index is
    precomputed on the CPU.

    touch_all (data-parallel runs): a batch without coordinate or size targets still runs the
    heads it does not train (and the probes') on one row with weight 0, so every parameter gets a
    gradient on every rank each step, as DistributedDataParallel requires."""
    coord_sigma, size_sigma = sigmas(recipe, progress)
    prefix = encode_images(model, batch["crops"], batch, meta["groups"])
    cell = prefix.sum() * 0.0
    if probes is not None:
        tokens = prefix[:, 1:].float()
        cell = (F.cross_entropy(probes.colour(tokens).flatten(0, 1), batch["cell_colour"].flatten())
                + F.cross_entropy(probes.shape(tokens).flatten(0, 1), batch["cell_shape"].flatten()))
    tails = tail_embeddings(model, batch["tok"], batch["kind"], batch["cval"], batch["sval"])
    w = recipe["loss_weights"]
    heads = max(1, int(model.config.text.n_heads * recipe["ground_heads"]))
    att_probe = (batch["g_idx"], heads) if w["ground"] > 0 and meta["n_ground"] else None
    hidden, att = text_forward(model, prefix, tails.float(), batch["img"], att_probe, meta.get("queries"))
    hidden = hidden.flatten(0, 1)

    lm_logits = model.text.logits(rows(hidden, batch["lm_idx"])).float()
    lm = F.cross_entropy(lm_logits, batch["lm_y"])
    right = (lm_logits.detach().argmax(-1) == batch["lm_y"]).float()
    qa = batch["lm_qa"].float()
    c_logits = model.region.coord_logits(rows(hidden, batch["c_idx"]))
    has_coord = batch["c_idx"].shape[0] > 0    # (a batch of only questions and empty queries has none)
    unused = hidden.sum() * 0.0     # the value of a loss term with no targets in this batch
    one = hidden[:1]                # the row a zero-weight term runs the untrained heads on (touch_all)
    if has_coord:
        coord = soft_bin_ce(c_logits, batch["c_y"], coord_sigma)
    else:
        coord = model.region.coord_logits(one).float().sum() * 0.0 if touch_all else unused
    out = {"lm_acc": (right * (1 - qa)).sum() / (1 - qa).sum().clamp(min=1),
           "qa_acc": (right * qa).sum() / qa.sum().clamp(min=1),
           "coord_err": (c_logits.detach().argmax(-1) - batch["c_y"]).abs().float().sum()
           / max(1, batch["c_y"].shape[0]) / model.config.region.coord_bins}
    if meta["n_sizes"]:
        s_logits = model.region.size_logits(rows(hidden, batch["s_idx"]))          # [M, 2, bins]
        size = soft_bin_ce(s_logits.flatten(0, 1), batch["s_y"].flatten(), size_sigma)
        out["size_err"] = (s_logits.detach().argmax(-1) - batch["s_y"]).abs().float().mean() * 10 / (model.config.region.size_bins - 1)
    else:
        size = model.region.size_logits(one).float().sum() * 0.0 if touch_all else unused
        out["size_err"] = unused.detach()
    ground = grounding_loss(att, batch["g_box"], model.config.vision.grid) if att is not None else unused
    probe = unused
    if probes is not None and has_coord:
        hc = rows(hidden, batch["c_idx"]).float()
        pred = torch.where(batch["c_is_y"], probes.y(hc)[:, 0], probes.x(hc)[:, 0])
        probe = F.mse_loss(pred, batch["c_y"].float() / model.config.region.coord_bins)
        if meta["n_sizes"]:
            hs = rows(hidden, batch["s_idx"]).float()
            probe = probe + F.mse_loss(probes.wh(hs), batch["s_y"].float() / (model.config.region.size_bins - 1))
    if probes is not None and touch_all and not meta["n_sizes"]:   # (no coordinates implies no sizes)
        h1 = one.float()
        idle = probes.wh(h1).sum() + (0.0 if has_coord else probes.x(h1).sum() + probes.y(h1).sum())
        probe = probe + idle * 0.0
    total = (w["lm"] * lm + w["coord"] * coord + w["size"] * size + w["ground"] * ground
             + recipe["probe_weight"] * probe + w["cells"] * cell)
    return {"loss": total, "lm": lm, "coord": coord, "size": size, "ground": ground, "probe": probe, "cells": cell, **out}


# --------------------------------------------------------------------------------------------
# Model, optimiser, schedule, checkpoints
# --------------------------------------------------------------------------------------------

def init_model(config: MoondreamConfig, seed: int, recipe: dict) -> MoondreamModel:
    """Deterministic CPU init: N(0, init_std) matrices and embeddings, LayerNorm (1, 0), zero biases,
    N(0, feature_std) Fourier features."""
    gen = torch.Generator().manual_seed(seed)
    model = MoondreamModel(config)
    norms = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in norms:
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            elif name.endswith("_features"):
                param.copy_(torch.randn(param.shape, generator=gen) * recipe["feature_std"])
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * recipe["init_std"])
        if recipe["pos_init"] == "sincos":
            model.vision.pos_emb.copy_(sincos_2d(config.vision.grid, config.vision.dim)[None])
        if recipe["decoder_init"] == "fourier":
            region = model.region
            for fc2, bins in ((region.coord_decoder.fc2, config.region.coord_bins),
                              (region.size_decoder.fc2, config.region.size_bins)):
                blocks = fc2.weight.shape[0] // bins
                rows = [smooth_rows(bins, fc2.weight.shape[1], gen) for _ in range(blocks)]
                w = torch.cat(rows)
                fc2.weight.copy_(w * (recipe["init_std"] * math.sqrt(w.numel()) / w.norm()))
    return model


def smooth_rows(bins: int, width: int, gen: torch.Generator, freqs: int = 32) -> torch.Tensor:
    """[bins, width] whose rows vary smoothly with the bin: a random mix of cos/sin(π k b / bins),
    k = 0 … freqs−1. Neighbouring bins start with similar weights, so the first gradients of the
    1024-way heads already say "more to the left / right" instead of one unrelated row per bin."""
    b = torch.arange(bins, dtype=torch.float64)[:, None] / bins
    k = torch.arange(freqs, dtype=torch.float64)[None, :]
    basis = torch.cat([torch.cos(math.pi * k * b), torch.sin(math.pi * (k + 1) * b)], dim=1)     # [bins, 2F]
    return (basis @ torch.randn(2 * freqs, width, generator=gen, dtype=torch.float64)).float()


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """[grid², dim] fixed 2D position code (MAE style): half the channels encode the row, half
    the column, each as sin/cos at dim/4 geometric frequencies. A smooth, strong "where" signal
    in every image token from step 0 speeds up learning to localise."""
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    pos = torch.arange(grid, dtype=torch.float64)
    one = torch.outer(pos, omega)
    code = torch.cat([one.sin(), one.cos()], dim=1)            # [grid, dim/2]
    rows = code[:, None, :].expand(grid, grid, -1)
    cols = code[None, :, :].expand(grid, grid, -1)
    out = torch.zeros(grid, grid, dim, dtype=torch.float64)
    out[..., : 2 * quarter] = rows
    out[..., 2 * quarter: 4 * quarter] = cols
    return out.reshape(grid * grid, dim).float()


class Probes(torch.nn.Module):
    """Training-only linear read-outs (never saved): x, y and (log w, log h) from the raw hidden of
    the positions whose region heads predict them. Their MSE gives the text model a direct,
    consistent gradient to carry the object's position in its hidden state, which the 1024-bin
    heads then learn to read; without it localisation sits on a long plateau. And per image
    token of the prefix, the colour and shape of the object in its cell (cross-entropy), which
    teaches the vision tower what the queries ask about."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.x = torch.nn.Linear(dim, 1)
        self.y = torch.nn.Linear(dim, 1)
        self.wh = torch.nn.Linear(dim, 2)
        for m in (self.x, self.y, self.wh):
            torch.nn.init.zeros_(m.weight)
            torch.nn.init.constant_(m.bias, 0.5)
        # per image token: colour / shape of the object in its cell (0 = background)
        self.colour = torch.nn.Linear(dim, 1 + len(COLOURS))
        self.shape = torch.nn.Linear(dim, 1 + len(SHAPES))


def param_groups(model: MoondreamModel, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 and not name.endswith(("_features", "wte")) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class Schedule:
    """Linear warmup over `warmup` steps, then cosine from lr to min_lr_frac·lr over the remaining steps.

    With a deadline, `calibrate` fixes the step total from the measured rate, and from then on the
    cosine's progress is the larger of step progress and time progress (time progress starts at
    the step progress of the calibration point and reaches 1 at the deadline), so a run that falls
    behind still ends annealed. Without a deadline the schedule depends on the step alone.
    """

    def __init__(self, recipe: dict, total: int, deadline: float | None) -> None:
        self.peak, self.warm, self.lo = recipe["lr"], recipe["warmup"], recipe["min_lr_frac"]
        self.total, self.deadline = total, deadline
        self.cal: tuple[float, float] | None = None   # (time, cosine progress) at calibration

    def _progress(self, step: float) -> float:
        return max(0.0, (step - self.warm) / max(1.0, self.total - self.warm))

    def calibrate(self, step: int, now: float, total: int) -> None:
        self.total = total
        self.cal = (now, self._progress(step))

    def lr(self, step: int, now: float | None = None) -> float:
        if step < self.warm:
            return self.peak * (step + 1) / self.warm
        frac = self._progress(step)
        if self.cal is not None and self.deadline is not None and now is not None:
            t0, f0 = self.cal
            frac = max(frac, f0 + (1 - f0) * (now - t0) / max(1e-6, self.deadline - t0))
        frac = min(1.0, frac)
        return self.peak * (self.lo + (1 - self.lo) * 0.5 * (1 + math.cos(math.pi * frac)))


def checkpoint_state(model: MoondreamModel) -> dict[str, torch.Tensor]:
    return {"model." + k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in model.state_dict().items()}


def write_checkpoint(out: Path, model: MoondreamModel, config: MoondreamConfig, preset: str, tokenizer_json: str) -> None:
    """Write into a scratch directory, then move each file into `out` atomically."""
    tmp = out / ".partial"
    save_checkpoint(tmp, checkpoint_state(model), config, tokenizer_json, preset=preset, vocabulary=SCENE_VOCABULARY)
    for f in tmp.iterdir():
        os.replace(f, out / f.name)
    tmp.rmdir()


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------

@dataclass
class Result:
    steps: int
    first_loss: float | None
    last_loss: float | None
    history: list[dict]


DEVICE_KEYS = ("crops", "img", "tok", "kind", "cval", "sval", "lm_idx", "lm_y", "lm_qa", "c_idx", "c_y", "c_is_y", "s_idx", "s_y",
               "g_idx", "g_box", "cell_colour", "cell_shape", "glob_idx", "local_idx", "inverse")


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> tuple[dict, dict]:
    """Copy what the step reads to the device (asynchronously from pinned memory on CUDA);
    `meta` holds the few Python values the forward branches on."""
    meta = {"groups": [tuple(g) for g in batch["groups"].tolist()], "n_images": int(batch["n_crops"].shape[0]),
            "n_seqs": int(batch["img"].shape[0]), "n_sizes": int(batch["s_idx"].shape[0]),
            "n_ground": int(batch["g_idx"].shape[0]),
            "queries": grouped_queries(batch["img"], int(batch["n_crops"].shape[0]))}
    nb = device.type == "cuda"
    return {k: batch[k].to(device, non_blocking=nb) for k in DEVICE_KEYS}, meta


def replay(fresh: Iterator[tuple[dict, dict]], reuse: int, lag: int) -> Iterator[tuple[dict, dict, bool]]:
    """Fresh device batches f0, f1, … each followed by the repeats of f(i − lag), f(i − 2·lag), …
    (`reuse` uses per batch in all); yields (batch, meta, is_fresh)."""
    keep = lag * (reuse - 1) + 1
    buf: list[tuple[dict, dict]] = []
    for item in fresh:
        yield (*item, True)
        buf.append(item)
        for r in range(1, reuse):
            j = len(buf) - 1 - lag * r
            if j >= 0:
                yield (*buf[j], False)
        del buf[:-keep]


def train(out: str | Path, *, device: str | None = None, **kw: Any) -> Result:
    """Run training; keyword overrides replace RECIPE entries (steps, batch, lr, seed, minutes, scene, …).

    On the CPU, denormal floats are flushed to zero while it runs (tiny activations otherwise slow
    the kernels down many times over); the process-wide setting is restored afterwards.
    """
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type != "cpu":
        return _train(out, dev, **kw)
    torch.set_flush_denormal(True)
    try:
        return _train(out, dev, **kw)
    finally:
        torch.set_flush_denormal(False)


def _train(out: str | Path, dev: torch.device, *, preset: str | None = None, config: MoondreamConfig | None = None,
           workers: int | None = None, init: str | None = None, fixed_batch: bool = False, quiet: bool = False,
           on_step: Callable[[int, MoondreamModel, dict], None] | None = None, find_unused: bool = False,
           **overrides: Any) -> Result:
    """`on_step(step, model, batch)` runs after every optimiser step (tests); `find_unused` makes a
    data-parallel run let DDP search for unused parameters instead of `compute_losses(touch_all=True)`."""
    ranks = Ranks.from_env(dev)
    try:
        return _train_ranks(out, ranks, preset=preset, config=config, workers=workers, init=init, fixed_batch=fixed_batch,
                            quiet=quiet, on_step=on_step, find_unused=find_unused, **overrides)
    finally:
        ranks.close()


def _train_ranks(out: str | Path, ranks: Ranks, *, preset: str | None, config: MoondreamConfig | None, workers: int | None,
                 init: str | None, fixed_batch: bool, quiet: bool, on_step, find_unused: bool, **overrides: Any) -> Result:
    dev = ranks.device
    recipe = {**RECIPE, **{k: v for k, v in overrides.items() if v is not None}}
    unknown = set(overrides) - set(RECIPE)
    if unknown:
        raise ValueError(f"unknown recipe keys: {', '.join(sorted(unknown))}")
    for key in ("empty_rate", "hard_rate", "qa_frac"):
        if not 0.0 <= recipe[key] <= 1.0:
            raise ValueError(f"{key} must be between 0 and 1, got {recipe[key]}")
    recipe["foreign_from"] = check_names(recipe["foreign_from"])
    preset = recipe["preset"] = preset or recipe["preset"]
    config = config or PRESETS[preset]
    if workers is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
        workers = workers_per_rank(cores, ranks.world) if dev.type == "cuda" else 0
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    say = (lambda *a: None) if quiet or not ranks.main else (lambda *a: print(*a, flush=True))

    def log(record: dict) -> None:   # train_log.jsonl: rank 0 only
        if ranks.main:
            with log_path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    seed = recipe["seed"]

    tokenizer = build_tokenizer(vocab_size=min(512, config.text.vocab_size))
    tokenizer_json = tokenizer.to_str()
    prompts = prompt_table(config, tokenizer)

    torch.manual_seed(seed)
    grow_layers = {"text_layers": recipe["grow_text_layers"], "vision_layers": recipe["grow_vision_layers"]}
    if init:   # every rank loads it (DDP also starts every rank from rank 0's weights)
        model = load_model(init, dtype="fp32", device="cpu")
        # a grown checkpoint, or one served with another tiling cap, continues under its base preset
        if not same_but_depth(with_tiling_of(model.config, config), config):
            raise ValueError(f"--init checkpoint {init} has another config than preset {preset!r}")
        if any(grow_layers.values()):
            model = grow(model, **grow_layers)
        config = model.config
    elif any(grow_layers.values()):
        raise ValueError("--grow-text-layers / --grow-vision-layers deepen an --init checkpoint; give --init DIR")
    else:
        model = init_model(config, seed, recipe)
    model = model.to(dev).train()
    n_params = sum(p.numel() for p in model.parameters())
    fused = dev.type == "cuda"
    probes = Probes(config.text.dim).to(dev) if recipe["probe_weight"] > 0 else None
    groups = param_groups(model, recipe["weight_decay"])
    if probes is not None:
        groups.append({"params": list(probes.parameters()), "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=recipe["lr"], betas=tuple(recipe["betas"]), eps=1e-8, fused=fused)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)
    # not cuDNN attention: it plans each new shape on the CPU (~4 ms a call; every batch has other shapes)
    attention = functools.partial(sdpa_kernel, [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    net: torch.nn.Module = LossModule(model, probes, recipe, touch_all=ranks.parallel and not find_unused)
    if ranks.parallel:
        net = torch.nn.parallel.DistributedDataParallel(
            net, device_ids=[dev.index] if dev.type == "cuda" else None, forward_sync_buffers=False,
            find_unused_parameters=find_unused)

    data_kw = dict(batch=recipe["batch"], queries=recipe["queries"], point_frac=recipe["point_frac"],
                   scene_kw=recipe["scene"], empty_rate=recipe["empty_rate"],
                   hard_rate=recipe["hard_rate"], qa_frac=recipe["qa_frac"], foreign=recipe["foreign"],
                   foreign_from=recipe["foreign_from"], tokenizer=tokenizer if recipe["qa_frac"] else None)
    stream = batch_stream(config, prompts, seed, start=0, workers=workers, pin=dev.type == "cuda", fixed=fixed_batch,
                          rank=ranks.rank, world=ranks.world, **data_kw)
    timer = {"wait": 0.0}

    def fresh() -> Iterator[tuple[dict, dict]]:
        while True:
            t0 = time.monotonic()
            item = next(stream)
            timer["wait"] += time.monotonic() - t0
            yield to_device(item, dev)

    feed = replay(fresh(), int(recipe["reuse"]), int(recipe["reuse_lag"]))

    steps = int(recipe["steps"])
    minutes = recipe["minutes"]
    reserve = 10.0 + (recipe["heldout_s"] if recipe["heldout"] else 0.0)    # final save + held-out check
    deadline = None if not minutes else ranks.shared(PROCESS_START + 60.0 * float(minutes) - reserve)
    say(f"train: preset={preset} params={n_params / 1e6:.2f}M device={dev} workers={workers} steps<={steps} "
        f"batch={recipe['batch']}x{recipe['queries']} reuse={recipe['reuse']} lr={recipe['lr']} seed={seed}"
        + (f" ranks={ranks.world} (batch per rank; global {ranks.world * recipe['batch']} images/step, "
           f"workers per rank)" if ranks.parallel else "")
        + (f" minutes={minutes}" if minutes else ""))
    log({"event": "start", "preset": preset, "params": n_params, "device": str(dev), "workers": workers,
         "ranks": ranks.world, "recipe": {k: v for k, v in recipe.items()}, "init": init})

    history: list[dict] = []
    sums = {k: torch.zeros((), device=dev) for k in ("loss", "lm", "coord", "size", "ground", "probe", "cells", "lm_acc", "qa_acc", "coord_err", "size_err")}
    n_sum = 0
    first_loss = last_loss = None
    wait = wait_window = 0.0
    t_window = t_train0 = time.monotonic()
    images = new_images = seqs = 0
    last_save = time.monotonic()
    total = steps
    schedule = Schedule(recipe, total, deadline)
    calibrated = deadline is None
    pending_total = 0            # rank 0's calibrated total, not yet agreed (data-parallel runs)
    rate = 0.0
    rate_t0 = rate_t1 = rate_step0 = None
    step = 0
    lr = 0.0
    gnorm = torch.zeros(())
    stop_reason = "steps"
    agreed = False               # the loop ended where every rank ends it (collectives are safe)

    def calibrate(at: float, new_total: int) -> None:
        nonlocal total, calibrated
        total = new_total
        schedule.calibrate(step, at, total)
        calibrated = True
        say(f"calibrated: {rate:.2f} steps/s → total_steps={total}")
        log({"event": "calibrate", "step": step, "steps_per_s": rate, "total_steps": total})

    def log_window(reduce: bool) -> None:
        nonlocal sums, n_sum, images, new_images, seqs, wait_window, t_window, first_loss, last_loss
        if reduce:   # every rank's batches (each rank logs at the same steps)
            vals = dict(zip(sums, ranks.mean(torch.stack(list(sums.values())) / n_sum).tolist()))
        else:
            vals = {k: float(v) / n_sum for k, v in sums.items()}
        elapsed = time.monotonic() - t_window
        world = ranks.world
        rec = {"step": step, **{k: round(v, 5) for k, v in vals.items()}, "lr": lr, "gnorm": round(float(gnorm), 4),
               "images_per_s": round(world * images / elapsed, 1), "new_images_per_s": round(world * new_images / elapsed, 1),
               "seqs_per_s": round(world * seqs / elapsed, 1),
               "data_wait": round(wait_window / elapsed, 3), "elapsed_s": round(time.monotonic() - t_train0, 1)}
        history.append(rec)
        first_loss = vals["loss"] if first_loss is None else first_loss
        last_loss = vals["loss"]
        say(f"step {step:6d}/{total}  loss {vals['loss']:.3f} (lm {vals['lm']:.3f} coord {vals['coord']:.3f} "
            f"size {vals['size']:.3f} ground {vals['ground']:.3f} probe {vals['probe']:.4f} cells {vals['cells']:.3f})  "
            f"stop/go acc {100 * vals['lm_acc']:.1f}%  "
            + (f"answer token acc {100 * vals['qa_acc']:.1f}%  " if recipe["qa_frac"] else "")
            + f"xy err {100 * vals['coord_err']:.2f}%  "
            f"wh err {vals['size_err']:.3f} oct  lr {lr:.2e}  {rec['images_per_s']:.0f} img/s "
            f"({rec['new_images_per_s']:.0f} new) {rec['seqs_per_s']:.0f} seq/s"
            + (f" (all {world} ranks)" if ranks.parallel else "")
            + f"  data wait {100 * rec['data_wait']:.0f}%  t={rec['elapsed_s']:.0f}s")
        log(rec)
        sums = {k: torch.zeros((), device=dev) for k in sums}
        n_sum, images, new_images, seqs, wait_window, t_window = 0, 0, 0, 0, 0.0, time.monotonic()

    previous_handlers: dict = {}
    if threading_main():
        if ranks.parallel:   # signals only request a stop, taken at the next agreement by every rank
            previous_handlers = ranks.catch_signals()
        else:                # `timeout`/`kill` send SIGTERM: leave through the final save like Ctrl-C does.
            previous_handlers = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_interrupt)}
    shared_now = time.monotonic()
    try:
        while step < total:
            now = time.monotonic()
            if ranks.parallel:
                if step % SYNC_EVERY == 0:
                    ask = (STOP_INTERRUPTED if ranks.stop_requested else
                           STOP_TIME if ranks.main and deadline is not None and now >= deadline else STOP_NONE)
                    stop, agreed_total, shared_now = ranks.agree(ask, pending_total, now)
                    if agreed_total and not calibrated:
                        calibrate(shared_now, max(step + 1, agreed_total))
                    if stop:
                        stop_reason = STOP_REASONS[stop]
                        break
                now = shared_now   # the schedule reads rank 0's clock of the last agreement
            elif deadline is not None and now >= deadline:
                stop_reason = "time"
                break
            waited = timer["wait"]
            batch, meta, is_fresh = next(feed)
            dt_wait = timer["wait"] - waited
            wait += dt_wait
            wait_window += dt_wait

            lr = schedule.lr(step, now)
            for g in opt.param_groups:
                g["lr"] = lr
            with autocast, attention():
                losses = net(batch, meta, step / total)
            opt.zero_grad(set_to_none=True)
            losses["loss"].backward()
            gnorm = torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], recipe["grad_clip"])
            opt.step()
            for k in sums:
                sums[k] += losses[k].detach()
            n_sum += 1
            images += meta["n_images"]
            new_images += meta["n_images"] if is_fresh else 0
            seqs += meta["n_seqs"]
            step += 1
            if on_step is not None:
                on_step(step, model, batch)

            # Calibration (rank 0): the step rate over the second half of the first `calibrate_s` seconds
            # (the first half drains the workers' prefetched batches and would flatter the rate).
            if not calibrated and ranks.main and not pending_total and step >= 10:
                if rate_t0 is None:
                    _sync(dev)
                    rate_t0 = time.monotonic()
                elif rate_step0 is None and time.monotonic() - rate_t0 >= recipe["calibrate_s"] / 2:
                    _sync(dev)
                    rate_t1, rate_step0 = time.monotonic(), step
                if rate_step0 is not None and step > rate_step0 and time.monotonic() - rate_t0 >= recipe["calibrate_s"]:
                    _sync(dev)
                    rate = (step - rate_step0) / (time.monotonic() - rate_t1)
                    fit = step + int(0.95 * rate * (deadline - time.monotonic()))
                    if ranks.parallel:   # applied by every rank at the next agreement
                        pending_total = max(step + 1, min(steps, fit))
                    else:
                        calibrate(time.monotonic(), max(step + 1, min(steps, fit)))

            if step % recipe["log_every"] == 0 or step == total:
                log_window(ranks.parallel)
            if ranks.main and time.monotonic() - last_save >= recipe["save_every"]:
                write_checkpoint(out, model, config, preset, tokenizer_json)
                last_save = time.monotonic()
        agreed = True
    except KeyboardInterrupt:
        stop_reason = "interrupted"
    finally:
        if n_sum:
            log_window(ranks.parallel and agreed)
        stream.close()   # shuts the data workers down
        if ranks.main:
            write_checkpoint(out, model, config, preset, tokenizer_json)
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        total_time = time.monotonic() - t_train0
        summary = {"event": "end", "steps": step, "reason": stop_reason, "train_s": round(total_time, 1),
                   "wall_s": round(time.monotonic() - PROCESS_START, 1),
                   "data_wait_frac": round(wait / max(total_time, 1e-9), 3), "last_loss": last_loss}
        log(summary)
        say(f"done: {step} steps ({stop_reason}) in {total_time:.0f}s, waited for data {100 * summary['data_wait_frac']:.0f}% "
            f"of the time; wrote {out}")
    if ranks.main and recipe["heldout"] and stop_reason != "interrupted":
        try:
            report = heldout_check(out, dev, recipe["heldout"], recipe["heldout_seed"], recipe["heldout_s"], prompts)
        except Exception as e:  # the weights are saved; a failing check must not lose them
            report = {"error": f"{type(e).__name__}: {e}"}
        log({"event": "heldout", **report})
        say("held-out check (greedy decoding of the saved bf16 weights, engine.model.reference): "
            + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in report.items()))
    ranks.barrier()      # the other ranks wait for rank 0's checkpoint and held-out check
    return Result(step, first_loss, last_loss, history)


class LossModule(torch.nn.Module):
    """The model and its training probes as one module whose forward is `compute_losses`: the
    unit DistributedDataParallel wraps (it averages the gradients of what runs in its forward)."""

    def __init__(self, model: MoondreamModel, probes: Probes | None, recipe: dict, touch_all: bool) -> None:
        super().__init__()
        self.model, self.probes, self.recipe, self.touch_all = model, probes, recipe, touch_all

    def forward(self, batch: dict[str, torch.Tensor], meta: dict, progress: float) -> dict[str, torch.Tensor]:
        return compute_losses(self.model, batch, meta, self.recipe, progress=progress, probes=self.probes,
                              touch_all=self.touch_all)


def heldout_check(out: Path, dev: torch.device, n: int, seed: int, budget_s: float, prompts: dict) -> dict:
    """Detect and point on held-out scenes with the reference greedy decoder (the engine's oracle,
    no grammar library needed) and the metric functions of engine.training.evaluate. Loads the checkpoint
    just written, so it scores the bf16 weights as the engine will see them (in fp32)."""
    from engine.training.evaluate import detect_metrics, point_metrics
    from engine.model.reference import reference_generate
    from engine.training.scenes import OWN_SCENES, scene_batch
    from engine import DEFAULT_MAX_OBJECTS

    t0 = time.monotonic()
    model = load_model(out, dtype="fp32", device=dev)
    data = scene_batch(seed, n, **OWN_SCENES)
    det, det_scores, pts = [], [], []
    for scene, query in data:
        if time.monotonic() - t0 > budget_s:
            break
        crops = overlap_crop_image(scene.image, model.config.vision)
        d = reference_generate(model, crops, prompts[("detect", query.text)], "detect", DEFAULT_MAX_OBJECTS)
        p = reference_generate(model, crops, prompts[("point", query.text)], "point", DEFAULT_MAX_OBJECTS)
        det.append(([(o["x_min"], o["y_min"], o["x_max"], o["y_max"]) for o in d["objects"]], [o.box for o in query.matches]))
        det_scores.append([o["score"] for o in d["objects"]])
        pts.append(([(o["x"], o["y"]) for o in p["points"]], query.matches, scene.image.size))
    dm, pm = detect_metrics(det, scores=det_scores), point_metrics(pts)
    return {"scenes": len(det), "seed": seed, "detect_ap50": dm["ap50"], "detect_mean_iou": dm["mean_iou"],
            "detect_count_exact": dm["count_exact"], "point_hit_rate": pm["hit_rate"], "point_recall": pm["recall"],
            "point_count_exact": pm["count_exact"], "empty_accuracy": dm["empty_accuracy"],
            "seconds": round(time.monotonic() - t0, 1)}


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.train", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("--preset", default=RECIPE["preset"], choices=sorted(PRESETS))
    p.add_argument("--steps", type=int, help=f"step count (upper bound with --minutes); default {RECIPE['steps']}")
    p.add_argument("--batch", type=int, help=f"images per step and rank (under torchrun the global batch is "
                                              f"ranks × this); default {RECIPE['batch']}")
    p.add_argument("--queries", type=int, help=f"sequences per image; default {RECIPE['queries']}")
    p.add_argument("--reuse", type=int, help=f"uses of each generated batch; default {RECIPE['reuse']}")
    p.add_argument("--lr", type=float, help=f"peak learning rate, the same for any number of ranks; default {RECIPE['lr']}")
    p.add_argument("--warmup", type=int, help=f"warmup steps; default {RECIPE['warmup']}")
    p.add_argument("--seed", type=int, help=f"data and init seed; default {RECIPE['seed']}")
    p.add_argument("--minutes", type=float, help="wall-clock budget from process start (0/none: run all steps)")
    p.add_argument("--save-every", type=float, dest="save_every", help=f"seconds between checkpoints; default {RECIPE['save_every']}")
    p.add_argument("--log-every", type=int, dest="log_every", help=f"steps between log lines; default {RECIPE['log_every']}")
    p.add_argument("--heldout", type=int, help=f"held-out scenes decoded greedily after training (0: skip); "
                                                f"default {RECIPE['heldout']}")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when available")
    p.add_argument("--workers", type=int, help="data worker processes per rank (default on cuda: "
                                               "min(14, (cores - 2) // ranks); on cpu 0)")
    p.add_argument("--init", help="start from this checkpoint directory instead of random weights")
    p.add_argument("--grow-text-layers", dest="grow_text_layers", type=int, default=None, metavar="N",
                   help="with --init: add N text blocks (before the last) that compute nothing at first "
                        "(engine/training/grow.py)")
    p.add_argument("--grow-vision-layers", dest="grow_vision_layers", type=int, default=None, metavar="N",
                   help="with --init: add N vision blocks likewise")
    p.add_argument("--empty-rate", dest="empty_rate", type=float,
                   help=f"share of point/detect queries that match nothing (0-1); default {RECIPE['empty_rate']}")
    p.add_argument("--hard-negatives", dest="hard_rate", type=float,
                   help="share of those drawn among near misses: a present shape in another colour, a present "
                        f"colour on another shape, a look-alike shape (0-1); default {RECIPE['hard_rate']}")
    p.add_argument("--qa-frac", dest="qa_frac", type=float,
                   help=f"share of sequences that are questions / captions (0-1); default {RECIPE['qa_frac']}")
    p.add_argument("--variety", action="store_true",
                   help="train on the widened scenes (scenes.VARIETY_SCENES: wider shades, more backgrounds, "
                        "tone changes) instead of RECIPE's own-generator scenes")
    p.add_argument("--lookalikes", action="store_true",
                   help="distractors include look-alikes of vocabulary shapes (scenes.LOOKALIKE_SHAPES: "
                        "parallelogram, kite, octagon); with or without --variety")
    p.add_argument("--style", action="store_true",
                   help="drawing styles (engine/training/styles.py: drop shadows, shading and rims on objects, "
                        "an affine warp of the whole scene); with or without --variety")
    p.add_argument("--poses", action="store_true",
                   help="half the diamonds stand on a vertex and half the squares on a corner "
                        "(scenes.VERTEX_POSES), the poses in which the two look most alike")
    p.add_argument("--clutter", action="store_true",
                   help="some backgrounds are printed text or leaves (engine/training/clutter.py): many small marks "
                        "that are not objects")
    p.add_argument("--cells", action="store_true",
                   help="some scenes are redrawn as LED panels or tile mosaics (engine/training/cells.py): shapes "
                        "made of separate cells")
    p.add_argument("--cells-share", dest="cells_share", type=float, default=None, metavar="P",
                   help=f"with --cells: the share of scenes tried as cells (about a quarter of the tries can be "
                        f"drawn); default {CELLS_P}")
    p.add_argument("--drops", action="store_true",
                   help="some scenes get rain drops, bubbles, glints or bokeh on the background only "
                        "(engine/training/drops.py): small round marks that are not objects")
    p.add_argument("--foreign", type=float,
                   help="share of the scenes drawn by separately written generators (engine/training/foreign: other "
                        f"drawing code, shades and backgrounds; queries made as for any scene); default {RECIPE['foreign']}")
    p.add_argument("--foreign-from", dest="foreign_from", type=lambda v: tuple(n.strip() for n in v.split(",") if n.strip()),
                   metavar="NAMES", help="which of those generators, comma-separated, one at random per scene "
                                         f"(from {', '.join(FOREIGN_GENERATORS)}); default {','.join(RECIPE['foreign_from'])}")
    p.add_argument("--fixed-batch", action="store_true", help="train on batch 0 every step (overfitting check)")
    p.add_argument("--coord-sigma", dest="coord_sigma", type=float, nargs=2, metavar=("FROM", "TO"),
                   help=f"coordinate label smoothing σ in bins, first → settled; default {RECIPE['coord_sigma']} "
                        "(fine-tuning an --init model: small values keep its sharp heads)")
    p.add_argument("--size-sigma", dest="size_sigma", type=float, nargs=2, metavar=("FROM", "TO"),
                   help=f"size label smoothing σ in bins; default {RECIPE['size_sigma']}")
    a = p.parse_args(argv)
    for flag, value in (("--empty-rate", a.empty_rate), ("--hard-negatives", a.hard_rate), ("--qa-frac", a.qa_frac),
                        ("--foreign", a.foreign)):
        if value is not None and not 0.0 <= value <= 1.0:
            p.error(f"{flag} must be between 0 and 1, got {value}")
    if a.foreign_from is not None:
        try:
            check_names(a.foreign_from)
        except ValueError as e:
            p.error(f"--foreign-from: {e}")
    for flag, value in (("--grow-text-layers", a.grow_text_layers), ("--grow-vision-layers", a.grow_vision_layers)):
        if value is not None and not 0 <= value <= 16:
            p.error(f"{flag} must be between 0 and 16, got {value}")
        if value and not a.init:
            p.error(f"{flag} deepens an --init checkpoint; give --init DIR")
    if a.cells_share is not None and not (a.cells and 0 < a.cells_share <= 1):
        p.error(f"--cells-share is the share of scenes tried as cells, in (0, 1], and needs --cells; got {a.cells_share}")
    overrides = {k: getattr(a, k) for k in ("steps", "batch", "queries", "reuse", "lr", "warmup", "seed", "minutes",
                                            "save_every", "log_every", "heldout", "coord_sigma", "size_sigma", "qa_frac",
                                            "empty_rate", "hard_rate", "grow_text_layers", "grow_vision_layers",
                                            "foreign", "foreign_from")}
    if overrides["minutes"] == 0:
        overrides["minutes"] = None
    if a.variety or a.lookalikes or a.style or a.poses or a.clutter or a.cells or a.drops:
        overrides["scene"] = {**(VARIETY_SCENES if a.variety else RECIPE["scene"]),
                              **{flag: True for flag in ("lookalikes", "style", "poses", "clutter", "cells", "drops")
                                 if getattr(a, flag)}}
        if a.cells_share is not None:
            overrides["scene"]["cells_share"] = a.cells_share
    train(a.out, preset=a.preset, device=a.device, workers=a.workers, init=a.init, fixed_batch=a.fixed_batch, **overrides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
