"""Device check and timing of the fused image-prefix prefill (session 43): `TextModel.prefill_prefix`
with kernels="auto" (`_prefill_prefix_fused`: two GEMMs a layer, rotary + K/V write + GELU in one
launch, residual + LayerNorm in one) against its PyTorch path (kernels="torch"), on random
Moondream 2 weights, 1 and 8 prefixes of 730 positions written into prefix slots.

    python docs/experiments/prefix_prefill_check.py [--json OUT]    (CUDA only; exit 1 on a failed check)

Prints, per dtype, each path's distance from the fp32 PyTorch path (hidden states and the K/V written;
the fused path must be no further than the PyTorch path of the same dtype, within 10 %; in fp32, within
1e-4), and the GPU time of both per prefill, interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engine.model.text import KVCache  # noqa: E402
from engine.tools.bench import build_model  # noqa: E402

sys.path.insert(0, str(ROOT / "docs" / "experiments"))
from fused_vision_check import gpu_ms, rel  # noqa: E402  (GPU ms per call; relative L2 distance)


@torch.inference_mode()
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    ok, report = True, {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": []}
    models = {dt: build_model("moondream2", "cuda", dt, 0) for dt in ("fp32", "bf16")}
    for m in models.values():
        m.text.fuse_projections()
    cfg = models["bf16"].config
    plen, slots = cfg.prefix_len, 9
    gen = torch.Generator(device="cuda").manual_seed(1)
    for n in (1, 8):
        # embeddings at the scale of the projected image (the vision MLP's output) and of BOS
        embeds = torch.randn(n, plen, cfg.text.dim, device="cuda", generator=gen)
        rows = torch.randperm(slots, device="cuda", generator=gen)[:n]
        out = {}
        for dt, model in models.items():
            for kernels in ("torch", "auto"):
                kv = KVCache.allocate(cfg.text, slots, plen, device="cuda", dtype=model.dtype)
                hidden = model.text.prefill_prefix(embeds.to(model.dtype), kv, rows, kernels)
                out[dt, kernels] = (hidden, kv.k[:, rows], kv.v[:, rows])
        truth = out["fp32", "torch"]
        for dt, model in models.items():
            errs = {k: [rel(a, b) for a, b in zip(out[dt, k], truth)] for k in ("torch", "auto")}
            kv = KVCache.allocate(cfg.text, slots, plen, device="cuda", dtype=model.dtype)
            x = embeds.to(model.dtype)
            times = {k: [] for k in ("torch", "auto")}
            for _ in range(3):  # interleaved
                for k in times:
                    times[k].append(gpu_ms(lambda: model.text.prefill_prefix(x, kv, rows, k)))
            if dt == "fp32":
                fine = all(e <= 1e-4 for e in errs["auto"])
            else:
                fine = all(e <= 1.1 * max(t, 1e-3) for e, t in zip(errs["auto"], errs["torch"]))
            ok &= fine
            row = {"images": n, "dtype": dt, "rel_err_torch": errs["torch"], "rel_err_fused": errs["auto"],
                   "ms_torch": times["torch"], "ms_fused": times["auto"], "ok": fine}
            report["runs"].append(row)
            print(f"{n} prefix(es) {dt}: rel. error vs fp32 torch (hidden, K, V): torch "
                  + ", ".join(f"{e:.2e}" for e in errs["torch"]) + "; fused " + ", ".join(f"{e:.2e}" for e in errs["auto"])
                  + f"; GPU ms torch {min(times['torch']):.3f}, fused {min(times['auto']):.3f}"
                  + f" ({min(times['torch']) / min(times['auto']):.2f}×) {'ok' if fine else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
