"""python -m app.batch --ray: the Ray Data path gives the single-process outputs, resumes, reports bad files.

One local Ray session (2 CPUs, small object store, no dashboard) serves the whole module; in-process
runs reuse it, the subprocess run joins it with --address. Ray is a hard requirement here: CI installs
the `ray` extra (pip install -e '.[test,ray]'), and a missing Ray fails this module instead of skipping it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray  # no importorskip: without the extra these tests must fail
from PIL import Image

from app.batch import main
from app.draw import draw_result
from engine.model.image import load_image
from tests import batch_child
from tests.test_batch import OBJECT, ROOT, check_coco, make_folder, picture, read_jsonl, weights  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")  # Ray's own settings

BASE = ["--task", "detect", "--object", OBJECT, "--recursive", "--max-objects", "8", "--quiet"]


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray cluster for this module; yields its GCS address (for --address)."""
    assert not ray.is_initialized()
    context = ray.init(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False,
                       logging_level=logging.WARNING)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def without_timing(records: list[dict]) -> dict[str, dict]:
    by_path = {r["path"]: {k: v for k, v in r.items() if k not in ("ms", "queue_ms")} for r in sorted(records, key=lambda r: r["path"])}
    assert len(by_path) == len(records), "an image was recorded twice"
    return by_path


def assert_same(got, want, where="") -> None:
    """Equal structure, keys in the same order, equal strings/ints; floats equal to float32 precision.

    Floats are not compared bit for bit because the engine itself is not batch-invariant at the
    last float32 bit: box sizes come from torch.exp2 over the batch (engine/region.py
    size_from_bin), whose CPU result for one element depends on its SIMD lane, i.e. on which
    requests share the decode step. Two single-process runs with different --max-batch differ
    the same way.
    """
    if where.endswith("/score"):  # rounded to 4 decimals: a last-bit difference may move the rounding
        assert got == pytest.approx(want, abs=1.1e-4), where
    elif isinstance(got, float) or isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9), where
    elif isinstance(got, dict):
        assert isinstance(want, dict) and list(got) == list(want), where
        for key in got:
            assert_same(got[key], want[key], f"{where}/{key}")
    elif isinstance(got, list):
        assert isinstance(want, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert got == want, where


def assert_same_outputs(got: Path, want: Path) -> list[dict]:
    """results.jsonl (timing aside, any line order) and coco.json of two OUT folders match."""
    records = read_jsonl(got / "results.jsonl")
    assert_same(without_timing(records), without_timing(read_jsonl(want / "results.jsonl")))
    assert_same(json.loads((got / "coco.json").read_text()), json.loads((want / "coco.json").read_text()))
    return records


def summary(text: str) -> list[str]:
    """The printed summary without the speed line and the output paths."""
    return [line for line in text.splitlines() if not line.startswith(("speed:", "wrote:"))]


def test_ray_outputs_match_single_process(tmp_path, weights, ray_address, capsys):
    src = tmp_path / "photos"
    expected = make_folder(src, 10)  # with corrupt.JPG and empty.png
    odd = ["café ☕.png", os.fsdecode(b"latin1-\xe9.png")]  # not valid UTF-8 on disk: travels as bytes
    for i, name in enumerate(odd):
        picture(20 + i).save(src / name)
    (src / os.fsdecode(b"broken-\xff.png")).write_bytes(b"nope")
    bad = ["corrupt.JPG", "empty.png", os.fsdecode(b"broken-\xff.png")]
    expected = sorted(expected + odd + bad[2:])
    common = [str(src), *BASE, "--weights", str(weights), "--draw"]

    assert main([*common, "--out", str(tmp_path / "single")]) == 1
    single_text = capsys.readouterr().out
    assert main([*common, "--out", str(tmp_path / "ray"), "--ray", "--replicas", "2", "--window", "4"]) == 1
    ray_text = capsys.readouterr().out

    records = assert_same_outputs(tmp_path / "ray", tmp_path / "single")
    assert sorted(r["path"] for r in records) == expected
    check_coco(tmp_path / "ray" / "coco.json", records, "detect")
    drawn = sorted(p.relative_to(tmp_path / "ray" / "annotated").as_posix()
                   for p in (tmp_path / "ray" / "annotated").rglob("*") if p.is_file())
    assert drawn == [p for p in expected if p not in bad]
    for rec in records:
        if rec["path"].endswith(".png") and "result" in rec:  # lossless: exactly what draw_result makes
            image = Image.open(tmp_path / "ray" / "annotated" / rec["path"]).convert("RGB")
            assert image.tobytes() == draw_result(load_image(src / rec["path"]), rec["result"], OBJECT).tobytes()

    # A corrupt file is a recorded error, not a crash; named as the single-process path names it.
    by_path = {r["path"]: r for r in records}
    assert by_path["corrupt.JPG"]["error"].startswith(f"cannot read image {str(src / 'corrupt.JPG')!r}")
    assert "file is empty" in by_path["empty.png"]["error"] and by_path["empty.png"]["width"] is None
    assert "corrupt.JPG: cannot read image" in ray_text and "failures: 3 (3 new)" in ray_text
    assert "broken-\\udcff.png: cannot read image" in ray_text
    assert summary(ray_text) == summary(single_text)

    # Nothing left to do: no Ray work, nothing duplicated, the failures are still reported.
    assert main([*common, "--out", str(tmp_path / "ray"), "--ray"]) == 1
    assert "(0 new, 15 already recorded)" in capsys.readouterr().out
    assert read_jsonl(tmp_path / "ray" / "results.jsonl") == records


def test_ray_resumes_after_limit_and_kill(tmp_path, weights, ray_address, capsys):
    src, out = tmp_path / "many", tmp_path / "many-out"
    expected = make_folder(src, 40, broken=False)
    jsonl = out / "results.jsonl"
    args = [str(src), *BASE, "--weights", str(weights), "--out", str(out), "--ray"]

    # 1. --limit: 5 images, the rest left for later.
    assert main([*args, "--limit", "5"]) == 0
    assert "35 left for a later run" in capsys.readouterr().out
    assert len(read_jsonl(jsonl)) == 5

    # 2. A run (a separate driver joining the same cluster) killed mid-way.
    #    It stops itself right after its 4th new record (9 in all) and is killed there.
    proc = batch_child.start(4, [*args, "--address", ray_address, "--window", "1", "--max-batch", "1"], cwd=ROOT)
    proc.kill()
    proc.communicate(timeout=30)
    kept = jsonl.read_bytes()
    assert kept.endswith(b"\n") and len(kept.splitlines()) == 9
    with open(jsonl, "ab") as f:  # and a torn line, as a crash in the middle of a write leaves
        f.write(b'{"path": "img039.jpg", "wid')

    # 3. Resume: every image exactly once, nothing written before the kill lost or rewritten.
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"({40 - len(kept.splitlines())} new, {len(kept.splitlines())} already recorded)" in text
    assert jsonl.read_bytes().startswith(kept)
    records = read_jsonl(jsonl)
    assert sorted(r["path"] for r in records) == expected

    # 4. The same outputs as one uninterrupted single-process run.
    assert main([str(src), *BASE, "--weights", str(weights), "--out", str(tmp_path / "single")]) == 0
    capsys.readouterr()
    assert_same_outputs(out, tmp_path / "single")


@pytest.mark.parametrize("task", [["--task", "query", "--question", "What colour is the circle?", "--schema",
                                   json.dumps({"type": "object", "properties": {"colour": {"enum": ["red", "blue"]}},
                                               "required": ["colour"]})],
                                  ["--task", "caption", "--length", "short", "--max-tokens", "5"]])
def test_ray_query_and_caption_match_single_process(tmp_path, weights, ray_address, capsys, task):
    src = tmp_path / "photos"
    expected = make_folder(src, 4)  # with corrupt.JPG and empty.png
    common = [str(src), *task, "--recursive", "--quiet", "--weights", str(weights)]
    assert main([*common, "--out", str(tmp_path / "single")]) == 1
    single_text = capsys.readouterr().out
    assert main([*common, "--out", str(tmp_path / "ray"), "--ray", "--window", "2"]) == 1
    assert summary(capsys.readouterr().out) == summary(single_text)
    records = read_jsonl(tmp_path / "ray" / "results.jsonl")
    assert without_timing(records) == without_timing(read_jsonl(tmp_path / "single" / "results.jsonl"))
    assert sorted(r["path"] for r in records) == expected
    answers = [r["result"] for r in records if "result" in r]
    assert len(answers) == 4 and not (tmp_path / "ray" / "coco.json").exists()
    if task[1] == "query":
        assert all(a["answer"]["colour"] in ("red", "blue") for a in answers)  # the parsed JSON value
        # A regex no image can satisfy fails the run with the engine's one line, records nothing.
        assert main([str(src), "--task", "query", "--question", "Is it?", "--regex", "(unclosed", "--quiet",
                     "--weights", str(weights), "--out", str(tmp_path / "bad"), "--ray"]) == 2
        err = capsys.readouterr().err.splitlines()[-1]
        assert err.startswith("error: cannot use this answer format: ") and "Traceback" not in err
        assert read_jsonl(tmp_path / "bad" / "results.jsonl") == []
    else:
        assert all(isinstance(a["caption"], str) for a in answers)


def test_ray_stays_optional(tmp_path, weights, monkeypatch, capsys):
    pyproject = (ROOT / "pyproject.toml").read_text()  # (tomllib is 3.11+; the project supports 3.10)
    assert '\nray = ["ray[data,serve]>=2.40"]\n' in pyproject.split("[project.optional-dependencies]", 1)[1]
    assert "ray" not in pyproject.split("\ndependencies = [", 1)[1].split("]", 1)[0]

    src = tmp_path / "imgs"
    make_folder(src, 2, broken=False)
    args = [str(src), *BASE, "--weights", str(weights), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as info:  # the Ray options need --ray
        main([*args, "--replicas", "2"])
    assert info.value.code == 2

    # Without Ray installed, --ray is a usage error that names the extra.
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main([*args, "--ray"]) == 2
    assert "pip install -e .[ray]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

    # The default path never imports Ray.
    code = ("import sys; from app.batch import main; rc = main(sys.argv[1:]); "
            "assert not any(m == 'ray' or m.startswith('ray.') for m in sys.modules), 'ray imported'; sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert len(read_jsonl(tmp_path / "out" / "results.jsonl")) == 2
