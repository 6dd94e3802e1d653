"""The pipeline state machine: two decode slots, at most one forward awaiting finalize, FIFO commits.

Plain Python, no tensors: what may be launched, finalized and committed, and when a slot's
pinned buffers may be reused. A slot cycles

    FREE --launch--> LAUNCHED --finalize--> SAMPLED --commit--> FREE

and is reused only after the commit that read its host buffers (invariant I6 of the
reference design). Steps commit in launch order (I2); only one step may sit launched-but-
unfinalized, because finalize needs the grammar states that the previous commit produced.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum


class SlotState(Enum):
    FREE = "free"
    LAUNCHED = "launched"
    SAMPLED = "sampled"


class PipelineError(RuntimeError):
    """An ordering rule of the pipeline was broken (a bug, never user input)."""


@dataclass
class Step:
    """One forward (prefill or decode) travelling through a slot."""

    index: int
    slot: int
    kind: str  # "prefill" | "decode" | "mixed" (decoding rows and a prefill in one forward pass)
    rows: list[int]  # KV rows active in this step
    batch: int  # rows 0..batch-1 are computed (padding included)


@dataclass
class PipelineState:
    n_slots: int = 2
    slots: list[SlotState] = field(default_factory=list)
    launched: Step | None = None
    sampled: deque[Step] = field(default_factory=deque)
    steps_launched: int = 0

    def __post_init__(self) -> None:
        if self.n_slots != 2:
            raise PipelineError("the pipeline ping-pongs between exactly two slots")
        self.slots = [SlotState.FREE] * self.n_slots

    def free_slot(self) -> int | None:
        for i, s in enumerate(self.slots):
            if s is SlotState.FREE:
                return i
        return None

    def can_launch(self) -> bool:
        return self.launched is None and self.free_slot() is not None

    def launch(self, kind: str, rows: list[int], batch: int) -> Step:
        if not self.can_launch():
            raise PipelineError("launch needs a free slot and no unfinalized forward")
        slot = self.free_slot()
        step = Step(self.steps_launched, slot, kind, rows, batch)
        self.steps_launched += 1
        self.slots[slot] = SlotState.LAUNCHED
        self.launched = step
        return step

    def finalize(self, step: Step) -> None:
        if self.launched is not step:
            raise PipelineError(f"step {step.index} is not the launched step")
        self.slots[step.slot] = SlotState.SAMPLED
        self.launched = None
        self.sampled.append(step)

    def oldest_sampled(self) -> Step | None:
        return self.sampled[0] if self.sampled else None

    def commit(self, step: Step) -> None:
        """Called after the commit has read the step's host buffers: the slot becomes reusable."""
        if not self.sampled or self.sampled[0] is not step:
            raise PipelineError(f"step {step.index} committed out of order")
        self.sampled.popleft()
        self.slots[step.slot] = SlotState.FREE

    @property
    def in_flight(self) -> int:
        return len(self.sampled) + (self.launched is not None)

    def is_idle(self) -> bool:
        return self.in_flight == 0
