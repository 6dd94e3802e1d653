"""The network on the `tiny` preset: batched prefill/decode, attention mask, rotary, region math,
and the reference point/detect procedure end to end (against the pipelined engine).

Comparisons run in float64 so "equal" can mean |a - b| < 1e-10 — except where a one-query decode
step is compared with a prefill: decode takes its softmax in fp32 (engine/layers.py), so 1e-5 there.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.model.checkpoint import load_model, random_state_dict
from engine.model.config import MOONDREAM2, TINY
from engine.serving.engine import Engine
from engine.model.image import overlap_crop_image
from engine.model.reference import reference_generate
from engine.model.region import coord_from_bin, coord_to_bin, fourier, size_from_bin, size_to_bin
from engine.serving.limits import tokens_per_object
from engine.serving.skills import ObjectBuilder, prompt_ids
from engine.model.text import KVCache

from .conftest import random_image, torch_threads, with_lm_bias, write_tiny_checkpoint


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with torch_threads(1):
        yield


P = TINY.prefix_len  # 197: BOS + 14×14 image tokens
D = TINY.text.dim
ATOL = 1e-10
F64 = torch.float64


def fresh_kv(rows: int, max_len: int = 256, seed: int = 0) -> KVCache:
    """A KV cache full of noise: positions a sequence has not written must never be read."""
    kv = KVCache.allocate(TINY.text, rows, max_len, device="cpu", dtype=F64)
    gen = torch.Generator().manual_seed(1000 + seed)
    kv.k.copy_(torch.randn(kv.k.shape, generator=gen, dtype=F64) * 3)
    kv.v.copy_(torch.randn(kv.v.shape, generator=gen, dtype=F64) * 3)
    return kv


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def close(a: torch.Tensor, b: torch.Tensor, atol: float = ATOL) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=0, atol=atol))


def test_model_dtype_and_device(tiny_model64):
    assert tiny_model64.dtype == F64 and tiny_model64.device.type == "cpu"


# ---------------------------------------------------------------------------------------------
# Batched prefill / decode
# ---------------------------------------------------------------------------------------------

STARTS = (P, P + 5, P + 11)  # three sequences, prompts starting at different positions
L = 7


def sequences() -> list[torch.Tensor]:
    return [randn(s + L, D, seed=s) for s in STARTS]


@torch.inference_mode()
def test_batched_prefill_with_different_starts_equals_per_sequence(tiny_model64):
    text = tiny_model64.text
    seqs = sequences()

    singles, single_kvs = [], []
    for i, (e, s) in enumerate(zip(seqs, STARTS)):
        kv = fresh_kv(1, seed=i)
        text.prefill(e[None, :s], kv, idx(0), idx(0))
        singles.append(text.prefill(e[None, s:], kv, idx(0), idx(s))[0])
        single_kvs.append(kv)

    kv = fresh_kv(4, seed=9)  # row 0 unused, like the engine's scratch row
    for i, (e, s) in enumerate(zip(seqs, STARTS)):
        text.prefill(e[None, :s], kv, idx(i + 1), idx(0))
    batched = text.prefill(torch.stack([e[s:] for e, s in zip(seqs, STARTS)]), kv, idx(1, 2, 3), idx(*STARTS))

    assert batched.shape == (3, L, D)
    for i, s in enumerate(STARTS):
        assert close(batched[i], singles[i]), f"sequence {i}"
        n = s + L
        assert close(kv.k[:, i + 1, :, :n], single_kvs[i].k[:, 0, :, :n])
        assert close(kv.v[:, i + 1, :, :n], single_kvs[i].v[:, 0, :, :n])


@torch.inference_mode()
def test_batched_image_prefill_equals_per_sequence(tiny_model64):
    text = tiny_model64.text
    prefixes = [randn(P, D, seed=50 + i) for i in range(3)]
    singles = []
    for i, e in enumerate(prefixes):
        singles.append(text.prefill(e[None], fresh_kv(1, seed=i), idx(0), idx(0))[0])
    batched = text.prefill(torch.stack(prefixes), fresh_kv(3, seed=7), idx(2, 0, 1), idx(0, 0, 0))
    for i in range(3):
        assert close(batched[i], singles[i])


@torch.inference_mode()
def test_unmasked_prefix_prefill_equals_the_masked_prefill(tiny_model64):
    """`prefill_prefix` (no mask, the block's own keys) writes the same KV and hidden states as
    the general masked `prefill` at start 0, for every row of a batch."""
    text = tiny_model64.text
    prefixes = torch.stack([randn(P, D, seed=70 + i) for i in range(3)])
    kv_masked, kv_flash = fresh_kv(4, seed=3), fresh_kv(4, seed=3)
    masked = text.prefill(prefixes, kv_masked, idx(3, 1, 2), idx(0, 0, 0))
    flash = text.prefill_prefix(prefixes, kv_flash, idx(3, 1, 2))
    assert close(flash, masked)
    assert close(kv_flash.k, kv_masked.k) and close(kv_flash.v, kv_masked.v)
    with pytest.raises(ValueError, match="image prefix has"):
        text.prefill_prefix(torch.cat([prefixes, prefixes], 1), kv_flash, idx(3, 1, 2))


@torch.inference_mode()
def test_chunked_prefill_equals_one_shot_prefill(tiny_model64):
    text = tiny_model64.text
    e = sequences()[1]
    s = STARTS[1]
    whole = text.prefill(e[None], fresh_kv(1, seed=1), idx(0), idx(0))[0]
    kv = fresh_kv(1, seed=2)
    first = text.prefill(e[None, :P], kv, idx(0), idx(0))[0]
    middle = text.prefill(e[None, P:s], kv, idx(0), idx(P))[0]
    last = text.prefill(e[None, s:], kv, idx(0), idx(s))[0]
    assert close(torch.cat([first, middle, last]), whole)


@torch.inference_mode()
def test_batched_decode_at_different_positions_equals_one_at_a_time(tiny_model64):
    text = tiny_model64.text
    seqs = sequences()
    steps = [randn(len(STARTS), D, seed=200 + t) for t in range(4)]
    max_len = 256

    expected = []
    for i, (e, s) in enumerate(zip(seqs, STARTS)):
        kv = fresh_kv(1, max_len, seed=i)
        text.prefill(e[None, :s], kv, idx(0), idx(0))
        expected.append([text.decode(step[i][None], kv, idx(s + t), s + t + 1)[0] for t, step in enumerate(steps)])

    # Rows 0..2 hold the sequences; row 3 is padding parked on the scratch position.
    kv = fresh_kv(4, max_len, seed=5)
    for i, (e, s) in enumerate(zip(seqs, STARTS)):
        text.prefill(e[None, :s], kv, idx(i), idx(0))
    for t, step in enumerate(steps):
        embeds = torch.cat([step, randn(1, D, seed=300 + t)])
        positions = idx(*(s + t for s in STARTS), max_len - 1)
        attn_len = 256 if t % 2 else max(STARTS) + t + 1  # a length bucket or the exact length
        out = text.decode(embeds, kv, positions, attn_len)
        assert out.shape == (4, D)
        for i in range(len(STARTS)):
            assert close(out[i], expected[i][t]), f"row {i}, step {t}"


@torch.inference_mode()
def test_decode_steps_equal_prefill_of_the_same_tokens(tiny_model64):
    text = tiny_model64.text
    e = sequences()[0]
    s = STARTS[0]
    kv = fresh_kv(1, seed=3)
    text.prefill(e[None, :s], kv, idx(0), idx(0))
    decoded = torch.stack([text.decode(e[s + t][None], kv, idx(s + t), 256)[0] for t in range(L)])
    prefilled = text.prefill(e[None], fresh_kv(1, seed=4), idx(0), idx(0))[0, s:]
    # The one-query decode path takes its softmax in fp32 (engine/layers.py: decode_attention), so
    # against the fp64 prefill this agrees to fp32 precision, not to 1e-10.
    assert close(decoded, prefilled, atol=1e-5)


@torch.inference_mode()
def test_prefill_past_the_row_is_refused(tiny_model64):
    with pytest.raises(ValueError, match="beyond the KV row length"):
        tiny_model64.text.prefill(randn(1, 20, D, seed=0), fresh_kv(1, max_len=20), idx(0), idx(0))


def test_kv_cache_longer_than_context_is_refused():
    with pytest.raises(ValueError, match="exceeds the model context"):
        KVCache.allocate(TINY.text, 1, TINY.text.max_context + 1, device="cpu", dtype=F64)


# ---------------------------------------------------------------------------------------------
# Attention mask: bidirectional image prefix, causal prompt
# ---------------------------------------------------------------------------------------------

@torch.inference_mode()
def _run_all(model, embeds: torch.Tensor) -> torch.Tensor:
    return model.text.prefill(embeds[None], fresh_kv(1), idx(0), idx(0))[0]


def test_image_prefix_is_bidirectional(tiny_model64):
    e = randn(P + 6, D, seed=11)
    base = _run_all(tiny_model64, e)
    changed = e.clone()
    changed[P - 10] = randn(D, seed=99)  # a late image token (not a constant shift: LayerNorm removes those)
    out = _run_all(tiny_model64, changed)
    diff = (out - base).abs().amax(-1)
    assert (diff[: P - 10] > 1e-6).all(), "earlier prefix positions must see the later image token"
    assert (diff[P:] > 1e-6).all(), "the prompt sees the whole prefix"


def test_prompt_positions_are_causal(tiny_model64):
    e = randn(P + 6, D, seed=12)
    base = _run_all(tiny_model64, e)
    changed = e.clone()
    changed[P + 3] = randn(D, seed=98)  # the fourth prompt token
    out = _run_all(tiny_model64, changed)
    diff = (out - base).abs().amax(-1)
    assert (diff[: P + 3] == 0).all(), "no earlier position (prefix or prompt) may see a later prompt token"
    assert (diff[P + 3:] > 1e-6).all()


def test_bos_token_is_part_of_the_bidirectional_prefix(tiny_model64):
    e = randn(P + 2, D, seed=13)
    base = _run_all(tiny_model64, e)
    changed = e.clone()
    changed[P - 1] = randn(D, seed=97)  # the last image token changes BOS's hidden state
    assert (_run_all(tiny_model64, changed)[0] - base[0]).abs().max() > 1e-6


@torch.inference_mode()
def test_encode_image_prefix_layout(tiny_model64, small_image):
    crops = overlap_crop_image(random_image(1, 230, 300), TINY.vision)
    assert crops.tiling == (3, 4) and crops.n_crops == 13
    prefix = tiny_model64.encode_image(crops)
    assert prefix.shape == (1, P, D) and prefix.dtype == F64
    assert torch.equal(prefix[0, 0], tiny_model64.text.wte[TINY.tokens.bos_id])
    other = tiny_model64.encode_image(overlap_crop_image(small_image, TINY.vision))
    assert torch.equal(other[0, 0], prefix[0, 0]) and not torch.allclose(other[0, 1:], prefix[0, 1:])


# ---------------------------------------------------------------------------------------------
# Partial rotary embedding
# ---------------------------------------------------------------------------------------------

@torch.inference_mode()
def _layer0_keys(model, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cached layer-0 keys [H, n, hd] after prefilling `e` from position 0, raw projected keys [H, n, hd])."""
    cfg, text = TINY.text, model.text
    n = e.shape[0]
    kv = fresh_kv(1)
    text.prefill(e[None], kv, idx(0), idx(0))
    block = text.blocks[0]
    raw = block.attn.qkv(block.ln(e)).view(n, 3, cfg.n_heads, cfg.head_dim)[:, 1].transpose(0, 1)
    return kv.k[0, 0, :, :n].clone(), raw


def test_partial_rotary_leaves_dims_beyond_rotary_dims_unrotated(tiny_model64):
    """Layer-0 keys in the cache: dims ≥ rotary_dims are the raw projection, the rest rotated (§6.2)."""
    cfg = TINY.text
    r, half = cfg.rotary_dims, cfg.rotary_dims // 2
    n = P + 4
    cached, raw = _layer0_keys(tiny_model64, randn(n, D, seed=41))
    assert torch.equal(cached[..., r:], raw[..., r:])
    # Position 0 is the identity (up to the fp32 rotary tables); later positions are rotated.
    assert close(cached[:, 0], raw[:, 0], atol=1e-6)
    assert (cached[:, 1:, :r] - raw[:, 1:, :r]).abs().amax() > 1e-3
    # (raw[j], raw[j + half]) is one complex number rotated by p·θ_j, θ_j = theta^(-2j/r); the pair is
    # stored either as halves (NeoX) or interleaved (the reference); both give the same scores.
    positions = torch.arange(n, dtype=F64)[:, None]
    theta = cfg.rope_theta ** (-2 * torch.arange(half, dtype=F64) / r)
    z = torch.complex(raw[..., :half], raw[..., half:r]) * torch.exp(1j * positions * theta)
    halves = torch.cat([z.real, z.imag], -1)
    interleaved = torch.stack([z.real, z.imag], -1).flatten(-2)
    assert close(cached[..., :r], halves, atol=1e-5) or close(cached[..., :r], interleaved, atol=1e-5)
    # A rotation: the norm of every rotated head slice is kept.
    assert close(cached[..., :r].norm(dim=-1), raw[..., :r].norm(dim=-1), atol=1e-5)


def test_rotary_scores_depend_only_on_relative_position(tiny_model64):
    u, w = randn(D, seed=61), randn(D, seed=62)
    e = randn(P + 8, D, seed=63)
    for offset in range(0, 8, 2):
        e[P + offset], e[P + offset + 1] = u, w  # the same pair of tokens, shifted by 2 each time
    cached, _ = _layer0_keys(tiny_model64, e)

    def score(a: int, b: int) -> torch.Tensor:  # per-head dot products of two cached keys
        return (cached[:, P + a] * cached[:, P + b]).sum(-1)

    assert close(score(0, 1), score(2, 3), atol=1e-6) and close(score(0, 1), score(6, 7), atol=1e-6)
    assert close(score(0, 3), score(4, 7), atol=1e-6)
    assert not close(score(0, 1), score(0, 3), atol=1e-3)


# ---------------------------------------------------------------------------------------------
# Region heads: bins and Fourier features
# ---------------------------------------------------------------------------------------------

BINS = 1024


def test_coord_bins_are_bin_over_1024():
    bins = torch.arange(BINS)
    values = coord_from_bin(bins, BINS)
    assert values[0] == 0 and values[512] == 0.5 and values[-1] == 1023 / 1024
    assert torch.equal(values.double(), bins.double() / 1024)
    assert torch.equal(coord_to_bin(values, BINS), bins)
    assert coord_to_bin(torch.tensor([-0.5, 1.0, 7.0]), BINS).tolist() == [0, 1023, 1023]


def test_size_bins_are_log_scale():
    bins = torch.arange(BINS)
    sizes = size_from_bin(bins, BINS)
    expected = torch.exp2(bins.double() / 1023 * 10 - 10)
    assert torch.allclose(sizes.double(), expected, rtol=1e-6, atol=0)
    assert sizes[0] == 2.0**-10 and sizes[-1] == 1.0
    assert math.isclose(float(sizes[1023 // 2 + 1]), 2 ** ((512 / 1023) * 10 - 10), rel_tol=1e-6)
    assert (sizes[1:] > sizes[:-1]).all()
    assert torch.equal(size_to_bin(sizes, BINS), bins)  # size_to_bin inverts size_from_bin
    assert size_to_bin(torch.tensor([0.0, 1e-9, 2.0**-10, 1.0, 5.0]), BINS).tolist() == [0, 0, 0, 1023, 1023]


@given(st.floats(min_value=2.0**-10, max_value=1.0))
@settings(max_examples=200, deadline=None)
def test_size_to_bin_picks_the_nearest_log_bin(size):
    b = int(size_to_bin(torch.tensor([size], dtype=F64), BINS))
    exact = (math.log2(size) + 10) / 10 * 1023
    assert abs(b - exact) <= 0.5 + 1e-9


@torch.inference_mode()
def test_region_decoders_take_argmax_bins(tiny_model64):
    region = tiny_model64.region
    h = randn(5, D, seed=51)
    coords = region.decode_coord(h)
    assert coords.shape == (5, 1)
    assert torch.equal(coords[:, 0].double(), region.coord_decoder(h).argmax(-1).double() / 1024)
    sizes = region.decode_size(h)
    assert sizes.shape == (5, 2)
    logits = region.size_decoder(h)
    w_bin, h_bin = logits[:, :1024].argmax(-1), logits[:, 1024:].argmax(-1)  # row 0 width, row 1 height
    assert torch.allclose(sizes[:, 0].double(), torch.exp2(w_bin.double() / 1023 * 10 - 10), rtol=1e-6)
    assert torch.allclose(sizes[:, 1].double(), torch.exp2(h_bin.double() / 1023 * 10 - 10), rtol=1e-6)


@torch.inference_mode()
def test_region_encoders_use_fourier_features(tiny_model64):
    region = tiny_model64.region
    v = torch.tensor([[0.0], [0.25], [0.999]], dtype=F64)
    angles = 2 * math.pi * v @ region.coord_features
    feats = torch.cat([angles.cos(), angles.sin()], -1)
    assert feats.shape == (3, TINY.region.coord_feat_dim)
    assert close(fourier(v, region.coord_features), feats, atol=1e-12)
    assert close(region.encode_coord(v), region.coord_encoder(feats), atol=1e-12)
    wh = torch.tensor([[0.5, 0.125]], dtype=F64)
    angles = 2 * math.pi * wh @ region.size_features
    expected = region.size_encoder(torch.cat([angles.cos(), angles.sin()], -1))
    assert region.encode_size(wh).shape == (1, D)
    assert close(region.encode_size(wh), expected, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# ObjectBuilder: boxes are centre ± size / 2, clamped to [0, 1]
# ---------------------------------------------------------------------------------------------

def test_box_is_centre_plus_minus_half_size():
    b = ObjectBuilder("detect")
    assert b.add_coord(0.5) is None and b.add_coord(0.25) is None
    box = b.add_size(0.2, 0.1)
    assert box == pytest.approx({"x_min": 0.4, "y_min": 0.2, "x_max": 0.6, "y_max": 0.3, "score": 1.0}, abs=1e-12)
    assert b.result() == {"objects": [box]}


def test_box_is_clamped_to_the_image():
    b = ObjectBuilder("detect")
    b.add_coord(0.05)
    b.add_coord(0.9)
    assert b.add_size(0.5, 1.0) == pytest.approx({"x_min": 0.0, "y_min": 0.4, "x_max": 0.3, "y_max": 1.0, "score": 1.0})
    b.add_coord(0.0)
    b.add_coord(0.0)
    assert b.add_size(1.0, 1.0) == {"x_min": 0.0, "y_min": 0.0, "x_max": 0.5, "y_max": 0.5, "score": 1.0}
    assert len(b.result()["objects"]) == 2


def test_point_builder():
    b = ObjectBuilder("point")
    assert b.add_coord(0.125) is None
    assert b.add_coord(0.75) == {"x": 0.125, "y": 0.75, "score": 1.0}
    b.add_coord(0.0, p_token=0.8, p_bin=0.5)  # p(start) x geometric mean of the bins' probabilities
    b.add_coord(0.5, p_token=1.0, p_bin=0.5)
    assert b.result() == {"points": [{"x": 0.125, "y": 0.75, "score": 1.0}, {"x": 0.0, "y": 0.5, "score": 0.4}]}
    assert ObjectBuilder("point").result() == {"points": []}
    assert ObjectBuilder("detect").result() == {"objects": []}


@given(st.floats(0, 1023 / 1024), st.floats(0, 1023 / 1024), st.integers(0, 1023), st.integers(0, 1023))
@settings(max_examples=200, deadline=None)
def test_boxes_contain_their_centre_and_stay_in_the_image(x, y, wb, hb):
    w, h = (float(size_from_bin(torch.tensor(b), 1024)) for b in (wb, hb))
    b = ObjectBuilder("detect")
    b.add_coord(x)
    b.add_coord(y)
    box = b.add_size(w, h)
    assert 0 <= box["x_min"] <= x <= box["x_max"] <= 1
    assert 0 <= box["y_min"] <= y <= box["y_max"] <= 1
    assert box["x_max"] - box["x_min"] <= w + 1e-12 and box["y_max"] - box["y_min"] <= h + 1e-12
    if w / 2 <= x <= 1 - w / 2:  # unclamped: exactly the size
        assert math.isclose(box["x_max"] - box["x_min"], w, abs_tol=1e-12)


def test_prompt_layout():
    enc = {" red circle": [300, 301]}
    assert prompt_ids(TINY.tokens, enc.__getitem__, "detect", "red circle") == [1, 10, 2, 300, 301, 3]
    assert prompt_ids(TINY.tokens, enc.__getitem__, "point", "red circle") == [1, 11, 2, 300, 301, 3]
    assert prompt_ids(MOONDREAM2.tokens, enc.__getitem__, "detect", "red circle") == [1, 7235, 476, 2, 300, 301, 3]
    assert prompt_ids(MOONDREAM2.tokens, enc.__getitem__, "point", "red circle") == [1, 2581, 2, 300, 301, 3]
    assert (tokens_per_object("detect"), tokens_per_object("point")) == (3, 2)


# ---------------------------------------------------------------------------------------------
# Reference point/detect end to end, and the engine against it
# ---------------------------------------------------------------------------------------------

IMAGES = {"wide": random_image(0), "tiled": random_image(1, 230, 300)}  # tilings (1, 1) and (3, 4)
OBJECTS = ("red circle", "zebra crossing at night")  # 2 and 16 tokens: prompts of different lengths share a prefill
CASES = [(image, skill, obj) for image in IMAGES for skill in ("point", "detect") for obj in OBJECTS]


def run_reference(model, tokenizer, image: str, skill: str, obj: str, cap: int, guard: bool = True) -> dict:
    crops = overlap_crop_image(IMAGES[image], TINY.vision)
    prompt = prompt_ids(TINY.tokens, lambda s: tokenizer.encode(s).ids, skill, obj)
    return reference_generate(model, crops, prompt, skill, cap, repeat_guard=guard)


def run_engine(model, tokenizer, cases, cap: int, guard: bool = True, pipelined: bool = True) -> list[dict]:
    """All cases submitted at once (batched across KV rows), then collected."""
    engine = Engine(model, tokenizer, max_batch=4, repeat_guard=guard, pipelined=pipelined)
    handles = [engine.submit(IMAGES[image], skill, obj, max_objects=cap) for image, skill, obj in cases]
    results = [h.result() for h in handles]
    engine.run_until_idle()
    assert engine.pools()["rows_in_use"] == 0 and engine.pools()["running"] == 0
    return results


def objects_of(result: dict, skill: str) -> list[dict]:
    key = "points" if skill == "point" else "objects"
    assert list(result) == [key]
    return result[key]


def check_shape(result: dict, skill: str, cap: int) -> int:
    objs = objects_of(result, skill)
    assert len(objs) <= cap
    for o in objs:
        if skill == "point":
            assert list(o) == ["x", "y", "score"]
            for k, v in o.items():
                assert isinstance(v, float) and 0 <= v <= 1 and (k == "score" or (v < 1 and (v * 1024).is_integer()))
        else:
            assert list(o) == ["x_min", "y_min", "x_max", "y_max", "score"]
            assert all(isinstance(v, float) and 0 <= v <= 1 for v in o.values())
            assert o["x_min"] <= o["x_max"] and o["y_min"] <= o["y_max"]
            for lo, hi in (("x_min", "x_max"), ("y_min", "y_max")):
                if 0 < o[lo] and o[hi] < 1:  # unclamped side: the width is one of the size bins
                    size = o[hi] - o[lo]
                    b = int(size_to_bin(torch.tensor([size], dtype=F64), 1024))
                    assert math.isclose(float(size_from_bin(torch.tensor(b), 1024)), size, rel_tol=1e-5)
    return len(objs)


@pytest.fixture(scope="module")
def natural_models(tmp_path_factory, tokenizer):
    """Random tiny checkpoints, seed after seed, until some case finds nothing (EOS first) and some
    case hits the cap — and at least two seeds were tried.

    Returns (cap, {seed: (model, {case: result})}): only the untouched random weights decide.
    """
    cap = 4
    found: dict[int, tuple] = {}
    for seed in range(16):
        directory = write_tiny_checkpoint(tmp_path_factory.mktemp(f"seed{seed}"), random_state_dict(TINY, seed=seed),
                                          tokenizer)
        model = load_model(directory, dtype="fp64")
        found[seed] = (model, {case: run_reference(model, tokenizer, *case, cap) for case in CASES})
        counts = {len(objects_of(r, c[1])) for _, results in found.values() for c, r in results.items()}
        if {0, cap} <= counts and len(found) >= 2:
            break
    return cap, found


def test_reference_natural_random_checkpoints_find_nothing_or_hit_the_cap(natural_models):
    cap, found = natural_models
    counts = [check_shape(r, case[1], cap) for _, results in found.values() for case, r in results.items()]
    assert 0 in counts, "no random checkpoint stopped at once (EOS first)"
    assert cap in counts, "no random checkpoint ran up to max_objects"
    assert all(0 <= c <= cap for c in counts)


def test_engine_equals_reference_on_natural_checkpoints(natural_models, tokenizer):
    cap, found = natural_models
    for seed, (model, results) in found.items():
        assert run_engine(model, tokenizer, CASES, cap) == [results[c] for c in CASES], f"seed {seed}"


@pytest.fixture(scope="module")
def eager_model(eager_ckpt):
    return load_model(eager_ckpt, dtype="fp64")


@pytest.fixture(scope="module")
def mute_model(mute_ckpt):
    return load_model(mute_ckpt, dtype="fp64")


@pytest.mark.parametrize("cap", [1, 3, 7])
def test_never_eos_hits_max_objects_exactly(eager_model, tokenizer, cap):
    cases = CASES[:4] if cap != 3 else CASES
    expected = []
    for case in cases:
        result = run_reference(eager_model, tokenizer, *case, cap, guard=False)
        assert check_shape(result, case[1], cap) == cap, case
        expected.append(result)
    assert run_engine(eager_model, tokenizer, cases, cap, guard=False) == expected


def test_repetition_guard_stops_at_a_duplicate_identically(eager_model, tokenizer):
    """The never-EOS checkpoint repeats itself: with the guard every answer ends before the first
    near-duplicate (the unguarded answer's prefix up to it), the same in the reference decoder,
    the pipelined and the blocking engine."""
    from engine.serving.skills import is_duplicate

    cap, stopped = 40, 0
    guarded = [run_reference(eager_model, tokenizer, *case, cap) for case in CASES]
    for case, result in zip(CASES, guarded):
        objs = objects_of(result, case[1])
        assert not any(is_duplicate(a, b) for i, a in enumerate(objs) for b in objs[:i])
        full = objects_of(run_reference(eager_model, tokenizer, *case, cap, guard=False), case[1])
        first_dup = next((i for i, a in enumerate(full) if any(is_duplicate(a, b) for b in full[:i])), len(full))
        assert objs == full[:first_dup]
        stopped += first_dup < cap
    assert stopped >= len(CASES) // 2, "the guard never fired on the repeating checkpoint"
    assert run_engine(eager_model, tokenizer, CASES, cap) == guarded
    assert run_engine(eager_model, tokenizer, CASES, cap, pipelined=False) == guarded


def test_eos_first_finds_nothing(mute_model, tokenizer):
    cases = CASES[:4]
    expected = [{"points": []} if skill == "point" else {"objects": []} for _, skill, _ in cases]
    assert [run_reference(mute_model, tokenizer, *c, 5) for c in cases] == expected
    assert run_engine(mute_model, tokenizer, cases, 5) == expected


def test_more_objects_extend_fewer(eager_model, tokenizer):
    # Greedy decoding: the first k objects do not depend on the cap.
    for case in CASES[:2]:
        short = objects_of(run_reference(eager_model, tokenizer, *case, 2, guard=False), case[1])
        long = objects_of(run_reference(eager_model, tokenizer, *case, 5, guard=False), case[1])
        assert long[:2] == short


@pytest.fixture(scope="module")
def sharp_model(tmp_path_factory, tokenizer):
    """Random weights 10× larger than usual (std 0.2), so attention, positions and context visibly
    move the argmax bins (with std 0.02 a shifted position or a wrong KV row can leave every output
    unchanged); the coord bias keeps every request running to max_objects."""
    state = with_lm_bias(random_state_dict(TINY, seed=0, std=0.2), coord=40.0)
    return load_model(write_tiny_checkpoint(tmp_path_factory.mktemp("sharp"), state, tokenizer), dtype="fp64")


def test_engine_equals_reference_on_a_context_sensitive_checkpoint(sharp_model, tokenizer):
    cap = 4
    expected = [run_reference(sharp_model, tokenizer, *case, cap, guard=False) for case in CASES]
    for case, result in zip(CASES, expected):
        assert check_shape(result, case[1], cap) == cap
    # The outputs depend on the image and on the skill's context, not just on the weights.
    by_case = dict(zip(CASES, expected))
    assert by_case[("wide", "detect", OBJECTS[1])] != by_case[("tiled", "detect", OBJECTS[1])]
    assert by_case[("wide", "point", OBJECTS[1])] != by_case[("tiled", "point", OBJECTS[1])]
    assert run_engine(sharp_model, tokenizer, CASES, cap, guard=False) == expected


@torch.inference_mode()
@pytest.mark.parametrize("skill", ["point", "detect"])
def test_reference_follows_the_documented_sequence(sharp_model, tokenizer, skill, monkeypatch):
    """Every hidden state the reference hands to a region head equals a one-shot forward of the
    whole sequence so far (§11, §12.1): [BOS, image] + prompt ids + one slot per decoded value,
    the slot holding coord_encoder(F(x)) / coord_encoder(F(y)) / size_encoder(F(w, h))."""
    model = sharp_model
    region, text = model.region, model.text
    decode = {"coord": region.decode_coord_p, "size": region.decode_size_p}
    seen: list[tuple[str, torch.Tensor]] = []

    def spy(kind):
        def record(hidden):
            seen.append((kind, hidden.clone()))
            return decode[kind](hidden)
        return record

    monkeypatch.setattr(region, "decode_coord_p", spy("coord"))
    monkeypatch.setattr(region, "decode_size_p", spy("size"))
    crops = overlap_crop_image(IMAGES["tiled"], TINY.vision)
    prompt = prompt_ids(TINY.tokens, lambda s: tokenizer.encode(s).ids, skill, "red circle")
    result = reference_generate(model, crops, prompt, skill, 2)

    per_object = ["coord", "coord"] + (["size"] if skill == "detect" else [])
    assert [kind for kind, _ in seen] == per_object * 2
    seq = torch.cat([model.encode_image(crops)[0], text.wte[torch.tensor(prompt)]])
    builder = ObjectBuilder(skill)
    for kind, hidden in seen:
        full = text.prefill(seq[None], fresh_kv(1, max_len=P + 32), idx(0), idx(0))[0, -1]
        # decode steps take their softmax in fp32, hence 1e-5 rather than 1e-10
        assert close(hidden[0], full, atol=1e-5), f"{kind} slot at position {seq.shape[0] - 1}"
        if kind == "coord":
            value, _ = decode["coord"](full)
            builder.add_coord(float(value))
            seq = torch.cat([seq, region.encode_coord(value)[None]])
        else:
            wh, _ = decode["size"](full)
            builder.add_size(float(wh[0]), float(wh[1]))
            seq = torch.cat([seq, region.encode_size(wh)[None]])
    unscored = {k: [{f: v for f, v in o.items() if f != "score"} for o in items] for k, items in result.items()}
    assert unscored == {k: [{f: v for f, v in o.items() if f != "score"} for o in items]
                        for k, items in builder.result().items()}


def test_fused_projections_hold_the_weights_once_and_change_no_output():
    """TextModel.fuse_projections re-homes qkv+fc1 and proj+fc2 in two matrices for the fused decode
    step; the parameters stay the same objects with the same values (views now), so the state dict,
    the PyTorch decode path and the reference decoder see exactly what they saw."""
    from engine.model.moondream import MoondreamModel
    from engine.model.checkpoint import init_random_

    model = MoondreamModel(TINY, device="cpu", dtype=F64)
    init_random_(model, seed=7)
    text = model.text
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = {name: p for name, p in model.named_parameters()}
    seqs, s = sequences(), STARTS[0]
    embeds = randn(1, D, seed=11)

    def one_step():
        kv = fresh_kv(1, 256, seed=12)
        with torch.inference_mode():
            text.prefill(seqs[0][None, :s], kv, idx(0), idx(0))
            return text.decode(embeds, kv, idx(s), 256, kernels="torch")

    want = one_step()
    text.fuse_projections()
    text.fuse_projections()  # idempotent
    assert {name: p for name, p in model.named_parameters()} == params  # same objects
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    block = text.blocks[0]
    f = block.fused
    d, n = D, block.attn.qkv.weight.shape[0]
    assert f.w_in.shape == (n + block.mlp.fc1.weight.shape[0], d) and f.w_out.shape == (d, d + block.mlp.fc2.weight.shape[1])
    # held once: the parameters are views into the fused matrices
    assert block.attn.qkv.weight.data_ptr() == f.w_in.data_ptr()
    assert block.mlp.fc1.weight.data_ptr() == f.w_in[n:].data_ptr()
    assert block.attn.proj.weight.data_ptr() == f.w_out.data_ptr()
    assert block.mlp.fc2.weight.data_ptr() == f.w_out[:, d:].data_ptr()
    assert torch.equal(one_step(), want)
    # one GEMM over [attention | GELU(fc1)] is the sum of the two projections
    a, g = randn(3, d, seed=13), randn(3, f.w_out.shape[1] - d, seed=14)
    assert close(torch.cat([a, g], 1) @ f.w_out.t() + f.b_proj + f.b_fc2,
                 block.attn.proj(a) + block.mlp.fc2(g))


@torch.inference_mode()
def test_one_image_encoding_for_the_captured_prefill_equals_encode_images(tiny_model64):
    """`encode_crops_of_one` (the runner's captured single-image prefill: device crops, slices only)
    gives exactly `encode_images`' embeddings, for a tiled image and a one-crop image."""
    for seed, (h, w) in enumerate([(300, 500), (90, 80)]):
        crops = overlap_crop_image(random_image(seed, h, w), TINY.vision)
        want = tiny_model64.encode_images([crops])
        got = tiny_model64.encode_crops_of_one(torch.from_numpy(crops.crops), crops.tiling)
        assert got.shape == want.shape == (1, P, D) and torch.equal(got, want)
