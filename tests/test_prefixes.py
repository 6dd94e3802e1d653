"""The shared image prefix: `PrefixSlots` (which slot holds which image) and the model reading a
row's prefix from its slot (`SharedPrefix`), against rows that hold the prefix themselves (the
fused kernels' twin of this check runs under Triton's interpreter: tests/test_kernels.py)."""

from __future__ import annotations

import pytest
import torch

from engine.model.checkpoint import init_random_
from engine.model.config import TINY
from engine.model.moondream import MoondreamModel
from engine.model.text import KVCache, SharedPrefix
from engine.serving.prefixes import PrefixSlots

F64 = torch.float64


def test_slots_are_shared_while_referenced_then_cached_up_to_capacity_least_recent_first():
    slots = PrefixSlots(slots=3, capacity=1)
    a = slots.acquire("a")
    assert slots.get("a") == a and "a" in slots and slots.get("b") is None
    slots.ref(a)                       # a second request for the same image reads the same slot
    b = slots.acquire("b")
    assert b != a and len(slots) == 2
    slots.unref(a)
    slots.unref(a)                     # image a idle: cached (capacity 1)
    assert slots.get("a") == a
    slots.unref(b)                     # image b idle too: a, the least recent, goes
    assert "a" not in slots and slots.get("b") == b
    c, d = slots.acquire("c"), slots.acquire("d")   # a's slot is free again; b's is taken only when needed
    assert {c, d} == {a, 3 - a - b} and "b" in slots
    slots.ref(slots.get("b"))
    with pytest.raises(RuntimeError, match="every slot is read"):
        slots.acquire("e")
    with pytest.raises(ValueError, match="already has a prefix slot"):
        slots.acquire("c")


def test_a_new_image_evicts_the_least_recently_used_idle_prefix_not_a_referenced_one():
    slots = PrefixSlots(slots=2, capacity=2)
    a, b = slots.acquire("a"), slots.acquire("b")
    slots.unref(a)
    slots.unref(b)
    slots.get("a")                     # a used last: b is the one to go
    slots.ref(a)
    c = slots.acquire("c")
    assert c == b and "b" not in slots and slots.get("a") == a


def test_rows_reading_their_prefix_from_shared_slots_match_rows_that_hold_it():
    model = init_random_(MoondreamModel(TINY, device="cpu", dtype=F64), seed=3)
    text, plen = model.text, TINY.prefix_len
    gen = torch.Generator().manual_seed(4)
    rows, max_len = 3, plen + 40
    own = KVCache.allocate(TINY.text, rows, max_len, device="cpu", dtype=F64)
    own.k.copy_(torch.randn(own.k.shape, generator=gen, dtype=F64))
    own.v.copy_(torch.randn(own.v.shape, generator=gen, dtype=F64))
    shared = SharedPrefix.allocate(TINY.text, 2, plen, rows, device="cpu", dtype=F64)
    shared.k.copy_(torch.randn(shared.k.shape, generator=gen, dtype=F64))
    shared.v.copy_(torch.randn(shared.v.shape, generator=gen, dtype=F64))
    shared.slots.copy_(torch.tensor([1, 0, 1]))
    split = KVCache(own.k.clone(), own.v.clone())
    split.k[:, :, :, :plen] = float("nan")  # never read: the rows' prefix positions are unused
    split.v[:, :, :, :plen] = float("nan")
    own.k[:, :, :, :plen] = shared.k[:, shared.slots]
    own.v[:, :, :, :plen] = shared.v[:, shared.slots]
    with torch.inference_mode():
        prompt = torch.randn(3, 5, TINY.text.dim, generator=gen, dtype=F64)
        start = torch.full((3,), plen)
        want = text.prefill(prompt, own, torch.arange(3), start)
        got = text.prefill(prompt, split, torch.arange(3), start, prefix=shared)
        assert torch.allclose(got, want, rtol=0, atol=1e-10)
        token = torch.randn(3, TINY.text.dim, generator=gen, dtype=F64)
        positions = torch.tensor([plen + 5, plen + 5, plen + 5])
        want = text.decode(token, own, positions, plen + 6, kernels="torch")
        got = text.decode(token, split, positions, plen + 6, kernels="torch", prefix=shared)
        assert torch.allclose(got, want, rtol=0, atol=1e-10)
