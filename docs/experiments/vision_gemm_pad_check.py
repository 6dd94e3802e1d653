"""Device timing (session 44): do Moondream 2's vision MLP GEMMs run faster with the hidden width padded from
4304 (not a multiple of the 128/256-wide tiles) to 4352 = 17·256 by zero columns? Padding is exact (GELU(0) = 0
and zero rows of fc2 add nothing), so it would be a free change if it paid. Eight images' tokens (72 crops ·
729 patches), bf16, fc1 with its cuBLASLt GELU epilogue and fc2 with its bias; GPU ms, best of three.

    python docs/experiments/vision_gemm_pad_check.py [--json OUT]        (CUDA only)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from fused_vision_check import gpu_ms  # noqa: E402

ROWS, DIM, FF = 72 * 729, 1152, 4304


@torch.inference_mode()
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(ROWS, DIM, device="cuda", generator=g, dtype=torch.bfloat16)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": ROWS, "widths": {}}
    for ff in (FF, 4352, 4608):
        w1 = torch.randn(ff, DIM, device="cuda", generator=g, dtype=torch.bfloat16) * 0.03
        b1 = torch.zeros(ff, device="cuda", dtype=torch.bfloat16)
        w2 = torch.randn(DIM, ff, device="cuda", generator=g, dtype=torch.bfloat16) * 0.03
        b2 = torch.zeros(DIM, device="cuda", dtype=torch.bfloat16)
        h = torch._addmm_activation(b1, x, w1.t(), use_gelu=True)
        t1 = min(gpu_ms(lambda: torch._addmm_activation(b1, x, w1.t(), use_gelu=True)) for _ in range(3))
        t2 = min(gpu_ms(lambda: torch.addmm(b2, h, w2.t())) for _ in range(3))
        flop = 2 * ROWS * DIM * FF  # useful products, either width
        report["widths"][str(ff)] = {"fc1_ms": t1, "fc2_ms": t2}
        print(f"hidden {ff}: fc1+GELU {t1:.3f} ms ({flop / t1 / 1e9:.0f} useful TFLOP/s), fc2 {t2:.3f} ms "
              f"({flop / t2 / 1e9:.0f}), both {t1 + t2:.3f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
