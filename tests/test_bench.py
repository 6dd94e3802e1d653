"""`python -m engine.bench` on the tiny preset and the CPU: the table, and a clear one-line error
naming the fix when the two engines do not fit in memory."""

from __future__ import annotations

import json
import re

import pytest
import torch

from engine.tools import bench


def test_bench_tiny_cpu_writes_a_row_per_batch(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--preset", "tiny", "--device", "cpu", "--batch", "1,2", "--objects", "3",
                       "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 2]
    assert all(r["pipelined_ms"] > 0 and r["blocking_ms"] > 0 for r in rows)
    assert "pipelined ms" in capsys.readouterr().out


def test_bench_out_of_memory_names_the_fix_and_the_fix_runs(monkeypatch, tmp_path):
    real = bench.Engine

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")

    monkeypatch.setattr(bench, "Engine", no_memory)
    with pytest.raises(SystemExit) as caught:
        bench.main(["--preset", "tiny", "--device", "cpu", "--batch", "2", "--objects", "3"])
    message = str(caught.value)
    assert "\n" not in message and "out of cpu memory" in message and "Tried to allocate" not in message
    needed = int(re.search(r"--max-len (\d+)", message).group(1))
    monkeypatch.setattr(bench, "Engine", real)  # the suggested row length is enough for the run
    out = tmp_path / "bench.json"
    assert bench.main(["--preset", "tiny", "--device", "cpu", "--batch", "2", "--objects", "3",
                       "--max-len", str(needed), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["max_len"] == needed
