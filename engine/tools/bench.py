"""Decode-step benchmark: blocking vs pipelined, against the same engine's GPU-only step.

    python -m engine.bench [--device cuda|cpu] [--preset moondream2|tiny] [--batch 1,32] [--kernels triton|torch]
                           [--images distinct|same|N] [--group-prefix auto|always|never] [--json OUT]
    python -m engine.bench --task query [--tokens 128] ...   # the decode step with and without a JSON schema

Random weights (no download). The lm_head bias of the coord token is raised and the repetition
guard is off, so every request keeps emitting objects up to `--objects`: each request then decodes
3·objects+1 steps, a step's cost does not depend on what random weights happen to say, and both
modes run the same schedule (a request ending early frees its row a step later when pipelined, so
the rows, hence the GPU's batch shapes and its bf16 rounding, could differ). Each batch uses distinct
random images (one image prefix per request), with `--images same` one image for every request
(every row then reads the one shared prefix slot), or with `--images N` one image per N rows.
`--group-prefix` forces the fused decode attention's choice between reading a prefix chunk once
per group of rows of one image and once per row (`engine.kernels.grouping_pays`) for A/B runs.

Columns (ms per decode step, steady state, prefill excluded):
  blocking    the engine with pipelined=False: launch → finalize → wait → commit
  pipelined   the engine as shipped: launch t+1 → commit t → finalize t+1
  gpu_only    the same forward and sampling graphs replayed back to back over the same positions,
              with no CPU bookkeeping and no host copies: the floor the engine can reach
  bubble %    (pipelined - gpu_only) / pipelined: GPU time left idle by the CPU
  speedup     blocking / pipelined

With `--task query` every request asks a question and decodes `--tokens` answer tokens (EOS is
suppressed), pipelined, once as free text and once under a five-field JSON schema whose first
field is an unbounded string (so answers run to `--tokens`): same model, same batch. Columns:
free ms, json ms (per decode step), json/free.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from engine import kernels
from engine.model.checkpoint import init_random_, parse_dtype
from engine.model.config import PRESETS
from engine.serving.engine import Engine
from engine.serving.limits import kv_positions
from engine.model.moondream import MoondreamModel
from engine.serving.skills import prompt_ids
from engine.training.vocab import stand_in_tokenizer
from engine.worker.sampling import SampleHeads


def images_arg(text: str) -> str:
    """--images: "distinct", "same", or a positive number of rows per image."""
    if text in ("distinct", "same") or (text.isdigit() and int(text) > 0):
        return text
    raise argparse.ArgumentTypeError(f"expected distinct, same or a number of rows per image, got {text!r}")


def build_model(preset: str, device: str, dtype: str, seed: int) -> MoondreamModel:
    model = MoondreamModel(PRESETS[preset], device=device, dtype=parse_dtype(dtype))
    init_random_(model, seed=seed)
    with torch.no_grad():  # keep every request decoding until its object cap (see module docstring)
        model.text.lm_head.bias[model.config.tokens.coord_id] = 30.0
    return model.eval()


def timed_decode(engine: Engine, images: list[np.ndarray], objects: int) -> tuple[float, int, list[dict]]:
    """Submit one detect per image, run to completion; return (ms per decode tick, ticks, results)."""
    handles = [engine.submit(im, "detect", "object", max_objects=objects) for im in images]
    while engine.queued():
        engine.step()  # admission: prefill steps take priority over decode
    engine.runner.synchronize()
    first, start = engine.decode_steps, time.perf_counter()
    while engine.step():
        pass
    engine.runner.synchronize()
    steps = engine.decode_steps - first
    return (time.perf_counter() - start) / steps * 1e3, steps, [h.result() for h in handles]


@torch.inference_mode()
def gpu_only_step(engine: Engine, batch: int, first_position: int, steps: int,
                  sampling: list[SampleHeads]) -> float:
    """The engine's decode forward and sampling graphs replayed back to back over the same
    positions as a request's decode, with no CPU bookkeeping and no host copies (ms/step).
    `sampling`: what each step's sampling computes, cycled (the engine's own choices in the timed
    run, `Sampler.heads_log`: with rows out of step both region decoders run)."""
    runner = engine.runner
    rows = runner.batch_bucket(batch)
    grouped = runner.group_rows(0, rows)  # the rows' slots as the engine's last decode step left them
    lengths = [runner.attn_bucket(first_position + i) for i in range(steps)]
    for n in sorted(set(lengths)):  # capture (or warm) every graph before timing
        runner.replay_decode(rows, n, grouped)
    for slot in (0, 1):
        for heads in set(sampling):
            runner.replay_sample(slot, rows, heads)
    times = []
    for _ in range(3):
        runner.set_positions(rows, first_position)
        runner.synchronize()
        start = time.perf_counter()
        for i, n in enumerate(lengths):
            runner.replay_decode(rows, n, grouped)
            runner.replay_sample(i % 2, rows, sampling[i % len(sampling)])
            runner.set_positions(rows, advance=1)
        runner.synchronize()
        times.append((time.perf_counter() - start) / steps * 1e3)
    return min(times)


# Five fields, the first an unbounded string so that a random model's answer runs to --tokens.
QUERY_SCHEMA = {
    "type": "object",
    "properties": {
        "description": {"type": "string"},
        "count": {"type": "integer"},
        "present": {"type": "boolean"},
        "colour": {"enum": ["red", "green", "blue", "yellow"]},
        "shapes": {"type": "array", "items": {"enum": ["circle", "square", "star"]}, "maxItems": 4},
    },
    "required": ["description", "count", "present", "colour", "shapes"],
}


def timed_query(engine: Engine, images: list[np.ndarray], answer, tokens: int) -> float:
    """One query per image, run to completion; ms per decode tick (an unfinished schema answer
    ends in a RequestError at --tokens: its steps count all the same)."""
    handles = [engine.submit(im, "query", "What is in the image?", answer=answer, max_tokens=tokens) for im in images]
    while engine.queued():
        engine.step()
    engine.runner.synchronize()
    first, start = engine.decode_steps, time.perf_counter()
    while engine.step():
        pass
    engine.runner.synchronize()
    for h in handles:
        h.future.exception()  # finished, one way or the other
    return (time.perf_counter() - start) / (engine.decode_steps - first) * 1e3


def query_main(args, model: MoondreamModel, tokenizer, dtype: str, gpu: str) -> int:
    with torch.no_grad():  # answers run to --tokens
        model.text.lm_head.bias[model.config.tokens.eos_id] = -30.0
    rng = np.random.default_rng(args.seed)
    rows = []
    for batch in [int(b) for b in args.batch.split(",")]:
        engine = Engine(model, tokenizer, max_batch=batch, prefix_cache_size=0, max_len=args.max_len, kernels=args.kernels)
        images = [(rng.random((378, 378, 3)) * 255).astype(np.uint8) for _ in range(batch)]
        first = model.config.prefix_len + 16
        engine.runner.capture_all(first + args.tokens + 64)
        for answer in (None, QUERY_SCHEMA):  # warm-up: graphs, allocator, grammar compile
            timed_query(engine, images, answer, 8)
        times = {"free": [], "json": []}
        for _ in range(3):  # interleaved repeats; the best of each
            times["free"].append(timed_query(engine, images, None, args.tokens))
            times["json"].append(timed_query(engine, images, QUERY_SCHEMA, args.tokens))
        free, constrained = min(times["free"]), min(times["json"])
        rows.append({"batch": batch, "free_ms": free, "json_ms": constrained, "json_over_free": constrained / free})
        del engine
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print(f"{args.preset} {dtype} on {gpu}; query, {args.tokens} answer tokens/request; pipelined")
    print(f"{'batch':>5} {'free ms':>9} {'json ms':>9} {'json/free':>10}")
    for r in rows:
        print(f"{r['batch']:>5} {r['free_ms']:>9.3f} {r['json_ms']:>9.3f} {r['json_over_free']:>10.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": gpu, "preset": args.preset, "dtype": dtype, "task": "query", "tokens": args.tokens,
                       "schema": QUERY_SCHEMA, "torch": torch.__version__, "rows": rows}, f, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--preset", default="moondream2", choices=sorted(PRESETS))
    p.add_argument("--dtype", default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--batch", default="1,32")
    p.add_argument("--task", default="detect", choices=("detect", "query"))
    p.add_argument("--objects", type=int, default=50, help="objects per request (3 decode steps each)")
    p.add_argument("--tokens", type=int, default=128, help="--task query: answer tokens per request")
    p.add_argument("--max-len", type=int, default=None, help="KV positions per row (default: the model's context)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kernels", default="auto", choices=kernels.KERNEL_CHOICES,
                   help="decode attention/rotary: fused Triton kernels ('auto' uses them on CUDA) or the PyTorch path")
    p.add_argument("--images", default="distinct", type=images_arg,
                   help="a different image per request (distinct, the default), one image for all (same: rows "
                        "share its prefix), or N: N rows per image")
    p.add_argument("--group-prefix", default="auto", choices=kernels.GROUP_CHOICES,
                   help="fused decode: read each image prefix once per group of its rows (auto: when that pays)")
    p.add_argument("--json", default=None, help="write the table as JSON here")
    args = p.parse_args(argv)
    dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    batches = [int(b) for b in args.batch.split(",")]
    model = build_model(args.preset, args.device, dtype, args.seed)
    tokenizer = stand_in_tokenizer(model.config)
    cfg = model.config
    rng = np.random.default_rng(args.seed)
    rows = []
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    if args.task == "query":
        return query_main(args, model, tokenizer, dtype, gpu)
    prompt_len = len(prompt_ids(cfg.tokens, lambda t: tokenizer.encode(t).ids, "detect", "object"))
    first_pos = cfg.prefix_len + prompt_len
    last_pos = first_pos + 3 * args.objects + 1
    for batch in batches:
        try:  # two engines of `batch` rows at once: with the whole context a row, 64 rows fill an 80 GB GPU
            engines = {mode: Engine(model, tokenizer, max_batch=batch, pipelined=mode == "pipelined", prefix_cache_size=0,
                                    repeat_guard=False, max_len=args.max_len, kernels=args.kernels,
                                    group_prefix=args.group_prefix)
                       for mode in ("blocking", "pipelined")}
            for engine in engines.values():
                engine.runner.capture_all(last_pos)
        except torch.OutOfMemoryError:
            row = args.max_len or cfg.text.max_context
            need = kv_positions(cfg.prefix_len, prompt_len, "detect", args.objects) + 1  # the engine's row holds its scratch after them
            raise SystemExit(f"engine.bench: out of {args.device} memory for two engines of {batch} rows of {row} KV "
                             f"positions; this run needs {need} a row: pass --max-len {need} (or more), "
                             "or a smaller --batch") from None
        per_image = {"distinct": 1, "same": batch}.get(args.images) or int(args.images)  # rows per image
        images = [(rng.random((378, 378, 3)) * 255).astype(np.uint8) for _ in range(-(-batch // per_image))]
        images = [images[i // per_image] for i in range(batch)]  # rows of one image share its prefix slot
        timed_decode(engines["blocking"], images, 2)  # warm-up: allocator, kernels, grammar cache
        timed_decode(engines["pipelined"], images, 2)
        blocking, _, out_b = timed_decode(engines["blocking"], images, args.objects)
        engines["pipelined"].runner.sampler.heads_log = sampling = []
        pipelined, _, out_p = timed_decode(engines["pipelined"], images, args.objects)
        engines["pipelined"].runner.sampler.heads_log = None
        if out_b != out_p:
            raise SystemExit("pipelined and blocking outputs differ: the benchmark is void")
        gpu_only = gpu_only_step(engines["pipelined"], batch, first_pos, 3 * args.objects, sampling)
        rows.append({"batch": batch, "blocking_ms": blocking, "pipelined_ms": pipelined, "gpu_only_ms": gpu_only,
                     "bubble_pct": 100 * (pipelined - gpu_only) / pipelined, "speedup": blocking / pipelined,
                     "pipelined_over_gpu_only": pipelined / gpu_only})
        del engines
        if args.device == "cuda":
            torch.cuda.empty_cache()
    fused = kernels.use_fused(args.kernels, model.text.wte, cfg.text.head_dim)
    row = args.max_len or cfg.text.max_context
    header = (f"{args.preset} {dtype} on {gpu}; {args.objects} objects/request ({3 * args.objects + 1} decode steps); "
              f"{'Triton' if fused else 'PyTorch'} attention; rows of {row} KV positions; {args.images} images"
              f"{'' if args.images in ('distinct', 'same') else ' rows per image'}; prefix grouping {args.group_prefix}")
    print(header)
    print(f"{'batch':>5} {'blocking ms':>12} {'pipelined ms':>13} {'gpu-only ms':>12} {'bubble %':>9} {'speedup':>8} {'pipe/gpu':>9}")
    for r in rows:
        print(f"{r['batch']:>5} {r['blocking_ms']:>12.3f} {r['pipelined_ms']:>13.3f} {r['gpu_only_ms']:>12.3f} "
              f"{r['bubble_pct']:>9.1f} {r['speedup']:>8.3f} {r['pipelined_over_gpu_only']:>9.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": gpu, "preset": args.preset, "dtype": dtype, "objects": args.objects, "max_len": row,
                       "kernels": "triton" if fused else "torch", "images": args.images, "group_prefix": args.group_prefix,
                       "torch": torch.__version__, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
