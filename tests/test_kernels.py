"""The fused Triton decode kernels (engine/kernels.py), checked on the CPU through Triton's
interpreter against the PyTorch path they replace on CUDA. Each check runs in its own process
because TRITON_INTERPRET must be set before the kernels are defined (tests/kernels_interpreted.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("check", ["rope_kv_write", "decode_attention", "rope_attention", "residual_layernorm", "vision_fused_blocks", "bidirectional_attention", "fused_sampling", "prefix_prefill", "skinny_linear",
                                   "decode_step",
                                   "prompt_attention", "prompt_prefill", "shared_prefix_attention",
                                   "engine_matches_reference", "engine_with_shared_prefixes_matches_reference",
                                   "padded_prompt_prefill_matches_eager", "grouped_decode_step_matches_per_row"])
def test_kernel_under_triton_interpreter(check):
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", f"import tests.kernels_interpreted as k; k.check_{check}()"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kernels_stay_off_the_cpu_without_the_interpreter():
    import torch

    from engine.kernels import decode as kernels

    assert kernels.triton is not None, "triton is part of the test extra"
    assert kernels.available(torch.zeros(1), 64) is kernels.INTERPRETED is False
    assert not kernels.available(torch.zeros(1), 48)  # not a power of two: PyTorch path


def test_only_large_batches_reading_prefix_slots_per_row_pipeline_their_prefix_blocks():
    from engine.kernels import decode as kernels

    big = kernels.PIPELINE_MIN_BATCH
    assert kernels.decode_shape(big, shared=True, grouped=False) == (kernels.PIPELINE_CHUNK, kernels.PIPELINE_STAGES)
    assert kernels.PIPELINE_CHUNK % kernels.BLOCK_N == 0 and kernels.PIPELINE_STAGES > 1
    for rows, shared, grouped in ((big - 1, True, False), (big, True, True), (big, False, False), (1, True, False)):
        assert kernels.decode_shape(rows, shared, grouped) == (kernels.CHUNK, 1)


def test_grouping_pays_only_when_rows_share_image_prefixes():
    import numpy as np

    from engine.kernels import GROUP_MIN_BATCH, group_table, group_table_size, grouping_pays

    def groups_of(slots):
        table = np.zeros(group_table_size(len(slots)), dtype=np.int64)
        group_table(np.asarray(slots, dtype=np.int64), table)
        return int(table[-1])

    distinct, same, pairs = list(range(32)), [5] * 32, [i // 2 for i in range(32)]
    assert (groups_of(distinct), groups_of(same), groups_of(pairs)) == (32, 2, 16)   # at most 16 rows a group
    assert not grouping_pays(groups_of(distinct), 32) and grouping_pays(groups_of(same), 32)
    assert grouping_pays(groups_of(pairs), 32)
    assert not grouping_pays(1, GROUP_MIN_BATCH - 1) and not grouping_pays(1, 32, "never")
    assert grouping_pays(32, 32, "always")
    with pytest.raises(ValueError, match="group_prefix must be one of"):
        grouping_pays(1, 32, "sometimes")


def test_fp32_dots_are_exact_and_16_bit_ones_use_the_tensor_cores():
    # Triton rounds fp32 tl.dot inputs to TF32 unless told otherwise: on an H200 the fp32 engine then
    # drifted from the reference decoder (engine.verify: 10/16 identical, |Δlogit| 0.0275).
    import torch

    from engine.kernels.decode import dot_precision

    assert dot_precision(torch.float32) == "ieee"
    assert dot_precision(torch.bfloat16) == dot_precision(torch.float16) == "tf32"
