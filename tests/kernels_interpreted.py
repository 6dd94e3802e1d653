"""Checks of engine/kernels.py run under Triton's CPU interpreter (TRITON_INTERPRET=1).

Not collected by pytest: tests/test_kernels.py runs each `check_*` in a fresh interpreter with
the variable set (Triton reads it when the kernels are defined, so it cannot be switched on
inside a process that already imported them). Each check compares the fused kernels with the
PyTorch decode path that they replace on CUDA.
"""

from __future__ import annotations

import os

import numpy as np
import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "run through tests/test_kernels.py"

from engine.kernels import decode as kernels  # noqa: E402
from engine.kernels import prompt as kernels_prompt  # noqa: E402
from engine.kernels import skinny  # noqa: E402
from engine.model.config import TINY, TextConfig  # noqa: E402
from engine.model.layers import decode_attention as torch_attention  # noqa: E402
from engine.model.text import apply_rope_, rope_tables  # noqa: E402

# (heads, head_dim, rotary_dims): the tiny, embedded and moondream2 head shapes
HEAD_SHAPES = [(4, 16, 8), (8, 32, 16), (2, 64, 32)]


def tiny_model_and_cache(model_seed: int, rows: int, length: int, kv_seeds: tuple[int, int]):
    """The tiny model (fp32, random weights) and a KV cache of `rows` rows of `length` positions
    filled with noise, so that writes and non-writes both show."""
    from engine.model.checkpoint import init_random_
    from engine.model.moondream import MoondreamModel
    from engine.model.text import KVCache

    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=model_seed)
    kv = KVCache.allocate(model.text.cfg, rows, length, device="cpu", dtype=torch.float32)
    kv.k.normal_(generator=torch.Generator().manual_seed(kv_seeds[0]))
    kv.v.normal_(generator=torch.Generator().manual_seed(kv_seeds[1]))
    return model, kv


def check_rope_kv_write() -> None:
    gen = torch.Generator().manual_seed(0)
    for heads, hd, rot in HEAD_SHAPES:
        cfg = TextConfig(dim=heads * hd, n_heads=heads, rotary_dims=rot, max_context=200)
        cos, sin = rope_tables(cfg, 200, "cpu")
        rows, max_len = 5, 200
        positions = torch.tensor([0, 37, 150, max_len - 1])  # the last is a padding row's scratch position
        b = len(positions)
        qkv = torch.randn(b, 3 * heads * hd, generator=gen)
        k_cache, v_cache = torch.randn(2, rows, heads, max_len, hd, generator=gen)
        want_k, want_v = k_cache.clone(), v_cache.clone()
        q = kernels.rope_kv_write(qkv, cos, sin, positions, k_cache, v_cache, rot)
        ref = qkv.view(b, 3, heads, hd).clone()
        apply_rope_(ref[:, :2], cos[positions][:, None, None], sin[positions][:, None, None], rot)
        rows_idx = torch.arange(b)
        want_k[rows_idx, :, positions] = ref[:, 1]
        want_v[rows_idx, :, positions] = ref[:, 2]
        torch.testing.assert_close(q, ref[:, 0], rtol=0, atol=1e-6)
        torch.testing.assert_close(k_cache, want_k, rtol=0, atol=1e-6)  # and nothing else written
        assert torch.equal(v_cache, want_v)
        # With the MLP's first projection behind q, k, v (FusedProjections): the same rotary and
        # cache writes, and GELU-tanh of the rest into a strided view, nothing beside it touched.
        ff = 1000 + hd  # not a multiple of the GELU block: the masked tail
        y = torch.cat([qkv, 3 * torch.randn(b, ff, generator=gen)], 1)
        wide = torch.full((b, 7 + ff), 5.0)
        k2, v2 = torch.randn(2, rows, heads, max_len, hd, generator=gen)
        q2 = kernels.rope_kv_write(y, cos, sin, positions, k2, v2, rot, gelu_out=wide[:, 7:])
        assert torch.equal(q2, q) and torch.equal(k2[rows_idx, :, positions], k_cache[rows_idx, :, positions])
        torch.testing.assert_close(wide[:, 7:], torch.nn.functional.gelu(y[:, -ff:], approximate="tanh"),
                                   rtol=1e-6, atol=1e-6)
        assert torch.equal(wide[:, :7], torch.full((b, 7), 5.0))


def check_decode_attention() -> None:
    gen = torch.Generator().manual_seed(1)
    heads, hd, max_len = 3, 16, 400
    k_cache, v_cache = torch.randn(2, 6, heads, max_len, hd, generator=gen) * 2
    # Lengths on and around chunk edges (64 keys), one key, and padding rows at the scratch
    # position beyond the bucket (they see the whole bucket).
    for attn_len, positions in ((256, [0, 63, 64, 65, 200, max_len - 1]), (64, [10, 63, max_len - 1]), (320, [319, 128])):
        pos = torch.tensor(positions)
        b = len(pos)
        q = torch.randn(b, heads, hd, generator=gen)
        visible = torch.arange(attn_len)[None, :] <= pos[:, None]
        bias = torch.zeros(b, attn_len).masked_fill_(~visible, float("-inf"))
        bias = bias[:, None, :, None].expand(b, heads, attn_len, 1).reshape(b * heads, attn_len, 1)
        want = torch_attention(q[:, :, None], k_cache[:b, :, :attn_len], v_cache[:b, :, :attn_len], bias)
        got = kernels.decode_attention(q, k_cache, v_cache, pos, attn_len)
        torch.testing.assert_close(got, want.reshape(b, -1), rtol=1e-5, atol=1e-5)
        wide = torch.zeros(b, heads * hd + 9)  # written into a strided view: the same numbers, nothing beside
        kernels.decode_attention(q, k_cache, v_cache, pos, attn_len, out=wide[:, 4:4 + heads * hd])
        assert torch.equal(wide[:, 4:4 + heads * hd], got) and not wide[:, :4].any() and not wide[:, 4 + heads * hd:].any()
        # bf16 cache: fp32 accumulation inside, one rounding of the output
        got16 = kernels.decode_attention(q.bfloat16(), k_cache.bfloat16(), v_cache.bfloat16(), pos, attn_len)
        assert got16.dtype == torch.bfloat16
        torch.testing.assert_close(got16.float(), want.reshape(b, -1), rtol=0.05, atol=0.05)


def check_rope_attention() -> None:
    """The rotary, K/V write and GELU inside the attention launch (`rope_attention`) give what
    `rope_kv_write` then `decode_attention` give, bit for bit: outputs, every cache position and the
    GELU columns; with rows of their own, with image prefixes read from slots, and in the longer
    chunks with pipelined prefix blocks; padding rows at the scratch position included."""
    gen = torch.Generator().manual_seed(11)
    heads, hd, rot, max_len, plen = 2, 16, 8, 300, 90
    cfg = TextConfig(dim=heads * hd, n_heads=heads, rotary_dims=rot, max_context=max_len)
    cos, sin = rope_tables(cfg, max_len, "cpu")
    k_slots, v_slots = torch.randn(2, 3, heads, plen, hd, generator=gen)
    slots = torch.tensor([2, 0, 1, 2, 0])
    for dtype in (torch.float32, torch.bfloat16):
        for attn_len, positions, prefix, chunk, stages in (
                (256, [0, 63, 64, 200, max_len - 1], None, None, None),
                (192, [plen, 150, 191, max_len - 1, plen + 63], (k_slots, v_slots, slots), None, None),
                (192, [plen, 150, 191, max_len - 1, plen + 63], (k_slots, v_slots, slots), 128, 3)):
            pos = torch.tensor(positions)
            b = len(pos)
            ff = 2 * kernels.GELU_BLOCK + 24  # three GELU blocks a row, the last one masked
            y = (3 * torch.randn(b, 3 * heads * hd + ff, generator=gen)).to(dtype)
            k_cache, v_cache = torch.randn(2, 6, heads, max_len, hd, generator=gen).to(dtype)
            k0, v0 = k_cache.clone(), v_cache.clone()
            shared = None if prefix is None else tuple(t.to(dtype) if t.is_floating_point() else t for t in prefix)
            wide = torch.full((b, 5 + heads * hd + ff), 7.0, dtype=dtype)
            q = kernels.rope_kv_write(y, cos, sin, pos, k_cache, v_cache, rot, gelu_out=wide[:, 5 + heads * hd:])
            kernels.decode_attention(q, k_cache, v_cache, pos, attn_len, prefix=shared, chunk=chunk, stages=stages,
                                     out=wide[:, 5:5 + heads * hd])
            for one_launch in (True, None):  # None: the default, two launches for the pipelined shape
                fused = torch.full_like(wide, 7.0)
                k2, v2 = k0.clone(), v0.clone()  # the caches before the writes
                kernels.rope_attention(y, cos, sin, pos, k2, v2, rot, attn_len, prefix=shared, chunk=chunk,
                                       stages=stages, gelu_out=fused[:, 5 + heads * hd:], out=fused[:, 5:5 + heads * hd],
                                       one_launch=one_launch)
                assert torch.equal(fused, wide), (dtype, attn_len, chunk, one_launch)
                assert torch.equal(k2, k_cache) and torch.equal(v2, v_cache), (dtype, attn_len, chunk, one_launch)
            # without a GELU output: attention alone, nothing written beside it
            alone = kernels.rope_attention(y[:, :3 * heads * hd], cos, sin, pos, k2, v2, rot, attn_len,
                                           prefix=shared, chunk=chunk, stages=stages, one_launch=True)
            assert torch.equal(alone, wide[:, 5:5 + heads * hd])


def check_shared_prefix_attention() -> None:
    """Both attention kernels with the image prefix read from shared slots equal the same kernels
    on rows that hold the prefix themselves; two rows share a slot, one slot is unused."""
    gen = torch.Generator().manual_seed(10)
    heads, hd, max_len, plen = 2, 16, 300, 90  # the prefix ends inside a 64-key block
    k_rows, v_rows = torch.randn(2, 9, heads, max_len, hd, generator=gen)
    k_slots, v_slots = torch.randn(2, 3, heads, plen, hd, generator=gen)
    slots = torch.tensor([2, 0, 2, 1, 2, 2, 0, 2, 2])  # a batch of 9 ≥ GROUP_MIN_BATCH: grouped below
    k_own, v_own = k_rows.clone(), v_rows.clone()
    k_own[:, :, :plen], v_own[:, :, :plen] = k_slots[slots], v_slots[slots]
    pos = torch.tensor([plen, 150, plen + 40, max_len - 1, plen, 191, 100, plen + 1, plen + 2])
    q = torch.randn(9, heads, hd, generator=gen)
    want = kernels.decode_attention(q, k_own, v_own, pos, 192)
    got = kernels.decode_attention(q, k_rows, v_rows, pos, 192, prefix=(k_slots, v_slots, slots))
    assert torch.equal(got, want)
    # Rows grouped by slot (the engine's decode): the chunk inside the prefix once per group.
    assert len(slots) >= kernels.GROUP_MIN_BATCH
    table = torch.zeros(kernels.group_table_size(12), dtype=torch.long)  # room for 12 rows: 3 unused
    kernels.group_table(slots.numpy(), table.numpy())
    assert table[-1] == 3  # slots 0, 1 and 2: six rows read slot 2
    grouped = kernels.decode_attention(q, k_rows, v_rows, pos, 192, prefix=(k_slots, v_slots, slots), groups=table)
    torch.testing.assert_close(grouped, want, rtol=1e-5, atol=1e-5)
    # Larger batches' shape (decode_shape): longer chunks whose prefix blocks are pipelined give what the
    # same chunks give block by block; and the same attention as the 64-key chunks, up to the merge's rounding.
    # A row whose keys end inside the prefix, before a block boundary, too (position 40).
    short = pos.clone()
    short[1] = 40
    want_short = kernels.decode_attention(q, k_own, v_own, short, 192)
    for chunk in (128, 192):
        one_by_one = kernels.decode_attention(q, k_rows, v_rows, short, 192, prefix=(k_slots, v_slots, slots),
                                              chunk=chunk, stages=1)
        pipelined = kernels.decode_attention(q, k_rows, v_rows, short, 192, prefix=(k_slots, v_slots, slots),
                                             chunk=chunk, stages=3)
        assert torch.equal(pipelined, one_by_one)
        torch.testing.assert_close(pipelined, want_short, rtol=1e-5, atol=1e-5)
    rows = torch.tensor([3, 1])
    ppos = torch.full((2, 16), max_len - 1)
    ppos[0, :16], ppos[1, :7] = torch.arange(plen, plen + 16), torch.arange(plen, plen + 7)
    pq = torch.randn(2, 16, heads, hd, generator=gen)
    want = kernels_prompt.prompt_attention(pq, k_own, v_own, rows, ppos, plen + 16)
    got = kernels_prompt.prompt_attention(pq, k_rows, v_rows, rows, ppos, plen + 16,
                                          prefix=(k_slots, v_slots, slots[rows]))
    assert torch.equal(got, want)


def check_residual_layernorm() -> None:
    gen = torch.Generator().manual_seed(2)
    for dim in (48, 64):  # a non-power-of-two width exercises the masked tail
        x, a = torch.randn(2, 5, dim, generator=gen)
        b1, b2 = torch.randn(2, dim, generator=gen)  # the two projections' biases (FusedProjections)
        ln = torch.nn.LayerNorm(dim)
        with torch.no_grad():
            ln.weight.normal_(generator=gen)
            ln.bias.normal_(generator=gen)
            x_new, h = kernels.residual_layernorm(x, a, (b1, b2), ln)
            torch.testing.assert_close(x_new, x + a + b1 + b2, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(h, ln(x + a + b1 + b2), rtol=1e-5, atol=1e-5)
            x_last, none = kernels.residual_layernorm(x, a, (b1, b2), None)
            assert none is None and torch.equal(x_last, x_new)
            x_plain, h_plain = kernels.residual_layernorm(x, a, (), ln)  # the vision blocks' mode: no biases
            assert torch.equal(x_plain, x + a)
            torch.testing.assert_close(h_plain, ln(x + a), rtol=1e-5, atol=1e-5)
            parts = torch.randn(3, 5, dim, generator=gen)  # split-K partial sums (skinny_linear), added in order
            x_split, h_split = kernels.residual_layernorm(x, parts, (b1, b2), ln)
            want = x + (parts[0] + parts[1] + parts[2]) + (b1 + b2)
            torch.testing.assert_close(x_split, want, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(h_split, ln(want), rtol=1e-5, atol=1e-5)


def check_skinny_linear() -> None:
    """The decode projections' kernel against x @ wᵀ + b: row counts within and across the 16-row
    bucket, shapes that are and are not multiples of the tiles, strided input rows, preallocated
    strided output, split-K partials; each row's result does not depend on the other rows."""
    gen = torch.Generator().manual_seed(7)
    shapes = [skinny.SkinnyShape(32, 32, 1, 4, 2), skinny.SkinnyShape(64, 64, 1, 4, 3)]
    splits = [skinny.SkinnyShape(32, 32, 3, 4, 2), skinny.SkinnyShape(64, 32, 2, 4, 3)]
    for n, k in ((96, 64), (200, 192), (64, 320)):
        w = torch.randn(n, k, generator=gen)
        b = torch.randn(n, generator=gen)
        for m in (1, 3, 16, 17, 40):
            x = torch.randn(m, k + 8, generator=gen)[:, 4:4 + k]  # strided rows
            want = x @ w.t() + b
            for shape in shapes:
                got = skinny.skinny_linear(x, w, b, shape=shape)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
                alone = skinny.skinny_linear(x[:1], w, b, shape=shape)
                assert torch.equal(alone[0], got[0]), "a row's result depends on the other rows"
            out = torch.full((m, n + 5), 9.0)
            skinny.skinny_linear(x, w, b, shape=shapes[0], out=out[:, :n])
            torch.testing.assert_close(out[:, :n], want, rtol=1e-5, atol=1e-4)
            assert torch.all(out[:, n:] == 9.0), "wrote outside its output columns"
            for shape in splits:
                parts = skinny.skinny_linear(x, w, shape=shape)
                assert parts.shape == (shape.split_k, m, n) and parts.dtype == torch.float32
                torch.testing.assert_close(parts.sum(0), want - b, rtol=1e-5, atol=1e-4)


def check_vision_fused_blocks() -> None:
    """The vision tower's fused blocks (`VisionEncoder.encode_crops(fused=True)`: residual adds with
    the LayerNorms after them in `residual_layernorm`) against its PyTorch blocks, on the tiny
    model's crops. (On the CPU fc1 and GELU stay two steps; their CUDA GEMM epilogue is checked on
    the device by docs/experiments/fused_vision_check.py.)"""
    from engine.model.checkpoint import init_random_
    from engine.model.moondream import MoondreamModel

    torch.set_num_threads(1)
    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=5)
    size = TINY.vision.crop_size
    crops = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        want = model.vision.encode_crops(crops)
        got = model.vision.encode_crops(crops, fused=True)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def check_bidirectional_attention() -> None:
    """`bidirectional_attention` (q, k, v read from a GEMM's output, rows possibly wider than 3·D;
    output new or into a strided column slice) against SDPA on the same q, k, v views: head dims
    split into a power of two and a padded rest (72 = 64 + 16, 24 = 16 + 16 with 8 of padding) and
    whole powers of two, group lengths that are no multiple of the tiles; each group's output the
    same bits alone as inside a batch; nothing outside the output slice written."""
    from engine.kernels.bidirectional import AttnShape, bidirectional_attention
    from engine.model.layers import attention

    torch.set_num_threads(1)
    small = AttnShape(block_m=16, block_n=16, warps=1, stages=1)
    cases = [(2, 37, 3, 72, 0, small), (3, 50, 2, 24, 0, small), (2, 29, 2, 64, 40, small), (2, 150, 2, 16, 8, None)]
    for groups, length, heads, hd, extra, shape in cases:
        g = torch.Generator().manual_seed(hd)
        d = heads * hd
        qkv = torch.randn(groups * length, 3 * d + extra, generator=g)  # extra: columns after v (the fc1 part)
        kw = {"shape": shape} if shape else {}
        if extra:  # into a column slice of a wider buffer, as the text prefix writes beside its GELU columns
            z = torch.randn(groups * length, d + extra, generator=g)
            before = z.clone()
            got = bidirectional_attention(qkv, groups, heads, out=z[:, :d], **kw)
            assert got.data_ptr() == z.data_ptr() and torch.equal(z[:, d:], before[:, d:])
        else:
            got = bidirectional_attention(qkv, groups, heads, **kw)
        q, k, v = qkv[:, :3 * d].reshape(groups, length, 3, heads, hd).permute(2, 0, 3, 1, 4)
        want = attention(q, k, v).transpose(1, 2).reshape(groups * length, d)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        alone = bidirectional_attention(qkv[length:2 * length, :3 * d].contiguous(), 1, heads, **kw)
        assert torch.equal(alone, got[length:2 * length])


def check_fused_sampling() -> None:
    """A point/detect step's fused sampling (`engine.kernels.sample`) against the runner's PyTorch
    sampling, for every `SampleHeads` variant without the full vocabulary: rows in each grammar
    state (coord or EOS, coord, size, EOS) and inactive rows, with some logits tied: the same tokens,
    values, probabilities, pending inputs and next input embeddings."""
    from engine.model.checkpoint import init_random_
    from engine.model.moondream import MoondreamModel
    from engine.worker.runner import ModelRunner
    from engine.worker.sampling import SampleHeads

    torch.set_num_threads(1)
    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=6)
    tok, vocab = TINY.tokens, TINY.text.vocab_size
    table = np.zeros((8, vocab), dtype=np.bool_)
    table[0] = True
    for row, ids in enumerate(([tok.coord_id, tok.eos_id], [tok.coord_id], [tok.size_id], [tok.eos_id]), start=1):
        table[row, ids] = True
    batch = 6
    states = torch.tensor([1, 2, 3, 4, 1, 3])
    active = torch.tensor([1, 1, 1, 1, 0, 1])
    hidden = torch.randn(batch, TINY.text.dim, generator=torch.Generator().manual_seed(6))
    hidden[5] = hidden[2]  # two rows alike: equal logits everywhere
    runners = {}
    for name in ("torch", "triton"):
        runner = ModelRunner(model, max_batch=8, max_len=TINY.prefix_len + 64, mask_capacity=8, kernels=name)
        sampler = runner.sampler
        assert sampler.fused == (name == "triton")
        runner.upload_mask_rows(table, 5)
        runner.hidden[:batch] = hidden
        sampler.pending_token[:batch] = 7
        sampler.pending_coord[:batch] = 0.25
        sampler.pending_size[:batch] = 0.5
        slot = runner.slots[0]
        slot.meta_dev[0, :batch], slot.meta_dev[1, :batch] = states, active
        runners[name] = runner
    for heads in SampleHeads.variants()[1:]:
        out = {}
        for name, runner in runners.items():
            slot = runner.slots[0]
            runner.replay_sample(0, batch, heads)
            out[name] = [t[:batch].clone() for t in (slot.tokens_dev, slot.coords_dev, slot.sizes_dev, slot.probs_dev,
                                                      runner.sampler.pending_token, runner.sampler.pending_coord,
                                                      runner.sampler.pending_size, runner.sampler.embeds)]
        for want, got in zip(out["torch"], out["triton"]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert heads.coord or out["triton"][1].isnan().all()
        assert set(out["triton"][0].tolist()) <= {tok.coord_id, tok.size_id, tok.eos_id}


def check_decode_step() -> None:
    """One whole decode step of the tiny model: fused path against the PyTorch path."""
    from engine.model.checkpoint import init_random_
    from engine.model.moondream import MoondreamModel
    from engine.model.text import KVCache

    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=0)
    text = model.text
    kv = KVCache.allocate(text.cfg, 4, 300, device="cpu", dtype=torch.float32)
    kv.k.normal_(generator=torch.Generator().manual_seed(3))
    kv.v.normal_(generator=torch.Generator().manual_seed(4))
    fused_kv = KVCache(kv.k.clone(), kv.v.clone())
    positions = torch.tensor([5, 130, 200, 299])
    embeds = torch.randn(4, text.cfg.dim, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        assert kernels.available(embeds, text.cfg.head_dim) and skinny.skinny_applies(embeds)
        want = text.decode(embeds, kv, positions, 256, kernels="torch")
        default = skinny.SKINNY_DEFAULT
        try:  # the projections on skinny_linear, whole and split-K (partials added by the residual kernel)
            for shape in (default, skinny.SkinnyShape(32, 32, 3, 4, 2)):
                skinny.SKINNY_DEFAULT = shape
                step_kv = KVCache(fused_kv.k.clone(), fused_kv.v.clone())
                got = text.decode(embeds, step_kv, positions, 256, kernels="triton")
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(step_kv.k, kv.k, rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(step_kv.v, kv.v, rtol=1e-6, atol=1e-6)
        finally:
            skinny.SKINNY_DEFAULT = default


def check_prefix_prefill() -> None:
    """`TextModel.prefill_prefix` of whole image prefixes, fused (rotary in place, K/V written to the
    rows, GELU in one launch; `rope_kv_prefix`) against the PyTorch path: hidden states, the K/V of
    the rows it fills, and no other row or position touched. Rows out of order, a prefix shorter
    than the rows (the engine's fill them; the kernel does not tell the two apart)."""
    from engine.model.text import KVCache

    torch.set_num_threads(1)
    model, kv = tiny_model_and_cache(4, 5, TINY.prefix_len + 3, (10, 11))
    text, plen = model.text, TINY.prefix_len
    rows = torch.tensor([3, 0])
    for n in (plen - 5,):
        fused_kv = KVCache(kv.k.clone(), kv.v.clone())
        want_kv = KVCache(kv.k.clone(), kv.v.clone())
        embeds = torch.randn(2, n, text.cfg.dim, generator=torch.Generator().manual_seed(n))
        with torch.inference_mode():
            got = text.prefill_prefix(embeds, fused_kv, rows, kernels="triton")
            want = text.prefill_prefix(embeds, want_kv, rows, kernels="torch")
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fused_kv.k, want_kv.k, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fused_kv.v, want_kv.v, rtol=1e-5, atol=1e-5)
        assert not torch.equal(fused_kv.k[:, rows, :, :n], kv.k[:, rows, :, :n])  # the rows were written
        others = torch.tensor([1, 2, 4])
        assert torch.equal(fused_kv.k[:, others], kv.k[:, others]) and torch.equal(fused_kv.v[:, others], kv.v[:, others])
        assert torch.equal(fused_kv.k[:, :, :, n:], kv.k[:, :, :, n:]) and torch.equal(fused_kv.v[:, :, :, n:], kv.v[:, :, :, n:])


def check_prompt_attention() -> None:
    """The prompt prefill's attention, keys read in place, against the gathered PyTorch attention:
    rows out of order, a row twice (padding items reuse a real row), padding tokens at the scratch
    position, prompt lengths 16 and 32, ends inside and on the edge of a key block."""
    from engine.model.layers import attention

    gen = torch.Generator().manual_seed(6)
    heads, hd, max_len, prefix = 2, 16, 300, 40
    k_cache, v_cache = torch.randn(2, 5, heads, max_len, hd, generator=gen) * 2
    for n, rows, end in ((16, [3, 0, 3], prefix + 16), (32, [1, 4], prefix + 32), (16, [2], 128)):
        rows_t = torch.tensor(rows)
        b = len(rows)
        pos = torch.full((b, n), max_len - 1)
        for k, m in enumerate([n, n // 2, 5][:b]):
            pos[k, :m] = torch.arange(prefix, prefix + m)
        q = torch.randn(b, n, heads, hd, generator=gen)
        visible = (torch.arange(end)[None, None, :] <= pos[:, :, None])[:, None]
        want = attention(q.transpose(1, 2), k_cache[rows_t, :, :end], v_cache[rows_t, :, :end], visible)
        want = want.transpose(1, 2).reshape(b, n, -1)
        got = kernels_prompt.prompt_attention(q, k_cache, v_cache, rows_t, pos, end)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        # rows as the runner passes them: a strided view of its padded prompt inputs, [B, L] → [:, 0]
        strided = rows_t[:, None].expand(b, n).contiguous()[:, 0]
        assert not strided.is_contiguous() or b == 1
        got = kernels_prompt.prompt_attention(q, k_cache, v_cache, strided, pos, end)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def check_prompt_prefill() -> None:
    """`TextModel.prefill_at` of padded prompts: fused path against the PyTorch path (hidden
    states and the K/V it writes)."""
    from engine.model.text import KVCache

    model, kv = tiny_model_and_cache(1, 4, TINY.prefix_len + 80, (7, 8))
    text, plen = model.text, TINY.prefix_len
    fused_kv = KVCache(kv.k.clone(), kv.v.clone())
    rows = torch.tensor([2, 0, 2])
    pos = torch.full((3, 16), plen + 79)
    pos[0, :9], pos[1, :16] = torch.arange(plen, plen + 9), torch.arange(plen, plen + 16)
    embeds = torch.randn(3, 16, text.cfg.dim, generator=torch.Generator().manual_seed(9))
    with torch.inference_mode():
        got = text.prefill_at(embeds, fused_kv, rows, pos, plen + 16, kernels="triton")
        want = text.prefill_at(embeds, kv, rows, pos, plen + 16, kernels="torch")
    real = pos < plen + 16
    torch.testing.assert_close(got[real], want[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fused_kv.k[:, :, :, : plen + 16], kv.k[:, :, :, : plen + 16], rtol=1e-5, atol=1e-5)


def check_padded_prompt_prefill_matches_eager() -> None:
    """The runner's padded prompt prefill (static shapes, the fused prompt kernel: how CUDA runs it,
    captured) against its eager prefill (PyTorch attention), for one step of several different
    prompts on different images, rows out of order: the same last hidden state per row. The check is
    on the hidden states, not on decoded answers, which a random model can keep by chance."""
    from engine.model.checkpoint import init_random_
    from engine.model.image import load_image, overlap_crop_image
    from engine.model.moondream import MoondreamModel
    from engine.serving.skills import prompt_ids
    from engine.training.vocab import build_tokenizer
    from engine.worker.runner import ModelRunner, PrefillItem
    from tests.test_engine import IMAGES

    torch.set_num_threads(1)
    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=3)
    tokenizer = build_tokenizer(vocab_size=TINY.text.vocab_size)
    encode = lambda t: tokenizer.encode(t).ids  # noqa: E731
    asks = [("point", "red circle"), ("detect", "blue star"), ("detect", "a green triangle on the left")]
    items = [PrefillItem(row, overlap_crop_image(load_image(IMAGES[k % len(IMAGES)]), TINY.vision), k,
                         prompt_ids(TINY.tokens, encode, skill, obj))
             for k, (row, (skill, obj)) in enumerate(zip([2, 0, 3], asks))]
    assert len({len(i.prompt) for i in items}) > 1
    out = {}
    for static in (False, True):
        runner = ModelRunner(model, max_batch=4, max_len=TINY.prefix_len + 64, mask_capacity=8, kernels="triton")
        runner.static_prompts = static
        runner.launch_prefill(items)
        rows = [i.row for i in items]
        out[static] = runner.hidden[rows].clone()
    torch.testing.assert_close(out[True], out[False], rtol=1e-4, atol=1e-4)


def check_grouped_decode_step_matches_per_row() -> None:
    """A decode step of the runner whose rows share image slots (rows out of slot order, groups of
    one and of several rows, the host-built group table): the grouped graph body gives the per-row
    body's hidden states, and both the PyTorch path's (rows hold their prefix copies)."""
    from engine.model.checkpoint import init_random_
    from engine.model.image import load_image, overlap_crop_image
    from engine.model.moondream import MoondreamModel
    from engine.serving.skills import prompt_ids
    from engine.training.vocab import build_tokenizer
    from engine.worker.runner import ModelRunner, PrefillItem
    from tests.test_engine import IMAGES

    torch.set_num_threads(1)
    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=4)
    tokenizer = build_tokenizer(vocab_size=TINY.text.vocab_size)
    encode = lambda t: tokenizer.encode(t).ids  # noqa: E731
    image_of_row = [0, 1, 0, 2, 0, 1, 0, 0, 1, 0]  # slot = image: groups of 6, 3 and 1 rows
    crops = [overlap_crop_image(load_image(IMAGES[k % len(IMAGES)]), TINY.vision) for k in range(3)]
    batch = len(image_of_row)
    assert batch >= kernels.GROUP_MIN_BATCH
    hidden = {}
    for name, kernel_choice, grouped in (("per-row", "triton", False), ("grouped", "triton", True),
                                         ("torch", "torch", False)):
        runner = ModelRunner(model, max_batch=16, max_len=TINY.prefix_len + 64, mask_capacity=8,
                             kernels=kernel_choice, group_prefix="always" if grouped else "never")
        seen = set()
        items = []
        for row, image in enumerate(image_of_row):
            obj = ["red circle", "blue star", "green"][row % 3]
            items.append(PrefillItem(row, None if image in seen else crops[image], image,
                                     prompt_ids(TINY.tokens, encode, "point", obj)))
            seen.add(image)
        runner.launch_prefill(items)
        positions = np.array([TINY.prefix_len + len(i.prompt) + row % 3 for row, i in enumerate(items)])
        runner.sampler.pending_token[:batch] = torch.tensor([encode(w)[0] for w in ("a", "b")] * (batch // 2))
        runner.embed_pending(batch)
        runner.positions[:batch] = torch.from_numpy(positions)
        assert runner.group_rows(0, batch) == grouped
        runner.replay_decode(batch, runner.attn_bucket(int(positions.max())), grouped)
        hidden[name] = runner.hidden[:batch].clone()
    torch.testing.assert_close(hidden["grouped"], hidden["per-row"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(hidden["per-row"], hidden["torch"], rtol=1e-4, atol=1e-4)


def check_engine_with_shared_prefixes_matches_reference() -> None:
    """Rows of one image decoding together (prefix slots shared, grouped in the decode attention, or
    per row with group_prefix="never"): pipelined and blocking engines with the fused kernels give
    the reference decoder's outputs."""
    from engine.model.checkpoint import init_random_
    from engine.serving.engine import Engine
    from engine.model.moondream import MoondreamModel
    from engine.training.vocab import build_tokenizer
    from engine.model.image import load_image, overlap_crop_image
    from engine.model.reference import reference_generate
    from engine.serving.skills import prompt_ids
    from tests.test_engine import IMAGES

    torch.set_num_threads(1)
    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=2)
    with torch.no_grad():
        model.text.lm_head.bias[TINY.tokens.coord_id] += 8.0
    tokenizer = build_tokenizer(vocab_size=TINY.text.vocab_size)
    requests = [(i % 2, "point", 2) for i in range(9)]  # two images, nine rows: a batch bucket of 16
    outputs = {}
    for pipelined, grouping in ((True, "auto"), (False, "auto"), (True, "never")):
        engine = Engine(model, tokenizer, max_batch=16, pipelined=pipelined, prefix_cache_size=2, kernels="triton",
                        repeat_guard=False, max_prefill_cached=16, group_prefix=grouping)
        assert engine.runner.batch_bucket(9) >= kernels.GROUP_MIN_BATCH
        chosen = []
        group_rows = engine.runner.group_rows
        engine.runner.group_rows = lambda slot, batch: chosen.append(group_rows(slot, batch)) or chosen[-1]
        handles = [engine.submit(IMAGES[image], skill, "red circle", max_objects=n) for image, skill, n in requests]
        while engine.step():
            pass
        outputs[pipelined, grouping] = [h.result() for h in handles]
        # two images over a bucket of 16 rows: grouped steps under "auto", none under "never"
        assert any(chosen) if grouping == "auto" else chosen and not any(chosen), (grouping, chosen)
    want = {image: reference_generate(model, overlap_crop_image(load_image(IMAGES[image]), TINY.vision),
                                      prompt_ids(TINY.tokens, lambda t: tokenizer.encode(t).ids, "point", "red circle"),
                                      "point", 2, repeat_guard=False)
            for image in (0, 1)}
    assert all(out == [want[image] for image, _, _ in requests] for out in outputs.values()), (outputs, want)


def check_engine_matches_reference() -> None:
    """The pipelined and blocking engines with the fused kernels give the reference decoder's
    outputs (PyTorch path), request for request, on a batch that decodes to the object cap."""
    from engine.model.checkpoint import init_random_
    from engine.serving.engine import Engine
    from engine.model.moondream import MoondreamModel
    from engine.training.vocab import build_tokenizer
    from engine.model.image import load_image, overlap_crop_image
    from engine.model.reference import reference_generate
    from engine.serving.skills import prompt_ids
    from tests.test_engine import IMAGES

    torch.set_num_threads(1)
    assert kernels.available(torch.zeros(1), TINY.text.head_dim)
    model = MoondreamModel(TINY, device="cpu", dtype=torch.float32)
    init_random_(model, seed=0)
    with torch.no_grad():
        model.text.lm_head.bias[TINY.tokens.coord_id] += 8.0  # every request decodes to its cap
    tokenizer = build_tokenizer(vocab_size=TINY.text.vocab_size)
    requests = [(i % len(IMAGES), ["point", "detect"][i % 2], 2 + i % 3) for i in range(5)]
    outputs = {}
    for pipelined in (True, False):
        engine = Engine(model, tokenizer, max_batch=4, pipelined=pipelined, prefix_cache_size=0, kernels="triton",
                        repeat_guard=False)  # every request must run to its cap, repeats included
        engine.runner.static_prompts = True  # the padded prompt prefill (as CUDA runs it): prompt_attention
        handles = [engine.submit(IMAGES[image], skill, "red circle", max_objects=n) for image, skill, n in requests]
        while engine.step():
            pass
        outputs[pipelined] = [h.result() for h in handles]
    want = [reference_generate(model, overlap_crop_image(load_image(IMAGES[image]), TINY.vision),
                               prompt_ids(TINY.tokens, lambda t: tokenizer.encode(t).ids, skill, "red circle"), skill, n,
                               repeat_guard=False)
            for image, skill, n in requests]
    assert outputs[True] == outputs[False] == want, (outputs, want)
    assert all(len(w["points" if s == "point" else "objects"]) == n for w, (_, s, n) in zip(want, requests))
