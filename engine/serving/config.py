"""`EngineConfig`: how an engine is sized and scheduled (the model's own shape is
`engine.model.config.MoondreamConfig`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.kernels import GROUP_CHOICES, KERNEL_CHOICES, KernelChoice
from engine.model.config import MoondreamConfig
from engine.serving.limits import MAX_OBJECTS_LIMIT


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 16              # KV rows = the largest decode batch
    max_objects: int = MAX_OBJECTS_LIMIT  # the most objects one request may ask of this engine
    max_len: int | None = None       # KV positions per row; None: the model's context
    pipelined: bool = True           # False: launch → finalize → commit, blocking (the A/B baseline)
    max_queue: int = 1024            # waiting requests before `EngineBusy`
    max_prefill: int = 8             # new images encoded (prefilled) per step
    max_prefill_cached: int = 64     # requests with a cached image prefix prefilled per step (prompt only)
    # A step that prefills runs a second forward beside the decode one. While rows decode, requests
    # on cached images (prompt only) may wait up to `prefill_wait` decode steps for `prefill_gather`
    # of them to go in one step (0: each goes at the next step; nothing waits while no row decodes).
    prefill_wait: int = 2
    prefill_gather: int = 8
    crop_threads: int = 4            # threads making overlap crops (engine.serving.crops)
    device_crops: bool | None = None # resize on the model's device, libvips' pixels (None: on CUDA)
    prefix_cache_size: int = 8       # image prefixes kept on the device after their last request (LRU; 0: none)
    mask_capacity: int = 1024        # grammar mask-table rows on the device (one per distinct allowed set)
    use_graphs: bool | None = None   # CUDA graphs (None: on CUDA)
    kernels: KernelChoice = "auto"   # fused Triton decode kernels or the PyTorch path
    group_prefix: str = "auto"       # fused decode: read an image prefix once per group of its rows
                                     # ("auto": when rows share slots enough, kernels.grouping_pays; "always", "never")
    repeat_guard: bool = True        # end a request at a near-duplicate object (skills.is_duplicate)

    def __post_init__(self) -> None:
        problems = [f"{name} must be a positive whole number, got {getattr(self, name)!r}"
                    for name in ("max_batch", "max_queue", "max_prefill", "max_prefill_cached", "prefill_gather",
                                 "crop_threads", "mask_capacity")
                    if not isinstance(getattr(self, name), int) or getattr(self, name) < 1]
        if not isinstance(self.prefill_wait, int) or self.prefill_wait < 0:
            problems.append(f"prefill_wait must be 0 or more decode steps, got {self.prefill_wait!r}")
        if not 1 <= self.max_objects <= MAX_OBJECTS_LIMIT:
            problems.append(f"max_objects must be between 1 and {MAX_OBJECTS_LIMIT}, got {self.max_objects}")
        if self.prefix_cache_size < 0:
            problems.append(f"prefix_cache_size must be 0 or more, got {self.prefix_cache_size}")
        if self.kernels not in KERNEL_CHOICES:
            problems.append(f"kernels must be one of {', '.join(KERNEL_CHOICES)}, got {self.kernels!r}")
        if self.group_prefix not in GROUP_CHOICES:
            problems.append(f"group_prefix must be one of {', '.join(GROUP_CHOICES)}, got {self.group_prefix!r}")
        if problems:
            raise ValueError("invalid engine config: " + "; ".join(problems))

    def kv_positions(self, model: MoondreamConfig) -> int:
        """KV positions per row: `max_len` if given, else the model's whole context, so a request
        may use up to the context's worth of objects or answer tokens. Each request reserves only
        its own budget (`limits.kv_positions`), and the decode step attends over the batch's
        written positions only (bucketed), so the longer row costs memory, not step time."""
        if self.max_len is not None:
            return self.max_len
        return model.text.max_context

    def prefix_slots(self) -> int:
        """Image-prefix slots on the device (`SharedPrefix`): one per row, since every running
        request may show a different image, plus the cached ones; a new image always finds one."""
        return self.max_batch + self.prefix_cache_size

    def replace(self, **changes) -> EngineConfig:
        return dataclasses.replace(self, **changes)
