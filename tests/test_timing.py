"""StepClock: snapshots taken from another thread count a running span up to the moment they are taken,
so a window's phase time never exceeds the window (the loadbench's `outside` column is never negative)."""

from __future__ import annotations

import threading
import time

from engine.serving.timing import PHASES, StepClock


def test_a_snapshot_counts_the_running_span_and_windows_fit_their_wall_time():
    clock = StepClock()
    inside, release = threading.Event(), threading.Event()

    def engine_thread():
        with clock.phase("launch"):
            inside.set()
            release.wait()
        with clock.phase("commit"):
            pass

    t = threading.Thread(target=engine_thread)
    t.start()
    inside.wait()
    start = time.perf_counter()
    before = clock.snapshot()                     # mid-span: the span so far is in it
    assert before["launch"][0] > 0 and all(before[p] == (0.0, 0.0) for p in PHASES if p != "launch")
    release.set()
    t.join()
    after = clock.snapshot()
    window = time.perf_counter() - start
    spent = {p: (after[p][0] - before[p][0], after[p][1] - before[p][1]) for p in PHASES}
    assert all(wall >= 0 and cpu >= 0 for wall, cpu in spent.values())
    assert sum(wall for wall, _ in spent.values()) <= window
    assert after["commit"][0] > 0 and clock.spans["launch"][2] is None


def test_a_snapshot_after_the_timed_thread_ended_still_reads():
    clock = StepClock()
    t = threading.Thread(target=lambda: clock.phase("results").__enter__())   # a span never closed
    t.start()
    t.join()
    wall, cpu = clock.snapshot()["results"]
    assert wall > 0 and cpu >= 0
