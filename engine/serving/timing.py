"""`StepClock`: where the engine thread's time goes, verb by verb: wall time and the thread's own CPU.

In a verb, wall minus CPU is time the thread waited: for the device (`results` is the wait for a
step's results to reach the host, which a GPU-bound pipeline spends most of its time in) or for
the interpreter lock held by other threads (clients, the HTTP server). What is left of the wall
time between ticks is the serving loop waiting for work. Always on: two clock reads per verb.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

PHASES = ("launch", "results", "commit", "finalize")


class StepClock:
    def __init__(self) -> None:
        # per phase: (wall s, CPU s) summed over finished spans, and the running span's start (wall, CPU)
        # or None; one tuple, replaced whole, so that another thread's snapshot never sees a span both
        # summed and running
        self.spans: dict[str, tuple[float, float, tuple[float, float] | None]] = dict.fromkeys(PHASES, (0.0, 0.0, None))
        self.cpu_clock: int | None = None   # the timed thread's CPU clock, readable from other threads

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.cpu_clock is None:
            self.cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        wall, cpu = time.perf_counter(), time.thread_time()
        done_wall, done_cpu, _ = self.spans[name]
        self.spans[name] = (done_wall, done_cpu, (wall, cpu))
        try:
            yield
        finally:
            self.spans[name] = (done_wall + time.perf_counter() - wall, done_cpu + time.thread_time() - cpu, None)

    def snapshot(self) -> dict[str, tuple[float, float]]:
        """{phase: (wall s, CPU s)} so far, a running span's time up to now included, so that the
        difference of two snapshots is the time spent in each phase between them."""
        now, out = time.perf_counter(), {}
        for name in PHASES:
            wall, cpu, running = self.spans[name]
            if running is not None:
                try:
                    cpu += time.clock_gettime(self.cpu_clock) - running[1]
                except OSError:   # the thread ended just now (its span with it)
                    pass
                wall += now - running[0]
            out[name] = (wall, cpu)
        return out
