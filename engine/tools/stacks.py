"""`StackSampler`: where one thread's time goes, from samples of its Python stack (diagnostics).

A sampling thread reads the target thread's innermost frames every `interval` seconds
(`sys._current_frames`) and counts each distinct chain of its `depth` innermost frames. A frame
blocked in C (waiting for the GPU, a lock, the interpreter lock) shows as the Python line that
called into C. The sampler needs the interpreter lock to look, so a thread that holds it for long
stretches is seen less often there than it is: read the shares as where the thread waits and
works, not as exact times. `engine.loadbench --stacks N` prints the engine thread's top N.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter


class StackSampler:
    def __init__(self, thread_id: int, interval: float = 0.0005, depth: int = 3) -> None:
        self.thread_id, self.interval, self.depth = thread_id, interval, depth
        self.counts: Counter[tuple[str, ...]] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StackSampler:
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """Count the thread's stack as it is now (the sampling thread calls this every `interval`)."""
        frame = sys._current_frames().get(self.thread_id)
        if frame is None:  # the thread has ended
            return
        chain = []
        while frame is not None and len(chain) < self.depth:
            code = frame.f_code
            chain.append(f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}")
            frame = frame.f_back
        self.counts[tuple(chain)] += 1
        self.samples += 1

    def top(self, n: int) -> list[tuple[float, str]]:
        """The `n` most frequent chains: (percent of samples, "inner <- caller <- …")."""
        return [(100.0 * count / self.samples, " <- ".join(chain)) for chain, count in self.counts.most_common(n)]
