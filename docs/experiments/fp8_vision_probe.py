"""Device probe (session 48): would FP8 GEMMs in the vision tower bring an image's prefill under the
~13 ms that detect unique c=64 ≥ 64 req/s needs (issue 15)? Random Moondream 2 weights, 72 crops (8 images
of 640×480, 9 crops each), bf16 activations.

1. Each of a block's four GEMMs at 72 crops × 729 patches: cuBLAS bf16 (`F.linear`) against
   `torch._scaled_mm` with e4m3 operands, one scale per activation row and per weight row (with and
   without fast accumulation), and the cost of quantising the activation (a compiled rowwise amax + cast).
2. The whole tower: the fused bf16 blocks (`encode_crops(fused=True)`, what the engine runs) against the
   same blocks with the four GEMMs in FP8 (the quantisation compiled into the passes around them), GPU
   time and the relative distance of both from the fp32 tower.

    python docs/experiments/fp8_vision_probe.py [--json OUT]      (CUDA, sm_89 or later)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine import kernels  # noqa: E402
from engine.model.image import patchify  # noqa: E402
from engine.model.layers import attention, linear_gelu  # noqa: E402
from engine.tools.bench import build_model  # noqa: E402
from fused_vision_check import gpu_ms, rel  # noqa: E402

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def quantise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] → (e4m3 [M, K], fp32 scale [M, 1]) with x ≈ q · scale, one scale per row."""
    scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
    return (x.float() / scale).to(E4M3), scale


def gelu_quantise(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return quantise(F.gelu(y.float(), approximate="tanh"))


q_c = torch.compile(quantise, dynamic=False)
gq_c = torch.compile(gelu_quantise, dynamic=False)


class FP8Linear:
    def __init__(self, fc: torch.nn.Linear, fast: bool) -> None:
        self.w, self.sw = quantise(fc.weight.detach())  # [N, K], [N, 1]
        self.bias, self.fast = fc.bias.detach(), fast

    def __call__(self, xq: torch.Tensor, sx: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(xq, self.w.t(), scale_a=sx, scale_b=self.sw.t(), bias=self.bias,
                                out_dtype=torch.bfloat16, use_fast_accum=self.fast)


def encode_fp8(model, crops: torch.Tensor, fast: bool) -> torch.Tensor:
    """`VisionEncoder.encode_crops(fused=True)` with the blocks' GEMMs in FP8."""
    v = model.vision
    layers = [{name: FP8Linear(fc, fast) for name, fc in (("qkv", b.attn.qkv), ("proj", b.attn.proj),
                                                          ("fc1", b.mlp.fc1), ("fc2", b.mlp.fc2))}
              for b in v.blocks]

    def run():
        x = v.patch_emb(patchify(crops, v.cfg.patch_size)) + v.pos_emb
        n, patches, d = x.shape
        x = x.reshape(n * patches, d)
        h = v.blocks[0].ln1(x)
        following = [b.ln1 for b in v.blocks[1:]] + [v.post_ln]
        for block, ln, w in zip(v.blocks, following, layers):
            hd = d // block.n_heads
            qkv = w["qkv"](*q_c(h))
            q, k, vv = qkv.view(n, patches, 3, block.n_heads, hd).permute(2, 0, 3, 1, 4)
            a = attention(q, k, vv, cudnn=True).transpose(1, 2).reshape(n * patches, d)
            x, h = kernels.residual_layernorm(x, w["proj"](*q_c(a)), (), block.ln2)
            x, h = kernels.residual_layernorm(x, w["fc2"](*gq_c(w["fc1"](*q_c(h)))), (), ln)
        return h.view(n, patches, d)
    return run


@torch.inference_mode()
def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--crops", type=int, default=72)
    args = ap.parse_args()
    report: dict = {"gpu": torch.cuda.get_device_name(), "crops": args.crops}
    gen = torch.Generator(device="cuda").manual_seed(0)
    m = args.crops * 729
    print(f"{report['gpu']}: {args.crops} crops, {m} rows")
    gemms = {}
    for name, (n_out, k_in) in {"qkv": (3456, 1152), "proj": (1152, 1152), "fc1": (4304, 1152),
                                "fc2": (1152, 4304)}.items():
        fc = torch.nn.Linear(k_in, n_out, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, k_in, device="cuda", dtype=torch.bfloat16, generator=gen)
        flops = 2 * m * n_out * k_in
        row = {"bf16_ms": gpu_ms(lambda: F.linear(x, fc.weight, fc.bias))}
        if name == "fc1":
            row["bf16_gelu_ms"] = gpu_ms(lambda: linear_gelu(x, fc))
        xq, sx = q_c(x)
        for fast in (False, True):
            f8 = FP8Linear(fc, fast)
            row[f"fp8{'_fast' if fast else ''}_ms"] = gpu_ms(lambda: f8(xq, sx))
        row["quantise_ms"] = gpu_ms(lambda: q_c(x))
        if name == "fc2":
            row["gelu_quantise_ms"] = gpu_ms(lambda: gq_c(x))
        ref = F.linear(x.float(), fc.weight.float(), fc.bias.float())
        row["rel_err_bf16"] = rel(F.linear(x, fc.weight, fc.bias), ref)
        row["rel_err_fp8"] = rel(FP8Linear(fc, False)(xq, sx), ref)
        row["tflops_bf16"] = flops / row["bf16_ms"] / 1e9
        row["tflops_fp8"] = flops / row["fp8_ms"] / 1e9
        gemms[name] = row
        print(name, {k: round(v, 4) for k, v in row.items()})
    report["gemms"] = gemms

    models = {dt: build_model("moondream2", "cuda", dt, 0) for dt in ("fp32", "bf16")}
    crops = torch.randn(args.crops, 3, 378, 378, device="cuda", generator=gen).clamp(-1, 1)
    truth = models["fp32"].vision.encode_crops(crops)
    del models["fp32"]
    model = models["bf16"]
    c = crops.to(torch.bfloat16)
    bf16 = model.vision.encode_crops(c, fused=True)
    tower = {"bf16_ms": gpu_ms(lambda: model.vision.encode_crops(c, fused=True), 5),
             "rel_err_bf16": rel(bf16, truth)}
    for fast in (False, True):
        run = encode_fp8(model, c, fast)
        out = run()
        key = "fp8_fast" if fast else "fp8"
        tower[f"{key}_ms"] = gpu_ms(run, 5)
        tower[f"rel_err_{key}"] = rel(out, truth)
        tower[f"rel_{key}_vs_bf16"] = rel(out, bf16)
    report["tower"] = tower
    print("tower", {k: round(v, 4) for k, v in tower.items()})
    print(f"per image (9 crops): bf16 {tower['bf16_ms'] * 9 / args.crops:.2f} ms, fp8 {tower['fp8_ms'] * 9 / args.crops:.2f}, "
          f"fp8 fast {tower['fp8_fast_ms'] * 9 / args.crops:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
