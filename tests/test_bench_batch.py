"""python -m app.bench_batch: times app.batch end to end per mode, parses its speed line, compares results.

CPU only, tiny random checkpoints (tests/conftest.py). The --ray case starts a local Ray cluster in the
app.batch child, like a user's run; without the `ray` extra it fails (app.batch exits 2) rather than skips.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.tools import bench_batch as bench
from app.tools.bench_batch import compare, main, same

ARGS = ["--images", "3", "--size", "64-160", "--max-objects", "2"]


def run_bench(tmp_path: Path, weights: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "bench.json"
    rc = main(["--weights", str(weights), *ARGS, "--workdir", str(tmp_path / "work"), "--out-json", str(out), *extra])
    return rc, json.loads(out.read_text())


def records(out: str) -> list[dict]:
    return [json.loads(line) for line in (Path(out) / "results.jsonl").read_text().splitlines()]


def check_run(run: dict, images: int) -> None:
    assert run["rc"] == 0, run["tail"]
    assert run["images"] == run["app_images"] == images
    assert run["wall_s"] > 0 and run["app_elapsed_s"] >= 0
    assert run["app_images_per_s"] > 0
    assert run["wall_images_per_s"] == pytest.approx(images / run["wall_s"])
    assert run["app_elapsed_s"] <= run["wall_s"] + 0.05  # its clock covers part of the wall clock (printed to 0.1 s)
    assert run["command"][1:3] == ["-m", "app.batch"] and "--quiet" in run["command"]


def test_single_mode_writes_table_and_json(tmp_path, eager_ckpt, capsys):
    rc, info = run_bench(tmp_path, eager_ckpt, "--modes", "single", "--baseline", "1")
    assert rc == 0
    [run] = info["runs"]
    assert run["mode"] == "single" and "--ray" not in run["command"]
    check_run(run, 3)
    check_run(run["baseline"], 1)
    assert run["baseline"]["command"][-2:] == ["--limit", "1"]
    assert info["results_match"] is None and info["ratio_ray_over_single"] == {}
    assert info["device"] == "cpu" and info["images"] == 3 and info["gpu"]
    # three distinct generated images, each annotated (eager weights: every request finds max_objects)
    images = sorted((tmp_path / "work" / "images").glob("img*.jpg"))
    assert len(images) == 3 and len({p.read_bytes() for p in images}) == 3
    recs = records(run["out"])
    assert sorted(r["path"] for r in recs) == [p.name for p in images]
    assert all(len(r["result"]["objects"]) == 2 for r in recs)
    table = capsys.readouterr().out
    assert "wall img/s" in table and "\nsingle       3    0 " in table


def test_failing_child_is_reported(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, info = run_bench(tmp_path, tmp_path / "empty", "--modes", "single")
    assert rc == 1
    assert info["runs"][0]["rc"] == 2 and info["runs"][0]["app_images"] is None
    assert "FAILED: single" in capsys.readouterr().err


def test_compare_flags_differences():
    rec = {"path": "a.jpg", "width": 10, "result": {"objects": [{"x_min": 0.25, "y_min": 0.5}]}}
    moved = json.loads(json.dumps(rec))
    moved["result"]["objects"][0]["x_min"] += 1e-3
    nudged = json.loads(json.dumps(rec))
    nudged["result"]["objects"][0]["x_min"] += 1e-9
    fewer = {**rec, "result": {"objects": []}}
    assert same(rec, json.loads(json.dumps(rec)), 1e-6) and same(rec, nudged, 1e-6)
    assert not same(rec, moved, 1e-6) and not same(rec, fewer, 1e-6)
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1}, 1e-6)  # key order is part of the output
    assert compare({"a.jpg": rec, "b.jpg": rec}, {"a.jpg": moved, "c.jpg": rec}, 1e-6) == ["a.jpg", "b.jpg", "c.jpg"]
    assert compare({"a.jpg": rec}, {"a.jpg": nudged}, 1e-6) == []


def test_single_and_ray_agree(tmp_path, eager_ckpt, capsys):
    rc, info = run_bench(tmp_path, eager_ckpt, "--modes", "single,ray")
    assert rc == 0, [r["tail"] for r in info["runs"]]
    single, ray = info["runs"]
    assert (single["mode"], ray["mode"]) == ("single", "ray")
    check_run(single, 3)
    check_run(ray, 3)
    assert ray["command"][-3:] == ["--ray", "--replicas", "1"]
    assert info["results_match"] is True and info["mismatched"] == []
    assert records(single["out"]) and len(records(ray["out"])) == 3
    assert info["ratio_ray_over_single"]["wall_images_per_s"] == pytest.approx(
        ray["wall_images_per_s"] / single["wall_images_per_s"])
    out = capsys.readouterr().out
    assert "ray/single: " in out and "results: identical" in out


def test_steady_rate_leaves_out_start_up_and_tail():
    # 100 images: the first 10 arrive late (start-up), then one every 0.1 s, then a slow tail.
    times = [5.0] * 10 + [5.0 + 0.1 * i for i in range(1, 81)] + [20.0 + i for i in range(10)]
    assert bench.steady_rate(times, 100) == pytest.approx(80 / 8.0)
    assert bench.steady_rate(times[:50], 100) is None  # the run did not get to its 90th percentile
    assert bench.steady_rate([1.0, 2.0], 2) is None    # too few images to leave anything out
