"""The plain, blocking Moondream procedures, one request at a time: point/detect (Moondream 2
§12.1) and greedy text answers under a grammar (query/caption, §14 with argmax).

It is the correctness oracle for the pipelined engine, so it is written independently of
the engine's grammar machinery. One choice differs from the reference code: whether another
object follows is decided between the coord and EOS logits only (Kestrel's rule, §15.4), so
that every output conforms to the skill's grammar; EOS wins a tie, as in a masked argmax.
"""

from __future__ import annotations

from typing import Callable

import torch

from engine.kernels import KernelChoice
from engine.model.image import OverlapCrops
from engine.model.moondream import MoondreamModel
from engine.model.region import more_probability
from engine.model.text import KVCache
from engine.serving.limits import kv_positions
from engine.serving.skills import ObjectBuilder


@torch.inference_mode()
def reference_generate(model: MoondreamModel, crops: OverlapCrops, prompt: list[int], skill: str,
                       max_objects: int, kernels: KernelChoice = "torch", repeat_guard: bool = True,
                       on_logits: Callable[[torch.Tensor], None] | None = None) -> dict:
    """Greedy point/detect of one request. `kernels` defaults to the PyTorch decode path: the
    oracle does not share the fused kernels it checks. `repeat_guard`: stop at a near-duplicate
    object, as the engine does (EngineConfig.repeat_guard). `on_logits` receives the logits
    ([vocab]) of each "another object?" decision: after the prompt, then after each object."""
    cfg = model.config
    tok, text, region = cfg.tokens, model.text, model.region
    need = kv_positions(cfg.prefix_len, len(prompt), skill, max_objects)
    kv = KVCache.allocate(cfg.text, rows=1, max_len=min(need, cfg.text.max_context), device=model.device, dtype=model.dtype)
    row = torch.zeros(1, dtype=torch.long, device=model.device)

    text.prefill(model.encode_image(crops), kv, row, torch.zeros(1, dtype=torch.long, device=model.device))
    prompt_embeds = model.embed_ids(torch.tensor(prompt, device=model.device))[None]
    hidden = text.prefill(prompt_embeds, kv, row, torch.full((1,), cfg.prefix_len, device=model.device))[:, -1]
    position = cfg.prefix_len + len(prompt)

    def step(embedding: torch.Tensor) -> torch.Tensor:
        nonlocal position
        h = text.decode(embedding.to(model.dtype), kv, torch.tensor([position], device=model.device), position + 1,
                      kernels)
        position += 1
        return h

    builder = ObjectBuilder(skill, guard=repeat_guard)
    while len(builder.objects) < max_objects and not builder.repeated:   # repetition guard: as the scheduler
        logits = text.logits(hidden)[0]
        if on_logits is not None:
            on_logits(logits)
        if not logits[tok.coord_id] > logits[tok.eos_id]:
            break
        p_more = more_probability(logits, tok.coord_id, tok.eos_id)
        x, px = region.decode_coord_p(hidden)
        builder.add_coord(float(x), float(p_more), float(px))
        hidden = step(region.encode_coord(x))
        y, py = region.decode_coord_p(hidden)
        builder.add_coord(float(y), 1.0, float(py))
        hidden = step(region.encode_coord(y))
        if skill == "detect":
            wh, pwh = region.decode_size_p(hidden)
            builder.add_size(float(wh[0, 0]), float(wh[0, 1]), float(pwh[0, 0]), float(pwh[0, 1]))
            hidden = step(region.encode_size(wh))
    return builder.result()


@torch.inference_mode()
def reference_answer(model: MoondreamModel, crops: OverlapCrops, prompt: list[int], grammar,
                     max_tokens: int, kernels: KernelChoice = "torch") -> tuple[list[int], bool]:
    """Greedy text answer of one request under `grammar` (an automaton: `initial_state`,
    `allowed_tokens(state)`, `advance`, `accepts_eos`, `must_stop`): at each step the logits
    outside the allowed set are -inf. Returns the answer's token ids (EOS excluded) and whether
    it ended where the grammar may end (False: cut by max_tokens inside the grammar)."""
    cfg = model.config
    text = model.text
    kv = KVCache.allocate(cfg.text, rows=1, max_len=cfg.prefix_len + len(prompt) + max_tokens + 1,
                          device=model.device, dtype=model.dtype)
    row = torch.zeros(1, dtype=torch.long, device=model.device)
    text.prefill(model.encode_image(crops), kv, row, torch.zeros(1, dtype=torch.long, device=model.device))
    prompt_embeds = model.embed_ids(torch.tensor(prompt, device=model.device))[None]
    hidden = text.prefill(prompt_embeds, kv, row, torch.full((1,), cfg.prefix_len, device=model.device))[:, -1]
    position = cfg.prefix_len + len(prompt)
    state, answer = grammar.initial_state, []
    while True:
        logits = text.logits(hidden)[0]
        allowed = torch.tensor(grammar.allowed_tokens(state).tolist(), dtype=torch.long, device=model.device)
        token = int(allowed[logits[allowed].argmax()])  # the first of equal maxima, as a masked argmax
        if token == cfg.tokens.eos_id:
            return answer, True
        state = grammar.advance(state, token)
        answer.append(token)
        if grammar.must_stop(state):
            return answer, True
        if len(answer) >= max_tokens:
            return answer, grammar.accepts_eos(state)
        embed = model.embed_ids(torch.tensor([token], device=model.device))
        hidden = text.decode(embed.to(model.dtype), kv, torch.tensor([position], device=model.device), position + 1,
                             kernels)
        position += 1
