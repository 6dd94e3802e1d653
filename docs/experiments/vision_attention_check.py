"""Device check and timing of the vision tower's attention kernel (session 44): `engine.kernels.bidirectional_attention`
(head 72 = 64 + 16 on the tensor cores, read from the qkv GEMM's output, written where the projection reads)
against cuDNN's SDPA kernel, which the fused blocks ran before, on Moondream 2's vision shapes (729 patches,
16 heads of 72): 9 crops (one image) and 72 (eight).

    python docs/experiments/vision_attention_check.py [--json OUT] [--sweep]   (CUDA only)

Prints, for bf16 and fp32 inputs, each kernel's relative distance from the fp32 result (the kernel must be
no further than cuDNN's, within 10 %; fp32 within 1e-5), whether the kernel is bit-identical run to run and
for one image alone or inside a batch of eight, and GPU ms per call (cuDNN with the transpose copy the old
block paid). `--sweep` also times the launch shapes below. Exit 1 when a check fails.
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
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from engine.kernels import BIDIRECTIONAL_SHAPE, AttnShape, bidirectional_attention  # noqa: E402
from engine.model.layers import attention  # noqa: E402
from fused_vision_check import gpu_ms, rel  # noqa: E402  (GPU ms per call; relative L2 distance)

PATCHES, HEADS, HD = 729, 16, 72
SHAPES = [AttnShape(*s) for s in [(128, 64, 8, 2), (128, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 2),
                                         (128, 32, 4, 3), (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 4, 2)]]


def sdpa(qkv: torch.Tensor, crops: int, cudnn: bool) -> torch.Tensor:
    """The old block: SDPA on strided q, k, v views, then the transpose copy to [rows, dim]."""
    q, k, v = qkv.view(crops, PATCHES, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
    if cudnn:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            a = F.scaled_dot_product_attention(q, k, v)
    else:
        a = attention(q, k, v)
    return a.transpose(1, 2).reshape(crops * PATCHES, HEADS * HD)


@torch.inference_mode()
def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--sweep", action="store_true")
    args = p.parse_args()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": list(BIDIRECTIONAL_SHAPE),
              "runs": [], "sweep": []}
    ok = True
    gen = torch.Generator(device="cuda").manual_seed(0)
    base = torch.randn(72 * PATCHES, 3 * HEADS * HD, device="cuda", generator=gen)
    truth = sdpa(base.double(), 72, cudnn=False).float()  # math backend in fp64
    for dtype in (torch.bfloat16, torch.float32):
        qkv = base.to(dtype)
        mine = bidirectional_attention(qkv, 72, HEADS)
        theirs = sdpa(qkv, 72, cudnn=dtype == torch.bfloat16)
        e_mine, e_theirs = rel(mine, truth), rel(theirs, truth)
        fine = e_mine <= (1e-5 if dtype == torch.float32 else 1.1 * e_theirs)
        same_runs = all(torch.equal(mine, bidirectional_attention(qkv, 72, HEADS)) for _ in range(3))
        alone = torch.equal(bidirectional_attention(qkv[:9 * PATCHES].clone(), 9, HEADS), mine[:9 * PATCHES])
        ok &= fine and same_runs and alone
        row = {"dtype": str(dtype), "rel_err_kernel": e_mine, "rel_err_sdpa": e_theirs, "bit_identical_runs": same_runs,
               "one_image_alone_equals_batch": alone, "ok": fine and same_runs and alone}
        for crops in (9, 72):
            x = qkv[:crops * PATCHES].contiguous()
            t_mine, t_theirs = [], []
            for _ in range(3):  # interleaved
                t_mine.append(gpu_ms(lambda: bidirectional_attention(x, crops, HEADS)))
                t_theirs.append(gpu_ms(lambda: sdpa(x, crops, cudnn=dtype == torch.bfloat16)))
            flop = 4 * PATCHES * PATCHES * HD * HEADS * crops
            row[f"ms_kernel_{crops}"], row[f"ms_sdpa_{crops}"] = t_mine, t_theirs
            print(f"{dtype} {crops} crops: kernel {min(t_mine):.3f} ms ({flop / min(t_mine) / 1e9:.0f} TFLOP/s), "
                  f"sdpa{' cuDNN' if dtype == torch.bfloat16 else ''} + copy {min(t_theirs):.3f} ms "
                  f"({min(t_theirs) / min(t_mine):.2f}×)")
        report["runs"].append(row)
        print(f"{dtype}: rel. error vs fp64: kernel {e_mine:.2e}, sdpa {e_theirs:.2e}; runs identical {same_runs}; "
              f"one image alone = in batch {alone}; {'ok' if row['ok'] else 'FAIL'}")
    # The text model's image prefix: 8 prefixes of 730 positions, 32 heads of 64, q | k | v the first columns
    # of the [qkv | fc1] GEMM's rows (14,336 wide), output into the first 2,048 columns of the [attn | GELU]
    # rows (10,240 wide); before: flash on strided views, then a copy into that slice.
    tl_, th, thd, groups = 730, 32, 64, 8
    y = torch.randn(groups * tl_, 3 * th * thd + 8192, device="cuda", generator=gen, dtype=torch.bfloat16)
    z = torch.empty(groups * tl_, th * thd + 8192, device="cuda", dtype=torch.bfloat16)

    def text_before():
        q, k, v = y[:, :3 * th * thd].view(groups, tl_, 3, th, thd).unbind(2)
        a = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        z[:, :th * thd].view(groups, tl_, th, thd).copy_(a.transpose(1, 2))

    text_before()
    want = z[:, :th * thd].clone()
    got = bidirectional_attention(y, groups, th, out=z[:, :th * thd]).clone()
    q, k, v = y[:, :3 * th * thd].double().view(groups, tl_, 3, th, thd).unbind(2)
    t_truth = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2).reshape(groups * tl_, -1)
    t_mine, t_theirs = [], []
    for _ in range(3):
        t_mine.append(gpu_ms(lambda: bidirectional_attention(y, groups, th, out=z[:, :th * thd])))
        t_theirs.append(gpu_ms(text_before))
    e_mine, e_theirs = rel(got, t_truth), rel(want, t_truth)
    fine = e_mine <= 1.1 * e_theirs
    ok &= fine
    report["text_prefix"] = {"rel_err_kernel": e_mine, "rel_err_flash": e_theirs, "ms_kernel_8": t_mine,
                             "ms_flash_copy_8": t_theirs, "ok": fine}
    print(f"text prefix, 8 × 730, bf16: kernel {min(t_mine):.3f} ms, flash + copy {min(t_theirs):.3f} ms "
          f"({min(t_theirs) / min(t_mine):.2f}×); rel. error vs fp64: kernel {e_mine:.2e}, flash {e_theirs:.2e}; "
          f"{'ok' if fine else 'FAIL'}")
    if args.sweep:
        x = base.to(torch.bfloat16)
        for shape in SHAPES:
            try:
                ms = min(gpu_ms(lambda: bidirectional_attention(x, 72, HEADS, shape=shape)) for _ in range(3))
                err = rel(bidirectional_attention(x, 72, HEADS, shape=shape), truth)
            except Exception as e:  # noqa: BLE001 - a shape that does not compile (shared memory) is reported
                print(f"sweep {tuple(shape)}: {type(e).__name__}: {str(e)[:120]}")
                continue
            ms_text = min(gpu_ms(lambda: bidirectional_attention(y, groups, th, out=z[:, :th * thd], shape=shape))
                          for _ in range(3))
            report["sweep"].append({"shape": list(shape), "ms_72": ms, "rel_err": err, "ms_text_8": ms_text})
            print(f"sweep {tuple(shape)}: 72 crops {ms:.3f} ms, rel. error {err:.2e}; text prefix ×8 {ms_text:.3f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
