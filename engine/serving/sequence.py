"""One request's life inside the engine.

    WAITING --admit--> RUNNING --EOS / grammar end / cancel / error--> finalized
                                                      │ inflight_refs > 0: a *zombie* rides the
                                                      │ steps already launched; its tokens are ignored
                                                      └ inflight_refs == 0: KV row released (once)
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from engine.serving.skills import ObjectBuilder


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"  # finalized: result (or error) delivered
    RELEASED = "released"  # KV row returned to the pool


@dataclass
class Sequence:
    id: int
    skill: str
    prompt: list[int]
    max_objects: int  # 0 for query/caption
    budget: int  # decode positions the answer may use (limits.answer_budget), reserved at admission
    image_key: str
    picture: object  # the decoded image (PIL), until admission
    crops: Future | None  # its OverlapCrops (engine.serving.crops); None while its prefix is cached
    on_object: Callable[[dict | str], None] | None = None  # each committed object, or text chunk
    make_builder: Callable[[], object] | None = None  # None: ObjectBuilder(skill)
    deadline: float | None = None  # time.monotonic() seconds
    future: Future = field(default_factory=Future)
    status: Status = Status.WAITING
    row: int = -1
    prefix_slot: int = -1  # the shared-prefix slot its row reads the image prefix from (from admission)
    position: int = 0  # next KV position to write; tracks launches, not commits
    end_position: int = 0  # exclusive bound reserved at admission
    state: int = 0  # local grammar state after the last committed token
    automaton: object = None
    mask_rows: object = None  # np.ndarray: grammar state → mask-table row
    inflight_refs: int = 0
    finalized: bool = False
    builder: ObjectBuilder | None = None  # or engine.serving.answers.TextBuilder
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    # Engine-clock times (seconds): submitted, given a KV row (decoding starts), result delivered.
    submitted_at: float = 0.0
    admitted_at: float | None = None
    finished_at: float | None = None

    def can_launch(self) -> bool:
        # A row never has more than two steps in flight (one sampled, one launched).
        return self.status is Status.RUNNING and not self.finalized and self.inflight_refs < 2 \
            and self.position < self.end_position
