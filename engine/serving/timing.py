"""`StepClock`: where the engine thread's time goes, verb by verb: wall time and the thread's own CPU.

In a verb, wall minus CPU is time the thread waited: for the device (`results` is the wait for a
step's results to reach the host, which a GPU-bound pipeline spends most of its time in) or for
the interpreter lock held by other threads (clients, the HTTP server). What is left of the wall
time between ticks is the serving loop waiting for work. Always on: two clock reads per verb.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

PHASES = ("launch", "results", "commit", "finalize")


class StepClock:
    def __init__(self) -> None:
        self.wall = dict.fromkeys(PHASES, 0.0)   # seconds, summed over ticks
        self.cpu = dict.fromkeys(PHASES, 0.0)    # the engine thread's CPU seconds in the same spans

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.thread_time() - cpu

    def snapshot(self) -> dict[str, tuple[float, float]]:
        """{phase: (wall s, CPU s)} so far; subtract two snapshots for a window."""
        return {name: (self.wall[name], self.cpu[name]) for name in PHASES}
