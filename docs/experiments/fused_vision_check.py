"""Device check and timing of the vision tower's fused blocks (session 41): `VisionEncoder.encode_crops(fused=True)`
against its PyTorch blocks on random Moondream 2 weights, 9 and 72 crops of 378×378.

    python docs/experiments/fused_vision_check.py        (CUDA only; exit 1 when the fused path is off)

Prints, per dtype, the fused and the PyTorch blocks' distance from the fp32 PyTorch features (the fused
path must be no further than the PyTorch path of the same dtype, within 10 %; in fp32, within 1e-5), and the GPU time of both
per forward; first, whether cuBLASLt's GELU epilogue (`engine.model.layers.linear_gelu`) is the tanh
approximation Moondream uses.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.model.layers import linear_gelu  # noqa: E402
from engine.tools.bench import build_model  # noqa: E402


def gpu_ms(fn, runs: int = 10) -> float:
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / runs


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


@torch.inference_mode()
def main() -> int:
    ok = True
    gen = torch.Generator(device="cuda").manual_seed(0)
    fc = torch.nn.Linear(1152, 4304, device="cuda", dtype=torch.float32)
    x = torch.randn(4096, 1152, device="cuda", generator=gen)
    y = linear_gelu(x, fc)
    tanh, erf = F.gelu(fc(x), approximate="tanh"), F.gelu(fc(x))
    print(f"GELU epilogue (fp32): max |diff| vs tanh {float((y - tanh).abs().max()):.3g}, vs exact {float((y - erf).abs().max()):.3g}")
    ok &= float((y - tanh).abs().max()) < 1e-4 < float((y - erf).abs().max())

    models = {dt: build_model("moondream2", "cuda", dt, 0) for dt in ("fp32", "bf16")}
    for n in (9, 72):
        crops = torch.randn(n, 3, 378, 378, device="cuda", generator=gen).clamp(-1, 1)
        truth = models["fp32"].vision.encode_crops(crops)
        for dt, model in models.items():
            c = crops.to(model.dtype)
            plain = model.vision.encode_crops(c)
            fused = model.vision.encode_crops(c, fused=True)
            e_plain, e_fused, between = rel(plain, truth), rel(fused, truth), rel(fused, plain)
            t_plain = gpu_ms(lambda: model.vision.encode_crops(c))
            t_fused = gpu_ms(lambda: model.vision.encode_crops(c, fused=True))
            print(f"{dt} {n:>2} crops: rel. error vs fp32 PyTorch: PyTorch blocks {e_plain:.3g}, fused {e_fused:.3g} "
                  f"(fused vs PyTorch {between:.3g}); GPU ms PyTorch {t_plain:.2f}, fused {t_fused:.2f} "
                  f"({t_fused / t_plain:.3f}x)")
            ok &= e_fused <= (1.1 * e_plain if dt != "fp32" else 1e-5)  # fp32: the truth is its own PyTorch path
    print("fused vision blocks:", "OK" if ok else "OFF")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
