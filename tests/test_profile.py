"""`python -m engine.profile`: its arithmetic and its refusal without a GPU (the profile itself needs CUDA)."""

from __future__ import annotations

import pytest
import torch

from engine.model.config import PRESETS
from engine.tools import profile


def test_kernel_names_fall_into_their_categories():
    assert profile.category("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_bias_TNT") == profile.category("_skinny_kernel") \
        == "matrix multiply (cuBLAS / CUTLASS / Triton)"
    assert profile.category("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<96>>") \
        == "attention (SDPA flash / efficient)"
    assert profile.category("_attn_chunk_kernel") == profile.category("_prefix_group_kernel") \
        == profile.category("_bidir_attn_kernel") == "attention (Triton decode/prompt/prefix)"
    assert profile.category("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7") \
        == "attention (SDPA flash / efficient)"
    assert profile.category("_rope_prefix_kernel") == profile.category("_residual_ln_kernel") \
        == "rotary + K/V write, fused residual LN"
    assert profile.category("vectorized_layer_norm_kernel<c10::BFloat16>") == "layer norm"
    assert profile.category("GeluCUDAKernelImpl") == "GELU"
    assert profile.category("something_else") == "other elementwise"


def test_prefill_flops_grow_by_one_crop_at_a_time():
    cfg = PRESETS["moondream2"]
    v = cfg.vision
    patches = (v.crop_size // v.patch_size) ** 2
    per_crop = profile.prefill_flops(cfg, 2) - profile.prefill_flops(cfg, 1)
    assert profile.prefill_flops(cfg, 9) - profile.prefill_flops(cfg, 8) == pytest.approx(per_crop)
    # one crop's vision matrices: at least 2 FLOPs per weight per patch
    weights = v.n_layers * (4 * v.dim * v.dim + 2 * v.dim * v.ff_dim)
    assert per_crop > 2 * weights * patches
    assert 7e12 < profile.prefill_flops(cfg, 9) < 9e12   # Moondream 2, a 640×480 image (9 crops)


def test_decode_bytes_count_the_weights_once_and_the_kv_per_row():
    from engine.tools.bench import build_model
    from engine.worker.sampling import SampleHeads

    model = build_model("tiny", "cpu", "fp32", 0)
    t = model.config.text
    full = SampleHeads(True, True, True)
    one, two = profile.decode_bytes(model, 1, 100, full), profile.decode_bytes(model, 2, 100, full)
    assert two - one == 100 * t.n_layers * 2 * t.dim * 4
    # a coordinate step reads neither the LM head nor the size decoder
    coord = profile.decode_bytes(model, 1, 100, SampleHeads(False, True, False))
    skipped = [model.text.lm_head.weight, model.text.lm_head.bias, *model.region.size_decoder.parameters()]
    assert one - coord == sum(p.numel() * 4 for p in skipped)


def test_without_a_gpu_it_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        profile.main([])
    assert "needs a CUDA GPU" in str(e.value)
