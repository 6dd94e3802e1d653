"""Phi-style text decoder with a preallocated, row-addressed KV cache (Moondream 2 §6, §11).

KV layout: one *row* of `max_len` positions per live sequence, gpt-fast style. Row 0 is a
reserved scratch row; position `max_len - 1` of every row is a scratch position that no
sequence ever uses, so padding rows of a bucketed decode batch can write there harmlessly.

Two entry points, both batched:
- `prefill(embeds [B, L, D], rows, start)`: writes positions start..start+L-1 of each row.
  Rows may have different start positions (the prompt after an image prefix already there).
  `prefill_at` is its body with explicit positions and a static key range (graph-capturable).
- `decode(embeds [B, D], positions [B], attn_len)`: one token for KV rows 0..B-1, each at its
  own position; attention reads only the first `attn_len` positions (a length bucket), so the
  step's shapes are static and it can be captured in a CUDA graph.

Both take an optional `SharedPrefix`: the serving engine keeps each image prefix once, in a slot,
and a row reads positions 0..P-1 from its image's slot instead of its own (`prefill_prefix`
writes a new image straight into its slot). The reference decoder, training and the engine on the
PyTorch path (which copies the slot into the row once, at admission) keep the prefix in the row;
there `SharedPrefix.keys` is the fused kernels' oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine import kernels as _kernels
from engine.model.config import MoondreamConfig, TextConfig
from engine.model.layers import MLP, QKVAttentionWeights, attention, decode_attention


@dataclass
class SharedPrefix:
    """Image prefixes kept once and read by every KV row that shows the same image.

    k, v: [layers, slots, heads, P, head_dim] (P = the image prefix length); `slots` [rows] long:
    the slot whose prefix row r reads at positions 0..P-1 (its own positions there go unused).
    Rows of one image then read the same memory, which the GPU's L2 serves once for all of them.
    `as_cache()` views the slots as a KVCache (a slot in place of a row) for `prefill_prefix`."""

    k: torch.Tensor
    v: torch.Tensor
    slots: torch.Tensor
    groups: torch.Tensor | None = None  # the decode batch's rows grouped by slot (kernels.group_table), or None

    @classmethod
    def allocate(cls, cfg: TextConfig, slots: int, prefix_len: int, rows: int, *, device, dtype,
                 grouped: bool = False) -> SharedPrefix:
        """`grouped`: with a group table for the fused decode kernel, which its owner fills before
        every decode forward (the runner does, from the rows' slots it set)."""
        shape = (cfg.n_layers, slots, cfg.n_heads, prefix_len, cfg.head_dim)
        groups = torch.zeros(_kernels.group_table_size(rows), dtype=torch.long, device=device) if grouped else None
        return cls(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype),
                   torch.zeros(rows, dtype=torch.long, device=device), groups)

    @property
    def length(self) -> int:
        return self.k.shape[3]

    def as_cache(self) -> KVCache:
        return KVCache(self.k, self.v)

    def keys(self, layer: int, kl: torch.Tensor, vl: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor,
             end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The PyTorch path's keys and values 0..end-1 of `rows` (their `slots`): the prefix from the
        slots, the rest from the rows themselves. [len(rows), heads, end, head_dim] each."""
        p = self.length
        return (torch.cat([self.k[layer][slots], kl[rows, :, p:end]], 2),
                torch.cat([self.v[layer][slots], vl[rows, :, p:end]], 2))


@dataclass
class FusedProjections:
    """A parallel block's four projections as two GEMMs, for the fused decode step.

    Both the attention and the MLP read the same LayerNorm output and add to the same residual, so
    qkv and fc1 are one [3·D + F, D] matrix (`w_in`, bias `b_in`), and proj and fc2 one [D, D + F]
    matrix (`w_out`) applied to [attention | GELU(fc1)]; their two biases are added in the residual
    kernel. The block's own parameters become views into these (`TextModel.fuse_projections`), so
    the weights are held once and both paths read the same numbers."""

    w_in: torch.Tensor
    b_in: torch.Tensor
    w_out: torch.Tensor
    b_proj: torch.Tensor
    b_fc2: torch.Tensor


class TextBlock(nn.Module):
    """Parallel block: one LayerNorm feeds both attention and MLP."""

    def __init__(self, cfg: TextConfig, **factory) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(cfg.dim, **factory)
        self.attn = QKVAttentionWeights(cfg.dim, **factory)
        self.mlp = MLP(cfg.dim, cfg.ff_dim, **factory)
        self.fused: FusedProjections | None = None  # set by TextModel.fuse_projections

    @torch.no_grad()
    def fuse_projections(self) -> FusedProjections:
        """Re-home qkv+fc1 and proj+fc2 in two matrices (`FusedProjections`); the parameters stay the
        same objects, now views into them (`.data` is swapped), so state_dict keys, values and any
        reference to a parameter are unchanged. Idempotent."""
        if self.fused is None:
            qkv, proj, fc1, fc2 = self.attn.qkv, self.attn.proj, self.mlp.fc1, self.mlp.fc2
            d = proj.weight.shape[0]
            w_in, b_in = torch.cat([qkv.weight, fc1.weight]), torch.cat([qkv.bias, fc1.bias])
            w_out = torch.cat([proj.weight, fc2.weight], dim=1)
            n = qkv.weight.shape[0]
            qkv.weight.data, fc1.weight.data = w_in[:n], w_in[n:]
            qkv.bias.data, fc1.bias.data = b_in[:n], b_in[n:]
            proj.weight.data, fc2.weight.data = w_out[:, :d], w_out[:, d:]
            self.fused = FusedProjections(w_in, b_in, w_out, proj.bias, fc2.bias)
        return self.fused


@dataclass
class KVCache:
    """k, v: [layers, rows, heads, max_len, head_dim], allocated once."""

    k: torch.Tensor
    v: torch.Tensor

    @classmethod
    def allocate(cls, cfg: TextConfig, rows: int, max_len: int, *, device, dtype) -> KVCache:
        if max_len > cfg.max_context:
            raise ValueError(f"KV length {max_len} exceeds the model context {cfg.max_context}")
        shape = (cfg.n_layers, rows, cfg.n_heads, max_len, cfg.head_dim)
        return cls(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))

    @property
    def rows(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]


def rope_tables(cfg: TextConfig, max_len: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 tables [max_len, rotary_dims] for the partial rotary embedding in the
    `x·cos + swap(x)·sin` form: cos is [cos, cos]; sin is [-sin, sin] (NeoX halves)."""
    half = cfg.rotary_dims // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, device=device, dtype=torch.float32) * 2 / cfg.rotary_dims))
    angles = torch.outer(torch.arange(max_len, device=device, dtype=torch.float32), inv_freq)
    return torch.cat([angles.cos(), angles.cos()], -1), torch.cat([-angles.sin(), angles.sin()], -1)


def apply_rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dims: int) -> torch.Tensor:
    """Rotate the first `rotary_dims` of each head in place (NeoX halves); the rest pass through.

    Computed in fp32 (the tables are fp32 and promote the product), written back in x's dtype.
    The reference writes the rotated pair interleaved; since q and k get the same
    permutation, attention scores are identical — only the cached-key layout differs.
    x: [..., hd]; cos/sin: broadcastable to [..., rotary_dims]. Four kernels on a GPU.
    """
    half = rotary_dims // 2
    r = x[..., :rotary_dims]
    swapped = r.unflatten(-1, (2, half)).flip(-2).flatten(-2)
    r.copy_(torch.addcmul(r * cos, swapped, sin))
    return x


class TextModel(nn.Module):
    def __init__(self, config: MoondreamConfig, **factory) -> None:
        super().__init__()
        t = config.text
        self.cfg = t
        self.prefix_len = config.prefix_len
        self.wte = nn.Parameter(torch.zeros(t.vocab_size, t.dim, **factory))
        self.blocks = nn.ModuleList(TextBlock(t, **factory) for _ in range(t.n_layers))
        self.post_ln = nn.LayerNorm(t.dim, **factory)
        self.lm_head = nn.Linear(t.dim, t.vocab_size, **factory)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None

    def rope(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        # Built lazily (non-persistent): the checkpoint stores no tables.
        if self._rope is None or self._rope[0].device != torch.device(device):
            self._rope = rope_tables(self.cfg, self.cfg.max_context, device)
        return self._rope

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.post_ln(hidden))

    def fuse_projections(self) -> None:
        """Every block's projections as two GEMMs (`FusedProjections`), which the fused decode step
        reads. `ModelRunner` calls it when it runs the fused kernels, before any graph is captured; a
        fused decode of an unfused model calls it first. The weights are held once either way."""
        for block in self.blocks:
            block.fuse_projections()

    def rope_at(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for positions [B, L], shaped to broadcast over (q|k, head): [B, L, 1, 1, r]."""
        cos, sin = self.rope(pos.device)
        return cos[pos][:, :, None, None], sin[pos][:, :, None, None]

    def heads(self, block: TextBlock, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """h [B, L, D] → q, k, v [B, L, H, hd]; one rotary pass covers q and k.

        rope: cos/sin broadcastable to [B, L, 2, H, rotary_dims] (`rope_at` rows, or table rows
        [L, 1, 1, r]). Inference (prefill, the PyTorch decode path) and training use this one."""
        b, n, _ = h.shape
        t = self.cfg
        qkv = block.attn.qkv(h).view(b, n, 3, t.n_heads, t.head_dim)
        apply_rope_(qkv[:, :, :2], *rope, t.rotary_dims)
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]

    def prefill(self, embeds: torch.Tensor, kv: KVCache, rows: torch.Tensor, start: torch.Tensor,
                prefix: SharedPrefix | None = None) -> torch.Tensor:
        """Run B sequences of L new positions; returns the raw (pre-post_ln) hidden [B, L, D].

        rows, start: [B] long. Keys visible to query i of row b: positions ≤ start_b + i,
        plus the whole image prefix while the query itself lies inside it (bidirectional block).
        """
        n = embeds.shape[1]
        pos = start[:, None] + torch.arange(n, device=embeds.device)
        end = int((start + n).max())
        if end > kv.max_len - 1:
            raise ValueError(f"prefill reaches position {end}, beyond the KV row length {kv.max_len - 1}")
        return self.prefill_at(embeds, kv, rows, pos, end, prefix=prefix)

    def prefill_at(self, embeds: torch.Tensor, kv: KVCache, rows: torch.Tensor, pos: torch.Tensor,
                   end: int, kernels: _kernels.KernelChoice = "torch", prefix: SharedPrefix | None = None) -> torch.Tensor:
        """`prefill` with every token's position given (pos [B, L] long) and the keys read from
        each row limited to positions < `end`: static shapes, so it can be captured in a CUDA graph.

        A padding token sits at the scratch position `kv.max_len - 1` (its write lands there, its
        output is garbage); every real position must be < `end`. embeds [B, L, D] → hidden [B, L, D].
        `kernels` "auto"/"triton" reads each row's keys in place (`engine.kernels.prompt_attention`)
        where the fused kernels run and L is a power of two ≥ 16; that path is for prompts, whose
        real positions all lie after the image prefix. The default gathers the rows' keys.
        `prefix`: the rows read their image prefix from its slots (then every real position must lie
        after the prefix too).
        """
        b, n, _ = embeds.shape
        fused = n >= 16 and not n & (n - 1) and _kernels.use_fused(kernels, embeds, self.cfg.head_dim)
        if not fused:
            keys = torch.arange(end, device=embeds.device)
            visible = keys[None, None, :] <= pos[:, :, None]
            in_prefix = (pos[:, :, None] < self.prefix_len) & (keys[None, None, :] < self.prefix_len)
            mask = (visible | in_prefix)[:, None]  # [B, 1, L, end]
        else:  # the prompt kernel reads rows/pos by offset: copy views (the runner's) once, not per layer
            rows, pos = rows.contiguous(), pos.contiguous()
        x = embeds
        row_idx = rows[:, None].expand(b, n)
        rope = self.rope_at(pos)
        slots = None if prefix is None else prefix.slots[rows]
        for layer, block in enumerate(self.blocks):
            h = block.ln(x)
            q, k, v = self.heads(block, h, rope)
            kl, vl = kv.k[layer], kv.v[layer]
            kl[row_idx, :, pos] = k
            vl[row_idx, :, pos] = v
            if fused:
                shared = None if prefix is None else (prefix.k[layer], prefix.v[layer], slots)
                a = _kernels.prompt_attention(q, kl, vl, rows, pos, end, prefix=shared)  # [B, L, H·hd]
            else:
                keys, values = ((kl[rows, :, :end], vl[rows, :, :end]) if prefix is None
                                else prefix.keys(layer, kl, vl, rows, slots, end))
                a = attention(q.transpose(1, 2), keys, values, mask).transpose(1, 2).reshape(b, n, -1)
            x = x + block.attn.proj(a) + block.mlp(h)
        return x

    def prefill_prefix(self, embeds: torch.Tensor, kv: KVCache, rows: torch.Tensor,
                       kernels: _kernels.KernelChoice = "torch") -> torch.Tensor:
        """`prefill` of whole image prefixes (positions 0..L-1 of each row, L ≤ prefix_len).

        Inside the prefix attention is bidirectional, so no mask is needed: the block's own
        keys are its whole context and attention runs on a flash kernel (an explicit mask would
        force the memory-efficient one), with no gather of keys back from the cache.
        `kernels` "auto"/"triton": the fused kernels' layer where they run and the head count is a
        power of two (`_prefill_prefix_fused`).
        embeds [B, L, D], rows [B] long → raw hidden [B, L, D].
        """
        b, n, _ = embeds.shape
        if n > self.prefix_len:
            raise ValueError(f"prefill_prefix got {n} positions; the image prefix has {self.prefix_len}")
        heads = self.cfg.n_heads
        if _kernels.use_fused(kernels, embeds, self.cfg.head_dim) and not heads & (heads - 1):
            return self._prefill_prefix_fused(embeds, kv, rows)
        cos, sin = self.rope(embeds.device)
        rope = (cos[:n, None, None], sin[:n, None, None])  # [L, 1, 1, r]
        x = embeds
        for layer, block in enumerate(self.blocks):
            h = block.ln(x)
            q, k, v = (t.transpose(1, 2) for t in self.heads(block, h, rope))  # [B, H, L, hd] each
            kv.k[layer, rows, :, :n] = k
            kv.v[layer, rows, :, :n] = v
            a = attention(q, k, v)
            x = x + block.attn.proj(a.transpose(1, 2).reshape(b, n, -1)) + block.mlp(h)
        return x

    def _prefill_prefix_fused(self, embeds: torch.Tensor, kv: KVCache, rows: torch.Tensor) -> torch.Tensor:
        """`prefill_prefix` as the fused decode step runs a layer (`FusedProjections`), over all
        B·L tokens at once: [qkv | fc1] GEMM; rotary in place + K/V written to the rows + GELU
        (`rope_kv_prefix`); attention on the rotated q, k, v where they lie, written beside the
        GELU output (`bidirectional_attention`; SDPA and a copy in fp32); [proj | fc2] GEMM;
        residual + next LayerNorm. Five kernels a layer, against the PyTorch path's fifteen."""
        if self.blocks[0].fused is None:
            self.fuse_projections()
        cos, sin = self.rope(embeds.device)
        b, n, d = embeds.shape
        t = self.cfg
        x = embeds.reshape(b * n, d).contiguous()  # [B·L, D]
        h = self.blocks[0].ln(x)
        for layer, block in enumerate(self.blocks):
            f = block.fused
            y = torch.nn.functional.linear(h, f.w_in, f.b_in)  # [B·L, 3D + F]: q, k, v, fc1
            z = torch.empty(b * n, f.w_out.shape[1], device=x.device, dtype=x.dtype)  # [B·L, D + F]
            _kernels.rope_kv_prefix(y, cos, sin, rows, n, kv.k[layer], kv.v[layer], t.rotary_dims, gelu_out=z[:, d:])
            if x.dtype == torch.float32 and x.is_cuda:  # exact fp32 products run off the tensor cores: SDPA is ~30× faster
                q, k, v = y[:, : 3 * d].view(b, n, 3, t.n_heads, t.head_dim).unbind(2)  # [B, L, H, hd] each
                a = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # [B, H, L, hd]
                z[:, :d].view(b, n, t.n_heads, t.head_dim).copy_(a.transpose(1, 2))
            else:
                _kernels.bidirectional_attention(y, b, t.n_heads, out=z[:, :d])  # rotated q, k, v → z[:, :D]
            following = self.blocks[layer + 1].ln if layer + 1 < len(self.blocks) else None
            x, h = _kernels.residual_layernorm(x, torch.mm(z, f.w_out.t()), (f.b_proj, f.b_fc2), following)
        return x.view(b, n, d)

    def decode(self, embeds: torch.Tensor, kv: KVCache, positions: torch.Tensor, attn_len: int,
               kernels: _kernels.KernelChoice = "auto", prefix: SharedPrefix | None = None,
               grouped: bool = False) -> torch.Tensor:
        """One token for KV rows 0..B-1 at `positions` [B]; returns raw hidden [B, D].

        Static shapes for a given (B, attn_len): safe to capture in a CUDA graph. On CUDA the
        rotary/KV write and the attention are fused Triton kernels (`engine.kernels.decode`); this
        PyTorch body is the same computation, kept for the CPU and as their test oracle;
        `kernels` chooses between them (`engine.kernels.use_fused`). `prefix`: rows read their image
        prefix from its slots (`SharedPrefix`); `grouped` (fused kernels): once per group of rows of
        one slot, as `prefix.groups` (filled by the caller) lists them.
        """
        b = embeds.shape[0]
        t = self.cfg
        if _kernels.use_fused(kernels, embeds, t.head_dim):
            return self._decode_fused(embeds, kv, positions, attn_len, prefix, grouped)
        rows = torch.arange(b, device=embeds.device)
        visible = torch.arange(attn_len, device=embeds.device)[None, :] <= positions[:, None]
        bias = torch.zeros(b, attn_len, dtype=embeds.dtype, device=embeds.device).masked_fill_(~visible, float("-inf"))
        bias = bias[:, None, :, None].expand(b, t.n_heads, attn_len, 1).reshape(b * t.n_heads, attn_len, 1)
        x = embeds[:, None, :]
        rope = self.rope_at(positions[:, None])
        for layer, block in enumerate(self.blocks):
            h = block.ln(x)
            q, k, v = self.heads(block, h, rope)
            kl, vl = kv.k[layer], kv.v[layer]
            kl[rows, :, positions] = k[:, 0]
            vl[rows, :, positions] = v[:, 0]
            keys, values = ((kl[:b, :, :attn_len], vl[:b, :, :attn_len]) if prefix is None
                            else prefix.keys(layer, kl, vl, rows, prefix.slots[:b], attn_len))
            a = decode_attention(q.transpose(1, 2), keys, values, bias)
            x = x + block.attn.proj(a.reshape(b, 1, -1)) + block.mlp(h)
        return x[:, 0]

    def _decode_fused(self, embeds: torch.Tensor, kv: KVCache, positions: torch.Tensor, attn_len: int,
                      prefix: SharedPrefix | None, grouped: bool) -> torch.Tensor:
        """Five or six kernels a layer: [qkv | fc1] GEMM; rotary + K/V write + GELU and split-K
        attention (one launch for small batches, `rope_attention`), and the attention's merge, which
        writes beside the GELU output; [proj | fc2] GEMM; residual + next LayerNorm.
        For batches of 16-bit rows up to `SKINNY_MAX_ROWS` the GEMMs are `skinny_linear`, whose
        [proj | fc2] may leave fp32 partial sums that the residual kernel adds."""
        if self.blocks[0].fused is None:
            self.fuse_projections()
        cos, sin = self.rope(embeds.device)
        slots = None if prefix is None else prefix.slots[: embeds.shape[0]]  # rows 0..B-1
        b, d = embeds.shape
        x = embeds.contiguous()
        h = self.blocks[0].ln(x)
        skinny = _kernels.skinny_applies(x)  # the projections on the few-rows kernel (fp32 partials out of [proj | fc2])
        for layer, block in enumerate(self.blocks):
            f = block.fused
            kl, vl = kv.k[layer], kv.v[layer]
            y = (_kernels.skinny_linear(h, f.w_in, f.b_in) if skinny
                 else torch.nn.functional.linear(h, f.w_in, f.b_in))  # [B, 3D + F]: q, k, v, fc1
            z = torch.empty(b, f.w_out.shape[1], device=x.device, dtype=x.dtype)  # [B, D + F]: attention | GELU
            _kernels.rope_attention(y, cos, sin, positions, kl, vl, self.cfg.rotary_dims, attn_len,
                                    prefix=None if prefix is None else (prefix.k[layer], prefix.v[layer], slots),
                                    groups=prefix.groups if prefix is not None and grouped else None,
                                    gelu_out=z[:, d:], out=z[:, :d])
            # The residual adds (with both biases) and the next block's LayerNorm are one kernel.
            following = self.blocks[layer + 1].ln if layer + 1 < len(self.blocks) else None
            a = _kernels.skinny_linear(z, f.w_out) if skinny else torch.mm(z, f.w_out.t())  # [B, D] or [splits, B, D] fp32
            x, h = _kernels.residual_layernorm(x, a, (f.b_proj, f.b_fc2), following)
        return x
