"""`python -m engine.loadbench` on the CPU (tiny preset): the table, the JSON, and the refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tools import loadbench

ROOT = Path(__file__).resolve().parents[1]


def test_loadbench_tiny_cpu_writes_every_row(tmp_path, capsys):
    out = tmp_path / "lb.json"
    assert loadbench.main(["--preset", "tiny", "--device", "cpu", "--size", "160x120", "--conc", "1,3",
                           "--requests", "2", "--per-client", "1", "--max-objects", "3", "--max-prefill", "2",
                           "--crop-threads", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["max_prefill"], data["crop_threads"], data["max_batch"]) == (2, 1, 3)
    assert [(r["task"], r["image"], r["c"]) for r in data["rows"]] == [
        (t, m, c) for t in ("detect", "point") for m in ("unique", "same") for c in (1, 3)]
    for r in data["rows"]:
        assert r["requests"] == (2 if r["c"] == 1 else 3)
        assert r["req_per_s"] > 0 and r["decode_steps_per_s"] > 0
        # one client: every request is prefilled in a step of its own; three: some may share one
        assert r["prefill_steps_per_request"] == 1.0 if r["c"] == 1 else 1 / 3 <= r["prefill_steps_per_request"] <= 1.0
        assert 0 < r["first_object_mean_ms"] <= r["latency_mean_ms"]
        assert r["latency_p50_ms"] <= r["latency_p90_ms"]
        # the engine thread's verbs fit in its tick; CPU time never exceeds wall time
        verbs = r["engine_ms_per_tick"]
        assert set(verbs) == {"launch", "results", "commit", "finalize"}
        assert all(0 <= cpu <= wall + 0.05 for wall, cpu in verbs.values()) and verbs["launch"][0] > 0
        assert sum(wall for wall, _ in verbs.values()) <= r["tick_ms"] + 1e-6 and r["outside_ms_per_tick"] >= 0
        assert 1 <= r["decode_batch_mean"] <= 3  # the mean batch bucket of the decode forwards (max_batch 3)
        if r["c"] == 1:  # one client: its next request waits for the row just freed, so every decode is 1 row
            assert r["decode_batch_mean"] == 1.0
    printed = capsys.readouterr().out
    assert "req/s" in printed and "engine thread, ms per tick" in printed


def test_loadbench_samples_the_engine_threads_stacks(tmp_path, capsys):
    out = tmp_path / "lb.json"
    assert loadbench.main(["--preset", "tiny", "--device", "cpu", "--size", "96x64", "--tasks", "point",
                           "--modes", "same", "--conc", "2", "--per-client", "2", "--max-objects", "2",
                           "--stacks", "3", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    stacks = row["engine_stacks"]
    assert len(stacks) <= 3 and sum(share for share, _ in stacks) <= 100.0 + 1e-9
    assert all(0 < share <= 100 and where.count(".py:") >= 1 for share, where in stacks)
    assert [share for share, _ in stacks] == sorted((share for share, _ in stacks), reverse=True)


def test_a_stack_sampler_sees_where_a_thread_waits():
    import threading

    from engine.tools.stacks import StackSampler

    parked, release = threading.Event(), threading.Event()

    def parked_here() -> None:
        parked.set()
        release.wait()

    worker = threading.Thread(target=parked_here)
    worker.start()
    parked.wait()
    sampler = StackSampler(worker.ident, depth=4)
    try:
        for _ in range(3):
            sampler.sample()
    finally:
        release.set()
        worker.join()
    places = sampler.top(5)
    assert sampler.samples == 3 and abs(sum(share for share, _ in places) - 100.0) < 1e-9
    assert all("parked_here" in where for _, where in places)  # within `depth` frames of every sample


def test_unique_images_differ_and_same_images_do_not():
    unique = loadbench.ImageSource(8, 4, "unique", 0)
    a, b = unique.next(), unique.next()
    assert (a != b).any() and (a != unique.base).any()
    same = loadbench.ImageSource(8, 4, "same", 0)
    assert same.next() is same.next()


class ShortTarget:
    """Answers every request with fewer objects than asked."""

    def send(self, image, task, max_objects):
        return {"objects": [], "points": []}, None

    def steps(self) -> tuple[int, int]:
        return 0, 0


def test_a_short_answer_voids_the_run():
    with pytest.raises(loadbench.MismatchError, match="returned 0 objects, not 2"):
        loadbench.run_wave(ShortTarget(), loadbench.ImageSource(8, 4, "same", 0), "detect", 2, 1, 2)


class FullTarget(ShortTarget):
    """Answers every request with exactly the objects asked."""

    def send(self, image, task, max_objects):
        return {"objects": [{}] * max_objects, "points": [{}] * max_objects}, None


class ClockTarget(FullTarget):
    """Each request takes 1 unit of a fake clock; reading the engine's counters takes 1000."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def send(self, image, task, max_objects):
        self.clock[0] += 1
        return super().send(image, task, max_objects)

    def engine_times(self):
        self.clock[0] += 1000
        return 0, {}, 0


def test_req_per_s_counts_the_span_of_the_requests_not_the_reads_around_them(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(loadbench.time, "perf_counter", lambda: clock[0])
    raw = loadbench.run_wave(ClockTarget(clock), loadbench.ImageSource(8, 4, "same", 0), "point", 2, 3, 2)
    assert raw["wall"] >= 2000 and 1 <= raw["span"] <= 6   # 6 requests of 1 unit, two clients
    row = loadbench.summarise("point", "same", 2, raw)
    assert row["req_per_s"] == 6 / raw["span"] and row["req_per_s_window"] == 6 / raw["wall"]


def test_think_time_pauses_between_a_clients_requests_only():
    pauses: list[float] = []
    raw = loadbench.run_wave(FullTarget(), loadbench.ImageSource(8, 4, "same", 0), "point", 3, 4, 2,
                             think=0.01, pause=pauses.append)
    assert len(raw["latencies"]) == 12 and len(pauses) == 3 * 3   # none before a client's first request
    assert all(0 <= p <= 0.02 for p in pauses) and len(set(pauses)) > 1
    none: list[float] = []
    loadbench.run_wave(FullTarget(), loadbench.ImageSource(8, 4, "same", 0), "point", 3, 4, 2, pause=none.append)
    assert none == []


def test_bad_options_are_one_clear_line():
    with pytest.raises(SystemExit, match="--size must look like 640x480"):
        loadbench.main(["--preset", "tiny", "--device", "cpu", "--size", "big"])
    with pytest.raises(SystemExit, match="--think-ms must be between 0 and 60000"):
        loadbench.main(["--preset", "tiny", "--device", "cpu", "--think-ms", "-1"])
    with pytest.raises(SystemExit, match="prefill_wait must be 0 or more decode steps, got -1"):
        loadbench.main(["--preset", "tiny", "--device", "cpu", "--prefill-wait", "-1", "--conc", "1"])
    with pytest.raises(SystemExit, match="prefill_gather must be a positive whole number"):
        loadbench.main(["--preset", "tiny", "--device", "cpu", "--prefill-gather", "0", "--conc", "1"])
    with pytest.raises(SystemExit, match="crop_threads must be a positive whole number"):
        loadbench.main(["--preset", "tiny", "--device", "cpu", "--crop-threads", "0", "--conc", "1"])
    with pytest.raises(SystemExit, match="client-processes"):
        loadbench.main(["--preset", "tiny", "--device", "cpu", "--client-processes", "2", "--conc", "1"])


def test_loadbench_drives_the_http_server(tmp_path):
    """--save-checkpoint writes the scenario's model; --url measures `app.serve` serving it."""
    from app.common import open_engine
    from engine.tools.loadbench import main
    from tests.http_server import Server

    ckpt = tmp_path / "scenario"
    assert main(["--device", "cpu", "--preset", "tiny", "--max-objects", "3", "--save-checkpoint", str(ckpt)]) == 0
    engine = open_engine(ckpt, device="cpu", dtype="fp32", max_batch=4, repeat_guard=False).start()
    server = Server(engine)
    try:
        out = tmp_path / "http.json"
        assert main(["--device", "cpu", "--preset", "tiny", "--url", server.url, "--max-objects", "3",
                     "--size", "120x90", "--tasks", "detect", "--conc", "1,2", "--requests", "2", "--per-client", "2",
                     "--json", str(out)]) == 0
        spread = tmp_path / "processes.json"   # the same clients from two processes
        assert main(["--device", "cpu", "--preset", "tiny", "--url", server.url, "--max-objects", "3",
                     "--size", "120x90", "--tasks", "point", "--conc", "3", "--per-client", "2",
                     "--client-processes", "2", "--json", str(spread)]) == 0
    finally:
        server.close()
        engine.close()
    spread = json.loads(spread.read_text())
    assert spread["client_processes"] == 2 and spread["target"].startswith("python -m app.serve")
    assert [(r["image"], r["c"], r["requests"]) for r in spread["rows"]] == [("unique", 3, 6), ("same", 3, 6)]
    assert all(r["req_per_s"] > 0 and r["latency_mean_ms"] > 0 for r in spread["rows"])
    report = json.loads(out.read_text())
    assert report["target"].startswith("python -m app.serve")
    assert [(r["image"], r["c"]) for r in report["rows"]] == [("unique", 1), ("unique", 2), ("same", 1), ("same", 2)]
    assert all(r["req_per_s"] > 0 and r["decode_steps_per_s"] > 0 and r["first_object_mean_ms"] is None
               for r in report["rows"])
    assert [r["prefill_steps_per_request"] for r in report["rows"] if r["c"] == 1] == [1.0, 1.0]  # read from /metrics
    for r in report["rows"]:  # the server's engine thread, timed by the server and read from its /metrics
        verbs = r["engine_ms_per_tick"]
        assert set(verbs) == {"launch", "results", "commit", "finalize"} and r["ticks_per_s"] > 0
        assert all(0 <= cpu and 0 <= wall for wall, cpu in verbs.values())
        assert sum(wall for wall, _ in verbs.values()) <= r["tick_ms"] + 1e-6 and r["decode_batch_mean"] >= 1
        assert r["graphs_captured"] == 0  # the CPU engine holds no CUDA graphs (read from mdpipe_cuda_graphs)
    for r in report["rows"]:  # the server's phases per request (its /metrics), within the client's latency
        phases = r["server_ms_per_request"]
        assert set(phases) == {"body", "submit", "wait", "wake", "reply"} and all(v >= 0 for v in phases.values())
        assert phases["wake"] <= phases["wait"] and r["outside_server_ms_per_request"] >= 0
        # the event loop's CPU is part of the process's, and it cannot be busy longer than the row
        assert 0 < r["server_loop_cpu_ms_per_request"] <= r["server_process_cpu_ms_per_request"]
        assert 0 < r["server_loop_busy"] <= 1.05


def test_the_client_side_loads_neither_torch_nor_the_engine():
    """A client process spawned by `python -m engine.loadbench` imports `engine.loadbench` (as
    `__mp_main__`) and `engine.tools.loadclients`; neither may pull torch in, or every client
    process would spend seconds starting."""
    code = ("import runpy, sys; import engine.tools.loadclients; runpy.run_module('engine.loadbench', run_name='__mp_main__'); "
            "heavy = sorted(m for m in ('torch', 'engine.serving.engine', 'engine.tools.loadbench') if m in sys.modules); "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
