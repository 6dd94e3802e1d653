"""Device sweep of the split-K decode attention's shape with the image-prefix blocks pipelined
(`decode_attention(stages=N)`: Triton's asynchronous copies, N blocks in flight per program) against
the shipped shape: Moondream 2 heads (32 × 64), a 730-position prefix per row in its own slot
(distinct images), keys up to position 751 (attention over 768), 24 layers' worth of separate buffers
(so L2 does not serve a layer's K/V twice), one CUDA graph of 24 calls, replayed.

    python docs/experiments/pipelined_attention_sweep.py [--batch 1,32,64] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from engine.kernels import decode_attention  # noqa: E402

LAYERS, H, HD, P, POS, ATTN, MAX_LEN = 24, 32, 64, 730, 751, 768, 832
SHAPES = [(64, 64, 2, 1), (128, 64, 2, 2), (256, 64, 2, 2), (256, 64, 2, 3), (256, 64, 2, 4), (256, 64, 4, 3),
          (192, 64, 2, 3), (384, 64, 2, 3), (768, 64, 2, 4), (256, 32, 2, 4), (512, 32, 2, 4)]
# (chunk, block, warps, stages); the first is the shipped shape


def timed(fn, reps: int = 20) -> float:
    """µs per call of `fn` (a graph replay), median of `reps` timed replays."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return sorted(times)[len(times) // 2]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", default="1,32,64")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    report = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": []}
    print(report["device"], "triton", triton.__version__)
    for b in (int(x) for x in args.batch.split(",")):
        slots = torch.arange(b, device=dev)
        positions = torch.full((b,), POS, device=dev)
        layers = [(torch.randn(b, H, HD, device=dev, dtype=bf, generator=gen),
                   [torch.randn(b, H, MAX_LEN, HD, device=dev, dtype=bf, generator=gen) for _ in range(2)],
                   [torch.randn(b, H, P, HD, device=dev, dtype=bf, generator=gen) for _ in range(2)])
                  for _ in range(LAYERS)]
        kv_bytes = b * LAYERS * H * HD * 2 * 2 * (POS + 1)
        ref = None
        for chunk, block, warps, stages in SHAPES:
            out = torch.empty(LAYERS, b, H * HD, device=dev, dtype=bf)

            def body():
                for i, (q, rows, pre) in enumerate(layers):
                    decode_attention(q, rows[0], rows[1], positions, ATTN, prefix=(pre[0], pre[1], slots), chunk=chunk,
                                     block=block, num_warps=warps, stages=stages, out=out[i])
            try:
                body()  # compile outside the capture
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 (a sweep point that does not compile is reported, not fatal)
                print(f"batch {b} {chunk}/{block}/{warps}/{stages}: {type(e).__name__}: {str(e)[:300]}")
                continue
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                body()
            us = timed(graph.replay)
            graph.replay()
            torch.cuda.synchronize()
            got = out.float()
            ref = got.clone() if ref is None else ref
            diff = ((got - ref).abs().amax() / ref.abs().amax()).item()
            row = {"batch": b, "chunk": chunk, "block": block, "warps": warps, "stages": stages, "us_24_layers": us,
                   "tb_per_s": kv_bytes / us / 1e6, "max_rel_diff_vs_shipped": diff}
            report["rows"].append(row)
            print(f"batch {b:>3} chunk {chunk:>3} block {block:>3} warps {warps} stages {stages}: {us:8.1f} µs / 24 layers,"
                  f" {row['tb_per_s']:.2f} TB/s, max |Δ| vs shipped {diff:.1e}", flush=True)
        del layers
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
