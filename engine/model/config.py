"""Model configuration: one dataclass tree, two presets.

`moondream2` holds the exact dimensions of the official `vikhyatk/moondream2` release;
`tiny` is the same architecture shrunk for tests. A checkpoint directory may carry a
`config.json` whose keys override a preset (see `MoondreamConfig.from_dict`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class VisionConfig:
    dim: int = 1152
    n_layers: int = 27
    n_heads: int = 16
    ff_dim: int = 4304
    crop_size: int = 378
    patch_size: int = 14
    overlap_margin: int = 4  # in patches, per side
    max_crops: int = 12
    proj_inner_dim: int = 8192
    in_channels: int = 3

    @property
    def grid(self) -> int:
        return self.crop_size // self.patch_size

    @property
    def n_patches(self) -> int:
        return self.grid * self.grid

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.patch_size * self.patch_size


@dataclass(frozen=True)
class TextConfig:
    dim: int = 2048
    n_layers: int = 24
    n_heads: int = 32
    ff_dim: int = 8192
    vocab_size: int = 51200
    max_context: int = 2048
    rotary_dims: int = 32
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclass(frozen=True)
class RegionConfig:
    coord_feat_dim: int = 256
    coord_bins: int = 1024
    size_feat_dim: int = 512
    size_bins: int = 1024
    inner_dim: int = 8192


@dataclass(frozen=True)
class TokenConfig:
    """Special ids and prompt templates (ids that follow the image prefix).

    Defaults are Moondream 2's (starmie tokenizer, revision 2025-06-21): "<r0>detect<r1> obj<r2>",
    "<r0>query<r1>question<r2><r2>" (the answer id twice, as MD2 was trained), "<r0>caption<r1>
    short|normal|long<r2>". The small presets spell the same templates with the stand-in
    tokenizer's ids (`engine.training.vocab`)."""

    bos_id: int = 0
    eos_id: int = 0
    answer_id: int = 3
    coord_id: int = 5
    size_id: int = 6
    # The object text is encoded with a leading space and placed between prefix and suffix.
    detect_prefix: tuple[int, ...] = (1, 7235, 476, 2)
    point_prefix: tuple[int, ...] = (1, 2581, 2)
    prompt_suffix: tuple[int, ...] = (3,)
    # The question is encoded without a leading space and placed between prefix and suffix.
    query_prefix: tuple[int, ...] = (1, 15381, 2)
    query_suffix: tuple[int, ...] = (3, 3)
    # Whole caption prompts, one per length.
    caption_short: tuple[int, ...] = (1, 32708, 2, 12492, 3)
    caption_normal: tuple[int, ...] = (1, 32708, 2, 6382, 3)
    caption_long: tuple[int, ...] = (1, 32708, 2, 4059, 3)

    def template_ids(self) -> tuple[int, ...]:
        """Every id any template uses (for range checks)."""
        return (self.bos_id, self.eos_id, self.answer_id, self.coord_id, self.size_id, *self.detect_prefix,
                *self.point_prefix, *self.prompt_suffix, *self.query_prefix, *self.query_suffix,
                *self.caption_short, *self.caption_normal, *self.caption_long)


@dataclass(frozen=True)
class MoondreamConfig:
    vision: VisionConfig = field(default_factory=VisionConfig)
    text: TextConfig = field(default_factory=TextConfig)
    region: RegionConfig = field(default_factory=RegionConfig)
    tokens: TokenConfig = field(default_factory=TokenConfig)

    @property
    def prefix_len(self) -> int:
        """BOS + one embedding per image patch: the bidirectional attention block."""
        return 1 + self.vision.n_patches

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: MoondreamConfig | None = None) -> MoondreamConfig:
        """Overlay `data` (nested dicts by section) on `base`; unknown keys are an error."""
        base = base or MOONDREAM2
        sections = {}
        for f in dataclasses.fields(cls):
            current = getattr(base, f.name)
            overrides = data.get(f.name, {})
            if not isinstance(overrides, dict):
                raise ValueError(f"config section {f.name!r} must be an object, got {type(overrides).__name__}")
            known = {g.name: g for g in dataclasses.fields(current)}
            unknown = sorted(set(overrides) - set(known))
            if unknown:
                raise ValueError(f"config section {f.name!r} has unknown keys: {', '.join(unknown)}")
            fixed = {}
            for key, value in overrides.items():
                expected = type(getattr(current, key))
                if expected is tuple:
                    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
                        raise ValueError(f"config {f.name}.{key} must be a list of ints, got {value!r}")
                    value = tuple(value)
                elif expected is float:
                    if isinstance(value, bool) or not isinstance(value, (int, float)):
                        raise ValueError(f"config {f.name}.{key} must be a number, got {value!r}")
                    value = float(value)
                elif isinstance(value, bool) or not isinstance(value, expected):
                    raise ValueError(f"config {f.name}.{key} must be {expected.__name__}, got {value!r}")
                fixed[key] = value
            sections[f.name] = dataclasses.replace(current, **fixed)
        extra = sorted(set(data) - set(sections) - {"preset"})
        if extra:
            raise ValueError(f"config has unknown sections: {', '.join(extra)}")
        config = cls(**sections)
        config.validate()
        return config

    def validate(self) -> None:
        """Reject dimensions the architecture cannot run, before anything is allocated."""
        v, t, r = self.vision, self.text, self.region
        problems = []
        positive = {
            "vision.dim": v.dim, "vision.n_layers": v.n_layers, "vision.n_heads": v.n_heads,
            "vision.ff_dim": v.ff_dim, "vision.crop_size": v.crop_size, "vision.patch_size": v.patch_size,
            "vision.max_crops": v.max_crops, "vision.proj_inner_dim": v.proj_inner_dim,
            "text.dim": t.dim, "text.n_layers": t.n_layers, "text.n_heads": t.n_heads, "text.ff_dim": t.ff_dim,
            "text.vocab_size": t.vocab_size, "text.max_context": t.max_context,
            "region.coord_feat_dim": r.coord_feat_dim, "region.coord_bins": r.coord_bins,
            "region.size_feat_dim": r.size_feat_dim, "region.size_bins": r.size_bins,
            "region.inner_dim": r.inner_dim,
        }
        problems += [f"{k} must be positive (got {val})" for k, val in positive.items() if val <= 0]
        limits = {"vision.dim": (v.dim, 65536), "text.dim": (t.dim, 65536), "text.vocab_size": (t.vocab_size, 1 << 20),
                  "text.max_context": (t.max_context, 1 << 16), "vision.n_layers": (v.n_layers, 256),
                  "text.n_layers": (t.n_layers, 256), "vision.crop_size": (v.crop_size, 4096),
                  "vision.max_crops": (v.max_crops, 64), "vision.ff_dim": (v.ff_dim, 1 << 18),
                  "text.ff_dim": (t.ff_dim, 1 << 18), "vision.proj_inner_dim": (v.proj_inner_dim, 1 << 18),
                  "region.inner_dim": (r.inner_dim, 1 << 18), "vision.n_heads": (v.n_heads, 4096),
                  "text.n_heads": (t.n_heads, 4096), "region.coord_bins": (r.coord_bins, 1 << 16),
                  "region.size_bins": (r.size_bins, 1 << 16), "region.coord_feat_dim": (r.coord_feat_dim, 1 << 16),
                  "region.size_feat_dim": (r.size_feat_dim, 1 << 16)}
        problems += [f"{k} = {val} exceeds the limit {hi}" for k, (val, hi) in limits.items() if val > hi]
        if not problems:
            if v.dim % v.n_heads:
                problems.append(f"vision.dim {v.dim} is not divisible by vision.n_heads {v.n_heads}")
            if t.dim % t.n_heads:
                problems.append(f"text.dim {t.dim} is not divisible by text.n_heads {t.n_heads}")
            elif t.rotary_dims % 2 or not 0 < t.rotary_dims <= t.head_dim:
                problems.append(f"text.rotary_dims {t.rotary_dims} must be even and within the head dim {t.head_dim}")
            if v.in_channels != 3:
                problems.append(f"vision.in_channels must be 3 (images are RGB), got {v.in_channels}")
            if not (math.isfinite(t.rope_theta) and t.rope_theta > 0):
                problems.append(f"text.rope_theta must be a positive number, got {t.rope_theta}")
            if v.crop_size % v.patch_size:
                problems.append(f"vision.crop_size {v.crop_size} is not a multiple of vision.patch_size {v.patch_size}")
            elif not 0 <= 2 * v.overlap_margin < v.grid:
                problems.append(f"vision.overlap_margin {v.overlap_margin} leaves no tile interior in a {v.grid}-patch grid")
            if r.coord_feat_dim % 2 or r.size_feat_dim % 4:
                problems.append("region feature dims must be even (coord) and a multiple of 4 (size)")
            if self.prefix_len + 8 > t.max_context:
                problems.append(f"text.max_context {t.max_context} leaves no room after the {self.prefix_len}-token image prefix")
            bad = sorted({i for i in self.tokens.template_ids() if not 0 <= i < t.vocab_size})
            if bad:
                problems.append(f"token ids {bad} lie outside the vocabulary of {t.vocab_size}")
        if problems:
            raise ValueError("invalid model config: " + "; ".join(problems))


MOONDREAM2 = MoondreamConfig()

# The templates of the small presets in the stand-in tokenizer's ids (`engine.training.vocab`):
# 10 = "detect", 11 = "point", 367 = "query", 370 = "caption"; the caption lengths are the
# words' BPE spellings ("short" = 94 83 291 95, "normal" = 89 291 88 76 87, "long" = 87 277 82).
SMALL_TOKENS = TokenConfig(
    detect_prefix=(1, 10, 2), point_prefix=(1, 11, 2), query_prefix=(1, 367, 2),
    caption_short=(1, 370, 2, 94, 83, 291, 95, 3), caption_normal=(1, 370, 2, 89, 291, 88, 76, 87, 3),
    caption_long=(1, 370, 2, 87, 277, 82, 3),
)

# Same code, toy sizes: a 112-px crop of 8-px patches (14×14 grid, 197-token prefix).
TINY = MoondreamConfig(
    vision=VisionConfig(dim=64, n_layers=2, n_heads=4, ff_dim=128, crop_size=112, patch_size=8,
                        overlap_margin=2, max_crops=12, proj_inner_dim=128),
    text=TextConfig(dim=64, n_layers=2, n_heads=4, ff_dim=128, vocab_size=512, max_context=384, rotary_dims=8),
    region=RegionConfig(coord_feat_dim=32, coord_bins=1024, size_feat_dim=64, size_bins=1024, inner_dim=128),
    tokens=SMALL_TOKENS,
)

# Our own small default model (trained by `python -m engine.train`, shipped in assets/model):
# same architecture, 224-px crops of 16-px patches (14×14 grid, 197-token prefix), at most
# 1 global + 4 local crops. 8.21 M parameters = 15.7 MiB in bf16. max_context 512 leaves room for
# the prefix, a prompt and 3 × 100 object slots (max_objects 50 needs ≈ 360 positions).
EMBEDDED = MoondreamConfig(
    vision=VisionConfig(dim=192, n_layers=5, n_heads=3, ff_dim=768, crop_size=224, patch_size=16,
                        overlap_margin=2, max_crops=4, proj_inner_dim=768),
    text=TextConfig(dim=256, n_layers=4, n_heads=8, ff_dim=1024, vocab_size=512, max_context=512, rotary_dims=16),
    region=RegionConfig(coord_feat_dim=64, coord_bins=1024, size_feat_dim=128, size_bins=1024, inner_dim=512),
    tokens=SMALL_TOKENS,
)

PRESETS: dict[str, MoondreamConfig] = {"moondream2": MOONDREAM2, "tiny": TINY, "embedded": EMBEDDED}
